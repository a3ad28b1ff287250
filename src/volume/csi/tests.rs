//! Resolution tables and component tests of the CSI volume manager with an in-memory driver
//! registered in `CsiDrivers` and `FakeObjects`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, CSIVolumeSource, Container, EphemeralVolumeSource,
    LocalObjectReference, NFSVolumeSource, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
    PersistentVolumeClaimVolumeSource, PersistentVolumeSpec, Pod, PodSecurityContext, PodSpec,
    Secret, SecretReference, Volume, VolumeMount,
};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSIDriverSpec, VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
    VolumeAttachmentStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;

use super::resolve::{resolve, Fetched, FsGroupPolicy, LifecycleMode, Resolution, VolumeObjects};
use super::*;
use crate::csi::{api, CsiError, CsiNode, NodeCapabilities, RegisteredDriver};
use crate::objects::FakeObjects;
use crate::volume::trash::Trash;

const DRIVER: &str = "dir.csi.example.com";

// ------------------------------------------------------------------ objects

fn pod(name: &str, uid: &str, volumes: Vec<Volume>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                volume_mounts: Some(
                    volumes
                        .iter()
                        .map(|v| VolumeMount {
                            name: v.name.clone(),
                            mount_path: format!("/{}", v.name),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }],
            volumes: Some(volumes),
            service_account_name: Some("sa".into()),
            ..Default::default()
        }),
        status: None,
    }
}

fn pvc_volume(name: &str, claim: &str, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: read_only.then_some(true),
        }),
        ..Default::default()
    }
}

fn inline_volume(name: &str) -> Volume {
    Volume {
        name: name.into(),
        csi: Some(CSIVolumeSource {
            driver: DRIVER.into(),
            volume_attributes: Some([("size".to_string(), "1Mi".to_string())].into()),
            node_publish_secret_ref: Some(LocalObjectReference {
                name: "inline-secret".into(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ephemeral_volume(name: &str) -> Volume {
    Volume {
        name: name.into(),
        ephemeral: Some(EphemeralVolumeSource::default()),
        ..Default::default()
    }
}

fn claim(name: &str, phase: &str, pv: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("claim-uid-{name}")),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: (!pv.is_empty()).then(|| pv.to_string()),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some(phase.into()),
            ..Default::default()
        }),
    }
}

fn pv(name: &str, claim: &str, handle: &str) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            claim_ref: Some(ObjectReference {
                name: Some(claim.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("claim-uid-{claim}")),
                ..Default::default()
            }),
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: handle.into(),
                fs_type: Some("ext4".into()),
                volume_attributes: Some([("a".to_string(), "b".to_string())].into()),
                ..Default::default()
            }),
            mount_options: Some(vec!["noatime".into()]),
            ..Default::default()
        }),
        status: None,
    }
}

fn csi_driver(attach: bool, modes: &[&str], policy: Option<&str>) -> CSIDriver {
    CSIDriver {
        metadata: ObjectMeta {
            name: Some(DRIVER.into()),
            ..Default::default()
        },
        spec: CSIDriverSpec {
            attach_required: Some(attach),
            pod_info_on_mount: Some(true),
            volume_lifecycle_modes: Some(modes.iter().map(|m| m.to_string()).collect()),
            fs_group_policy: policy.map(str::to_string),
            ..Default::default()
        },
    }
}

fn secret(ns: &str, name: &str, key: &str, value: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        data: Some([(key.to_string(), ByteString(value.as_bytes().to_vec()))].into()),
        ..Default::default()
    }
}

// ------------------------------------------------------------------ resolution table

