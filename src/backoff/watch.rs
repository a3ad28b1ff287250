//! The backoff of nodelet's API watches, as client-go's reflector backs off: a list or watch the
//! API server refuses (403 for a node whose credentials do not match, 500, a connection
//! refused) is tried again after 0.8 s, doubling up to 30 s, with up to as much again of
//! jitter.
//!
//! kube-runtime's `default_backoff` has those numbers but restarts from 0.8 s at every `Ok`
//! item, and its watcher yields `Ok(Event::Init)` before each list attempt: a list refused
//! for ever was tried every 1.2 s on average (50 requests a minute for the pod watch alone,
//! counted in the real API server's audit log). Here only an answer of the server — an object,
//! the end of the initial list, a change — ends the backoff.

use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::watcher::{Error, Event};

/// The first wait after a failure and the longest (client-go's reflector: 800 ms, 30 s).
pub const INITIAL: Duration = Duration::from_millis(800);
pub const MAX: Duration = Duration::from_secs(30);

/// The wait after the `failures`-th failure in a row (1 for the first), before jitter.
pub fn delay(failures: u32) -> Duration {
    super::exponential(INITIAL, failures.saturating_sub(1), MAX)
}

/// `delay` stretched by up to as much again (client-go's jitter factor 1.0), `unit` in [0, 1).
pub fn jittered(delay: Duration, unit: f64) -> Duration {
    delay.saturating_add(delay.mul_f64(unit.clamp(0.0, 1.0)))
}

/// Whether an item of the watch stream is the server's answer (the failures in a row end) or
/// not: a failure counts one more; `Init`, which the watcher yields before it even asks, changes
/// nothing.
fn failures_after<K>(item: &Result<Event<K>, Error>, failures: u32) -> u32 {
    match item {
        Err(_) => failures.saturating_add(1),
        Ok(Event::Init) => failures,
        Ok(_) => 0,
    }
}

type Boxed<K> = Pin<Box<dyn Stream<Item = Result<Event<K>, Error>> + Send>>;

/// `stream` (a kube-runtime `watcher`) with the backoff above: after an error it is polled
/// again only once the wait has passed. Errors are passed on, for the caller to log.
pub fn backoff_watch<K, S>(stream: S) -> impl Stream<Item = Result<Event<K>, Error>> + Send
where
    K: Send + 'static,
    S: Stream<Item = Result<Event<K>, Error>> + Send + 'static,
{
    let boxed: Boxed<K> = Box::pin(stream);
    futures::stream::unfold((boxed, 0u32), |(mut stream, failures)| async move {
        if failures > 0 {
            tokio::time::sleep(jittered(delay(failures), super::random_unit())).await;
        }
        let item = stream.next().await?;
        let failures = failures_after(&item, failures);
        Some((item, (stream, failures)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_800_ms_to_30_s_with_jitter_up_to_twice() {
        let ms = Duration::from_millis;
        let cases = [
            (1, ms(800)),
            (2, ms(1600)),
            (3, ms(3200)),
            (6, ms(25_600)),
            (7, MAX),
            (u32::MAX, MAX),
        ];
        for (failures, want) in cases {
            assert_eq!(delay(failures), want, "after {failures} failures");
        }
        assert_eq!(jittered(ms(800), 0.0), ms(800));
        assert_eq!(jittered(ms(800), 0.5), ms(1200));
        assert_eq!(
            jittered(MAX, 7.0),
            MAX * 2,
            "a unit out of range is clamped"
        );
    }

    #[test]
    fn only_an_answer_of_the_server_ends_the_failures() {
        type Item = Result<Event<()>, Error>;
        let err = || -> Item { Err(Error::NoResourceVersion) };
        // (the item, failures before, failures after, why)
        let cases: [(Item, u32, u32, &str); 6] = [
            (err(), 0, 1, "a first failure"),
            (err(), 4, 5, "one more"),
            (
                Ok(Event::Init),
                4,
                4,
                "Init comes before the list is even asked",
            ),
            (Ok(Event::InitApply(())), 4, 0, "an object listed"),
            (Ok(Event::InitDone), 4, 0, "the list complete"),
            (Ok(Event::Apply(())), 4, 0, "a change watched"),
        ];
        for (item, before, after, why) in cases {
            assert_eq!(failures_after(&item, before), after, "{why}");
        }
    }

    /// A watch refused for ever: 1 + 6 tries in the first minute (0.8, 1.6, 3.2, 6.4, 12.8,
    /// 25.6 s without jitter), where kube-runtime's default backoff made about 50.
    #[tokio::test(start_paused = true)]
    async fn a_watch_refused_for_ever_is_tried_a_handful_of_times_a_minute() {
        let tries = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = tries.clone();
        // What kube-runtime's watcher yields when every list fails: Init, then the error.
        let refused = futures::stream::iter(0..).flat_map(move |_| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            futures::stream::iter([Ok(Event::<()>::Init), Err(Error::NoResourceVersion)])
        });
        let mut watch = Box::pin(backoff_watch(refused));
        let start = tokio::time::Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            watch.next().await;
        }
        let tries = tries.load(std::sync::atomic::Ordering::SeqCst);
        assert!((4..=8).contains(&tries), "{tries} tries in a minute");
    }
}
