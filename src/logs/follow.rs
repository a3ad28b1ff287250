//! Followers of container logs (`follow=true`): how many may run at once, and the one inotify
//! watcher they share.
//!
//! A follower lives as long as its client wants and holds a reader's bounded buffers, so
//! followers are counted: past [`MAX_FOLLOWERS`] a new follow is refused (the HTTP server
//! answers 429 with [`super::LogError::TooManyFollowers`]'s message) rather than queued. The
//! kubelet has no such cap (the API server's own limits are all there is), and gives each
//! follower an fsnotify watcher of its own; here every follower of the node shares one
//! `notify` watcher, which watches each followed log directory once, however many follow it.
//! Watching the directory (not the file) also sees a rotated log's replacement appear.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::watch;

use crate::places::{Cap, Limits, Owner, Permit, Places};

/// Followers the node serves at once. Each holds at most a few hundred KiB (the reader's
/// bounded buffers and its channel), so the cap bounds their memory to tens of MiB; 64 is more
/// than people following logs by hand on one node need (log shippers read the files). One
/// namespace may hold a quarter of them and one pod an eighth ([`Limits::shared`]), so one
/// tenant following its own logs in a loop leaves the others their places.
pub const MAX_FOLLOWERS: usize = 64;

/// The wake-up senders of the watched directories. The watcher's callback takes this lock and
/// nothing else, and nobody calls into `notify` while holding it: `notify`'s watch and unwatch
/// wait for its event thread, which may be in the callback.
type Wakers = Arc<Mutex<HashMap<PathBuf, watch::Sender<u64>>>>;

#[derive(Default)]
struct Watches {
    watcher: Option<RecommendedWatcher>,
    /// Followers per watched directory.
    followers: HashMap<PathBuf, usize>,
    /// Watchers made so far (one, once anything was followed).
    made: usize,
}

struct Inner {
    places: Places,
    wakers: Wakers,
    watches: Mutex<Watches>,
}

/// The followers of one node: the count against the cap and the shared watcher.
#[derive(Clone)]
pub struct LogFollowers {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LogFollowers {
    pub fn new(limits: Limits) -> LogFollowers {
        LogFollowers {
            inner: Arc::new(Inner {
                places: Places::new(limits),
                wakers: Default::default(),
                watches: Default::default(),
            }),
        }
    }

    /// The process's followers, with [`MAX_FOLLOWERS`] shared (one inotify instance per
    /// process).
    pub fn global() -> LogFollowers {
        static GLOBAL: OnceLock<LogFollowers> = OnceLock::new();
        GLOBAL
            .get_or_init(|| LogFollowers::new(Limits::shared(MAX_FOLLOWERS)))
            .clone()
    }

    pub fn limits(&self) -> Limits {
        self.inner.places.limits()
    }

    /// A place for one of `owner`'s followers, or the cap that is full.
    pub fn admit(&self, owner: &Owner) -> Result<FollowPermit, Cap> {
        self.inner.places.admit(owner)
    }

    /// Followers running now on the node.
    pub fn active(&self) -> usize {
        self.inner.places.taken()
    }

    /// Directories watched now, and watchers made so far.
    pub fn watching(&self) -> (usize, usize) {
        let w = lock(&self.inner.watches);
        (w.followers.len(), w.made)
    }

    /// Wakes on every change in `dir` from now on (the shared watcher watches it while anyone
    /// does).
    pub fn watch(&self, dir: &Path) -> io::Result<DirWatch> {
        let mut w = lock(&self.inner.watches);
        let count = w.followers.get(dir).copied().unwrap_or(0);
        if count == 0 {
            let (tx, _) = watch::channel(0u64);
            lock(&self.inner.wakers).insert(dir.to_path_buf(), tx);
            if let Err(e) = self.start_watching(&mut w, dir) {
                lock(&self.inner.wakers).remove(dir);
                return Err(io::Error::other(format!(
                    "watch log directory {}: {e}",
                    dir.display()
                )));
            }
        }
        w.followers.insert(dir.to_path_buf(), count + 1);
        let rx = lock(&self.inner.wakers)
            .get(dir)
            .map(|tx| tx.subscribe())
            .ok_or_else(|| io::Error::other("log directory watch vanished"))?;
        Ok(DirWatch {
            followers: self.clone(),
            dir: dir.to_path_buf(),
            rx,
        })
    }

    fn start_watching(&self, w: &mut Watches, dir: &Path) -> notify::Result<()> {
        if w.watcher.is_none() {
            let wakers = self.inner.wakers.clone();
            let watcher =
                notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                    if !wakes_followers(&event) {
                        return;
                    }
                    let wakers = lock(&wakers);
                    match event {
                        Ok(event) => {
                            for path in &event.paths {
                                for key in
                                    [Some(path.as_path()), path.parent()].into_iter().flatten()
                                {
                                    if let Some(tx) = wakers.get(key) {
                                        tx.send_modify(|n| *n = n.wrapping_add(1));
                                    }
                                }
                            }
                        }
                        // Events may have been lost: wake everyone to read again.
                        Err(_) => {
                            for tx in wakers.values() {
                                tx.send_modify(|n| *n = n.wrapping_add(1));
                            }
                        }
                    }
                })?;
            w.watcher = Some(watcher);
            w.made += 1;
        }
        match w.watcher.as_mut() {
            Some(watcher) => watcher.watch(dir, RecursiveMode::NonRecursive),
            None => Ok(()),
        }
    }

    fn unwatch(&self, dir: &Path) {
        let mut w = lock(&self.inner.watches);
        let count = w.followers.get(dir).copied().unwrap_or(0);
        if count > 1 {
            w.followers.insert(dir.to_path_buf(), count - 1);
            return;
        }
        w.followers.remove(dir);
        lock(&self.inner.wakers).remove(dir);
        if let Some(watcher) = w.watcher.as_mut() {
            // The directory may be gone with its pod; the watch went with it.
            let _ = watcher.unwatch(dir);
        }
    }
}

