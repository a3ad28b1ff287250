//! A metrics-server stand-in: `metrics.k8s.io/v1beta1` (`NodeMetrics`, `PodMetrics`), what
//! `kubectl top` reads.
//!
//! The real metrics-server cannot run here (no Go, no images from a registry), so the fixture
//! does its job the way it does it: every `resolution` it scrapes each Node's
//! `/metrics/resource` — through the fixture's own `nodes/{name}/proxy` (so the node agent
//! sees the API server's kubelet client, as with `kubectl get --raw`) — keeps the last two
//! points of every node and container, and serves rates from them: CPU is the counter's
//! increase over the time between the two points' timestamps (the window), memory the last
//! working set. A container whose start time changed or whose counter went back starts over
//! (no rate until its second point). A pod is served once every container it reported has a
//! rate, as metrics-server does. Not done: label selectors on the metrics lists,
//! metrics-server's `--metric-resolution` jitter and its stale-point expiry (a node or pod that
//! stops reporting keeps its last rates until the next scrape drops it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::error::ApiError;

/// One reading of a cumulative CPU counter and a working set, with the scrape's timestamps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Cumulative CPU time, seconds.
    pub cpu_seconds: f64,
    /// The CPU sample's timestamp, milliseconds since the epoch.
    pub cpu_ms: i64,
    pub memory_bytes: f64,
    pub memory_ms: i64,
    /// Containers only: `container_start_time_seconds`.
    pub start_time: Option<f64>,
}

/// What one scrape of a node's `/metrics/resource` gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    pub node: Option<Point>,
    pub containers: BTreeMap<ContainerKey, Point>,
}

/// (namespace, pod, container).
pub type ContainerKey = (String, String, String);

/// One sample line of the Prometheus text format.
struct Line<'a> {
    name: &'a str,
    labels: BTreeMap<String, String>,
    value: f64,
    timestamp: Option<i64>,
}

fn parse_line(line: &str) -> Option<Line<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, rest) = match line.find('{') {
        Some(i) => (&line[..i], &line[i..]),
        None => {
            let i = line.find(' ')?;
            (&line[..i], &line[i..])
        }
    };
    let mut labels = BTreeMap::new();
    let rest = if let Some(body) = rest.strip_prefix('{') {
        // key="value" pairs; values may hold escaped quotes.
        let mut chars = body.char_indices().peekable();
        let mut end = None;
        let mut key = String::new();
        while let Some((i, c)) = chars.next() {
            match c {
                '}' => {
                    end = Some(i);
                    break;
                }
                ',' | ' ' => {}
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        let (_, c) = chars.next()?;
                        match c {
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                other => value.push(other),
                            },
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), value);
                }
                c => key.push(c),
            }
        }
        &body[end? + 1..]
    } else {
        rest
    };
    let mut fields = rest.split_whitespace();
    let value = match fields.next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let timestamp = fields.next().and_then(|t| t.parse().ok());
    Some(Line {
        name,
        labels,
        value,
        timestamp,
    })
}

/// The points of one `/metrics/resource` body (what metrics-server's decoder keeps).
pub fn parse_resource_metrics(text: &str) -> Scrape {
    #[derive(Default)]
    struct Partial {
        cpu: Option<(f64, i64)>,
        memory: Option<(f64, i64)>,
        start: Option<f64>,
    }
    let mut node = Partial::default();
    let mut containers: BTreeMap<ContainerKey, Partial> = BTreeMap::new();
    for Line {
        name,
        labels,
        value,
        timestamp: ts,
    } in text.lines().filter_map(parse_line)
    {
        let container = || {
            (
                labels.get("namespace").cloned().unwrap_or_default(),
                labels.get("pod").cloned().unwrap_or_default(),
                labels.get("container").cloned().unwrap_or_default(),
            )
        };
        match name {
            "node_cpu_usage_seconds_total" => node.cpu = Some((value, ts.unwrap_or(0))),
            "node_memory_working_set_bytes" => node.memory = Some((value, ts.unwrap_or(0))),
            "container_cpu_usage_seconds_total" => {
                containers.entry(container()).or_default().cpu = Some((value, ts.unwrap_or(0)));
            }
            "container_memory_working_set_bytes" => {
                containers.entry(container()).or_default().memory = Some((value, ts.unwrap_or(0)));
            }
            "container_start_time_seconds" => {
                containers.entry(container()).or_default().start = Some(value);
            }
            _ => {}
        }
    }
    let point = |p: &Partial| {
        let (cpu_seconds, cpu_ms) = p.cpu?;
        let (memory_bytes, memory_ms) = p.memory?;
        Some(Point {
            cpu_seconds,
            cpu_ms,
            memory_bytes,
            memory_ms,
            start_time: p.start,
        })
    };
    Scrape {
        node: point(&node),
        containers: containers
            .iter()
            .filter_map(|(k, p)| Some((k.clone(), point(p)?)))
            .collect(),
    }
}