#[test]
fn resolution_table() {
    let p = pod("web", "uid-1", vec![pvc_volume("data", "data", false)]);
    let v = &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
    let bound = || claim("data", "Bound", "pv-1");
    let good_pv = || pv("pv-1", "data", "h-1");
    let objects = |claim: Option<Fetched<PersistentVolumeClaim>>,
                   volume: Option<Fetched<PersistentVolume>>,
                   driver: Option<Fetched<CSIDriver>>| VolumeObjects {
        claim,
        volume,
        driver,
    };
    let waiting = |m: &str| Resolution::Waiting(format!("error processing PVC ns/data: {m}"));
    let mut deleting = bound();
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    let mut other_uid = good_pv();
    other_uid
        .spec
        .as_mut()
        .unwrap()
        .claim_ref
        .as_mut()
        .unwrap()
        .uid = Some("x".into());
    let mut unbound_pv = good_pv();
    unbound_pv.spec.as_mut().unwrap().claim_ref = None;
    let mut nfs = good_pv();
    nfs.spec.as_mut().unwrap().csi = None;
    nfs.spec.as_mut().unwrap().nfs = Some(NFSVolumeSource {
        server: "s".into(),
        path: "/x".into(),
        ..Default::default()
    });
    let mut block = good_pv();
    block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
    let cases: Vec<(&str, VolumeObjects, Resolution)> = vec![
        (
            "claim missing",
            objects(Some(Ok(None)), None, None),
            waiting("failed to fetch PVC from API server: persistentvolumeclaims \"data\" not found"),
        ),
        (
            "claim unreadable",
            objects(Some(Err("boom".into())), None, None),
            waiting("failed to fetch PVC from API server: boom"),
        ),
        (
            "claim pending",
            objects(Some(Ok(Some(claim("data", "Pending", "")))), None, None),
            waiting("PVC is not bound"),
        ),
        (
            "claim being deleted",
            objects(Some(Ok(Some(deleting))), None, None),
            waiting("PVC is being deleted"),
        ),
        (
            "bound without a volume name",
            objects(Some(Ok(Some(claim("data", "Bound", "")))), None, None),
            waiting("PVC has empty pvc.Spec.VolumeName"),
        ),
        (
            "volume missing",
            objects(Some(Ok(Some(bound()))), Some(Ok(None)), None),
            waiting("failed to fetch PV pv-1 from API server: persistentvolumes \"pv-1\" not found"),
        ),
        (
            "volume not bound back",
            objects(Some(Ok(Some(bound()))), Some(Ok(Some(unbound_pv))), None),
            waiting("found PV object pv-1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"),
        ),
        (
            "volume bound to another claim",
            objects(Some(Ok(Some(bound()))), Some(Ok(Some(other_uid))), None),
            waiting("found PV object pv-1 but its pv.Spec.ClaimRef.UID x does not point to claim.UID claim-uid-data"),
        ),
        (
            "nfs volume refused",
            objects(Some(Ok(Some(bound()))), Some(Ok(Some(nfs))), None),
            Resolution::Refused(Refusal {
                field: "spec.volumes[0].persistentVolumeClaim.claimName".into(),
                value: "data".into(),
                reason: "PersistentVolume pv-1 has a nfs source; nodelet mounts only CSI persistent volumes".into(),
            }),
        ),
        (
            "block volume mounted with volumeMounts refused",
            objects(Some(Ok(Some(bound()))), Some(Ok(Some(block))), None),
            Resolution::Refused(Refusal {
                field: "spec.volumes[0].persistentVolumeClaim.claimName".into(),
                value: "data".into(),
                reason: "volume data has volumeMode Block, but is specified in volumeMounts".into(),
            }),
        ),
        (
            "driver for ephemeral volumes only",
            objects(
                Some(Ok(Some(bound()))),
                Some(Ok(Some(good_pv()))),
                Some(Ok(Some(csi_driver(false, &["Ephemeral"], None)))),
            ),
            Resolution::Refused(Refusal {
                field: "spec.volumes[0].persistentVolumeClaim.claimName".into(),
                value: "data".into(),
                reason: format!("volume mode \"Persistent\" not supported by driver {DRIVER} (only supports [\"Ephemeral\"])"),
            }),
        ),
    ];
    for (name, objs, want) in cases {
        assert_eq!(resolve(&p, 0, v, &objs), want, "{name}");
    }

    // Ready: the PV's source, the CSIDriver's settings; no CSIDriver object means attach.
    let ready = |driver: Option<Fetched<CSIDriver>>| match resolve(
        &p,
        0,
        v,
        &objects(Some(Ok(Some(bound()))), Some(Ok(Some(good_pv()))), driver),
    ) {
        Resolution::Ready(spec) => *spec,
        other => panic!("not ready: {other:?}"),
    };
    let spec = ready(Some(Ok(None)));
    assert_eq!(spec.spec_name, "pv-1");
    assert_eq!(spec.handle, "h-1");
    assert_eq!(spec.fs_type, "ext4");
    assert_eq!(spec.mount_flags, ["noatime"]);
    assert_eq!(spec.access_mode, "ReadWriteOnce");
    assert!(spec.attach_required);
    assert!(!spec.pod_info_on_mount);
    assert_eq!(spec.fs_group_policy, FsGroupPolicy::ReadWriteOnceWithFsType);
    assert_eq!(spec.lifecycle, LifecycleMode::Persistent);
    let spec = ready(Some(Ok(Some(csi_driver(
        false,
        &["Persistent"],
        Some("File"),
    )))));
    assert!(!spec.attach_required);
    assert!(spec.pod_info_on_mount);
    assert_eq!(spec.fs_group_policy, FsGroupPolicy::File);
    // A CSIDriver that cannot be read: wait.
    assert_eq!(
        resolve(
            &p,
            0,
            v,
            &objects(
                Some(Ok(Some(bound()))),
                Some(Ok(Some(good_pv()))),
                Some(Err("csidrivers forbidden".into()))
            )
        ),
        Resolution::Waiting("csidrivers forbidden".into())
    );
    // readOnly in the pod's source reaches the spec.
    let ro = pod("web", "uid-1", vec![pvc_volume("data", "data", true)]);
    let ro_v = &ro.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
    match resolve(
        &ro,
        0,
        ro_v,
        &objects(
            Some(Ok(Some(bound()))),
            Some(Ok(Some(good_pv()))),
            Some(Ok(None)),
        ),
    ) {
        Resolution::Ready(spec) => assert!(spec.read_only),
        other => panic!("{other:?}"),
    }
}

#[test]
fn fs_group_follows_the_drivers_fs_group_policy() {
    let mut p = pod("web", "uid-1", vec![pvc_volume("data", "data", false)]);
    p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        fs_group: Some(2000),
        fs_group_change_policy: Some("OnRootMismatch".into()),
        ..Default::default()
    });
    let v = p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0].clone();
    let with = |policy: Option<&str>, access: &str, fs_type: Option<&str>| {
        let mut volume = pv("pv-1", "data", "h");
        let spec = volume.spec.as_mut().unwrap();
        spec.access_modes = Some(vec![access.to_string()]);
        spec.csi.as_mut().unwrap().fs_type = fs_type.map(str::to_string);
        VolumeObjects {
            claim: Some(Ok(Some(claim("data", "Bound", "pv-1")))),
            volume: Some(Ok(Some(volume))),
            driver: Some(Ok(Some(csi_driver(false, &["Persistent"], policy)))),
        }
    };
    let applied = Some((2000, true));
    for (policy, access, fs_type, want) in [
        (None, "ReadWriteOnce", Some("ext4"), applied),
        (None, "ReadWriteOncePod", Some("ext4"), applied),
        (None, "ReadWriteMany", Some("ext4"), None),
        (None, "ReadWriteOnce", None, None),
        (Some("File"), "ReadWriteMany", None, applied),
        (Some("None"), "ReadWriteOnce", Some("ext4"), None),
    ] {
        match resolve(&p, 0, &v, &with(policy, access, fs_type)) {
            Resolution::Ready(spec) => {
                assert_eq!(spec.fs_group, want, "{policy:?} {access} {fs_type:?}")
            }
            other => panic!("{policy:?}: {other:?}"),
        }
    }
}

