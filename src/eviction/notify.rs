//! Wake-ups for the eviction manager between its passes: nodelet's answer to the kubelet's
//! 10 s poll, which a fast allocation outruns until the kernel OOM killer fires first.
//!
//! Three sources, each ending in [`Wake::wake`]; none of them decides anything about pods, they
//! only tell the manager that memory moved ([`WakeKind`]); its loop decides when that is worth a
//! pass (`manager::next_pass`):
//! - a cheap memory check every `period` (one read of the root cgroup's memory files): a
//!   [`WakeKind::Crossing`] when `memory.available` falls below the highest memory threshold, a
//!   [`WakeKind::Hint`] on every later read while it stays below ([`memory_wake`]);
//! - a PSI trigger on a `memory.pressure` file (the kernel wakes us when tasks stall on memory
//!   for `stall` within `window`, [`PsiTrigger`]);
//! - changes of a cgroup v2 `memory.events` file (`high`, `max`, `oom` counters of `kubepods`).
//!
//! The last two are readiness on a file descriptor (`EPOLLPRI`), waited on through tokio's
//! reactor: no thread, no polling. Both are hints only: `memory.events` counts the whole
//! `kubepods` subtree, so one pod at its own `memory.max` moves it up to a hundred times a second
//! (kernfs notifies at most every 10 ms) on a node with plenty of memory, and the counters keep
//! rising for as long as a pressure lasts; a PSI trigger fires once per window while tasks stall.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::stats::cgroup::{CgroupReader, MemoryUsage};

/// What woke the manager, for its counters and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeSource {
    MemoryCheck,
    Psi,
    MemoryEvents,
}

impl WakeSource {
    pub fn name(self) -> &'static str {
        match self {
            WakeSource::MemoryCheck => "memory_check",
            WakeSource::Psi => "psi",
            WakeSource::MemoryEvents => "memory_events",
        }
    }
}

/// What a wake-up tells the manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeKind {
    /// `memory.available` went below the floor since the last reading: a fresh crossing, worth
    /// a pass at once unless the manager already sees it.
    Crossing,
    /// Memory moved (a PSI trigger, a `memory.events` counter, memory still below the floor):
    /// worth a pass at once only after a pass that acted; otherwise the periodic pass answers it.
    Hint,
}

/// Where wake-ups go: the manager's loop.
pub trait Wake: Send + Sync + 'static {
    fn wake(&self, source: WakeSource, kind: WakeKind);
}

/// The manager's wake-ups, one permit per kind: many wake-ups before the loop looks are one.
#[derive(Debug, Default)]
pub struct Waker {
    crossing: Notify,
    hint: Notify,
}

impl Waker {
    pub fn wake(&self, kind: WakeKind) {
        match kind {
            WakeKind::Crossing => self.crossing.notify_one(),
            WakeKind::Hint => self.hint.notify_one(),
        }
    }

    /// Resolves at the next wake-up of `kind` (at once for one stored since the last look).
    pub async fn woken(&self, kind: WakeKind) {
        match kind {
            WakeKind::Crossing => self.crossing.notified().await,
            WakeKind::Hint => self.hint.notified().await,
        }
    }

    /// Drops the stored wake-ups: the pass about to start reads the signals after all of them,
    /// so it answers them (left stored, each would start another pass right after this one).
    pub fn answered(&self) {
        let _ = self.crossing.notified().now_or_never();
        let _ = self.hint.notified().now_or_never();
    }
}