/// A rate from two points: (nanocores, bytes, timestamp ms, window ms); `None` when the second
/// is not later, the counter went back or the container restarted.
pub fn rate(prev: &Point, last: &Point) -> Option<(u64, u64, i64, i64)> {
    let window = last.cpu_ms - prev.cpu_ms;
    if window <= 0 || last.cpu_seconds < prev.cpu_seconds || prev.start_time != last.start_time {
        return None;
    }
    let nanocores = (last.cpu_seconds - prev.cpu_seconds) * 1e9 / (window as f64 / 1e3);
    Some((
        nanocores.round() as u64,
        last.memory_bytes.max(0.0) as u64,
        last.cpu_ms.max(last.memory_ms),
        window,
    ))
}

/// A CPU quantity in nanocores as `resource.NewScaledQuantity(v, -9).String()` prints it
/// (`5m`, `123456n`, `2`).
pub fn cpu_quantity(nanocores: u64) -> String {
    for (scale, suffix) in [(1_000_000_000, ""), (1_000_000, "m"), (1_000, "u")] {
        if nanocores.is_multiple_of(scale) {
            return format!("{}{suffix}", nanocores / scale);
        }
    }
    format!("{nanocores}n")
}

/// Bytes as `resource.NewQuantity(v, BinarySI).String()` prints them (`12Mi`, `12345`).
pub fn memory_quantity(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    let mut value = bytes;
    for suffix in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
        if !value.is_multiple_of(1024) || suffix == "Ei" {
            return format!("{value}{suffix}");
        }
        value /= 1024;
    }
    format!("{bytes}")
}

/// Go's `time.Duration.String()` for a whole number of milliseconds (`15.03s`, `1m0.5s`).
pub fn go_duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let (minutes, rest) = (ms / 60_000, ms % 60_000);
    let seconds = format!("{}.{:03}", rest / 1000, rest % 1000);
    let seconds = seconds.trim_end_matches('0').trim_end_matches('.');
    if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| {
            jiff::Timestamp::from_second(t.as_second())
                .unwrap_or(t)
                .to_string()
        })
        .unwrap_or_default()
}

/// The last two points of everything scraped, by node.
#[derive(Debug, Default)]
pub struct MetricsStore {
    nodes: Mutex<BTreeMap<String, NodeHistory>>,
}

/// The previous and the last point.
type LastTwo = (Option<Point>, Option<Point>);

#[derive(Debug, Default, Clone)]
struct NodeHistory {
    node: LastTwo,
    containers: BTreeMap<ContainerKey, LastTwo>,
}

/// A container's rate: name, nanocores, bytes, timestamp ms, window ms.
struct ContainerRate {
    name: String,
    cpu: u64,
    memory: u64,
    at: i64,
    window: i64,
}

