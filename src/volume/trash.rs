//! The trash directory, `<rootDir>/trash`: a pod's directory leaves `pods/` with one rename
//! (so the pod is gone from the node at once, whatever it holds) and is deleted afterwards by
//! one thread of its own, never on an async worker.
//!
//! A tenant decides how big its emptyDir is: millions of hard links cost it no disk space and
//! take tens of seconds to unlink. That walk runs here, one directory at a time, while the
//! node's heartbeat, probes and API go on. The thread sleeps until something is discarded; at
//! start it is woken once, so that what a previous run left in the trash is deleted.
//!
//! Deleting never follows a symlink and never crosses a mount point
//! ([`super::mounts::remove_tree`]): an entry that holds a mount stays in the trash, logged,
//! and is tried again at the next wake.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use super::mounts::remove_tree;

/// The trash's directory name under `rootDir`.
pub const TRASH_DIR: &str = "trash";

/// What the emptier has done, for `/metrics` and the status page.
#[derive(Debug, Default)]
pub struct TrashCounters {
    /// Entries deleted.
    pub emptied: AtomicU64,
    /// Deletions that failed (the entry stays for the next wake).
    pub failed: AtomicU64,
}

/// Where pod directories go to be deleted; cheap to share.
#[derive(Debug)]
pub struct Trash {
    dir: PathBuf,
    /// Capacity one: a wake already pending covers any number of discards before it is taken.
    wake: SyncSender<()>,
    counters: Arc<TrashCounters>,
    /// Makes every name in the trash unique within this run (the time makes it so across runs).
    sequence: AtomicU64,
}

/// The deleting side of a [`Trash`]: [`Emptier::run`] on a thread of its own.
#[derive(Debug)]
pub struct Emptier {
    dir: PathBuf,
    wake: Receiver<()>,
    counters: Arc<TrashCounters>,
}

impl Trash {
    /// A trash under `root_dir` and the emptier that deletes what is put in it. Nothing on the
    /// disk is touched until something is discarded.
    pub fn new(root_dir: &Path) -> (Trash, Emptier) {
        let dir = root_dir.join(TRASH_DIR);
        let (wake, woken) = sync_channel(1);
        let counters = Arc::new(TrashCounters::default());
        (
            Trash {
                dir: dir.clone(),
                wake,
                counters: counters.clone(),
                sequence: AtomicU64::new(0),
            },
            Emptier {
                dir,
                wake: woken,
                counters,
            },
        )
    }

    /// [`Trash::new`] with its emptier running on the thread `nodelet-trash`, woken once at
    /// once for what an earlier run left. The thread ends when the `Trash` is dropped.
    pub fn spawn(root_dir: &Path) -> io::Result<Arc<Trash>> {
        let (trash, emptier) = Trash::new(root_dir);
        std::thread::Builder::new()
            .name("nodelet-trash".into())
            .spawn(move || emptier.run())?;
        trash.wake();
        Ok(Arc::new(trash))
    }

    /// The trash directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn counters(&self) -> &TrashCounters {
        &self.counters
    }

    /// Moves the directory `path` into the trash and wakes the emptier; a missing `path` is
    /// fine. `path` must be on the trash's filesystem: on another one (a separately mounted
    /// `pods/`) it is deleted in place, on the caller's thread, which must then be one that may
    /// block. Blocking, but O(1) on the same filesystem.
    pub fn discard(&self, path: &Path) -> io::Result<()> {
        if let Err(e) = fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(io::Error::new(
                    e.kind(),
                    format!("creating {}: {e}", self.dir.display()),
                ));
            }
        }
        let base = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        loop {
            let seq = self.sequence.fetch_add(1, Ordering::Relaxed);
            let target = self.dir.join(format!("{base}.{stamp}.{seq}"));
            // rename(2) moves `path` itself: were it a symlink, the link would move, not what
            // it points to.
            match fs::rename(path, &target) {
                Ok(()) => {
                    self.wake();
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                // A name left by a run whose clock was behind: another number.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY)) => {
                    continue
                }
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => return remove_tree(path),
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("moving {} into {}: {e}", path.display(), self.dir.display()),
                    ))
                }
            }
        }
    }

    fn wake(&self) {
        match self.wake.try_send(()) {
            // Full: a wake is pending and the emptier lists the directory after taking it.
            Ok(()) | Err(TrySendError::Full(())) => {}
            Err(TrySendError::Disconnected(())) => {
                tracing::warn!(dir = %self.dir.display(), "the trash's emptier is not running: what is in it stays until the next start");
            }
        }
    }
}

impl Emptier {
    /// Deletes what is in the trash each time it is woken; returns when the [`Trash`] is gone.
    pub fn run(self) {
        while self.wake.recv().is_ok() {
            self.empty();
        }
    }

