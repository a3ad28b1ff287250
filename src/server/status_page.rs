//! The status page (`GET /` on the read-only API): one self-contained HTML page — no script,
//! no stylesheet, font or icon from elsewhere (the icon is an empty `data:` URL, so the browser
//! does not ask for `/favicon.ico`), the charts inline SVG — that an operator on the node
//! opens in a browser to see what nodelet is doing. It reloads itself every
//! [`REFRESH_SECONDS`].
//!
//! - the node: its conditions (Ready, MemoryPressure, DiskPressure, PIDPressure) as nodelet
//!   reports them, in standalone mode too;
//! - charts of the last hour ([`crate::server::history`]): memory available with the eviction
//!   thresholds, PSI, CPU, pods; markers where a pod was evicted or a container restarted;
//! - the pods as `nodelet pods` prints them, each with its containers: state, readiness,
//!   restarts, the last termination's reason and exit code, the probes it has and their last
//!   failure;
//! - the recent events, newest first.
//!
//! Also `GET /node`: the Node object nodelet reports (in standalone mode, the one it would
//! register), which `nodelet top node` reads its allocatable from.
//!
//! [`render`] is a pure function of [`PageInputs`]; the handler gathers them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Event, NodeStatus, Pod};

use crate::events::table::event_cells;
use crate::server::history::{History, MarkerKind, Snapshot};
use crate::status::printer::pod_cells;

/// The page reloads itself this often.
pub const REFRESH_SECONDS: u32 = 10;
/// The most events listed.
pub const MAX_EVENTS: usize = 50;
/// The most markers listed under the charts.
pub const MAX_MARKERS: usize = 20;

/// What the page is made of.
#[derive(Clone)]
pub struct StatusPageState {
    pub node_name: String,
    pub pods: Arc<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>,
    pub events: Arc<dyn Fn() -> Vec<Event> + Send + Sync>,
    /// The node's status as nodelet reports it now.
    pub node: Arc<dyn Fn() -> NodeStatus + Send + Sync>,
    /// `None` without a stats-capable runtime (no charts then).
    pub history: Option<Arc<History>>,
    pub clock: crate::clock::Clock,
}

pub fn router(state: StatusPageState) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/node", get(node))
        .with_state(state)
}

async fn page(State(state): State<StatusPageState>) -> Response {
    let started = std::time::Instant::now();
    let inputs = PageInputs {
        node_name: &state.node_name,
        now: state.clock.now(),
        pods: (state.pods)(),
        events: (state.events)(),
        node: Some((state.node)()),
        history: state.history.as_ref().map(|h| h.snapshot()),
        runtime: crate::watchdog::watchdog().view(),
    };
    let html = render(&inputs);
    let elapsed = started.elapsed();
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
            (header::CACHE_CONTROL, "no-store".to_string()),
            // The render time, which a browser shows in its network panel.
            (
                header::HeaderName::from_static("server-timing"),
                format!("render;dur={:.3}", elapsed.as_secs_f64() * 1000.0),
            ),
        ],
        html,
    )
        .into_response()
}

async fn node(State(state): State<StatusPageState>) -> Response {
    let node = k8s_openapi::api::core::v1::Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(state.node_name.clone()),
            ..Default::default()
        },
        spec: None,
        status: Some((state.node)()),
    };
    let mut value = serde_json::to_value(&node).unwrap_or_default();
    value["kind"] = "Node".into();
    value["apiVersion"] = "v1".into();
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// Everything one rendering reads.
pub struct PageInputs<'a> {
    pub node_name: &'a str,
    pub now: Timestamp,
    pub pods: Vec<Arc<Pod>>,
    pub events: Vec<Event>,
    pub node: Option<NodeStatus>,
    pub history: Option<Snapshot>,
    /// What the async runtime's watchdog has seen.
    pub runtime: crate::watchdog::WatchdogView,
}

