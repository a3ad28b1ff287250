//! Reaction times, each measured from a timestamp taken outside nodelet:
//! - a container's exit (the runtime's exact `finishedAt`) → its terminated state in `/pods`;
//! - a failing liveness probe (testbox logs the `500` it answered) → the SIGTERM it receives;
//! - a readiness change (the first answer with the new result) → the `Ready` condition in `/pods`;
//! - a manifest removed → the SIGTERM the pod's container receives, and the pod gone from `/pods`.
//!
//! The bare runtime's part of the kill path, StopContainer → SIGTERM in the container, is
//! measured in the same run.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerState, Pod};
use nodelet::cri::remote::RemoteRuntime;
use nodelet::cri::{api, labels, Runtime};

use crate::agent::{self, pod_yaml, Agent, Kind, TESTBOX};
use crate::report::{first_event, ms_between, num, parse_events, Row, Section, Summary, Verdict};
use crate::sys::{self, LoadMark};
use crate::Options;
use nodelet_testkit::pod::{all_running, is_ready};

const POLL: Duration = Duration::from_millis(5);
const T: Duration = Duration::from_secs(120);

/// Restarts come after at most a second, so exits and liveness kills repeat quickly.
const FAST_BACKOFF: &str = "crashLoopBackOff:\n  maxContainerRestartPeriod: 1s\n";

fn ms_str(s: &Summary) -> String {
    format!(
        "p50 {} / p99 {} / max {}",
        num(s.p50),
        num(s.p99),
        num(s.max)
    )
}

fn ms_short(s: &Summary) -> String {
    format!("p50 {} / max {}", num(s.p50), num(s.max))
}

/// A container status's terminated instance (the container's name and the instance's ID): the
/// current state, or the last one while the container waits to restart or runs again.
fn terminated_ids(p: &Pod) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        let t = |s: &Option<ContainerState>| {
            s.as_ref()?
                .terminated
                .as_ref()
                .and_then(|t| t.container_id.clone())
        };
        out.extend(t(&c.state).map(|id| (c.name.clone(), id)));
        out.extend(t(&c.last_state).map(|id| (c.name.clone(), id)));
    }
    out
}

fn running_ids(p: &Pod) -> Vec<String> {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .filter_map(|c| c.container_id.clone())
        .collect()
}

/// `containerd://ID` → `ID`.
fn bare_id(id: &str) -> &str {
    id.rsplit("://").next().unwrap_or(id)
}

/// For each container exit (by container ID): when containerd's event reached this process,
/// and when the CRI's ContainerStatus first said the container is no longer running (polled
/// every 2 ms from the event on, as nodelet's PLEG does): the bare runtime's own exit
/// notification, and the floor for any CRI client's status.
type ExitSeen = Arc<Mutex<HashMap<String, (Timestamp, Option<Timestamp>)>>>;

