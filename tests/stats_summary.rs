//! `/stats/summary` on the real node: the real nodelet against the real containerd, real
//! containers holding real memory, numbers checked against the cgroup files themselves.
//!
//! This host's memory controller is on cgroup v1 (see ENVIRONMENT.md), so the container and pod
//! numbers here come from nodelet's small v1 reader; the v2 files are checked in unit tests on
//! fake trees and in the VM scenario.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use nodelet::stats::cgroup::{CgroupReader, CgroupVersion};
use nodelet::stats::summary::{ContainerStats, PodStats, Summary};
use nodelet_testkit::pod::{all_running, container_status};
use nodelet_testkit::port::free_port;
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(90);
const MOUNT: &str = "/sys/fs/cgroup";

async fn get_summary(url: &str) -> Summary {
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let response = client
        .get(url)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status();
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}\n{body}"))
}

fn pod<'a>(summary: &'a Summary, name: &str) -> &'a PodStats {
    summary
        .pods
        .iter()
        .find(|p| p.pod_ref.name == name)
        .unwrap_or_else(|| panic!("pod {name} not in the summary: {summary:#?}"))
}

fn container<'a>(pod: &'a PodStats, name: &str) -> &'a ContainerStats {
    pod.containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("container {name} not in {pod:#?}"))
}

fn container_id(p: &k8s_openapi::api::core::v1::Pod, name: &str) -> String {
    container_status(p, name)
        .and_then(|c| c.container_id.clone())
        .and_then(|id| id.split_once("://").map(|(_, id)| id.to_string()))
        .unwrap_or_else(|| panic!("no container ID for {name}"))
}

