//! The long-running file source: inotify (through `notify`) for fast reaction, a full rescan
//! every `period` (the kubelet's `fileCheckFrequency`) as the safety net, a short debounce so an
//! editor's burst of events costs one scan, and a snapshot sent only when it changed.
//!
//! The debounce is skipped when the latest event leaves a file complete (closed after writing,
//! or renamed into place): that is how a manifest normally arrives, and waiting would only delay
//! the pod's start. Other events wait for the directory to go quiet; the shortcut is only taken
//! when the directory had been quiet before: a tool rewriting files one after another keeps
//! getting one scan per quiet period (or per second).
//!
//! A manifest removed (deleted, or renamed to another name) removes its pods even when a file
//! of the same name and content is back by the time of the scan, as the kubelet's inotify
//! source handles each removal as it comes: before the scan's snapshot, one without the removed
//! file's pods is sent. Moving a manifest away and back is how operators restart a static pod;
//! the pod comes back with the same UID and its containers' restart counts go on.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, MetadataKind, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::scan::{is_ignored_name, normalize_dir, scan_dir_at, ScanState};
use super::SourceSnapshot;
use crate::clock::Clock;

/// Quiet time after the last filesystem event before rescanning, unless that event left a file
/// complete ([`Wake::Settled`]).
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
        // Bounded + try_send: a burst beyond the capacity collapses into the wake-ups already
        // queued (losing at most the fast path of a settled event, never a rescan).
        let (events_tx, mut events_rx) = mpsc::channel::<Wake>(EVENT_QUEUE);
        let removals = Removals::default();
        let mut watch = DirWatch::default();
        let mut state = ScanState::default();
        let mut last_sent: Option<SourceSnapshot> = None;
        let mut ticker = tokio::time::interval(period.max(MIN_PERIOD));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker.tick().await; // the first tick is immediate; the initial scan is below

        // Watch before the first scan so a change between scan and watch is not missed.
        watch.ensure(&dir, &events_tx, &removals);
        loop {
            // The removals seen before this scan: their pods go first, whatever the scan finds.
            let removed_uids = removals.take_pods(&state);
            let previous = std::mem::take(&mut state);
            let (scan_dir, scan_node, now) = (dir.clone(), node_name.clone(), clock.now());
            let scanned = tokio::task::spawn_blocking(move || {
                scan_dir_at(&scan_dir, &scan_node, &previous, now)
            })
            .await;
            match scanned {
                Ok((next, snapshot)) => {
                    state = next;
                    let without_removed = last_sent
                        .as_ref()
                        .and_then(|last| without_pods(last, &removed_uids));
                    for snapshot in without_removed.into_iter().chain([snapshot]) {
                        if last_sent.as_ref() == Some(&snapshot) {
                            continue;
                        }
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
            watch.ensure(&dir, &events_tx, &removals);
            let scanned_at = Instant::now();

            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
                Some(first) = events_rx.recv() => {
                    // A wake-up right after a scan means events keep coming (a tool rewriting
                    // the directory): then every scan waits for quiet, as one would after any
                    // event, so a storm costs a scan a second at most, not one per file.
                    let eager = scanned_at.elapsed() >= DEBOUNCE;
                    if !debounce(first, &mut events_rx, &cancel, eager).await {
                        return;
                    }
                }
            }
        }
    }
}

/// Filesystem events queued between scans; more collapse into the ones queued.
const EVENT_QUEUE: usize = 64;

/// What a filesystem event means for the next scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// It cannot change a snapshot: our own reads, access times, editor swap files.
    Ignore,
    /// A file of the directory is complete now (closed after writing, renamed into place):
    /// scan at once if nothing else happened after it.
    Settled,
    /// Something changed and more may follow (created, written, removed, moved away): scan once
    /// the directory has been quiet for [`DEBOUNCE`].
    InProgress,
}

