//! The kubelet's event recorder, locally: `core/v1` Events (`Pulling`, `Started`, `BackOff`, …)
//! built as client-go's `record` package builds them, passed through its correlator
//! (aggregation, counting, spam filter — see [`correlator`]), kept in a bounded local log
//! ([`store`]) that `GET /events` lists, and broadcast to subscribers (the API server sink in
//! cluster mode).
//!
//! Recording never blocks and never fails: an event is a side channel, and a pod worker must
//! not wait on it. Events past the spam limit are dropped with a debug log and counted
//! ([`EventRecorder::dropped`]).

pub mod api_sink;
pub mod correlator;
pub mod selector;
pub mod store;
pub mod table;

use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use tokio::sync::broadcast;

use crate::clock::Clock;
use crate::podspec::ContainerKind;

pub use correlator::Correlator;
pub use selector::{FieldSelector, SelectorError};
pub use store::{EventStore, EVENT_TTL, MAX_EVENTS};
pub use table::event_table;

/// How many events a slow subscriber may fall behind before it misses some (client-go's
/// broadcaster queue, `maxQueuedEvents`).
pub const SUBSCRIBER_QUEUE: usize = 1000;

/// The longest event message nodelet records, in bytes: the API's `NoteLengthLimit` (which
/// the API server enforces on `events.k8s.io` events; on `core/v1` ones it stores anything).
/// A message can carry what a container printed (hook output, probe output), so it is cut here,
/// once, for every event.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// What a cut message ends with.
pub const TRUNCATED_SUFFIX: &str = " ...";

/// `message` cut to [`MAX_MESSAGE_BYTES`]: the longest prefix that ends on a character
/// boundary and leaves room for [`TRUNCATED_SUFFIX`], then the suffix. Shorter messages are
/// returned as they are.
pub fn truncate_message(mut message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let mut end = MAX_MESSAGE_BYTES - TRUNCATED_SUFFIX.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(TRUNCATED_SUFFIX);
    message
}

/// The event type (`core/v1` `EventTypeNormal` / `EventTypeWarning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What an event is about: the kubelet uses the pod, with `fieldPath` `spec.containers{name}` /
/// `spec.initContainers{name}` for container events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub field_path: Option<String>,
}

impl ObjectRef {
    /// The `involvedObject` of an event about this object (all kubelet objects are `v1`).
    pub fn to_object_reference(&self) -> ObjectReference {
        let some = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
        ObjectReference {
            api_version: Some("v1".to_string()),
            kind: some(&self.kind),
            namespace: some(&self.namespace),
            name: some(&self.name),
            uid: some(&self.uid),
            field_path: self.field_path.clone(),
            resource_version: None,
        }
    }
}

/// The reference the kubelet's events about a pod carry (`ref.GetReference(pod)`).
pub fn pod_ref(pod: &Pod) -> ObjectRef {
    ObjectRef {
        kind: "Pod".to_string(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        field_path: None,
    }
}

/// The reference the kubelet's events about its Node carry: no namespace (the events land in
/// `default`), and the node name as UID, as the kubelet's `nodeRef`.
pub fn node_ref(node_name: &str) -> ObjectRef {
    ObjectRef {
        kind: "Node".to_string(),
        namespace: String::new(),
        name: node_name.to_string(),
        uid: node_name.to_string(),
        field_path: None,
    }
}

/// The kubelet's `GenerateContainerRef`: the pod, pointed at one container by `fieldPath`.
pub fn container_ref(pod: &Pod, container: &str, kind: ContainerKind) -> ObjectRef {
    ObjectRef {
        field_path: Some(container_field_path(container, kind)),
        ..pod_ref(pod)
    }
}

/// The `fieldPath` that names a container: `spec.containers{app}`, or
/// `spec.initContainers{name}` for init containers and sidecars, `spec.ephemeralContainers{name}`
/// for ephemeral ones (the kubelet's `fieldPath`).
pub fn container_field_path(container: &str, kind: ContainerKind) -> String {
    let list = match kind {
        ContainerKind::Init => "initContainers",
        ContainerKind::Regular => "containers",
        ContainerKind::Ephemeral => "ephemeralContainers",
    };
    format!("spec.{list}{{{container}}}")
}

/// The event client-go's `makeEvent` builds (before correlation): in the object's namespace
/// (`default` when it has none), named `name`, count 1, first and last seen `now`. `eventTime`
/// stays unset as the kubelet leaves it: on a `core/v1` Event it would make the API server
/// require the `events.k8s.io` fields (`action`, ...).
pub fn make_event(
    object: &ObjectRef,
    type_: EventType,
    reason: &str,
    message: String,
    source: &EventSource,
    name: String,
    now: Timestamp,
) -> Event {
    let namespace = if object.namespace.is_empty() {
        "default".to_string()
    } else {
        object.namespace.clone()
    };
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            ..Default::default()
        },
        involved_object: object.to_object_reference(),
        reason: Some(reason.to_string()),
        message: Some(message),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        type_: Some(type_.as_str().to_string()),
        source: Some(source.clone()),
        reporting_component: source.component.clone(),
        reporting_instance: source.host.clone(),
        ..Default::default()
    }
}