impl MetricsStore {
    /// Keeps a node's new scrape; containers it no longer reports are dropped.
    pub fn record(&self, node: &str, scrape: Scrape) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let history = nodes.entry(node.to_string()).or_default();
        if let Some(p) = scrape.node {
            history.node = (history.node.1, Some(p));
        }
        let mut containers = BTreeMap::new();
        for (key, point) in scrape.containers {
            let prev = history.containers.get(&key).and_then(|(_, last)| *last);
            containers.insert(key, (prev, Some(point)));
        }
        history.containers = containers;
    }

    /// Forgets nodes that are not in `names` (deleted Nodes).
    pub fn retain(&self, names: &[String]) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.retain(|n, _| names.contains(n));
    }

    /// `NodeMetrics` items (without kind/apiVersion, as in a list) of the nodes with a rate.
    pub fn node_metrics(&self, labels: &dyn Fn(&str) -> Value) -> Vec<Value> {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes
            .iter()
            .filter_map(|(name, h)| {
                let (cpu, memory, at, window) = rate(h.node.0.as_ref()?, h.node.1.as_ref()?)?;
                Some(json!({
                    "metadata": {"name": name, "creationTimestamp": rfc3339(at), "labels": labels(name)},
                    "timestamp": rfc3339(at),
                    "window": go_duration(window),
                    "usage": {"cpu": cpu_quantity(cpu), "memory": memory_quantity(memory)},
                }))
            })
            .collect()
    }

    /// `PodMetrics` items of the pods (in `namespace`, or all) whose every container has a rate.
    pub fn pod_metrics(
        &self,
        namespace: Option<&str>,
        labels: &dyn Fn(&str, &str) -> Value,
    ) -> Vec<Value> {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let mut pods: BTreeMap<(String, String), Vec<Option<ContainerRate>>> = BTreeMap::new();
        for h in nodes.values() {
            for ((ns, pod, container), (prev, last)) in &h.containers {
                if namespace.is_some_and(|want| want != ns) {
                    continue;
                }
                let rated = prev
                    .as_ref()
                    .zip(last.as_ref())
                    .and_then(|(p, l)| rate(p, l))
                    .map(|(cpu, memory, at, window)| ContainerRate {
                        name: container.clone(),
                        cpu,
                        memory,
                        at,
                        window,
                    });
                pods.entry((ns.clone(), pod.clone()))
                    .or_default()
                    .push(rated);
            }
        }
        pods.into_iter()
            .filter_map(|((ns, pod), containers)| {
                let containers: Vec<_> = containers.into_iter().collect::<Option<Vec<_>>>()?;
                let at = containers.iter().map(|c| c.at).max()?;
                let window = containers.iter().map(|c| c.window).max()?;
                Some(json!({
                    "metadata": {"name": pod, "namespace": ns, "creationTimestamp": rfc3339(at), "labels": labels(&ns, &pod)},
                    "timestamp": rfc3339(at),
                    "window": go_duration(window),
                    "containers": containers.iter().map(|c| json!({
                        "name": c.name,
                        "usage": {"cpu": cpu_quantity(c.cpu), "memory": memory_quantity(c.memory)},
                    })).collect::<Vec<_>>(),
                }))
            })
            .collect()
    }
}