#[test]
fn inline_and_ephemeral_volumes_resolve_as_the_kubelets() {
    let p = pod(
        "web",
        "uid-1",
        vec![inline_volume("scratch"), ephemeral_volume("tmp")],
    );
    let vols = p.spec.as_ref().unwrap().volumes.clone().unwrap();
    // Inline: only with Ephemeral among the CSIDriver's modes (none: Persistent only).
    for driver in [None, Some(csi_driver(false, &["Persistent"], None))] {
        let objs = VolumeObjects {
            driver: Some(Ok(driver)),
            ..Default::default()
        };
        assert_eq!(
            resolve(&p, 0, &vols[0], &objs),
            Resolution::Refused(Refusal {
                field: "spec.volumes[0].csi.driver".into(),
                value: DRIVER.into(),
                reason: format!("volume mode \"Ephemeral\" not supported by driver {DRIVER} (only supports [\"Persistent\"])"),
            })
        );
    }
    let objs = VolumeObjects {
        driver: Some(Ok(Some(csi_driver(
            true,
            &["Persistent", "Ephemeral"],
            None,
        )))),
        ..Default::default()
    };
    let Resolution::Ready(spec) = resolve(&p, 0, &vols[0], &objs) else {
        panic!("inline volume not ready")
    };
    assert_eq!(spec.handle, paths::inline_volume_handle("uid-1", "scratch"));
    assert_eq!(spec.spec_name, "scratch");
    assert_eq!(spec.lifecycle, LifecycleMode::Ephemeral);
    assert!(!spec.attach_required, "inline volumes are never attached");
    assert_eq!(
        spec.publish_secret,
        Some(SecretRef {
            namespace: "ns".into(),
            name: "inline-secret".into()
        })
    );
    // Generic ephemeral: the claim <pod>-<volume>, owned by the pod.
    assert_eq!(
        resolve::claim_of(&p, &vols[1]),
        Some(("web-tmp".to_string(), true))
    );
    let mut c = claim("web-tmp", "Bound", "pv-e");
    let objs = |c: &PersistentVolumeClaim| VolumeObjects {
        claim: Some(Ok(Some(c.clone()))),
        volume: Some(Ok(Some(pv("pv-e", "web-tmp", "h-e")))),
        driver: Some(Ok(Some(csi_driver(false, &["Persistent"], None)))),
    };
    assert_eq!(
        resolve(&p, 1, &vols[1], &objs(&c)),
        Resolution::Refused(Refusal {
            field: "spec.volumes[1].ephemeral".into(),
            value: "web-tmp".into(),
            reason: "PVC ns/web-tmp was not created for pod ns/web (pod is not owner)".into(),
        })
    );
    c.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "web".into(),
        uid: "uid-1".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    assert!(matches!(
        resolve(&p, 1, &vols[1], &objs(&c)),
        Resolution::Ready(_)
    ));
}

// ------------------------------------------------------------------ a driver in memory

#[derive(Debug, Clone, PartialEq)]
enum Call {
    Stage(api::NodeStageVolumeRequest),
    Unstage(api::NodeUnstageVolumeRequest),
    Publish(api::NodePublishVolumeRequest),
    Unpublish(api::NodeUnpublishVolumeRequest),
}

/// Records calls; publish makes the target directory as a driver does (no real mount).
#[derive(Default)]
struct FakeDriver {
    calls: Mutex<Vec<Call>>,
    /// A volume whose NodePublishVolume hangs until the receiver says `true`.
    hold: Mutex<Option<(String, tokio::sync::watch::Receiver<bool>)>>,
    /// Set when a held publish has begun.
    held: std::sync::atomic::AtomicBool,
}

impl FakeDriver {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
    fn count(&self, pick: fn(&Call) -> bool) -> usize {
        self.calls().iter().filter(|c| pick(c)).count()
    }
}

#[async_trait]
impl CsiNode for FakeDriver {
    async fn node_get_info(&self) -> Result<api::NodeGetInfoResponse, CsiError> {
        Ok(api::NodeGetInfoResponse::default())
    }
    async fn node_get_capabilities(&self) -> Result<api::NodeGetCapabilitiesResponse, CsiError> {
        Ok(api::NodeGetCapabilitiesResponse::default())
    }
    async fn node_stage_volume(&self, r: api::NodeStageVolumeRequest) -> Result<(), CsiError> {
        assert!(
            Path::new(&r.staging_target_path).is_dir(),
            "staging dir made first"
        );
        self.calls.lock().unwrap().push(Call::Stage(r));
        Ok(())
    }
    async fn node_unstage_volume(&self, r: api::NodeUnstageVolumeRequest) -> Result<(), CsiError> {
        self.calls.lock().unwrap().push(Call::Unstage(r));
        Ok(())
    }
    async fn node_publish_volume(&self, r: api::NodePublishVolumeRequest) -> Result<(), CsiError> {
        let hold = self
            .hold
            .lock()
            .unwrap()
            .as_ref()
            .filter(|(handle, _)| *handle == r.volume_id)
            .map(|(_, gate)| gate.clone());
        if let Some(mut gate) = hold {
            self.held.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = gate.wait_for(|open| *open).await;
        }
        let target = Path::new(&r.target_path);
        assert!(
            target.parent().unwrap().is_dir(),
            "target's parent made first"
        );
        let block = matches!(
            r.volume_capability
                .as_ref()
                .and_then(|c| c.access_type.as_ref()),
            Some(api::volume_capability::AccessType::Block(_))
        );
        if block {
            // The device is bound on a file.
            std::fs::write(target, b"").unwrap();
        } else {
            std::fs::create_dir_all(target).unwrap();
        }
        self.calls.lock().unwrap().push(Call::Publish(r));
        Ok(())
    }
    async fn node_unpublish_volume(
        &self,
        r: api::NodeUnpublishVolumeRequest,
    ) -> Result<(), CsiError> {
        let target = Path::new(&r.target_path);
        if target.is_file() {
            let _ = std::fs::remove_file(target);
        } else {
            let _ = std::fs::remove_dir(target);
        }
        self.calls.lock().unwrap().push(Call::Unpublish(r));
        Ok(())
    }
    async fn node_get_volume_stats(
        &self,
        _: api::NodeGetVolumeStatsRequest,
    ) -> Result<api::NodeGetVolumeStatsResponse, CsiError> {
        Ok(api::NodeGetVolumeStatsResponse::default())
    }
    async fn node_expand_volume(
        &self,
        _: api::NodeExpandVolumeRequest,
    ) -> Result<api::NodeExpandVolumeResponse, CsiError> {
        Ok(api::NodeExpandVolumeResponse::default())
    }
}

struct Bed {
    root: tempfile::TempDir,
    mountinfo: PathBuf,
    drivers: CsiDrivers,
    objects: Arc<FakeObjects>,
    driver: Arc<FakeDriver>,
}

