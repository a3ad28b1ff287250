//! Container garbage collection as the kubelet's `containerGC` does it, every minute: dead
//! containers beyond `MaxPerPodContainer` (1) per (pod, container name), oldest first; every dead
//! container of a pod that is gone; dead sandboxes (all of a gone pod's, all but the newest of a
//! live pod's); and the log and pod directories of pods that are gone, those that went away
//! while nodelet was down included.
//!
//! "Live" is a pod nodelet has a worker for (syncing, terminating or terminated but not yet
//! removed), so nothing its status still reads goes: the newest instance of each container
//! (`state`) and the one before it (`lastState`, `kubectl logs --previous`) always stay. Running
//! containers are never touched; a pod gone from its source with containers still running is
//! the pod manager's to stop (it adopts it as an orphan).
//!
//! [`select_garbage`] and [`orphaned_dirs`] decide; [`ContainerGc`] lists and removes through
//! [`ContainerGcRuntime`] and the filesystem (paths are parameters).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::Error;
use crate::clock::Clock;
use crate::cri::{ContainerState, PodRuntime};
use crate::events::{node_ref, EventRecorder, EventType};
use crate::lifecycle::pods::LivePods;

/// How often container GC runs (the kubelet's `ContainerGCPeriod`).
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);

/// A container created but never started is left this long to its worker, which starts it
/// within milliseconds; after that it counts as dead.
const CREATED_GRACE: Duration = Duration::from_secs(60);

/// The kubelet's `GCPolicy` (its defaults: `minimum-container-ttl-duration` 0,
/// `maximum-dead-containers-per-container` 1, `maximum-dead-containers` -1: no node-wide cap,
/// which nodelet does not implement).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// A dead container younger than this (from its creation) stays.
    pub min_age: Duration,
    /// Dead instances kept per (pod, container name) of a live pod.
    pub max_per_pod_container: usize,
}

impl Default for ContainerGcPolicy {
    fn default() -> Self {
        ContainerGcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
        }
    }
}

/// What one run removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    pub containers: Vec<String>,
    pub sandboxes: Vec<String>,
}

fn older_than(created: Timestamp, now: Timestamp, age: Duration) -> bool {
    let age = jiff::SignedDuration::try_from(age).unwrap_or(jiff::SignedDuration::MAX);
    now.duration_since(created) >= age
}

/// Dead and removable: exited (or of unknown state), or created and never started for a minute.
fn is_dead(state: ContainerState, created: Timestamp, now: Timestamp) -> bool {
    match state {
        ContainerState::Running => false,
        ContainerState::Exited | ContainerState::Unknown => true,
        ContainerState::Created => older_than(created, now, CREATED_GRACE),
    }
}

/// The containers and sandboxes to remove, from every pod the runtime holds (instances newest
/// first, as [`PodRuntime::sort`] leaves them) and the UIDs of the live pods.
pub fn select_garbage(
    pods: &[PodRuntime],
    live: &HashSet<String>,
    policy: &ContainerGcPolicy,
    now: Timestamp,
) -> GcPlan {
    let mut plan = GcPlan::default();
    for pod in pods {
        let pod_live = live.contains(&pod.uid);
        let mut removed: HashSet<&str> = HashSet::new();
        let mut by_name: BTreeMap<&str, Vec<&crate::cri::RuntimeContainer>> = BTreeMap::new();
        for c in &pod.containers {
            by_name.entry(c.name.as_str()).or_default().push(c);
        }
        for instances in by_name.values() {
            let mut dead_kept = 0usize;
            for (i, c) in instances.iter().enumerate() {
                if !is_dead(c.state, c.created_at, now)
                    || !older_than(c.created_at, now, policy.min_age)
                {
                    continue;
                }
                if pod_live {
                    // The newest two are `state` and `lastState`.
                    if i < 2 || dead_kept < policy.max_per_pod_container {
                        dead_kept += 1;
                        continue;
                    }
                }
                removed.insert(c.id.as_str());
                plan.containers.push(c.id.clone());
            }
        }
        // A sandbox is active while ready or holding a container that stays.
        let holds_container = |sandbox_id: &str| {
            pod.containers
                .iter()
                .any(|c| c.sandbox_id == sandbox_id && !removed.contains(c.id.as_str()))
        };
        for (i, s) in pod.sandboxes.iter().enumerate() {
            if s.ready || holds_container(&s.id) {
                continue;
            }
            if pod_live && i == 0 {
                continue;
            }
            plan.sandboxes.push(s.id.clone());
        }
    }
    plan
}