impl Wake for Arc<Waker> {
    fn wake(&self, _source: WakeSource, kind: WakeKind) {
        Waker::wake(self, kind);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> NotifyError {
    let path = path.to_path_buf();
    move |source| NotifyError::Io {
        action,
        path,
        source,
    }
}

/// Whether the node's `memory.available` (capacity − working set) is below `floor` bytes.
pub fn memory_below(root: &MemoryUsage, capacity: u64, floor: u64) -> bool {
    capacity.saturating_sub(root.working_set()) < floor
}

/// What one reading of the memory check tells the manager, given the last reading's verdict
/// (`None`: no reading yet, or the last one failed): a crossing when `memory.available` went
/// below the floor, a hint while it stays there, nothing above it.
pub fn memory_wake(was_below: Option<bool>, below: bool) -> Option<WakeKind> {
    match (was_below, below) {
        (_, false) => None,
        (Some(true), true) => Some(WakeKind::Hint),
        (_, true) => Some(WakeKind::Crossing),
    }
}

/// The fastest allocation the memory check plans for: a process faulting in fresh pages on
/// one core does about this much a second. Above the floor, the next reading comes no later
/// than such a hog could take to reach it.
pub const PLANNED_ALLOCATION_RATE: u64 = 4 << 30;

/// The longest wait between two readings of the memory check, however much memory is free:
/// the manager's own cheap pass comes every second anyway.
pub const MEMORY_CHECK_MAX_PERIOD: Duration = Duration::from_secs(1);

/// How long the memory check may wait before its next reading when `memory.available` is
/// `headroom` bytes above the floor: the time a hog at [`PLANNED_ALLOCATION_RATE`] needs to use
/// it up, within `period..=max`. Far from the floor (an idle node) it reads once a second
/// instead of ten times; near or below it, every `period`, as before — a crossing is seen at
/// most `period` after it happens, for any hog up to the planned rate.
pub fn memory_check_delay(headroom: u64, period: Duration, max: Duration) -> Duration {
    let nanos = u128::from(headroom) * 1_000_000_000 / u128::from(PLANNED_ALLOCATION_RATE);
    let until_floor = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
    until_floor.clamp(period, max.max(period))
}

/// The cheap check: reads the root cgroup's memory (every `period` near the floor, less often
/// far above it: [`memory_check_delay`]) and wakes the manager while `memory.available` is
/// below `floor` (the highest memory threshold, so that every memory threshold is checked by a
/// pass as soon as it can be met): a crossing, then hints ([`memory_wake`]). Read errors are
/// logged once and the check goes on: the manager's own period still runs.
pub async fn watch_memory(
    reader: CgroupReader,
    capacity: u64,
    floor: u64,
    period: Duration,
    wake: impl Wake,
    cancel: CancellationToken,
) {
    // A zero period would spin.
    let period = period.max(Duration::from_millis(10));
    let mut failing = false;
    let mut was_below = None;
    let mut delay = period;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = period;
        match reader.memory("/") {
            Ok(Some(root)) => {
                failing = false;
                let below = memory_below(&root, capacity, floor);
                if let Some(kind) = memory_wake(was_below, below) {
                    wake.wake(WakeSource::MemoryCheck, kind);
                }
                was_below = Some(below);
                let available = capacity.saturating_sub(root.working_set());
                delay = memory_check_delay(
                    available.saturating_sub(floor),
                    period,
                    MEMORY_CHECK_MAX_PERIOD,
                );
            }
            Ok(None) => was_below = None,
            Err(e) => {
                was_below = None;
                if !failing {
                    tracing::warn!(error = %e, "eviction memory check: cannot read the root cgroup");
                }
                failing = true;
            }
        }
    }
}

/// A PSI trigger: wake when tasks stalled on memory for `stall` within `window`
/// (Documentation/accounting/psi.rst). `full` counts time in which all non-idle tasks stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsiTrigger {
    pub full: bool,
    pub stall: Duration,
    pub window: Duration,
}

impl PsiTrigger {
    /// 150 ms of `some` stall within 2 s. A process without `CAP_SYS_RESOURCE` (nodelet in a
    /// container, say) may only use windows in multiples of 2 s, and the trigger is only a hint:
    /// the memory check every 100 ms is what catches a fast allocation.
    pub const DEFAULT: PsiTrigger = PsiTrigger {
        full: false,
        stall: Duration::from_millis(150),
        window: Duration::from_secs(2),
    };

