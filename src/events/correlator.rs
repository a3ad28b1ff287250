//! client-go's `EventCorrelator` (`tools/record/events_cache.go`), which every kubelet event
//! passes through before it is written: aggregation of similar events, de-duplication of
//! identical ones into a `count`, and a per-object spam filter.
//!
//! Pure: every decision takes `now`, so tables drive it exactly. The three caches are LRUs of
//! [`LRU_CACHE_ENTRIES`] keys each, like client-go's, so memory stays bounded however many
//! objects come and go.
//!
//! The order is client-go's: aggregate → observe (count) → spam filter. The filter therefore sees
//! count updates too, and a dropped event still advanced the aggregation and count caches (the
//! next accepted repeat jumps its `count`), exactly as the kubelet behaves.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// client-go's `maxLruCacheEntries`: size of each correlator cache.
pub const LRU_CACHE_ENTRIES: usize = 4096;
/// client-go's `defaultAggregateMaxEvents`: this many distinct messages of one
/// object/type/reason within [`AGGREGATE_INTERVAL`] turn into one combined event.
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// client-go's `defaultAggregateIntervalInSeconds`: a gap longer than this starts a new group.
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// client-go's `EventAggregatorByReasonMessageFunc` prefix.
pub const AGGREGATE_MESSAGE_PREFIX: &str = "(combined from similar events): ";
/// client-go's `defaultSpamBurst`: events one source may emit about one object at once.
pub const SPAM_BURST: u32 = 25;
/// client-go's `defaultSpamQPS` (1/300): one more event allowed per object every 5 minutes.
pub const SPAM_REFILL_INTERVAL: Duration = Duration::from_secs(300);

/// A least-recently-used map (groupcache's `lru.Cache` as client-go uses it: `Get` and `Add`
/// both count as a use; adding past capacity evicts the least recently used key).
#[derive(Debug, Clone)]
pub(crate) struct Lru<V> {
    capacity: usize,
    tick: u64,
    entries: HashMap<String, (V, u64)>,
    by_use: BTreeMap<u64, String>,
}

impl<V> Lru<V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Lru {
            capacity: capacity.max(1),
            tick: 0,
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// The value of `key`, created with `init` when missing; either way `key` becomes the most
    /// recently used.
    pub(crate) fn get_or_insert_with(&mut self, key: &str, init: impl FnOnce() -> V) -> &mut V {
        if !self.entries.contains_key(key) && self.entries.len() >= self.capacity {
            if let Some((_, oldest)) = self.by_use.pop_first() {
                self.entries.remove(&oldest);
            }
        }
        self.tick += 1;
        let tick = self.tick;
        let slot = self
            .entries
            .entry(key.to_string())
            .or_insert_with(|| (init(), tick));
        if slot.1 != tick {
            self.by_use.remove(&slot.1);
            slot.1 = tick;
        }
        self.by_use.insert(tick, key.to_string());
        &mut slot.0
    }
}

/// A token bucket (`golang.org/x/time/rate` as `flowcontrol.NewTokenBucketRateLimiter` uses it),
/// kept in nanoseconds of refill time so the arithmetic is exact: it starts full with `burst`
/// tokens and gains one every `refill`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TokenBucket {
    /// Stored refill time; one token is worth `refill` of it.
    credit_ns: u128,
    last: Timestamp,
}

impl TokenBucket {
    pub(crate) fn full(burst: u32, refill: Duration, now: Timestamp) -> Self {
        TokenBucket {
            credit_ns: u128::from(burst) * refill.as_nanos(),
            last: now,
        }
    }

    /// Takes one token if there is one (`TryAccept`). Time going backwards adds nothing.
    pub(crate) fn try_accept(&mut self, burst: u32, refill: Duration, now: Timestamp) -> bool {
        let elapsed = u128::try_from(now.as_nanosecond() - self.last.as_nanosecond()).unwrap_or(0);
        let capacity = u128::from(burst) * refill.as_nanos();
        self.credit_ns = self.credit_ns.saturating_add(elapsed).min(capacity);
        self.last = now;
        let cost = refill.as_nanos();
        if self.credit_ns >= cost {
            self.credit_ns -= cost;
            true
        } else {
            false
        }
    }
}

fn text(field: &Option<String>) -> &str {
    field.as_deref().unwrap_or_default()
}

