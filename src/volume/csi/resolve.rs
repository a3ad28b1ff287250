//! Pure resolution of a pod's volume to the CSI volume to mount, from the objects read for it
//! (the kubelet's desired-state populator, `createVolumeSpec` and `getPVCExtractPV`, and the CSI
//! plugin's checks in `csi_plugin.go`): a `persistentVolumeClaim` through its bound
//! PersistentVolume, an `ephemeral` volume through the claim `<pod>-<volume>` the control plane
//! makes for it (owned by the pod), a `csi` inline volume directly — each with what its
//! `CSIDriver` object says.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use k8s_openapi::api::storage::v1::CSIDriver;

use super::paths::inline_volume_handle;

/// The outcome of one read: `Ok(None)` when the object does not exist, `Err(message)` when it
/// could not be read.
pub type Fetched<T> = Result<Option<T>, String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleMode {
    Persistent,
    Ephemeral,
}

impl LifecycleMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleMode::Persistent => "Persistent",
            LifecycleMode::Ephemeral => "Ephemeral",
        }
    }
}

/// `CSIDriver.spec.fsGroupPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsGroupPolicy {
    ReadWriteOnceWithFsType,
    File,
    None,
}

/// A secret a driver call carries, in its own namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    pub namespace: String,
    pub name: String,
}

/// Everything needed to stage and publish one volume of one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct CsiVolumeSpec {
    /// The pod's volume name (`spec.volumes[].name`).
    pub volume_name: String,
    /// The kubelet's `specVolumeID`: the PersistentVolume's name, or the inline volume's.
    pub spec_name: String,
    pub driver: String,
    pub handle: String,
    pub read_only: bool,
    pub fs_type: String,
    /// The PersistentVolume's `mountOptions`.
    pub mount_flags: Vec<String>,
    pub volume_attributes: BTreeMap<String, String>,
    /// The Kubernetes access mode (`ReadWriteOnce`, …), the PV's first.
    pub access_mode: String,
    pub stage_secret: Option<SecretRef>,
    pub publish_secret: Option<SecretRef>,
    pub lifecycle: LifecycleMode,
    pub attach_required: bool,
    pub pod_info_on_mount: bool,
    pub fs_group_policy: FsGroupPolicy,
    /// The pod's `fsGroup` where the driver's `fsGroupPolicy` applies it to this volume
    /// ([`fs_group_applies`]), with `fsGroupChangePolicy: OnRootMismatch`.
    pub fs_group: Option<(u32, bool)>,
    /// A raw block volume (`volumeMode: Block`, in the containers' `volumeDevices`): staged
    /// and published with the `block` access type at the kubelet's `volumeDevices` paths.
    pub block: bool,
}

/// Why a volume can never be mounted as the pod asks: the field, its value, the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub value: String,
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: Unsupported value: {:?}: {}",
            self.field, self.value, self.reason
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// Not a volume of this plugin (emptyDir, configMap, …).
    NotCsi,
    Ready(Box<CsiVolumeSpec>),
    /// Not yet: the kubelet's message (`error processing PVC ns/x: PVC is not bound`).
    Waiting(String),
    Refused(Refusal),
}

/// The objects read for one volume (each `None` when not asked for).
#[derive(Debug, Clone, Default)]
pub struct VolumeObjects {
    pub claim: Option<Fetched<PersistentVolumeClaim>>,
    pub volume: Option<Fetched<PersistentVolume>>,
    pub driver: Option<Fetched<CSIDriver>>,
}

/// The claim a volume reads: `(name, ephemeral)` — a `persistentVolumeClaim`'s `claimName`, or
/// for an `ephemeral` volume `<pod name>-<volume name>` (`ephemeral.VolumeClaimName`).
pub fn claim_of(pod: &Pod, volume: &Volume) -> Option<(String, bool)> {
    if let Some(pvc) = &volume.persistent_volume_claim {
        return Some((pvc.claim_name.clone(), false));
    }
    volume.ephemeral.as_ref().map(|_| {
        (
            format!(
                "{}-{}",
                pod.metadata.name.as_deref().unwrap_or_default(),
                volume.name
            ),
            true,
        )
    })
}