/// `&`, `<`, `>`, `"` and `'` as HTML entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "
body{font-family:sans-serif;margin:1em 2em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.4em;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:.9em}
table{border-collapse:collapse;font-size:.9em}th,td{padding:3px 9px;text-align:left;vertical-align:top}
th{background:#eee}tr.pod td{border-top:1px solid #ddd;font-weight:bold}
td.status-Running,td.cond-ok{color:#2a7a2a}td.bad,td.cond-bad{color:#c0392b}
table.containers{margin:2px 0 6px 18px;font-size:.95em}table.containers th{background:#f3f3f3}
.charts{display:flex;flex-wrap:wrap;gap:10px}.charts figure{margin:0;background:#fff;border:1px solid #ddd}
.marker-Evicted{color:#d62728}.marker-Restarted{color:#e66f00}
.probe-failed{color:#c0392b}
";

/// The page.
pub fn render(inputs: &PageInputs<'_>) -> String {
    let mut out = String::with_capacity(64 * 1024 + inputs.pods.len() * 2048);
    let now = inputs.now;
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
<link rel=\"icon\" href=\"data:,\">\
<title>nodelet: {node}</title><style>{STYLE}</style></head><body>\
<h1>nodelet on {node}</h1><p class=\"meta\">nodelet {version} · {pods} pods · generated {now} · \
reloads every {REFRESH_SECONDS} s</p>",
        node = escape(inputs.node_name),
        version = escape(env!("CARGO_PKG_VERSION")),
        pods = inputs.pods.len(),
        now = now.strftime("%Y-%m-%d %H:%M:%S UTC"),
    );
    node_conditions(&mut out, inputs.node.as_ref(), now);
    runtime(&mut out, &inputs.runtime, now);
    charts(&mut out, inputs.history.as_ref(), now);
    pods(&mut out, &inputs.pods, &inputs.events, now);
    events(&mut out, &inputs.events, now);
    out.push_str("</body></html>\n");
    out
}

fn node_conditions(out: &mut String, node: Option<&NodeStatus>, now: Timestamp) {
    out.push_str("<h2>Node conditions</h2>");
    let Some(conditions) = node.and_then(|n| n.conditions.as_ref()) else {
        out.push_str("<p>No node status.</p>");
        return;
    };
    out.push_str(
        "<table id=\"conditions\"><thead><tr><th>TYPE</th><th>STATUS</th><th>REASON</th>\
<th>MESSAGE</th><th>SINCE</th></tr></thead><tbody>",
    );
    for c in conditions {
        // Ready is good when True; the pressure conditions when False.
        let good = (c.type_ == "Ready") == (c.status == "True");
        let since = c
            .last_transition_time
            .as_ref()
            .map(|t| ago(now, t.0))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr data-condition=\"{t}\"><td>{t}</td><td class=\"{class}\">{s}</td><td>{r}</td><td>{m}</td><td>{since}</td></tr>",
            t = escape(&c.type_),
            class = if good { "cond-ok" } else { "cond-bad" },
            s = escape(&c.status),
            r = escape(c.reason.as_deref().unwrap_or_default()),
            m = escape(c.message.as_deref().unwrap_or_default()),
        );
    }
    out.push_str("</tbody></table>");
}

/// The watchdog's line: stalls of the async runtime, the longest poll (wall and CPU time), the
/// last stall's task.
fn runtime(out: &mut String, view: &crate::watchdog::WatchdogView, now: Timestamp) {
    out.push_str("<h2>Async runtime</h2>");
    if !view.installed {
        out.push_str("<p id=\"watchdog\" class=\"bad\">No watchdog: this build has no task-poll hooks (built without <code>--cfg tokio_unstable</code>).</p>");
        return;
    }
    let class = if view.stalls == 0 { "cond-ok" } else { "bad" };
    let _ = write!(
        out,
        "<p id=\"watchdog\" data-stalls=\"{stalls}\"><span class=\"{class}\">{stalls} stalls</span> \
(polls of {limit} ms or longer) · longest poll {longest:.1} ms · most CPU in one poll \
{cpu:.1} ms",
        stalls = view.stalls,
        limit = crate::watchdog::SLOW_POLL.as_millis(),
        longest = view.longest.as_secs_f64() * 1000.0,
        cpu = view.longest_cpu.as_secs_f64() * 1000.0,
    );
    if let Some(last) = &view.last {
        let _ = write!(
            out,
            " · last: {took} ms in the task spawned at <code>{task}</code>, {ago}",
            took = last.took.as_millis(),
            task = escape(&last.task),
            ago = ago(now, last.ended),
        );
    }
    out.push_str("</p>");
}

fn ago(now: Timestamp, then: Timestamp) -> String {
    let nanos = (now.as_nanosecond() - then.as_nanosecond()).max(0);
    let d = std::time::Duration::from_nanos(u64::try_from(nanos).unwrap_or(0));
    format!("{} ago", crate::status::printer::human_duration(d))
}

fn charts(out: &mut String, history: Option<&Snapshot>, now: Timestamp) {
    out.push_str("<h2>The last hour</h2>");
    let Some(history) = history else {
        out.push_str("<p>No history: the runtime offers no stats.</p>");
        return;
    };
    let _ = write!(
        out,
        "<p class=\"meta\">{} samples, one every {} s; vertical lines: \
<span class=\"marker-Evicted\">a pod evicted</span>, \
<span class=\"marker-Restarted\">a container restarted</span>.</p><div class=\"charts\">",
        history.samples.len(),
        crate::server::history::SAMPLE_PERIOD.as_secs()
    );
    for (id, svg) in super::charts::charts(history, now.as_second()) {
        let points = history.samples.len();
        let _ = write!(
            out,
            "<figure id=\"chart-{id}\" data-samples=\"{points}\">{svg}</figure>"
        );
    }
    out.push_str("</div>");
    if history.markers.is_empty() {
        return;
    }
    out.push_str("<table id=\"markers\"><thead><tr><th>WHEN</th><th>WHAT</th><th>POD</th><th>DETAIL</th></tr></thead><tbody>");
    for m in history.markers.iter().rev().take(MAX_MARKERS) {
        let (class, what) = match m.kind {
            MarkerKind::Evicted => ("Evicted", "evicted"),
            MarkerKind::Restarted => ("Restarted", "restarted"),
        };
        let when = Timestamp::from_second(m.at)
            .map(|t| ago(now, t))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr class=\"marker-{class}\"><td>{when}</td><td>{what}</td><td>{}</td><td>{}</td></tr>",
            escape(&m.pod),
            escape(&m.detail)
        );
    }
    out.push_str("</tbody></table>");
}

/// The last `Unhealthy` event of each (pod UID, `fieldPath`), for the probes column.
fn probe_failures(events: &[Event]) -> HashMap<(String, String), &Event> {
    let mut last: HashMap<(String, String), &Event> = HashMap::new();
    for e in events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Unhealthy"))
    {
        let o = &e.involved_object;
        let key = (
            o.uid.clone().unwrap_or_default(),
            o.field_path.clone().unwrap_or_default(),
        );
        let newer = last.get(&key).is_none_or(|prev| {
            crate::events::store::last_seen(prev) <= crate::events::store::last_seen(e)
        });
        if newer {
            last.insert(key, e);
        }
    }
    last
}

fn pods(out: &mut String, pods: &[Arc<Pod>], events: &[Event], now: Timestamp) {
    let _ = write!(out, "<h2>Pods ({})</h2>", pods.len());
    let mut sorted: Vec<&Arc<Pod>> = pods.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let failures = probe_failures(events);
    out.push_str(
        "<table id=\"pods\"><thead><tr><th>NAMESPACE</th><th>NAME</th><th>READY</th>\
<th>STATUS</th><th>RESTARTS</th><th>AGE</th></tr></thead><tbody>",
    );
    for pod in sorted {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let [ready, status, restarts, age] = pod_cells(pod, now);
        let key = escape(&format!("{namespace}/{name}"));
        let status_class = if status == "Running" || status == "Completed" {
            format!("status-{status}")
        } else {
            "bad".to_string()
        };
        let _ = write!(
            out,
            "<tr class=\"pod\" data-pod=\"{key}\"><td class=\"namespace\">{}</td><td class=\"name\">{}</td>\
<td class=\"ready\">{}</td><td class=\"status {status_class}\">{}</td><td class=\"restarts\">{}</td><td class=\"age\">{}</td></tr>",
            escape(namespace),
            escape(name),
            escape(&ready),
            escape(&status),
            escape(&restarts),
            escape(&age),
        );
        let _ = write!(
            out,
            "<tr class=\"containers\" data-pod=\"{key}\"><td colspan=\"6\">"
        );
        containers(out, pod, &failures, now);
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table>");
}

/// `Running`, `Waiting: CrashLoopBackOff`, `Terminated: Completed (exit code 0)`.
fn state_text(status: &ContainerStatus) -> String {
    let Some(state) = &status.state else {
        return "unknown".to_string();
    };
    if state.running.is_some() {
        "Running".to_string()
    } else if let Some(w) = &state.waiting {
        format!("Waiting: {}", w.reason.as_deref().unwrap_or_default())
    } else if let Some(t) = &state.terminated {
        format!(
            "Terminated: {} (exit code {})",
            t.reason.as_deref().unwrap_or_default(),
            t.exit_code
        )
    } else {
        "unknown".to_string()
    }
}

fn last_termination(status: &ContainerStatus, now: Timestamp) -> String {
    let Some(t) = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
    else {
        return String::new();
    };
    let when = t
        .finished_at
        .as_ref()
        .map(|f| format!(", {}", ago(now, f.0)))
        .unwrap_or_default();
    format!(
        "{} (exit code {}){when}",
        t.reason.as_deref().unwrap_or("Terminated"),
        t.exit_code
    )
}

/// The probes a container has (`startup`, `liveness`, `readiness`), with its results as the
/// status shows them (`started`, `ready`) and its last failure.
fn probes_text(
    spec: Option<&Container>,
    status: Option<&ContainerStatus>,
    failure: Option<&&Event>,
    now: Timestamp,
) -> String {
    let Some(spec) = spec else {
        return String::new();
    };
    let mut parts = Vec::new();
    if spec.startup_probe.is_some() {
        let started = status.and_then(|s| s.started).unwrap_or(false);
        parts.push(format!(
            "startup: {}",
            if started { "passed" } else { "not yet" }
        ));
    }
    if spec.liveness_probe.is_some() {
        parts.push("liveness".to_string());
    }
    if spec.readiness_probe.is_some() {
        let ready = status.is_some_and(|s| s.ready);
        parts.push(format!(
            "readiness: {}",
            if ready { "ready" } else { "not ready" }
        ));
    }
    let mut text = escape(&parts.join(", "));
    if let Some(e) = failure {
        let when = crate::events::store::last_seen(e)
            .map(|t| ago(now, t))
            .unwrap_or_default();
        let count = e.count.unwrap_or(1);
        let _ = write!(
            text,
            "<br><span class=\"probe-failed\">last failure {when} (x{count}): {}</span>",
            escape(e.message.as_deref().unwrap_or_default())
        );
    }
    text
}

fn containers(
    out: &mut String,
    pod: &Pod,
    failures: &HashMap<(String, String), &Event>,
    now: Timestamp,
) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    // (kind, fieldPath prefix, specs, statuses)
    let groups: [(&str, &str, &[Container], &[ContainerStatus]); 2] = [
        (
            "init",
            "spec.initContainers",
            spec.and_then(|s| s.init_containers.as_deref())
                .unwrap_or(&[]),
            status
                .and_then(|s| s.init_container_statuses.as_deref())
                .unwrap_or(&[]),
        ),
        (
            "",
            "spec.containers",
            spec.map(|s| s.containers.as_slice()).unwrap_or(&[]),
            status
                .and_then(|s| s.container_statuses.as_deref())
                .unwrap_or(&[]),
        ),
    ];
    out.push_str(
        "<table class=\"containers\"><thead><tr><th>CONTAINER</th><th>STATE</th><th>READY</th>\
<th>RESTARTS</th><th>LAST TERMINATION</th><th>PROBES</th></tr></thead><tbody>",
    );
    for (kind, field, specs, statuses) in groups {
        for c in specs {
            let st = statuses.iter().find(|s| s.name == c.name);
            let kind = if kind == "init" && crate::podspec::is_sidecar(c) {
                "sidecar"
            } else {
                kind
            };
            let label = if kind.is_empty() {
                escape(&c.name)
            } else {
                format!("{} <small>({kind})</small>", escape(&c.name))
            };
            let failure = failures.get(&(uid.clone(), format!("{field}{{{}}}", c.name)));
            let _ = write!(
                out,
                "<tr data-container=\"{}\"><td>{label}</td><td class=\"state\">{}</td><td class=\"ready\">{}</td>\
<td class=\"restarts\">{}</td><td class=\"last-termination\">{}</td><td class=\"probes\">{}</td></tr>",
                escape(&c.name),
                escape(&st.map(state_text).unwrap_or_else(|| "no status yet".into())),
                st.map(|s| s.ready).unwrap_or(false),
                st.map(|s| s.restart_count).unwrap_or(0),
                escape(&st.map(|s| last_termination(s, now)).unwrap_or_default()),
                probes_text(Some(c), st, failure, now),
            );
        }
    }
    out.push_str("</tbody></table>");
}

fn events(out: &mut String, events: &[Event], now: Timestamp) {
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| std::cmp::Reverse(crate::events::store::last_seen(e)));
    let _ = write!(
        out,
        "<h2>Recent events ({} of {})</h2>",
        sorted.len().min(MAX_EVENTS),
        sorted.len()
    );
    out.push_str(
        "<table id=\"events\"><thead><tr><th>LAST SEEN</th><th>TYPE</th><th>REASON</th>\
<th>OBJECT</th><th>MESSAGE</th></tr></thead><tbody>",
    );
    for e in sorted.into_iter().take(MAX_EVENTS) {
        let [seen, type_, reason, object, message] = event_cells(e, now);
        let class = if type_ == "Warning" {
            " class=\"bad\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td{class}>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&seen),
            escape(&type_),
            escape(&reason),
            escape(&object),
            escape(&message)
        );
    }
    out.push_str("</tbody></table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        NodeCondition, ObjectReference, PodSpec, PodStatus, Probe,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn now() -> Timestamp {
        Timestamp::from_second(1_767_225_600).unwrap()
    }

    fn crashing_pod() -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some("crash<1>".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                creation_timestamp: Some(Time(now() - jiff::SignedDuration::from_secs(300))),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    liveness_probe: Some(Probe::default()),
                    readiness_probe: Some(Probe::default()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".into(),
                    restart_count: 4,
                    ready: false,
                    state: Some(ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some("CrashLoopBackOff".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    last_state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 3,
                            reason: Some("Error".into()),
                            finished_at: Some(Time(now() - jiff::SignedDuration::from_secs(20))),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn running_pod() -> Arc<Pod> {
        let mut pod = (*crashing_pod()).clone();
        pod.metadata.name = Some("web".into());
        pod.metadata.uid = Some("u2".into());
        let status = pod.status.as_mut().unwrap();
        status.conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        let c = &mut status.container_statuses.as_mut().unwrap()[0];
        c.restart_count = 0;
        c.ready = true;
        c.last_state = None;
        c.state = Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        });
        Arc::new(pod)
    }

    fn unhealthy(uid: &str, message: &str) -> Event {
        Event {
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                name: Some("crash<1>".into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                field_path: Some("spec.containers{app}".into()),
                ..Default::default()
            },
            reason: Some("Unhealthy".into()),
            message: Some(message.into()),
            type_: Some("Warning".into()),
            count: Some(7),
            last_timestamp: Some(Time(now() - jiff::SignedDuration::from_secs(5))),
            metadata: ObjectMeta {
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_page_shows_pods_containers_conditions_and_events_escaped() {
        let html = render(&PageInputs {
            node_name: "n1",
            now: now(),
            pods: vec![running_pod(), crashing_pod()],
            events: vec![unhealthy(
                "u1",
                "Liveness probe failed: HTTP probe failed with statuscode: 500",
            )],
            node: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "MemoryPressure".into(),
                    status: "False".into(),
                    reason: Some("KubeletHasSufficientMemory".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            history: None,
            runtime: crate::watchdog::WatchdogView {
                installed: true,
                stalls: 2,
                longest: std::time::Duration::from_millis(340),
                longest_cpu: std::time::Duration::from_millis(85),
                last: Some(crate::watchdog::Stall {
                    ended: now() - jiff::SignedDuration::from_secs(30),
                    took: std::time::Duration::from_millis(120),
                    task: "src/gc/<x>.rs:9".into(),
                }),
            },
        });
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<p id=\"watchdog\" data-stalls=\"2\"><span class=\"bad\">2 stalls</span> (polls of 100 ms or longer) · longest poll 340.0 ms · most CPU in one poll 85.0 ms · last: 120 ms in the task spawned at <code>src/gc/&lt;x&gt;.rs:9</code>, 30s ago</p>"), "{html}");
        assert!(html.contains("<meta http-equiv=\"refresh\" content=\"10\">"));
        // Nothing to fetch from elsewhere.
        for outside in ["<script", "src=\"http", "href=\"http", "@import"] {
            assert!(!html.contains(outside), "{outside}");
        }
        // The pods sorted by name, with nodelet pods' cells; the name escaped.
        let crash = html.find("data-pod=\"default/crash&lt;1&gt;\"").unwrap();
        let web = html.find("data-pod=\"default/web\"").unwrap();
        assert!(crash < web);
        assert!(html.contains("<td class=\"ready\">0/1</td><td class=\"status bad\">CrashLoopBackOff</td><td class=\"restarts\">4 (20s ago)</td><td class=\"age\">5m</td>"), "{html}");
        assert!(html.contains("<td class=\"status status-Running\">Running</td>"));
        // The crash-looping container: state, restarts, last termination, probes and failure.
        assert!(html.contains("<td class=\"state\">Waiting: CrashLoopBackOff</td><td class=\"ready\">false</td><td class=\"restarts\">4</td><td class=\"last-termination\">Error (exit code 3), 20s ago</td>"), "{html}");
        assert!(html.contains("liveness, readiness: not ready<br><span class=\"probe-failed\">last failure 5s ago (x7): Liveness probe failed: HTTP probe failed with statuscode: 500</span>"), "{html}");
        // Only the crashing pod's container has the failure.
        assert_eq!(html.matches("probe-failed\">").count(), 1);
        assert!(html.contains("<tr data-condition=\"MemoryPressure\"><td>MemoryPressure</td><td class=\"cond-ok\">False</td><td>KubeletHasSufficientMemory</td>"));
        assert!(html.contains("<h2>Recent events (1 of 1)</h2>"));
        assert!(html.contains("pod/crash&lt;1&gt;"));
        assert!(html.contains("No history: the runtime offers no stats."));
    }

    #[test]
    fn the_page_draws_the_history_and_lists_markers() {
        let at = now().as_second();
        let history = Snapshot {
            samples: (0..5)
                .map(|i| crate::server::history::Sample {
                    at: at - 40 + 10 * i,
                    memory_available: Some(500 << 20),
                    pods: 2,
                    ..Default::default()
                })
                .collect(),
            markers: vec![crate::server::history::Marker {
                at: at - 20,
                kind: MarkerKind::Restarted,
                pod: "default/crash".into(),
                detail: "app: Error, exit code 3".into(),
            }],
            memory_capacity: 1 << 30,
            thresholds: vec![],
        };
        let html = render(&PageInputs {
            node_name: "n1",
            now: now(),
            pods: vec![],
            events: vec![],
            node: None,
            history: Some(history),
            runtime: crate::watchdog::WatchdogView::default(),
        });
        for id in ["memory", "psi", "cpu", "pods"] {
            assert!(
                html.contains(&format!(
                    "<figure id=\"chart-{id}\" data-samples=\"5\"><svg"
                )),
                "{id}"
            );
        }
        assert!(
            html.contains("<p id=\"watchdog\" class=\"bad\">No watchdog"),
            "{html}"
        );
        assert!(html.contains("<tr class=\"marker-Restarted\"><td>20s ago</td><td>restarted</td><td>default/crash</td><td>app: Error, exit code 3</td></tr>"), "{html}");
    }
}
