//! The async runtime's watchdog: every poll of a task on a runtime worker is timed, and one
//! that keeps its worker for [`SLOW_POLL`] or longer is a stall, logged with the place the task
//! was spawned, counted in `/metrics` and shown on the status page.
//!
//! nodelet's runtime has two workers. A task that walks a tenant's directory, waits on a
//! process or holds a lock across another's call blocks one of them, and everything queued
//! behind it waits: the runtime check, the Lease, `/healthz`. Such work belongs on a blocking
//! thread; the watchdog shows when some did not get there.
//!
//! Each poll's CPU time on its thread is measured too: wall time counts the time a loaded host
//! preempted the worker, CPU time only the task's own work (a walk's system calls included; a
//! wait in the kernel, such as an `fsync`, is not). The longest of each is a metric; a stall is
//! judged by wall time, since a worker waiting in the kernel is just as blocked.
//!
//! The timing hooks are tokio's task-poll hooks, which exist in builds with
//! `--cfg tokio_unstable` (the repository's `.cargo/config.toml` sets it). It costs two reads
//! of the monotonic clock and two of the thread's CPU clock per poll and nothing when idle: no
//! timer, no thread. A build without the flag has no watchdog, and says so on the status page
//! and in [`installed`].

use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// A poll this long (or longer) is a stall.
pub const SLOW_POLL: Duration = Duration::from_millis(100);

/// One stall: when it ended, how long the poll took, and where its task was spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    pub ended: jiff::Timestamp,
    pub took: Duration,
    pub task: String,
}

/// What the watchdog has seen since the start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchdogView {
    /// Whether this build times polls at all.
    pub installed: bool,
    /// Polls of [`SLOW_POLL`] or longer.
    pub stalls: u64,
    /// The longest poll seen.
    pub longest: Duration,
    /// The most CPU time one poll used.
    pub longest_cpu: Duration,
    /// The most recent stall.
    pub last: Option<Stall>,
}

/// The process's counters (one runtime per process).
#[derive(Debug, Default)]
pub struct Watchdog {
    stalls: AtomicU64,
    longest_nanos: AtomicU64,
    longest_cpu_nanos: AtomicU64,
    last: Mutex<Option<Stall>>,
}

impl Watchdog {
    /// Records one poll of `took` (wall time) and `cpu` (its thread's CPU time, when the clock
    /// could be read) by a task spawned at `task`.
    pub fn observe(&self, took: Duration, cpu: Option<Duration>, task: &'static Location<'static>) {
        if let Some(cpu) = cpu {
            let nanos = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
            if self.longest_cpu_nanos.fetch_max(nanos, Ordering::Relaxed) < nanos {
                crate::metrics::metrics()
                    .runtime_longest_poll_cpu_seconds
                    .set(cpu.as_secs_f64());
            }
        }
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        if self.longest_nanos.fetch_max(nanos, Ordering::Relaxed) < nanos {
            crate::metrics::metrics()
                .runtime_longest_poll_seconds
                .set(took.as_secs_f64());
        }
        if took < SLOW_POLL {
            return;
        }
        self.stalls.fetch_add(1, Ordering::Relaxed);
        crate::metrics::metrics().runtime_stalls_total.inc();
        let task = format!("{}:{}", task.file(), task.line());
        tracing::warn!(
            took_ms = took.as_millis() as u64,
            task = %task,
            "a task kept an async runtime worker for {} ms (everything queued behind it waited): it should run on a blocking thread",
            took.as_millis()
        );
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(Stall {
            ended: jiff::Timestamp::now(),
            took,
            task,
        });
    }

    pub fn view(&self) -> WatchdogView {
        WatchdogView {
            installed: installed(),
            stalls: self.stalls.load(Ordering::Relaxed),
            longest: Duration::from_nanos(self.longest_nanos.load(Ordering::Relaxed)),
            longest_cpu: Duration::from_nanos(self.longest_cpu_nanos.load(Ordering::Relaxed)),
            last: self.last.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

/// The process's watchdog.
pub fn watchdog() -> &'static Watchdog {
    static WATCHDOG: LazyLock<Watchdog> = LazyLock::new(Watchdog::default);
    &WATCHDOG
}

/// Whether this build can time polls (built with `--cfg tokio_unstable`).
pub const fn installed() -> bool {
    cfg!(tokio_unstable)
}

/// The CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> Option<Duration> {
    use nix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).ok()?;
    Some(Duration::from(t))
}