impl Bed {
    fn new(stage: bool) -> Bed {
        let root = tempfile::tempdir().unwrap();
        let mountinfo = root.path().join("mountinfo");
        std::fs::write(&mountinfo, "").unwrap();
        let bed = Bed {
            root,
            mountinfo,
            drivers: CsiDrivers::new(),
            objects: Arc::new(FakeObjects::new()),
            driver: Arc::new(FakeDriver::default()),
        };
        bed.register(stage);
        bed
    }
    fn register(&self, stage: bool) {
        self.register_with(NodeCapabilities {
            stage_unstage: stage,
            ..Default::default()
        });
    }
    fn register_with(&self, capabilities: NodeCapabilities) {
        self.drivers.insert(RegisteredDriver {
            name: DRIVER.into(),
            endpoint: "unix:///fake".into(),
            versions: vec!["1.0.0".into()],
            node_id: "node-1".into(),
            max_volumes_per_node: 0,
            topology: BTreeMap::new(),
            capabilities,
            client: self.driver.clone(),
        });
    }
    fn root(&self) -> &Path {
        self.root.path()
    }
    /// A volume manager as nodelet makes one at start (a restart: a new one).
    fn manager(&self) -> CsiVolumes {
        CsiVolumes::new(
            self.root().to_path_buf(),
            "node-1".into(),
            self.drivers.clone(),
            self.objects.clone(),
        )
        .with_mountinfo(self.mountinfo.clone())
    }
    fn bind_claim(&self, claim_name: &str, pv_name: &str, handle: &str) {
        self.objects.set_claim(claim(claim_name, "Bound", pv_name));
        self.objects
            .set_persistent_volume(pv(pv_name, claim_name, handle));
    }
}

fn is_stage(c: &Call) -> bool {
    matches!(c, Call::Stage(_))
}
fn is_unstage(c: &Call) -> bool {
    matches!(c, Call::Unstage(_))
}
fn is_publish(c: &Call) -> bool {
    matches!(c, Call::Publish(_))
}
fn is_unpublish(c: &Call) -> bool {
    matches!(c, Call::Unpublish(_))
}

#[tokio::test]
async fn two_pods_on_one_claim_stage_once_and_unstage_after_the_last() {
    let bed = Bed::new(true);
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], None));
    bed.bind_claim("data", "pv-1", "h-1");
    let csi = bed.manager();
    let a = pod("a", "uid-a", vec![pvc_volume("data", "data", false)]);
    let b = pod("b", "uid-b", vec![pvc_volume("data", "data", true)]);

    let paths_a = csi.mount_pod(&a).await.unwrap();
    let target_a = bed
        .root()
        .join("pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount");
    assert_eq!(paths_a, [("data".to_string(), target_a.clone())].into());
    // A second sync changes nothing.
    csi.mount_pod(&a).await.unwrap();
    let paths_b = csi.mount_pod(&b).await.unwrap();
    assert_eq!(bed.driver.count(is_stage), 1, "{:?}", bed.driver.calls());
    assert_eq!(bed.driver.count(is_publish), 2);

    let global = paths::global_dir(bed.root(), DRIVER, "h-1");
    let staging = global.join("globalmount");
    let calls = bed.driver.calls();
    let Call::Stage(stage) = &calls[0] else {
        panic!()
    };
    assert_eq!(stage.volume_id, "h-1");
    assert_eq!(stage.staging_target_path, staging.to_string_lossy());
    let cap = stage.volume_capability.as_ref().unwrap();
    assert_eq!(
        cap.access_mode.as_ref().unwrap().mode,
        api::volume_capability::access_mode::Mode::SingleNodeWriter as i32
    );
    let Some(api::volume_capability::AccessType::Mount(m)) = &cap.access_type else {
        panic!()
    };
    assert_eq!(
        (m.fs_type.as_str(), m.mount_flags.clone()),
        ("ext4", vec!["noatime".to_string()])
    );
    let Call::Publish(publish_a) = &calls[1] else {
        panic!()
    };
    assert_eq!(publish_a.target_path, target_a.to_string_lossy());
    assert_eq!(publish_a.staging_target_path, staging.to_string_lossy());
    assert!(!publish_a.readonly);
    assert_eq!(publish_a.volume_context["a"], "b");
    assert_eq!(publish_a.volume_context["csi.storage.k8s.io/pod.name"], "a");
    assert_eq!(
        publish_a.volume_context["csi.storage.k8s.io/pod.namespace"],
        "ns"
    );
    assert_eq!(
        publish_a.volume_context["csi.storage.k8s.io/pod.uid"],
        "uid-a"
    );
    assert_eq!(
        publish_a.volume_context["csi.storage.k8s.io/serviceAccount.name"],
        "sa"
    );
    assert_eq!(
        publish_a.volume_context["csi.storage.k8s.io/ephemeral"],
        "false"
    );
    let Call::Publish(publish_b) = &calls[2] else {
        panic!()
    };
    assert!(publish_b.readonly, "readOnly of the pod's claim source");
    assert_eq!(paths_b["data"], Path::new(&publish_b.target_path));

    // The kubelet's files.
    let vol_data = paths::read_vol_data(target_a.parent().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(vol_data["specVolumeID"], "pv-1");
    assert_eq!(vol_data["volumeHandle"], "h-1");
    assert_eq!(vol_data["driverName"], DRIVER);
    assert_eq!(vol_data["nodeName"], "node-1");
    assert_eq!(vol_data["volumeLifecycleMode"], "Persistent");
    assert!(!vol_data.contains_key("attachmentID"));
    let global_data = paths::read_vol_data(&global).unwrap().unwrap();
    assert_eq!(global_data["driverName"], DRIVER);
    assert_eq!(global_data["volumeHandle"], "h-1");
    // The actual state, listed.
    let mounted = mounted_volumes(bed.root(), &bed.mountinfo).unwrap();
    assert_eq!(mounted.len(), 2);
    assert_eq!(
        mounted[0].unique_name,
        format!("kubernetes.io/csi/{DRIVER}^h-1")
    );
    assert_eq!(mounted[0].staging_path.as_deref(), Some(staging.as_path()));

    // The first pod goes: unpublished, still staged.
    csi.unmount_pod("uid-a").await.unwrap();
    assert_eq!(bed.driver.count(is_unpublish), 1);
    assert_eq!(bed.driver.count(is_unstage), 0);
    assert!(!target_a.parent().unwrap().exists());
    assert!(staging.is_dir());
    // The last one goes: unpublished, then unstaged, nothing left.
    csi.unmount_pod("uid-b").await.unwrap();
    assert_eq!(bed.driver.count(is_unpublish), 2);
    assert_eq!(bed.driver.count(is_unstage), 1);
    assert!(
        matches!(bed.driver.calls().last(), Some(Call::Unstage(u)) if u.staging_target_path == staging.to_string_lossy())
    );
    assert!(!global.exists());
    assert!(!bed
        .root()
        .join("pods/uid-b/volumes/kubernetes.io~csi")
        .exists());
    assert!(mounted_volumes(bed.root(), &bed.mountinfo)
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_driver_without_stage_unstage_is_only_published() {
    let bed = Bed::new(false);
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], None));
    bed.bind_claim("data", "pv-1", "h-1");
    let csi = bed.manager();
    csi.mount_pod(&pod("a", "uid-a", vec![pvc_volume("data", "data", false)]))
        .await
        .unwrap();
    let calls = bed.driver.calls();
    assert!(matches!(&calls[..], [Call::Publish(p)] if p.staging_target_path.is_empty()));
    csi.unmount_pod("uid-a").await.unwrap();
    assert!(matches!(&bed.driver.calls()[1..], [Call::Unpublish(_)]));
}