/// The working set of a cgroup as its own files say, read here independently of nodelet:
/// usage less inactive file pages.
fn working_set_from_files(version: CgroupVersion, relative: &str) -> u64 {
    let read =
        |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let stat_value = |stat: &str, key: &str| {
        stat.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    match version {
        CgroupVersion::V1 => {
            let dir = Path::new(MOUNT).join("memory").join(relative);
            let usage: u64 = read(dir.join("memory.usage_in_bytes"))
                .trim()
                .parse()
                .unwrap();
            usage.saturating_sub(stat_value(
                &read(dir.join("memory.stat")),
                "total_inactive_file",
            ))
        }
        CgroupVersion::V2 => {
            let dir = Path::new(MOUNT).join(relative);
            let usage: u64 = read(dir.join("memory.current")).trim().parse().unwrap();
            usage.saturating_sub(stat_value(&read(dir.join("memory.stat")), "inactive_file"))
        }
    }
}

fn within(got: u64, want: u64, percent: u64, what: &str) {
    let diff = got.abs_diff(want);
    assert!(
        diff * 100 <= want * percent,
        "{what}: {got} vs {want} from the cgroup files (more than {percent}% apart)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_has_the_node_and_every_pod_and_container_with_real_numbers() {
    let version = CgroupReader::detect(Path::new(MOUNT)).version();
    let kubelet_port = free_port();
    let n = Nodelet::start_with(
        "stats-summary",
        &format!(
            "port: {kubelet_port}\nauthentication:\n  anonymous:\n    enabled: true\nauthorization:\n  mode: AlwaysAllow\n"
        ),
    );
    // Two containers, one holding 48 MiB of touched memory; and a second pod.
    n.write_manifest(
        "two.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: two\nspec:\n  containers:\n  \
             - name: hog\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [alloc, --mib, \"48\", --hold]\n  \
             - name: web\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve, --http, \"8080\"]\n    resources:\n      limits: {{memory: 64Mi}}\n"
        ),
    );
    // One container and an emptyDir an init container wrote a file into.
    n.write_manifest(
        "one.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: one\nspec:\n  volumes:\n  - name: data\n    emptyDir: {{}}\n  \
             initContainers:\n  - name: fill\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    \
             args: [write, --path, /data/file, --content, hello]\n    volumeMounts:\n    - {{name: data, mountPath: /data}}\n  \
             containers:\n  - name: sleeper\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [sleep]\n    \
             volumeMounts:\n    - {{name: data, mountPath: /data}}\n"
        ),
    );
    let two = n.wait_pod("two", T, "two running", all_running).await;
    let one = n.wait_pod("one", T, "one running", all_running).await;
    let two_uid = two.metadata.uid.clone().unwrap();
    let hog_id = container_id(&two, "hog");
    let url = format!("{}/stats/summary", n.base_url());

    // The hog reports its allocation once it has made it: wait for the summary to show it.
    let deadline = std::time::Instant::now() + T;
    let first = loop {
        let s = get_summary(&url).await;
        let ready = s
            .pods
            .iter()
            .find(|p| p.pod_ref.name == n.pod_name("two"))
            .and_then(|p| p.containers.iter().find(|c| c.name == "hog"))
            .and_then(|c| c.memory.as_ref()?.working_set_bytes)
            .is_some_and(|ws| ws >= 48 << 20);
        // ...and pod one's container has written its file into the emptyDir (a loaded run read
        // the volume between the directory's creation and the write).
        let written = s
            .pods
            .iter()
            .find(|p| p.pod_ref.name == n.pod_name("one"))
            .and_then(|p| p.volume_stats.iter().find(|v| v.name == "data"))
            .and_then(|v| v.fs.inodes_used)
            .is_some_and(|inodes| inodes >= 2);
        if ready && written {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hog's 48 MiB or pod one's file never showed: {s:#?}\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // A second sample more than a second later gives rates.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let summary = get_summary(&url).await;

    // The node.
    let node = &summary.node;
    assert_eq!(node.node_name, n.node);
    let meminfo = nodelet::stats::node::read_meminfo(Path::new("/proc")).unwrap();
    let memory = node.memory.as_ref().expect("node memory");
    let ws = memory.working_set_bytes.expect("node working set");
    assert!(
        ws > 48 << 20 && ws <= meminfo.mem_total,
        "node working set {ws}"
    );
    assert_eq!(memory.available_bytes, Some(meminfo.mem_total - ws));
    let cpu = node.cpu.as_ref().expect("node cpu");
    assert!(cpu.usage_core_nano_seconds.unwrap() > 0);
    assert!(
        cpu.usage_nano_cores.is_some(),
        "node rate on the second request: {cpu:?}"
    );
    assert_eq!(
        cpu.psi.is_some(),
        Path::new("/proc/pressure/cpu").exists(),
        "node cpu PSI from /proc/pressure"
    );
    let rlimit = node.rlimit.as_ref().expect("rlimit");
    assert!(
        rlimit.maxpid.unwrap() > 0 && rlimit.curproc.unwrap() > 3,
        "{rlimit:?}"
    );
    let fs = node.fs.as_ref().expect("node fs");
    assert!(fs.capacity_bytes.unwrap() >= fs.used_bytes.unwrap());
    let image_fs = node
        .runtime
        .as_ref()
        .and_then(|r| r.image_fs.as_ref())
        .expect("image fs");
    assert!(image_fs.used_bytes.unwrap() > 0, "{image_fs:?}");
    assert!(image_fs.capacity_bytes.unwrap() > image_fs.used_bytes.unwrap());
    assert!(node.start_time.0 < jiff::Timestamp::now(), "boot time");
    let pods_container = node
        .system_containers
        .iter()
        .find(|c| c.name == "pods")
        .expect("the pods system container (kubepods)");
    assert!(
        pods_container
            .memory
            .as_ref()
            .unwrap()
            .working_set_bytes
            .unwrap()
            >= 48 << 20
    );

    // Every pod of this node and only those, every container of each.
    let mut names: Vec<&str> = summary
        .pods
        .iter()
        .map(|p| p.pod_ref.name.as_str())
        .collect();
    names.sort();
    let (one_name, two_name) = (n.pod_name("one"), n.pod_name("two"));
    assert_eq!(names, vec![one_name.as_str(), two_name.as_str()]);
    let p2 = pod(&summary, &two_name);
    assert_eq!(p2.pod_ref.uid, two_uid);
    assert_eq!(p2.pod_ref.namespace, "default");
    let mut cnames: Vec<&str> = p2.containers.iter().map(|c| c.name.as_str()).collect();
    cnames.sort();
    assert_eq!(cnames, vec!["hog", "web"]);
    assert_eq!(pod(&summary, &one_name).containers.len(), 1);
    let p1 = pod(&summary, &one_name);
    assert_eq!(p1.pod_ref.uid, one.metadata.uid.clone().unwrap());
    let data = p1
        .volume_stats
        .iter()
        .find(|v| v.name == "data")
        .unwrap_or_else(|| panic!("emptyDir data not in {:?}", p1.volume_stats));
    assert_eq!(data.fs.inodes_used, Some(2), "the directory and the file");
    let p1_ephemeral = p1.ephemeral_storage.as_ref().expect("ephemeral storage");
    assert!(p1_ephemeral.used_bytes.unwrap() >= data.fs.used_bytes.unwrap());

    let hog = container(p2, "hog");
    let hog_memory = hog.memory.as_ref().unwrap();
    let hog_cgroup = format!("kubepods/burstable/pod{two_uid}/{hog_id}");
    within(
        hog_memory.working_set_bytes.unwrap(),
        working_set_from_files(version, &hog_cgroup),
        10,
        "hog working set",
    );
    assert!(hog_memory.rss_bytes.unwrap() >= 48 << 20, "{hog_memory:?}");
    assert!(hog_memory.page_faults.unwrap() > 0);
    assert_eq!(hog_memory.available_bytes, None, "no limit");
    let web_memory = container(p2, "web").memory.as_ref().unwrap();
    assert_eq!(
        web_memory.available_bytes,
        Some((64 << 20) - web_memory.working_set_bytes.unwrap()),
        "64Mi limit"
    );
    let hog_cpu = hog.cpu.as_ref().unwrap();
    assert!(hog_cpu.usage_core_nano_seconds.unwrap() > 0);
    assert!(
        hog_cpu.usage_nano_cores.is_some(),
        "second sample: {hog_cpu:?}"
    );
    let logs = hog.logs.as_ref().expect("log stats");
    assert!(
        logs.inodes_used.unwrap() >= 2,
        "directory and log file: {logs:?}"
    );
    let rootfs = hog
        .rootfs
        .as_ref()
        .expect("writable layer from ListContainerStats");
    assert!(rootfs.capacity_bytes.unwrap() > 0, "{rootfs:?}");

    // The pod's own cgroup holds both containers and the sandbox.
    let pod_memory = p2.memory.as_ref().unwrap();
    within(
        pod_memory.working_set_bytes.unwrap(),
        working_set_from_files(version, &format!("kubepods/burstable/pod{two_uid}")),
        10,
        "pod working set",
    );
    assert!(pod_memory.working_set_bytes.unwrap() >= hog_memory.working_set_bytes.unwrap());
    let tasks = p2.process_stats.as_ref().unwrap().process_count.unwrap();
    assert!(tasks >= 3, "pause, hog and web: {tasks}");
    let ephemeral = p2.ephemeral_storage.as_ref().expect("ephemeral storage");
    assert!(ephemeral.used_bytes.unwrap() >= logs.used_bytes.unwrap());
    assert!(p2.start_time.0 <= jiff::Timestamp::now());
    assert_eq!(first.pods.len(), 2);

    // Only CPU and memory, as metrics-server asks.
    let small = get_summary(&format!("{url}?only_cpu_and_memory=true")).await;
    assert!(small.node.fs.is_none() && small.node.rlimit.is_none());
    let hog_small = container(pod(&small, &two_name), "hog");
    assert!(hog_small.memory.is_some() && hog_small.logs.is_none() && hog_small.rootfs.is_none());

    // The same on the authenticated kubelet API (nodes/stats; AlwaysAllow here).
    let secure = get_summary(&format!("https://127.0.0.1:{kubelet_port}/stats/summary")).await;
    assert_eq!(secure.node.node_name, n.node);
    assert_eq!(secure.pods.len(), 2);

    // A removed pod leaves the summary.
    n.remove_manifest("one.yaml");
    n.wait_gone("one", T).await;
    let after = get_summary(&url).await;
    let names: Vec<&str> = after.pods.iter().map(|p| p.pod_ref.name.as_str()).collect();
    assert_eq!(names, vec![two_name.as_str()]);
    n.remove_manifest("two.yaml");
    n.wait_gone("two", T).await;
}

/// One scrape of a Prometheus endpoint on the kubelet API, parsed by `prometheus-parse`.
async fn scrape(url: &str) -> (String, prometheus_parse::Scrape) {
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let response = client
        .get(url)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status();
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "GET {url}: {body}");
    let parsed = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .unwrap_or_else(|e| panic!("{url}: {e}\n{body}"));
    (body, parsed)
}

/// The one sample of `metric` whose labels include all of `labels`.
fn sample<'a>(
    scrape: &'a prometheus_parse::Scrape,
    metric: &str,
    labels: &[(&str, &str)],
) -> &'a prometheus_parse::Sample {
    let found: Vec<_> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{metric} {labels:?}: {found:#?}\namong {:#?}",
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == metric)
            .collect::<Vec<_>>()
    );
    found[0]
}