/// Puts the watchdog's hooks on the runtime `builder` builds (nothing without
/// `--cfg tokio_unstable`).
pub fn install(builder: &mut tokio::runtime::Builder) -> &mut tokio::runtime::Builder {
    #[cfg(tokio_unstable)]
    {
        use std::cell::Cell;
        use std::time::Instant;
        thread_local! {
            /// When the poll running on this worker started, and the thread's CPU time then.
            static POLL_STARTED: Cell<Option<(Instant, Option<Duration>)>> =
                const { Cell::new(None) };
        }
        builder
            .on_before_task_poll(|_| POLL_STARTED.set(Some((Instant::now(), thread_cpu_time()))))
            .on_after_task_poll(|meta| {
                if let Some((started, cpu_then)) = POLL_STARTED.take() {
                    let took = started.elapsed();
                    let cpu = cpu_then
                        .zip(thread_cpu_time())
                        .map(|(then, now)| now.saturating_sub(then));
                    watchdog().observe(took, cpu, meta.spawned_at());
                }
            })
    }
    #[cfg(not(tokio_unstable))]
    {
        builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_under_the_threshold_only_raise_the_longest() {
        let dog = Watchdog::default();
        let here = Location::caller();
        dog.observe(
            Duration::from_millis(3),
            Some(Duration::from_millis(2)),
            here,
        );
        dog.observe(
            Duration::from_millis(99),
            Some(Duration::from_millis(40)),
            here,
        );
        dog.observe(Duration::from_millis(1), None, here);
        let view = dog.view();
        assert_eq!(view.stalls, 0);
        assert_eq!(view.longest, Duration::from_millis(99));
        assert_eq!(view.longest_cpu, Duration::from_millis(40));
        assert_eq!(view.last, None);
        dog.observe(SLOW_POLL, None, here);
        // A preempted poll: long in wall time, short in CPU time; still a stall.
        dog.observe(
            Duration::from_millis(250),
            Some(Duration::from_millis(5)),
            here,
        );
        dog.observe(
            Duration::from_millis(120),
            Some(Duration::from_millis(110)),
            here,
        );
        let view = dog.view();
        assert_eq!(view.stalls, 3);
        assert_eq!(view.longest, Duration::from_millis(250));
        assert_eq!(view.longest_cpu, Duration::from_millis(110));
        let last = view.last.unwrap();
        assert_eq!(last.took, Duration::from_millis(120));
        assert!(last.task.starts_with("src/watchdog.rs:"), "{}", last.task);
    }

    #[test]
    fn this_build_has_the_hooks() {
        // The repository's .cargo/config.toml builds with --cfg tokio_unstable; a build
        // without it would run without a watchdog.
        assert!(installed(), "built without --cfg tokio_unstable");
    }

    #[test]
    fn a_blocking_poll_on_a_runtime_worker_is_a_stall_named_by_its_spawn_site() {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(1).enable_all();
        let rt = install(&mut builder).build().unwrap();
        let before = watchdog().view().stalls;
        let spawned_at = line!() + 1;
        let blocking = rt.spawn(async { std::thread::sleep(SLOW_POLL * 2) });
        rt.block_on(blocking).unwrap();
        // A task that yields at once is never a stall (and it runs after the sleep's poll has
        // been recorded: the one worker polls it after the sleep's after-poll hook).
        rt.block_on(rt.spawn(tokio::task::yield_now())).unwrap();
        let view = watchdog().view();
        assert!(view.stalls > before, "{view:?}");
        assert!(view.longest >= SLOW_POLL * 2, "{view:?}");
        let last = view.last.as_ref().unwrap();
        assert!(
            last.task
                .ends_with(&format!("src/watchdog.rs:{spawned_at}")),
            "{} (spawned at line {spawned_at})",
            last.task
        );
        // The sleep used no CPU time.
        assert!(
            view.longest_cpu < SLOW_POLL,
            "the sleep counted as CPU: {view:?}"
        );

        // A poll that computes for 60 ms of its thread's CPU time (on a loaded host it may
        // take longer in wall time and be a stall of its own).
        let spin = rt.spawn(async {
            let start = thread_cpu_time().unwrap();
            let mut x = 0u64;
            while thread_cpu_time().unwrap() - start < Duration::from_millis(60) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        });
        rt.block_on(spin).unwrap();
        // The join can wake this thread before the worker ran its after-poll hook; the one
        // worker polls the next task only after that hook.
        rt.block_on(rt.spawn(tokio::task::yield_now())).unwrap();
        let view = watchdog().view();
        assert!(view.longest_cpu >= Duration::from_millis(60), "{view:?}");
        assert!(view.longest_cpu < SLOW_POLL * 2, "{view:?}");
    }
}
