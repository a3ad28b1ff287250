//! Pod volume usage: `du` of every `<rootDir>/pods/<uid>/volumes/<plugin>/<volume>`.
//!
//! A walk costs as much as the volume has files, so, like the kubelet (which recomputes volume
//! stats in the background every `volumeStatsAggPeriod`, 1 minute by default), nodelet walks a
//! pod's volumes at most once per that period and serves the cached numbers in between.
//!
//! Which volumes count towards the pod's ephemeral storage follows the kubelet's
//! `isVolumeEphemeral`: emptyDir on the node's disk (not `medium: Memory`), configMap (and
//! gitRepo, which nodelet does not support). Every volume is listed in `volume`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use super::node::{filesystem_usage, FsUsage};

/// The pod directory's plugin directory of CSI volumes.
const CSI_PLUGIN_DIR: &str = "kubernetes.io~csi";

/// `volumeStatsAggPeriod`'s default: how long a pod's volume numbers are served before they are
/// walked again.
pub const VOLUME_STATS_PERIOD: Duration = Duration::from_secs(60);

/// One volume's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeUsage {
    pub name: String,
    /// Counted in the pod's `ephemeral-storage`.
    pub ephemeral: bool,
    /// Bytes allocated (blocks × 512, as `du`).
    pub bytes: u64,
    /// Files and directories, the volume's own directory included.
    pub inodes: u64,
    /// The filesystem the volume is on (its own tmpfs for memory-backed volumes).
    pub fs: Option<FsUsage>,
}

/// How deep [`dir_usage`] descends; below that a directory counts as itself alone. Each level
/// holds two descriptors while it is walked.
const MAX_WALK_DEPTH: usize = 256;

/// Bytes allocated (`du`: blocks × 512) and entries below `dir`, staying on its filesystem.
/// `None` when `dir` does not exist or is a symlink; a file counts as itself.
///
/// The volume belongs to a container, which may swap any directory in it for a symlink at any
/// moment: the walk goes beneath directory descriptors (`openat` with `O_NOFOLLOW`, `fstatat`
/// without following), never by path, so it never leaves the volume; and it streams each
/// directory, holding no list of its entries.
pub fn dir_usage(dir: &Path) -> Option<(u64, u64)> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fstat, Mode};
    let top = open(
        dir,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = fstat(&top).ok()?;
    let mut usage = (blocks_bytes(&st), 1u64);
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => {}
        libc::S_IFLNK => return None,
        _ => return Some(usage),
    }
    let readable = nix::fcntl::openat(
        &top,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    walk(readable, st.st_dev, 0, &mut usage);
    Some(usage)
}

fn blocks_bytes(st: &nix::sys::stat::FileStat) -> u64 {
    u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512)
}

/// Adds what is below the directory `dir` (on device `device`) to `usage`.
fn walk(dir: std::os::fd::OwnedFd, device: u64, depth: usize, usage: &mut (u64, u64)) {
    use nix::fcntl::{openat, AtFlags, OFlag};
    use nix::sys::stat::{fstat, fstatat, Mode};
    if depth >= MAX_WALK_DEPTH {
        return;
    }
    // The listing reads through a duplicate; `dir` stays free for the `*at` calls.
    let Ok(listing) = nix::unistd::dup(&dir) else {
        return;
    };
    let Ok(mut entries) = nix::dir::Dir::from_fd(listing) else {
        return;
    };
    for entry in entries.iter().flatten() {
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let Ok(st) = fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        usage.0 = usage.0.saturating_add(blocks_bytes(&st));
        usage.1 = usage.1.saturating_add(1);
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR || st.st_dev != device {
            continue;
        }
        let Ok(child) = openat(
            &dir,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        // Swapped between the two calls: not the directory that was counted.
        match fstat(&child) {
            Ok(now) if now.st_dev == st.st_dev && now.st_ino == st.st_ino => {
                walk(child, device, depth + 1, usage)
            }
            _ => continue,
        }
    }
}

/// The names of the pod's volumes that count as ephemeral storage (the kubelet's
/// `isVolumeEphemeral`).
pub fn ephemeral_volume_names(pod: &Pod) -> HashSet<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter(|v| {
            v.config_map.is_some()
                || v.git_repo.is_some()
                || v.empty_dir
                    .as_ref()
                    .is_some_and(|e| e.medium.as_deref().unwrap_or_default().is_empty())
        })
        .map(|v| v.name.clone())
        .collect()
}