/// The pod UID at the end of a pod log directory's name (`<namespace>_<name>_<uid>`).
pub fn log_dir_uid(name: &str) -> Option<&str> {
    let mut parts = name.splitn(3, '_');
    let (_ns, _pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    (!uid.is_empty()).then_some(uid)
}

/// Which directories belong to pods that are gone: the pod UID each names (`None`: not a
/// pod's), whether it is live, and whether the runtime still holds anything of it (its
/// containers' logs and volumes wait until those are removed).
pub fn orphaned_dirs<'a>(
    dirs: &'a [(String, Option<String>)],
    live: &HashSet<String>,
    in_runtime: &HashSet<String>,
) -> Vec<&'a str> {
    dirs.iter()
        .filter_map(|(name, uid)| {
            let uid = uid.as_ref()?;
            (!live.contains(uid) && !in_runtime.contains(uid)).then_some(name.as_str())
        })
        .collect()
}

/// The `(container name, restart count)` a log file `<container>/<N>.log` (or one of its
/// rotated files, `<N>.log.<...>`) belongs to.
pub fn log_file_owner<'a>(container: &'a str, file: &str) -> Option<(&'a str, i32)> {
    let (n, rest) = file.split_once('.')?;
    (rest == "log" || rest.starts_with("log.")).then_some(())?;
    Some((container, n.parse().ok()?))
}

/// Log files of a pod the runtime still holds whose container instance is gone (removed by its
/// worker or by GC): `(container dir, file)` pairs from the pod's log directory, and the
/// instances that remain.
pub fn orphaned_log_files<'a>(
    files: &'a [(String, String)],
    remaining: &HashSet<(String, i32)>,
) -> Vec<&'a (String, String)> {
    files
        .iter()
        .filter(|(container, file)| {
            log_file_owner(container, file)
                .is_some_and(|(c, n)| !remaining.contains(&(c.to_string(), n)))
        })
        .collect()
}

/// What container GC needs of the runtime.
#[async_trait]
pub trait ContainerGcRuntime: Send + Sync + 'static {
    /// Every pod of this node the runtime holds, sandboxes and containers newest first.
    async fn pods(&self) -> Result<Vec<PodRuntime>, Error>;
    async fn remove_container(&self, id: &str) -> Result<(), Error>;
    async fn remove_sandbox(&self, id: &str) -> Result<(), Error>;
}

/// What one run removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerGcReport {
    pub containers: usize,
    pub sandboxes: usize,
    pub log_dirs: usize,
    pub pod_dirs: usize,
    /// `/var/log/containers` links whose log was gone.
    pub log_links: usize,
}