struct State {
    correlator: Correlator,
    store: EventStore,
    dropped: u64,
}

struct Inner {
    clock: Clock,
    source: EventSource,
    state: Mutex<State>,
    updates: broadcast::Sender<Event>,
}

/// Records events; cheap to clone (all clones share one log).
#[derive(Clone)]
pub struct EventRecorder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("source", &self.inner.source)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// `source_component` is `kubelet` (so tools that filter on it find nodelet's events), `host`
    /// the node name.
    pub fn new(clock: Clock, source_component: &str, host: &str) -> Self {
        let (updates, _) = broadcast::channel(SUBSCRIBER_QUEUE);
        EventRecorder {
            inner: Arc::new(Inner {
                clock,
                source: EventSource {
                    component: Some(source_component.to_string()),
                    host: Some(host.to_string()),
                },
                state: Mutex::new(State {
                    correlator: Correlator::new(),
                    store: EventStore::new(),
                    dropped: 0,
                }),
                updates,
            }),
        }
    }

    /// A panic elsewhere while holding the lock leaves consistent data (every update is a
    /// single push or replace), so a poisoned lock is used as is rather than propagating.
    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records one occurrence; returns at once.
    pub fn record(
        &self,
        object: &ObjectRef,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let message = truncate_message(message.into());
        let now = self.inner.clock.now();
        // The kubelet logs every event (StartStructuredLogging at V(3)).
        tracing::debug!(
            object = %format_args!("{}/{}", object.namespace, object.name),
            field_path = object.field_path.as_deref().unwrap_or_default(),
            kind = %object.kind,
            r#type = type_.as_str(),
            reason,
            message = %message,
            "event occurred"
        );
        let mut state = self.state();
        let name = state.correlator.unique_name(&object.name, now);
        let event = make_event(
            object,
            type_,
            reason,
            message,
            &self.inner.source,
            name,
            now,
        );
        match state.correlator.correlate(event, now) {
            Some(event) => {
                state.store.upsert(event.clone(), now);
                // Sent under the lock so subscribers see updates of one event in count order.
                // No subscriber is not an error.
                let _ = self.inner.updates.send(event);
            }
            None => {
                state.dropped += 1;
                tracing::debug!(
                    object = %format_args!("{}/{}", object.namespace, object.name),
                    reason,
                    "event dropped by the spam filter (more than 25 about one object)"
                );
            }
        }
    }

    /// The local event log, least recently updated first.
    pub fn events(&self) -> Vec<Event> {
        let now = self.inner.clock.now();
        let mut state = self.state();
        state.store.prune(now);
        state.store.iter().cloned().collect()
    }

    /// The events about one pod (its containers included), least recently updated first.
    pub fn events_for(&self, pod_uid: &str) -> Vec<Event> {
        let selector = FieldSelector::involved_uid(pod_uid);
        self.events()
            .into_iter()
            .filter(|e| selector.matches(e))
            .collect()
    }

    /// Every new or updated event from now on (an update has the earlier event's name and a
    /// higher `count`). A subscriber more than [`SUBSCRIBER_QUEUE`] events behind misses the
    /// oldest ones (`RecvError::Lagged`) rather than slowing the recorder.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.updates.subscribe()
    }

    /// Events the spam filter has dropped since start.
    pub fn dropped(&self) -> u64 {
        self.state().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use std::time::Duration;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-n1".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            ..Default::default()
        }
    }

    fn base() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn truncate_message_table() {
        let limit = MAX_MESSAGE_BYTES;
        let keep = limit - TRUNCATED_SUFFIX.len();
        let cases: Vec<(String, String)> = vec![
            (String::new(), String::new()),
            ("short".into(), "short".into()),
            ("a".repeat(limit), "a".repeat(limit)),
            ("a".repeat(limit + 1), format!("{} ...", "a".repeat(keep))),
            ("a".repeat(10 * 1024), format!("{} ...", "a".repeat(keep))),
            // A two-byte character across the cut is dropped whole, never split.
            (
                format!("{}é{}", "a".repeat(keep - 1), "b".repeat(100)),
                format!("{} ...", "a".repeat(keep - 1)),
            ),
            // Four-byte characters only: the cut lands on the last whole one.
            ("😀".repeat(300), format!("{} ...", "😀".repeat(keep / 4))),
        ];
        for (input, want) in cases {
            let got = truncate_message(input.clone());
            assert!(got.len() <= limit, "{} bytes", got.len());
            assert_eq!(got, want, "input of {} bytes", input.len());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_recorded_message_is_cut_at_the_limit() {
        let recorder = EventRecorder::new(Clock::starting_at(base()), "kubelet", "n1");
        let long = format!("Exec lifecycle hook failed: {}", "x".repeat(20_000));
        recorder.record(
            &pod_ref(&pod()),
            EventType::Warning,
            "FailedPostStartHook",
            long,
        );
        let events = recorder.events();
        let message = events[0].message.as_deref().unwrap();
        assert_eq!(message.len(), MAX_MESSAGE_BYTES);
        assert!(message.starts_with("Exec lifecycle hook failed: xxx"));
        assert!(message.ends_with(TRUNCATED_SUFFIX));
    }

    #[test]
    fn references_table() {
        let p = pod();
        let cases = [
            (pod_ref(&p), None),
            (
                container_ref(&p, "app", ContainerKind::Regular),
                Some("spec.containers{app}"),
            ),
            (
                container_ref(&p, "init-db", ContainerKind::Init),
                Some("spec.initContainers{init-db}"),
            ),
        ];
        for (r, field_path) in cases {
            assert_eq!(
                r,
                ObjectRef {
                    kind: "Pod".into(),
                    namespace: "default".into(),
                    name: "web-n1".into(),
                    uid: "u1".into(),
                    field_path: field_path.map(str::to_string),
                }
            );
        }
    }

    #[test]
    fn make_event_matches_the_kubelets_shape() {
        let source = EventSource {
            component: Some("kubelet".into()),
            host: Some("n1".into()),
        };
        let object = container_ref(&pod(), "app", ContainerKind::Regular);
        let e = make_event(
            &object,
            EventType::Normal,
            "Pulling",
            "Pulling image \"busybox\"".into(),
            &source,
            "web-n1.188".into(),
            base(),
        );
        let json = serde_json::to_value(&e).unwrap();
        let expected = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "web-n1.188", "namespace": "default"},
            "involvedObject": {
                "apiVersion": "v1", "kind": "Pod", "name": "web-n1", "namespace": "default",
                "uid": "u1", "fieldPath": "spec.containers{app}"
            },
            "reason": "Pulling",
            "message": "Pulling image \"busybox\"",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": "2026-01-01T00:00:00Z",
            "lastTimestamp": "2026-01-01T00:00:00Z",
            "count": 1,
            "type": "Normal",
            "reportingComponent": "kubelet",
            "reportingInstance": "n1",
        });
        assert_eq!(json, expected);

        // An object without a namespace (the Node) is reported in `default`.
        let node = ObjectRef {
            kind: "Node".into(),
            namespace: String::new(),
            name: "n1".into(),
            uid: "n1".into(),
            field_path: None,
        };
        let e = make_event(
            &node,
            EventType::Normal,
            "Starting",
            String::new(),
            &source,
            "n1.1".into(),
            base(),
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.involved_object.namespace, None);
    }

    #[tokio::test(start_paused = true)]
    async fn records_counts_lists_and_broadcasts() {
        let recorder = EventRecorder::new(Clock::starting_at(base()), "kubelet", "n1");
        let mut updates = recorder.subscribe();
        let p = pod();
        let app = container_ref(&p, "app", ContainerKind::Regular);
        let other = Pod {
            metadata: ObjectMeta {
                name: Some("db-n1".into()),
                uid: Some("u2".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };

        recorder.record(&app, EventType::Normal, "Pulled", "already present");
        recorder.record(&pod_ref(&other), EventType::Normal, "Scheduled", "x");
        tokio::time::advance(Duration::from_secs(30)).await;
        recorder.record(&app, EventType::Normal, "Pulled", "already present");

        let all = recorder.events();
        assert_eq!(all.len(), 2);
        // The repeat moved to the end, with count 2 and both times.
        let last = &all[1];
        assert_eq!(last.count, Some(2));
        assert_eq!(last.first_timestamp.as_ref().unwrap().0, base());
        assert_eq!(
            last.last_timestamp.as_ref().unwrap().0.to_string(),
            "2026-01-01T00:00:30Z"
        );
        assert_eq!(
            last.metadata.name.as_deref(),
            Some(format!("web-n1.{:x}", base().as_nanosecond()).as_str())
        );
        // Unique names even at the same instant.
        assert_ne!(all[0].metadata.name, all[1].metadata.name);

        let mine = recorder.events_for("u1");
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].reason.as_deref(), Some("Pulled"));

        let counts: Vec<i32> = (0..3)
            .map(|_| updates.try_recv().unwrap().count.unwrap())
            .collect();
        assert_eq!(counts, [1, 1, 2]);
        assert!(updates.try_recv().is_err());

        // An hour after its last update an event is gone.
        tokio::time::advance(Duration::from_secs(3600 - 30)).await;
        assert_eq!(recorder.events().len(), 1);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(recorder.events().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn spam_is_dropped_and_counted_without_blocking() {
        let recorder = EventRecorder::new(Clock::starting_at(base()), "kubelet", "n1");
        let object = pod_ref(&pod());
        for i in 0..30 {
            recorder.record(
                &object,
                EventType::Warning,
                "Unhealthy",
                format!("probe {}", i % 3),
            );
        }
        assert_eq!(recorder.dropped(), 5);
        let counts: i32 = recorder.events().iter().map(|e| e.count.unwrap()).sum();
        assert_eq!(counts, 25);
    }
}
