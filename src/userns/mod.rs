//! Pod user namespaces (`hostUsers: false`), as the kubelet's `pkg/kubelet/userns`: every such
//! pod gets its own range of host IDs — container IDs `0..idsPerPod` mapped to host IDs
//! `start..start+idsPerPod`, the same range for users and groups — cut from the IDs the node
//! gives the kubelet (the `kubelet` entry of `/etc/subuid` and `/etc/subgid`; without one, every
//! ID from 65536 up). A pod gets the lowest free slot; its range is kept in
//! `<rootDir>/pods/<uid>/userns` (the kubelet's file name and JSON) and read back at start, so a
//! restart of nodelet keeps each pod's range; it is freed when the pod's directory goes (the
//! pod's removal and the orphan-directory cleanup).
//!
//! The decisions are pure and table-tested: [`parse_subid`], [`kubelet_range`],
//! [`Layout::new`] (the kubelet's rules for the range and `idsPerPod`), [`Allocator`] (lowest
//! free slot, record, release), [`parse_mapping_file`] / [`mapping_file`], [`decide`] (feature
//! gate and runtime handler). [`UsernsManager`] does the file I/O around them: the mapping file
//! is opened beneath the pod directory's descriptor, never following a symlink.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{fsync, unlinkat, UnlinkatFlags};
use serde::{Deserialize, Serialize};

/// The unit every range is a multiple of (`userNsUnitLength`).
pub const UNIT: u32 = 65536;
/// `userNamespaces.idsPerPod` when the configuration does not set it
/// (`DefaultKubeletUserNamespacesIDsPerPod`).
pub const DEFAULT_IDS_PER_POD: u32 = 65536;
/// The kubelet's range without a `kubelet` entry: every ID from 65536 up.
pub const DEFAULT_FIRST_ID: u32 = 1 << 16;
pub const DEFAULT_LENGTH: u32 = u32::MAX - DEFAULT_FIRST_ID + 1;
/// The user whose subordinate IDs the kubelet takes.
pub const KUBELET_USER: &str = "kubelet";
/// The mapping file in the pod directory (`mappingsFile`).
pub const MAPPING_FILE: &str = "userns";
/// The feature gate.
pub const FEATURE_GATE: &str = "UserNamespacesSupport";
/// The admission reason when a pod asks for a user namespace the node cannot give.
pub const NOT_SUPPORTED_REASON: &str = "UserNamespacesNotSupported";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UsernsError {
    #[error("{file}: line {line}: {reason}")]
    SubIdLine {
        file: String,
        line: usize,
        reason: String,
    },
    #[error("more than one entry for user {user:?} in {file}")]
    SubIdEntries { file: String, user: String },
    #[error("mismatched subuids and subgids for user {0:?}")]
    Mismatch(String),
    #[error("kubelet user namespace length {0} is not a multiple of {UNIT}")]
    LengthNotUnit(u32),
    #[error("kubelet user assigned ID {0} is not a multiple of {1}")]
    FirstNotMultiple(u32, u32),
    #[error("kubelet user assigned ID {0} must be greater or equal to {1}")]
    FirstTooLow(u32, u32),
    #[error("kubelet user assigned IDs length {0} is not a multiple of {1}")]
    LengthNotMultiple(u32, u32),
    #[error("kubelet user assigned IDs are not enough to support {0} pods")]
    TooFewIds(u32),
    #[error("could not find an empty slot to allocate a user namespace")]
    Full,
    #[error("invalid user namespace mappings file: {0}")]
    InvalidFile(String),
    #[error("invalid user namespace configuration: {0}")]
    InvalidMapping(&'static str),
    #[error("wrong user namespace length {0}")]
    WrongLength(u32),
    #[error("wrong user namespace offset specified {0}")]
    WrongOffset(u32),
    #[error("id {0} is out of range")]
    OutOfRange(u32),
    #[error("range picked for pod {0:?} already taken")]
    Taken(String),
    #[error("different user namespace range already used by pod {0:?}")]
    Different(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: Errno },
    #[error("pod UID {0:?} is not a plain directory name")]
    BadUid(String),
}

/// One pod's range: container IDs `0..length` are host IDs `host_id..host_id+length`, for users
/// and groups alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub host_id: u32,
    pub length: u32,
}

