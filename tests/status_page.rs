//! The status page in a real browser, `/metrics/resource` and `nodelet top`, on the real
//! nodelet with pods on the real containerd. One set of pods serves every check:
//!
//! - `web`: serves HTTP, ready through an HTTP readiness probe;
//! - `notready`: serves HTTP but its readiness probe asks a path that answers 404;
//! - `crash`: exits with code 3 a second after it starts (CrashLoopBackOff);
//! - `job`: exits 0 once (Completed).
//!
//! Chromium (headless, through chromedriver) loads `/`: the pods table shows the pods and
//! statuses `/pods` has (as `nodelet pods` prints them), the crash-looping container its
//! restarts and `Error (exit code 3)`, the failing readiness probe its message, the memory
//! chart a line of at least two points, a restart marker once a restart happened between two
//! samples; nothing was loaded from elsewhere. A screenshot goes to
//! `$CARGO_TARGET_TMPDIR/status-page.png`; the page's load time is printed, not asserted.

#[path = "common/browser.rs"]
mod browser;
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use fantoccini::Locator;
use k8s_openapi::api::core::v1::Pod;
use nodelet::stats::summary::Summary;
use nodelet_testkit::pod::{all_running, container_status, phase, restart_count};
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(120);

fn manifests(n: &Nodelet) {
    let probe = |path: &str| {
        format!(
            "    readinessProbe:\n      httpGet: {{path: {path}, port: 8080}}\n      periodSeconds: 1\n"
        )
    };
    let server = |name: &str, path: &str| {
        format!(
            "{}{}",
            testbox_pod(name, "Always", &[("app", &["serve", "--http", "8080"])]),
            probe(path)
        )
    };
    n.write_manifest("web.yaml", &server("web", "/healthz"));
    n.write_manifest("notready.yaml", &server("notready", "/nope"));
    n.write_manifest(
        "crash.yaml",
        &testbox_pod(
            "crash",
            "Always",
            &[("app", &["exit", "--code", "3", "--after", "1s"])],
        ),
    );
    n.write_manifest(
        "job.yaml",
        &testbox_pod("job", "Never", &[("main", &["exit", "--code", "0"])]),
    );
}

async fn get_text(url: &str) -> String {
    let r = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(r.status(), 200, "GET {url}");
    r.text().await.unwrap()
}

async fn summary(base: &str) -> Summary {
    let text = get_text(&format!("{base}/stats/summary?only_cpu_and_memory=true")).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("summary: {e}\n{text}"))
}

/// (READY, STATUS) by `namespace/name`, as `nodelet pods` prints them from `/pods`.
fn expected_rows(pods: &[Pod]) -> BTreeMap<String, (String, String)> {
    let now = jiff::Timestamp::now();
    pods.iter()
        .map(|p| {
            let [ready, status, _, _] = nodelet::status::printer::pod_cells(p, now);
            (
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default()
                ),
                (ready, status),
            )
        })
        .collect()
}

/// (READY, STATUS) by `namespace/name` as the browser shows the pods table.
async fn page_rows(client: &fantoccini::Client) -> BTreeMap<String, (String, String)> {
    let mut rows = BTreeMap::new();
    for row in client.find_all(Locator::Css("tr.pod")).await.unwrap() {
        let key = row.attr("data-pod").await.unwrap().unwrap_or_default();
        let cell = |class: &'static str| {
            let row = row.clone();
            async move {
                row.find(Locator::Css(&format!("td.{class}")))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap()
            }
        };
        rows.insert(key, (cell("ready").await, cell("status").await));
    }
    rows
}

