//! Restart and image pull backoff, per key (container or image), as the kubelet's
//! `flowcontrol.Backoff`: a delay that starts at `initial` and doubles up to `max`, measured from
//! an event time (a container's `finishedAt`, a failed pull), and forgotten once the key has not
//! been updated for `2 × max` (so a container that ran ten minutes without trouble starts again
//! from the initial delay).
//!
//! Pure: every method takes `now`, so tables and paused-clock tests drive it exactly.
//!
//! [`exponential`] is the one doubling rule every retry loop of nodelet uses (registration,
//! the Lease, `/version` reads, status writes, certificate renewal, logind reconnects): each
//! keeps its own numbers and counts its own attempts, and none writes the arithmetic again.

pub mod watch;

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    backoff: Duration,
    last_update: Timestamp,
}

#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

/// `initial` doubled `doublings` times, at most `max`. Saturating: any count is safe (a retry
/// loop that has failed for days must not overflow into a short or panicking wait).
pub fn exponential(initial: Duration, doublings: u32, max: Duration) -> Duration {
    initial
        .saturating_mul(2u32.saturating_pow(doublings.min(31)))
        .min(max)
}

/// A value in `[0, 1)` from the standard library's per-process random hasher keys: enough to
/// spread renewals and retries, and no generator crate for it.
pub fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x006e_6f64_656c_6574);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// `a - b`, or zero when `b` is later.
fn since(a: Timestamp, b: Timestamp) -> Duration {
    Duration::try_from(a.duration_since(b)).unwrap_or(Duration::ZERO)
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max: max.max(initial),
            entries: HashMap::new(),
        }
    }

    fn expired(&self, event_time: Timestamp, last_update: Timestamp) -> bool {
        since(event_time, last_update) > self.max.saturating_mul(2)
    }

    /// The current delay of `key` (zero when unknown).
    pub fn get(&self, key: &str) -> Duration {
        self.entries.get(key).map_or(Duration::ZERO, |e| e.backoff)
    }

    /// Records an event: the delay becomes `initial` for a new or expired key, else doubles
    /// (capped at `max`).
    pub fn next(&mut self, key: &str, event_time: Timestamp) {
        let backoff = match self.entries.get(key) {
            Some(e) if !self.expired(event_time, e.last_update) => {
                e.backoff.saturating_mul(2).min(self.max)
            }
            _ => self.initial,
        };
        self.entries.insert(
            key.to_string(),
            Entry {
                backoff,
                last_update: event_time,
            },
        );
    }

    /// How long `key` must still wait when its last event happened at `event_time`; `None` when
    /// it may go now.
    pub fn remaining_since(
        &self,
        key: &str,
        event_time: Timestamp,
        now: Timestamp,
    ) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if self.expired(now, e.last_update) {
            return None;
        }
        let elapsed = since(now, event_time);
        (elapsed < e.backoff).then(|| e.backoff - elapsed)
    }

    /// Like [`Self::remaining_since`], measured from the key's last update (image pulls).
    pub fn remaining_since_update(&self, key: &str, now: Timestamp) -> Option<Duration> {
        let last = self.entries.get(key)?.last_update;
        self.remaining_since(key, last, now)
    }

    /// Forgets a key (the container or pod is gone).
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Drops every key not updated for `2 × max`.
    pub fn gc(&mut self, now: Timestamp) {
        let max2 = self.max.saturating_mul(2);
        self.entries
            .retain(|_, e| since(now, e.last_update) <= max2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_unit_is_in_range_and_varies() {
        let values: Vec<f64> = (0..32).map(|_| random_unit()).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)), "{values:?}");
        assert!(
            values.windows(2).any(|w| w[0] != w[1]),
            "32 equal values: {values:?}"
        );
    }

    #[test]
    fn exponential_doubles_saturates_and_caps() {
        let ms = Duration::from_millis;
        let cases = [
            (ms(100), 0, ms(7000), ms(100)),
            (ms(100), 1, ms(7000), ms(200)),
            (ms(100), 6, ms(7000), ms(6400)),
            (ms(100), 7, ms(7000), ms(7000)),
            (ms(100), u32::MAX, ms(7000), ms(7000)),
            (
                Duration::from_secs(2),
                4,
                Duration::MAX,
                Duration::from_secs(32),
            ),
            // 2^31 × a huge initial saturates instead of overflowing.
            (Duration::MAX, 31, Duration::MAX, Duration::MAX),
            (
                Duration::from_secs(u64::MAX / 2),
                40,
                Duration::MAX,
                Duration::MAX,
            ),
        ];
        for (initial, doublings, max, want) in cases {
            assert_eq!(
                exponential(initial, doublings, max),
                want,
                "{initial:?} × 2^{doublings}, cap {max:?}"
            );
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    /// A container that crashes the moment it starts: the restart times follow 0, 10, 30, 70,
    /// 150, 310, then every 300 s.
    #[test]
    fn crash_loop_restart_times() {
        let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        let key = "pod_ns_uid_app";
        let mut now = 0i64;
        let mut starts = vec![];
        for _ in 0..9 {
            // The container starts and exits at once (finishedAt = now); find when it may restart.
            let finished = at(now);
            let mut t = now;
            while b.remaining_since(key, finished, at(t)).is_some() {
                t += 1;
            }
            b.next(key, finished);
            starts.push(t);
            now = t;
        }
        assert_eq!(starts, [0, 10, 30, 70, 150, 310, 610, 910, 1210]);
        assert_eq!(b.get(key), Duration::from_secs(300));
    }

    #[test]
    fn resets_after_running_twice_the_cap() {
        let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        b.next("k", at(0));
        b.next("k", at(10));
        assert_eq!(b.get("k"), Duration::from_secs(20));
        // The next crash comes 10 minutes and 1 s after the last one: back to the initial delay.
        b.next("k", at(10 + 601));
        assert_eq!(b.get("k"), Duration::from_secs(10));
        // Exactly 10 minutes is not enough to reset.
        b.next("k", at(611 + 600));
        assert_eq!(b.get("k"), Duration::from_secs(20));
    }

    #[test]
    fn remaining_table() {
        let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        b.next("k", at(100));
        let cases = [
            ("unknown key", "x", at(100), at(100), None),
            ("right after", "k", at(100), at(100), Some(10)),
            ("half way", "k", at(100), at(105), Some(5)),
            ("done", "k", at(100), at(110), None),
            ("expired entry", "k", at(100), at(100 + 601), None),
        ];
        for (name, key, event, now, want) in cases {
            assert_eq!(
                b.remaining_since(key, event, now),
                want.map(Duration::from_secs),
                "{name}"
            );
        }
        assert_eq!(
            b.remaining_since_update("k", at(103)),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn small_caps_and_gc() {
        // maxContainerRestartPeriod: 2s → initial min(10s, 2s) = 2s, cap 2s.
        let mut b = Backoff::new(Duration::from_secs(2), Duration::from_secs(2));
        b.next("k", at(0));
        b.next("k", at(1));
        assert_eq!(b.get("k"), Duration::from_secs(2));
        b.gc(at(1 + 4));
        assert_eq!(b.get("k"), Duration::from_secs(2));
        b.gc(at(1 + 5));
        assert_eq!(b.get("k"), Duration::ZERO);
    }
}