pub struct ContainerGc {
    pub runtime: Arc<dyn ContainerGcRuntime>,
    pub live: Arc<dyn LivePods>,
    pub policy: ContainerGcPolicy,
    pub clock: Clock,
    /// `podLogsDir`: `<namespace>_<name>_<uid>` per pod.
    pub pod_logs_dir: PathBuf,
    /// The `/var/log/containers` links (`logs::links`): those whose log is gone are removed.
    pub container_log_links_dir: PathBuf,
    /// `<rootDir>/pods`: a directory per pod UID.
    pub pods_dir: PathBuf,
    /// `rootDir`, for `volume::cleanup_pod_dir` (which unmounts the pod's tmpfs volumes).
    pub root_dir: PathBuf,
    /// The pods' user-namespace ranges: a removed pod directory frees its pod's range.
    pub userns: Option<Arc<crate::userns::UsernsManager>>,
    /// The CSI volume manager: a gone pod's CSI volumes are unpublished (and unstaged when no
    /// other pod uses them) before its directory is removed.
    pub csi_volumes: Option<Arc<crate::volume::csi::CsiVolumes>>,
    /// Where an orphaned pod directory is moved to be deleted by a thread of its own.
    pub trash: Arc<crate::volume::trash::Trash>,
}

/// Runs `f` on a blocking thread: every directory listing and removal of a run goes there,
/// never on an async worker. A panic in `f` is the default value, logged.
async fn blocking<T: Default + Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "{what}: the task failed");
            T::default()
        }
    }
}

fn list_dir(dir: &Path, uid: impl Fn(&str) -> Option<String>) -> Vec<(String, Option<String>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .map(|name| {
            let uid = uid(&name);
            (name, uid)
        })
        .collect()
}

/// `(container dir, file)` of every file one level down in a pod's log directory.
fn list_log_files(pod_dir: &Path) -> Vec<(String, String)> {
    list_dir(pod_dir, |_| None)
        .into_iter()
        .flat_map(|(container, _)| {
            let files = std::fs::read_dir(pod_dir.join(&container))
                .map(|entries| {
                    entries
                        .filter_map(|e| e.ok())
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            files.into_iter().map(move |f| (container.clone(), f))
        })
        .collect()
}

/// Removes the log files of gone instances in `kept` (a pod's log directory and the
/// `(container, restart count)` still in the runtime) and the directories `gone`; how many of
/// those went.
fn remove_logs(kept: &[(PathBuf, HashSet<(String, i32)>)], gone: &[PathBuf]) -> usize {
    for (dir, remaining) in kept {
        let files = list_log_files(dir);
        for (container, file) in orphaned_log_files(&files, remaining) {
            let path = dir.join(container).join(file);
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "removed the log of a removed container")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "removing a container log")
                }
            }
        }
    }
    let mut removed = 0;
    for path in gone {
        match std::fs::remove_dir_all(path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed the logs of a pod that is gone");
                removed += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "removing pod logs"),
        }
    }
    removed
}

/// Removes the `/var/log/containers` links whose log is gone, except those of containers still
/// running (their file is renamed for a moment while it rotates); how many went.
async fn remove_dangling_links(dir: PathBuf, running: HashSet<String>) -> usize {
    let removed = tokio::task::spawn_blocking(move || {
        let dangling = match crate::logs::links::dangling_links(&dir) {
            Ok(dangling) => dangling,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "listing container log links");
                return 0;
            }
        };
        let mut removed = 0;
        for name in crate::logs::links::links_to_remove(&dangling, &running) {
            let path = dir.join(name);
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "removed a container log link");
                    removed += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "removing a container log link")
                }
            }
        }
        removed
    })
    .await;
    removed.unwrap_or(0)
}

