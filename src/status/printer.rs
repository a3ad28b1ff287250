//! `kubectl get pods` output: the API server's `printPod` table (NAME, READY, STATUS, RESTARTS,
//! AGE), laid out the way kubectl's tab writer does it.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};

use super::generate::{is_sidecar, last_terminated, running, terminated, waiting};
use super::phase::is_terminal_phase;

/// kubectl's tab writer: cells padded by 3 spaces, columns at least 6 wide, last column bare.
const PADDING: usize = 3;
const MIN_WIDTH: usize = 6;

/// apimachinery's `duration.HumanDuration`: ~2-3 significant figures (`59s`, `2m3s`, `10m`,
/// `3h`, `2d5h`, `400d`, `3y20d`).
pub fn human_duration(d: Duration) -> String {
    let seconds = d.as_secs();
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{}h", hours / 24, h);
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{}d", hours / 24 / 365, dy);
    }
    format!("{}y", hours / 24 / 365)
}

/// `translateTimestampSince`: how long ago `then` was; up to a second in the future counts as
/// now (clock skew), further is `<invalid>`.
fn since(now: Timestamp, then: Timestamp) -> String {
    let nanos = now.as_nanosecond() - then.as_nanosecond();
    // Go's int(d.Seconds()) truncates toward zero.
    let seconds = nanos / 1_000_000_000;
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if nanos < 0 {
        return "0s".to_string();
    }
    let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
    human_duration(Duration::from_nanos(nanos))
}

struct Row {
    ready: String,
    status: String,
    restarts: String,
}

fn later(current: Option<Timestamp>, candidate: Option<Timestamp>) -> Option<Timestamp> {
    match (current, candidate) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn last_finished(status: &ContainerStatus) -> Option<Timestamp> {
    last_terminated(status).and_then(|t| t.finished_at.as_ref().map(|f| f.0))
}

fn condition_true(status: &PodStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .is_some_and(|c| c.status == "True")
}

/// The API server's `printPod`: READY, STATUS and RESTARTS of one pod.
fn pod_row(pod: &Pod, now: Timestamp) -> Row {
    let default_status = PodStatus::default();
    let status = pod.status.as_ref().unwrap_or(&default_status);
    let spec = pod.spec.as_ref();
    let init_specs: &[Container] = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[]);
    let init_by_name: HashMap<&str, &Container> =
        init_specs.iter().map(|c| (c.name.as_str(), c)).collect();
    let mut total = spec.map_or(0, |s| s.containers.len());
    total += init_specs.iter().filter(|c| is_sidecar(c)).count();

    let phase = status.phase.clone().unwrap_or_default();
    let mut reason = status
        .reason
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| phase.clone());
    let gated = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("SchedulingGated"));
    if gated {
        reason = "SchedulingGated".to_string();
    }

    let mut restarts: i64 = 0;
    let mut sidecar_restarts: i64 = 0;
    let mut ready = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_sidecar_restart: Option<Timestamp> = None;
    let mut initializing = false;
    for (i, c) in status.init_container_statuses.iter().flatten().enumerate() {
        restarts += i64::from(c.restart_count);
        last_restart = later(last_restart, last_finished(c));
        let sidecar = init_by_name
            .get(c.name.as_str())
            .is_some_and(|s| is_sidecar(s));
        if sidecar {
            sidecar_restarts += i64::from(c.restart_count);
            last_sidecar_restart = later(last_sidecar_restart, last_finished(c));
        }
        if terminated(c).is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if sidecar && c.started == Some(true) {
            if c.ready {
                ready += 1;
            }
            continue;
        }
        let waiting_reason = waiting(c)
            .and_then(|w| w.reason.as_deref())
            .filter(|r| !r.is_empty() && *r != "PodInitializing");
        reason = if let Some(t) = terminated(c) {
            match t.reason.as_deref().filter(|r| !r.is_empty()) {
                Some(r) => format!("Init:{r}"),
                None => match t.signal.filter(|s| *s != 0) {
                    Some(signal) => format!("Init:Signal:{signal}"),
                    None => format!("Init:ExitCode:{}", t.exit_code),
                },
            }
        } else if let Some(r) = waiting_reason {
            format!("Init:{r}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }

    if !initializing || condition_true(status, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in status.container_statuses.iter().flatten().rev() {
            restarts += i64::from(c.restart_count);
            last_restart = later(last_restart, last_finished(c));
            let waiting_reason = waiting(c)
                .and_then(|w| w.reason.as_deref())
                .filter(|r| !r.is_empty());
            if let Some(r) = waiting_reason {
                reason = r.to_string();
            } else if let Some(t) = terminated(c) {
                reason = match t.reason.as_deref().filter(|r| !r.is_empty()) {
                    Some(r) => r.to_string(),
                    None => match t.signal.filter(|s| *s != 0) {
                        Some(signal) => format!("Signal:{signal}"),
                        None => format!("ExitCode:{}", t.exit_code),
                    },
                };
            } else if c.ready && running(c).is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true(status, "Ready") {
                "Running".to_string()
            } else {
                "NotReady".to_string()
            };
        }
    }

    if pod.metadata.deletion_timestamp.is_some() {
        if status.reason.as_deref() == Some("NodeLost") {
            reason = "Unknown".to_string();
        } else if !is_terminal_phase(Some(&phase)) {
            reason = "Terminating".to_string();
        }
    }

    let restarts = match last_restart {
        Some(at) if restarts != 0 => format!("{restarts} ({} ago)", since(now, at)),
        _ => restarts.to_string(),
    };
    Row {
        ready: format!("{ready}/{total}"),
        status: reason,
        restarts,
    }
}

/// kubectl's STATUS column for one pod.
pub fn pod_status_reason(pod: &Pod) -> String {
    pod_row(pod, Timestamp::UNIX_EPOCH).status
}

/// The READY, STATUS, RESTARTS and AGE cells of one pod, as [`pod_table`] prints them.
pub fn pod_cells(pod: &Pod, now: Timestamp) -> [String; 4] {
    let row = pod_row(pod, now);
    let age = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or_else(|| "<unknown>".to_string(), |t| since(now, t.0));
    [row.ready, row.status, row.restarts, age]
}

/// `kubectl get pods` (or `kubectl get pods -A` when `all_namespaces`): pods sorted by namespace
/// and name, as the API server lists them.
pub fn pod_table(pods: &[Pod], now: Timestamp, all_namespaces: bool) -> String {
    if pods.is_empty() {
        return "No resources found\n".to_string();
    }
    let mut sorted: Vec<&Pod> = pods.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });

    let mut header = vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"];
    if all_namespaces {
        header.insert(0, "NAMESPACE");
    }
    let mut lines: Vec<Vec<String>> = vec![header.into_iter().map(str::to_string).collect()];
    for pod in sorted {
        let row = pod_row(pod, now);
        let age = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(|| "<unknown>".to_string(), |t| since(now, t.0));
        let mut cells = Vec::with_capacity(6);
        if all_namespaces {
            cells.push(pod.metadata.namespace.clone().unwrap_or_default());
        }
        cells.push(pod.metadata.name.clone().unwrap_or_default());
        cells.extend([row.ready, row.status, row.restarts, age]);
        lines.push(cells);
    }
    align(&lines)
}

