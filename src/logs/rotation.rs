//! Container log rotation as the kubelet's container log manager does it. Every
//! `containerLogMonitorInterval`, each running container's log (its CRI `logPath`) is checked;
//! one of `containerLogMaxSize` or more is rotated, by up to `containerLogMaxWorkers` at a time:
//!
//! 1. leftovers of an interrupted rotation go (`*.tmp`, and an uncompressed file whose `.gz`
//!    exists);
//! 2. the oldest rotated files go until at most `containerLogMaxFiles - 2` remain (the current
//!    log and the one about to be rotated make `containerLogMaxFiles`);
//! 3. the remaining rotated files are compressed with gzip (`<log>.<timestamp>.gz`);
//! 4. the current log is renamed to `<log>.<YYYYMMDD-HHMMSS>` and the runtime is told to
//!    reopen it (CRI `ReopenContainerLog`); if that fails, the rename is undone.
//!
//! The newest rotated file stays uncompressed until the next rotation, so a reader following the
//! log (`kubectl logs -f`) finishes it and then switches to the new file (`reader`).
//! [`plan_rotation`] decides from the file names; [`LogRotator`] acts through
//! [`LogRotationRuntime`] and the filesystem.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::cri;

const COMPRESS_SUFFIX: &str = ".gz";
const TMP_SUFFIX: &str = ".tmp";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationPolicy {
    /// `containerLogMaxSize` in bytes.
    pub max_size: u64,
    /// `containerLogMaxFiles` (at least 2).
    pub max_files: usize,
}

/// What to do to one container's log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationPlan {
    /// Leftovers and the oldest rotated files, in that order.
    pub remove: Vec<PathBuf>,
    /// Rotated files to gzip, oldest first.
    pub compress: Vec<PathBuf>,
    /// Where the current log is renamed to.
    pub rotate_to: PathBuf,
}

/// The rotated name of `log` at `now` (the kubelet's `20060102-150405`, UTC).
pub fn rotated_name(log: &Path, now: Timestamp) -> PathBuf {
    let stamp = now.strftime("%Y%m%d-%H%M%S").to_string();
    let mut name = log.as_os_str().to_owned();
    name.push(".");
    name.push(stamp);
    PathBuf::from(name)
}

/// The plan for a log of `size` bytes, given the names of the files next to it; `None` when it
/// is below the maximum size.
pub fn plan_rotation(
    log: &Path,
    size: u64,
    siblings: &[String],
    policy: &RotationPolicy,
    now: Timestamp,
) -> Option<RotationPlan> {
    if size < policy.max_size {
        return None;
    }
    let dir = log.parent().unwrap_or(Path::new(""));
    let base = log.file_name()?.to_string_lossy().into_owned();
    let prefix = format!("{base}.");
    let mut rotated: Vec<&String> = siblings.iter().filter(|n| n.starts_with(&prefix)).collect();
    rotated.sort();
    let mut remove = Vec::new();
    let mut in_use = Vec::new();
    for name in &rotated {
        let compressed_exists = rotated
            .iter()
            .any(|o| **o == format!("{name}{COMPRESS_SUFFIX}"));
        if name.ends_with(TMP_SUFFIX) || (!name.ends_with(COMPRESS_SUFFIX) && compressed_exists) {
            remove.push(dir.join(name));
        } else {
            in_use.push(*name);
        }
    }
    let keep = policy.max_files.saturating_sub(2);
    let excess = in_use.len().saturating_sub(keep);
    remove.extend(in_use[..excess].iter().map(|n| dir.join(n)));
    let compress = in_use[excess..]
        .iter()
        .filter(|n| !n.ends_with(COMPRESS_SUFFIX))
        .map(|n| dir.join(n))
        .collect();
    Some(RotationPlan {
        remove,
        compress,
        rotate_to: rotated_name(log, now),
    })
}

#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Runtime(#[from] cri::Error),
    #[error("{} already exists (rotated twice within a second)", .0.display())]
    Exists(PathBuf),
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RotationError {
    let path = path.to_path_buf();
    move |source| RotationError::Io { op, path, source }
}