/// A container's cell (`td.<class>`) in the page's container table of a pod.
async fn container_cell(
    client: &fantoccini::Client,
    pod: &str,
    container: &str,
    class: &str,
) -> String {
    let css =
        format!("tr.containers[data-pod=\"{pod}\"] tr[data-container=\"{container}\"] td.{class}");
    client
        .find(Locator::Css(&css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// The most points of a `<polyline>` in a chart (its series; the threshold and markers have 2).
async fn chart_points(client: &fantoccini::Client, chart: &str) -> u64 {
    client
        .execute(
            "return Math.max(0, ...Array.from(document.querySelectorAll(arguments[0] + ' polyline'))\
             .map(p => p.points.length));",
            vec![serde_json::json!(format!("#chart-{chart}"))],
        )
        .await
        .unwrap()
        .as_u64()
        .unwrap_or(0)
}

/// `nodelet top` agrees with two Summary reads taken around it: each number lies between what
/// the two reads give (rounded as kubectl rounds), give or take one unit of rounding. (The CPU
/// rates move once a second, when the eviction manager reads; a reading that moved twice
/// between the two is retried by the caller.)
fn check_top_against(
    before: &Summary,
    top: &str,
    after: &Summary,
    node: &str,
) -> Result<(), String> {
    use nodelet::stats::top::pod_usage;
    let bounds = |name: &str| {
        let usage = |s: &Summary| {
            s.pods
                .iter()
                .find(|p| p.pod_ref.name == name)
                .and_then(pod_usage)
                .unwrap_or_else(|| panic!("{name} has no usage in {s:#?}"))
        };
        let (a, b) = (usage(before), usage(after));
        let milli = |n: u64| n.div_ceil(1_000_000);
        let mib = |b: u64| b / (1024 * 1024);
        (
            (milli(a.0.min(b.0)), milli(a.0.max(b.0))),
            (mib(a.1.min(b.1)), mib(a.1.max(b.1))),
        )
    };
    let lines: Vec<&str> = top.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "CPU(cores)", "MEMORY(bytes)"],
        "{top}"
    );
    for pod in ["web", "notready"] {
        let name = format!("{pod}-{node}");
        let line = lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{name} not in nodelet top:\n{top}"));
        let cells: Vec<&str> = line.split_whitespace().collect();
        let cpu: u64 = cells[1].strip_suffix('m').unwrap().parse().unwrap();
        let memory: u64 = cells[2].strip_suffix("Mi").unwrap().parse().unwrap();
        let ((cpu_lo, cpu_hi), (mem_lo, mem_hi)) = bounds(&name);
        if !(cpu + 1 >= cpu_lo && cpu <= cpu_hi + 1) {
            return Err(format!(
                "{name}: nodelet top {cpu}m, summary {cpu_lo}m..{cpu_hi}m\n{top}"
            ));
        }
        if !(memory + 1 >= mem_lo && memory <= mem_hi + 1) {
            return Err(format!(
                "{name}: nodelet top {memory}Mi, summary {mem_lo}Mi..{mem_hi}Mi\n{top}"
            ));
        }
    }
    Ok(())
}

/// `/metrics/resource` agrees with the Summary read right after it: every running container
/// and pod has its samples, the working sets within 10% (the same provider, read twice), the
/// CPU counters never ahead of the later read.
fn check_resource_metrics(text: &str, after: &Summary, node: &str) {
    assert!(text.contains("\nresource_scrape_error 0\n"), "{text}");
    assert!(
        text.contains("# TYPE node_cpu_usage_seconds_total counter\n"),
        "{text}"
    );
    let value = |line_start: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(line_start))
            .unwrap_or_else(|| panic!("no {line_start} in\n{text}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let name = format!("web-{node}");
    let pod = after.pods.iter().find(|p| p.pod_ref.name == name).unwrap();
    let app = pod.containers.iter().find(|c| c.name == "app").unwrap();
    let labels = format!("{{container=\"app\",namespace=\"default\",pod=\"{name}\"}}");
    let ws = value(&format!("container_memory_working_set_bytes{labels}"));
    let want = app.memory.as_ref().unwrap().working_set_bytes.unwrap() as f64;
    assert!(
        (ws - want).abs() <= want * 0.1,
        "working set {ws} vs summary {want}"
    );
    let cpu = value(&format!("container_cpu_usage_seconds_total{labels}"));
    let later = app.cpu.as_ref().unwrap().usage_core_nano_seconds.unwrap() as f64 / 1e9;
    assert!(
        cpu > 0.0 && cpu <= later,
        "cpu {cpu} s vs summary {later} s"
    );
    let start = value(&format!("container_start_time_seconds{labels}"));
    assert!((start - app.start_time.0.as_second() as f64).abs() < 1.0);
    let node_ws = value("node_memory_working_set_bytes ");
    assert!(node_ws > 0.0);
    assert!(
        value(&format!(
            "pod_memory_working_set_bytes{{namespace=\"default\",pod=\"{name}\"}}"
        )) > 0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_in_a_browser_metrics_resource_and_nodelet_top() {
    let mut n = Nodelet::prepare_with("status-page", "");
    manifests(&n);
    n.launch();
    let base = n.base_url();
    let node = n.node.clone();
    n.wait_pod("web", T, "web ready", |p| {
        container_status(p, "app").is_some_and(|c| c.ready)
    })
    .await;
    n.wait_pod("job", T, "job completed", |p| phase(p) == "Succeeded")
        .await;
    n.wait_pod("crash", T, "two restarts", |p| restart_count(p, "app") >= 2)
        .await;
    n.wait_pod("notready", T, "notready running", all_running)
        .await;

    // nodelet top between two Summary reads.
    let mut misses = Vec::new();
    for _ in 0..5 {
        let before = summary(&base).await;
        let (ok, top, err) = n.cli(&["top", "--server", &base]);
        assert!(ok, "nodelet top: {err}");
        let after = summary(&base).await;
        match check_top_against(&before, &top, &after, &node) {
            Ok(()) => break,
            Err(miss) => misses.push(miss),
        }
    }
    assert!(
        misses.len() < 5,
        "nodelet top never matched /stats/summary: {misses:#?}"
    );
    let (ok, top_node, err) = n.cli(&["top", "node", "--server", &base]);
    assert!(ok, "nodelet top node: {err}");
    assert!(top_node.starts_with("NAME"), "{top_node}");
    let row: Vec<&str> = top_node
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row[0], node, "{top_node}");
    assert!(
        row[1].ends_with('m')
            && row[2].ends_with('%')
            && row[3].ends_with("Mi")
            && row[4].ends_with('%'),
        "{top_node}"
    );

    // /metrics/resource from the same provider.
    let metrics = get_text(&format!("{base}/metrics/resource")).await;
    let after = summary(&base).await;
    check_resource_metrics(&metrics, &after, &node);

    // The page in Chromium.
    let browser = browser::Browser::start(1400, 2400).await;
    let client = &browser.client;
    let page = format!("{base}/");
    // The pods and their statuses as /pods has them, read before and after the page: a crash
    // loop moves between Error and CrashLoopBackOff, so compare when /pods held still.
    let mut matched = false;
    let mut timings = Vec::new();
    for _ in 0..10 {
        let first = expected_rows(&n.pods().await.unwrap());
        timings.push(browser::load(client, &page).await);
        let shown = page_rows(client).await;
        let second = expected_rows(&n.pods().await.unwrap());
        if first != second {
            continue;
        }
        assert_eq!(shown, first, "the page's pods table differs from /pods");
        assert_eq!(shown.len(), 4, "{shown:?}");
        matched = true;
        break;
    }
    assert!(matched, "/pods never held still across a page load");
    let crash = format!("default/crash-{node}");
    let restarts: i32 = container_cell(client, &crash, "app", "restarts")
        .await
        .parse()
        .unwrap();
    assert!(restarts >= 2, "crash restarts {restarts}");
    let last = container_cell(client, &crash, "app", "last-termination").await;
    assert!(last.starts_with("Error (exit code 3)"), "{last}");
    let probes = container_cell(client, &format!("default/notready-{node}"), "app", "probes").await;
    assert!(probes.contains("readiness: not ready"), "{probes}");
    assert!(
        probes.contains("Readiness probe failed: HTTP probe failed with statuscode: 404"),
        "{probes}"
    );
    assert_eq!(
        container_cell(client, &format!("default/web-{node}"), "app", "ready").await,
        "true"
    );
    let conditions: Vec<String> = {
        let mut v = Vec::new();
        for c in client
            .find_all(Locator::Css("#conditions tr[data-condition]"))
            .await
            .unwrap()
        {
            v.push(c.attr("data-condition").await.unwrap().unwrap_or_default());
        }
        v
    };
    for want in ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"] {
        assert!(conditions.iter().any(|c| c == want), "{conditions:?}");
    }

    // The charts: two samples make a line; a restart between two samples makes a marker.
    let deadline = Instant::now() + T;
    loop {
        let points = chart_points(client, "memory").await;
        let marker = client
            .find_all(Locator::Css("#markers tr.marker-Restarted"))
            .await
            .unwrap()
            .len();
        if points >= 2 && marker > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "memory chart points {points}, restart markers {marker}\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        timings.push(browser::load(client, &page).await);
    }
    assert!(chart_points(client, "pods").await >= 2);
    // One document, nothing else fetched.
    let resources = client
        .execute(
            "return performance.getEntriesByType('resource').map(r => r.name);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        resources,
        serde_json::json!([]),
        "the page loaded other resources"
    );

    let png = client.screenshot().await.expect("screenshot");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    std::fs::write(&path, &png).unwrap();
    let html = get_text(&page).await;
    println!(
        "status page: {} pods, {} bytes; screenshot {}; browser timings (response, load) ms: {:?}",
        n.pods().await.unwrap().len(),
        html.len(),
        path.display(),
        timings
    );
    browser.close().await;
}