/// The `kubelet` entry of a subordinate-ID file (`name:start:count` lines): `None` when there is
/// none; more than one entry is refused (the kubelet's `getsubids` parsing takes exactly one).
pub fn parse_subid(
    file: &str,
    contents: &str,
    user: &str,
) -> Result<Option<(u32, u32)>, UsernsError> {
    let mut found = None;
    for (i, line) in contents.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split(':');
        if parts.next() != Some(user) {
            continue;
        }
        let bad = |reason: String| UsernsError::SubIdLine {
            file: file.to_string(),
            line: i + 1,
            reason,
        };
        let (Some(start), Some(count), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad(format!("{line:?} is not name:start:count")));
        };
        let num = |s: &str| {
            s.parse::<u32>()
                .map_err(|e| bad(format!("{s:?} in {line:?}: {e}")))
        };
        if found.is_some() {
            return Err(UsernsError::SubIdEntries {
                file: file.to_string(),
                user: user.to_string(),
            });
        }
        found = Some((num(start)?, num(count)?));
    }
    Ok(found)
}

/// The kubelet's IDs (`getKubeletMappings`): the `kubelet` entry, the same in both files, or
/// the default range when neither file has one (a missing file has none).
pub fn kubelet_range(
    subuid: (&str, Option<&str>),
    subgid: (&str, Option<&str>),
) -> Result<(u32, u32), UsernsError> {
    let uids = match subuid.1 {
        Some(c) => parse_subid(subuid.0, c, KUBELET_USER)?,
        None => None,
    };
    let gids = match subgid.1 {
        Some(c) => parse_subid(subgid.0, c, KUBELET_USER)?,
        None => None,
    };
    match (uids, gids) {
        (None, None) => Ok((DEFAULT_FIRST_ID, DEFAULT_LENGTH)),
        (Some(u), Some(g)) if u == g => Ok(u),
        _ => Err(UsernsError::Mismatch(KUBELET_USER.to_string())),
    }
}

/// The slots pods are given: `count` ranges of `ids_per_pod` IDs from `first` (slot `i` starts
/// at `first + i * ids_per_pod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub first: u32,
    pub count: u32,
    pub ids_per_pod: u32,
}

impl Layout {
    /// The kubelet's checks (`MakeUserNsManager`) of the kubelet's range against `idsPerPod` and
    /// `maxPods`.
    pub fn new(
        first: u32,
        length: u32,
        ids_per_pod: u32,
        max_pods: u32,
    ) -> Result<Layout, UsernsError> {
        if ids_per_pod == 0 || ids_per_pod % UNIT != 0 {
            return Err(UsernsError::LengthNotUnit(ids_per_pod));
        }
        if first % ids_per_pod != 0 {
            return Err(UsernsError::FirstNotMultiple(first, ids_per_pod));
        }
        if first < ids_per_pod {
            return Err(UsernsError::FirstTooLow(first, ids_per_pod));
        }
        if length % ids_per_pod != 0 {
            return Err(UsernsError::LengthNotMultiple(length, ids_per_pod));
        }
        if length / ids_per_pod < max_pods {
            return Err(UsernsError::TooFewIds(max_pods));
        }
        Ok(Layout {
            first,
            count: length / ids_per_pod,
            ids_per_pod,
        })
    }

    fn start(&self, slot: u32) -> u32 {
        self.first + slot * self.ids_per_pod
    }
}

/// Which slots are taken, by which pod. Pure: no I/O.
#[derive(Debug, Clone)]
pub struct Allocator {
    layout: Layout,
    used: BTreeSet<u32>,
    by_pod: HashMap<String, u32>,
}

