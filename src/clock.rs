//! The one source of wall-clock time for API fields (startedAt, lastTransitionTime, ...).
//!
//! Wall time is derived from tokio's clock: `base + (tokio::Instant::now() - start)`.
//! In production this tracks the system clock; in tests with a paused tokio clock the
//! timestamps advance exactly as `tokio::time::advance` says, so component tests can
//! assert API timestamps deterministically.
//!
//! Also the one place where a duration from outside (the API, the configuration file, a plugin)
//! becomes a wait: [`seconds_from_api`] and [`saturating_deadline`]. Every int64 is a valid
//! `terminationGracePeriodSeconds`, `deletionGracePeriodSeconds` or `sleep.seconds`;
//! `Instant + Duration` panics on overflow, so such a value must never meet an instant
//! unbounded. Both cap at [`FAR_FUTURE`]: a wait that long means "never" in practice.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// The longest duration nodelet waits for anything: 100 years (of 365 days). Longer durations
/// from outside are capped to it. Chosen so that the monotonic clock cannot overflow with it
/// (Linux counts its seconds in an i64), and so that the StopContainer timeout nodelet sends —
/// whole seconds, which containerd multiplies into a Go `time.Duration` of int64 nanoseconds —
/// stays below the 292 years where that product wraps to a negative timeout (SIGKILL at once).
pub const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// A count of seconds from the API (or the configuration file) as a duration: a negative value
/// is zero, and anything longer than [`FAR_FUTURE`] is [`FAR_FUTURE`].
pub fn seconds_from_api(seconds: i64) -> Duration {
    match u64::try_from(seconds) {
        Ok(s) => Duration::from_secs(s).min(FAR_FUTURE),
        Err(_) => Duration::ZERO,
    }
}

/// An instant of the monotonic clock: tokio's (paused in tests) or the standard library's.
pub trait MonotonicInstant: Copy {
    fn checked_add(&self, after: Duration) -> Option<Self>;
}

impl MonotonicInstant for Instant {
    fn checked_add(&self, after: Duration) -> Option<Self> {
        Instant::checked_add(self, after)
    }
}

impl MonotonicInstant for std::time::Instant {
    fn checked_add(&self, after: Duration) -> Option<Self> {
        std::time::Instant::checked_add(self, after)
    }
}

/// `now + after` that cannot panic: `after` is capped at [`FAR_FUTURE`], and where even that
/// does not fit the clock (never on Linux) the latest instant that does, found by halving.
pub fn saturating_deadline<I: MonotonicInstant>(now: I, after: Duration) -> I {
    let mut step = after.min(FAR_FUTURE);
    loop {
        if let Some(deadline) = now.checked_add(step) {
            return deadline;
        }
        // Ends: `now + 0` is `now`.
        step /= 2;
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: Timestamp,
    start: Instant,
}

impl Clock {
    /// A clock anchored at the current system time.
    pub fn system() -> Self {
        Self::starting_at(Timestamp::now())
    }

    /// A clock whose `now()` is `base` at the moment of creation (for tests).
    pub fn starting_at(base: Timestamp) -> Self {
        Self {
            base,
            start: Instant::now(),
        }
    }

    pub fn now(&self) -> Timestamp {
        self.at(Instant::now())
    }

    /// The wall time corresponding to a tokio instant.
    pub fn at(&self, instant: Instant) -> Timestamp {
        let elapsed = instant.saturating_duration_since(self.start);
        let elapsed = SignedDuration::try_from(elapsed).unwrap_or(SignedDuration::MAX);
        self.base.saturating_add(elapsed).unwrap_or(self.base)
    }

    /// The tokio instant corresponding to a wall time (clamped to the clock's start).
    pub fn instant_of(&self, ts: Timestamp) -> Instant {
        let since = ts.duration_since(self.base);
        match Duration::try_from(since) {
            Ok(d) => saturating_deadline(self.start, d),
            Err(_) => self.start,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_from_api_saturates() {
        let far = FAR_FUTURE.as_secs();
        // (seconds from the API, want seconds)
        let cases: [(i64, u64); 9] = [
            (i64::MIN, 0),
            (-1, 0),
            (0, 0),
            (1, 1),
            (30, 30),
            (i64::from(i32::MAX), 2_147_483_647),
            (3_153_600_000, far),
            (3_153_600_001, far),
            (i64::MAX, far),
        ];
        for (seconds, want) in cases {
            assert_eq!(
                seconds_from_api(seconds),
                Duration::from_secs(want),
                "{seconds}"
            );
        }
        assert_eq!(far, 3_153_600_000);
        // containerd turns the StopContainer timeout into int64 nanoseconds.
        assert!(i64::try_from(u128::from(far) * 1_000_000_000).is_ok());
    }

    /// The release build checks integer overflow too (`overflow-checks` in Cargo.toml's
    /// `[profile.release]`): what the saturating helpers miss panics instead of wrapping.
    #[test]
    fn the_release_build_checks_overflow() {
        let manifest = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
        let release: Vec<&str> = manifest
            .lines()
            .skip_while(|l| l.trim() != "[profile.release]")
            .skip(1)
            .take_while(|l| !l.trim_start().starts_with('['))
            .map(str::trim)
            .collect();
        assert!(!release.is_empty(), "Cargo.toml has a [profile.release]");
        assert!(
            release.contains(&"overflow-checks = true"),
            "[profile.release] sets overflow-checks = true: {release:?}"
        );
    }

    #[test]
    fn saturating_deadline_never_overflows() {
        let now = Instant::now();
        // (duration, want offset from now)
        let cases = [
            (Duration::ZERO, Duration::ZERO),
            (Duration::from_secs(30), Duration::from_secs(30)),
            (
                Duration::from_secs(u64::from(u32::MAX)),
                Duration::from_secs(u64::from(u32::MAX)).min(FAR_FUTURE),
            ),
            (FAR_FUTURE, FAR_FUTURE),
            (FAR_FUTURE + Duration::from_nanos(1), FAR_FUTURE),
            (Duration::from_secs(i64::MAX as u64), FAR_FUTURE),
            (Duration::MAX, FAR_FUTURE),
        ];
        for (after, want) in cases {
            assert_eq!(saturating_deadline(now, after) - now, want, "{after:?}");
        }
        // Deadlines of deadlines: still no panic, still later.
        let far = saturating_deadline(saturating_deadline(now, Duration::MAX), Duration::MAX);
        assert!(far > now + FAR_FUTURE);
    }

    #[tokio::test(start_paused = true)]
    async fn follows_paused_tokio_time() {
        let base: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = Clock::starting_at(base);
        assert_eq!(clock.now(), base);
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now().to_string(), "2026-01-01T00:01:30Z");
        let later: Timestamp = "2026-01-01T00:02:00Z".parse().unwrap();
        assert_eq!(
            clock.instant_of(later) - clock.start,
            Duration::from_secs(120)
        );
    }
}