    /// The line written to the pressure file: `some 150000 2000000` (microseconds). The kernel
    /// wants the window within 500 ms..10 s and the stall below it.
    pub fn line(&self) -> Result<String, String> {
        let stall = self.stall.as_micros();
        let window = self.window.as_micros();
        if !(500_000..=10_000_000).contains(&window) {
            return Err(format!("window {window}us is outside 500000..=10000000"));
        }
        if stall == 0 || stall > window {
            return Err(format!("stall {stall}us must be within 1..={window}us"));
        }
        let kind = if self.full { "full" } else { "some" };
        Ok(format!("{kind} {stall} {window}"))
    }
}

/// Registers `trigger` on a pressure file (`/proc/pressure/memory` or a cgroup's
/// `memory.pressure`); the returned file becomes ready (`EPOLLPRI`) each time it fires.
pub fn open_psi_trigger(path: &Path, trigger: PsiTrigger) -> Result<File, NotifyError> {
    let line = trigger.line().map_err(|detail| NotifyError::Io {
        action: "build a PSI trigger for",
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, detail),
    })?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io_error("open", path))?;
    // The kernel wants the trigger in one write, NUL included.
    file.write_all(format!("{line}\0").as_bytes())
        .map_err(io_error("write a PSI trigger to", path))?;
    Ok(file)
}

/// Opens a cgroup v2 `memory.events` file; it becomes ready (`EPOLLPRI`) when a counter changes.
pub fn open_memory_events(path: &Path) -> Result<File, NotifyError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io_error("open", path))
}

/// A file whose `EPOLLPRI` readiness wakes the manager, registered with tokio's reactor when
/// made (so that no change after [`PriorityWatch::new`] is missed). kernfs files
/// (`memory.events`) stay signalled until read again, so `rearm_by_reading` re-reads them after
/// each wake-up.
pub struct PriorityWatch {
    fd: AsyncFd<File>,
    path: PathBuf,
    source: WakeSource,
    rearm_by_reading: bool,
}

impl PriorityWatch {
    /// Must be called inside a tokio runtime.
    pub fn new(
        file: File,
        path: PathBuf,
        source: WakeSource,
        rearm_by_reading: bool,
    ) -> Result<PriorityWatch, NotifyError> {
        // SAFETY: `file` is an open `File` moved into the `AsyncFd`, which owns it until it is
        // dropped; nothing else can close or replace its descriptor meanwhile.
        let fd = unsafe { AsyncFd::register_with_interest(file, Interest::PRIORITY) }
            .map_err(|e| io_error("register with the reactor", &path)(e.into()))?;
        Ok(PriorityWatch {
            fd,
            path,
            source,
            rearm_by_reading,
        })
    }

    /// Hints the manager on each signal until cancelled.
    pub async fn run(self, wake: impl Wake, cancel: CancellationToken) -> Result<(), NotifyError> {
        loop {
            let mut guard = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                ready = self.fd.ready(Interest::PRIORITY) => {
                    ready.map_err(io_error("wait on", &self.path))?
                }
            };
            if self.rearm_by_reading {
                let mut file = self.fd.get_ref();
                let mut text = String::new();
                file.seek(SeekFrom::Start(0))
                    .and_then(|_| file.read_to_string(&mut text))
                    .map_err(io_error("read", &self.path))?;
            }
            guard.clear_ready();
            wake.wake(self.source, WakeKind::Hint);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cgroup::MemoryStat;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<(WakeSource, WakeKind)>>>);

    impl Wake for Recorder {
        fn wake(&self, source: WakeSource, kind: WakeKind) {
            self.0.lock().unwrap().push((source, kind));
        }
    }