/// Polls ContainerStatus until the CRI reports the container exited (at most 10 s).
async fn cri_sees_exit(rt: Arc<RemoteRuntime>, id: String, seen: ExitSeen) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        match rt.container_status(&id).await {
            Ok(s) if s.state == api::ContainerState::ContainerRunning as i32 => {}
            _ => {
                if let Some(e) = seen.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&id) {
                    e.1 = Some(Timestamp::now());
                }
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Follows containerd's `/tasks/exit` events in the CRI namespace, as nodelet's PLEG does.
async fn follow_exits(socket: PathBuf, rt: Arc<RemoteRuntime>, seen: ExitSeen) {
    use containerd_client::services::v1::events_client::EventsClient;
    use prost::Message;
    let Ok(channel) = containerd_client::connect(&socket).await else {
        eprintln!("reaction: cannot connect to {}", socket.display());
        return;
    };
    let request = containerd_client::services::v1::SubscribeRequest {
        filters: vec!["namespace==k8s.io,topic==\"/tasks/exit\"".into()],
    };
    let Ok(response) = EventsClient::new(channel).subscribe(request).await else {
        return;
    };
    let mut stream = response.into_inner();
    while let Ok(Some(envelope)) = stream.message().await {
        let now = Timestamp::now();
        let Some(event) = envelope.event else {
            continue;
        };
        if let Ok(exit) = containerd_client::events::TaskExit::decode(event.value.as_slice()) {
            // An exec'd process's exit is not the container's.
            if exit.id.is_empty() || exit.id == exit.container_id {
                let first = seen
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(exit.container_id.clone(), (now, None))
                    .is_none();
                if first {
                    tokio::spawn(cri_sees_exit(rt.clone(), exit.container_id, seen.clone()));
                }
            }
        }
    }
}

/// When the CRI's own event stream (`GetContainerEvents`, `CONTAINER_STOPPED_EVENT`) told this
/// process of each container's stop, by container ID.
type CriEventSeen = Arc<Mutex<HashMap<String, Timestamp>>>;

/// Follows the CRI's `GetContainerEvents`; returns at once (`false`) when the runtime has no
/// such call (containerd 1.6).
async fn follow_cri_events(endpoint: String, seen: CriEventSeen) -> bool {
    use nodelet::cri::api::runtime_service_client::RuntimeServiceClient;
    let Ok(channel) = nodelet::cri::remote::unix_channel(&endpoint) else {
        return false;
    };
    let Ok(response) = RuntimeServiceClient::new(channel)
        .get_container_events(api::GetEventsRequest {})
        .await
    else {
        return false;
    };
    let mut stream = response.into_inner();
    while let Ok(Some(event)) = stream.message().await {
        if event.container_event_type == api::ContainerEventType::ContainerStoppedEvent as i32 {
            seen.lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(event.container_id)
                .or_insert_with(Timestamp::now);
        }
    }
    true
}

/// Exit → terminated in `/pods`, over at least `count` exits of 10 crash-looping pods; and
/// exit → containerd's event, exit → the CRI's status and exit → the CRI's own event, for the
/// same exits.
async fn exits(count: usize) -> ExitTimes {
    let a = Agent::start("exits", FAST_BACKOFF).await;
    let rt = agent::runtime();
    let seen_by_containerd: ExitSeen = Arc::default();
    let follower = tokio::spawn(follow_exits(
        crate::sys::containerd_socket(&agent::endpoint()),
        rt.clone(),
        seen_by_containerd.clone(),
    ));
    let seen_by_cri_events: CriEventSeen = Arc::default();
    let cri_follower = tokio::spawn(follow_cri_events(
        agent::endpoint(),
        seen_by_cri_events.clone(),
    ));
    write_exit_pods(&a);
    let lookups = watch_exits(&a, count, |_, id, now| {
        let (rt, events) = (rt.clone(), seen_by_containerd.clone());
        let cri_events = seen_by_cri_events.clone();
        tokio::spawn(async move {
            let id = bare_id(&id);
            let finished = runtime_finished_at(&rt, id).await?;
            // Give the CRI poll of this exit its time to finish.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let bare = events
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(id)
                .map(|(event, cri)| {
                    (
                        ms_between(finished, *event),
                        cri.map(|c| ms_between(finished, c)),
                    )
                });
            let cri_event = cri_events
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(id)
                .map(|t| ms_between(finished, *t));
            Some((ms_between(finished, now), bare, cri_event))
        })
    })
    .await;
    let (mut ours, mut events, mut cri) = (Vec::new(), Vec::new(), Vec::new());
    let mut cri_events = Vec::new();
    for l in lookups {
        if let Ok(Some((v, bare, cri_event))) = l.await {
            ours.push(v);
            if let Some((event, seen)) = bare {
                events.push(event);
                cri.extend(seen);
            }
            cri_events.extend(cri_event);
        }
    }
    follower.abort();
    // Finished already when the runtime has no GetContainerEvents.
    let cri_stream = if cri_follower.is_finished() {
        cri_follower.await.unwrap_or(false)
    } else {
        cri_follower.abort();
        true
    };
    eprintln!(
        "reaction: exits measured {} (containerd's event seen for {}, the CRI's status for {}, \
         the CRI's event for {})",
        ours.len(),
        events.len(),
        cri.len(),
        cri_events.len()
    );
    a.remove_all(T).await;
    ExitTimes {
        ours,
        events,
        cri,
        cri_events: cri_stream.then_some(cri_events),
    }
}

/// The 10 crash-looping pods of [`exits`].
fn write_exit_pods(a: &Agent) {
    for i in 0..10 {
        // Different run lengths, so the exits spread out instead of coming in lockstep.
        let after = format!("{}ms", 1000 + 97 * i);
        a.write_manifest(
            &format!("exit{i}"),
            &pod_yaml(
                &format!("exit{i}"),
                "Always",
                1,
                &[(
                    "main",
                    &format!("exit, --code, \"1\", --after, {after}"),
                    "",
                )],
            ),
        );
    }
}

/// Exit → terminated in the real kubelet's `/pods` (its read-only port), for the same pods and
/// number of exits as [`exits`]; `None` without a kubelet or on another runtime than the first.
async fn kubelet_exits(count: usize) -> Option<Vec<f64>> {
    if agent::kubelet_binary().is_none() || !agent::is_primary_runtime() {
        return None;
    }
    let a = Agent::start_as(Kind::Kubelet, "exits", FAST_BACKOFF).await;
    let rt = agent::runtime();
    write_exit_pods(&a);
    let lookups = watch_exits(&a, count, |_, id, now| {
        let rt = rt.clone();
        tokio::spawn(async move {
            let finished = runtime_finished_at(&rt, bare_id(&id)).await?;
            Some(ms_between(finished, now))
        })
    })
    .await;
    let out = measured(lookups).await;
    eprintln!("reaction: kubelet exits measured {}", out.len());
    a.remove_all(T).await;
    Some(out)
}

/// The values of the lookups that found one, in order.
async fn measured(lookups: Vec<tokio::task::JoinHandle<Option<f64>>>) -> Vec<f64> {
    let mut out = Vec::new();
    for l in lookups {
        if let Ok(Some(v)) = l.await {
            out.push(v);
        }
    }
    out
}

/// Polls `/pods` every [`POLL`] until `count` container instances were seen running and then
/// terminated (in `state` or `lastState`: the transition happened while watched); `time` is
/// called once for each with the container's name, its ID and when the poll showed the exit.
async fn watch_exits<T>(
    a: &Agent,
    count: usize,
    time: impl Fn(&str, String, Timestamp) -> tokio::task::JoinHandle<T>,
) -> Vec<tokio::task::JoinHandle<T>> {
    let mut seen_running: HashSet<String> = HashSet::new();
    let mut done: HashSet<String> = HashSet::new();
    let mut lookups = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1800);
    while lookups.len() < count {
        assert!(
            Instant::now() < deadline,
            "only {} exits in 30 min\n{}",
            lookups.len(),
            a.log_tail(30)
        );
        let Some(list) = a.pods().await else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        let now = Timestamp::now();
        for p in &list {
            for (name, id) in terminated_ids(p) {
                if seen_running.contains(&id) && done.insert(id.clone()) {
                    lookups.push(time(&name, id, now));
                }
            }
            seen_running.extend(running_ids(p));
        }
        tokio::time::sleep(POLL).await;
    }
    lookups
}

