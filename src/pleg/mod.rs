//! Pod lifecycle event generator: tells pod workers that something about their pod changed in
//! the runtime.
//!
//! Two paths feed it. The fast one subscribes to containerd's native event stream (task start,
//! exit, OOM), so a container exit reaches its pod worker within milliseconds instead of the
//! kubelet's one-second relist. The safety net relists sandboxes and containers every
//! `plegRelistPeriod` and diffs against the previous listing, so nothing is lost when the event
//! stream drops or the runtime is not containerd.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prost::Message;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cri::exits::ObservedExits;
use crate::cri::{api, labels, model, Runtime};
use crate::metrics::{metrics, EventLabels};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    ContainerStarted,
    ContainerDied,
    ContainerOom,
    ContainerRemoved,
    /// Created, or a state the diff cannot name.
    ContainerChanged,
    SandboxChanged,
    /// A probe result changed (not a runtime event; routed the same way to wake the worker).
    ProbeResult,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    pub pod_uid: String,
    pub id: String,
    pub kind: EventKind,
}

/// What one relist saw of an object (container or sandbox).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub pod_uid: String,
    pub sandbox: bool,
    pub state: i32,
}

/// The events that turn listing `old` into listing `new`, ordered by object ID.
pub fn relist_diff(
    old: &HashMap<String, Seen>,
    new: &HashMap<String, Seen>,
) -> Vec<PodLifecycleEvent> {
    let mut events = Vec::new();
    for (id, seen) in new {
        let changed = old.get(id).is_none_or(|o| o.state != seen.state);
        if !changed {
            continue;
        }
        let kind = if seen.sandbox {
            EventKind::SandboxChanged
        } else if seen.state == api::ContainerState::ContainerRunning as i32 {
            EventKind::ContainerStarted
        } else if seen.state == api::ContainerState::ContainerExited as i32 {
            EventKind::ContainerDied
        } else {
            EventKind::ContainerChanged
        };
        events.push(PodLifecycleEvent {
            pod_uid: seen.pod_uid.clone(),
            id: id.clone(),
            kind,
        });
    }
    for (id, seen) in old {
        if !new.contains_key(id) {
            events.push(PodLifecycleEvent {
                pod_uid: seen.pod_uid.clone(),
                id: id.clone(),
                kind: if seen.sandbox {
                    EventKind::SandboxChanged
                } else {
                    EventKind::ContainerRemoved
                },
            });
        }
    }
    events.sort_by(|a, b| a.id.cmp(&b.id));
    events
}

/// If a relist has not succeeded for this long, the PLEG reports unhealthy (the kubelet's value).
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);

/// The first wait before subscribing to containerd's events again after the stream was lost.
const EVENTS_RETRY_INITIAL: Duration = Duration::from_millis(500);
/// The longest wait between attempts: a containerd restarted after an outage is followed again
/// within this (the relist covers the gap meanwhile).
const EVENTS_RETRY_MAX: Duration = Duration::from_secs(5);

pub struct Pleg {
    runtime: Arc<dyn Runtime>,
    node_name: String,
    relist_period: Duration,
    tx: mpsc::Sender<PodLifecycleEvent>,
    state: Mutex<PlegState>,
    /// Exits and OOM kills as containerd's events report them, for the pods' statuses.
    exits: ObservedExits,
    /// Told the pod's UID when an exit is recorded in `exits`, to show it in the pod's status
    /// without waiting for the pod's worker.
    show_exits: ExitListener,
    /// Where a SIGKILL's OOM is looked up before its event comes; none without cgroup access
    /// (the component-test harness).
    oom_kills: Option<Arc<dyn OomKills>>,
}

/// Called with a pod's UID when containerd's event announced an exit of one of its containers.
pub type ExitListener = Arc<dyn Fn(&str) + Send + Sync>;

/// Whether the kernel OOM-killed in a container's cgroup, from the kernel's own count: asked
/// for a SIGKILL exit without its `/tasks/oom` event yet, which can come after the exit (and
/// after the CRI recorded the exit as `Error`).
#[async_trait::async_trait]
pub trait OomKills: Send + Sync {
    /// `Some(true)` when it did; `None` when it cannot be known (the cgroup is gone).
    async fn oom_killed(&self, container_id: &str) -> Option<bool>;
}