/// Scrapes every Node through `{fixture}/api/v1/nodes/{name}/proxy/metrics/resource` every
/// `resolution`, until `cancel`.
pub async fn scrape_loop(
    fixture_url: String,
    store: Arc<crate::store::Store>,
    metrics: Arc<MetricsStore>,
    resolution: Duration,
    cancel: tokio_util::sync::CancellationToken,
) {
    let client = reqwest::Client::builder()
        .timeout(resolution.max(Duration::from_secs(5)))
        .build();
    let Ok(client) = client else {
        tracing::warn!("metrics stand-in: no HTTP client");
        return;
    };
    loop {
        let names = node_names(&store);
        metrics.retain(&names);
        for name in names {
            let url = format!("{fixture_url}/api/v1/nodes/{name}/proxy/metrics/resource");
            match client.get(&url).send().await {
                Ok(r) if r.status().is_success() => match r.text().await {
                    Ok(text) => metrics.record(&name, parse_resource_metrics(&text)),
                    Err(e) => tracing::debug!(%url, error = %e, "metrics stand-in: reading"),
                },
                Ok(r) => tracing::debug!(%url, status = %r.status(), "metrics stand-in: scrape"),
                Err(e) => tracing::debug!(%url, error = %e, "metrics stand-in: scrape"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(resolution) => {}
            _ = cancel.cancelled() => return,
        }
    }
}

fn node_names(store: &crate::store::Store) -> Vec<String> {
    let Some(nodes) = crate::resource::find_by_plural("", "v1", "nodes") else {
        return Vec::new();
    };
    store
        .list(nodes, None, &Default::default(), &Default::default())
        .0
        .iter()
        .filter_map(|n| n.pointer("/metadata/name")?.as_str().map(String::from))
        .collect()
}

/// The labels of a stored object (`{}` when it has none or is gone).
pub fn object_labels(
    store: &crate::store::Store,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> Value {
    crate::resource::find_by_plural("", "v1", plural)
        .and_then(|rt| store.get(rt, namespace, name).ok())
        .and_then(|o| o.pointer("/metadata/labels").cloned())
        .unwrap_or_else(|| json!({}))
}

/// `nodemetrics.metrics.k8s.io "x" not found` and its pod twin.
pub fn not_found(resource: &str, name: &str) -> ApiError {
    ApiError {
        code: 404,
        reason: "NotFound",
        message: format!("{resource}.metrics.k8s.io \"{name}\" not found"),
        details: Some(json!({"name": name, "group": "metrics.k8s.io", "kind": resource})),
    }
}

/// The discovery list of `metrics.k8s.io/v1beta1`.
pub fn resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "metrics.k8s.io/v1beta1",
        "resources": [
            {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]},
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 1.5 1000
container_cpu_usage_seconds_total{container="side \"x\"",namespace="default",pod="web"} 2 1000
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 1.048576e+07 1000
container_memory_working_set_bytes{container="side \"x\"",namespace="default",pod="web"} 4096 1000
container_start_time_seconds{container="app",namespace="default",pod="web"} 1.7e+09
node_cpu_usage_seconds_total 100 1000
node_memory_working_set_bytes 2.147483648e+09 1000
resource_scrape_error 0
"#;

    #[test]
    fn parses_the_kubelets_resource_metrics() {
        let scrape = parse_resource_metrics(SCRAPE);
        assert_eq!(
            scrape.node,
            Some(Point {
                cpu_seconds: 100.0,
                cpu_ms: 1000,
                memory_bytes: 2147483648.0,
                memory_ms: 1000,
                start_time: None,
            })
        );
        let app = &scrape.containers[&("default".into(), "web".into(), "app".into())];
        assert_eq!(app.memory_bytes, 10485760.0);
        assert_eq!(app.start_time, Some(1.7e9));
        assert!(scrape.containers.contains_key(&(
            "default".into(),
            "web".into(),
            "side \"x\"".into()
        )));
    }

    #[test]
    fn rates_from_two_scrapes_and_quantities_as_metrics_server_prints_them() {
        let store = MetricsStore::default();
        store.record("n1", parse_resource_metrics(SCRAPE));
        assert!(
            store.node_metrics(&|_| json!({})).is_empty(),
            "one point: no rate"
        );
        let later = SCRAPE
            .replace(" 1000\n", " 11000\n")
            .replace(
                "node_cpu_usage_seconds_total 100",
                "node_cpu_usage_seconds_total 105",
            )
            .replace("pod=\"web\"} 1.5", "pod=\"web\"} 1.6");
        store.record("n1", parse_resource_metrics(&later));
        let nodes = store.node_metrics(&|_| json!({"a": "b"}));
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0]["usage"]["cpu"], "500m");
        assert_eq!(nodes[0]["usage"]["memory"], "2Gi");
        assert_eq!(nodes[0]["window"], "10s");
        assert_eq!(nodes[0]["metadata"]["labels"]["a"], "b");
        let pods = store.pod_metrics(Some("default"), &|_, _| json!({}));
        assert_eq!(pods.len(), 1, "{pods:?}");
        let containers = pods[0]["containers"].as_array().unwrap();
        assert_eq!(containers[0]["name"], "app");
        assert_eq!(containers[0]["usage"]["cpu"], "10m");
        assert_eq!(containers[0]["usage"]["memory"], "10Mi");
        assert_eq!(containers[1]["usage"]["cpu"], "0");
        assert_eq!(containers[1]["usage"]["memory"], "4Ki");
        assert!(store
            .pod_metrics(Some("other"), &|_, _| json!({}))
            .is_empty());
        // A restarted container (new start time) has no rate: its pod waits.
        store.record(
            "n1",
            parse_resource_metrics(
                &later
                    .replace("1.7e+09", "1.8e+09")
                    .replace(" 11000\n", " 21000\n"),
            ),
        );
        assert!(store.pod_metrics(None, &|_, _| json!({})).is_empty());
        store.retain(&[]);
        assert!(store.node_metrics(&|_| json!({})).is_empty());
    }

    #[test]
    fn formats() {
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(5_000_000), "5m");
        assert_eq!(cpu_quantity(123_000), "123u");
        assert_eq!(cpu_quantity(123_456), "123456n");
        assert_eq!(memory_quantity(0), "0");
        assert_eq!(memory_quantity(12345), "12345");
        assert_eq!(memory_quantity(3 << 20), "3Mi");
        assert_eq!(memory_quantity(1536), "1536");
        assert_eq!(go_duration(15_030), "15.03s");
        assert_eq!(go_duration(10_000), "10s");
        assert_eq!(go_duration(60_500), "1m0.5s");
    }
}
