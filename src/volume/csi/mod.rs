//! The CSI volume manager: `persistentVolumeClaim`, `ephemeral` and `csi` inline volumes,
//! mounted through the CSI drivers registered on the node ([`crate::csi::CsiDrivers`]) in the
//! kubelet's shape (`pkg/kubelet/volumemanager`, `pkg/volume/csi`):
//!
//! * desired state: each pod's volumes resolved ([`resolve`], pure) from the objects read for
//!   them — claim, PersistentVolume, CSIDriver (one GET each per sync, as the kubelet's
//!   populator) — and, where the CSIDriver asks for attaching, its VolumeAttachment's
//!   `status.attached`;
//! * actual state: what the kubelet's files on disk say ([`paths`]: `vol_data.json` beside
//!   each global mount and each pod target), and `/proc/self/mountinfo` — so it survives a
//!   restart and [`mounted_volumes`] lists it;
//! * the reconciler ([`reconcile::plan`], pure) between them, its operations run here:
//!   `NodeStageVolume` once per volume per node (drivers with `STAGE_UNSTAGE_VOLUME`),
//!   `NodePublishVolume` per pod, `NodeUnpublishVolume` and `NodeUnstageVolume` after the last
//!   pod. All operations run under one lock, so a pod's teardown never unstages a volume
//!   another pod is between stage and publish of.
//!
//! nodelet never unmounts a CSI target itself: the driver does (a pod directory whose target
//! is still mounted stays until the driver is back and the next pass unpublishes it).

pub mod expand;
pub mod ownership;
pub mod paths;
pub mod reconcile;
pub mod resolve;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::csi::{api, CsiDrivers, RegisteredDriver};
use crate::objects::ObjectSource;
use paths::{keys, VolData};
use reconcile::{Actual, Op, Published, VolumeKey, Want};
use resolve::{CsiVolumeSpec, Refusal, Resolution, SecretRef, VolumeObjects};

const MOUNTINFO: &str = "/proc/self/mountinfo";