#[tokio::test]
async fn an_unbound_claim_waits_with_the_kubelets_message() {
    let bed = Bed::new(true);
    bed.objects.set_claim(claim("data", "Pending", ""));
    let csi = bed.manager();
    let p = pod("a", "uid-a", vec![pvc_volume("data", "data", false)]);
    let e = csi.mount_pod(&p).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC ns/data: PVC is not bound"
    );
    assert!(bed.driver.calls().is_empty());
    // Bound later: mounted on the next sync.
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], None));
    bed.bind_claim("data", "pv-1", "h-1");
    csi.mount_pod(&p).await.unwrap();
    assert_eq!(bed.driver.count(is_publish), 1);
}

#[tokio::test]
async fn attach_required_waits_for_the_volume_attachment() {
    let bed = Bed::new(true);
    bed.objects
        .set_csi_driver(csi_driver(true, &["Persistent"], None));
    bed.bind_claim("data", "pv-1", "h-1");
    let csi = bed.manager();
    let p = pod("a", "uid-a", vec![pvc_volume("data", "data", false)]);
    let name = paths::attachment_name("h-1", DRIVER, "node-1");
    let unique = format!("kubernetes.io/csi/{DRIVER}^h-1");
    // The ReportedInUse interlock first: the volume is wanted in the Node's volumesInUse, and
    // nothing goes further until the API server's Node has it there.
    let e = csi.mount_pod(&p).await.unwrap_err().to_string();
    assert!(
        e.contains(
            "Volume has not been added to the list of VolumesInUse in the node's volume status"
        ),
        "{e}"
    );
    assert_eq!(csi.wanted_in_use(), [unique.clone()].into());
    csi.set_reported_in_use(&["kubernetes.io/csi/other^x".to_string()]);
    let e = csi.mount_pod(&p).await.unwrap_err().to_string();
    assert!(e.contains("VolumesInUse"), "{e}");
    csi.set_reported_in_use(std::slice::from_ref(&unique));
    // Not yet in the Node's volumesAttached: not mounted, whatever the VolumeAttachment says.
    let e = csi.mount_pod(&p).await.unwrap_err().to_string();
    assert!(
        e.starts_with(
            "unmounted volumes=[data], unattached volumes=[data], failed to process volumes=[]: "
        ),
        "{e}"
    );
    assert!(
        e.contains("Volume not attached according to node status"),
        "{e}"
    );
    bed.objects.set_node(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-1"},
            "status": {"volumesAttached": [
                {"name": format!("kubernetes.io/csi/{DRIVER}^h-1"), "devicePath": ""}
            ]}
        }))
        .unwrap(),
    );
    let e = csi.mount_pod(&p).await.unwrap_err().to_string();
    assert!(
        e.contains(&format!("VolumeAttachment {name} not found")),
        "{e}"
    );
    let mut va = VolumeAttachment {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        spec: VolumeAttachmentSpec {
            attacher: DRIVER.into(),
            node_name: "node-1".into(),
            source: VolumeAttachmentSource {
                persistent_volume_name: Some("pv-1".into()),
                ..Default::default()
            },
        },
        status: Some(VolumeAttachmentStatus {
            attached: false,
            ..Default::default()
        }),
    };
    bed.objects.set_volume_attachment(va.clone());
    let e = csi.mount_pod(&p).await.unwrap_err().to_string();
    assert!(e.contains("is not attached yet"), "{e}");
    assert!(bed.driver.calls().is_empty());
    va.status = Some(VolumeAttachmentStatus {
        attached: true,
        attachment_metadata: Some([("devicePath".to_string(), "/dev/x".to_string())].into()),
        ..Default::default()
    });
    bed.objects.set_volume_attachment(va);
    csi.mount_pod(&p).await.unwrap();
    let calls = bed.driver.calls();
    let (Call::Stage(s), Call::Publish(p)) = (&calls[0], &calls[1]) else {
        panic!("{calls:?}")
    };
    assert_eq!(s.publish_context["devicePath"], "/dev/x");
    assert_eq!(p.publish_context["devicePath"], "/dev/x");
    let data = paths::read_vol_data(Path::new(&p.target_path).parent().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(data["attachmentID"], name);
    // Gone with the pod.
    csi.unmount_pod("uid-a").await.unwrap();
    assert!(csi.wanted_in_use().is_empty());
}