/// The runtime's exact `finishedAt` of a container (CRI ContainerStatus, nanoseconds), once
/// the CRI has recorded the exit: nodelet may show the exit before that (that is the point).
async fn runtime_finished_at(rt: &RemoteRuntime, id: &str) -> Option<Timestamp> {
    let mut status = rt.container_status(id).await.ok()?;
    for _ in 0..2000 {
        if status.finished_at > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        status = rt.container_status(id).await.ok()?;
    }
    if status.finished_at <= 0 {
        return None;
    }
    Timestamp::from_nanosecond(i128::from(status.finished_at)).ok()
}

/// How many containers the busy pod has, each crash-looping.
const BUSY_CONTAINERS: usize = 8;

/// Exit → terminated in `/pods` for the containers of one busy pod: [`BUSY_CONTAINERS`]
/// containers exiting and restarting (`maxContainerRestartPeriod: 1s`), so an exit often
/// comes while the pod's sync is restarting another of them. Each exit is timed from the
/// container's own clock: testbox's `exiting with 1` line, appended with a nanosecond
/// timestamp to the container's event file just before it exits.
async fn busy_pod_exits(count: usize, root: &Path) -> Vec<f64> {
    let a = Agent::start("busy-exits", FAST_BACKOFF).await;
    let rt = agent::runtime();
    let dir = bench_dir(root, "busy");
    let (mounts, volumes) = volume_lines(&dir);
    let containers: Vec<(String, String)> = (0..BUSY_CONTAINERS)
        .map(|i| {
            // Different run lengths, so the exits spread out instead of coming in lockstep.
            let args = format!(
                "exit, --code, \"1\", --after, {}ms, --event-file, /bench/c{i}.events",
                700 + 131 * i
            );
            (format!("c{i}"), args)
        })
        .collect();
    let spec: Vec<(&str, &str, &str)> = containers
        .iter()
        .map(|(name, args)| (name.as_str(), args.as_str(), mounts.as_str()))
        .collect();
    a.write_manifest(
        "busy",
        &format!("{}{volumes}", pod_yaml("busy", "Always", 1, &spec)),
    );
    let lookups = watch_exits(&a, count, |name, id, now| {
        let (rt, file) = (rt.clone(), dir.join(format!("{name}.events")));
        tokio::spawn(async move {
            let finished = runtime_finished_at(&rt, bare_id(&id)).await?;
            // The instance's own last words: the latest `exiting` line at or before the
            // runtime's finishedAt (the process writes it, then exits; the shim reaps it),
            // within half a second of it (an earlier instance's line is older than that: each
            // runs at least 700 ms).
            let events = parse_events(&std::fs::read_to_string(&file).unwrap_or_default());
            let (exiting, _) = events
                .iter()
                .filter(|(t, e)| *t <= finished && e.starts_with("exiting with"))
                .max_by_key(|(t, _)| *t)?;
            (ms_between(*exiting, finished) < 500.0).then(|| ms_between(*exiting, now))
        })
    })
    .await;
    let out = measured(lookups).await;
    eprintln!("reaction: busy pod exits measured {}", out.len());
    a.remove_all(T).await;
    out
}