    #[test]
    fn the_memory_check_tells_a_crossing_from_a_lasting_one() {
        use WakeKind::*;
        // (last reading below?, this one below?, wake-up)
        let table = [
            (None, false, None),
            (None, true, Some(Crossing)), // first reading, or the first after a failed one
            (Some(false), false, None),
            (Some(false), true, Some(Crossing)),
            (Some(true), true, Some(Hint)), // still below: the manager already knows
            (Some(true), false, None),
        ];
        for (was, below, want) in table {
            assert_eq!(memory_wake(was, below), want, "{was:?} → {below}");
        }
    }

    /// Wake-ups before the loop looks are one; a pass answers the stored ones.
    #[tokio::test(start_paused = true)]
    async fn stored_wake_ups_are_one_and_a_pass_answers_them() {
        let waker = Waker::default();
        for _ in 0..10 {
            waker.wake(WakeKind::Hint);
        }
        tokio::time::timeout(Duration::from_millis(1), waker.woken(WakeKind::Hint))
            .await
            .expect("a stored hint");
        assert!(
            tokio::time::timeout(Duration::from_millis(1), waker.woken(WakeKind::Hint))
                .await
                .is_err(),
            "ten hints are one"
        );
        waker.wake(WakeKind::Hint);
        waker.wake(WakeKind::Crossing);
        waker.answered();
        for kind in [WakeKind::Hint, WakeKind::Crossing] {
            assert!(
                tokio::time::timeout(Duration::from_millis(1), waker.woken(kind))
                    .await
                    .is_err(),
                "{kind:?} answered"
            );
        }
    }

    #[test]
    fn memory_below_uses_the_working_set() {
        let usage = |usage, inactive_file| MemoryUsage {
            usage,
            limit: None,
            stat: MemoryStat {
                inactive_file,
                ..Default::default()
            },
        };
        // (usage, inactive_file, capacity, floor) → below
        let table = [
            (900, Some(0), 1000, 100, false),   // available 100 is not below 100
            (901, Some(0), 1000, 100, true),    // available 99
            (950, Some(100), 1000, 100, false), // working set 850, available 150
            (950, None, 1000, 100, true),       // no inactive_file: working set = usage
            (2000, Some(0), 1000, 1, true),     // usage above capacity saturates to 0
        ];
        for (u, inactive, capacity, floor, want) in table {
            assert_eq!(
                memory_below(&usage(u, inactive), capacity, floor),
                want,
                "usage {u} inactive {inactive:?} capacity {capacity} floor {floor}"
            );
        }
    }

    #[test]
    fn psi_trigger_lines_and_kernel_limits() {
        assert_eq!(PsiTrigger::DEFAULT.line().unwrap(), "some 150000 2000000");
        let t = |full, stall_ms, window_ms| PsiTrigger {
            full,
            stall: Duration::from_millis(stall_ms),
            window: Duration::from_millis(window_ms),
        };
        assert_eq!(t(true, 100, 500).line().unwrap(), "full 100000 500000");
        assert!(t(false, 100, 400)
            .line()
            .unwrap_err()
            .contains("window 400000us"));
        assert!(t(false, 100, 11_000).line().is_err());
        assert!(t(false, 0, 1000).line().unwrap_err().contains("stall 0us"));
        assert!(t(false, 2000, 1000).line().is_err());
    }

