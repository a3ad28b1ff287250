//! `kubectl get events` output: the API server's `printEvent` columns (LAST SEEN, TYPE, REASON,
//! OBJECT, MESSAGE), sorted by last seen like `kubectl events`, laid out the way kubectl's tab
//! writer does it.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;

use super::store::last_seen;
use crate::status::printer::{align, human_duration};

/// `translateTimestampSince`: how long ago `then` was; `<unknown>` without a time, up to a second
/// in the future counts as now (clock skew), further is `<invalid>`.
fn since(now: Timestamp, then: Option<Timestamp>) -> String {
    let Some(then) = then else {
        return "<unknown>".to_string();
    };
    let nanos = now.as_nanosecond() - then.as_nanosecond();
    if nanos / 1_000_000_000 < -1 {
        return "<invalid>".to_string();
    }
    let nanos = u64::try_from(nanos).unwrap_or(0);
    human_duration(Duration::from_nanos(nanos))
}

/// `printEvent`'s LAST SEEN: `lastTimestamp`, else the first time (`firstTimestamp`, else
/// `eventTime`); `series.lastObservedTime` wins when the event has a series.
fn last_seen_cell(event: &Event, now: Timestamp) -> String {
    if let Some(t) = event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
    {
        return since(now, Some(t.0));
    }
    let first = event
        .first_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0));
    since(now, event.last_timestamp.as_ref().map(|t| t.0).or(first))
}

/// `printEvent`'s OBJECT: `<lowercased kind>/<name>`, or the kind alone without a name.
fn object_cell(event: &Event) -> String {
    let o = &event.involved_object;
    let kind = o.kind.as_deref().unwrap_or_default().to_lowercase();
    match o.name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => format!("{kind}/{name}"),
        None => kind,
    }
}

/// The LAST SEEN, TYPE, REASON, OBJECT and MESSAGE cells of one event, as [`event_table`]
/// prints them.
pub fn event_cells(event: &Event, now: Timestamp) -> [String; 5] {
    [
        last_seen_cell(event, now),
        event.type_.clone().unwrap_or_default(),
        event.reason.clone().unwrap_or_default(),
        object_cell(event),
        event.message.clone().unwrap_or_default(),
    ]
}

/// The table `nodelet events` prints: events sorted by last seen (oldest first, ties keep their
/// order), with a NAMESPACE column first when they span more than one namespace (as
/// `kubectl get events -A`).
pub fn event_table(events: &[Event], now: Timestamp) -> String {
    if events.is_empty() {
        return "No resources found\n".to_string();
    }
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| last_seen(e));
    let namespaces: std::collections::BTreeSet<Option<&str>> = events
        .iter()
        .map(|e| e.metadata.namespace.as_deref())
        .collect();
    let with_namespace = namespaces.len() > 1;

    let mut header = vec!["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"];
    if with_namespace {
        header.insert(0, "NAMESPACE");
    }
    let mut lines: Vec<Vec<String>> = vec![header.into_iter().map(str::to_string).collect()];
    for event in sorted {
        let mut cells = Vec::with_capacity(6);
        if with_namespace {
            cells.push(event.metadata.namespace.clone().unwrap_or_default());
        }
        cells.extend([
            last_seen_cell(event, now),
            event.type_.clone().unwrap_or_default(),
            event.reason.clone().unwrap_or_default(),
            object_cell(event),
            event.message.clone().unwrap_or_default(),
        ]);
        lines.push(cells);
    }
    align(&lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EventSeries, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};

    const NOW: i64 = 1_767_225_600;

    fn ago(secs: i64) -> Timestamp {
        Timestamp::from_second(NOW - secs).unwrap()
    }

    fn ev(ns: &str, pod: &str, type_: &str, reason: &str, last_ago: i64, message: &str) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{pod}.{last_ago}")),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                name: Some(pod.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            first_timestamp: Some(Time(ago(last_ago + 100))),
            last_timestamp: Some(Time(ago(last_ago))),
            count: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn event_table_cases() {
        let now = ago(0);
        let no_last = Event {
            last_timestamp: None,
            ..ev("default", "web", "Normal", "Scheduled", 0, "x")
        };
        let micro_only = Event {
            first_timestamp: None,
            last_timestamp: None,
            event_time: Some(MicroTime(ago(30))),
            ..ev("default", "web", "Normal", "Pulling", 0, "y")
        };
        let series = Event {
            series: Some(EventSeries {
                count: Some(3),
                last_observed_time: Some(MicroTime(ago(5))),
            }),
            ..ev("default", "web", "Warning", "BackOff", 600, "z")
        };
        let nameless = Event {
            involved_object: ObjectReference {
                kind: Some("Node".into()),
                ..Default::default()
            },
            ..ev(
                "default",
                "n1",
                "Normal",
                "Starting",
                10,
                "Starting kubelet.",
            )
        };
        let cases: Vec<(&str, Vec<Event>, &str)> = vec![
            ("empty", vec![], "No resources found\n"),
            (
                "sorted by last seen, oldest first",
                vec![
                    ev("default", "web", "Normal", "Started", 5, "Started container app"),
                    ev(
                        "default",
                        "web",
                        "Warning",
                        "BackOff",
                        125,
                        "Back-off restarting failed container app in pod web_default(u1)",
                    ),
                    ev("default", "web", "Normal", "Pulled", 3700, "Container image \"busybox\" already present on machine"),
                ],
                concat!(
                    "LAST SEEN   TYPE      REASON    OBJECT    MESSAGE\n",
                    "61m         Normal    Pulled    pod/web   Container image \"busybox\" already present on machine\n",
                    "2m5s        Warning   BackOff   pod/web   Back-off restarting failed container app in pod web_default(u1)\n",
                    "5s          Normal    Started   pod/web   Started container app\n",
                ),
            ),
            (
                "namespace column when several namespaces",
                vec![
                    ev("kube-system", "etcd-n1", "Normal", "Created", 1, "Created container: etcd"),
                    ev("default", "web", "Normal", "Killing", 2, "Stopping container app"),
                ],
                concat!(
                    "NAMESPACE     LAST SEEN   TYPE     REASON    OBJECT        MESSAGE\n",
                    "default       2s          Normal   Killing   pod/web       Stopping container app\n",
                    "kube-system   1s          Normal   Created   pod/etcd-n1   Created container: etcd\n",
                ),
            ),
            (
                "fallbacks: first time, eventTime, series, no name",
                vec![no_last, micro_only, series, nameless],
                concat!(
                    "LAST SEEN   TYPE      REASON      OBJECT    MESSAGE\n",
                    // no lastTimestamp: firstTimestamp (100 s ago) for both sorting and display
                    "100s        Normal    Scheduled   pod/web   x\n",
                    "30s         Normal    Pulling     pod/web   y\n",
                    "10s         Normal    Starting    node      Starting kubelet.\n",
                    "5s          Warning   BackOff     pod/web   z\n",
                ),
            ),
        ];
        for (name, events, expected) in cases {
            assert_eq!(event_table(&events, now), expected, "{name}");
        }
    }

    #[test]
    fn since_table() {
        let now = ago(0);
        let cases: &[(Option<Timestamp>, &str)] = &[
            (None, "<unknown>"),
            (Some(ago(0)), "0s"),
            (Some(ago(-1)), "0s"),
            (Some(ago(-2)), "<invalid>"),
            (Some(ago(59)), "59s"),
            (Some(ago(3 * 3600 + 300)), "3h5m"),
        ];
        for (then, expected) in cases {
            assert_eq!(since(now, *then), *expected, "{then:?}");
        }
    }
}
