//! The long-running file source: inotify (through `notify`) for fast reaction, a full rescan
//! every `period` (the kubelet's `fileCheckFrequency`) as the safety net, a short debounce so an
//! editor's burst of events costs one scan, and a snapshot sent only when it changed.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, MetadataKind, ModifyKind};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::scan::{is_ignored_name, normalize_dir, scan_dir_at, ScanState};
use super::SourceSnapshot;
use crate::clock::Clock;

/// Quiet time after the last filesystem event before rescanning.
pub const DEBOUNCE: Duration = Duration::from_millis(20);
/// A directory that never goes quiet is still rescanned this often.
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(1);
/// `tokio::time::interval` cannot tick at zero; a zero period means "as often as sensible".
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// Watches a static pod directory and sends a [`SourceSnapshot`] whenever it changes.
pub struct FileSource {
    dir: PathBuf,
    node_name: String,
    period: Duration,
    clock: Clock,
}

impl FileSource {
    pub fn new(dir: PathBuf, node_name: String, period: Duration) -> Self {
        FileSource {
            dir,
            node_name,
            period,
            clock: Clock::system(),
        }
    }

    /// Use `clock` for first-seen times (tests with a paused tokio clock).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Sends a snapshot at start (always, even empty) and after every change; returns when
    /// `cancel` fires or the receiver is gone.
    pub async fn run(self, tx: mpsc::Sender<SourceSnapshot>, cancel: CancellationToken) {
        let FileSource {
            dir,
            node_name,
            period,
            clock,
        } = self;
        let dir = normalize_dir(&dir);
        // Capacity 1 + try_send: any number of events while we scan collapse into one wake-up.
        let (events_tx, mut events_rx) = mpsc::channel::<()>(1);
        let mut watch = DirWatch::default();
        let mut state = ScanState::default();
        let mut last_sent: Option<SourceSnapshot> = None;
        let mut ticker = tokio::time::interval(period.max(MIN_PERIOD));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker.tick().await; // the first tick is immediate; the initial scan is below

        // Watch before the first scan so a change between scan and watch is not missed.
        watch.ensure(&dir, &events_tx);
        loop {
            let previous = std::mem::take(&mut state);
            let (scan_dir, scan_node, now) = (dir.clone(), node_name.clone(), clock.now());
            let scanned = tokio::task::spawn_blocking(move || {
                scan_dir_at(&scan_dir, &scan_node, &previous, now)
            })
            .await;
            match scanned {
                Ok((next, snapshot)) => {
                    state = next;
                    if last_sent.as_ref() != Some(&snapshot) {
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            sent = tx.send(snapshot.clone()) => {
                                if sent.is_err() {
                                    tracing::debug!(dir = %dir.display(), "snapshot receiver gone; stopping file source");
                                    return;
                                }
                            }
                        }
                        last_sent = Some(snapshot);
                    }
                }
                Err(e) => {
                    tracing::error!(dir = %dir.display(), error = %e, "static pod scan failed")
                }
            }
            watch.ensure(&dir, &events_tx);

            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
                Some(()) = events_rx.recv() => {
                    if !debounce(&mut events_rx, &cancel).await {
                        return;
                    }
                }
            }
        }
    }
}

/// Wait until events stop for [`DEBOUNCE`] (at most [`MAX_DEBOUNCE`] in total). False when
/// cancelled.
async fn debounce(events: &mut mpsc::Receiver<()>, cancel: &CancellationToken) -> bool {
    let start = Instant::now();
    let mut deadline = start + DEBOUNCE;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = sleep_until(deadline) => return true,
            Some(()) = events.recv() => {
                deadline = (Instant::now() + DEBOUNCE).min(start + MAX_DEBOUNCE);
            }
        }
    }
}

/// Whether a filesystem event can change a snapshot. Our own reads (open, close without write,
/// access time) and events that only touch ignored names (editor swap files) cannot.
pub fn should_rescan(event: &Event) -> bool {
    match &event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return false,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => return false,
        _ => {}
    }
    event.paths.is_empty()
        || event.paths.iter().any(|p| {
            !p.file_name()
                .is_some_and(|n| is_ignored_name(&n.to_string_lossy()))
        })
}

/// The inotify watch on the static pod path, re-established when the path appears or is
/// replaced (a new inode, e.g. the directory was deleted and recreated).
#[derive(Default)]
struct DirWatch {
    watcher: Option<RecommendedWatcher>,
    identity: Option<(u64, u64)>,
    last_error: Option<String>,
}

impl DirWatch {
    fn ensure(&mut self, dir: &Path, events: &mpsc::Sender<()>) {
        let identity = std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()));
        if identity.is_none() {
            // Missing: the scan already warned; the periodic rescan notices it appear.
            self.watcher = None;
            self.identity = None;
            return;
        }
        if self.watcher.is_some() && self.identity == identity {
            return;
        }
        match new_watcher(dir, events.clone()) {
            Ok(w) => {
                self.watcher = Some(w);
                self.identity = identity;
                if self.last_error.take().is_some() {
                    tracing::info!(dir = %dir.display(), "watching static pod path with inotify again");
                } else {
                    tracing::debug!(dir = %dir.display(), "watching static pod path with inotify");
                }
            }
            Err(e) => {
                self.watcher = None;
                self.identity = None;
                let msg = e.to_string();
                if self.last_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(
                        dir = %dir.display(),
                        error = %msg,
                        "cannot watch static pod path with inotify; relying on the periodic rescan"
                    );
                }
                self.last_error = Some(msg);
            }
        }
    }
}