#[tokio::test]
async fn secrets_reach_the_driver() {
    let bed = Bed::new(true);
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent", "Ephemeral"], None));
    bed.bind_claim("data", "pv-1", "h-1");
    let mut volume = pv("pv-1", "data", "h-1");
    let csi_src = volume.spec.as_mut().unwrap().csi.as_mut().unwrap();
    csi_src.node_stage_secret_ref = Some(SecretReference {
        name: Some("stage".into()),
        namespace: Some("storage".into()),
    });
    csi_src.node_publish_secret_ref = Some(SecretReference {
        name: Some("publish".into()),
        namespace: Some("storage".into()),
    });
    bed.objects.set_persistent_volume(volume);
    let csi = bed.manager();
    let p = pod(
        "a",
        "uid-a",
        vec![pvc_volume("data", "data", false), inline_volume("scratch")],
    );
    // A missing secret: the kubelet's FailedMount text, nothing called.
    let e = csi.mount_pod(&p).await.unwrap_err();
    let CsiVolumeError::NotReady { failures, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(
        failures[0],
        "MountVolume.SetUp failed for volume \"data\" : fetching NodeStageSecretRef storage/stage failed: secrets \"stage\" not found"
    );
    bed.objects
        .set_secret(secret("storage", "stage", "user", "s"));
    bed.objects
        .set_secret(secret("storage", "publish", "token", "p"));
    bed.objects
        .set_secret(secret("ns", "inline-secret", "k", "i"));
    csi.mount_pod(&p).await.unwrap();
    let calls = bed.driver.calls();
    let stage = calls.iter().find_map(|c| match c {
        Call::Stage(s) => Some(s),
        _ => None,
    });
    assert_eq!(stage.unwrap().secrets["user"], "s");
    let publishes: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Publish(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(publishes.len(), 2);
    let pvc = publishes.iter().find(|p| p.volume_id == "h-1").unwrap();
    assert_eq!(pvc.secrets["token"], "p");
    // The inline volume: its own handle, the pod namespace's secret, ephemeral in the context.
    let inline = publishes
        .iter()
        .find(|p| p.volume_id == paths::inline_volume_handle("uid-a", "scratch"))
        .unwrap();
    assert_eq!(inline.secrets["k"], "i");
    assert_eq!(inline.volume_context["size"], "1Mi");
    assert_eq!(
        inline.volume_context["csi.storage.k8s.io/ephemeral"],
        "true"
    );
    assert!(inline
        .target_path
        .ends_with("/pods/uid-a/volumes/kubernetes.io~csi/scratch/mount"));
    let data = paths::read_vol_data(Path::new(&inline.target_path).parent().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(data["volumeLifecycleMode"], "Ephemeral");
}

#[tokio::test]
async fn refusals_reach_the_caller_before_any_driver_call() {
    let bed = Bed::new(true);
    let csi = bed.manager();
    // Inline without Ephemeral mode.
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], None));
    let e = csi
        .mount_pod(&pod("a", "uid-a", vec![inline_volume("scratch")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, CsiVolumeError::Refused(r) if r.field == "spec.volumes[0].csi.driver"),
        "{e}"
    );
    // An ephemeral claim the pod does not own.
    bed.bind_claim("b-tmp", "pv-e", "h-e");
    let e = csi
        .mount_pod(&pod("b", "uid-b", vec![ephemeral_volume("tmp")]))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "spec.volumes[0].ephemeral: Unsupported value: \"b-tmp\": PVC ns/b-tmp was not created for pod ns/b (pod is not owner)"
    );
    assert!(bed.driver.calls().is_empty());
}

#[tokio::test]
async fn an_unregistered_driver_waits_with_the_kubelets_message() {
    let bed = Bed::new(true);
    bed.drivers.remove(DRIVER);
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], None));
    bed.bind_claim("data", "pv-1", "h-1");
    let e = bed
        .manager()
        .mount_pod(&pod("a", "uid-a", vec![pvc_volume("data", "data", false)]))
        .await
        .unwrap_err();
    assert!(
        e.to_string().ends_with(&format!(
            "driver name {DRIVER} not found in the list of registered CSI drivers"
        )),
        "{e}"
    );
}

#[tokio::test]
async fn after_a_restart_a_gone_pods_volume_is_unpublished_once_its_driver_is_back() {
    let bed = Bed::new(true);
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], None));
    bed.bind_claim("data", "pv-1", "h-1");
    bed.bind_claim("other", "pv-2", "h-2");
    {
        let before = bed.manager();
        before
            .mount_pod(&pod("a", "uid-a", vec![pvc_volume("data", "data", false)]))
            .await
            .unwrap();
        before
            .mount_pod(&pod(
                "b",
                "uid-b",
                vec![pvc_volume("other", "other", false)],
            ))
            .await
            .unwrap();
    }
    // nodelet restarts; the driver has not registered again yet, and the target is still
    // mounted (the mount table says so).
    bed.drivers.remove(DRIVER);
    let target = bed
        .root()
        .join("pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount");
    std::fs::write(
        &bed.mountinfo,
        format!("100 1 0:50 / {} rw - ext4 /dev/x rw\n", target.display()),
    )
    .unwrap();
    let after = bed.manager();
    let e = after.unmount_pod("uid-a").await.unwrap_err();
    assert!(
        e.to_string()
            .contains("not found in the list of registered CSI drivers"),
        "{e}"
    );
    // The pod directory stays: nodelet never unmounts a CSI target itself.
    let e = crate::volume::cleanup_pod_dir_with(
        bed.root(),
        "uid-a",
        &bed.mountinfo,
        &Trash::new(bed.root()).0,
    )
    .unwrap_err();
    assert!(
        matches!(e, crate::volume::VolumeError::StillMounted { .. }),
        "{e}"
    );
    assert!(target.is_dir());
    // The driver is back and unmounts: the next pass unpublishes and unstages.
    bed.register(true);
    std::fs::write(&bed.mountinfo, "").unwrap();
    after.unmount_pod("uid-a").await.unwrap();
    let unpublished: Vec<_> = bed
        .driver
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Unpublish(u) => Some(u.target_path),
            _ => None,
        })
        .collect();
    assert_eq!(unpublished, [target.to_string_lossy().into_owned()]);
    assert_eq!(bed.driver.count(is_unstage), 1);
    crate::volume::cleanup_pod_dir_with(
        bed.root(),
        "uid-a",
        &bed.mountinfo,
        &Trash::new(bed.root()).0,
    )
    .unwrap();
    assert!(!bed.root().join("pods/uid-a").exists());
    // The running pod's volume stays published and staged.
    assert!(paths::global_dir(bed.root(), DRIVER, "h-2")
        .join("globalmount")
        .is_dir());
    assert_eq!(after.unstage_unused().await.unwrap(), 0);
}

#[tokio::test]
async fn a_volume_staged_for_no_pod_is_unstaged() {
    let bed = Bed::new(true);
    let dir = paths::global_dir(bed.root(), DRIVER, "h-9");
    paths::write_vol_data(
        &dir,
        &[
            ("driverName".to_string(), DRIVER.to_string()),
            ("volumeHandle".to_string(), "h-9".to_string()),
        ]
        .into(),
    )
    .unwrap();
    std::fs::create_dir(dir.join("globalmount")).unwrap();
    assert_eq!(bed.manager().unstage_unused().await.unwrap(), 1);
    assert!(matches!(&bed.driver.calls()[..], [Call::Unstage(u)] if u.volume_id == "h-9"));
    assert!(!dir.exists());
}

#[test]
fn standalone_pods_with_claims_wait_with_the_no_client_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let csi = CsiVolumes::new(
        root.path().to_path_buf(),
        "n".into(),
        CsiDrivers::new(),
        Arc::new(crate::objects::NoApiServer),
    );
    let e = rt
        .block_on(csi.mount_pod(&pod("a", "uid-a", vec![pvc_volume("data", "data", false)])))
        .unwrap_err();
    assert!(
        e.to_string().ends_with("error processing PVC ns/data: failed to fetch PVC from API server: couldn't get persistentvolumeclaims ns/data, no kubeClient defined"),
        "{e}"
    );
}

