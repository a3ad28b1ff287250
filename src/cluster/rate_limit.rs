//! The client-side rate limit of API requests (`kubeAPIQPS` / `kubeAPIBurst`).
//!
//! client-go puts a token bucket in front of every REST client (`flowcontrol.NewTokenBucketRateLimiter`):
//! the bucket holds `burst` tokens, refills at `qps` tokens a second, and a request that finds
//! it empty *waits* for the next token instead of failing. A watch is one request, so it takes
//! one token however long it streams. [`RateLimitLayer`] is that bucket as a tower layer on the
//! kube client's service; [`TokenBucket`] is its pure core.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// client-go's `DefaultQPS`, used when `kubeAPIQPS` is 0 (as `rest.Config` does).
pub const CLIENT_GO_DEFAULT_QPS: u32 = 5;
/// client-go's `DefaultBurst`, used when `kubeAPIBurst` is 0.
pub const CLIENT_GO_DEFAULT_BURST: u32 = 10;

/// The `(qps, burst)` client-go ends up with: zero means "client-go's default", exactly as
/// `rest.RESTClientFor` treats `QPS == 0` and `Burst == 0`.
pub fn effective_rate(qps: u32, burst: u32) -> (u32, u32) {
    let qps = if qps == 0 { CLIENT_GO_DEFAULT_QPS } else { qps };
    let burst = if burst == 0 {
        CLIENT_GO_DEFAULT_BURST
    } else {
        burst
    };
    (qps, burst)
}

/// A token bucket: starts full, refills continuously at `qps` tokens a second up to `burst`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`. `qps` and `burst` are taken as they come (see [`effective_rate`]
    /// for the zero defaults); a burst below one still lets one request through at a time.
    pub fn new(qps: u32, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps.max(1)),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes one token at `now`, or says how long until one is there (nothing is taken then).
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        // `last` never moves back, so an out-of-order `now` cannot mint tokens.
        if now > self.last {
            self.last = now;
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let missing = 1.0 - self.tokens;
            // Round up to the next microsecond so the wake-up never lands just short of a token.
            let micros = (missing / self.qps * 1_000_000.0).ceil();
            Err(Duration::from_micros(micros as u64))
        }
    }
}

/// Tower layer that makes every request take a token from one shared bucket first.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
    rate: (u32, u32),
}

impl RateLimitLayer {
    /// One bucket for every service this layer wraps (clones of a kube client share it anyway).
    pub fn new(qps: u32, burst: u32) -> RateLimitLayer {
        let (qps, burst) = effective_rate(qps, burst);
        RateLimitLayer {
            bucket: Arc::new(Mutex::new(TokenBucket::new(qps, burst, Instant::now()))),
            rate: (qps, burst),
        }
    }

    /// The `(qps, burst)` of the bucket, after client-go's defaults for zeros.
    pub fn rate(&self) -> (u32, u32) {
        self.rate
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            has_token: false,
        }
    }
}

/// The service [`RateLimitLayer`] builds. Readiness waits for a token, so the kube client's
/// request buffer holds requests back rather than failing them.
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    wait: Option<Pin<Box<Sleep>>>,
    has_token: bool,
}

impl<S, Req> tower::Service<Req> for RateLimit<S>
where
    S: tower::Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        loop {
            if self.has_token {
                return self.inner.poll_ready(cx);
            }
            if let Some(wait) = self.wait.as_mut() {
                ready!(wait.as_mut().poll(cx));
                self.wait = None;
            }
            let now = Instant::now();
            // A poisoned lock only means another holder panicked mid-update; the bucket's
            // numbers are still usable.
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_take(now);
            match taken {
                Ok(()) => self.has_token = true,
                Err(wait) => self.wait = Some(Box::pin(tokio::time::sleep_until(now + wait))),
            }
        }
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.has_token = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_rate_table() {
        let cases = [
            ((50, 100), (50, 100)),
            ((0, 100), (5, 100)),
            ((20, 0), (20, 10)),
            ((0, 0), (5, 10)),
        ];
        for (input, want) in cases {
            assert_eq!(effective_rate(input.0, input.1), want, "{input:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_table() {
        // (qps, burst, request offsets in ms from the start, expected result per request:
        //  None = token, Some(ms) = wait that long)
        type Case = (u32, u32, &'static [u64], &'static [Option<u64>]);
        let cases: &[Case] = &[
            // A full bucket lets `burst` requests through at once, then one per 1/qps.
            (2, 3, &[0, 0, 0, 0], &[None, None, None, Some(500)]),
            // After waiting half a second one token is back.
            (2, 1, &[0, 0, 500, 500], &[None, Some(500), None, Some(500)]),
            // Idle time refills to `burst`, never beyond.
            (
                10,
                2,
                &[0, 10_000, 10_000, 10_000],
                &[None, None, None, Some(100)],
            ),
            // A partly refilled bucket waits only for the missing part.
            (1, 1, &[0, 250], &[None, Some(750)]),
        ];
        let start = Instant::now();
        for (qps, burst, offsets, want) in cases {
            let mut bucket = TokenBucket::new(*qps, *burst, start);
            let got: Vec<Option<u64>> = offsets
                .iter()
                .map(|ms| {
                    bucket
                        .try_take(start + Duration::from_millis(*ms))
                        .err()
                        .map(|d| d.as_millis() as u64)
                })
                .collect();
            assert_eq!(&got, want, "qps {qps} burst {burst} at {offsets:?}");
        }
    }

    /// A service that records when each call happened (tokio time).
    struct Recorder {
        calls: Arc<Mutex<Vec<Duration>>>,
        start: Instant,
    }

    impl tower::Service<u32> for Recorder {
        type Response = u32;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<u32, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: u32) -> Self::Future {
            self.calls.lock().unwrap().push(self.start.elapsed());
            std::future::ready(Ok(req))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn requests_wait_for_tokens_and_never_fail() {
        use tower::{Layer, Service, ServiceExt};
        let calls = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let mut service = RateLimitLayer::new(2, 2).layer(Recorder {
            calls: calls.clone(),
            start,
        });
        for i in 0..5 {
            let answer = service.ready().await.unwrap().call(i).await.unwrap();
            assert_eq!(answer, i);
        }
        let millis: Vec<u128> = calls
            .lock()
            .unwrap()
            .iter()
            .map(|d| d.as_millis())
            .collect();
        assert_eq!(millis, vec![0, 0, 500, 1000, 1500]);
    }
}