impl ContainerGc {
    /// One run. Errors of single removals are logged and the run goes on.
    #[tracing::instrument(name = "container_gc", skip_all)]
    pub async fn garbage_collect(&self) -> Result<ContainerGcReport, Error> {
        // Directories first, runtime next, live pods last: a pod that appears meanwhile has a
        // worker before it has a directory or a sandbox, so it is seen live.
        let (logs_dir, pods_dir) = (self.pod_logs_dir.clone(), self.pods_dir.clone());
        let (log_dirs, pod_dirs) = blocking("listing pod directories", move || {
            (
                list_dir(&logs_dir, |n| log_dir_uid(n).map(String::from)),
                list_dir(&pods_dir, |n| Some(n.to_string())),
            )
        })
        .await;
        let pods = self.runtime.pods().await?;
        let live = self.live.live_pods();
        let plan = select_garbage(&pods, &live, &self.policy, self.clock.now());
        let mut report = ContainerGcReport::default();
        for id in &plan.containers {
            match self.runtime.remove_container(id).await {
                Ok(()) => report.containers += 1,
                Err(e) => {
                    tracing::warn!(container.id = %id, error = %e, "removing a dead container")
                }
            }
        }
        for id in &plan.sandboxes {
            match self.runtime.remove_sandbox(id).await {
                Ok(()) => report.sandboxes += 1,
                Err(e) => tracing::warn!(sandbox.id = %id, error = %e, "removing a dead sandbox"),
            }
        }
        // A pod whose last runtime objects were just removed keeps its directories until the
        // next run; the runtime is asked again rather than guessed.
        let in_runtime: HashSet<String> = pods
            .iter()
            .filter(|p| {
                p.containers
                    .iter()
                    .any(|c| !plan.containers.contains(&c.id))
                    || p.sandboxes.iter().any(|s| !plan.sandboxes.contains(&s.id))
            })
            .map(|p| p.uid.clone())
            .collect();
        // The logs of instances that are gone, in the directories of pods that are not.
        let kept_logs: Vec<(PathBuf, HashSet<(String, i32)>)> = log_dirs
            .iter()
            .filter_map(|(dir, uid)| {
                let pod = uid
                    .as_ref()
                    .and_then(|u| pods.iter().find(|p| &p.uid == u))?;
                let remaining = pod
                    .containers
                    .iter()
                    .filter(|c| !plan.containers.contains(&c.id))
                    .map(|c| (c.name.clone(), c.restart_count))
                    .collect();
                Some((self.pod_logs_dir.join(dir), remaining))
            })
            .collect();
        let gone_logs: Vec<PathBuf> = orphaned_dirs(&log_dirs, &live, &in_runtime)
            .into_iter()
            .map(|name| self.pod_logs_dir.join(name))
            .collect();
        report.log_dirs = blocking("removing pod logs", move || {
            remove_logs(&kept_logs, &gone_logs)
        })
        .await;
        let running: HashSet<String> = pods
            .iter()
            .flat_map(|p| &p.containers)
            .filter(|c| c.state != ContainerState::Exited && !plan.containers.contains(&c.id))
            .map(|c| c.id.clone())
            .collect();
        report.log_links =
            remove_dangling_links(self.container_log_links_dir.clone(), running).await;
        let orphans: Vec<String> = orphaned_dirs(&pod_dirs, &live, &in_runtime)
            .into_iter()
            .map(|uid| uid.to_string())
            .collect();
        for uid in &orphans {
            if let Some(csi) = &self.csi_volumes {
                if let Err(e) = csi.unmount_pod(uid).await {
                    // The directory stays until the driver has unpublished.
                    tracing::warn!(pod.uid = %uid, error = %e, "unmounting the CSI volumes of a pod that is gone");
                    continue;
                }
            }
            let (root, trash, pod_uid) = (self.root_dir.clone(), self.trash.clone(), uid.clone());
            let cleaned = blocking("removing a pod directory", move || {
                Some(crate::volume::cleanup_pod_dir(&root, &pod_uid, &trash))
            })
            .await;
            match cleaned {
                Some(Ok(())) => {
                    tracing::info!(pod.uid = %uid, "removed the directory of a pod that is gone");
                    report.pod_dirs += 1;
                    if let Some(userns) = &self.userns {
                        userns.release(uid);
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(pod.uid = %uid, error = %e, "removing a pod directory")
                }
                None => {}
            }
        }
        // Volumes staged for no pod (one that went while nodelet was down).
        if let Some(csi) = &self.csi_volumes {
            match csi.unstage_unused().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(volumes = n, "unstaged CSI volumes no pod uses"),
                Err(e) => tracing::warn!(error = %e, "unstaging CSI volumes no pod uses"),
            }
        }
        // User-namespace ranges of pods whose directories went another way.
        if let Some(userns) = &self.userns {
            let keep: HashSet<String> = live.union(&in_runtime).cloned().collect();
            let released = userns.release_orphans(&keep);
            if released > 0 {
                tracing::info!(
                    released,
                    "freed the user-namespace ranges of pods that are gone"
                );
            }
        }
        Ok(report)
    }