#[tokio::test]
async fn fs_group_reaches_the_published_volume_or_the_driver() {
    use std::os::unix::fs::MetadataExt;
    let bed = Bed::new(true);
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], Some("File")));
    bed.bind_claim("data", "pv-1", "h-1");
    let with_group = |name: &str, uid: &str| {
        let mut p = pod(name, uid, vec![pvc_volume("data", "data", false)]);
        p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            fs_group: Some(3000),
            ..Default::default()
        });
        p
    };
    let csi = bed.manager();
    let paths = csi.mount_pod(&with_group("a", "uid-a")).await.unwrap();
    let meta = std::fs::metadata(&paths["data"]).unwrap();
    assert_eq!(
        meta.gid(),
        3000,
        "nodelet changed the group after the publish"
    );
    assert_eq!(meta.mode() & 0o2070, 0o2070);
    // A driver with VOLUME_MOUNT_GROUP is given the group instead.
    bed.register_with(NodeCapabilities {
        stage_unstage: true,
        volume_mount_group: true,
        ..Default::default()
    });
    let paths = csi.mount_pod(&with_group("b", "uid-b")).await.unwrap();
    let publish = bed
        .driver
        .calls()
        .into_iter()
        .rev()
        .find_map(|c| match c {
            Call::Publish(p) => Some(p),
            _ => None,
        })
        .unwrap();
    let Some(api::volume_capability::AccessType::Mount(m)) =
        publish.volume_capability.unwrap().access_type
    else {
        panic!()
    };
    assert_eq!(m.volume_mount_group, "3000");
    assert_ne!(std::fs::metadata(&paths["data"]).unwrap().gid(), 3000);
}

/// A pod using `volume` as a raw block device (`volumeDevices`) and nothing in volumeMounts.
fn block_pod(name: &str, uid: &str, volume: Volume) -> Pod {
    let mut p = pod(name, uid, vec![volume.clone()]);
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.volume_mounts = None;
    c.volume_devices = Some(vec![k8s_openapi::api::core::v1::VolumeDevice {
        name: volume.name.clone(),
        device_path: "/dev/xvda".into(),
    }]);
    p
}

fn block_pv(name: &str, claim: &str, handle: &str) -> PersistentVolume {
    let mut v = pv(name, claim, handle);
    v.spec.as_mut().unwrap().volume_mode = Some("Block".into());
    v
}

#[test]
fn volume_mode_against_mounts_and_devices_table() {
    let fs_pv = pv("pv-1", "data", "h-1");
    let blk_pv = block_pv("pv-1", "data", "h-1");
    let mounted = pod("web", "uid-1", vec![pvc_volume("data", "data", false)]);
    let device = block_pod("web", "uid-1", pvc_volume("data", "data", false));
    let mut both = device.clone();
    both.spec.as_mut().unwrap().containers[0].volume_mounts =
        mounted.spec.as_ref().unwrap().containers[0]
            .volume_mounts
            .clone();
    let mut other_mode = fs_pv.clone();
    other_mode.spec.as_mut().unwrap().volume_mode = Some("Object".into());
    let refused = |reason: &str| {
        Err(Refusal {
            field: "spec.volumes[0].persistentVolumeClaim.claimName".into(),
            value: "data".into(),
            reason: reason.into(),
        })
    };
    // (case, pod, PV, Ok(block) or the refusal)
    let cases: Vec<(&str, &Pod, &PersistentVolume, Result<bool, Refusal>)> = vec![
        ("filesystem claim mounted", &mounted, &fs_pv, Ok(false)),
        ("block claim as a device", &device, &blk_pv, Ok(true)),
        ("block claim in volumeMounts", &mounted, &blk_pv, refused("volume data has volumeMode Block, but is specified in volumeMounts")),
        ("block claim in both", &both, &blk_pv, refused("volume data has volumeMode Block, but is specified in volumeMounts")),
        ("filesystem claim as a device", &device, &fs_pv, refused("volume data has volumeMode Filesystem, but is specified in volumeDevices")),
        ("unknown volumeMode", &device, &other_mode, refused("PersistentVolume pv-1 has volumeMode Object; nodelet mounts Filesystem and Block volumes")),
    ];
    for (name, p, volume, want) in cases {
        let v = &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
        let objects = VolumeObjects {
            claim: Some(Ok(Some(claim("data", "Bound", "pv-1")))),
            volume: Some(Ok(Some(volume.clone()))),
            driver: Some(Ok(None)),
        };
        let got = match resolve(p, 0, v, &objects) {
            Resolution::Ready(spec) => Ok(spec.block),
            Resolution::Refused(r) => Err(r),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(got, want, "{name}");
    }
    // No fsGroup on a device.
    let mut grouped = device.clone();
    grouped.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        fs_group: Some(1000),
        ..Default::default()
    });
    let v = &grouped.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
    let objects = VolumeObjects {
        claim: Some(Ok(Some(claim("data", "Bound", "pv-1")))),
        volume: Some(Ok(Some(blk_pv.clone()))),
        driver: Some(Ok(Some(csi_driver(false, &["Persistent"], Some("File"))))),
    };
    match resolve(&grouped, 0, v, &objects) {
        Resolution::Ready(spec) => assert_eq!(spec.fs_group, None),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_block_claim_is_staged_and_published_at_the_kubelets_block_paths() {
    let bed = Bed::new(true);
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], None));
    bed.objects.set_claim(claim("data", "Bound", "pv-b"));
    bed.objects
        .set_persistent_volume(block_pv("pv-b", "data", "h-b"));
    let csi = bed.manager();
    let a = block_pod("a", "uid-a", pvc_volume("data", "data", false));
    let b = block_pod("b", "uid-b", pvc_volume("data", "data", true));

    let root = bed.root();
    let block = root.join("plugins/kubernetes.io/csi/volumeDevices");
    let staging = block.join("staging/pv-b");
    let target_a = block.join("publish/pv-b/uid-a");
    let paths_a = csi.mount_pod(&a).await.unwrap();
    assert_eq!(paths_a, [("data".to_string(), target_a.clone())].into());
    csi.mount_pod(&a).await.unwrap();
    let paths_b = csi.mount_pod(&b).await.unwrap();
    assert_eq!(paths_b["data"], block.join("publish/pv-b/uid-b"));
    assert_eq!(bed.driver.count(is_stage), 1, "{:?}", bed.driver.calls());
    assert_eq!(bed.driver.count(is_publish), 2);

    let calls = bed.driver.calls();
    let Call::Stage(stage) = &calls[0] else {
        panic!()
    };
    assert_eq!(stage.staging_target_path, staging.to_string_lossy());
    assert!(matches!(
        stage.volume_capability.as_ref().unwrap().access_type,
        Some(api::volume_capability::AccessType::Block(_))
    ));
    let Call::Publish(publish_a) = &calls[1] else {
        panic!()
    };
    assert_eq!(publish_a.target_path, target_a.to_string_lossy());
    assert_eq!(publish_a.staging_target_path, staging.to_string_lossy());
    assert!(matches!(
        publish_a.volume_capability.as_ref().unwrap().access_type,
        Some(api::volume_capability::AccessType::Block(_))
    ));
    let Call::Publish(publish_b) = &calls[2] else {
        panic!()
    };
    assert!(publish_b.readonly);
    // The kubelet's vol_data.json beside the block volume; no pod filesystem target.
    let data = paths::read_vol_data(&block.join("pv-b/data"))
        .unwrap()
        .unwrap();
    assert_eq!(data["specVolumeID"], "pv-b");
    assert_eq!(data["volumeHandle"], "h-b");
    assert_eq!(data["driverName"], DRIVER);
    assert!(!root.join("pods/uid-a/volumes/kubernetes.io~csi").exists());
    let mounted = mounted_volumes(root, &bed.mountinfo).unwrap();
    assert_eq!(
        mounted
            .iter()
            .map(|m| (m.target_path.clone(), m.staging_path.clone()))
            .collect::<Vec<_>>(),
        vec![
            (target_a.clone(), Some(staging.clone())),
            (block.join("publish/pv-b/uid-b"), Some(staging.clone()))
        ]
    );

    // The first pod goes: unpublished, still staged; the last: unpublished, unstaged, and
    // nothing of the volume left.
    csi.unmount_pod("uid-a").await.unwrap();
    assert_eq!(
        (bed.driver.count(is_unpublish), bed.driver.count(is_unstage)),
        (1, 0)
    );
    assert!(!target_a.exists());
    assert!(staging.is_dir());
    csi.unmount_pod("uid-b").await.unwrap();
    assert_eq!(
        (bed.driver.count(is_unpublish), bed.driver.count(is_unstage)),
        (2, 1)
    );
    assert!(
        matches!(bed.driver.calls().last(), Some(Call::Unstage(u)) if u.staging_target_path == staging.to_string_lossy())
    );
    let left: Vec<_> = walkdir(&block);
    assert!(
        left.iter().all(|p| p.is_dir() && !p.ends_with("pv-b")),
        "{left:?}"
    );
    assert!(mounted_volumes(root, &bed.mountinfo).unwrap().is_empty());

    // A driver without STAGE_UNSTAGE_VOLUME: published only, and torn down without a trace.
    let bed = Bed::new(false);
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], None));
    bed.objects.set_claim(claim("data", "Bound", "pv-b"));
    bed.objects
        .set_persistent_volume(block_pv("pv-b", "data", "h-b"));
    let csi = bed.manager();
    csi.mount_pod(&a).await.unwrap();
    assert!(
        matches!(&bed.driver.calls()[..], [Call::Publish(p)] if p.staging_target_path.is_empty())
    );
    csi.unmount_pod("uid-a").await.unwrap();
    assert!(matches!(&bed.driver.calls()[1..], [Call::Unpublish(_)]));
    let block = bed.root().join("plugins/kubernetes.io/csi/volumeDevices");
    assert!(!block.join("pv-b").exists());
    assert!(!block.join("publish/pv-b").exists());
}