#[derive(Default)]
struct PlegState {
    seen: HashMap<String, Seen>,
    last_relist: Option<Instant>,
    /// The set of pod UIDs the runtime has objects for, after the last relist.
    runtime_pods: Vec<String>,
}

impl Pleg {
    pub fn new(
        runtime: Arc<dyn Runtime>,
        node_name: String,
        relist_period: Duration,
        tx: mpsc::Sender<PodLifecycleEvent>,
        exits: ObservedExits,
        show_exits: ExitListener,
        oom_kills: Option<Arc<dyn OomKills>>,
    ) -> Arc<Self> {
        Arc::new(Pleg {
            runtime,
            node_name,
            relist_period,
            tx,
            state: Mutex::default(),
            exits,
            show_exits,
            oom_kills,
        })
    }

    fn lock(&self) -> MutexGuard<'_, PlegState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the PLEG is not healthy, in the kubelet's words (`GenericPLEG.Healthy`): no relist
    /// has succeeded yet, or none within [`RELIST_THRESHOLD`].
    pub fn health(&self) -> Result<(), &'static str> {
        match self.lock().last_relist {
            None => Err("pleg has yet to be successful"),
            Some(t) if t.elapsed() >= RELIST_THRESHOLD => {
                Err("pleg was last seen active more than 3m0s ago")
            }
            Some(_) => Ok(()),
        }
    }

    fn send(&self, event: PodLifecycleEvent, source: &str) {
        metrics()
            .pleg_events_total
            .get_or_create(&EventLabels {
                source: source.to_string(),
            })
            .inc();
        // A full channel means workers are already busy syncing; the next relist resends
        // anything that matters, so dropping here is safe and keeps the PLEG from blocking.
        if let Err(e) = self.tx.try_send(event) {
            tracing::debug!(error = %e, "pleg event dropped");
        }
    }

    /// One relist: list everything this node owns and send the differences.
    pub async fn relist(&self) -> crate::cri::Result<()> {
        let started = Instant::now();
        let selector = model::node_selector(&self.node_name);
        let sandboxes = self
            .runtime
            .list_pod_sandbox(Some(api::PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await?;
        let containers = self
            .runtime
            .list_containers(Some(api::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await?;
        let mut new = HashMap::new();
        for s in sandboxes {
            if let Some(uid) = s.labels.get(labels::POD_UID) {
                new.insert(
                    s.id,
                    Seen {
                        pod_uid: uid.clone(),
                        sandbox: true,
                        state: s.state,
                    },
                );
            }
        }
        for c in containers {
            if let Some(uid) = c.labels.get(labels::POD_UID) {
                new.insert(
                    c.id,
                    Seen {
                        pod_uid: uid.clone(),
                        sandbox: false,
                        state: c.state,
                    },
                );
            }
        }
        let events = {
            let mut st = self.lock();
            let events = relist_diff(&st.seen, &new);
            let mut uids: Vec<String> = new.values().map(|s| s.pod_uid.clone()).collect();
            uids.sort();
            uids.dedup();
            st.runtime_pods = uids;
            st.seen = new;
            st.last_relist = Some(Instant::now());
            events
        };
        for e in events {
            if e.kind == EventKind::ContainerRemoved {
                self.exits.removed(&e.id);
            }
            self.send(e, "relist");
        }
        metrics()
            .pleg_relist_duration_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Pod UIDs that had sandboxes or containers at the last relist.
    pub fn runtime_pods(&self) -> Vec<String> {
        self.lock().runtime_pods.clone()
    }

    pub async fn run_relist(self: Arc<Self>, cancel: CancellationToken) {
        let mut ticker = tokio::time::interval(self.relist_period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            if let Err(e) = self.relist().await {
                tracing::warn!(error = %e, "pleg relist failed");
            }
        }
    }

    /// The pod UID an object belongs to and whether it is a sandbox, from the last relist or by
    /// asking the runtime.
    async fn pod_of(&self, id: &str) -> Option<(String, bool)> {
        if let Some(seen) = self.lock().seen.get(id) {
            return Some((seen.pod_uid.clone(), seen.sandbox));
        }
        let owned = |l: &std::collections::HashMap<String, String>| {
            (l.get(labels::NODE_NAME) == Some(&self.node_name))
                .then(|| l.get(labels::POD_UID).cloned())
                .flatten()
        };
        if let Ok(status) = self.runtime.container_status(id).await {
            return owned(&status.labels).map(|uid| (uid, false));
        }
        if let Ok(status) = self.runtime.pod_sandbox_status(id).await {
            return owned(&status.labels).map(|uid| (uid, true));
        }
        None
    }

    /// Waits until the CRI reports the container as no longer running. containerd publishes the
    /// task exit before its CRI plugin has recorded it; waking the worker before that would make
    /// it read a stale "running" state.
    async fn await_cri_exit(&self, id: &str) {
        // The CRI usually catches up within tens of milliseconds: poll briskly at first, then
        // back off so a slow runtime is not hammered.
        let started = Instant::now();
        let deadline = started + Duration::from_secs(2);
        while Instant::now() < deadline {
            match self.runtime.container_status(id).await {
                Ok(s) if s.state == api::ContainerState::ContainerRunning as i32 => {}
                _ => return,
            }
            let delay = if started.elapsed() < Duration::from_millis(200) {
                Duration::from_millis(2)
            } else {
                Duration::from_millis(50)
            };
            tokio::time::sleep(delay).await;
        }
    }

    async fn handle_envelope(self: Arc<Self>, topic: String, event: prost_types::Any) {
        let (id, kind, exit) = match topic.as_str() {
            "/tasks/start" => {
                match containerd_client::events::TaskStart::decode(event.value.as_slice()) {
                    Ok(e) => (e.container_id, EventKind::ContainerStarted, None),
                    Err(_) => return,
                }
            }
            "/tasks/exit" => {
                match containerd_client::events::TaskExit::decode(event.value.as_slice()) {
                    // An exec'd process (probe, hook) exiting is not a container state change.
                    Ok(e) if !e.id.is_empty() && e.id != e.container_id => return,
                    Ok(e) => {
                        let exit = exit_of(&e);
                        (e.container_id, EventKind::ContainerDied, Some(exit))
                    }
                    Err(_) => return,
                }
            }
            "/tasks/oom" => {
                match containerd_client::events::TaskOom::decode(event.value.as_slice()) {
                    Ok(e) => (e.container_id, EventKind::ContainerOom, None),
                    Err(_) => return,
                }
            }
            _ => return,
        };
        if let Some((code, at)) = exit {
            return self.runtime_exit(&id, code, at).await;
        }
        let Some((pod_uid, sandbox)) = self.pod_of(&id).await else {
            return;
        };
        // A sandbox's pause process is not a container with a status of its own.
        if kind == EventKind::ContainerOom && !sandbox {
            self.exits.oom_killed(&id);
        }
        tracing::debug!(pod.uid = %pod_uid, id = %id, ?kind, "containerd event");
        self.send(PodLifecycleEvent { pod_uid, id, kind }, "containerd");
    }

    /// What containerd's `/tasks/exit` says of a container's main process: `code` at `at`.
    /// The pod's status shows the exit at once (recorded in the exits, then the listener); the
    /// worker is woken now, and again once the CRI agrees, for what needs its agreement (a
    /// restart, the pod's end).
    pub async fn runtime_exit(&self, id: &str, code: i32, at: jiff::Timestamp) {
        let Some((pod_uid, sandbox)) = self.pod_of(id).await else {
            return;
        };
        let kind = EventKind::ContainerDied;
        if !sandbox {
            self.exits.exited(id, code, at);
            tracing::debug!(pod.uid = %pod_uid, id = %id, code, "containerd exit event");
            let mut record = self.exits.get(id).unwrap_or_default();
            if asks_cgroup_for_oom(code, record.oom) {
                if let Some(oom_kills) = &self.oom_kills {
                    let killed = oom_kills.oom_killed(id).await;
                    tracing::debug!(pod.uid = %pod_uid, id = %id, ?killed, "OOM kills in the container's cgroup");
                    if killed == Some(true) {
                        self.exits.oom_killed(id);
                        record.oom = true;
                    }
                }
            }
            if shown_at_once(code, record.oom, record.stopped_by_sync) {
                (self.show_exits)(&pod_uid);
            }
            self.send(
                PodLifecycleEvent {
                    pod_uid: pod_uid.clone(),
                    id: id.to_string(),
                    kind,
                },
                "containerd",
            );
            self.await_cri_exit(id).await;
        }
        tracing::debug!(pod.uid = %pod_uid, id = %id, ?kind, "containerd event");
        self.send(
            PodLifecycleEvent {
                pod_uid,
                id: id.to_string(),
                kind,
            },
            "containerd",
        );
    }

    /// Follows containerd's task events until cancelled, reconnecting with backoff. Each event
    /// is handled in a task of `tasks` (the pod lookup and the wait for the CRI to see an exit
    /// must not hold up the stream).
    pub async fn run_events(
        self: Arc<Self>,
        endpoint: String,
        namespace: String,
        tasks: TaskTracker,
        cancel: CancellationToken,
    ) {
        let mut backoff = EVENTS_RETRY_INITIAL;
        loop {
            let attempt =
                self.clone()
                    .follow_events(&endpoint, &namespace, &tasks, &cancel, &mut backoff);
            match attempt.await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, endpoint, "containerd event stream unavailable; relist continues, retrying");
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(EVENTS_RETRY_MAX);
        }
    }

    async fn follow_events(
        self: Arc<Self>,
        endpoint: &str,
        namespace: &str,
        tasks: &TaskTracker,
        cancel: &CancellationToken,
        backoff: &mut Duration,
    ) -> Result<(), String> {
        let path = crate::cri::remote::socket_path(endpoint).map_err(|e| e.to_string())?;
        let subscribe = async {
            let channel = containerd_client::connect(&path)
                .await
                .map_err(|e| format!("connect {}: {e}", path.display()))?;
            let mut client =
                containerd_client::services::v1::events_client::EventsClient::new(channel);
            let request = containerd_client::services::v1::SubscribeRequest {
                filters: vec![format!("namespace=={namespace},topic~=\"^/tasks/\"")],
            };
            client
                .subscribe(request)
                .await
                .map_err(|e| format!("subscribe: {e}"))
        };
        // containerd answers a subscription (sends the response headers) only with its first
        // event, so on a quiet node this stays pending: it must give way to cancellation too.
        let mut stream = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            response = subscribe => response?.into_inner(),
        };
        tracing::info!(endpoint, namespace, "following containerd task events");
        // Subscribed: the next loss of the stream (a containerd restart) retries quickly again.
        *backoff = EVENTS_RETRY_INITIAL;
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                next = stream.next() => next,
            };
            match next {
                Some(Ok(envelope)) => {
                    if let Some(event) = envelope.event {
                        tasks.spawn(self.clone().handle_envelope(envelope.topic, event));
                    }
                }
                Some(Err(status)) => return Err(format!("stream: {status}")),
                None => return Err("stream ended".into()),
            }
        }
    }
}