    /// Runs now and every [`CONTAINER_GC_PERIOD`] until `cancel`. A run that fails is the
    /// kubelet's Warning `ContainerGCFailed` on the node.
    pub async fn run(self, cancel: CancellationToken, events: EventRecorder, node_name: String) {
        let mut tick = tokio::time::interval(CONTAINER_GC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = cancel.cancelled() => return,
            }
            match self.garbage_collect().await {
                Ok(r) => {
                    let n = r.containers + r.sandboxes + r.log_dirs + r.pod_dirs;
                    crate::metrics::metrics()
                        .container_gc_removed
                        .inc_by(n as u64);
                    if n > 0 {
                        tracing::info!(
                            containers = r.containers,
                            sandboxes = r.sandboxes,
                            log_dirs = r.log_dirs,
                            pod_dirs = r.pod_dirs,
                            "container garbage collection"
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "container garbage collection failed");
                    events.record(
                        &node_ref(&node_name),
                        EventType::Warning,
                        "ContainerGCFailed",
                        e.to_string(),
                    );
                }
            }
            crate::metrics::metrics().container_gc_runs.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::{RuntimeContainer, RuntimeSandbox};

    fn now() -> Timestamp {
        Timestamp::from_second(1_000_000).unwrap()
    }

    fn ago(s: i64) -> Timestamp {
        now() - jiff::SignedDuration::from_secs(s)
    }

    fn c(id: &str, name: &str, state: ContainerState, created: i64) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: name.into(),
            sandbox_id: "s1".into(),
            state,
            created_at: ago(created),
            ..Default::default()
        }
    }

    fn s(id: &str, ready: bool, created: i64) -> RuntimeSandbox {
        RuntimeSandbox {
            id: id.into(),
            attempt: 0,
            ready,
            created_at: ago(created),
            ips: vec![],
            host_network: false,
        }
    }

    fn pod(
        uid: &str,
        sandboxes: Vec<RuntimeSandbox>,
        containers: Vec<RuntimeContainer>,
    ) -> PodRuntime {
        let mut p = PodRuntime {
            uid: uid.into(),
            sandboxes,
            containers,
            ..Default::default()
        };
        p.sort();
        p
    }

    use ContainerState::{Created, Exited, Running};

