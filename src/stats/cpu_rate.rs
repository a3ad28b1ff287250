//! `usageNanoCores`: CPU use as a rate, from two cumulative `cpu.stat` samples.
//!
//! cAdvisor derives it from its last two housekeeping samples; the kubelet's CRI stats
//! provider keeps the previous sample of each container and computes the rate when asked.
//! nodelet does the latter (no background sampling, nothing read between requests): the first
//! request for a cgroup has no rate; later ones report the rate over the window since the
//! previous sample. Samples closer together than [`MIN_WINDOW`] do not move the window (they
//! would give a noisy rate over a few milliseconds); the last rate is reported instead.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The shortest window a rate is computed over.
pub const MIN_WINDOW: Duration = Duration::from_secs(1);
/// Entries not observed for this long are dropped (their container is gone).
pub const FORGET_AFTER: Duration = Duration::from_secs(600);

/// A cumulative CPU time reading and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    pub at: Instant,
    pub usage_nanos: u64,
}

/// Nanocores between two samples: CPU-nanoseconds used per second of wall time. `None` when the
/// window is empty or the counter went backwards (a new cgroup under the same name).
pub fn nano_cores(previous: CpuSample, current: CpuSample) -> Option<u64> {
    let window = current.at.checked_duration_since(previous.at)?;
    let used = current.usage_nanos.checked_sub(previous.usage_nanos)?;
    let window_nanos = window.as_nanos();
    if window_nanos == 0 {
        return None;
    }
    u64::try_from(u128::from(used) * 1_000_000_000 / window_nanos).ok()
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    base: CpuSample,
    rate: Option<u64>,
    last_seen: Instant,
}

/// The previous sample of every cgroup asked about, keyed by the caller (container ID, pod
/// UID, ...).
#[derive(Debug, Default)]
pub struct CpuRates {
    entries: Mutex<HashMap<String, Entry>>,
}

impl CpuRates {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `sample` for `key` and returns the rate to report for it.
    pub fn observe(&self, key: &str, sample: CpuSample) -> Option<u64> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = entries.get_mut(key) else {
            entries.insert(
                key.to_string(),
                Entry {
                    base: sample,
                    rate: None,
                    last_seen: sample.at,
                },
            );
            return None;
        };
        entry.last_seen = sample.at;
        if sample.usage_nanos < entry.base.usage_nanos {
            // The counter restarted: a different cgroup now answers to this key.
            entry.base = sample;
            entry.rate = None;
            return None;
        }
        if sample.at.saturating_duration_since(entry.base.at) >= MIN_WINDOW {
            entry.rate = nano_cores(entry.base, sample);
            entry.base = sample;
        }
        entry.rate
    }

    /// Drops the entries not observed since `now - FORGET_AFTER`.
    pub fn forget_stale(&self, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, e| now.saturating_duration_since(e.last_seen) < FORGET_AFTER);
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nano_cores_table() {
        let t0 = Instant::now();
        let s = |secs_ms: u64, usage| CpuSample {
            at: t0 + Duration::from_millis(secs_ms),
            usage_nanos: usage,
        };
        let cases = [
            // half a core for 2 s
            (s(0, 0), s(2000, 1_000_000_000), Some(500_000_000)),
            // two full cores
            (s(0, 5), s(1000, 2_000_000_005), Some(2_000_000_000)),
            (s(0, 10), s(1000, 10), Some(0)),
            // counter went backwards, empty window, time went backwards
            (s(0, 10), s(1000, 5), None),
            (s(1000, 0), s(1000, 5), None),
            (s(2000, 0), s(1000, 5), None),
        ];
        for (a, b, want) in cases {
            assert_eq!(nano_cores(a, b), want, "{a:?} → {b:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rates_need_a_previous_sample_and_a_second_of_window() {
        let rates = CpuRates::new();
        let at = |usage| CpuSample {
            at: Instant::now(),
            usage_nanos: usage,
        };
        assert_eq!(rates.observe("c1", at(1_000_000_000)), None, "first sample");
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(
            rates.observe("c1", at(1_100_000_000)),
            None,
            "window too short"
        );
        tokio::time::advance(Duration::from_millis(1800)).await;
        // 2 s since the first sample, 1 s of CPU → half a core
        assert_eq!(rates.observe("c1", at(2_000_000_000)), Some(500_000_000));
        tokio::time::advance(Duration::from_millis(100)).await;
        // too soon for a new window: the last rate again
        assert_eq!(rates.observe("c1", at(2_050_000_000)), Some(500_000_000));
        tokio::time::advance(Duration::from_millis(900)).await;
        // 1 s since the base at 2.0e9 → 0.25 cores
        assert_eq!(rates.observe("c1", at(2_250_000_000)), Some(250_000_000));
        // a restarted counter starts over
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(rates.observe("c1", at(10)), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(rates.observe("c1", at(100_000_010)), Some(100_000_000));
        // keys are independent
        assert_eq!(rates.observe("c2", at(5)), None);
        assert_eq!(rates.len(), 2);
        tokio::time::advance(FORGET_AFTER - Duration::from_secs(1)).await;
        rates.observe("c2", at(6));
        tokio::time::advance(Duration::from_secs(1)).await;
        rates.forget_stale(Instant::now());
        assert_eq!(rates.len(), 1, "c1 not seen for {FORGET_AFTER:?}");
    }
}