/// What rotation needs of the runtime.
#[async_trait]
pub trait LogRotationRuntime: Send + Sync + 'static {
    /// The running containers and their log paths.
    async fn running_container_logs(&self) -> Result<Vec<(String, PathBuf)>, cri::Error>;
    async fn reopen_container_log(&self, container_id: &str) -> Result<(), cri::Error>;
}

/// [`LogRotationRuntime`] over the CRI.
pub struct CriLogs {
    pub runtime: Arc<dyn cri::Runtime>,
    pub housekeeping: Arc<dyn cri::HousekeepingRuntime>,
    /// Only this node's containers (`io.nodelet.node-name`): another nodelet on the same
    /// runtime rotates its own by its own policy.
    pub node_name: String,
    /// Each running container's log path (`None`: it has none), as its ContainerStatus said.
    /// A container's log path is fixed when it is created, so it is asked once per container,
    /// not once per container every interval (110 calls every 10 s on a full node).
    log_paths: std::sync::Mutex<HashMap<String, Option<PathBuf>>>,
}

impl CriLogs {
    pub fn new(
        runtime: Arc<dyn cri::Runtime>,
        housekeeping: Arc<dyn cri::HousekeepingRuntime>,
        node_name: String,
    ) -> CriLogs {
        CriLogs {
            runtime,
            housekeeping,
            node_name,
            log_paths: Default::default(),
        }
    }