/// Wait until the latest event is a [`Wake::Settled`] one (only when `eager`: the directory
/// had been quiet before), or events stop for [`DEBOUNCE`] (at most [`MAX_DEBOUNCE`] in total).
/// False when cancelled.
async fn debounce(
    first: Wake,
    events: &mut mpsc::Receiver<Wake>,
    cancel: &CancellationToken,
    eager: bool,
) -> bool {
    let start = Instant::now();
    let mut latest = first;
    let mut deadline = start + DEBOUNCE;
    loop {
        // Only the latest event decides: drain what is queued already.
        while let Ok(wake) = events.try_recv() {
            latest = wake;
            deadline = (Instant::now() + DEBOUNCE).min(start + MAX_DEBOUNCE);
        }
        if eager && latest == Wake::Settled {
            return true;
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = sleep_until(deadline) => return true,
            Some(wake) = events.recv() => {
                latest = wake;
                deadline = (Instant::now() + DEBOUNCE).min(start + MAX_DEBOUNCE);
            }
        }
    }
}

/// What a filesystem event means for the next scan ([`Wake`]).
pub fn classify(event: &Event) -> Wake {
    let relevant = |p: &PathBuf| {
        !p.file_name()
            .is_some_and(|n| is_ignored_name(&n.to_string_lossy()))
    };
    match &event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return Wake::Ignore,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => return Wake::Ignore,
        _ => {}
    }
    if !(event.paths.is_empty() || event.paths.iter().any(relevant)) {
        return Wake::Ignore;
    }
    match &event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write))
        | EventKind::Modify(ModifyKind::Name(RenameMode::To)) => Wake::Settled,
        // notify pairs the two halves of a rename within the directory: from, then to. It is
        // settled when the name it ends under counts (a backup name such as `web.yaml~` means
        // the manifest was moved aside, and its replacement is still to come).
        EventKind::Modify(ModifyKind::Name(RenameMode::Both))
            if event.paths.last().is_some_and(relevant) =>
        {
            Wake::Settled
        }
        _ => Wake::InProgress,
    }
}

/// The name of the manifest an event removed from the directory — deleted, or renamed to
/// another name (the first path of a rename is where it came from) — unless an ignored name.
pub fn removed_manifest(event: &Event) -> Option<OsString> {
    let from = match &event.kind {
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(RenameMode::From)) => {
            event.paths.first()
        }
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if event.paths.len() == 2 => {
            // Renamed onto the same name (another directory's entry moved in): not a removal.
            (event.paths[0].file_name() != event.paths[1].file_name()).then(|| &event.paths[0])
        }
        _ => None,
    }?;
    let name = from.file_name()?;
    (!is_ignored_name(&name.to_string_lossy())).then(|| name.to_os_string())
}

/// What a removed manifest leaves for the next scan to account for.
const MAX_REMOVALS: usize = 1024;

/// The manifest names removed since the last scan, filled by the watcher's thread. Beyond
/// [`MAX_REMOVALS`] names further ones are dropped: the scan still sees those files gone.
#[derive(Debug, Clone, Default)]
struct Removals(Arc<Mutex<BTreeSet<OsString>>>);

impl Removals {
    fn record(&self, name: OsString) {
        let mut names = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if names.len() < MAX_REMOVALS {
            names.insert(name);
        }
    }

    /// The UIDs of the pods the last scan found in the files removed since, emptying the set.
    fn take_pods(&self, last_scan: &ScanState) -> Vec<String> {
        let names = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        names
            .iter()
            .filter_map(|name| last_scan.pod_from_file_named(name))
            .filter_map(|pod| pod.metadata.uid.clone())
            .collect()
    }
}