    #[test]
    fn select_garbage_table() {
        struct Case {
            name: &'static str,
            pods: Vec<PodRuntime>,
            live: &'static [&'static str],
            policy: ContainerGcPolicy,
            want: GcPlan,
        }
        let plan = |c: &[&str], s: &[&str]| GcPlan {
            containers: c.iter().map(|x| x.to_string()).collect(),
            sandboxes: s.iter().map(|x| x.to_string()).collect(),
        };
        let default = ContainerGcPolicy::default();
        let cases = vec![
            Case {
                name:
                    "live pod: running + one dead kept (lastState), older dead removed oldest first",
                pods: vec![pod(
                    "p",
                    vec![s("s1", true, 100)],
                    vec![
                        c("a3", "a", Running, 10),
                        c("a2", "a", Exited, 20),
                        c("a1", "a", Exited, 30),
                        c("a0", "a", Exited, 40),
                    ],
                )],
                live: &["p"],
                policy: default,
                want: plan(&["a1", "a0"], &[]),
            },
            Case {
                name: "live pod, newest dead: it and lastState stay",
                pods: vec![pod(
                    "p",
                    vec![s("s1", true, 100)],
                    vec![
                        c("a2", "a", Exited, 10),
                        c("a1", "a", Exited, 20),
                        c("a0", "a", Exited, 30),
                    ],
                )],
                live: &["p"],
                policy: default,
                want: plan(&["a0"], &[]),
            },
            Case {
                name: "per container name",
                pods: vec![pod(
                    "p",
                    vec![s("s1", true, 100)],
                    vec![
                        c("a1", "a", Exited, 10),
                        c("b2", "b", Running, 10),
                        c("b1", "b", Exited, 20),
                        c("b0", "b", Exited, 30),
                    ],
                )],
                live: &["p"],
                policy: default,
                want: plan(&["b0"], &[]),
            },
            Case {
                name: "more dead kept per container when the policy says so",
                pods: vec![pod(
                    "p",
                    vec![s("s1", true, 100)],
                    vec![
                        c("a3", "a", Running, 10),
                        c("a2", "a", Exited, 20),
                        c("a1", "a", Exited, 30),
                        c("a0", "a", Exited, 40),
                    ],
                )],
                live: &["p"],
                policy: ContainerGcPolicy {
                    max_per_pod_container: 2,
                    ..default
                },
                want: plan(&["a0"], &[]),
            },
            Case {
                name: "minimum age keeps young dead containers",
                pods: vec![pod(
                    "gone",
                    vec![],
                    vec![c("a1", "a", Exited, 10), c("a0", "a", Exited, 100)],
                )],
                live: &[],
                policy: ContainerGcPolicy {
                    min_age: Duration::from_secs(60),
                    ..default
                },
                want: plan(&["a0"], &[]),
            },
            Case {
                name: "gone pod: every dead container and its dead sandboxes; running stays",
                pods: vec![pod(
                    "gone",
                    vec![s("s1", false, 100), s("s0", false, 200)],
                    vec![c("a1", "a", Exited, 10), c("a0", "a", Exited, 20)],
                )],
                live: &[],
                policy: default,
                want: plan(&["a1", "a0"], &["s1", "s0"]),
            },
            Case {
                name: "gone pod with a running container: its sandbox stays",
                pods: vec![pod(
                    "gone",
                    vec![s("s1", true, 100)],
                    vec![c("a1", "a", Running, 10), c("b1", "b", Exited, 10)],
                )],
                live: &[],
                policy: default,
                want: plan(&["b1"], &[]),
            },
            Case {
                name: "live pod: old dead empty sandboxes go, the newest stays even when dead",
                pods: vec![pod(
                    "p",
                    vec![s("s2", false, 10), s("s1", false, 100), s("s0", false, 200)],
                    vec![],
                )],
                live: &["p"],
                policy: default,
                want: plan(&[], &["s1", "s0"]),
            },
            Case {
                name: "a sandbox holding a kept container stays",
                pods: vec![pod(
                    "p",
                    vec![s("s2", true, 10), s("s1", false, 100)],
                    vec![c("a1", "a", Exited, 50)],
                )],
                live: &["p"],
                policy: default,
                want: plan(&[], &[]),
            },
            Case {
                name: "a just-created container is left to its worker; an old created one is dead",
                pods: vec![pod(
                    "gone",
                    vec![],
                    vec![c("new", "a", Created, 1), c("old", "b", Created, 120)],
                )],
                live: &[],
                policy: default,
                want: plan(&["old"], &[]),
            },
        ];
        for case in cases {
            let live: HashSet<String> = case.live.iter().map(|s| s.to_string()).collect();
            let got = select_garbage(&case.pods, &live, &case.policy, now());
            assert_eq!(got, case.want, "{}", case.name);
        }
    }

    #[test]
    fn orphaned_log_files_table() {
        assert_eq!(log_file_owner("app", "3.log"), Some(("app", 3)));
        assert_eq!(
            log_file_owner("app", "3.log.20261201-103005.gz"),
            Some(("app", 3))
        );
        assert_eq!(log_file_owner("app", "notes.txt"), None);
        assert_eq!(log_file_owner("app", "3.logx"), None);
        let files: Vec<(String, String)> = [
            ("app", "0.log"),
            ("app", "1.log"),
            ("app", "2.log"),
            ("app", "2.log.20261201-103005"),
            ("side", "0.log"),
            ("side", "README"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let remaining: HashSet<(String, i32)> =
            [("app".to_string(), 1), ("app".to_string(), 2)].into();
        let got: Vec<String> = orphaned_log_files(&files, &remaining)
            .into_iter()
            .map(|(c, f)| format!("{c}/{f}"))
            .collect();
        assert_eq!(got, vec!["app/0.log", "side/0.log"]);
    }

    #[test]
    fn log_dir_uid_and_orphans() {
        assert_eq!(log_dir_uid("default_web_1234-ab"), Some("1234-ab"));
        assert_eq!(log_dir_uid("kube-system_my_pod_x"), Some("pod_x"));
        assert_eq!(log_dir_uid("lost+found"), None);
        assert_eq!(log_dir_uid("a_b_"), None);
        let dirs: Vec<(String, Option<String>)> = [
            ("ns_live_u1", Some("u1")),
            ("ns_gone_u2", Some("u2")),
            ("ns_draining_u3", Some("u3")),
            ("other", None),
        ]
        .into_iter()
        .map(|(n, u)| (n.to_string(), u.map(String::from)))
        .collect();
        let live = HashSet::from(["u1".to_string()]);
        let in_runtime = HashSet::from(["u3".to_string()]);
        assert_eq!(orphaned_dirs(&dirs, &live, &in_runtime), vec!["ns_gone_u2"]);
    }
}

#[cfg(test)]
mod run_tests {
    use super::*;

    /// A runtime whose listing always fails.
    struct Unlistable;

    #[async_trait]
    impl ContainerGcRuntime for Unlistable {
        async fn pods(&self) -> Result<Vec<PodRuntime>, Error> {
            Err(Error::Runtime {
                what: "listing containers",
                source: crate::cri::Error::Call {
                    op: "ListContainers",
                    target: String::new(),
                    status: tonic::Status::unavailable("connection refused"),
                },
            })
        }
        async fn remove_container(&self, _: &str) -> Result<(), Error> {
            Ok(())
        }
        async fn remove_sandbox(&self, _: &str) -> Result<(), Error> {
            Ok(())
        }
    }

    struct NoPods;

    impl LivePods for NoPods {
        fn live_pods(&self) -> HashSet<String> {
            HashSet::new()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_run_is_a_container_gc_failed_event_on_the_node() {
        let clock = Clock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let gc = ContainerGc {
            runtime: Arc::new(Unlistable),
            live: Arc::new(NoPods),
            policy: Default::default(),
            clock,
            pod_logs_dir: dir.path().join("logs"),
            container_log_links_dir: dir.path().join("containers"),
            pods_dir: dir.path().join("pods"),
            root_dir: dir.path().to_path_buf(),
            userns: None,
            csi_volumes: None,
            trash: Arc::new(crate::volume::trash::Trash::new(dir.path()).0),
        };
        let events = EventRecorder::new(clock, "kubelet", "node1");
        let cancel = CancellationToken::new();
        let run = tokio::spawn(gc.run(cancel.clone(), events.clone(), "node1".into()));
        for _ in 0..100 {
            if !events.events().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
        run.await.unwrap();
        let recorded = events.events();
        assert_eq!(recorded.len(), 1, "{recorded:#?}");
        let e = &recorded[0];
        assert_eq!(e.reason.as_deref(), Some("ContainerGCFailed"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.involved_object.kind.as_deref(), Some("Node"));
        assert!(
            e.message
                .as_deref()
                .is_some_and(|m| m.contains("connection refused")),
            "{e:?}"
        );
    }
}