/// Every path under `dir`.
fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        }
        out.push(p);
    }
    out
}

/// A driver that hangs in one volume's NodePublishVolume holds up that volume only: meanwhile
/// another pod's volume of the same driver is published and unpublished, a pod without CSI
/// volumes leaves at once, and a second pod on the hung volume is told at once that an
/// operation is in progress (no task waits behind it). When the driver answers, the first
/// pod's mount completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_hanging_in_one_publish_holds_up_that_volume_only() {
    use std::time::Duration;
    let bed = Bed::new(true);
    bed.objects
        .set_csi_driver(csi_driver(false, &["Persistent"], None));
    bed.bind_claim("slow", "pv-slow", "h-slow");
    bed.bind_claim("fast", "pv-fast", "h-fast");
    let (open, gate) = tokio::sync::watch::channel(false);
    *bed.driver.hold.lock().unwrap() = Some(("h-slow".into(), gate));
    let csi = Arc::new(bed.manager());
    let hung = tokio::spawn({
        let csi = csi.clone();
        async move {
            csi.mount_pod(&pod("a", "uid-a", vec![pvc_volume("data", "slow", false)]))
                .await
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !bed.driver.held.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the publish never began"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let soon = Duration::from_secs(10);
    let b = pod("b", "uid-b", vec![pvc_volume("data", "fast", false)]);
    let paths_b = tokio::time::timeout(soon, csi.mount_pod(&b))
        .await
        .expect("another volume waited for the hung one")
        .unwrap();
    assert!(paths_b["data"].is_dir());
    tokio::time::timeout(soon, csi.unmount_pod("uid-without-csi"))
        .await
        .expect("a pod without CSI volumes waited")
        .unwrap();
    let c = pod("c", "uid-c", vec![pvc_volume("data", "slow", false)]);
    let busy = tokio::time::timeout(soon, csi.mount_pod(&c))
        .await
        .expect("a second pod on the hung volume waited")
        .unwrap_err();
    assert!(
        busy.to_string()
            .contains("an operation for volume dir.csi.example.com/h-slow is already in progress"),
        "{busy}"
    );
    tokio::time::timeout(soon, csi.unmount_pod("uid-b"))
        .await
        .expect("unpublishing another volume waited")
        .unwrap();
    assert!(!paths_b["data"].exists());
    assert!(!hung.is_finished());
    open.send_replace(true);
    let paths_a = tokio::time::timeout(soon, hung)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(paths_a["data"].is_dir());
    // The volume is free again: the second pod's mount goes through.
    tokio::time::timeout(soon, csi.mount_pod(&c))
        .await
        .unwrap()
        .unwrap();
}
