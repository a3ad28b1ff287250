//! The local event log: what `GET /events` lists in standalone mode, standing in for the API
//! server's event storage. Bounded twice, like the API server: by age ([`EVENT_TTL`], the API
//! server's default `--event-ttl`, counted from the last update as an etcd lease is renewed on
//! every write) and by number ([`MAX_EVENTS`], so a crash-looping node cannot grow it without
//! limit).

use std::collections::VecDeque;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;

/// At most this many events are kept; the least recently updated go first.
pub const MAX_EVENTS: usize = 1000;
/// Events not updated for this long are dropped (the API server's default `--event-ttl`).
pub const EVENT_TTL: Duration = Duration::from_secs(3600);

/// When an event was last seen: `series.lastObservedTime`, else `lastTimestamp`, else
/// `firstTimestamp`, else `eventTime` (kubectl's order, which also covers events written by
/// `events.k8s.io` clients).
pub fn last_seen(event: &Event) -> Option<Timestamp> {
    if let Some(series) = &event.series {
        if let Some(t) = &series.last_observed_time {
            return Some(t.0);
        }
    }
    event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
}

fn expired(event: &Event, now: Timestamp) -> bool {
    let ttl = EVENT_TTL.as_nanos() as i128;
    last_seen(event).is_none_or(|seen| now.as_nanosecond() - seen.as_nanosecond() >= ttl)
}

/// Events ordered by last update, oldest first.
#[derive(Debug, Clone, Default)]
pub struct EventStore {
    events: VecDeque<Event>,
}

impl EventStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `event`, or replaces the stored event of the same namespace and name (a count
    /// update) and moves it to the end; then applies both bounds.
    pub fn upsert(&mut self, event: Event, now: Timestamp) {
        let same = |e: &Event| {
            e.metadata.name == event.metadata.name
                && e.metadata.namespace == event.metadata.namespace
        };
        if let Some(i) = self.events.iter().position(same) {
            self.events.remove(i);
        }
        self.events.push_back(event);
        while self.events.len() > MAX_EVENTS {
            self.events.pop_front();
        }
        self.prune(now);
    }

    /// Drops expired events. They sit at the front, as updates move events to the end.
    pub fn prune(&mut self, now: Timestamp) {
        while self.events.front().is_some_and(|e| expired(e, now)) {
            self.events.pop_front();
        }
    }

    /// Oldest (least recently updated) first.
    pub fn iter(&self) -> impl Iterator<Item = &Event> {
        self.events.iter()
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    const T0: i64 = 1_767_225_600;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(T0 + secs).unwrap()
    }

    fn ev(name: &str, last: i64, count: i32) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            last_timestamp: Some(Time(at(last))),
            count: Some(count),
            ..Default::default()
        }
    }

    fn names(store: &EventStore) -> Vec<String> {
        store
            .iter()
            .map(|e| format!("{}x{}", e.metadata.name.clone().unwrap(), e.count.unwrap()))
            .collect()
    }

    #[test]
    fn upsert_and_ttl_table() {
        // (writes as (name, lastTimestamp, count), prune at, expected names with counts)
        type Case = (
            &'static str,
            Vec<(&'static str, i64, i32)>,
            i64,
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "in order of writes",
                vec![("a", 0, 1), ("b", 1, 1)],
                2,
                vec!["ax1", "bx1"],
            ),
            (
                "an update replaces and moves to the end",
                vec![("a", 0, 1), ("b", 1, 1), ("a", 2, 2)],
                3,
                vec!["bx1", "ax2"],
            ),
            (
                "expired after an hour without update",
                vec![("a", 0, 1), ("b", 10, 1)],
                3600,
                vec!["bx1"],
            ),
            (
                "an update renews the hour",
                vec![("a", 0, 1), ("b", 10, 1), ("a", 3000, 2)],
                3610,
                vec!["ax2"],
            ),
            (
                "just under an hour stays",
                vec![("a", 0, 1)],
                3599,
                vec!["ax1"],
            ),
        ];
        for (name, writes, prune_at, expected) in cases {
            let mut store = EventStore::new();
            for (n, last, count) in writes {
                store.upsert(ev(n, last, count), at(last));
            }
            store.prune(at(prune_at));
            assert_eq!(names(&store), expected, "{name}");
        }
    }

    #[test]
    fn keeps_at_most_max_events_dropping_the_oldest() {
        let mut store = EventStore::new();
        for i in 0..(MAX_EVENTS + 5) {
            store.upsert(ev(&format!("e{i}"), 0, 1), at(0));
        }
        assert_eq!(store.len(), MAX_EVENTS);
        let first = store.iter().next().unwrap();
        assert_eq!(first.metadata.name.as_deref(), Some("e5"));
        let last = store.iter().last().unwrap();
        assert_eq!(
            last.metadata.name.as_deref(),
            Some(format!("e{}", MAX_EVENTS + 4).as_str())
        );
    }

    #[test]
    fn same_name_in_another_namespace_is_another_event() {
        let mut store = EventStore::new();
        store.upsert(ev("a", 0, 1), at(0));
        let mut other = ev("a", 1, 1);
        other.metadata.namespace = Some("kube-system".into());
        store.upsert(other, at(1));
        assert_eq!(store.len(), 2);
    }
}