/// Whether a watcher event can mean more to read: anything but an open, a read or a close
/// after reading (and an access-time change). Followers reading the log — this one, another
/// one, `kubectl logs` without `-f` — raise exactly those, and must not wake every follower of
/// the directory to read again (the plugin watcher's busy loop of issue 37 was that shape).
pub fn wakes_followers(event: &notify::Result<notify::Event>) -> bool {
    use notify::event::{AccessKind, AccessMode, MetadataKind, ModifyKind};
    use notify::EventKind;
    let Ok(event) = event else {
        // Events may have been lost: everyone reads again.
        return true;
    };
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => false,
        _ => true,
    }
}

/// One follower's place; given back when dropped.
pub type FollowPermit = Permit;

/// One follower's subscription to its log directory's changes.
pub struct DirWatch {
    followers: LogFollowers,
    dir: PathBuf,
    rx: watch::Receiver<u64>,
}

impl DirWatch {
    /// Returns once something changed in the directory since the last call (changes in
    /// between are one wake-up).
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // No sender (cannot happen while this subscription lives): the caller's periodic
            // check is the wake-up.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        self.followers.unwatch(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_what_can_add_lines_wakes_the_followers() {
        use notify::event::{
            AccessKind, AccessMode, CreateKind, DataChange, MetadataKind, ModifyKind, RemoveKind,
            RenameMode,
        };
        use notify::{Event, EventKind};
        let ev = |kind| Ok(Event::new(kind).add_path("/logs/c/0.log".into()));
        let cases: Vec<(&str, notify::Result<Event>, bool)> = vec![
            (
                "written",
                ev(EventKind::Modify(ModifyKind::Data(DataChange::Any))),
                true,
            ),
            (
                "closed after writing",
                ev(EventKind::Access(AccessKind::Close(AccessMode::Write))),
                true,
            ),
            ("rotated in", ev(EventKind::Create(CreateKind::File)), true),
            (
                "renamed away",
                ev(EventKind::Modify(ModifyKind::Name(RenameMode::From))),
                true,
            ),
            ("removed", ev(EventKind::Remove(RemoveKind::File)), true),
            (
                "truncated or chmod",
                ev(EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any))),
                true,
            ),
            ("events lost", Err(notify::Error::generic("overflow")), true),
            (
                "opened to read",
                ev(EventKind::Access(AccessKind::Open(AccessMode::Any))),
                false,
            ),
            (
                "closed after reading",
                ev(EventKind::Access(AccessKind::Close(AccessMode::Read))),
                false,
            ),
            ("read", ev(EventKind::Access(AccessKind::Read)), false),
            (
                "access time",
                ev(EventKind::Modify(ModifyKind::Metadata(
                    MetadataKind::AccessTime,
                ))),
                false,
            ),
        ];
        for (name, event, want) in cases {
            assert_eq!(wakes_followers(&event), want, "{name}");
        }
    }

    /// A follower's directory read by others (a `kubectl logs` without `-f`, a second
    /// follower opening the file) does not wake it; a write does.
    #[tokio::test]
    async fn reading_the_log_wakes_no_follower() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        std::fs::write(&log, "a\n").unwrap();
        let f = LogFollowers::new(Limits::node(8));
        let mut w = f.watch(dir.path()).unwrap();
        // The positive sign first: a write wakes it.
        std::fs::write(&log, "a\nb\n").unwrap();
        tokio::time::timeout(Duration::from_secs(30), w.changed())
            .await
            .expect("no wake-up for a write");
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Forget what the write raised, then only read.
        let _ = tokio::time::timeout(Duration::from_millis(100), w.changed()).await;
        for _ in 0..20 {
            let _ = std::fs::read_to_string(&log).unwrap();
        }
        let woke = tokio::time::timeout(Duration::from_secs(2), w.changed()).await;
        assert!(woke.is_err(), "reading the log woke its follower");
    }

    #[tokio::test]
    async fn followers_of_one_directory_share_one_watch() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let f = LogFollowers::new(Limits::node(8));
        let mut a = f.watch(dir.path()).unwrap();
        let mut b = f.watch(dir.path()).unwrap();
        let c = f.watch(other.path()).unwrap();
        assert_eq!(f.watching(), (2, 1), "two directories, one watcher");
        // A write to a file of the directory wakes both of its followers.
        std::fs::write(dir.path().join("0.log"), "x\n").unwrap();
        for w in [&mut a, &mut b] {
            tokio::time::timeout(Duration::from_secs(30), w.changed())
                .await
                .expect("no wake-up for a write");
        }
        drop(a);
        assert_eq!(f.watching(), (2, 1));
        drop((b, c));
        assert_eq!(f.watching(), (0, 1), "unwatched with the last follower");
        // Watching again reuses the watcher.
        let _d = f.watch(dir.path()).unwrap();
        assert_eq!(f.watching(), (1, 1));
    }
}