/// `last` without the pods of `uids`, when it had any of them: what the removal of their
/// manifests means before anything written since is read.
pub fn without_pods(last: &SourceSnapshot, uids: &[String]) -> Option<SourceSnapshot> {
    let removed = |pod: &k8s_openapi::api::core::v1::Pod| {
        pod.metadata
            .uid
            .as_ref()
            .is_some_and(|uid| uids.contains(uid))
    };
    if !last.pods.iter().any(removed) {
        return None;
    }
    let mut next = last.clone();
    next.pods.retain(|pod| !removed(pod));
    next.deleted.clear();
    Some(next)
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
    fn ensure(&mut self, dir: &Path, events: &mpsc::Sender<Wake>, removals: &Removals) {
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
        match new_watcher(dir, events.clone(), removals.clone()) {
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

fn new_watcher(
    dir: &Path,
    events: mpsc::Sender<Wake>,
    removals: Removals,
) -> notify::Result<RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
        let wake = match res {
            Ok(event) => {
                if let Some(name) = removed_manifest(&event) {
                    removals.record(name);
                }
                classify(&event)
            }
            Err(e) => {
                // Queue overflow and friends: we may have missed something, so rescan.
                tracing::debug!(error = %e, "inotify error");
                Wake::InProgress
            }
        };
        if wake != Wake::Ignore {
            // Full means wake-ups are already pending: that is the coalescing.
            let _ = events.try_send(wake);
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, RemoveKind};
    use std::fs;

    const WEB: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: nginx:1.27\n";
    const WAIT: Duration = Duration::from_secs(30);

    #[test]
    fn what_each_event_means_for_the_next_scan() {
        let ev = |kind: EventKind, paths: &[&str]| Event {
            kind,
            paths: paths.iter().map(PathBuf::from).collect(),
            attrs: Default::default(),
        };
        use Wake::{Ignore, InProgress, Settled};
        let cases: Vec<(Event, Wake)> = vec![
            (
                ev(EventKind::Create(CreateKind::File), &["/m/web.yaml"]),
                InProgress,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Data(DataChange::Any)),
                    &["/m/web.yaml"],
                ),
                InProgress,
            ),
            (
                ev(EventKind::Remove(RemoveKind::File), &["/m/web.yaml"]),
                InProgress,
            ),
            (
                ev(
                    EventKind::Access(AccessKind::Close(AccessMode::Write)),
                    &["/m/web.yaml"],
                ),
                Settled,
            ),
            (
                ev(
                    EventKind::Access(AccessKind::Close(AccessMode::Write)),
                    &["/m/.web.yaml.swp"],
                ),
                Ignore,
            ),
            (
                ev(
                    EventKind::Access(AccessKind::Open(AccessMode::Any)),
                    &["/m/web.yaml"],
                ),
                Ignore,
            ),
            (
                ev(
                    EventKind::Access(AccessKind::Close(AccessMode::Read)),
                    &["/m/web.yaml"],
                ),
                Ignore,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)),
                    &["/m/web.yaml"],
                ),
                Ignore,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Data(DataChange::Any)),
                    &["/m/.web.yaml.swp"],
                ),
                Ignore,
            ),
            (
                ev(EventKind::Create(CreateKind::File), &["/m/web.yaml~"]),
                Ignore,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                    &["/m/.web.yaml.tmp", "/m/web.yaml"],
                ),
                Settled,
            ),
            // An editor moving the manifest aside: its new version is still to come.
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                    &["/m/web.yaml", "/m/web.yaml~"],
                ),
                InProgress,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::To)),
                    &["/m/web.yaml"],
                ),
                Settled,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::From)),
                    &["/m/web.yaml"],
                ),
                InProgress,
            ),
            (
                ev(EventKind::Remove(RemoveKind::Folder), &["/m"]),
                InProgress,
            ),
            (ev(EventKind::Other, &[]), InProgress),
        ];
        for (event, want) in cases {
            assert_eq!(classify(&event), want, "{event:?}");
        }
    }

    /// How long an eager `debounce` waits (paused clock) for events sent at the given offsets
    /// from its start (offset 0: queued before it looks); the first is the one that woke it.
    async fn debounce_wait(first: Wake, later: &[(u64, Wake)]) -> Duration {
        debounce_wait_as(true, first, later).await
    }

    async fn debounce_wait_as(eager: bool, first: Wake, later: &[(u64, Wake)]) -> Duration {
        let (tx, mut rx) = mpsc::channel(EVENT_QUEUE);
        let start = Instant::now();
        for &(_, wake) in later.iter().filter(|(at_ms, _)| *at_ms == 0) {
            tx.try_send(wake).unwrap();
        }
        for &(at_ms, wake) in later.iter().filter(|(at_ms, _)| *at_ms > 0) {
            let tx = tx.clone();
            tokio::spawn(async move {
                sleep_until(start + Duration::from_millis(at_ms)).await;
                tx.send(wake).await.unwrap();
            });
        }
        assert!(debounce(first, &mut rx, &CancellationToken::new(), eager).await);
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn debounce_waits_for_quiet_unless_the_latest_event_settled() {
        use Wake::{InProgress, Settled};
        let ms = Duration::from_millis;
        // A manifest closed after writing or renamed into place: no wait at all.
        assert_eq!(debounce_wait(Settled, &[]).await, ms(0));
        // Created, then closed 5 ms later: scanned at the close.
        assert_eq!(debounce_wait(InProgress, &[(5, Settled)]).await, ms(5));
        // A removal waits for quiet, and every later event restarts the wait.
        assert_eq!(debounce_wait(InProgress, &[]).await, DEBOUNCE);
        assert_eq!(
            debounce_wait(InProgress, &[(10, InProgress)]).await,
            ms(10) + DEBOUNCE
        );
        // Only the latest of the queued events counts: settled, then a file moved aside
        // waits for quiet; moved aside, then a file closed does not.
        assert_eq!(
            debounce_wait(InProgress, &[(0, Settled), (0, InProgress)]).await,
            DEBOUNCE
        );
        assert_eq!(
            debounce_wait(Settled, &[(0, InProgress), (0, Settled)]).await,
            ms(0)
        );
        // A directory that never goes quiet is scanned after MAX_DEBOUNCE all the same.
        let storm: Vec<(u64, Wake)> = (1..=200).map(|i| (i * 10, InProgress)).collect();
        assert_eq!(debounce_wait(InProgress, &storm).await, MAX_DEBOUNCE);
        // Woken right after a scan (events keep coming): settled events wait for quiet too,
        // so a tool rewriting files one after another costs a scan per second, not per file.
        assert_eq!(debounce_wait_as(false, Settled, &[]).await, DEBOUNCE);
        let rewrites: Vec<(u64, Wake)> = (1..=200).map(|i| (i * 10, Settled)).collect();
        assert_eq!(
            debounce_wait_as(false, Settled, &rewrites).await,
            MAX_DEBOUNCE
        );
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

    /// The kubelet's way: a manifest removed and written again at once (the same content, so
    /// the same UID) removes the pod first, so it is restarted; the e2e test "should successfully
    /// recreate when file is removed and recreated" does exactly this.
    #[tokio::test]
    async fn a_manifest_removed_and_written_again_at_once_removes_its_pod_first() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let source = FileSource::new(
            dir.path().to_path_buf(),
            "node1".into(),
            Duration::from_secs(3600),
        );
        let task = tokio::spawn(source.run(tx, cancel.clone()));
        assert!(recv(&mut rx).await.pods.is_empty());
        let web = dir.path().join("web.yaml");
        fs::write(&web, WEB).unwrap();
        let uid = recv_until_pods(&mut rx, 1).await.pods[0]
            .metadata
            .uid
            .clone();

        for round in 0..5 {
            if round % 2 == 0 {
                fs::remove_file(&web).unwrap();
            } else {
                fs::rename(&web, dir.path().join("web.yaml~")).unwrap();
            }
            fs::write(&web, WEB).unwrap();
            let gone = recv(&mut rx).await;
            assert!(gone.pods.is_empty(), "round {round}: {gone:?}");
            let back = recv_until_pods(&mut rx, 1).await;
            assert_eq!(back.pods[0].metadata.uid, uid, "round {round}");
        }

        // Replaced in one rename (how tools write a file atomically): an update, as the
        // kubelet's; the pod never leaves the snapshots.
        for round in 0..5 {
            let image = format!("nginx:1.{round}");
            let tmp = dir.path().join(".web.yaml.tmp");
            fs::write(&tmp, WEB.replace("nginx:1.27", &image)).unwrap();
            fs::rename(&tmp, &web).unwrap();
            loop {
                let snap = recv(&mut rx).await;
                assert_eq!(snap.pods.len(), 1, "round {round}: {snap:?}");
                let seen = snap.pods[0].spec.as_ref().unwrap().containers[0]
                    .image
                    .clone();
                if seen.as_deref() == Some(image.as_str()) {
                    break;
                }
            }
        }
        cancel.cancel();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("run did not stop")
            .unwrap();
    }

    #[test]
    fn which_events_remove_a_manifest() {
        let ev = |kind: EventKind, paths: &[&str]| Event {
            kind,
            paths: paths.iter().map(PathBuf::from).collect(),
            attrs: Default::default(),
        };
        let cases: Vec<(Event, Option<&str>)> = vec![
            (
                ev(EventKind::Remove(RemoveKind::File), &["/m/web.yaml"]),
                Some("web.yaml"),
            ),
            (
                ev(EventKind::Remove(RemoveKind::Any), &["/m/web.yaml"]),
                Some("web.yaml"),
            ),
            (
                ev(EventKind::Remove(RemoveKind::File), &["/m/.web.yaml.swp"]),
                None,
            ),
            (
                ev(EventKind::Remove(RemoveKind::File), &["/m/web.yaml~"]),
                None,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::From)),
                    &["/m/web.yaml"],
                ),
                Some("web.yaml"),
            ),
            // Moved aside: the manifest of that name is gone.
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                    &["/m/web.yaml", "/m/web.yaml~"],
                ),
                Some("web.yaml"),
            ),
            // Written beside and renamed into place: the temporary name is ignored, and the
            // file replaced is updated, not removed.
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                    &["/m/.web.yaml.tmp", "/m/web.yaml"],
                ),
                None,
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                    &["/m/a.yaml", "/m/b.yaml"],
                ),
                Some("a.yaml"),
            ),
            (
                ev(
                    EventKind::Modify(ModifyKind::Name(RenameMode::To)),
                    &["/m/web.yaml"],
                ),
                None,
            ),
            (
                ev(EventKind::Create(CreateKind::File), &["/m/web.yaml"]),
                None,
            ),
            (
                ev(
                    EventKind::Access(AccessKind::Close(AccessMode::Write)),
                    &["/m/web.yaml"],
                ),
                None,
            ),
            (ev(EventKind::Remove(RemoveKind::Any), &[]), None),
        ];
        for (event, want) in cases {
            assert_eq!(
                removed_manifest(&event),
                want.map(OsString::from),
                "{event:?}"
            );
        }
    }

    #[test]
    fn a_snapshot_without_the_removed_pods() {
        let pod = |name: &str, uid: &str| {
            let mut pod: k8s_openapi::api::core::v1::Pod = Default::default();
            pod.metadata.name = Some(name.into());
            pod.metadata.uid = Some(uid.into());
            pod
        };
        let last = SourceSnapshot {
            source: crate::source::FILE_SOURCE,
            pods: vec![pod("a", "u1"), pod("b", "u2")],
            errors: Vec::new(),
            deleted: Vec::new(),
        };
        assert_eq!(without_pods(&last, &[]), None);
        assert_eq!(without_pods(&last, &["u3".into()]), None);
        let next = without_pods(&last, &["u2".into(), "u3".into()]).unwrap();
        assert_eq!(next.pods, vec![pod("a", "u1")]);
        assert_eq!(next.source, last.source);
        let none = without_pods(&last, &["u1".into(), "u2".into()]).unwrap();
        assert!(none.pods.is_empty());
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