fn number(s: &prometheus_parse::Sample) -> f64 {
    match s.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{}: not a number: {other:?}", s.metric),
    }
}

/// What cluster tooling scrapes from the kubelet API: cAdvisor's series agree with
/// `/stats/summary` for a running container, the prober's per-container series count a probe
/// that ran, and `/configz` shows what the file set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cadvisor_probe_metrics_and_configz_on_the_kubelet_api() {
    let kubelet_port = free_port();
    let n = Nodelet::start_with(
        "scrape-endpoints",
        &format!(
            "port: {kubelet_port}\nmaxPods: 42\nauthentication:\n  anonymous:\n    enabled: true\nauthorization:\n  mode: AlwaysAllow\n"
        ),
    );
    n.write_manifest(
        "scraped.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: scraped\nspec:\n  containers:\n  \
             - name: hog\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [alloc, --mib, \"32\", --hold]\n  \
             - name: web\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve, --http, \"8080\"]\n    \
             resources:\n      limits: {{memory: 64Mi, cpu: 500m}}\n    \
             readinessProbe:\n      httpGet:\n        path: /healthz\n        port: 8080\n      periodSeconds: 1\n"
        ),
    );
    let p = n
        .wait_pod("scraped", T, "running and ready", |p| {
            all_running(p) && nodelet_testkit::pod::is_ready(p)
        })
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let pod_name = n.pod_name("scraped");
    let hog_id = container_id(&p, "hog");
    let base = format!("https://127.0.0.1:{kubelet_port}");
    let of = |container: &'static str| {
        [
            ("container", container),
            ("pod", pod_name.as_str()),
            ("namespace", "default"),
        ]
    };

    // Wait for the hog's allocation, as `/stats/summary` shows it.
    let summary_url = format!("{}/stats/summary", n.base_url());
    let deadline = std::time::Instant::now() + T;
    loop {
        let s = get_summary(&summary_url).await;
        let ws = s
            .pods
            .iter()
            .find(|p| p.pod_ref.name == pod_name)
            .and_then(|p| p.containers.iter().find(|c| c.name == "hog"))
            .and_then(|c| c.memory.as_ref()?.working_set_bytes);
        if ws.is_some_and(|ws| ws >= 32 << 20) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hog's 32 MiB never showed: {s:#?}\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let (text, first) = scrape(&format!("{base}/metrics/cadvisor")).await;
    let summary = get_summary(&summary_url).await;
    assert!(
        text.contains("# TYPE container_cpu_usage_seconds_total counter\n"),
        "{text}"
    );
    assert!(text.contains("\ncontainer_scrape_error 0\n"), "{text}");
    // The same containers in both, with the runtime's ID, the cgroup path and the image.
    let hog = sample(&first, "container_memory_working_set_bytes", &of("hog"));
    assert_eq!(hog.labels.get("name"), Some(hog_id.as_str()));
    assert!(
        hog.labels
            .get("id")
            .is_some_and(|id| id.starts_with('/') && id.contains(&hog_id)),
        "{hog:?}"
    );
    assert_eq!(hog.labels.get("image"), Some(TESTBOX));
    let summary_hog = container(pod(&summary, &pod_name), "hog");
    within(
        number(hog) as u64,
        summary_hog
            .memory
            .as_ref()
            .unwrap()
            .working_set_bytes
            .unwrap(),
        10,
        "cadvisor hog working set vs /stats/summary",
    );
    assert!(number(sample(&first, "container_memory_rss", &of("hog"))) >= (32 << 20) as f64);
    let web_limit = sample(&first, "container_spec_memory_limit_bytes", &of("web"));
    assert_eq!(number(web_limit), (64 << 20) as f64);
    assert_eq!(
        number(sample(
            &first,
            "container_spec_memory_limit_bytes",
            &of("hog")
        )),
        0.0,
        "no limit"
    );
    // 500m: a 50 ms quota per 100 ms period, and shares from the request.
    assert_eq!(
        number(sample(&first, "container_spec_cpu_quota", &of("web"))),
        50_000.0
    );
    assert_eq!(
        number(sample(&first, "container_spec_cpu_period", &of("web"))),
        100_000.0
    );
    assert!(number(sample(&first, "container_spec_cpu_shares", &of("web"))) > 2.0);
    assert!(
        !first
            .samples
            .iter()
            .any(|s| s.metric == "container_spec_cpu_quota"
                && s.labels.get("container") == Some("hog")),
        "no quota without a CPU limit"
    );
    let start = number(sample(&first, "container_start_time_seconds", &of("web")));
    // The container's creation, as `/stats/summary` gives it (there in whole seconds).
    let summary_start = container(pod(&summary, &pod_name), "web").start_time.0;
    assert_eq!(start.floor() as i64, summary_start.as_second(), "{start}");
    // The pod's own cgroup, labelled with the pod but no container.
    let pod_ws = sample(
        &first,
        "container_memory_working_set_bytes",
        &[("container", ""), ("pod", pod_name.as_str()), ("image", "")],
    );
    assert!(
        pod_ws.labels.get("id").is_some_and(|id| id.contains(&uid)),
        "{pod_ws:?}"
    );
    assert!(number(pod_ws) >= number(hog));
    // The pod's network on its cgroup: the readiness probe's requests came in.
    let received: Vec<_> = first
        .samples
        .iter()
        .filter(|s| {
            s.metric == "container_network_receive_bytes_total"
                && s.labels.get("pod") == Some(pod_name.as_str())
                && s.labels.get("container") == Some("")
        })
        .collect();
    assert!(
        !received.is_empty()
            && received
                .iter()
                .all(|s| s.labels.get("interface").is_some_and(|i| i != "lo")),
        "{received:#?}"
    );
    assert!(received.iter().any(|s| number(s) > 0.0), "{received:#?}");
    // The writable layer, on a block device.
    let fs = sample(&first, "container_fs_usage_bytes", &of("web"));
    assert!(
        fs.labels.get("device").is_some_and(|d| !d.is_empty()),
        "{fs:?}"
    );
    assert!(number(sample(&first, "container_fs_limit_bytes", &of("web"))) > number(fs));

    // CPU counters never go back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, second) = scrape(&format!("{base}/metrics/cadvisor")).await;
    for c in ["hog", "web"] {
        let before = number(sample(&first, "container_cpu_usage_seconds_total", &of(c)));
        let after = number(sample(&second, "container_cpu_usage_seconds_total", &of(c)));
        assert!(after >= before && after > 0.0, "{c}: {before} then {after}");
    }

    // The readiness probe ran and succeeded: counted per container, its duration observed.
    let (text, probes) = scrape(&format!("{base}/metrics/probes")).await;
    assert!(text.contains("# TYPE prober_probe counter\n"), "{text}");
    assert!(
        text.contains(
            "# HELP prober_probe_duration_seconds Duration in seconds for a probe response.\n"
        ),
        "the kubelet's help text: {text}"
    );
    let ok = sample(
        &probes,
        "prober_probe_total",
        &[
            ("probe_type", "Readiness"),
            ("result", "successful"),
            ("container", "web"),
            ("pod", pod_name.as_str()),
            ("namespace", "default"),
            ("pod_uid", uid.as_str()),
        ],
    );
    assert!(number(ok) >= 1.0, "{ok:?}");
    let duration = sample(
        &probes,
        "prober_probe_duration_seconds",
        &[
            ("probe_type", "Readiness"),
            ("container", "web"),
            ("pod", pod_name.as_str()),
        ],
    );
    let prometheus_parse::Value::Histogram(buckets) = &duration.value else {
        panic!("not a histogram: {duration:?}");
    };
    let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
    assert_eq!(
        bounds,
        vec![
            0.005,
            0.01,
            0.025,
            0.05,
            0.1,
            0.25,
            0.5,
            1.0,
            2.5,
            5.0,
            10.0,
            f64::INFINITY
        ]
    );
    assert!(buckets.last().unwrap().count >= 1.0, "{buckets:?}");

    // /configz: the kubelet's shape, with what the file set.
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let configz: serde_json::Value = client
        .get(format!("{base}/configz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let k = &configz["kubeletconfig"];
    assert_eq!(k["maxPods"], 42, "{configz}");
    assert_eq!(k["port"], kubelet_port, "{configz}");
    assert_eq!(k["authorization"]["mode"], "AlwaysAllow", "{configz}");

    n.remove_manifest("scraped.yaml");
    n.wait_gone("scraped", T).await;
    // The probe's series go with its worker.
    let (text, _) = scrape(&format!("{base}/metrics/probes")).await;
    assert!(!text.contains(&uid), "{text}");
}