/// Milliseconds from each exit to: nodelet's `/pods`, containerd's event, the CRI's status.
struct ExitTimes {
    ours: Vec<f64>,
    events: Vec<f64>,
    cri: Vec<f64>,
    /// `None`: the runtime has no `GetContainerEvents` (containerd 1.6).
    cri_events: Option<Vec<f64>>,
}

/// A hostPath directory for one pod's health and event files.
fn volume_lines(dir: &Path) -> (String, String) {
    (
        "    volumeMounts:\n    - {name: bench, mountPath: /bench}\n".to_string(),
        format!(
            "  volumes:\n  - name: bench\n    hostPath: {{path: {}, type: Directory}}\n",
            dir.display()
        ),
    )
}

fn events_of(dir: &Path) -> Vec<(Timestamp, String)> {
    parse_events(&std::fs::read_to_string(dir.join("events")).unwrap_or_default())
}

/// Waits until an event containing `what` at or after `after` is in `dir`'s event file.
async fn wait_event(dir: &Path, after: Timestamp, what: &str) -> Timestamp {
    let deadline = Instant::now() + T;
    loop {
        if let Some((t, _)) = first_event(&events_of(dir), after, what) {
            return *t;
        }
        assert!(
            Instant::now() < deadline,
            "no event {what:?} after {after} in {}",
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A testbox server with switchable health and an event file in `dir`.
const SERVE: &str =
    "serve, --http, \"8080\", --healthy-file, /bench/healthy, --event-file, /bench/events";

fn probed_pod(name: &str, dir: &Path, probe: &str) -> String {
    let (mounts, volumes) = volume_lines(dir);
    let probe = format!(
        "    {probe}:\n      httpGet: {{path: /healthz, port: 8080}}\n      periodSeconds: 1\n      failureThreshold: 1\n"
    );
    format!(
        "{}{volumes}",
        pod_yaml(
            name,
            "Always",
            2,
            &[("main", SERVE, &format!("{mounts}{probe}"))]
        )
    )
}

fn bench_dir(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

/// Liveness failure (the probe's 500) → SIGTERM in the container, `runs` times on one pod.
async fn liveness(a: &Agent, root: &Path, runs: usize) -> Vec<f64> {
    let dir = bench_dir(root, "live");
    std::fs::write(dir.join("healthy"), "").expect("healthy file");
    let since = Timestamp::now();
    a.write_manifest("live", &probed_pod("live", &dir, "livenessProbe"));
    let mut after = wait_event(&dir, since, "started serve").await;
    let mut out = Vec::new();
    for _ in 0..runs {
        // The current instance answered a probe healthy: the probe worker runs for it.
        let ok = wait_event(&dir, after, "/healthz -> 200").await;
        let removed = Timestamp::now().max(ok);
        std::fs::remove_file(dir.join("healthy")).expect("rm healthy");
        let sigterm = wait_event(&dir, removed, "received SIGTERM").await;
        std::fs::write(dir.join("healthy"), "").expect("healthy file");
        let events = events_of(&dir);
        let fail = first_event(&events, removed, "/healthz -> 500")
            .map(|e| e.0)
            .expect("the failing probe's answer before the SIGTERM");
        out.push(ms_between(fail, sigterm));
        after = wait_event(&dir, sigterm, "started serve").await;
    }
    a.remove_manifest("live");
    out
}

/// Readiness change (the first answer with the new result) → `Ready` in `/pods`, both ways.
async fn readiness(a: &Agent, root: &Path, runs: usize) -> (Vec<f64>, Vec<f64>) {
    let dir = bench_dir(root, "ready");
    std::fs::write(dir.join("healthy"), "").expect("healthy file");
    a.write_manifest("ready", &probed_pod("ready", &dir, "readinessProbe"));
    let full = a.pod_name("ready");
    let ready_is = |want: bool| {
        let full = full.clone();
        move |pods: &[Pod]| {
            pods.iter()
                .any(|p| p.metadata.name.as_deref() == Some(&full) && is_ready(p) == want)
        }
    };
    agent::wait_pods(a, "ready Ready", T, POLL, ready_is(true)).await;
    let (mut down, mut up) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let removed = Timestamp::now();
        std::fs::remove_file(dir.join("healthy")).expect("rm healthy");
        agent::wait_pods(a, "ready not Ready", T, POLL, ready_is(false)).await;
        let seen = Timestamp::now();
        let fail = first_event(&events_of(&dir), removed, "/healthz -> 500")
            .map(|e| e.0)
            .expect("the failing answer");
        down.push(ms_between(fail, seen));
        let created = Timestamp::now();
        std::fs::write(dir.join("healthy"), "").expect("healthy file");
        agent::wait_pods(a, "ready Ready again", T, POLL, ready_is(true)).await;
        let seen = Timestamp::now();
        let ok = first_event(&events_of(&dir), created, "/healthz -> 200")
            .map(|e| e.0)
            .expect("the passing answer");
        up.push(ms_between(ok, seen));
    }
    a.remove_manifest("ready");
    (down, up)
}

/// Manifest removed → SIGTERM in the container, and → the pod gone from `/pods`.
async fn deletion(a: &Agent, root: &Path, runs: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut sigterm, mut gone) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let name = format!("del{i}");
        let dir = bench_dir(root, &name);
        let (mounts, volumes) = volume_lines(&dir);
        let since = Timestamp::now();
        a.write_manifest(
            &name,
            &format!(
                "{}{volumes}",
                pod_yaml(&name, "Always", 5, &[("main", SERVE, &mounts)])
            ),
        );
        wait_event(&dir, since, "started serve").await;
        let full = a.pod_name(&name);
        agent::wait_pods(a, "del running", T, POLL, |pods| {
            pods.iter()
                .any(|p| p.metadata.name.as_deref() == Some(&full) && all_running(p))
        })
        .await;
        let removed = Timestamp::now();
        a.remove_manifest(&name);
        agent::wait_pods(a, "del gone", T, POLL, |pods| {
            !pods
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some(&full))
        })
        .await;
        gone.push(ms_between(removed, Timestamp::now()));
        let t = wait_event(&dir, removed, "received SIGTERM").await;
        sigterm.push(ms_between(removed, t));
    }
    (sigterm, gone)
}