/// The PersistentVolume a bound claim names.
pub fn bound_volume_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The driver a volume goes to: the inline source's or the PersistentVolume's.
pub fn driver_of(volume: &Volume, pv: Option<&PersistentVolume>) -> Option<String> {
    if let Some(csi) = &volume.csi {
        return Some(csi.driver.clone());
    }
    pv.and_then(|pv| pv.spec.as_ref())
        .and_then(|s| s.csi.as_ref())
        .map(|c| c.driver.clone())
}

/// The PersistentVolume source keys nodelet cannot mount (every one but `csi`).
const PV_SOURCES: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

fn pv_source_kind(pv: &PersistentVolume) -> String {
    serde_json::to_value(pv.spec.as_ref())
        .ok()
        .and_then(|v| {
            v.as_object().and_then(|o| {
                PV_SOURCES
                    .iter()
                    .find(|k| o.contains_key(**k))
                    .map(|k| k.to_string())
            })
        })
        .unwrap_or_else(|| "no".to_string())
}

/// The CSIDriver's settings, or the kubelet's defaults when there is no CSIDriver object
/// (attach required, no pod info, `ReadWriteOnceWithFSType`, `Persistent` only).
struct DriverSettings {
    attach_required: bool,
    pod_info_on_mount: bool,
    fs_group_policy: FsGroupPolicy,
    modes: Vec<String>,
    token_requests: bool,
    requires_republish: bool,
}

fn driver_settings(driver: Option<&CSIDriver>) -> DriverSettings {
    let spec = driver.map(|d| &d.spec);
    DriverSettings {
        attach_required: spec.and_then(|s| s.attach_required).unwrap_or(true),
        pod_info_on_mount: spec.and_then(|s| s.pod_info_on_mount).unwrap_or(false),
        fs_group_policy: match spec.and_then(|s| s.fs_group_policy.as_deref()) {
            Some("File") => FsGroupPolicy::File,
            Some("None") => FsGroupPolicy::None,
            _ => FsGroupPolicy::ReadWriteOnceWithFsType,
        },
        modes: spec
            .and_then(|s| s.volume_lifecycle_modes.clone())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| vec!["Persistent".to_string()]),
        token_requests: spec
            .and_then(|s| s.token_requests.as_ref())
            .is_some_and(|t| !t.is_empty()),
        requires_republish: spec.and_then(|s| s.requires_republish) == Some(true),
    }
}

/// Whether the kubelet would change the volume's group to the pod's `fsGroup`
/// (`csi_mounter.go`'s `isFSGroupPolicySupported`/`supportsFSGroup`): never under `None`,
/// always under `File`, under `ReadWriteOnceWithFSType` only for a volume with an `fsType`
/// mounted ReadWriteOnce(Pod) (an inline volume: with an `fsType`).
pub fn fs_group_applies(spec: &CsiVolumeSpec) -> bool {
    if spec.read_only || spec.block {
        return false;
    }
    match spec.fs_group_policy {
        FsGroupPolicy::None => false,
        FsGroupPolicy::File => true,
        FsGroupPolicy::ReadWriteOnceWithFsType => {
            !spec.fs_type.is_empty()
                && (spec.lifecycle == LifecycleMode::Ephemeral
                    || matches!(
                        spec.access_mode.as_str(),
                        "ReadWriteOnce" | "ReadWriteOncePod"
                    ))
        }
    }
}

/// Whether some container uses the volume as a raw block device (`volumeDevices`).
fn device_of_containers(pod: &Pod, volume: &str) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .flat_map(|c| c.volume_devices.iter().flatten())
                .chain(
                    s.ephemeral_containers
                        .iter()
                        .flatten()
                        .flat_map(|c| c.volume_devices.iter().flatten()),
                )
        })
        .any(|d| d.name == volume)
}

/// Whether some container mounts the volume with `volumeMounts`.
fn mounted_by_containers(pod: &Pod, volume: &str) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .any(|m| m.name == volume)
}

fn pod_fs_group(pod: &Pod) -> Option<i64> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group)
}