/// Walks every volume of the pod whose directory is `pod_dir`. `ephemeral` is the answer of
/// [`ephemeral_volume_names`]; without a spec (`None`) disk emptyDirs and configMaps count.
pub fn read_pod_volumes(pod_dir: &Path, ephemeral: Option<&HashSet<String>>) -> Vec<VolumeUsage> {
    let mut volumes = Vec::new();
    let Ok(plugins) = std::fs::read_dir(pod_dir.join("volumes")) else {
        return volumes;
    };
    for plugin in plugins.flatten() {
        let plugin_name = plugin.file_name().to_string_lossy().into_owned();
        // A CSI volume is its driver's to measure (`NodeGetVolumeStats`, `super::csi_volumes`),
        // never walked: it may be a network filesystem, or large.
        if plugin_name == CSI_PLUGIN_DIR {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(plugin.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((bytes, inodes)) = dir_usage(&entry.path()) else {
                continue;
            };
            let ephemeral = match ephemeral {
                Some(names) => names.contains(&name),
                None => matches!(
                    plugin_name.as_str(),
                    "kubernetes.io~empty-dir" | "kubernetes.io~configmap"
                ),
            };
            volumes.push(VolumeUsage {
                fs: filesystem_usage(&entry.path()).ok(),
                name,
                ephemeral,
                bytes,
                inodes,
            });
        }
    }
    volumes.sort_by(|a, b| a.name.cmp(&b.name));
    volumes
}

/// The last walk of each pod's volumes.
#[derive(Debug)]
pub struct VolumeCache {
    entries: Mutex<HashMap<String, (Instant, Vec<VolumeUsage>)>>,
    /// `volumeStatsAggPeriod`.
    period: Duration,
}

impl Default for VolumeCache {
    fn default() -> Self {
        VolumeCache::new(VOLUME_STATS_PERIOD)
    }
}

impl VolumeCache {
    /// A cache that walks a pod's volumes again once its last walk is `period` old.
    pub fn new(period: Duration) -> VolumeCache {
        VolumeCache {
            entries: Mutex::new(HashMap::new()),
            period,
        }
    }

    /// The pod's volumes, walked again when the last walk is the cache's period old.
    pub fn get(
        &self,
        uid: &str,
        now: Instant,
        walk: impl FnOnce() -> Vec<VolumeUsage>,
    ) -> Vec<VolumeUsage> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, volumes)) = entries.get(uid) {
            if now.saturating_duration_since(*at) < self.period {
                return volumes.clone();
            }
        }
        let volumes = walk();
        entries.insert(uid.to_string(), (now, volumes.clone()));
        volumes
    }

    /// Forgets the pods not in `uids`.
    pub fn retain(&self, uids: &HashSet<&str>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|uid, _| uids.contains(uid.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::node::test_support::write;
    use k8s_openapi::api::core::v1::{
        ConfigMapVolumeSource, EmptyDirVolumeSource, PodSpec, Volume,
    };

    #[test]
    fn ephemeral_volumes_follow_the_kubelet() {
        let volume = |name: &str, f: &dyn Fn(&mut Volume)| {
            let mut v = Volume {
                name: name.into(),
                ..Default::default()
            };
            f(&mut v);
            v
        };
        let pod = Pod {
            spec: Some(PodSpec {
                volumes: Some(vec![
                    volume("disk", &|v| {
                        v.empty_dir = Some(EmptyDirVolumeSource::default())
                    }),
                    volume("mem", &|v| {
                        v.empty_dir = Some(EmptyDirVolumeSource {
                            medium: Some("Memory".into()),
                            ..Default::default()
                        })
                    }),
                    volume("cfg", &|v| {
                        v.config_map = Some(ConfigMapVolumeSource::default())
                    }),
                    volume("host", &|_| {}),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut names: Vec<String> = ephemeral_volume_names(&pod).into_iter().collect();
        names.sort();
        assert_eq!(names, vec!["cfg", "disk"]);
    }

    #[test]
    fn walks_every_volume_of_a_pod() {
        let dir = tempfile::tempdir().unwrap();
        let pod = dir.path();
        write(
            pod,
            "volumes/kubernetes.io~empty-dir/cache/a",
            &"a".repeat(10_000),
        );
        write(pod, "volumes/kubernetes.io~empty-dir/cache/sub/b", "b");
        write(pod, "volumes/kubernetes.io~secret/creds/token", "t");
        let volumes = read_pod_volumes(pod, None);
        let summary: Vec<(&str, bool, u64)> = volumes
            .iter()
            .map(|v| (v.name.as_str(), v.ephemeral, v.inodes))
            .collect();
        // cache: itself, a, sub, sub/b; creds: itself, token
        assert_eq!(summary, vec![("cache", true, 4), ("creds", false, 2)]);
        assert!(volumes[0].bytes >= 10_000, "{:?}", volumes[0]);
        assert!(volumes[0].fs.is_some());
        // with the spec: only what the spec makes ephemeral
        let only_creds = HashSet::from(["creds".to_string()]);
        let volumes = read_pod_volumes(pod, Some(&only_creds));
        assert_eq!(
            volumes.iter().map(|v| v.ephemeral).collect::<Vec<_>>(),
            vec![false, true]
        );
        assert!(read_pod_volumes(&pod.join("missing"), None).is_empty());
    }

    #[test]
    fn dir_usage_of_files_links_missing_paths_and_deep_trees() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("etc-hosts");
        std::fs::write(&file, "127.0.0.1 localhost\n").unwrap();
        assert_eq!(dir_usage(&file).map(|(_, inodes)| inodes), Some(1));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert_eq!(dir_usage(&link), None, "a symlink is never walked");
        assert_eq!(dir_usage(&dir.path().join("missing")), None);
        let mut deep = dir.path().join("deep");
        for _ in 0..MAX_WALK_DEPTH + 20 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let (_, inodes) = dir_usage(&dir.path().join("deep")).unwrap();
        assert_eq!(inodes, 1 + MAX_WALK_DEPTH as u64, "stops at its depth");
    }

    /// A container swaps a directory of its volume for a symlink to a big directory elsewhere
    /// and back, as fast as it can, while the volume is measured: the walk goes beneath
    /// descriptors, so it never counts anything outside (a walk by path followed the link
    /// whenever the swap fell between its `lstat` and its `read_dir`).
    #[test]
    fn a_directory_swapped_for_a_symlink_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("host");
        std::fs::create_dir(&outside).unwrap();
        for i in 0..300 {
            std::fs::write(outside.join(format!("f{i}")), "").unwrap();
        }
        let volume = dir.path().join("volume");
        std::fs::create_dir_all(volume.join("d")).unwrap();
        std::fs::write(volume.join("d/inside"), "").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (volume, outside, stop) = (volume.clone(), outside.clone(), stop.clone());
            std::thread::spawn(move || {
                let (d, kept) = (volume.join("d"), volume.join("kept"));
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::fs::rename(&d, &kept);
                    let _ = std::os::unix::fs::symlink(&outside, &d);
                    let _ = std::fs::remove_file(&d);
                    let _ = std::fs::rename(&kept, &d);
                }
            })
        };
        let mut most = 0;
        for _ in 0..3000 {
            if let Some((_, inodes)) = dir_usage(&volume) {
                most = most.max(inodes);
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        // The volume, d (or kept, or the link), d/inside.
        // Renames while a directory is read may show an entry twice; leaving it would count
        // the 300 outside.
        assert!(most < 20, "the walk left the volume: {most} entries");
    }

    #[tokio::test(start_paused = true)]
    async fn walks_at_most_once_a_period() {
        let cache = VolumeCache::default();
        let walks = std::cell::Cell::new(0);
        let walk = || {
            walks.set(walks.get() + 1);
            vec![]
        };
        cache.get("u1", Instant::now(), walk);
        tokio::time::advance(VOLUME_STATS_PERIOD - Duration::from_secs(1)).await;
        cache.get("u1", Instant::now(), walk);
        assert_eq!(walks.get(), 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        cache.get("u1", Instant::now(), walk);
        assert_eq!(walks.get(), 2);
        cache.retain(&HashSet::new());
        cache.get("u1", Instant::now(), walk);
        assert_eq!(walks.get(), 3, "forgotten pods are walked afresh");
        // volumeStatsAggPeriod: 10s.
        let cache = VolumeCache::new(Duration::from_secs(10));
        cache.get("u2", Instant::now(), walk);
        tokio::time::advance(Duration::from_secs(9)).await;
        cache.get("u2", Instant::now(), walk);
        assert_eq!(walks.get(), 4);
        tokio::time::advance(Duration::from_secs(1)).await;
        cache.get("u2", Instant::now(), walk);
        assert_eq!(walks.get(), 5);
    }
}
