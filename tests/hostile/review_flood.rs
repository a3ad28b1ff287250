//! A network client floods the kubelet port with made-up bearer tokens (issue 40). Each
//! uncached token costs a TokenReview at the API server; nodelet caps those in flight, and
//! before this test the cap was one pool for everyone: the flood took every slot and
//! Prometheus, whose token needs a review again whenever its cache entry expires, got 429.
//! Now one client address holds at most two review slots and rejected tokens live in a cache
//! of their own, so the other clients' scrapes go on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use nodelet_testkit::port::free_port;
use nodelet_testkit::tail;

/// How long the valid client reads while the flood goes on.
const SCRAPING: Duration = Duration::from_secs(30);

/// A real API server's ServiceAccount token (its own ClusterRole: `get` on `nodes/metrics`)
/// reads `/metrics/resource` every second for 30 s from 127.0.0.1, while 16 tasks from
/// 127.0.0.2 send made-up tokens as fast as nodelet answers. The token cache lives 3 s
/// (`authentication.webhook.cacheTTL`), so the valid token is reviewed again about ten times
/// under the flood. Every read of the valid client succeeds; the flood gets 401s and 429s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_tokens_leaves_a_valid_scraper_alone() {
    let server = RealServer::start("review-flood");
    let port = free_port();
    let n = Nodelet::start_in_real_cluster(
        "review_flood",
        &server,
        &format!(
            "port: {port}\n\
             authentication:\n  anonymous: {{enabled: false}}\n  webhook: {{enabled: true, cacheTTL: 3s}}\n\
             authorization:\n  mode: Webhook\n"
        ),
    );
    // The scraper's identity: a ServiceAccount allowed nodes/metrics, as metrics-server's is.
    let namespace = server.namespace();
    let role = format!("{namespace}-scraper");
    server.kubectl_ok(&["create", "serviceaccount", "scraper"]);
    server.kubectl_ok(&[
        "create",
        "clusterrole",
        &role,
        "--verb=get",
        "--resource=nodes/metrics",
    ]);
    server.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &role,
        &format!("--clusterrole={role}"),
        &format!("--serviceaccount={namespace}:scraper"),
    ]);
    struct Cleanup<'a>(&'a RealServer, String);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            let _ = self.0.kubectl(&["delete", "clusterrolebinding", &self.1]);
            let _ = self.0.kubectl(&["delete", "clusterrole", &self.1]);
        }
    }
    let _cleanup = Cleanup(&server, role.clone());
    let token = server
        .kubectl_ok(&["create", "token", "scraper", "--duration=1h"])
        .trim()
        .to_string();
    let url = format!("https://127.0.0.1:{port}/metrics/resource");

    // The positive sign: the scraper's read succeeds before the flood (RBAC may take a moment).
    let scraper = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let read = |client: &reqwest::Client| {
        client
            .get(&url)
            .header("Authorization", format!("Bearer {token}"))
            .send()
    };
    let ready_by = Instant::now() + Duration::from_secs(120);
    loop {
        match read(&scraper).await {
            Ok(r) if r.status() == 200 => break,
            other => {
                assert!(
                    Instant::now() < ready_by,
                    "the scraper is never allowed: {:?}\n{}",
                    other.map(|r| r.status()),
                    tail(&n.logs(), 30)
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let (refused, unauthorized, other) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let flood: Vec<_> = (0..16)
        .map(|task| {
            let (stop, refused, unauthorized, other, url) = (
                stop.clone(),
                refused.clone(),
                unauthorized.clone(),
                other.clone(),
                url.clone(),
            );
            tokio::spawn(async move {
                let client = reqwest::Client::builder()
                    .danger_accept_invalid_certs(true)
                    .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
                    .timeout(Duration::from_secs(10))
                    .build()
                    .expect("flood client");
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let made_up = format!("made-up-{task}-{i}-{}", std::process::id());
                    let counter = match client
                        .get(&url)
                        .header("Authorization", format!("Bearer {made_up}"))
                        .send()
                        .await
                    {
                        Ok(r) if r.status() == 429 => &refused,
                        Ok(r) if r.status() == 401 => &unauthorized,
                        _ => &other,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    let mut reads = Vec::new();
    let started = Instant::now();
    while started.elapsed() < SCRAPING {
        let asked = Instant::now();
        let outcome = match read(&scraper).await {
            Ok(r) => r.status().as_u16(),
            Err(e) => {
                println!("scrape error: {e}");
                0
            }
        };
        reads.push((outcome, asked.elapsed()));
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(asked.elapsed())).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        task.await.expect("flood task");
    }
    let slowest = reads
        .iter()
        .map(|(_, took)| *took)
        .max()
        .unwrap_or_default();
    println!(
        "scraper: {} reads, statuses {:?}, the slowest {slowest:?}; flood: {} answered 401, {} \
         answered 429, {} other",
        reads.len(),
        reads.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        unauthorized.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
    );
    assert!(reads.len() >= 20, "{reads:?}");
    assert!(
        reads.iter().all(|(status, _)| *status == 200),
        "a scrape failed under the flood: {reads:?}\n{}",
        tail(&n.logs(), 30)
    );
    // The flood did reach the API server's reviews and their cap.
    assert!(
        unauthorized.load(Ordering::Relaxed) > 100,
        "the flood was barely answered"
    );
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "the flood never met the per-client cap"
    );
    assert_no_runtime_stalls(&n).await;
}