impl Allocator {
    pub fn new(layout: Layout) -> Allocator {
        Allocator {
            layout,
            used: BTreeSet::new(),
            by_pod: HashMap::new(),
        }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The pod's range, if it has one.
    pub fn get(&self, pod: &str) -> Option<Mapping> {
        self.by_pod.get(pod).map(|slot| Mapping {
            host_id: self.layout.start(*slot),
            length: self.layout.ids_per_pod,
        })
    }

    /// The lowest free slot for `pod` (its own if it has one).
    pub fn allocate(&mut self, pod: &str) -> Result<Mapping, UsernsError> {
        if let Some(m) = self.get(pod) {
            return Ok(m);
        }
        let slot = (0..self.layout.count)
            .find(|s| !self.used.contains(s))
            .ok_or(UsernsError::Full)?;
        self.used.insert(slot);
        self.by_pod.insert(pod.to_string(), slot);
        Ok(self.get(pod).unwrap_or(Mapping {
            host_id: self.layout.start(slot),
            length: self.layout.ids_per_pod,
        }))
    }

    /// Takes the range a pod's file names (`record`): it must be one of the layout's slots, free
    /// or already the pod's.
    pub fn record(&mut self, pod: &str, m: Mapping) -> Result<(), UsernsError> {
        let l = self.layout;
        if m.length != l.ids_per_pod {
            return Err(UsernsError::WrongLength(m.length));
        }
        if m.host_id % l.ids_per_pod != 0 {
            return Err(UsernsError::WrongOffset(m.host_id));
        }
        if m.host_id < l.first || (m.host_id - l.first) / l.ids_per_pod >= l.count {
            return Err(UsernsError::OutOfRange(m.host_id));
        }
        let slot = (m.host_id - l.first) / l.ids_per_pod;
        match self.by_pod.get(pod) {
            Some(s) if *s == slot => return Ok(()),
            Some(_) => return Err(UsernsError::Different(pod.to_string())),
            None => {}
        }
        if self.used.contains(&slot) {
            return Err(UsernsError::Taken(pod.to_string()));
        }
        self.used.insert(slot);
        self.by_pod.insert(pod.to_string(), slot);
        Ok(())
    }

    /// Frees the pod's range; `false` when it had none.
    pub fn release(&mut self, pod: &str) -> bool {
        match self.by_pod.remove(pod) {
            Some(slot) => {
                self.used.remove(&slot);
                true
            }
            None => false,
        }
    }

    /// The pods holding a range, sorted.
    pub fn pods(&self) -> Vec<String> {
        let mut pods: Vec<String> = self.by_pod.keys().cloned().collect();
        pods.sort();
        pods
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct IdMapping {
    #[serde(rename = "hostId")]
    host_id: u32,
    #[serde(rename = "containerId")]
    container_id: u32,
    length: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct MappingFile {
    #[serde(rename = "uidMappings")]
    uid_mappings: Vec<IdMapping>,
    #[serde(rename = "gidMappings")]
    gid_mappings: Vec<IdMapping>,
}

/// The file's JSON for `m` (the kubelet's `userNamespace` struct).
pub fn mapping_file(m: Mapping) -> String {
    let one = IdMapping {
        host_id: m.host_id,
        container_id: 0,
        length: m.length,
    };
    let file = MappingFile {
        uid_mappings: vec![one],
        gid_mappings: vec![one],
    };
    serde_json::to_string(&file).unwrap_or_default()
}

/// A mapping file as the kubelet checks it (`parseUserNsFileAndRecord`): one mapping, the same
/// for users and groups, container ID 0 mapped.
pub fn parse_mapping_file(content: &[u8]) -> Result<Mapping, UsernsError> {
    let file: MappingFile =
        serde_json::from_slice(content).map_err(|e| UsernsError::InvalidFile(e.to_string()))?;
    if file.uid_mappings.len() != 1 {
        return Err(UsernsError::InvalidMapping(
            "no more than one mapping allowed.",
        ));
    }
    if file.gid_mappings.len() != file.uid_mappings.len() {
        return Err(UsernsError::InvalidMapping(
            "GID and UID mappings should be identical.",
        ));
    }
    let (u, g) = (file.uid_mappings[0], file.gid_mappings[0]);
    if u != g {
        return Err(UsernsError::InvalidMapping(
            "GID and UID mapping should be identical",
        ));
    }
    if u.container_id != 0 {
        return Err(UsernsError::InvalidMapping("UID 0 must be mapped"));
    }
    Ok(Mapping {
        host_id: u.host_id,
        length: u.length,
    })
}

/// What a pod's user namespace is to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The node's user namespace.
    Node,
    /// A user namespace of the pod's own, with a range from the manager.
    Pod,
}

/// Pure: the pod's user namespace from `hostUsers`, the `UserNamespacesSupport` gate and whether
/// the pod's runtime handler (`handler`, `""` the default) declares `user_namespaces`
/// (`GetOrCreateUserNamespaceMappings`); the error is the kubelet's message.
pub fn decide(
    host_users: Option<bool>,
    gate: bool,
    handler: &str,
    handler_supports: bool,
) -> Result<Decision, String> {
    match host_users {
        None => Ok(Decision::Node),
        Some(_) if !gate => Err(format!(
            "the feature gate {FEATURE_GATE:?} is disabled: can't set spec.HostUsers"
        )),
        Some(true) => Ok(Decision::Node),
        Some(false) if handler_supports => Ok(Decision::Pod),
        Some(false) if handler.is_empty() => Err(
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces".into(),
        ),
        Some(false) => Err(format!(
            "can't set `spec.hostUsers: false`, RuntimeClass handler {handler:?} does not support user namespaces"
        )),
    }
}

/// Where the manager reads the kubelet's IDs and keeps the pods' files.
#[derive(Debug, Clone)]
pub struct UsernsPaths {
    /// `/etc/subuid` and `/etc/subgid` on a node.
    pub subuid: PathBuf,
    pub subgid: PathBuf,
    /// `<rootDir>/pods`.
    pub pods_dir: PathBuf,
}

/// The node's user-namespace ranges: the [`Allocator`] with each pod's range kept in its pod
/// directory.
#[derive(Debug)]
pub struct UsernsManager {
    pods_dir: PathBuf,
    allocator: Mutex<Allocator>,
}

fn io(path: &Path) -> impl Fn(Errno) -> UsernsError + '_ {
    move |source| UsernsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn read_optional(path: &Path) -> Result<Option<String>, UsernsError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(UsernsError::Io {
            path: path.to_path_buf(),
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        }),
    }
}

fn check_uid(uid: &str) -> Result<(), UsernsError> {
    if uid.is_empty() || uid == "." || uid == ".." || uid.contains('/') || uid.contains('\0') {
        return Err(UsernsError::BadUid(uid.to_string()));
    }
    Ok(())
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

impl UsernsManager {
    /// Reads the kubelet's IDs, checks them against `ids_per_pod` and `max_pods`, and takes back
    /// the range of every pod directory that has a mapping file (the kubelet's start: a file it
    /// cannot take is an error).
    pub fn load(
        paths: &UsernsPaths,
        ids_per_pod: u32,
        max_pods: u32,
    ) -> Result<UsernsManager, UsernsError> {
        let subuid = read_optional(&paths.subuid)?;
        let subgid = read_optional(&paths.subgid)?;
        let (first, length) = kubelet_range(
            (&paths.subuid.display().to_string(), subuid.as_deref()),
            (&paths.subgid.display().to_string(), subgid.as_deref()),
        )?;
        let layout = Layout::new(first, length, ids_per_pod, max_pods)?;
        let manager = UsernsManager {
            pods_dir: paths.pods_dir.clone(),
            allocator: Mutex::new(Allocator::new(layout)),
        };
        let entries = match std::fs::read_dir(&paths.pods_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(manager),
            Err(e) => {
                return Err(UsernsError::Io {
                    path: paths.pods_dir.clone(),
                    source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                })
            }
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Some(uid) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if let Some(m) = manager.read_file(&uid)? {
                manager.lock().record(&uid, m)?;
            }
        }
        Ok(manager)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Allocator> {
        self.allocator.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn layout(&self) -> Layout {
        self.lock().layout()
    }

    /// The pods holding a range.
    pub fn pods(&self) -> Vec<String> {
        self.lock().pods()
    }

    fn pod_dir_fd(&self, uid: &str) -> Result<Option<OwnedFd>, UsernsError> {
        check_uid(uid)?;
        let pods = match openat(
            nix::fcntl::AT_FDCWD,
            &self.pods_dir,
            DIR_FLAGS,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(io(&self.pods_dir)(e)),
        };
        match openat(pods.as_fd(), uid, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io(&self.pods_dir.join(uid))(e)),
        }
    }

    /// The range the pod's file names, if there is a file.
    fn read_file(&self, uid: &str) -> Result<Option<Mapping>, UsernsError> {
        let Some(dir) = self.pod_dir_fd(uid)? else {
            return Ok(None);
        };
        let path = self.pods_dir.join(uid).join(MAPPING_FILE);
        let fd = match openat(
            dir.as_fd(),
            MAPPING_FILE,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        let mut content = Vec::new();
        use std::io::Read;
        std::fs::File::from(fd)
            .take(64 * 1024)
            .read_to_end(&mut content)
            .map_err(|e| io(&path)(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))?;
        if content.is_empty() {
            return Ok(None);
        }
        parse_mapping_file(&content).map(Some)
    }

    /// Writes the file atomically (a temporary file renamed over it, both synced) beneath the
    /// pod directory, creating the directory if needed.
    fn write_file(&self, uid: &str, m: Mapping) -> Result<(), UsernsError> {
        check_uid(uid)?;
        let pod_dir = self.pods_dir.join(uid);
        let dir = match self.pod_dir_fd(uid)? {
            Some(fd) => fd,
            None => {
                std::fs::create_dir_all(&pod_dir).map_err(|e| {
                    io(&pod_dir)(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
                })?;
                self.pod_dir_fd(uid)?.ok_or(io(&pod_dir)(Errno::ENOENT))?
            }
        };
        let tmp = ".userns.tmp";
        match unlinkat(dir.as_fd(), tmp, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(io(&pod_dir.join(tmp))(e)),
        }
        let fd = openat(
            dir.as_fd(),
            tmp,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(io(&pod_dir.join(tmp)))?;
        let mut file = std::fs::File::from(fd);
        use std::io::Write;
        file.write_all(mapping_file(m).as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| {
                io(&pod_dir.join(tmp))(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
            })?;
        renameat(dir.as_fd(), tmp, dir.as_fd(), MAPPING_FILE)
            .map_err(io(&pod_dir.join(MAPPING_FILE)))?;
        fsync(dir.as_fd()).map_err(io(&pod_dir))
    }

    /// The pod's range: the one it holds, the one its file names (after a restart), or the
    /// lowest free one, written to its file before it is returned.
    pub fn get_or_create(&self, uid: &str) -> Result<Mapping, UsernsError> {
        if let Some(m) = self.lock().get(uid) {
            return Ok(m);
        }
        if let Some(m) = self.read_file(uid)? {
            self.lock().record(uid, m)?;
            return Ok(m);
        }
        let m = self.lock().allocate(uid)?;
        if let Err(e) = self.write_file(uid, m) {
            self.lock().release(uid);
            return Err(e);
        }
        Ok(m)
    }

    /// Frees the pod's range and removes its file (`Release`); call before or after the pod
    /// directory is removed.
    pub fn release(&self, uid: &str) {
        if !self.lock().release(uid) {
            return;
        }
        tracing::debug!(pod.uid = %uid, "released the pod's user namespace range");
        if let Ok(Some(dir)) = self.pod_dir_fd(uid) {
            let _ = unlinkat(dir.as_fd(), MAPPING_FILE, UnlinkatFlags::NoRemoveDir);
        }
    }

    /// Frees the range of every pod whose directory is gone and that is not in `keep` (the pods
    /// the node runs or still has runtime objects of): the kubelet's
    /// `CleanupOrphanedPodUsernsAllocations`, which container GC runs after its orphan-directory
    /// cleanup. Unlike the kubelet, a pod whose directory stays keeps its range: the directory's
    /// file still names it, and giving it out again would clash when nodelet next starts.
    pub fn release_orphans(&self, keep: &std::collections::HashSet<String>) -> usize {
        let mut released = 0;
        for uid in self.pods() {
            if keep.contains(&uid) || self.pods_dir.join(&uid).is_dir() {
                continue;
            }
            self.release(&uid);
            released += 1;
        }
        released
    }
}

/// Each pod's range by UID.
pub fn ranges(manager: &UsernsManager) -> BTreeMap<String, Mapping> {
    let a = manager.lock();
    a.pods()
        .into_iter()
        .filter_map(|p| a.get(&p).map(|m| (p, m)))
        .collect()
}

#[cfg(test)]
mod tests;