    fn known_paths(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<PathBuf>>> {
        self.log_paths.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl LogRotationRuntime for CriLogs {
    async fn running_container_logs(&self) -> Result<Vec<(String, PathBuf)>, cri::Error> {
        let running = self
            .runtime
            .list_containers(Some(cri::api::ContainerFilter {
                state: Some(cri::api::ContainerStateValue {
                    state: cri::api::ContainerState::ContainerRunning as i32,
                }),
                label_selector: cri::model::node_selector(&self.node_name),
                ..Default::default()
            }))
            .await?;
        let mut known = std::mem::take(&mut *self.known_paths());
        let mut paths = HashMap::with_capacity(running.len());
        let mut out = Vec::with_capacity(running.len());
        for c in running {
            let path = match known.remove(&c.id) {
                Some(path) => path,
                None => match self.runtime.container_status(&c.id).await {
                    Ok(status) if !status.log_path.is_empty() => {
                        Some(PathBuf::from(status.log_path))
                    }
                    Ok(_) => None,
                    Err(e) if e.is_not_found() => continue,
                    Err(e) => {
                        // Keep what was learnt for the next interval.
                        paths.extend(known);
                        *self.known_paths() = paths;
                        return Err(e);
                    }
                },
            };
            if let Some(p) = &path {
                out.push((c.id.clone(), p.clone()));
            }
            paths.insert(c.id, path);
        }
        // Only the running containers' paths stay known.
        *self.known_paths() = paths;
        Ok(out)
    }

    async fn reopen_container_log(&self, container_id: &str) -> Result<(), cri::Error> {
        self.housekeeping.reopen_container_log(container_id).await
    }
}

/// gzip `path` to `path.gz` through `path.gz.tmp`, then removes `path`.
fn compress(path: &Path) -> Result<(), RotationError> {
    let mut gz_name = path.as_os_str().to_owned();
    gz_name.push(COMPRESS_SUFFIX);
    let gz = PathBuf::from(gz_name);
    let mut tmp_name = gz.as_os_str().to_owned();
    tmp_name.push(TMP_SUFFIX);
    let tmp = PathBuf::from(tmp_name);
    let result = (|| {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let mut input = std::fs::File::open(path).map_err(io("opening", path))?;
        // The compressed file keeps the live file's mode (the runtime's 0640), as the
        // kubelet's `compressLog` does: a log is no more readable once rotated.
        let mode = input
            .metadata()
            .map_err(io("reading the mode of", path))?
            .permissions()
            .mode()
            & 0o777;
        let out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .map_err(io("creating", &tmp))?;
        // Not narrowed by the umask either.
        out.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io("setting the mode of", &tmp))?;
        let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        std::io::copy(&mut input, &mut encoder).map_err(io("compressing", path))?;
        encoder.finish().map_err(io("writing", &tmp))?;
        std::fs::rename(&tmp, &gz).map_err(io("renaming", &tmp))?;
        std::fs::remove_file(path).map_err(io("removing", path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn siblings(log: &Path) -> Result<Vec<String>, RotationError> {
    let dir = log.parent().unwrap_or(Path::new("."));
    let entries = std::fs::read_dir(dir).map_err(io("listing", dir))?;
    Ok(entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect())
}

/// The container log manager.
pub struct LogRotator {
    pub runtime: Arc<dyn LogRotationRuntime>,
    pub policy: RotationPolicy,
    pub workers: usize,
    pub interval: Duration,
    pub clock: Clock,
}

impl LogRotator {
    /// Checks one container's log and rotates it when it is too big; true if it rotated.
    pub async fn rotate_if_needed(&self, id: &str, log: &Path) -> Result<bool, RotationError> {
        let size = match tokio::fs::metadata(log).await {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Renamed away without a reopen (a crash in between): have the runtime open it.
                self.runtime.reopen_container_log(id).await?;
                return Ok(false);
            }
            Err(e) => return Err(io("stat", log)(e)),
        };
        let names = siblings(log)?;
        let Some(plan) = plan_rotation(log, size, &names, &self.policy, self.clock.now()) else {
            return Ok(false);
        };
        if plan.rotate_to.exists() {
            return Err(RotationError::Exists(plan.rotate_to));
        }
        let RotationPlan {
            remove,
            compress: to_compress,
            rotate_to,
        } = plan;
        tokio::task::spawn_blocking(move || -> Result<(), RotationError> {
            for path in &remove {
                match std::fs::remove_file(path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(io("removing", path)(e));
                    }
                    _ => {}
                }
            }
            for path in &to_compress {
                compress(path)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| RotationError::Io {
            op: "compressing",
            path: log.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })??;
        tokio::fs::rename(log, &rotate_to)
            .await
            .map_err(io("renaming", log))?;
        if let Err(e) = self.runtime.reopen_container_log(id).await {
            // Back, so that the next round tries again and nothing is lost.
            if let Err(back) = tokio::fs::rename(&rotate_to, log).await {
                tracing::error!(path = %rotate_to.display(), error = %back, "renaming a rotated log back");
            }
            return Err(e.into());
        }
        tracing::debug!(container.id = %id, path = %rotate_to.display(), size, "rotated container log");
        crate::metrics::metrics().log_rotations.inc();
        Ok(true)
    }

    /// One round over every running container.
    pub async fn rotate_logs(&self) -> Result<(), cri::Error> {
        let logs = self.runtime.running_container_logs().await?;
        futures::stream::iter(logs)
            .for_each_concurrent(self.workers.max(1), |(id, log)| async move {
                if let Err(e) = self.rotate_if_needed(&id, &log).await {
                    tracing::warn!(container.id = %id, path = %log.display(), error = %e, "rotating a container log");
                }
            })
            .await;
        Ok(())
    }

    /// Every `interval` until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = cancel.cancelled() => return,
            }
            if let Err(e) = self.rotate_logs().await {
                tracing::warn!(error = %e, "listing containers for log rotation");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn now() -> Timestamp {
        "2026-12-01T10:30:05Z".parse().unwrap()
    }

    #[test]
    fn plan_rotation_table() {
        let log = Path::new("/logs/app/0.log");
        let p = |n: &str| PathBuf::from(format!("/logs/app/{n}"));
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let policy = RotationPolicy {
            max_size: 100,
            max_files: 3,
        };
        struct Case {
            name: &'static str,
            size: u64,
            siblings: Vec<String>,
            policy: RotationPolicy,
            want: Option<(Vec<PathBuf>, Vec<PathBuf>)>,
        }
        let cases = vec![
            Case {
                name: "below the maximum size: nothing",
                size: 99,
                siblings: names(&["0.log"]),
                policy,
                want: None,
            },
            Case {
                name: "first rotation: nothing to remove or compress",
                size: 100,
                siblings: names(&["0.log", "1.log"]),
                policy,
                want: Some((vec![], vec![])),
            },
            Case {
                name: "second: the previous rotated file is compressed",
                size: 150,
                siblings: names(&["0.log", "0.log.20261201-102900"]),
                policy,
                want: Some((vec![], vec![p("0.log.20261201-102900")])),
            },
            Case {
                name: "third: the oldest goes so that three files remain",
                size: 150,
                siblings: names(&["0.log", "0.log.20261201-102800.gz", "0.log.20261201-102900"]),
                policy,
                want: Some((
                    vec![p("0.log.20261201-102800.gz")],
                    vec![p("0.log.20261201-102900")],
                )),
            },
            Case {
                name: "leftovers of an interrupted compression are removed first",
                size: 150,
                siblings: names(&[
                    "0.log",
                    "0.log.20261201-102800",
                    "0.log.20261201-102800.gz",
                    "0.log.20261201-102900.gz.tmp",
                    "1.log.20261201-102700",
                ]),
                policy: RotationPolicy {
                    max_size: 100,
                    max_files: 5,
                },
                want: Some((
                    vec![
                        p("0.log.20261201-102800"),
                        p("0.log.20261201-102900.gz.tmp"),
                    ],
                    vec![],
                )),
            },
            Case {
                name: "max files 2: every rotated file goes",
                size: 150,
                siblings: names(&["0.log", "0.log.20261201-102800.gz", "0.log.20261201-102900"]),
                policy: RotationPolicy {
                    max_size: 100,
                    max_files: 2,
                },
                want: Some((
                    vec![p("0.log.20261201-102800.gz"), p("0.log.20261201-102900")],
                    vec![],
                )),
            },
        ];
        for c in cases {
            let got = plan_rotation(log, c.size, &c.siblings, &c.policy, now());
            let want = c.want.map(|(remove, compress)| RotationPlan {
                remove,
                compress,
                rotate_to: p("0.log.20261201-103005"),
            });
            assert_eq!(got, want, "{}", c.name);
        }
    }

    /// A runtime whose one running container writes to a file; reopen creates the file again.
    struct FakeLogs {
        log: PathBuf,
        reopens: std::sync::Mutex<u32>,
        fail_reopen: bool,
    }

    #[async_trait]
    impl LogRotationRuntime for FakeLogs {
        async fn running_container_logs(&self) -> Result<Vec<(String, PathBuf)>, cri::Error> {
            Ok(vec![("c1".into(), self.log.clone())])
        }
        async fn reopen_container_log(&self, _: &str) -> Result<(), cri::Error> {
            *self.reopens.lock().unwrap() += 1;
            if self.fail_reopen {
                return Err(cri::Error::Missing {
                    op: "reopen_container_log",
                    target: "c1".into(),
                    what: "container",
                });
            }
            std::fs::File::create(&self.log).unwrap();
            Ok(())
        }
    }

    fn rotator(dir: &Path, fail_reopen: bool, clock: Clock) -> (LogRotator, Arc<FakeLogs>) {
        let rt = Arc::new(FakeLogs {
            log: dir.join("0.log"),
            reopens: Default::default(),
            fail_reopen,
        });
        (
            LogRotator {
                runtime: rt.clone(),
                policy: RotationPolicy {
                    max_size: 10,
                    max_files: 3,
                },
                workers: 1,
                interval: Duration::from_secs(10),
                clock,
            },
            rt,
        )
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    struct NoHousekeeping;

    #[async_trait]
    impl cri::HousekeepingRuntime for NoHousekeeping {
        async fn runtime_info(&self) -> cri::Result<HashMap<String, String>> {
            Ok(HashMap::new())
        }
        async fn reopen_container_log(&self, _: &str) -> cri::Result<()> {
            Ok(())
        }
        async fn runtime_feature_set(&self) -> cri::Result<cri::features::RuntimeFeatureSet> {
            Ok(Default::default())
        }
    }

    /// Starts container `name` of a new sandbox on node `n1`, logging to `<name>.log`.
    async fn start(rt: &cri::fake::FakeRuntime, name: &str) {
        use cri::Runtime;
        let labels: HashMap<String, String> =
            [(cri::labels::NODE_NAME.to_string(), "n1".to_string())].into();
        let sandbox = cri::api::PodSandboxConfig {
            metadata: Some(cri::api::PodSandboxMetadata {
                name: name.into(),
                uid: name.into(),
                ..Default::default()
            }),
            labels: labels.clone(),
            ..Default::default()
        };
        let id = rt.run_pod_sandbox(sandbox.clone(), "").await.unwrap();
        let config = cri::api::ContainerConfig {
            metadata: Some(cri::api::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::api::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            log_path: format!("{name}.log"),
            labels,
            ..Default::default()
        };
        let cid = rt.create_container(&id, config, sandbox).await.unwrap();
        rt.start_container(&cid).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn each_containers_log_path_is_asked_once() {
        let rt = Arc::new(cri::fake::FakeRuntime::new(Clock::starting_at(now())));
        rt.add_image("busybox");
        start(&rt, "a").await;
        start(&rt, "b").await;
        let logs = CriLogs::new(rt.clone(), Arc::new(NoHousekeeping), "n1".into());
        let paths = |v: Vec<(String, PathBuf)>| {
            let mut p: Vec<String> = v
                .into_iter()
                .map(|(_, p)| p.display().to_string())
                .collect();
            p.sort();
            p
        };
        let reads = || rt.container_status_reads();
        let before = reads();
        let first = logs.running_container_logs().await.unwrap();
        assert_eq!(paths(first), ["a.log", "b.log"]);
        assert_eq!(reads() - before, 2);
        // The next interval: the same containers, no ContainerStatus at all.
        let before = reads();
        let again = logs.running_container_logs().await.unwrap();
        assert_eq!(paths(again), ["a.log", "b.log"]);
        assert_eq!(reads(), before);
        // One exits, another starts: only the new one is asked; the gone one is forgotten.
        rt.exit_container("a", 0);
        start(&rt, "c").await;
        let before = reads();
        let changed = logs.running_container_logs().await.unwrap();
        assert_eq!(paths(changed), ["b.log", "c.log"]);
        assert_eq!(reads() - before, 1);
        assert_eq!(logs.known_paths().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn rotates_compresses_and_keeps_max_files() {
        let tmp = tempfile::tempdir().unwrap();
        let clock = Clock::starting_at(now());
        let (rot, rt) = rotator(tmp.path(), false, clock);
        let log = tmp.path().join("0.log");
        for round in 0..4u64 {
            std::fs::write(&log, format!("round {round} line\n")).unwrap();
            // the runtime's mode for a container log
            std::fs::set_permissions(&log, std::os::unix::fs::PermissionsExt::from_mode(0o640))
                .unwrap();
            rot.rotate_logs().await.unwrap();
            tokio::time::advance(Duration::from_secs(10)).await;
        }
        assert_eq!(*rt.reopens.lock().unwrap(), 4);
        assert_eq!(
            files(tmp.path()),
            vec!["0.log", "0.log.20261201-103025.gz", "0.log.20261201-103035"]
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(
            std::fs::File::open(tmp.path().join("0.log.20261201-103025.gz")).unwrap(),
        )
        .read_to_string(&mut text)
        .unwrap();
        assert_eq!(text, "round 2 line\n");
        // compressed with the live file's mode, not the umask's 0644
        let mode = |name: &str| {
            std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(tmp.path().join(name))
                    .unwrap()
                    .permissions(),
            ) & 0o777
        };
        assert_eq!(mode("0.log.20261201-103025.gz"), 0o640);
        // Below the size: untouched.
        std::fs::write(&log, "short").unwrap();
        rot.rotate_logs().await.unwrap();
        assert_eq!(*rt.reopens.lock().unwrap(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_reopen_puts_the_log_back() {
        let tmp = tempfile::tempdir().unwrap();
        let (rot, _) = rotator(tmp.path(), true, Clock::starting_at(now()));
        let log = tmp.path().join("0.log");
        std::fs::write(&log, "0123456789abc\n").unwrap();
        assert!(rot.rotate_if_needed("c1", &log).await.is_err());
        assert_eq!(files(tmp.path()), vec!["0.log"]);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "0123456789abc\n");
    }
}