/// Lays out rows like Go's `tabwriter` with kubectl's settings (shared by every table nodelet
/// prints).
pub(crate) fn align(lines: &[Vec<String>]) -> String {
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            lines
                .iter()
                .filter_map(|l| l.get(i))
                .map(|cell| cell.chars().count() + PADDING)
                .fold(MIN_WIDTH, usize::max)
        })
        .collect();
    let mut out = String::new();
    for line in lines {
        for (i, cell) in line.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < line.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        PodCondition, PodSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    const NOW: i64 = 1_000_000;

    #[test]
    fn human_duration_table() {
        let cases: &[(u64, &str)] = &[
            (0, "0s"),
            (1, "1s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (123, "2m3s"),
            (599, "9m59s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (8 * 3600, "8h"),
            (47 * 3600 + 59 * 60, "47h"),
            (48 * 3600, "2d"),
            (53 * 3600, "2d5h"),
            (7 * 86400 + 23 * 3600, "7d23h"),
            (8 * 86400, "8d"),
            (400 * 86400, "400d"),
            (730 * 86400, "2y"),
            (750 * 86400, "2y20d"),
            (8 * 365 * 86400, "8y"),
        ];
        for &(secs, expected) in cases {
            assert_eq!(
                human_duration(Duration::from_secs(secs)),
                expected,
                "{secs}s"
            );
        }
        assert_eq!(human_duration(Duration::from_millis(1999)), "1s");
    }

    #[test]
    fn since_tolerates_small_skew() {
        let cases = [
            (NOW - 30, "30s"),
            (NOW, "0s"),
            (NOW + 1, "0s"),
            (NOW + 2, "<invalid>"),
        ];
        for (then, expected) in cases {
            assert_eq!(since(ts(NOW), ts(then)), expected, "{then}");
        }
    }

    fn spec_container(name: &str) -> Container {
        Container {
            name: name.into(),
            ..Default::default()
        }
    }

    fn sidecar(name: &str) -> Container {
        Container {
            restart_policy: Some("Always".into()),
            ..spec_container(name)
        }
    }

    fn cs(name: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            last_state: Some(ContainerState::default()),
            ..Default::default()
        }
    }

    fn running_ready(name: &str, ready: bool) -> ContainerStatus {
        ContainerStatus {
            ready,
            started: Some(true),
            ..cs(
                name,
                ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                },
            )
        }
    }

    fn waiting_for(name: &str, reason: &str) -> ContainerStatus {
        cs(
            name,
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: None,
                }),
                ..Default::default()
            },
        )
    }

    fn exited(name: &str, code: i32, reason: &str, signal: Option<i32>) -> ContainerStatus {
        cs(
            name,
            ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    reason: (!reason.is_empty()).then(|| reason.to_string()),
                    signal,
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    fn restarted(mut s: ContainerStatus, count: i32, finished: i64) -> ContainerStatus {
        s.restart_count = count;
        s.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                finished_at: Some(Time(ts(finished))),
                ..Default::default()
            }),
            ..Default::default()
        });
        s
    }

    fn cond(type_: &str, status: &str) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            ..Default::default()
        }
    }

    struct P {
        init: Vec<Container>,
        containers: Vec<Container>,
        phase: &'static str,
        init_statuses: Vec<ContainerStatus>,
        statuses: Vec<ContainerStatus>,
        conditions: Vec<PodCondition>,
        deleting: bool,
        reason: Option<&'static str>,
    }

    impl Default for P {
        fn default() -> Self {
            P {
                init: vec![],
                containers: vec![spec_container("a")],
                phase: "Running",
                init_statuses: vec![],
                statuses: vec![],
                conditions: vec![],
                deleting: false,
                reason: None,
            }
        }
    }

    fn build(p: P) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                creation_timestamp: Some(Time(ts(NOW - 3600))),
                deletion_timestamp: p.deleting.then(|| Time(ts(NOW))),
                ..Default::default()
            },
            spec: Some(PodSpec {
                init_containers: Some(p.init),
                containers: p.containers,
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(p.phase.into()),
                reason: p.reason.map(str::to_string),
                init_container_statuses: Some(p.init_statuses),
                container_statuses: Some(p.statuses),
                conditions: Some(p.conditions),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn status_ready_restarts_table() {
        let two_inits = || vec![spec_container("i1"), spec_container("i2")];
        // (name, pod, STATUS, READY, RESTARTS)
        let cases: Vec<(&str, P, &str, &str, &str)> = vec![
            (
                "pending, nothing reported",
                P {
                    phase: "Pending",
                    ..Default::default()
                },
                "Pending",
                "0/1",
                "0",
            ),
            (
                "running ready",
                P {
                    statuses: vec![running_ready("a", true)],
                    ..Default::default()
                },
                "Running",
                "1/1",
                "0",
            ),
            (
                "running not ready",
                P {
                    statuses: vec![running_ready("a", false)],
                    ..Default::default()
                },
                "Running",
                "0/1",
                "0",
            ),
            (
                "container creating",
                P {
                    phase: "Pending",
                    statuses: vec![waiting_for("a", "ContainerCreating")],
                    ..Default::default()
                },
                "ContainerCreating",
                "0/1",
                "0",
            ),
            (
                "image pull error",
                P {
                    phase: "Pending",
                    statuses: vec![waiting_for("a", "ErrImagePull")],
                    ..Default::default()
                },
                "ErrImagePull",
                "0/1",
                "0",
            ),
            (
                "completed",
                P {
                    phase: "Succeeded",
                    statuses: vec![exited("a", 0, "Completed", None)],
                    ..Default::default()
                },
                "Completed",
                "0/1",
                "0",
            ),
            (
                "error",
                P {
                    phase: "Failed",
                    statuses: vec![exited("a", 1, "Error", None)],
                    ..Default::default()
                },
                "Error",
                "0/1",
                "0",
            ),
            (
                "oom killed",
                P {
                    phase: "Failed",
                    statuses: vec![exited("a", 137, "OOMKilled", None)],
                    ..Default::default()
                },
                "OOMKilled",
                "0/1",
                "0",
            ),
            (
                "signal without reason",
                P {
                    phase: "Failed",
                    statuses: vec![exited("a", 137, "", Some(9))],
                    ..Default::default()
                },
                "Signal:9",
                "0/1",
                "0",
            ),
            (
                "exit code without reason",
                P {
                    phase: "Failed",
                    statuses: vec![exited("a", 3, "", None)],
                    ..Default::default()
                },
                "ExitCode:3",
                "0/1",
                "0",
            ),
            (
                "crash loop with restarts",
                P {
                    statuses: vec![restarted(
                        waiting_for("a", "CrashLoopBackOff"),
                        3,
                        NOW - 120,
                    )],
                    ..Default::default()
                },
                "CrashLoopBackOff",
                "0/1",
                "3 (2m ago)",
            ),
            (
                "newest last termination wins",
                P {
                    containers: vec![spec_container("a"), spec_container("b")],
                    statuses: vec![
                        restarted(running_ready("a", true), 1, NOW - 7200),
                        restarted(running_ready("b", true), 2, NOW - 30),
                    ],
                    ..Default::default()
                },
                "Running",
                "2/2",
                "3 (30s ago)",
            ),
            (
                "one completed one running, ready",
                P {
                    containers: vec![spec_container("a"), spec_container("b")],
                    statuses: vec![exited("a", 0, "Completed", None), running_ready("b", true)],
                    conditions: vec![cond("Ready", "True")],
                    ..Default::default()
                },
                "Running",
                "1/2",
                "0",
            ),
            (
                "one completed one running, not ready",
                P {
                    containers: vec![spec_container("a"), spec_container("b")],
                    statuses: vec![exited("a", 0, "Completed", None), running_ready("b", true)],
                    conditions: vec![cond("Ready", "False")],
                    ..Default::default()
                },
                "NotReady",
                "1/2",
                "0",
            ),
            (
                "first init running",
                P {
                    phase: "Pending",
                    init: two_inits(),
                    init_statuses: vec![
                        running_ready("i1", false),
                        waiting_for("i2", "PodInitializing"),
                    ],
                    statuses: vec![waiting_for("a", "PodInitializing")],
                    ..Default::default()
                },
                "Init:0/2",
                "0/1",
                "0",
            ),
            (
                "second init waiting",
                P {
                    phase: "Pending",
                    init: two_inits(),
                    init_statuses: vec![
                        exited("i1", 0, "Completed", None),
                        waiting_for("i2", "PodInitializing"),
                    ],
                    statuses: vec![waiting_for("a", "PodInitializing")],
                    ..Default::default()
                },
                "Init:1/2",
                "0/1",
                "0",
            ),
            (
                "init failed",
                P {
                    phase: "Failed",
                    init: two_inits(),
                    init_statuses: vec![
                        exited("i1", 1, "Error", None),
                        waiting_for("i2", "PodInitializing"),
                    ],
                    statuses: vec![waiting_for("a", "PodInitializing")],
                    ..Default::default()
                },
                "Init:Error",
                "0/1",
                "0",
            ),
            (
                "init exit code without reason",
                P {
                    phase: "Pending",
                    init: two_inits(),
                    init_statuses: vec![exited("i1", 2, "", None)],
                    ..Default::default()
                },
                "Init:ExitCode:2",
                "0/1",
                "0",
            ),
            (
                "init crash loop",
                P {
                    phase: "Pending",
                    init: two_inits(),
                    init_statuses: vec![restarted(
                        waiting_for("i1", "CrashLoopBackOff"),
                        4,
                        NOW - 10,
                    )],
                    statuses: vec![waiting_for("a", "PodInitializing")],
                    ..Default::default()
                },
                "Init:CrashLoopBackOff",
                "0/1",
                "4 (10s ago)",
            ),
            (
                "inits done, main initializing",
                P {
                    phase: "Pending",
                    init: two_inits(),
                    init_statuses: vec![
                        exited("i1", 0, "Completed", None),
                        exited("i2", 0, "Completed", None),
                    ],
                    statuses: vec![waiting_for("a", "PodInitializing")],
                    conditions: vec![cond("Initialized", "True")],
                    ..Default::default()
                },
                "PodInitializing",
                "0/1",
                "0",
            ),
            (
                "sidecar counted in READY",
                P {
                    init: vec![sidecar("s")],
                    init_statuses: vec![running_ready("s", true)],
                    statuses: vec![running_ready("a", true)],
                    conditions: vec![cond("Initialized", "True")],
                    ..Default::default()
                },
                "Running",
                "2/2",
                "0",
            ),
            (
                "sidecar restarts count once initialized",
                P {
                    init: vec![sidecar("s")],
                    init_statuses: vec![restarted(running_ready("s", true), 2, NOW - 300)],
                    statuses: vec![running_ready("a", true)],
                    conditions: vec![cond("Initialized", "True")],
                    ..Default::default()
                },
                "Running",
                "2/2",
                "2 (5m ago)",
            ),
            (
                "terminating",
                P {
                    deleting: true,
                    statuses: vec![running_ready("a", true)],
                    ..Default::default()
                },
                "Terminating",
                "1/1",
                "0",
            ),
            (
                "deleted after completion stays completed",
                P {
                    deleting: true,
                    phase: "Succeeded",
                    statuses: vec![exited("a", 0, "Completed", None)],
                    ..Default::default()
                },
                "Completed",
                "0/1",
                "0",
            ),
            (
                "node lost",
                P {
                    deleting: true,
                    reason: Some("NodeLost"),
                    statuses: vec![running_ready("a", true)],
                    ..Default::default()
                },
                "Unknown",
                "1/1",
                "0",
            ),
            (
                "pod reason (evicted)",
                P {
                    phase: "Failed",
                    reason: Some("Evicted"),
                    ..Default::default()
                },
                "Evicted",
                "0/1",
                "0",
            ),
            (
                "scheduling gated",
                P {
                    phase: "Pending",
                    conditions: vec![PodCondition {
                        reason: Some("SchedulingGated".into()),
                        ..cond("PodScheduled", "False")
                    }],
                    ..Default::default()
                },
                "SchedulingGated",
                "0/1",
                "0",
            ),
        ];
        for (name, p, status, ready, restarts) in cases {
            let pod = build(p);
            let row = pod_row(&pod, ts(NOW));
            assert_eq!(row.status, status, "{name}: STATUS");
            assert_eq!(row.ready, ready, "{name}: READY");
            assert_eq!(row.restarts, restarts, "{name}: RESTARTS");
            assert_eq!(pod_status_reason(&pod), status, "{name}: pod_status_reason");
        }
    }

    fn named(namespace: &str, name: &str, created: Option<i64>, p: P) -> Pod {
        let mut pod = build(p);
        pod.metadata.namespace = Some(namespace.into());
        pod.metadata.name = Some(name.into());
        pod.metadata.creation_timestamp = created.map(|c| Time(ts(c)));
        pod
    }

    #[test]
    fn table_layout() {
        let pods = vec![
            named(
                "kube-system",
                "etcd-node1",
                Some(NOW - 53 * 3600),
                P {
                    statuses: vec![running_ready("a", true)],
                    ..Default::default()
                },
            ),
            named(
                "default",
                "web",
                Some(NOW - 600),
                P {
                    statuses: vec![restarted(
                        waiting_for("a", "CrashLoopBackOff"),
                        200,
                        NOW - 123,
                    )],
                    ..Default::default()
                },
            ),
            named(
                "default",
                "orphan",
                None,
                P {
                    phase: "Pending",
                    ..Default::default()
                },
            ),
        ];
        // Rows are sorted by namespace/name, so the kube-system pod comes last; its longer
        // name still sets the width of the NAME column.
        let got = pod_table(&pods, ts(NOW), false);
        let expected = "\
NAME         READY   STATUS             RESTARTS         AGE
orphan       0/1     Pending            0                <unknown>
web          0/1     CrashLoopBackOff   200 (2m3s ago)   10m
etcd-node1   1/1     Running            0                2d5h
";
        assert_eq!(got, expected);

        let expected_all = "\
NAMESPACE     NAME         READY   STATUS             RESTARTS         AGE
default       orphan       0/1     Pending            0                <unknown>
default       web          0/1     CrashLoopBackOff   200 (2m3s ago)   10m
kube-system   etcd-node1   1/1     Running            0                2d5h
";
        assert_eq!(pod_table(&pods, ts(NOW), true), expected_all);
    }

    #[test]
    fn short_cells_use_minimum_width() {
        let pod = named(
            "default",
            "a",
            Some(NOW - 5),
            P {
                statuses: vec![running_ready("a", true)],
                ..Default::default()
            },
        );
        let expected = "\
NAME   READY   STATUS    RESTARTS   AGE
a      1/1     Running   0          5s
";
        assert_eq!(pod_table(&[pod], ts(NOW), false), expected);
    }

    #[test]
    fn empty_table() {
        assert_eq!(pod_table(&[], ts(NOW), false), "No resources found\n");
    }
}
