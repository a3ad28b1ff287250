//! The status page with 110 pods (the kubelet's default `maxPods`): how long nodelet takes to
//! render it and a real browser to load it. Measured, never asserted.
//!
//! As root with the test containerd up (`eval "$(scripts/test-env.sh up)"`):
//!
//! ```sh
//! cargo bench --bench status_page          # release build of nodelet
//! cargo test --bench status_page           # the same against the debug build (slower nodelet)
//! ```
//!
//! Starts nodelet with 110 static pods (testbox sleeping, no probes), waits until `/pods` shows
//! them all Running and the history has two samples, then loads `/` five times with `reqwest`
//! (nodelet's own render time, from the page's `Server-Timing` header) and five times in
//! headless Chromium (navigation timing: until the response ended, until the load event), and
//! prints the medians and the page's size.

#[path = "../tests/common/browser.rs"]
mod browser;
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use nodelet_testkit::pod::all_running;
use nodelet_testkit::tail;

const PODS: usize = 110;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; nothing to filter here.
    let mut n = Nodelet::prepare_with("status-page-bench", "");
    for i in 0..PODS {
        n.write_manifest(
            &format!("p{i:03}.yaml"),
            &testbox_pod(&format!("p{i:03}"), "Always", &[("app", &["sleep"])]),
        );
    }
    let started = Instant::now();
    n.launch();
    let deadline = started + Duration::from_secs(900);
    loop {
        let running = n
            .pods()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|p| all_running(p))
            .count();
        if running == PODS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{running} of {PODS} pods running after 15 minutes\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!(
        "{PODS} pods running after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let page = format!("{}/", n.base_url());
    let client = reqwest::Client::new();
    // Two samples, so the charts have lines.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let html = client
            .get(&page)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if html.contains("<figure id=\"chart-memory\" data-samples=\"")
            && !html.contains("data-samples=\"0\"")
            && !html.contains("data-samples=\"1\"")
        {
            break;
        }
        assert!(Instant::now() < deadline, "no two samples in 2 minutes");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    let mut render = Vec::new();
    let mut fetch = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let r = client.get(&page).send().await.unwrap();
        let timing = r
            .headers()
            .get("server-timing")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("render;dur="))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("Server-Timing: render;dur=...");
        let body = r.text().await.unwrap();
        fetch.push(t.elapsed().as_secs_f64() * 1000.0);
        render.push(timing);
        size = body.len();
        assert!(body.matches("<tr class=\"pod\"").count() >= PODS);
    }
    let browser = browser::Browser::start(1400, 2400).await;
    let mut response = Vec::new();
    let mut load = Vec::new();
    for _ in 0..5 {
        let (r, l) = browser::load(&browser.client, &page).await;
        response.push(r);
        load.push(l);
    }
    browser.close().await;
    println!(
        "status page with {PODS} pods: {size} bytes; nodelet render median {:.1} ms (all {render:.1?}); \
         HTTP fetch median {:.1} ms; Chromium response median {:.1} ms, load event median {:.1} ms (all {load:.1?})",
        median(render.clone()),
        median(fetch),
        median(response),
        median(load.clone()),
    );
}
