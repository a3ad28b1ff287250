//! The one source of wall-clock time for API fields (startedAt, lastTransitionTime, ...).
//!
//! Wall time is derived from tokio's clock: `base + (tokio::Instant::now() - start)`.
//! In production this tracks the system clock; in tests with a paused tokio clock the
//! timestamps advance exactly as `tokio::time::advance` says, so component tests can
//! assert API timestamps deterministically.

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

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
        match std::time::Duration::try_from(since) {
            Ok(d) => self.start + d,
            Err(_) => self.start,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