/// Whether an exit is shown in the pod's status at once, ahead of the worker. A SIGKILL (137)
/// may be the kernel's OOM kill, whose `/tasks/oom` event is handled in a task of its own and
/// may not be recorded yet: such an exit waits for the worker's sync, so it does not show as
/// `Error` before `OOMKilled`. Nor is the exit of a container the pod's sync stopped itself
/// (its definition changed, a probe failed): the sync that stopped it starts the next one and
/// publishes, as the kubelet's does. Shown at once, the exit could be final: the API server
/// refuses a container of a `restartPolicy: Never` pod a running state after a terminated one.
fn shown_at_once(code: i32, oom_recorded: bool, stopped_by_sync: bool) -> bool {
    !stopped_by_sync && crate::cri::exits::known_from_events(code, oom_recorded)
}

/// Whether an exit's OOM is looked up in the container's cgroup: a SIGKILL (137) without the
/// OOM event recorded. The kernel counts an OOM kill before it sends the signal, so the count
/// is final at the exit; only the runtime's removal of the cgroup can leave it unknown.
fn asks_cgroup_for_oom(code: i32, oom_recorded: bool) -> bool {
    code == 137 && !oom_recorded
}

/// The exit status and time a `/tasks/exit` event carries; a missing or out-of-range time reads
/// as now (the event is published at the exit), a status beyond `i32` saturates.
fn exit_of(e: &containerd_client::events::TaskExit) -> (i32, jiff::Timestamp) {
    let at = e
        .exited_at
        .as_ref()
        .and_then(|t| jiff::Timestamp::new(t.seconds, t.nanos).ok())
        .unwrap_or_else(jiff::Timestamp::now);
    (i32::try_from(e.exit_status).unwrap_or(i32::MAX), at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(uid: &str, sandbox: bool, state: api::ContainerState) -> Seen {
        Seen {
            pod_uid: uid.into(),
            sandbox,
            state: state as i32,
        }
    }

    #[test]
    fn a_sigkill_shows_at_once_only_with_its_oom_recorded() {
        for (code, oom, by_sync, want) in [
            (1, false, false, true),
            (0, false, false, true),
            (143, false, false, true),
            (137, false, false, false),
            (137, true, false, true),
            // stopped by the pod's sync: never ahead of it
            (143, false, true, false),
            (0, false, true, false),
            (137, true, true, false),
        ] {
            assert_eq!(
                shown_at_once(code, oom, by_sync),
                want,
                "exit {code}, oom {oom}, stopped by the sync {by_sync}"
            );
        }
    }

    #[test]
    fn only_a_sigkill_without_its_oom_asks_the_cgroup() {
        for (code, oom, want) in [
            (137, false, true),
            (137, true, false),
            (143, false, false),
            (1, false, false),
            (0, false, false),
        ] {
            assert_eq!(
                asks_cgroup_for_oom(code, oom),
                want,
                "exit {code}, oom {oom}"
            );
        }
    }

    #[test]
    fn diff_table() {
        use api::ContainerState::*;
        use EventKind::*;
        type Listing = Vec<(&'static str, Seen)>;
        type Expected = Vec<(&'static str, &'static str, EventKind)>;
        let cases: Vec<(&str, Listing, Listing, Expected)> = vec![
            (
                "nothing changes",
                vec![("c1", seen("u", false, ContainerRunning))],
                vec![("c1", seen("u", false, ContainerRunning))],
                vec![],
            ),
            (
                "new running container",
                vec![],
                vec![("c1", seen("u", false, ContainerRunning))],
                vec![("u", "c1", ContainerStarted)],
            ),
            (
                "container exits",
                vec![("c1", seen("u", false, ContainerRunning))],
                vec![("c1", seen("u", false, ContainerExited))],
                vec![("u", "c1", ContainerDied)],
            ),
            (
                "container created",
                vec![],
                vec![("c1", seen("u", false, ContainerCreated))],
                vec![("u", "c1", ContainerChanged)],
            ),
            (
                "container removed",
                vec![("c1", seen("u", false, ContainerExited))],
                vec![],
                vec![("u", "c1", ContainerRemoved)],
            ),
            (
                "sandbox appears and goes",
                vec![("s1", seen("u", true, ContainerCreated))],
                vec![("s2", seen("v", true, ContainerCreated))],
                vec![("u", "s1", SandboxChanged), ("v", "s2", SandboxChanged)],
            ),
        ];
        for (name, old, new, want) in cases {
            let old: HashMap<String, Seen> =
                old.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let new: HashMap<String, Seen> =
                new.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let got: Vec<(String, String, EventKind)> = relist_diff(&old, &new)
                .into_iter()
                .map(|e| (e.pod_uid, e.id, e.kind))
                .collect();
            let want: Vec<(String, String, EventKind)> = want
                .into_iter()
                .map(|(u, i, k)| (u.to_string(), i.to_string(), k))
                .collect();
            assert_eq!(got, want, "case: {name}");
        }
    }

    /// A stand-in for containerd's event service that answers a subscription the way containerd
    /// does on a quiet node: not at all (containerd sends the response headers with the first
    /// event). Notifies `requests` of each call.
    #[derive(Clone)]
    struct SilentEvents {
        requests: Arc<tokio::sync::Notify>,
    }

    impl tonic::server::NamedService for SilentEvents {
        const NAME: &'static str = "containerd.services.events.v1.Events";
    }

    impl tower::Service<tonic::codegen::http::Request<tonic::body::Body>> for SilentEvents {
        type Response = tonic::codegen::http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
            self.requests.notify_one();
            Box::pin(std::future::pending())
        }
    }

    /// Stopping nodelet on a node where nothing happened since it subscribed to containerd's
    /// events: the pending subscription must not hold up the shutdown (it did, for the 5 s drain
    /// timeout, seen with `systemctl stop nodelet`).
    #[tokio::test]
    async fn a_subscription_containerd_has_not_answered_ends_when_cancelled() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("containerd.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let incoming = futures::stream::unfold(listener, |l| async move {
            Some((l.accept().await.map(|(s, _)| s), l))
        });
        let requests = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(SilentEvents {
                    requests: requests.clone(),
                })
                .serve_with_incoming(incoming),
        );
        let (tx, _rx) = mpsc::channel(16);
        let runtime = Arc::new(crate::cri::fake::FakeRuntime::default());
        let pleg = Pleg::new(
            runtime,
            "node1".into(),
            Duration::from_secs(1),
            tx,
            ObservedExits::new(),
            Arc::new(|_: &str| {}),
            None,
        );
        let cancel = CancellationToken::new();
        let events = tokio::spawn(pleg.run_events(
            format!("unix://{}", socket.display()),
            "k8s.io".into(),
            TaskTracker::new(),
            cancel.clone(),
        ));
        // The subscription reached containerd's stand-in and waits for an answer.
        requests.notified().await;
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(30), events)
            .await
            .expect("run_events returns once cancelled")
            .unwrap();
    }

    /// The labels of pod `uid1` on `node1`, as nodelet puts them on its sandboxes and containers.
    fn uid1_labels() -> std::collections::HashMap<String, String> {
        [
            (labels::POD_UID.to_string(), "uid1".to_string()),
            (labels::NODE_NAME.to_string(), "node1".to_string()),
        ]
        .into()
    }

    /// A sandbox of pod `uid1` in `fake`.
    async fn uid1_sandbox(fake: &crate::cri::fake::FakeRuntime) -> String {
        fake.run_pod_sandbox(
            api::PodSandboxConfig {
                labels: uid1_labels(),
                ..Default::default()
            },
            "",
        )
        .await
        .unwrap()
    }

    /// Container `app` (image `img`) of pod `uid1` in `sandbox`, created, not started.
    async fn app_container(fake: &crate::cri::fake::FakeRuntime, sandbox: &str) -> String {
        fake.create_container(
            sandbox,
            api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: "img".into(),
                    ..Default::default()
                }),
                labels: uid1_labels(),
                ..Default::default()
            },
            api::PodSandboxConfig::default(),
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn relist_reports_fake_runtime_changes() {
        use crate::cri::fake::FakeRuntime;
        let fake = Arc::new(FakeRuntime::default());
        fake.add_image("img");
        let (tx, mut rx) = mpsc::channel(16);
        let pleg = Pleg::new(
            fake.clone(),
            "node1".into(),
            Duration::from_secs(1),
            tx,
            ObservedExits::new(),
            Arc::new(|_: &str| {}),
            None,
        );
        // The kubelet's words before the first relist.
        assert_eq!(pleg.health(), Err("pleg has yet to be successful"));
        let sandbox = uid1_sandbox(&fake).await;
        pleg.relist().await.unwrap();
        assert_eq!(pleg.health(), Ok(()));
        assert_eq!(rx.try_recv().unwrap().kind, EventKind::SandboxChanged);
        let id = app_container(&fake, &sandbox).await;
        fake.start_container(&id).await.unwrap();
        pleg.relist().await.unwrap();
        let e = rx.try_recv().unwrap();
        assert_eq!(
            (e.pod_uid.as_str(), e.kind),
            ("uid1", EventKind::ContainerStarted)
        );
        fake.exit_container("app", 1);
        pleg.relist().await.unwrap();
        assert_eq!(rx.try_recv().unwrap().kind, EventKind::ContainerDied);
        assert!(rx.try_recv().is_err());
        assert_eq!(pleg.health(), Ok(()));
        assert_eq!(pleg.runtime_pods(), vec!["uid1".to_string()]);
    }

    /// containerd's exit event reaches the status at once (recorded, the worker woken) while
    /// the CRI still says running; the worker is woken again when the CRI agrees.
    #[tokio::test]
    async fn an_exit_event_is_recorded_and_wakes_the_worker_before_the_cri_agrees() {
        use crate::cri::fake::FakeRuntime;
        let fake = Arc::new(FakeRuntime::default());
        fake.add_image("img");
        let sandbox = uid1_sandbox(&fake).await;
        let id = app_container(&fake, &sandbox).await;
        fake.start_container(&id).await.unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let exits = ObservedExits::new();
        let shown = Arc::new(Mutex::new(Vec::<String>::new()));
        let listener = {
            let shown = shown.clone();
            let exits = exits.clone();
            let id = id.clone();
            Arc::new(move |uid: &str| {
                // Told after the record is there, so the status it publishes shows the exit.
                assert!(exits.get(&id).is_some_and(|r| r.exit.is_some()));
                shown.lock().unwrap().push(uid.to_string());
            })
        };
        let pleg = Pleg::new(
            fake.clone(),
            "node1".into(),
            Duration::from_secs(1),
            tx,
            exits.clone(),
            listener,
            None,
        );
        let exit = containerd_client::events::TaskExit {
            container_id: id.clone(),
            id: id.clone(),
            pid: 42,
            exit_status: 3,
            exited_at: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 5,
            }),
        };
        let handled = tokio::spawn(pleg.clone().handle_envelope(
            "/tasks/exit".into(),
            prost_types::Any {
                type_url: String::new(),
                value: exit.encode_to_vec(),
            },
        ));
        // Woken while the CRI still says running, with the event's exit recorded.
        let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("woken before the CRI agrees")
            .unwrap();
        assert_eq!(
            (first.pod_uid.as_str(), first.kind),
            ("uid1", EventKind::ContainerDied)
        );
        assert_eq!(
            exits.get(&id).and_then(|r| r.exit),
            Some((3, jiff::Timestamp::new(1_700_000_000, 5).unwrap()))
        );
        assert_eq!(
            fake.container_status(&id).await.unwrap().state,
            api::ContainerState::ContainerRunning as i32
        );
        assert_eq!(
            *shown.lock().unwrap(),
            ["uid1"],
            "the status shows the exit"
        );
        // The CRI catches up: the second wake-up.
        fake.exit_container("app", 3);
        let second = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("woken again once the CRI agrees")
            .unwrap();
        assert_eq!(second.kind, EventKind::ContainerDied);
        handled.await.unwrap();

        // An exec'd process's exit is not the container's.
        let exec_exit = containerd_client::events::TaskExit {
            id: "exec-1".into(),
            ..exit
        };
        pleg.clone()
            .handle_envelope(
                "/tasks/exit".into(),
                prost_types::Any {
                    type_url: String::new(),
                    value: exec_exit.encode_to_vec(),
                },
            )
            .await;
        assert!(rx.try_recv().is_err());

        // The sandbox's pause process exiting wakes the worker but leaves no record: the
        // sandbox has no container status to show it.
        let pause_exit = containerd_client::events::TaskExit {
            container_id: sandbox.clone(),
            id: sandbox.clone(),
            ..Default::default()
        };
        pleg.clone()
            .handle_envelope(
                "/tasks/exit".into(),
                prost_types::Any {
                    type_url: String::new(),
                    value: pause_exit.encode_to_vec(),
                },
            )
            .await;
        assert_eq!(rx.try_recv().unwrap().pod_uid, "uid1");
        assert_eq!(exits.get(&sandbox), None);
        assert_eq!(
            *shown.lock().unwrap(),
            ["uid1"],
            "neither an exec'd process nor the sandbox has an exit to show"
        );
    }
}