/// The runtime alone: StopContainer called → SIGTERM in the container, `runs` times.
async fn bare_stop(rt: &Arc<RemoteRuntime>, root: &Path, runs: usize) -> Vec<f64> {
    let node = format!("bench-bare-stop-{}", std::process::id());
    let dir = bench_dir(root, "bare");
    let labels: HashMap<String, String> = [
        (labels::NODE_NAME.to_string(), node.clone()),
        (labels::POD_UID.to_string(), "bare-stop".into()),
    ]
    .into();
    let sandbox = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "bare-stop".into(),
            namespace: "bench".into(),
            uid: "bare-stop".into(),
            attempt: 0,
        }),
        log_directory: root.join("bare-logs").display().to_string(),
        labels: labels.clone(),
        ..Default::default()
    };
    let id = rt
        .run_pod_sandbox(sandbox.clone(), "")
        .await
        .expect("RunPodSandbox");
    let mut out = Vec::new();
    for attempt in 0..runs {
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: "main".into(),
                attempt: attempt as u32,
            }),
            image: Some(api::ImageSpec {
                image: TESTBOX.into(),
                ..Default::default()
            }),
            args: vec![
                "serve".into(),
                "--event-file".into(),
                "/bench/events".into(),
            ],
            mounts: vec![api::Mount {
                container_path: "/bench".into(),
                host_path: dir.display().to_string(),
                ..Default::default()
            }],
            log_path: format!("main/{attempt}.log"),
            labels: labels.clone(),
            ..Default::default()
        };
        let since = Timestamp::now();
        let cid = rt
            .create_container(&id, config, sandbox.clone())
            .await
            .expect("CreateContainer");
        rt.start_container(&cid).await.expect("StartContainer");
        wait_event(&dir, since, "started serve").await;
        let called = Timestamp::now();
        rt.stop_container(&cid, Duration::from_secs(2))
            .await
            .expect("StopContainer");
        let t = wait_event(&dir, called, "received SIGTERM").await;
        out.push(ms_between(called, t));
        let _ = rt.remove_container(&cid).await;
    }
    agent::remove_sandboxes(rt.clone(), node).await;
    out
}