/// Joins key parts with NUL, which no Kubernetes name, reason or path contains (client-go joins
/// with "", which can collide; the grouping is otherwise the same).
fn join(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

fn source_parts(event: &Event) -> [&str; 2] {
    let source = event.source.as_ref();
    [
        source.map_or("", |s| text(&s.component)),
        source.map_or("", |s| text(&s.host)),
    ]
}

/// client-go's `getEventKey`: everything that makes two events "the same event".
pub fn event_key(event: &Event) -> String {
    let o = &event.involved_object;
    let [component, host] = source_parts(event);
    join(&[
        component,
        host,
        text(&o.kind),
        text(&o.namespace),
        text(&o.name),
        text(&o.field_path),
        text(&o.uid),
        text(&o.api_version),
        text(&event.type_),
        text(&event.reason),
        text(&event.message),
    ])
}

/// client-go's `getSpamKey`: the source and the object (not the container: `fieldPath` is left
/// out, so all containers of a pod share one budget).
pub fn spam_key(event: &Event) -> String {
    let o = &event.involved_object;
    let [component, host] = source_parts(event);
    join(&[
        component,
        host,
        text(&o.kind),
        text(&o.namespace),
        text(&o.name),
        text(&o.uid),
        text(&o.api_version),
    ])
}

/// client-go's `EventAggregatorByReasonFunc`: the group (source, object without `fieldPath`,
/// type, reason, reporting controller and instance) and the member (the message).
pub fn aggregate_key(event: &Event) -> (String, String) {
    let o = &event.involved_object;
    let [component, host] = source_parts(event);
    let group = join(&[
        component,
        host,
        text(&o.kind),
        text(&o.namespace),
        text(&o.name),
        text(&o.uid),
        text(&o.api_version),
        text(&event.type_),
        text(&event.reason),
        text(&event.reporting_component),
        text(&event.reporting_instance),
    ]);
    (group, text(&event.message).to_string())
}

#[derive(Debug, Clone)]
struct AggregateRecord {
    messages: HashSet<String>,
    last: Option<Timestamp>,
}

#[derive(Debug, Clone)]
struct Observation {
    count: i32,
    first_timestamp: Option<Time>,
    name: String,
}

/// The correlator's state. One per recorder (per sink, in client-go).
#[derive(Debug, Clone)]
pub struct Correlator {
    aggregates: Lru<AggregateRecord>,
    observations: Lru<Observation>,
    spam: Lru<TokenBucket>,
    last_name_nanos: i128,
}

impl Default for Correlator {
    fn default() -> Self {
        Self::new()
    }
}

impl Correlator {
    pub fn new() -> Self {
        Correlator {
            aggregates: Lru::new(LRU_CACHE_ENTRIES),
            observations: Lru::new(LRU_CACHE_ENTRIES),
            spam: Lru::new(LRU_CACHE_ENTRIES),
            last_name_nanos: 0,
        }
    }

    /// An event name as client-go makes it, `<object name>.<UnixNano in hex>`, but never the
    /// same twice: with a paused clock (tests) or a coarse one, two events in one nanosecond
    /// would otherwise share a name and overwrite each other.
    pub fn unique_name(&mut self, object_name: &str, now: Timestamp) -> String {
        let nanos = now.as_nanosecond().max(self.last_name_nanos + 1);
        self.last_name_nanos = nanos;
        format!("{object_name}.{nanos:x}")
    }

    /// Filters, aggregates and counts one new event (`EventCorrelate`). `Some` is the event to
    /// write: new (`count` 1) or an update of an earlier one (same `metadata.name`, `count` + 1,
    /// original `firstTimestamp`). `None` means the spam filter dropped it.
    pub fn correlate(&mut self, event: Event, now: Timestamp) -> Option<Event> {
        let (event, key) = self.aggregate(event, now);
        let event = self.observe(event, &key);
        let bucket = self.spam.get_or_insert_with(&spam_key(&event), || {
            TokenBucket::full(SPAM_BURST, SPAM_REFILL_INTERVAL, now)
        });
        bucket
            .try_accept(SPAM_BURST, SPAM_REFILL_INTERVAL, now)
            .then_some(event)
    }

    /// `EventAggregate`: the event to observe and its de-duplication key.
    fn aggregate(&mut self, event: Event, now: Timestamp) -> (Event, String) {
        let (group, message) = aggregate_key(&event);
        let record = self
            .aggregates
            .get_or_insert_with(&group, || AggregateRecord {
                messages: HashSet::new(),
                last: None,
            });
        let fresh = record.last.is_none_or(|last| {
            let gap = now.as_nanosecond() - last.as_nanosecond();
            gap > AGGREGATE_INTERVAL.as_nanos() as i128
        });
        if fresh {
            record.messages.clear();
        }
        record.messages.insert(message.clone());
        record.last = Some(now);
        if record.messages.len() < AGGREGATE_MAX_EVENTS {
            let key = event_key(&event);
            return (event, key);
        }
        // client-go pops an arbitrary member to keep the set below the limit; popping the one
        // just added makes that deterministic: the first nine messages keep their own events,
        // every further one is combined.
        record.messages.remove(&message);
        let name = self.unique_name(text(&event.involved_object.name), now);
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            message: Some(format!("{AGGREGATE_MESSAGE_PREFIX}{message}")),
            involved_object: event.involved_object,
            type_: event.type_,
            reason: event.reason,
            source: event.source,
            // client-go leaves these two empty on the combined event, so a
            // `reportingComponent=kubelet` field selector misses it; nodelet keeps them.
            reporting_component: event.reporting_component,
            reporting_instance: event.reporting_instance,
            ..Default::default()
        };
        (combined, group)
    }

    /// `eventObserve`: a repeat of a known key takes the first occurrence's name and
    /// `firstTimestamp` and the next count.
    fn observe(&mut self, mut event: Event, key: &str) -> Event {
        let observation = self.observations.get_or_insert_with(key, || Observation {
            count: 0,
            first_timestamp: None,
            name: String::new(),
        });
        if observation.count > 0 {
            event.metadata.name = Some(observation.name.clone());
            event.first_timestamp = observation.first_timestamp.clone();
            event.count = Some(observation.count.saturating_add(1));
        }
        observation.count = event.count.unwrap_or(1);
        observation.first_timestamp = event.first_timestamp.clone();
        observation.name = event.metadata.name.clone().unwrap_or_default();
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};

    const T0: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(T0 + secs).unwrap()
    }

    /// An event as the recorder builds it, for pod `pod` (container `c` when given).
    fn ev(pod: &str, container: Option<&str>, type_: &str, reason: &str, message: &str) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{pod}.new")),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                name: Some(pod.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{pod}")),
                field_path: container.map(|c| format!("spec.containers{{{c}}}")),
                ..Default::default()
            },
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some("node1".into()),
            }),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some("node1".into()),
            count: Some(1),
            ..Default::default()
        }
    }

    /// What the correlator wrote for one input: (name, count, first second, message), or None.
    type Out = Option<(String, i32, i64, String)>;
    /// Events fed at (seconds since T0, event).
    type Inputs = Vec<(i64, Event)>;

    fn run(inputs: &[(i64, Event)]) -> Vec<Out> {
        let mut c = Correlator::new();
        inputs
            .iter()
            .enumerate()
            .map(|(i, (secs, e))| {
                let now = at(*secs);
                let mut e = e.clone();
                e.metadata.name = Some(format!("{}.{i}", text(&e.involved_object.name)));
                e.first_timestamp = Some(Time(now));
                e.last_timestamp = Some(Time(now));
                c.correlate(e, now).map(|o| {
                    (
                        o.metadata.name.clone().unwrap(),
                        o.count.unwrap(),
                        o.first_timestamp.unwrap().0.as_second() - T0,
                        o.message.unwrap(),
                    )
                })
            })
            .collect()
    }

    fn out(name: &str, count: i32, first: i64, message: &str) -> Out {
        Some((name.into(), count, first, message.into()))
    }

    #[test]
    fn identical_events_are_counted_into_the_first() {
        let pulled = || ev("web", Some("app"), "Normal", "Pulled", "already present");
        let cases: Vec<(&str, Inputs, Vec<Out>)> = vec![
            (
                "repeats increment count and keep name and firstTimestamp",
                vec![(0, pulled()), (10, pulled()), (700, pulled())],
                vec![
                    out("web.0", 1, 0, "already present"),
                    out("web.0", 2, 0, "already present"),
                    // client-go's count cache has no window (only the LRU bound).
                    out("web.0", 3, 0, "already present"),
                ],
            ),
            (
                "another container is another event",
                vec![
                    (0, pulled()),
                    (
                        1,
                        ev("web", Some("side"), "Normal", "Pulled", "already present"),
                    ),
                ],
                vec![
                    out("web.0", 1, 0, "already present"),
                    out("web.1", 1, 1, "already present"),
                ],
            ),
            (
                "another type, reason or pod is another event",
                vec![
                    (0, pulled()),
                    (
                        1,
                        ev("web", Some("app"), "Warning", "Pulled", "already present"),
                    ),
                    (
                        2,
                        ev("web", Some("app"), "Normal", "Created", "already present"),
                    ),
                    (
                        3,
                        ev("db", Some("app"), "Normal", "Pulled", "already present"),
                    ),
                ],
                vec![
                    out("web.0", 1, 0, "already present"),
                    out("web.1", 1, 1, "already present"),
                    out("web.2", 1, 2, "already present"),
                    out("db.3", 1, 3, "already present"),
                ],
            ),
        ];
        for (name, inputs, expected) in cases {
            assert_eq!(run(&inputs), expected, "{name}");
        }
    }

    fn backoffs(n: usize, start: i64, step: i64) -> Vec<(i64, Event)> {
        (0..n)
            .map(|i| {
                let msg = format!("m{i}");
                (
                    start + step * i as i64,
                    ev("web", Some(&format!("c{i}")), "Warning", "BackOff", &msg),
                )
            })
            .collect()
    }

    #[test]
    fn similar_events_are_aggregated() {
        let combined = |m: &str| format!("{AGGREGATE_MESSAGE_PREFIX}{m}");
        let mut nine_then_two = backoffs(11, 0, 1);
        // A repeat of a message among the first nine is still its own event.
        nine_then_two.push((20, ev("web", Some("c3"), "Warning", "BackOff", "m3")));
        let mut expected: Vec<Out> = (0..9)
            .map(|i| out(&format!("web.{i}"), 1, i, &format!("m{i}")))
            .collect();
        expected.extend([
            // The tenth distinct message becomes the combined event; the eleventh updates it.
            Some((
                format!("web.{:x}", at(9).as_nanosecond()),
                1,
                9,
                combined("m9"),
            )),
            Some((
                format!("web.{:x}", at(9).as_nanosecond()),
                2,
                9,
                combined("m10"),
            )),
            out("web.3", 2, 3, "m3"),
        ]);

        let mut spread = backoffs(9, 0, 60);
        // 601 s after the last similar event: the group starts over.
        spread.push((8 * 60 + 601, ev("web", None, "Warning", "BackOff", "late")));
        let mut spread_expected: Vec<Out> = (0..9)
            .map(|i| out(&format!("web.{i}"), 1, i * 60, &format!("m{i}")))
            .collect();
        spread_expected.push(out("web.9", 1, 8 * 60 + 601, "late"));

        let mut exactly_600 = backoffs(9, 0, 60);
        exactly_600.push((8 * 60 + 600, ev("web", None, "Warning", "BackOff", "edge")));
        let mut exactly_600_expected: Vec<Out> = (0..9)
            .map(|i| out(&format!("web.{i}"), 1, i * 60, &format!("m{i}")))
            .collect();
        exactly_600_expected.push(Some((
            format!("web.{:x}", at(8 * 60 + 600).as_nanosecond()),
            1,
            8 * 60 + 600,
            combined("edge"),
        )));

        let mut other_reason = backoffs(9, 0, 1);
        other_reason.push((9, ev("web", None, "Warning", "Unhealthy", "probe")));
        let mut other_reason_expected: Vec<Out> = (0..9)
            .map(|i| out(&format!("web.{i}"), 1, i, &format!("m{i}")))
            .collect();
        other_reason_expected.push(out("web.9", 1, 9, "probe"));

        let cases: Vec<(&str, Inputs, Vec<Out>)> = vec![
            ("ten distinct messages", nine_then_two, expected),
            ("gap over ten minutes resets", spread, spread_expected),
            (
                "gap of exactly ten minutes does not",
                exactly_600,
                exactly_600_expected,
            ),
            (
                "another reason is another group",
                other_reason,
                other_reason_expected,
            ),
        ];
        for (name, inputs, expected) in cases {
            assert_eq!(run(&inputs), expected, "{name}");
        }
    }

    #[test]
    fn spam_filter_allows_a_burst_of_25_then_one_per_5_minutes() {
        let burst = |n: usize, at: i64| -> Vec<(i64, Event)> {
            (0..n)
                .map(|i| {
                    (
                        at,
                        ev("web", None, "Normal", "Pulled", &format!("m{}", i % 5)),
                    )
                })
                .collect()
        };
        let accepted = |inputs: &[(i64, Event)]| run(inputs).iter().filter(|o| o.is_some()).count();
        let mut refill = burst(25, 0);
        refill.push((299, ev("web", None, "Normal", "Pulled", "m0")));
        refill.push((300, ev("web", None, "Normal", "Pulled", "m0")));
        refill.push((301, ev("web", None, "Normal", "Pulled", "m0")));
        let mut two_pods = burst(25, 0);
        two_pods.push((0, ev("db", None, "Normal", "Pulled", "m0")));
        let mut long_idle = burst(25, 0);
        long_idle.extend(burst(30, 3600 * 24));

        let cases: Vec<(&str, Inputs, usize)> = vec![
            ("burst of 25", burst(25, 0), 25),
            ("26th at once is dropped", burst(26, 0), 25),
            // One token after 300 s, none at 299 s or again at 301 s.
            ("refill every 5 minutes", refill, 26),
            ("budget is per object", two_pods, 26),
            // The bucket refills to at most 25.
            ("refill caps at the burst", long_idle, 50),
        ];
        for (name, inputs, expected) in cases {
            assert_eq!(accepted(&inputs), expected, "{name}");
        }
    }

    #[test]
    fn a_dropped_repeat_still_advances_the_count() {
        let mut inputs: Vec<(i64, Event)> = (0..25)
            .map(|i| {
                (
                    0,
                    ev("web", None, "Normal", "Pulled", &format!("m{}", i % 3)),
                )
            })
            .collect();
        inputs.push((0, ev("web", None, "Normal", "Pulled", "m0"))); // dropped, count 10
        inputs.push((300, ev("web", None, "Normal", "Pulled", "m0")));
        let outs = run(&inputs);
        assert_eq!(outs[25], None);
        // m0 was seen at 0, 3, …, 24 (9 times), dropped once (10), now 11.
        assert_eq!(outs[26], out("web.0", 11, 0, "m0"));
    }

    #[test]
    fn token_bucket_table() {
        // (seconds since the previous call, accepted)
        type Steps = Vec<(i64, bool)>;
        let cases: Vec<(&str, u32, Steps)> = vec![
            (
                "burst then empty",
                2,
                vec![(0, true), (0, true), (0, false)],
            ),
            (
                "refill",
                1,
                vec![(0, true), (299, false), (1, true), (0, false)],
            ),
            (
                "backwards time adds nothing",
                1,
                vec![(0, true), (-500, false), (300, true)],
            ),
            ("capped", 2, vec![(10_000, true), (0, true), (0, false)]),
        ];
        for (name, burst, steps) in cases {
            let mut now = at(0);
            let mut bucket = TokenBucket::full(burst, SPAM_REFILL_INTERVAL, now);
            for (i, (advance, expected)) in steps.into_iter().enumerate() {
                now = Timestamp::from_second(now.as_second() + advance).unwrap();
                assert_eq!(
                    bucket.try_accept(burst, SPAM_REFILL_INTERVAL, now),
                    expected,
                    "{name} step {i}"
                );
            }
        }
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut lru: Lru<i32> = Lru::new(2);
        *lru.get_or_insert_with("a", || 1) += 10;
        lru.get_or_insert_with("b", || 2);
        lru.get_or_insert_with("a", || 0); // touch a
        lru.get_or_insert_with("c", || 3); // evicts b
        assert_eq!(lru.len(), 2);
        assert!(lru.contains("a") && lru.contains("c") && !lru.contains("b"));
        assert_eq!(*lru.get_or_insert_with("a", || 0), 11);
    }

    #[test]
    fn unique_names_never_repeat() {
        let mut c = Correlator::new();
        let now = at(0);
        let a = c.unique_name("web", now);
        let b = c.unique_name("web", now);
        assert_eq!(a, format!("web.{:x}", now.as_nanosecond()));
        assert_eq!(b, format!("web.{:x}", now.as_nanosecond() + 1));
    }
}