/// Resolves `pod`'s volume at `index` from `objects`.
pub fn resolve(pod: &Pod, index: usize, volume: &Volume, objects: &VolumeObjects) -> Resolution {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let base = format!("spec.volumes[{index}]");
    let refuse = |field: String, value: &str, reason: String| {
        Resolution::Refused(Refusal {
            field,
            value: value.to_string(),
            reason,
        })
    };
    let spec = if let Some(csi) = &volume.csi {
        let driver = match objects.driver.clone().unwrap_or(Ok(None)) {
            Ok(d) => d,
            Err(e) => return Resolution::Waiting(e),
        };
        let settings = driver_settings(driver.as_ref());
        if !settings.modes.iter().any(|m| m == "Ephemeral") {
            return refuse(
                format!("{base}.csi.driver"),
                &csi.driver,
                format!(
                    "volume mode \"Ephemeral\" not supported by driver {} (only supports {:?})",
                    csi.driver, settings.modes
                ),
            );
        }
        if let Some(r) = unsupported_driver_settings(&base, "csi.driver", &csi.driver, &settings) {
            return r;
        }
        CsiVolumeSpec {
            volume_name: volume.name.clone(),
            spec_name: volume.name.clone(),
            driver: csi.driver.clone(),
            handle: inline_volume_handle(crate::podspec::pod_uid(pod), &volume.name),
            read_only: csi.read_only == Some(true),
            fs_type: csi.fs_type.clone().unwrap_or_default(),
            mount_flags: Vec::new(),
            volume_attributes: csi.volume_attributes.clone().unwrap_or_default(),
            access_mode: "ReadWriteOnce".to_string(),
            stage_secret: None,
            publish_secret: csi.node_publish_secret_ref.as_ref().map(|r| SecretRef {
                namespace: namespace.to_string(),
                name: r.name.clone(),
            }),
            lifecycle: LifecycleMode::Ephemeral,
            attach_required: false,
            pod_info_on_mount: settings.pod_info_on_mount,
            fs_group_policy: settings.fs_group_policy,
            fs_group: None,
            block: false,
        }
    } else if let Some((claim_name, ephemeral)) = claim_of(pod, volume) {
        let source_field = if ephemeral {
            format!("{base}.ephemeral")
        } else {
            format!("{base}.persistentVolumeClaim.claimName")
        };
        let processing = |message: String| {
            Resolution::Waiting(format!(
                "error processing PVC {namespace}/{claim_name}: {message}"
            ))
        };
        let claim = match objects.claim.clone().unwrap_or(Ok(None)) {
            Err(e) => return processing(format!("failed to fetch PVC from API server: {e}")),
            Ok(None) => {
                return processing(format!(
                    "failed to fetch PVC from API server: persistentvolumeclaims {claim_name:?} not found"
                ))
            }
            Ok(Some(c)) => c,
        };
        if ephemeral {
            let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
            let owned = claim
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == pod_uid && !pod_uid.is_empty());
            if !owned {
                return refuse(
                    source_field,
                    &claim_name,
                    format!(
                        "PVC {namespace}/{claim_name} was not created for pod {namespace}/{} (pod is not owner)",
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
            }
        }
        if claim.metadata.deletion_timestamp.is_some() {
            return processing("PVC is being deleted".to_string());
        }
        if claim.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
            return processing("PVC is not bound".to_string());
        }
        let Some(pv_name) = bound_volume_name(&claim) else {
            return processing("PVC has empty pvc.Spec.VolumeName".to_string());
        };
        let pv = match objects.volume.clone().unwrap_or(Ok(None)) {
            Err(e) => {
                return processing(format!(
                    "failed to fetch PV {pv_name} from API server: {e}"
                ))
            }
            Ok(None) => {
                return processing(format!(
                    "failed to fetch PV {pv_name} from API server: persistentvolumes {pv_name:?} not found"
                ))
            }
            Ok(Some(pv)) => pv,
        };
        let pv_spec = pv.spec.clone().unwrap_or_default();
        let Some(claim_ref) = &pv_spec.claim_ref else {
            return processing(format!("found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"));
        };
        let claim_uid = claim.metadata.uid.clone().unwrap_or_default();
        if claim_ref.uid.clone().unwrap_or_default() != claim_uid {
            return processing(format!(
                "found PV object {pv_name} but its pv.Spec.ClaimRef.UID {} does not point to claim.UID {claim_uid}",
                claim_ref.uid.clone().unwrap_or_default()
            ));
        }
        let mode = pv_spec.volume_mode.as_deref().unwrap_or("Filesystem");
        // The kubelet's populator: a Block volume in volumeMounts, a Filesystem one in
        // volumeDevices.
        let misused = match mode {
            "Block" => mounted_by_containers(pod, &volume.name).then_some("volumeMounts"),
            "Filesystem" => device_of_containers(pod, &volume.name).then_some("volumeDevices"),
            _ => {
                return refuse(
                    source_field,
                    &claim_name,
                    format!("PersistentVolume {pv_name} has volumeMode {mode}; nodelet mounts Filesystem and Block volumes"),
                )
            }
        };
        if let Some(list) = misused {
            return refuse(
                source_field,
                &claim_name,
                format!(
                    "volume {} has volumeMode {mode}, but is specified in {list}",
                    volume.name
                ),
            );
        }
        let block = mode == "Block";
        let Some(csi) = &pv_spec.csi else {
            return refuse(
                source_field,
                &claim_name,
                format!(
                    "PersistentVolume {pv_name} has a {} source; nodelet mounts only CSI persistent volumes",
                    pv_source_kind(&pv)
                ),
            );
        };
        let driver = match objects.driver.clone().unwrap_or(Ok(None)) {
            Ok(d) => d,
            Err(e) => return Resolution::Waiting(e),
        };
        let settings = driver_settings(driver.as_ref());
        if !settings.modes.iter().any(|m| m == "Persistent") {
            return refuse(
                source_field,
                &claim_name,
                format!(
                    "volume mode \"Persistent\" not supported by driver {} (only supports {:?})",
                    csi.driver, settings.modes
                ),
            );
        }
        if let Some(r) = unsupported_driver_settings(
            &base,
            &source_field[base.len() + 1..],
            &claim_name,
            &settings,
        ) {
            return r;
        }
        let secret = |r: &Option<k8s_openapi::api::core::v1::SecretReference>| {
            r.as_ref().map(|r| SecretRef {
                namespace: r.namespace.clone().unwrap_or_else(|| "default".to_string()),
                name: r.name.clone().unwrap_or_default(),
            })
        };
        let pod_read_only = volume
            .persistent_volume_claim
            .as_ref()
            .and_then(|p| p.read_only)
            == Some(true);
        CsiVolumeSpec {
            volume_name: volume.name.clone(),
            spec_name: pv_name.to_string(),
            driver: csi.driver.clone(),
            handle: csi.volume_handle.clone(),
            read_only: pod_read_only || csi.read_only == Some(true),
            fs_type: csi.fs_type.clone().unwrap_or_default(),
            mount_flags: pv_spec.mount_options.clone().unwrap_or_default(),
            volume_attributes: csi.volume_attributes.clone().unwrap_or_default(),
            access_mode: pv_spec
                .access_modes
                .as_ref()
                .and_then(|m| m.first().cloned())
                .unwrap_or_else(|| "ReadWriteOnce".to_string()),
            stage_secret: secret(&csi.node_stage_secret_ref),
            publish_secret: secret(&csi.node_publish_secret_ref),
            lifecycle: LifecycleMode::Persistent,
            attach_required: settings.attach_required,
            pod_info_on_mount: settings.pod_info_on_mount,
            fs_group_policy: settings.fs_group_policy,
            fs_group: None,
            block,
        }
    } else {
        return Resolution::NotCsi;
    };
    let mut spec = spec;
    if let Some(gid) = pod_fs_group(pod) {
        if fs_group_applies(&spec) {
            let Ok(gid) = u32::try_from(gid) else {
                return refuse(
                    "spec.securityContext.fsGroup".to_string(),
                    &gid.to_string(),
                    "must be between 0 and 4294967295".to_string(),
                );
            };
            let on_root_mismatch = pod
                .spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|s| s.fs_group_change_policy.as_deref())
                == Some("OnRootMismatch");
            spec.fs_group = Some((gid, on_root_mismatch));
        }
    }
    Resolution::Ready(Box::new(spec))
}

/// CSIDriver settings nodelet does not act on yet refuse the volume.
fn unsupported_driver_settings(
    base: &str,
    field: &str,
    value: &str,
    settings: &DriverSettings,
) -> Option<Resolution> {
    let reason = if settings.token_requests {
        "its CSIDriver asks for service account tokens (spec.tokenRequests), which nodelet does not pass to drivers yet"
    } else if settings.requires_republish {
        "its CSIDriver asks to be republished periodically (spec.requiresRepublish), which nodelet does not do yet"
    } else {
        return None;
    };
    Some(Resolution::Refused(Refusal {
        field: format!("{base}.{field}"),
        value: value.to_string(),
        reason: reason.to_string(),
    }))
}