    /// One pass over the trash: every entry there is deleted (or logged and left).
    pub fn empty(&self) {
        let names: Vec<_> = match fs::read_dir(&self.dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "listing the trash");
                return;
            }
        };
        for name in names {
            let path = self.dir.join(&name);
            let started = std::time::Instant::now();
            match remove_path(&path) {
                Ok(()) => {
                    self.counters.emptied.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(path = %path.display(), took_ms = started.elapsed().as_millis() as u64, "deleted from the trash");
                }
                Err(e) => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(path = %path.display(), error = %e, "deleting from the trash (left for the next pass)");
                }
            }
        }
    }
}

/// A directory through [`remove_tree`]; anything else (never put here by nodelet) unlinked.
fn remove_path(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => remove_tree(path),
        Ok(_) => match fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, Instant};

    use super::*;

    fn tree(dir: &Path, files: usize) {
        fs::create_dir_all(dir.join("volumes/kubernetes.io~empty-dir/cache/sub")).unwrap();
        for i in 0..files {
            fs::write(
                dir.join(format!("volumes/kubernetes.io~empty-dir/cache/sub/f{i}")),
                b"x",
            )
            .unwrap();
        }
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_discarded_directory_is_gone_from_its_place_at_once_and_deleted_after() {
        let root = tempfile::tempdir().unwrap();
        let (trash, emptier) = Trash::new(root.path());
        let pod = root.path().join("pods/uid-1");
        tree(&pod, 50);
        trash.discard(&pod).unwrap();
        assert!(!pod.exists(), "the pod's directory left pods/");
        let inside: Vec<_> = fs::read_dir(trash.dir()).unwrap().collect();
        assert_eq!(
            inside.len(),
            1,
            "it waits in the trash until the emptier runs"
        );
        emptier.empty();
        assert_eq!(fs::read_dir(trash.dir()).unwrap().count(), 0);
        assert_eq!(trash.counters().emptied.load(Ordering::Relaxed), 1);
        assert_eq!(trash.counters().failed.load(Ordering::Relaxed), 0);
        // A missing directory is fine; the same uid again gets a name of its own.
        trash.discard(&pod).unwrap();
        tree(&pod, 1);
        trash.discard(&pod).unwrap();
        tree(&pod, 1);
        trash.discard(&pod).unwrap();
        assert_eq!(fs::read_dir(trash.dir()).unwrap().count(), 2);
    }

    #[test]
    fn the_emptier_thread_deletes_what_an_earlier_run_left_and_what_comes_later() {
        let root = tempfile::tempdir().unwrap();
        tree(&root.path().join("trash/uid-old.1.0"), 20);
        let trash = Trash::spawn(root.path()).unwrap();
        wait_until("the earlier run's leftovers are deleted", || {
            fs::read_dir(trash.dir()).unwrap().count() == 0
        });
        let pod = root.path().join("pods/uid-2");
        tree(&pod, 20);
        trash.discard(&pod).unwrap();
        assert!(!pod.exists());
        wait_until("the discarded directory is deleted", || {
            fs::read_dir(trash.dir()).unwrap().count() == 0
        });
        assert_eq!(trash.counters().emptied.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn symlinks_in_the_trash_are_removed_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("keep"), b"host").unwrap();
        let (trash, emptier) = Trash::new(root.path());
        let pod = root.path().join("pods/uid-3");
        tree(&pod, 1);
        std::os::unix::fs::symlink(outside.path(), pod.join("volumes/escape")).unwrap();
        trash.discard(&pod).unwrap();
        // A pod directory that is itself a link: the link moves, its target stays.
        let link = root.path().join("pods/uid-4");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        trash.discard(&link).unwrap();
        emptier.empty();
        assert_eq!(fs::read_dir(trash.dir()).unwrap().count(), 0);
        assert_eq!(fs::read(outside.path().join("keep")).unwrap(), b"host");
    }

    #[test]
    fn a_directory_on_another_filesystem_is_deleted_in_place() {
        let root = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir_in("/dev/shm").unwrap();
        assert_ne!(
            fs::metadata(root.path()).unwrap().dev(),
            fs::metadata(other.path()).unwrap().dev(),
            "this test needs /dev/shm on another filesystem than the temporary directory"
        );
        let (trash, _emptier) = Trash::new(root.path());
        let pod = other.path().join("uid-5");
        tree(&pod, 5);
        trash.discard(&pod).unwrap();
        assert!(!pod.exists());
        assert_eq!(fs::read_dir(trash.dir()).unwrap().count(), 0);
    }

    #[test]
    fn without_its_emptier_a_trash_still_takes_directories() {
        let root = tempfile::tempdir().unwrap();
        let (trash, emptier) = Trash::new(root.path());
        drop(emptier);
        let pod = root.path().join("pods/uid-6");
        tree(&pod, 1);
        trash.discard(&pod).unwrap();
        assert!(!pod.exists());
        assert_eq!(fs::read_dir(trash.dir()).unwrap().count(), 1);
    }
}
