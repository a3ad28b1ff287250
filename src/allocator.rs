//! glibc's allocator, tuned for a long-running agent whose threads mostly wait.
//!
//! Two things keep freed memory resident under glibc's defaults, both seen in the footprint
//! benchmark (`scripts/bench.sh footprint`, docs/benchmarks.md):
//! - threads that allocate at the same time get arenas of their own (up to eight per core), and
//!   memory freed in one arena is not reused by another: [`limit_arenas`];
//! - `free` gives memory back to the kernel only from the top of the heap, so the peak of a
//!   burst (500 manifests at once, a 110-pod start) stays resident long after: [`trim_every`].
//!
//! On other C libraries both are no-ops.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// At most two malloc arenas, unless `MALLOC_ARENA_MAX` is set (the operator decides then).
/// Call it first thing in `main`, before any other thread exists.
pub fn limit_arenas() {
    #[cfg(target_env = "gnu")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a parameter of glibc's allocator, and the caller promises
        // no other thread exists yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Returns the allocator's free pages to the kernel every `period` until `cancel` fires.
pub async fn trim_every(period: Duration, cancel: CancellationToken) {
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = interval.tick() => {}
        }
        // It walks every arena's free lists under their locks: a blocking call, off the workers.
        let trimmed = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
        tracing::trace!(trimmed, "malloc_trim");
    }
}

/// One `malloc_trim(0)`: whether memory went back to the kernel.
fn trim() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim is thread-safe (it takes each arena's lock) and only releases
        // pages that hold no allocation.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A freed burst in the middle of the heap comes back with a trim: the process's RSS drops.
    #[cfg(target_env = "gnu")]
    #[test]
    fn a_trim_returns_a_freed_burst_to_the_kernel() {
        fn rss_kib() -> u64 {
            std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap()
        }
        // 64 MiB in small blocks (below the mmap threshold, so on the heap), then a block kept
        // at the top so that `free` alone cannot shrink the heap.
        let mut blocks: Vec<Vec<u8>> = (0..16 * 1024).map(|_| vec![1u8; 4096]).collect();
        let keep = vec![1u8; 4096];
        blocks.clear();
        blocks.shrink_to_fit();
        let before = rss_kib();
        assert!(trim(), "malloc_trim released nothing");
        let after = rss_kib();
        assert!(
            after + 32 * 1024 < before,
            "RSS {before} KiB before the trim, {after} KiB after"
        );
        drop(keep);
    }
}