pub async fn run(opts: &Options) -> Section {
    let mut rows = Vec::new();
    let load = LoadMark::start();
    let times = exits(opts.exits).await;
    let kubelet = kubelet_exits(opts.exits)
        .await
        .and_then(|v| Summary::of(&v));
    let load = load.end();
    let exit = Summary::of(&times.ours).expect("exits");
    let event = Summary::of(&times.events);
    let cri = Summary::of(&times.cri);
    rows.push(
        Row::new(
            format!(
                "container exit → terminated in `/pods`, ms ({} exits)",
                exit.n
            ),
            ms_str(&exit),
        )
        .kubelet(
            kubelet.as_ref().map_or(String::new(), ms_str),
            kubelet.as_ref().map(|k| exit.p50 / k.p50),
        )
        // The runtime's own notification: containerd's exit event, in the same run.
        .baseline(
            format!(
                "exit → containerd's `/tasks/exit` event reaches a client: {}",
                event.as_ref().map_or("—".into(), ms_str)
            ),
            event.as_ref().map(|e| exit.p99 / e.p99),
        )
        .goal(
            "p99 ≤ 2× the event's p99 and ≤ 50 ms",
            Verdict::at_most(
                exit.p99,
                event.as_ref().map_or(50.0, |e| (2.0 * e.p99).min(50.0)),
            ),
        )
        .load(&load),
    );
    rows.push(
        Row::new(
            "… the same exits → the CRI's ContainerStatus says exited (polled every 2 ms from the event on), ms",
            cri.as_ref().map_or("—".into(), ms_str),
        )
        .load(&load),
    );
    let cri_events = times
        .cri_events
        .as_deref()
        .map(|v| (v.len(), Summary::of(v)));
    rows.push(
        Row::new(
            "… the same exits → the CRI's `GetContainerEvents` CONTAINER_STOPPED_EVENT reaches a client, ms",
            match &cri_events {
                None => "— (the runtime has no GetContainerEvents)".to_string(),
                Some((n, summary)) => format!(
                    "{} (an event for {n} of {} exits)",
                    summary.as_ref().map_or("—".into(), ms_str),
                    exit.n
                ),
            },
        )
        .load(&load),
    );

    let root = tempfile::Builder::new()
        .prefix("nodelet-bench-reaction-")
        .tempdir()
        .expect("tempdir");
    let load = LoadMark::start();
    let busy = busy_pod_exits(opts.exits, root.path()).await;
    let busy = Summary::of(&busy).expect("busy pod exits");
    rows.push(
        Row::new(
            format!(
                "container exit → terminated in `/pods`, {BUSY_CONTAINERS} containers of one pod \
                 crash-looping, from the container's own clock, ms ({} exits)",
                busy.n
            ),
            ms_str(&busy),
        )
        .load(&load.end()),
    );
    let rt = agent::runtime();
    let load = LoadMark::start();
    let bare = bare_stop(&rt, root.path(), opts.reaction_runs).await;
    let bare = Summary::of(&bare).expect("runs");
    let a = Agent::start("reaction", FAST_BACKOFF).await;
    let live = Summary::of(&liveness(&a, root.path(), opts.reaction_runs).await).expect("runs");
    let load_live = load.end();
    rows.push(
        Row::new(
            format!(
                "liveness failure (the probe's 500) → SIGTERM in the container, ms ({} kills)",
                live.n
            ),
            ms_short(&live),
        )
        .baseline(
            format!("StopContainer → SIGTERM: {}", ms_short(&bare)),
            Some(live.p50 / bare.p50),
        )
        .load(&load_live),
    );
    let load = LoadMark::start();
    let (down, up) = readiness(&a, root.path(), opts.reaction_runs).await;
    let (down, up) = (
        Summary::of(&down).expect("runs"),
        Summary::of(&up).expect("runs"),
    );
    let load = load.end();
    rows.push(
        Row::new(
            format!(
                "readiness fails (the probe's 500) → not Ready in `/pods`, ms ({} changes)",
                down.n
            ),
            ms_short(&down),
        )
        .load(&load),
    );
    rows.push(
        Row::new(
            format!(
                "readiness passes (the probe's 200) → Ready in `/pods`, ms ({} changes)",
                up.n
            ),
            ms_short(&up),
        )
        .load(&load),
    );
    let load = LoadMark::start();
    let (sigterm, gone) = deletion(&a, root.path(), opts.reaction_runs.min(10)).await;
    let (sigterm, gone) = (
        Summary::of(&sigterm).expect("runs"),
        Summary::of(&gone).expect("runs"),
    );
    let load = load.end();
    rows.push(
        Row::new(
            format!(
                "manifest removed → SIGTERM in the container, ms ({} pods)",
                sigterm.n
            ),
            ms_short(&sigterm),
        )
        .baseline(
            format!("StopContainer → SIGTERM: {}", ms_short(&bare)),
            Some(sigterm.p50 / bare.p50),
        )
        .load(&load),
    );
    rows.push(
        Row::new(
            format!(
                "manifest removed → pod gone from `/pods` (containers stopped, sandbox removed), ms ({} pods)",
                gone.n
            ),
            ms_short(&gone),
        )
        .load(&load),
    );
    a.remove_all(T).await;
    drop(a);
    Section {
        part: "reaction".into(),
        title: "Reaction".into(),
        measured: format!("{}, nodelet {}", sys::now_utc(), sys::commit()),
        rows,
        notes: vec![
            "Exits: 10 pods whose testbox container exits after 1.0–1.9 s and is restarted \
             (`crashLoopBackOff.maxContainerRestartPeriod: 1s`); `/pods` is polled every 5 ms and \
             each container instance seen running and then terminated (in `state` or \
             `lastState`) is timed from the runtime's exact `finishedAt` (CRI ContainerStatus, \
             nanoseconds; the API field has whole seconds) to the poll that showed it. nodelet \
             reports the exit from containerd's `/tasks/exit` event (exit code and time from the \
             shim) and waits for the CRI only for what needs its agreement (the restart). The \
             baseline follows containerd's `/tasks/exit` events in the same run; beside it, from \
             each event on, the CRI's ContainerStatus polled every 2 ms until it says exited, and \
             the CRI's own `GetContainerEvents` stream (containerd 2.x; 1.6 has none), which \
             nodelet does not use: its stop event comes when the CRI has recorded the exit, \
             after the task event."
                .into(),
            format!(
                "Busy pod: one pod of {BUSY_CONTAINERS} testbox containers, each exiting with 1 \
                 after 0.7–1.6 s and restarted (`maxContainerRestartPeriod: 1s`), so exits come \
                 while the pod's sync is starting its other containers. Each exit is timed from \
                 the container's own clock (the `exiting with 1` line testbox appends with a \
                 nanosecond timestamp to its event file on a hostPath volume just before it \
                 exits) to the first `/pods` poll (every 5 ms) that shows it. nodelet shows an \
                 exit from containerd's event without waiting for the sync under way for the \
                 same pod."
            ),
            "Probes and deletion: testbox (`serve --healthy-file --event-file`) appends every \
             answer and signal with a nanosecond timestamp to a file on a hostPath volume; the \
             benchmark removes the health file and reads back the first `500` answered (the probe \
             that failed, period 1 s, failure threshold 1) and the `SIGTERM` received. Readiness is \
             read from `/pods` polled every 5 ms. The baseline is the runtime's own share of a kill: \
             a bare CRI StopContainer call → the SIGTERM in the same kind of container."
                .into(),
        ],
    }
}