    /// The memory check against a cgroup tree on disk: wakes while below the floor, not above,
    /// and keeps going through a read error.
    #[tokio::test(start_paused = true)]
    async fn memory_check_wakes_while_below_the_floor() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cg");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        let write_stat = |anon: u64| {
            std::fs::write(
                root.join("memory.stat"),
                format!("anon {anon}\nfile 0\ninactive_file 0\n"),
            )
            .unwrap()
        };
        write_stat(100);
        let reader = CgroupReader::new(&root, crate::stats::cgroup::CgroupVersion::V2);
        let recorder = Recorder::default();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(watch_memory(
            reader,
            1000,
            500,
            Duration::from_millis(100),
            recorder.clone(),
            cancel.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert!(recorder.0.lock().unwrap().is_empty(), "available 900 ≥ 500");
        write_stat(600);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let crossing = (WakeSource::MemoryCheck, WakeKind::Crossing);
        assert_eq!(*recorder.0.lock().unwrap(), vec![crossing]);
        std::fs::write(root.join("memory.stat"), "anon many\n").unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        write_stat(700);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            *recorder.0.lock().unwrap(),
            vec![crossing, crossing],
            "back after the read error: a crossing again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            recorder.0.lock().unwrap()[2],
            (WakeSource::MemoryCheck, WakeKind::Hint),
            "still below: a hint"
        );
        cancel.cancel();
        task.await.unwrap();
    }

    /// Far above the floor the check reads once a second, near it every period: never later
    /// than a hog at the planned rate needs to reach the floor.
    #[test]
    fn memory_check_delay_table() {
        let ms = Duration::from_millis;
        let gib: u64 = 1 << 30;
        let cases = [
            ("below or at the floor", 0, ms(100)),
            ("100 MiB above", 100 << 20, ms(100)),
            ("1 GiB above: a quarter second at 4 GiB/s", gib, ms(250)),
            ("2 GiB above", 2 * gib, ms(500)),
            ("4 GiB above", 4 * gib, ms(1000)),
            ("an idle 24 GiB node", 20 * gib, ms(1000)),
            ("more than anything", u64::MAX, ms(1000)),
        ];
        for (name, headroom, want) in cases {
            assert_eq!(
                memory_check_delay(headroom, ms(100), MEMORY_CHECK_MAX_PERIOD),
                want,
                "{name}"
            );
        }
        // A maximum below the period never makes it shorter than the period.
        assert_eq!(memory_check_delay(u64::MAX, ms(100), ms(10)), ms(100));
    }

    #[test]
    fn psi_trigger_registers_on_the_node_pressure_file() {
        // Needs a kernel with PSI (the test host and the VM have it) and root.
        let path = Path::new("/proc/pressure/memory");
        assert!(
            path.exists(),
            "{} missing: kernel without PSI",
            path.display()
        );
        open_psi_trigger(path, PsiTrigger::DEFAULT).expect("register a PSI trigger");
        let missing = Path::new("/proc/pressure/nonexistent");
        let err = open_psi_trigger(missing, PsiTrigger::DEFAULT)
            .unwrap_err()
            .to_string();
        assert!(err.contains("open /proc/pressure/nonexistent"), "{err}");
    }

    /// The `EPOLLPRI` wait through tokio's reactor, on a file the host can make signal at will:
    /// `/proc/self/mountinfo` signals a change of the mount table. (`memory.events` and PSI
    /// triggers signal the same way; the VM scenario sees them fire under real pressure.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn priority_readiness_wakes_once_per_change() {
        let path = PathBuf::from("/proc/self/mountinfo");
        let file = File::open(&path).unwrap();
        let recorder = Recorder::default();
        let cancel = CancellationToken::new();
        let watch = PriorityWatch::new(file, path, WakeSource::MemoryEvents, true).unwrap();
        let task = tokio::spawn(watch.run(recorder.clone(), cancel.clone()));
        let dir = tempfile::tempdir().unwrap();
        let wakes = || recorder.0.lock().unwrap().len();
        let wait_for = |n: usize| async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while wakes() < n {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} wake-ups, want {n}",
                    wakes()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        // Mounted here, in the test's own mount table; unmounted right after.
        nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .expect("mount a tmpfs (needs root)");
        wait_for(1).await;
        nix::mount::umount(dir.path()).unwrap();
        wait_for(2).await;
        let hint = (WakeSource::MemoryEvents, WakeKind::Hint);
        assert_eq!(*recorder.0.lock().unwrap(), vec![hint, hint]);
        cancel.cancel();
        task.await.unwrap().unwrap();
    }
}