#[derive(Debug, thiserror::Error)]
pub enum CsiVolumeError {
    /// A volume that can never be mounted as the pod asks (the container's
    /// `CreateContainerConfigError`).
    #[error("{0}")]
    Refused(Refusal),
    /// Not mounted yet (the kubelet's `WaitForAttachAndMount` error); the containers wait in
    /// `ContainerCreating`. `failures`: each failed operation, a `FailedMount` event.
    #[error("unmounted volumes=[{}], unattached volumes=[{}], failed to process volumes=[{}]: {message}", unmounted.join(" "), unattached.join(" "), failed.join(" "))]
    NotReady {
        unmounted: Vec<String>,
        unattached: Vec<String>,
        failed: Vec<String>,
        message: String,
        failures: Vec<String>,
    },
    /// Tearing a pod's volumes down failed (retried by the next removal pass).
    #[error("{0}")]
    Teardown(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CsiVolumeError + '_ {
    move |source| CsiVolumeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One CSI volume found on the node (actual state), for `volumesInUse`, volume stats and
/// expansion to build on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedCsiVolume {
    pub pod_uid: String,
    pub spec_name: String,
    pub driver: String,
    pub handle: String,
    /// `kubernetes.io/csi/<driver>^<handle>`.
    pub unique_name: String,
    /// The pod's target (`…/mount`).
    pub target_path: PathBuf,
    /// The staging path when the volume is staged.
    pub staging_path: Option<PathBuf>,
    /// Whether the mount table lists the target.
    pub mounted: bool,
}

/// The CSI volumes published on the node, with whether each target is mounted now.
pub fn mounted_volumes(root_dir: &Path, mountinfo: &Path) -> io::Result<Vec<MountedCsiVolume>> {
    let table = fs::read_to_string(mountinfo)?;
    let points: BTreeSet<PathBuf> = super::mounts::mount_points(&table).into_iter().collect();
    let actual = scan_actual(root_dir)?;
    Ok(actual
        .published
        .iter()
        .map(|p| {
            let block = is_block_target(root_dir, p);
            let target = if block {
                paths::block_publish_path(root_dir, &p.spec_name, &p.pod_uid)
            } else {
                paths::pod_volume_dir(root_dir, &p.pod_uid, &p.spec_name).join(paths::POD_MOUNT)
            };
            let staged = actual.staged.contains(&p.key).then(|| {
                if block {
                    paths::block_staging_path(root_dir, &p.spec_name)
                } else {
                    paths::global_dir(root_dir, &p.key.driver, &p.key.handle)
                        .join(paths::GLOBAL_MOUNT)
                }
            });
            MountedCsiVolume {
                pod_uid: p.pod_uid.clone(),
                spec_name: p.spec_name.clone(),
                driver: p.key.driver.clone(),
                handle: p.key.handle.clone(),
                unique_name: paths::unique_volume_name(&p.key.driver, &p.key.handle),
                mounted: points.contains(&target)
                    || fs::canonicalize(&target).is_ok_and(|c| points.contains(&c)),
                target_path: target,
                staging_path: staged,
            }
        })
        .collect())
}

fn dir_names(dir: &Path) -> io::Result<Vec<String>> {
    match fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Every entry's name in `dir` (files too), none when it does not exist.
fn entry_names(dir: &Path) -> io::Result<Vec<String>> {
    match fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The block volume recorded under `…/volumeDevices/<spec_name>/data`, if any.
fn block_key(root_dir: &Path, spec_name: &str) -> Option<VolumeKey> {
    match paths::read_vol_data(&paths::block_data_dir(root_dir, spec_name)) {
        Ok(Some(data)) => key_of(&data),
        _ => None,
    }
}

/// The raw block volumes on the node (`…/volumeDevices`): spec name, key, vol_data.json.
fn scan_block(root_dir: &Path) -> io::Result<Vec<(String, VolumeKey, VolData)>> {
    let mut out = Vec::new();
    for spec_name in dir_names(&paths::block_root(root_dir))? {
        if paths::BLOCK_RESERVED.contains(&spec_name.as_str()) {
            continue;
        }
        if let Ok(Some(data)) = paths::read_vol_data(&paths::block_data_dir(root_dir, &spec_name)) {
            if let Some(key) = key_of(&data) {
                out.push((spec_name, key, data));
            }
        }
    }
    Ok(out)
}

/// Whether a published target is a raw block volume's: its spec name is recorded as this
/// volume under `volumeDevices` and the pod has no filesystem target of that name.
fn is_block_target(root_dir: &Path, p: &Published) -> bool {
    block_key(root_dir, &p.spec_name).as_ref() == Some(&p.key)
        && !paths::pod_volume_dir(root_dir, &p.pod_uid, &p.spec_name).exists()
}

fn key_of(data: &VolData) -> Option<VolumeKey> {
    Some(VolumeKey::new(
        data.get(keys::DRIVER_NAME)?,
        data.get(keys::VOLUME_HANDLE)?,
    ))
}

/// The published targets of one pod, from their vol_data.json files.
fn scan_pod(root_dir: &Path, uid: &str) -> io::Result<Vec<Published>> {
    let dir = paths::pod_plugin_dir(root_dir, uid);
    let mut out = Vec::new();
    for spec_name in dir_names(&dir)? {
        match paths::read_vol_data(&dir.join(&spec_name)) {
            Ok(Some(data)) => {
                if let Some(key) = key_of(&data) {
                    out.push(Published {
                        pod_uid: uid.to_string(),
                        spec_name,
                        key,
                    });
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(pod.uid = %uid, volume = %spec_name, error = %e, "unreadable vol_data.json")
            }
        }
    }
    Ok(out)
}

/// `status.volumesInUse` (the kubelet's `GetVolumesInUse`): the unique names of the
/// attachable volumes — those published with a VolumeAttachment (`attachmentID` in their
/// `vol_data.json`) — in any pod's directory, sorted and without repeats.
pub fn volumes_in_use(root_dir: &Path) -> io::Result<Vec<String>> {
    let mut names = BTreeSet::new();
    for uid in dir_names(&root_dir.join("pods"))? {
        let dir = paths::pod_plugin_dir(root_dir, &uid);
        for spec_name in dir_names(&dir)? {
            let Ok(Some(data)) = paths::read_vol_data(&dir.join(&spec_name)) else {
                continue;
            };
            let attached = data
                .get(keys::ATTACHMENT_ID)
                .is_some_and(|id| !id.is_empty());
            if let (true, Some(key)) = (attached, key_of(&data)) {
                names.insert(paths::unique_volume_name(&key.driver, &key.handle));
            }
        }
    }
    // Raw block volumes: those with a pod target in `…/volumeDevices/publish/<spec>`.
    for (spec_name, key, data) in scan_block(root_dir)? {
        let attached = data
            .get(keys::ATTACHMENT_ID)
            .is_some_and(|id| !id.is_empty());
        if attached && !entry_names(&paths::block_publish_dir(root_dir, &spec_name))?.is_empty() {
            names.insert(paths::unique_volume_name(&key.driver, &key.handle));
        }
    }
    Ok(names.into_iter().collect())
}

/// [`volumes_in_use`] kept current by a task of its own (every [`VOLUMES_IN_USE_PERIOD`], off
/// the async threads), so the node status never reads the disk — least of all under memory
/// pressure, when a directory read can take seconds. `None` until the first scan.
#[derive(Debug, Clone, Default)]
pub struct VolumesInUse(Arc<std::sync::Mutex<Option<Vec<String>>>>);

/// How often [`VolumesInUse`] scans the node.
pub const VOLUMES_IN_USE_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

impl VolumesInUse {
    /// The last scan's list.
    pub fn get(&self) -> Option<Vec<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Scans `root_dir` until `cancel`.
    pub async fn run(self, root_dir: PathBuf, cancel: tokio_util::sync::CancellationToken) {
        loop {
            let root = root_dir.clone();
            match tokio::task::spawn_blocking(move || volumes_in_use(&root)).await {
                Ok(Ok(names)) => *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(names),
                Ok(Err(e)) => tracing::warn!(error = %e, "listing the volumes in use"),
                Err(_) => {}
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(VOLUMES_IN_USE_PERIOD) => {}
            }
        }
    }
}

/// The actual state: every pod's published targets and every staged volume.
fn scan_actual(root_dir: &Path) -> io::Result<Actual> {
    let mut actual = Actual::default();
    for uid in dir_names(&root_dir.join("pods"))? {
        actual.published.extend(scan_pod(root_dir, &uid)?);
    }
    let plugin = root_dir.join("plugins").join(paths::CSI_PLUGIN_NAME);
    for driver in dir_names(&plugin)? {
        for hash in dir_names(&plugin.join(&driver))? {
            if let Ok(Some(data)) = paths::read_vol_data(&plugin.join(&driver).join(&hash)) {
                if let Some(key) = key_of(&data) {
                    actual.staged.insert(key);
                }
            }
        }
    }
    for (spec_name, key, _) in scan_block(root_dir)? {
        if paths::block_staging_path(root_dir, &spec_name).is_dir() {
            actual.staged.insert(key.clone());
        }
        for uid in entry_names(&paths::block_publish_dir(root_dir, &spec_name))? {
            actual.published.push(Published {
                pod_uid: uid,
                spec_name: spec_name.clone(),
                key: key.clone(),
            });
        }
    }
    actual.published.sort();
    Ok(actual)
}

/// Whether the volume is staged (a global mount, `NodeStageVolume`): a persistent volume of a
/// driver with `STAGE_UNSTAGE_VOLUME` — an inline volume never is (the kubelet's
/// `CanDeviceMount` is false for inline ephemeral volumes).
fn stages(driver: &RegisteredDriver, spec: &CsiVolumeSpec) -> bool {
    driver.capabilities.stage_unstage && spec.lifecycle == resolve::LifecycleMode::Persistent
}

/// The CSI access mode of a Kubernetes one (`asCSIAccessModeV1`).
pub fn csi_access_mode(mode: &str) -> api::volume_capability::access_mode::Mode {
    use api::volume_capability::access_mode::Mode;
    match mode {
        "ReadOnlyMany" => Mode::MultiNodeReaderOnly,
        "ReadWriteMany" => Mode::MultiNodeMultiWriter,
        "ReadWriteOncePod" => Mode::SingleNodeSingleWriter,
        _ => Mode::SingleNodeWriter,
    }
}

/// The volume capability; `mount_group`: the fsGroup for a driver with `VOLUME_MOUNT_GROUP`
/// (it applies the group itself, at publish).
/// A raw block volume has the `block` access type (`csi_block.go`).
fn capability(spec: &CsiVolumeSpec, mount_group: Option<u32>) -> api::VolumeCapability {
    use api::volume_capability::{AccessType, BlockVolume, MountVolume};
    api::VolumeCapability {
        access_type: Some(if spec.block {
            AccessType::Block(BlockVolume {})
        } else {
            AccessType::Mount(MountVolume {
                fs_type: spec.fs_type.clone(),
                mount_flags: spec.mount_flags.clone(),
                volume_mount_group: mount_group.map(|g| g.to_string()).unwrap_or_default(),
            })
        }),
        access_mode: Some(api::volume_capability::AccessMode {
            mode: csi_access_mode(&spec.access_mode) as i32,
        }),
    }
}

/// The publish call's `volume_context`: the volume's attributes, and with `podInfoOnMount`
/// the kubelet's pod keys.
pub fn publish_context_attributes(pod: &Pod, spec: &CsiVolumeSpec) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = spec
        .volume_attributes
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if spec.pod_info_on_mount {
        let meta = &pod.metadata;
        out.insert(
            "csi.storage.k8s.io/pod.name".into(),
            meta.name.clone().unwrap_or_default(),
        );
        out.insert(
            "csi.storage.k8s.io/pod.namespace".into(),
            meta.namespace.clone().unwrap_or_default(),
        );
        out.insert(
            "csi.storage.k8s.io/pod.uid".into(),
            meta.uid.clone().unwrap_or_default(),
        );
        out.insert(
            "csi.storage.k8s.io/serviceAccount.name".into(),
            pod.spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
        );
        out.insert(
            "csi.storage.k8s.io/ephemeral".into(),
            (spec.lifecycle == resolve::LifecycleMode::Ephemeral).to_string(),
        );
    }
    out
}

/// What the pod's volumes need from outside before any driver is called.
struct Prepared {
    spec: CsiVolumeSpec,
    publish_context: HashMap<String, String>,
    attachment_id: Option<String>,
    stage_secrets: HashMap<String, String>,
    publish_secrets: HashMap<String, String>,
}

/// The volume manager for CSI-backed volumes.
pub struct CsiVolumes {
    root_dir: PathBuf,
    node_name: String,
    drivers: CsiDrivers,
    objects: Arc<dyn ObjectSource>,
    mountinfo: PathBuf,
    /// Pod UID → the volumes it wants, as of its last mount. Held only to read or change it,
    /// never across a call to a driver.
    desired: std::sync::Mutex<BTreeMap<String, BTreeSet<VolumeKey>>>,
    /// One operation at a time per volume (the kubelet's `nestedpendingoperations`): a volume
    /// whose operation is in flight (a driver that hangs in NodePublishVolume, say) is busy,
    /// and only its own operations wait; every other volume and every pod without CSI volumes
    /// goes on.
    operations: std::sync::Mutex<HashMap<VolumeKey, Arc<tokio::sync::Mutex<()>>>>,
    /// Pod UID → the attachable volumes it wants (unique names), reported in the Node's
    /// `status.volumesInUse` before they are mounted.
    wanted_in_use: std::sync::Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// The Node's `status.volumesInUse` as the API server last had it (`None`: not read yet).
    reported_in_use: std::sync::Mutex<Option<BTreeSet<String>>>,
}

/// What a volume in the middle of another operation answers, as the kubelet's
/// `nestedpendingoperations` (`AlreadyExistsError`).
fn operation_in_progress(key: &VolumeKey) -> String {
    format!(
        "an operation for volume {}/{} is already in progress",
        key.driver, key.handle
    )
}

impl std::fmt::Debug for CsiVolumes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsiVolumes")
            .field("root_dir", &self.root_dir)
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

impl CsiVolumes {
    pub fn new(
        root_dir: PathBuf,
        node_name: String,
        drivers: CsiDrivers,
        objects: Arc<dyn ObjectSource>,
    ) -> CsiVolumes {
        CsiVolumes {
            root_dir,
            node_name,
            drivers,
            objects,
            mountinfo: PathBuf::from(MOUNTINFO),
            desired: std::sync::Mutex::new(BTreeMap::new()),
            operations: std::sync::Mutex::new(HashMap::new()),
            wanted_in_use: std::sync::Mutex::new(BTreeMap::new()),
            reported_in_use: std::sync::Mutex::new(None),
        }
    }

    /// What the API server's Node says of `status.volumesInUse` (the kubelet's
    /// `MarkVolumesAsReportedInUse`), at each read or write of the node status.
    pub fn set_reported_in_use(&self, names: &[String]) {
        *self
            .reported_in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(names.iter().cloned().collect());
    }

    fn is_reported_in_use(&self, unique: &str) -> bool {
        self.reported_in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|names| names.contains(unique))
    }

    /// The attachable volumes pods want, mounted or not (for `status.volumesInUse`).
    pub fn wanted_in_use(&self) -> BTreeSet<String> {
        self.wanted_in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    fn desired(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeSet<VolumeKey>>> {
        self.desired.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The volumes every pod but `uid` wants.
    fn wanted_by_others(&self, uid: Option<&str>) -> BTreeSet<VolumeKey> {
        self.desired()
            .iter()
            .filter(|(u, _)| Some(u.as_str()) != uid)
            .flat_map(|(_, keys)| keys.iter().cloned())
            .collect()
    }

    /// The volume `key` for one operation, or `Err` (the kubelet's text) while another holds it.
    fn start_operation(&self, key: &VolumeKey) -> Result<tokio::sync::OwnedMutexGuard<()>, String> {
        let mut operations = self.operations.lock().unwrap_or_else(|e| e.into_inner());
        // Volumes with no operation in flight are forgotten: a guard holds a clone of its Arc.
        operations.retain(|_, op| Arc::strong_count(op) > 1);
        let op = operations.entry(key.clone()).or_default().clone();
        op.try_lock_owned().map_err(|_| operation_in_progress(key))
    }

    /// What is on the node now, read on a blocking thread.
    async fn actual(&self) -> Result<Actual, CsiVolumeError> {
        let root = self.root_dir.clone();
        tokio::task::spawn_blocking(move || scan_actual(&root).map_err(io_err(&root)))
            .await
            .unwrap_or_else(|e| Err(CsiVolumeError::Teardown(format!("scanning volumes: {e}"))))
    }

    /// The drivers this manager mounts through.
    pub fn drivers(&self) -> &CsiDrivers {
        &self.drivers
    }

    /// Where the claims, PersistentVolumes and CSIDrivers are read.
    pub fn objects(&self) -> Arc<dyn ObjectSource> {
        self.objects.clone()
    }

    pub fn root_dir(&self) -> &Path {
        &self.root_dir
    }

    pub fn mountinfo(&self) -> &Path {
        &self.mountinfo
    }

    /// A different mount table (tests).
    pub fn with_mountinfo(mut self, mountinfo: PathBuf) -> CsiVolumes {
        self.mountinfo = mountinfo;
        self
    }

    /// Whether the pod has volumes this manager mounts.
    pub fn has_csi_volumes(pod: &Pod) -> bool {
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(|v| {
                v.persistent_volume_claim.is_some() || v.ephemeral.is_some() || v.csi.is_some()
            })
    }

    /// The objects one volume needs, read in the kubelet's order (claim, its volume, the
    /// driver's CSIDriver).
    async fn fetch(&self, pod: &Pod, volume: &k8s_openapi::api::core::v1::Volume) -> VolumeObjects {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut out = VolumeObjects::default();
        let mut pv = None;
        if let Some((claim_name, _)) = resolve::claim_of(pod, volume) {
            let claim = self
                .objects
                .persistent_volume_claim(namespace, &claim_name)
                .await
                .map_err(|e| e.to_string());
            if let Ok(Some(c)) = &claim {
                let bound = c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
                if let (true, Some(name)) = (bound, resolve::bound_volume_name(c)) {
                    let read = self
                        .objects
                        .persistent_volume(name)
                        .await
                        .map_err(|e| e.to_string());
                    pv = read.as_ref().ok().cloned().flatten();
                    out.volume = Some(read);
                }
            }
            out.claim = Some(claim);
        }
        if let Some(driver) = resolve::driver_of(volume, pv.as_ref()) {
            out.driver = Some(
                self.objects
                    .csi_driver(&driver)
                    .await
                    .map_err(|e| e.to_string()),
            );
        }
        out
    }

    async fn secret_data(
        &self,
        what: &str,
        r: &Option<SecretRef>,
    ) -> Result<HashMap<String, String>, String> {
        let Some(r) = r else {
            return Ok(HashMap::new());
        };
        let secret = self
            .objects
            .secret(&r.namespace, &r.name)
            .await
            .map_err(|e| format!("fetching {what} {}/{} failed: {e}", r.namespace, r.name))?
            .ok_or_else(|| {
                format!(
                    "fetching {what} {}/{} failed: secrets {:?} not found",
                    r.namespace, r.name, r.name
                )
            })?;
        let mut out: HashMap<String, String> = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect();
        for (k, v) in secret.string_data.unwrap_or_default() {
            out.insert(k, v);
        }
        Ok(out)
    }

    /// Mounts the pod's CSI-backed volumes and returns volume name → the host path for the
    /// containers (the pod's target, `…/kubernetes.io~csi/<spec>/mount`). Safe on every sync:
    /// what is staged and published already is left alone.
    pub async fn mount_pod(&self, pod: &Pod) -> Result<BTreeMap<String, PathBuf>, CsiVolumeError> {
        let uid = crate::podspec::pod_uid(pod).to_string();
        let mut specs = Vec::new();
        let mut names = Vec::new();
        let mut failed = Vec::new();
        let mut messages = Vec::new();
        for (i, volume) in pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .enumerate()
        {
            if !(volume.persistent_volume_claim.is_some()
                || volume.ephemeral.is_some()
                || volume.csi.is_some())
            {
                continue;
            }
            names.push(volume.name.clone());
            let objects = self.fetch(pod, volume).await;
            match resolve::resolve(pod, i, volume, &objects) {
                Resolution::NotCsi => {}
                Resolution::Refused(r) => return Err(CsiVolumeError::Refused(r)),
                Resolution::Waiting(m) => {
                    failed.push(volume.name.clone());
                    messages.push(m);
                }
                Resolution::Ready(spec) => {
                    if !paths::is_component(&spec.driver) || !paths::is_component(&spec.spec_name) {
                        return Err(CsiVolumeError::Refused(Refusal {
                            field: format!("spec.volumes[{i}]"),
                            value: format!("{}/{}", spec.driver, spec.spec_name),
                            reason: "the driver and volume names must each be one path component"
                                .into(),
                        }));
                    }
                    specs.push(*spec)
                }
            }
        }
        if names.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut unattached = Vec::new();
        let mut prepared = Vec::new();
        let mut failures = Vec::new();
        // The attach/detach controller's record of what is attached to this node (read once
        // per sync, only when some volume needs attaching).
        let attached_on_node = if specs.iter().any(|s| s.attach_required) {
            Some(self.objects.node(&self.node_name).await)
        } else {
            None
        };
        for spec in specs {
            let mut publish_context = HashMap::new();
            let mut attachment_id = None;
            if spec.attach_required {
                let unique = paths::unique_volume_name(&spec.driver, &spec.handle);
                // The kubelet's ReportedInUse interlock: the volume goes into the Node's
                // `status.volumesInUse` first, and is mounted only once the API server has it
                // there, so the attach/detach controller cannot detach it mid-mount.
                self.wanted_in_use
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(uid.clone())
                    .or_default()
                    .insert(unique.clone());
                if !self.is_reported_in_use(&unique) {
                    unattached.push(spec.volume_name.clone());
                    messages.push(format!(
                        "volume {:?}: Volume has not been added to the list of VolumesInUse in the node's volume status",
                        spec.volume_name
                    ));
                    continue;
                }
                // The kubelet's VerifyControllerAttachedVolume: the Node's
                // `status.volumesAttached` must list the volume before it is mounted.
                let listed = match &attached_on_node {
                    Some(Ok(Some(node))) => node
                        .status
                        .as_ref()
                        .and_then(|s| s.volumes_attached.as_ref())
                        .is_some_and(|v| v.iter().any(|a| a.name == unique)),
                    _ => false,
                };
                if !listed {
                    unattached.push(spec.volume_name.clone());
                    messages.push(match &attached_on_node {
                        Some(Err(e)) => format!(
                            "volume {:?}: reading Node {}: {e}",
                            spec.volume_name, self.node_name
                        ),
                        _ => format!(
                            "volume {:?}: Volume not attached according to node status",
                            spec.volume_name
                        ),
                    });
                    continue;
                }
            }
            if spec.attach_required {
                let name = paths::attachment_name(&spec.handle, &spec.driver, &self.node_name);
                let va = self.objects.volume_attachment(&name).await;
                let status = match &va {
                    Ok(Some(va)) => va.status.as_ref(),
                    _ => None,
                };
                if status.is_some_and(|s| s.attached) {
                    publish_context = status
                        .and_then(|s| s.attachment_metadata.clone())
                        .unwrap_or_default()
                        .into_iter()
                        .collect();
                    attachment_id = Some(name);
                } else {
                    unattached.push(spec.volume_name.clone());
                    messages.push(match (&va, status.and_then(|s| s.attach_error.as_ref())) {
                        (Err(e), _) => format!(
                            "volume {:?}: reading VolumeAttachment {name}: {e}",
                            spec.volume_name
                        ),
                        (_, Some(err)) => format!(
                            "volume {:?}: AttachVolume.Attach failed: {}",
                            spec.volume_name,
                            err.message.clone().unwrap_or_default()
                        ),
                        (Ok(None), None) => format!(
                            "volume {:?}: VolumeAttachment {name} not found",
                            spec.volume_name
                        ),
                        (Ok(Some(_)), None) => format!(
                            "volume {:?}: VolumeAttachment {name} is not attached yet",
                            spec.volume_name
                        ),
                    });
                    continue;
                }
            }
            let secrets = async {
                Ok::<_, String>((
                    self.secret_data("NodeStageSecretRef", &spec.stage_secret)
                        .await?,
                    self.secret_data("NodePublishSecretRef", &spec.publish_secret)
                        .await?,
                ))
            }
            .await;
            match secrets {
                Ok((stage_secrets, publish_secrets)) => prepared.push(Prepared {
                    spec,
                    publish_context,
                    attachment_id,
                    stage_secrets,
                    publish_secrets,
                }),
                Err(e) => {
                    let m = format!(
                        "MountVolume.SetUp failed for volume {:?} : {e}",
                        spec.volume_name
                    );
                    failures.push(m.clone());
                    messages.push(m);
                }
            }
        }
        let not_ready = |messages: Vec<String>,
                         unattached: Vec<String>,
                         failed: Vec<String>,
                         failures: Vec<String>| {
            CsiVolumeError::NotReady {
                unmounted: names.clone(),
                unattached,
                failed,
                message: messages.join("; "),
                failures,
            }
        };
        if !failed.is_empty() || !unattached.is_empty() || !failures.is_empty() {
            return Err(not_ready(messages, unattached, failed, failures));
        }

        self.desired().insert(
            uid.clone(),
            prepared
                .iter()
                .map(|p| VolumeKey::new(&p.spec.driver, &p.spec.handle))
                .collect(),
        );
        let mut drivers = BTreeMap::new();
        for p in &prepared {
            match self.drivers.get(&p.spec.driver) {
                Ok(d) => {
                    drivers.insert(p.spec.driver.clone(), d);
                }
                Err(e) => failures.push(format!(
                    "MountVolume.MountDevice failed for volume {:?} : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: {e}",
                    p.spec.volume_name
                )),
            }
        }
        if !failures.is_empty() {
            return Err(not_ready(failures.clone(), vec![], vec![], failures));
        }
        let want: Vec<Want> = prepared
            .iter()
            .map(|p| Want {
                spec_name: p.spec.spec_name.clone(),
                key: VolumeKey::new(&p.spec.driver, &p.spec.handle),
                stage: stages(&drivers[&p.spec.driver], &p.spec),
            })
            .collect();
        // Volume by volume, each planned again while it is this pod's to operate on: what
        // other pods want and what is on the node may have changed meanwhile.
        let actual = self.actual().await?;
        let first = reconcile::plan(
            Some(&uid),
            &want,
            &self.wanted_by_others(Some(&uid)),
            &actual,
        );
        let keys: BTreeSet<VolumeKey> = want
            .iter()
            .map(|w| w.key.clone())
            .chain(first.iter().map(|op| op.key().clone()))
            .collect();
        for key in &keys {
            let _operation = match self.start_operation(key) {
                Ok(guard) => guard,
                Err(e) => return Err(not_ready(vec![e], vec![], vec![], vec![])),
            };
            let actual = self.actual().await?.only(key);
            let want: Vec<Want> = want.iter().filter(|w| &w.key == key).cloned().collect();
            let others = self.wanted_by_others(Some(&uid));
            for op in reconcile::plan(Some(&uid), &want, &others, &actual) {
                if let Err(e) = self.run(pod, &op, &prepared, &drivers).await {
                    return Err(not_ready(vec![e.clone()], vec![], vec![], vec![e]));
                }
            }
        }
        Ok(prepared
            .iter()
            .map(|p| {
                let path = if p.spec.block {
                    paths::block_publish_path(&self.root_dir, &p.spec.spec_name, &uid)
                } else {
                    paths::pod_volume_dir(&self.root_dir, &uid, &p.spec.spec_name)
                        .join(paths::POD_MOUNT)
                };
                (p.spec.volume_name.clone(), path)
            })
            .collect())
    }

    fn is_mounted(&self, path: &Path) -> Result<bool, String> {
        let table = fs::read_to_string(&self.mountinfo)
            .map_err(|e| format!("{}: {e}", self.mountinfo.display()))?;
        let canonical = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(super::mounts::is_mount_point(&table, path)
            || super::mounts::is_mount_point(&table, &canonical))
    }

    /// Runs one mount operation.
    async fn run(
        &self,
        pod: &Pod,
        op: &Op,
        prepared: &[Prepared],
        drivers: &BTreeMap<String, RegisteredDriver>,
    ) -> Result<(), String> {
        match op {
            Op::Stage { key } => {
                let p = prepared
                    .iter()
                    .find(|p| p.spec.driver == key.driver && p.spec.handle == key.handle)
                    .ok_or("stage of a volume the pod does not want")?;
                let (dir, staging, data) = if p.spec.block {
                    (
                        paths::block_data_dir(&self.root_dir, &p.spec.spec_name),
                        paths::block_staging_path(&self.root_dir, &p.spec.spec_name),
                        self.block_vol_data(p),
                    )
                } else {
                    let dir = paths::global_dir(&self.root_dir, &key.driver, &key.handle);
                    let staging = dir.join(paths::GLOBAL_MOUNT);
                    let data: VolData = [
                        (keys::DRIVER_NAME, key.driver.as_str()),
                        (keys::VOLUME_HANDLE, key.handle.as_str()),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                    (dir, staging, data)
                };
                let fail = |m: String| {
                    format!(
                        "MountVolume.MountDevice failed for volume {:?} : {m}",
                        p.spec.volume_name
                    )
                };
                paths::write_vol_data_off_runtime(dir.clone(), data)
                    .await
                    .map_err(|e| fail(format!("{}: {e}", dir.display())))?;
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o750)
                    .create(&staging)
                    .map_err(|e| fail(format!("{}: {e}", staging.display())))?;
                let request = api::NodeStageVolumeRequest {
                    volume_id: key.handle.clone(),
                    publish_context: p.publish_context.clone(),
                    staging_target_path: staging.to_string_lossy().into_owned(),
                    volume_capability: Some(capability(&p.spec, None)),
                    secrets: p.stage_secrets.clone(),
                    volume_context: p
                        .spec
                        .volume_attributes
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                };
                drivers[&key.driver]
                    .client
                    .node_stage_volume(request)
                    .await
                    .map_err(|e| fail(e.to_string()))
            }
            Op::Publish {
                pod_uid,
                spec_name,
                key,
            } => {
                let p = prepared
                    .iter()
                    .find(|p| &p.spec.spec_name == spec_name && p.spec.handle == key.handle)
                    .ok_or("publish of a volume the pod does not want")?;
                let fail = |m: String| {
                    format!(
                        "MountVolume.SetUp failed for volume {:?} : {m}",
                        p.spec.volume_name
                    )
                };
                let driver = &drivers[&key.driver];
                if p.spec.block {
                    return self.publish_block(pod, p, driver).await.map_err(fail);
                }
                let dir = paths::pod_volume_dir(&self.root_dir, pod_uid, spec_name);
                let target = dir.join(paths::POD_MOUNT);
                let mut data: VolData = [
                    (keys::SPEC_VOLUME_ID, spec_name.as_str()),
                    (keys::VOLUME_HANDLE, key.handle.as_str()),
                    (keys::DRIVER_NAME, key.driver.as_str()),
                    (keys::NODE_NAME, self.node_name.as_str()),
                    (keys::VOLUME_LIFECYCLE_MODE, p.spec.lifecycle.as_str()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
                if let Some(id) = &p.attachment_id {
                    data.insert(keys::ATTACHMENT_ID.to_string(), id.clone());
                }
                // The parent of the target; the driver makes the target itself.
                paths::write_vol_data_off_runtime(dir.clone(), data)
                    .await
                    .map_err(|e| fail(format!("{}: {e}", dir.display())))?;
                let staging = stages(driver, &p.spec).then(|| {
                    paths::global_dir(&self.root_dir, &key.driver, &key.handle)
                        .join(paths::GLOBAL_MOUNT)
                        .to_string_lossy()
                        .into_owned()
                });
                // A driver with VOLUME_MOUNT_GROUP mounts with the group; for the others nodelet
                // changes the ownership after the publish (the kubelet's two ways).
                let mount_group = p
                    .spec
                    .fs_group
                    .filter(|_| driver.capabilities.volume_mount_group)
                    .map(|(gid, _)| gid);
                let request = api::NodePublishVolumeRequest {
                    volume_id: key.handle.clone(),
                    publish_context: p.publish_context.clone(),
                    staging_target_path: staging.unwrap_or_default(),
                    target_path: target.to_string_lossy().into_owned(),
                    volume_capability: Some(capability(&p.spec, mount_group)),
                    readonly: p.spec.read_only,
                    secrets: p.publish_secrets.clone(),
                    volume_context: publish_context_attributes(pod, &p.spec),
                };
                driver
                    .client
                    .node_publish_volume(request)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                if let (Some((gid, on_root_mismatch)), None) = (p.spec.fs_group, mount_group) {
                    // As the kubelet: the mount stands; a failure is logged. The walk is as
                    // long as the volume is full: on a blocking thread.
                    let (target, read_only) = (target.clone(), p.spec.read_only);
                    let walked = tokio::task::spawn_blocking(move || {
                        ownership::set_volume_ownership(&target, gid, read_only, on_root_mismatch)
                    })
                    .await
                    .unwrap_or_else(|e| Err(io::Error::other(e)));
                    if let Err(e) = walked {
                        tracing::warn!(volume = %p.spec.volume_name, error = %e, "applying fsGroup to a CSI volume");
                    }
                }
                Ok(())
            }
            Op::Unpublish { .. } | Op::Unstage { .. } => self.run_teardown(op).await,
        }
    }

    /// A raw block volume's vol_data.json (`…/volumeDevices/<spec>/data`), the kubelet's keys.
    fn block_vol_data(&self, p: &Prepared) -> VolData {
        let mut data: VolData = [
            (keys::SPEC_VOLUME_ID, p.spec.spec_name.as_str()),
            (keys::VOLUME_HANDLE, p.spec.handle.as_str()),
            (keys::DRIVER_NAME, p.spec.driver.as_str()),
            (keys::NODE_NAME, self.node_name.as_str()),
            (keys::VOLUME_LIFECYCLE_MODE, p.spec.lifecycle.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Some(id) = &p.attachment_id {
            data.insert(keys::ATTACHMENT_ID.to_string(), id.clone());
        }
        data
    }

    /// `NodePublishVolume` of a raw block volume (`csi_block.go`'s `publishVolumeForBlock`):
    /// the target is the file `…/volumeDevices/publish/<spec>/<podUID>`, which the driver makes
    /// and binds the device on; nodelet makes its parent. No fsGroup: it is a device.
    async fn publish_block(
        &self,
        pod: &Pod,
        p: &Prepared,
        driver: &RegisteredDriver,
    ) -> Result<(), String> {
        let uid = crate::podspec::pod_uid(pod);
        let data_dir = paths::block_data_dir(&self.root_dir, &p.spec.spec_name);
        paths::write_vol_data_off_runtime(data_dir.clone(), self.block_vol_data(p))
            .await
            .map_err(|e| format!("{}: {e}", data_dir.display()))?;
        let parent = paths::block_publish_dir(&self.root_dir, &p.spec.spec_name);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&parent)
            .map_err(|e| format!("{}: {e}", parent.display()))?;
        let target = paths::block_publish_path(&self.root_dir, &p.spec.spec_name, uid);
        let staging = stages(driver, &p.spec).then(|| {
            paths::block_staging_path(&self.root_dir, &p.spec.spec_name)
                .to_string_lossy()
                .into_owned()
        });
        let request = api::NodePublishVolumeRequest {
            volume_id: p.spec.handle.clone(),
            publish_context: p.publish_context.clone(),
            staging_target_path: staging.unwrap_or_default(),
            target_path: target.to_string_lossy().into_owned(),
            volume_capability: Some(capability(&p.spec, None)),
            readonly: p.spec.read_only,
            secrets: p.publish_secrets.clone(),
            volume_context: publish_context_attributes(pod, &p.spec),
        };
        driver
            .client
            .node_publish_volume(request)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Removes a raw block volume's directories once nothing is published or staged: the
    /// publish directory, then (not staged) the data directory and the volume's directory.
    fn remove_block_dirs(&self, spec_name: &str) -> io::Result<()> {
        let publish = paths::block_publish_dir(&self.root_dir, spec_name);
        match fs::remove_dir(&publish) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            // Another pod's target is still there.
            Err(_) => return Ok(()),
        }
        if paths::block_staging_path(&self.root_dir, spec_name).exists() {
            return Ok(());
        }
        let data = paths::block_data_dir(&self.root_dir, spec_name);
        paths::remove_volume_dir(&data)?;
        if let Some(parent) = data.parent() {
            paths::remove_empty_dir(parent)?;
        }
        Ok(())
    }

    /// Runs an unpublish or unstage: the driver's call, then — once the mount table no longer
    /// lists the path — the directories and vol_data.json (never through a mount point).
    async fn run_teardown(&self, op: &Op) -> Result<(), String> {
        match op {
            Op::Unpublish {
                pod_uid,
                spec_name,
                key,
            } => {
                let fail = |m: String| {
                    format!("UnmountVolume.TearDown failed for volume {spec_name:?} (UniqueName: {:?}) pod {pod_uid:?} : {m}", paths::unique_volume_name(&key.driver, &key.handle))
                };
                let dir = paths::pod_volume_dir(&self.root_dir, pod_uid, spec_name);
                let block = is_block_target(
                    &self.root_dir,
                    &Published {
                        pod_uid: pod_uid.clone(),
                        spec_name: spec_name.clone(),
                        key: key.clone(),
                    },
                );
                let target = if block {
                    paths::block_publish_path(&self.root_dir, spec_name, pod_uid)
                } else {
                    dir.join(paths::POD_MOUNT)
                };
                let driver = self
                    .drivers
                    .get(&key.driver)
                    .map_err(|e| fail(e.to_string()))?;
                driver
                    .client
                    .node_unpublish_volume(api::NodeUnpublishVolumeRequest {
                        volume_id: key.handle.clone(),
                        target_path: target.to_string_lossy().into_owned(),
                    })
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                if self.is_mounted(&target).map_err(&fail)? {
                    return Err(fail(format!(
                        "{} is still mounted after NodeUnpublishVolume",
                        target.display()
                    )));
                }
                if block {
                    // The driver removes its file; one left behind goes (never a mount point:
                    // the mount table was checked).
                    match fs::remove_file(&target) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(fail(format!("{}: {e}", target.display()))),
                    }
                    return self
                        .remove_block_dirs(spec_name)
                        .map_err(|e| fail(e.to_string()));
                }
                paths::remove_empty_dir(&target)
                    .map_err(|e| fail(format!("{}: {e}", target.display())))?;
                paths::remove_volume_dir(&dir).map_err(|e| fail(format!("{}: {e}", dir.display())))
            }
            Op::Unstage { key } => {
                let fail = |m: String| {
                    format!(
                        "UnmountDevice failed for volume {:?} : {m}",
                        paths::unique_volume_name(&key.driver, &key.handle)
                    )
                };
                let block_spec = scan_block(&self.root_dir)
                    .map_err(|e| fail(e.to_string()))?
                    .into_iter()
                    .find(|(spec_name, k, _)| {
                        k == key && paths::block_staging_path(&self.root_dir, spec_name).is_dir()
                    })
                    .map(|(spec_name, _, _)| spec_name);
                let dir = paths::global_dir(&self.root_dir, &key.driver, &key.handle);
                let staging = match &block_spec {
                    Some(spec_name) => paths::block_staging_path(&self.root_dir, spec_name),
                    None => dir.join(paths::GLOBAL_MOUNT),
                };
                let driver = self
                    .drivers
                    .get(&key.driver)
                    .map_err(|e| fail(e.to_string()))?;
                if driver.capabilities.stage_unstage {
                    driver
                        .client
                        .node_unstage_volume(api::NodeUnstageVolumeRequest {
                            volume_id: key.handle.clone(),
                            staging_target_path: staging.to_string_lossy().into_owned(),
                        })
                        .await
                        .map_err(|e| fail(e.to_string()))?;
                }
                if self.is_mounted(&staging).map_err(&fail)? {
                    return Err(fail(format!(
                        "{} is still mounted after NodeUnstageVolume",
                        staging.display()
                    )));
                }
                paths::remove_empty_dir(&staging)
                    .map_err(|e| fail(format!("{}: {e}", staging.display())))?;
                if let Some(spec_name) = &block_spec {
                    return self
                        .remove_block_dirs(spec_name)
                        .map_err(|e| fail(e.to_string()));
                }
                paths::remove_volume_dir(&dir)
                    .map_err(|e| fail(format!("{}: {e}", dir.display())))?;
                // The driver's directory, once empty.
                if let Some(parent) = dir.parent() {
                    let _ = fs::remove_dir(parent);
                }
                Ok(())
            }
            Op::Stage { .. } | Op::Publish { .. } => Err("not a teardown".into()),
        }
    }

    /// Unpublishes every CSI volume of the pod with `uid` (gone, or being removed) and
    /// unstages those no other pod uses or wants. An error leaves the rest for the next pass;
    /// the pod's directory must then stay.
    pub async fn unmount_pod(&self, uid: &str) -> Result<(), CsiVolumeError> {
        let wanted = self.desired().remove(uid);
        self.wanted_in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        let (root, pod_uid) = (self.root_dir.clone(), uid.to_string());
        let has_targets = tokio::task::spawn_blocking(move || -> io::Result<bool> {
            let block_targets = scan_block(&root)?.iter().any(|(spec_name, _, _)| {
                paths::block_publish_path(&root, spec_name, &pod_uid)
                    .symlink_metadata()
                    .is_ok()
            });
            Ok(block_targets || paths::pod_plugin_dir(&root, &pod_uid).exists())
        })
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
        .map_err(io_err(&self.root_dir))?;
        if !has_targets {
            return Ok(());
        }
        let actual = self.actual().await?;
        let keys: BTreeSet<VolumeKey> = actual
            .published
            .iter()
            .filter(|p| p.pod_uid == uid)
            .map(|p| p.key.clone())
            .chain(wanted.into_iter().flatten())
            .collect();
        let mut errors = Vec::new();
        for key in &keys {
            let _operation = match self.start_operation(key) {
                Ok(guard) => guard,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let actual = self.actual().await?.only(key);
            let others = self.wanted_by_others(None);
            let mut unpublish_failed = false;
            for op in reconcile::plan(Some(uid), &[], &others, &actual) {
                // A volume whose unpublish failed is not unstaged.
                if matches!(op, Op::Unstage { .. }) && unpublish_failed {
                    continue;
                }
                if let Err(e) = self.run_teardown(&op).await {
                    unpublish_failed |= matches!(op, Op::Unpublish { .. });
                    errors.push(e);
                }
            }
        }
        if errors.is_empty() {
            // The plugin directory itself, once empty.
            let _ = fs::remove_dir(paths::pod_plugin_dir(&self.root_dir, uid));
            Ok(())
        } else {
            Err(CsiVolumeError::Teardown(errors.join("; ")))
        }
    }

    /// Unstages the staged volumes no pod uses or wants (after a restart: what a pod that
    /// went while nodelet was down left staged).
    pub async fn unstage_unused(&self) -> Result<usize, CsiVolumeError> {
        let actual = self.actual().await?;
        let keys: BTreeSet<VolumeKey> =
            reconcile::plan(None, &[], &self.wanted_by_others(None), &actual)
                .iter()
                .map(|op| op.key().clone())
                .collect();
        let mut errors = Vec::new();
        let mut done = 0;
        for key in &keys {
            // A volume busy with another operation is left for the next run.
            let Ok(_operation) = self.start_operation(key) else {
                continue;
            };
            let actual = self.actual().await?.only(key);
            for op in &reconcile::plan(None, &[], &self.wanted_by_others(None), &actual) {
                match self.run_teardown(op).await {
                    Ok(()) => done += 1,
                    Err(e) => errors.push(e),
                }
            }
        }
        if errors.is_empty() {
            Ok(done)
        } else {
            Err(CsiVolumeError::Teardown(errors.join("; ")))
        }
    }
}