fn new_watcher(dir: &Path, events: mpsc::Sender<()>) -> notify::Result<RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
        let wake = match res {
            Ok(event) => should_rescan(&event),
            Err(e) => {
                // Queue overflow and friends: we may have missed something, so rescan.
                tracing::debug!(error = %e, "inotify error");
                true
            }
        };
        if wake {
            // Full means a wake-up is already pending: that is the coalescing.
            let _ = events.try_send(());
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, RemoveKind, RenameMode};
    use std::fs;

    const WEB: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: nginx:1.27\n";
    const WAIT: Duration = Duration::from_secs(30);

    #[test]
    fn which_events_cause_a_rescan() {
        let ev = |kind: EventKind, paths: &[&str]| Event {
            kind,
            paths: paths.iter().map(PathBuf::from).collect(),
            attrs: Default::default(),
        };
        let cases: Vec<(Event, bool)> = vec![
            (
                ev(EventKind::Create(CreateKind::File), &["/m/web.yaml"]),
                true,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Data(DataChange::Any)),
                    &["/m/web.yaml"],
                ),
                true,
            ),
            (
                ev(EventKind::Remove(RemoveKind::File), &["/m/web.yaml"]),
                true,
            ),
            (
                ev(
                    EventKind::Access(AccessKind::Close(AccessMode::Write)),
                    &["/m/web.yaml"],
                ),
                true,
            ),
            (
                ev(
                    EventKind::Access(AccessKind::Open(AccessMode::Any)),
                    &["/m/web.yaml"],
                ),
                false,
            ),
            (
                ev(
                    EventKind::Access(AccessKind::Close(AccessMode::Read)),
                    &["/m/web.yaml"],
                ),
                false,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)),
                    &["/m/web.yaml"],
                ),
                false,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Data(DataChange::Any)),
                    &["/m/.web.yaml.swp"],
                ),
                false,
            ),
            (
                ev(EventKind::Create(CreateKind::File), &["/m/web.yaml~"]),
                false,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                    &["/m/.web.yaml.tmp", "/m/web.yaml"],
                ),
                true,
            ),
            (ev(EventKind::Remove(RemoveKind::Folder), &["/m"]), true),
            (ev(EventKind::Other, &[]), true),
        ];
        for (event, want) in cases {
            assert_eq!(should_rescan(&event), want, "{event:?}");
        }
    }

    async fn recv(rx: &mut mpsc::Receiver<SourceSnapshot>) -> SourceSnapshot {
        tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("no snapshot in time")
            .expect("source stopped")
    }

    /// Receive snapshots until one has `n` pods (a half-written file may show up as an error first).
    async fn recv_until_pods(rx: &mut mpsc::Receiver<SourceSnapshot>, n: usize) -> SourceSnapshot {
        loop {
            let snap = recv(rx).await;
            if snap.pods.len() == n {
                return snap;
            }
        }
    }

    #[tokio::test]
    async fn inotify_picks_up_a_new_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::channel(4);
        let cancel = CancellationToken::new();
        // A period far longer than the test: only inotify can deliver the change.
        let source = FileSource::new(
            dir.path().to_path_buf(),
            "node1".into(),
            Duration::from_secs(3600),
        );
        let task = tokio::spawn(source.run(tx, cancel.clone()));

        let first = recv(&mut rx).await;
        assert!(
            first.pods.is_empty() && first.errors.is_empty(),
            "{first:?}"
        );

        fs::write(dir.path().join("web.yaml"), WEB).unwrap();
        let snap = recv_until_pods(&mut rx, 1).await;
        assert_eq!(snap.pods[0].metadata.name.as_deref(), Some("web-node1"));

        fs::remove_file(dir.path().join("web.yaml")).unwrap();
        let snap = recv_until_pods(&mut rx, 0).await;
        assert!(snap.errors.is_empty());

        cancel.cancel();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("run did not stop")
            .unwrap();
    }

    #[tokio::test]
    async fn periodic_rescan_finds_a_directory_created_later() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("manifests");
        let (tx, mut rx) = mpsc::channel(4);
        let cancel = CancellationToken::new();
        let source = FileSource::new(dir.clone(), "node1".into(), Duration::from_millis(200));
        let task = tokio::spawn(source.run(tx, cancel.clone()));

        let first = recv(&mut rx).await;
        assert!(
            first.pods.is_empty() && first.errors.is_empty(),
            "{first:?}"
        );

        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("web.yaml"), WEB).unwrap();
        let snap = recv_until_pods(&mut rx, 1).await;
        assert_eq!(snap.pods[0].metadata.name.as_deref(), Some("web-node1"));

        cancel.cancel();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("run did not stop")
            .unwrap();
    }

    #[tokio::test]
    async fn unchanged_rescans_send_nothing_and_dropped_receiver_stops_the_source() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("web.yaml"), WEB).unwrap();
        let (tx, mut rx) = mpsc::channel(4);
        let cancel = CancellationToken::new();
        let source = FileSource::new(
            dir.path().to_path_buf(),
            "node1".into(),
            Duration::from_millis(100),
        );
        let task = tokio::spawn(source.run(tx, cancel.clone()));
        let first = recv(&mut rx).await;
        assert_eq!(first.pods.len(), 1);
        // Several periods pass; nothing changed, so nothing is sent.
        let more = tokio::time::timeout(Duration::from_millis(600), rx.recv()).await;
        assert!(more.is_err(), "unexpected snapshot: {more:?}");

        drop(rx);
        fs::write(
            dir.path().join("other.yaml"),
            WEB.replace("name: web", "name: other"),
        )
        .unwrap();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("run did not stop")
            .unwrap();
    }
}
