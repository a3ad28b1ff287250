//! CSI volumes on the real containerd: nodelet in this process, a PersistentVolumeClaim bound
//! to a CSI PersistentVolume (in-memory objects), and a driver in this process that really
//! bind-mounts — a backing directory onto the global mount at NodeStageVolume, the global
//! mount onto the pod's target at NodePublishVolume. A file the container writes to the claim
//! lands in the backing directory; once the pod is deleted, nothing nodelet or the driver
//! mounted is left in `/proc/self/mountinfo`.
//!
//! The pod goes to the pod workers directly: a static pod may not reference a claim.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Container, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource,
    PersistentVolumeSpec, Pod, PodSpec, Volume, VolumeMount,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nodelet::csi::{api, CsiDrivers, CsiError, CsiNode, NodeCapabilities, RegisteredDriver};
use nodelet::objects::FakeObjects;
use nodelet::pod::worker_state::PodWork;

const T: Duration = Duration::from_secs(90);
const DRIVER: &str = "bind.csi.nodelet.test";

fn internal(e: impl std::fmt::Display) -> CsiError {
    CsiError::Call {
        driver: DRIVER.into(),
        op: "bind",
        status: tonic::Status::internal(e.to_string()),
    }
}

/// A CSI node plugin backed by directories: stage bind-mounts `<backing>/<volume id>` on the
/// staging path, publish bind-mounts the staging path on the target (which it creates).
struct BindDriver {
    backing: PathBuf,
    calls: Mutex<Vec<String>>,
}

fn bind(from: &Path, to: &Path) -> Result<(), CsiError> {
    mount(Some(from), to, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(internal)
}

#[async_trait]
impl CsiNode for BindDriver {
    async fn node_get_info(&self) -> Result<api::NodeGetInfoResponse, CsiError> {
        Ok(Default::default())
    }
    async fn node_get_capabilities(&self) -> Result<api::NodeGetCapabilitiesResponse, CsiError> {
        Ok(Default::default())
    }
    async fn node_stage_volume(&self, r: api::NodeStageVolumeRequest) -> Result<(), CsiError> {
        let source = self.backing.join(&r.volume_id);
        std::fs::create_dir_all(&source).map_err(internal)?;
        bind(&source, Path::new(&r.staging_target_path))?;
        self.calls.lock().unwrap().push("stage".into());
        Ok(())
    }
    async fn node_unstage_volume(&self, r: api::NodeUnstageVolumeRequest) -> Result<(), CsiError> {
        umount2(r.staging_target_path.as_str(), MntFlags::MNT_DETACH).map_err(internal)?;
        self.calls.lock().unwrap().push("unstage".into());
        Ok(())
    }
    async fn node_publish_volume(&self, r: api::NodePublishVolumeRequest) -> Result<(), CsiError> {
        std::fs::create_dir_all(&r.target_path).map_err(internal)?;
        bind(Path::new(&r.staging_target_path), Path::new(&r.target_path))?;
        self.calls.lock().unwrap().push("publish".into());
        Ok(())
    }
    async fn node_unpublish_volume(
        &self,
        r: api::NodeUnpublishVolumeRequest,
    ) -> Result<(), CsiError> {
        umount2(r.target_path.as_str(), MntFlags::MNT_DETACH).map_err(internal)?;
        std::fs::remove_dir(&r.target_path).map_err(internal)?;
        self.calls.lock().unwrap().push("unpublish".into());
        Ok(())
    }
    async fn node_get_volume_stats(
        &self,
        _: api::NodeGetVolumeStatsRequest,
    ) -> Result<api::NodeGetVolumeStatsResponse, CsiError> {
        Ok(Default::default())
    }
    async fn node_expand_volume(
        &self,
        _: api::NodeExpandVolumeRequest,
    ) -> Result<api::NodeExpandVolumeResponse, CsiError> {
        Ok(Default::default())
    }
}

/// Mount points below `dir`.
fn mounts_below(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .filter(|m| Path::new(m).starts_with(dir))
        .map(str::to_string)
        .collect()
}

/// Unmounts whatever is left below the test's directory even when the test fails.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let mut points = mounts_below(&self.0);
        points.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in points {
            let _ = umount2(m.as_str(), MntFlags::MNT_DETACH);
        }
    }
}

fn objects() -> FakeObjects {
    let objects = FakeObjects::new();
    objects.set_claim(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            namespace: Some("default".into()),
            uid: Some("claim-uid".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: Some("pv-bind".into()),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        }),
    });
    objects.set_persistent_volume(PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pv-bind".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            claim_ref: Some(ObjectReference {
                name: Some("data".into()),
                namespace: Some("default".into()),
                uid: Some("claim-uid".into()),
                ..Default::default()
            }),
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: "vol-bind".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    });
    objects.set_csi_driver(CSIDriver {
        metadata: ObjectMeta {
            name: Some(DRIVER.into()),
            ..Default::default()
        },
        spec: CSIDriverSpec {
            attach_required: Some(false),
            ..Default::default()
        },
    });
    objects
}

fn writer_pod(uid: &str) -> Pod {
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some("csi-writer".into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Always".into()),
            // The init container writes the file and exits; the main container keeps the pod
            // running (and the volume mounted) until the delete.
            init_containers: Some(vec![Container {
                name: "writer".into(),
                image: Some(TESTBOX.into()),
                image_pull_policy: Some("Never".into()),
                args: Some(
                    [
                        "write",
                        "--path",
                        "/data/file",
                        "--content",
                        "from the container",
                    ]
                    .map(String::from)
                    .to_vec(),
                ),
                volume_mounts: Some(vec![VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }]),
            containers: vec![Container {
                name: "main".into(),
                image: Some(TESTBOX.into()),
                image_pull_policy: Some("Never".into()),
                args: Some(vec!["serve".into()]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    read_only: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "data".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: "data".into(),
                    read_only: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    nodelet::source::defaults::apply_defaults(&mut pod);
    pod
}

async fn wait_for(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + T;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_bind_mounted_into_the_container_and_nothing_stays_mounted_after_the_pod() {
    let n = Nodelet::prepare_with("csi_bind", "");
    let _unmount = Unmount(n.dir.path().to_path_buf());
    let text = std::fs::read_to_string(&n.config).expect("config");
    let cfg = nodelet::config::parse(
        &text,
        &n.config,
        &nodelet::config::Environment {
            hostname: n.node.clone(),
        },
    )
    .expect("the test configuration")
    .config;
    let backing = n.dir.path().join("backing");
    let driver = Arc::new(BindDriver {
        backing: backing.clone(),
        calls: Mutex::new(Vec::new()),
    });
    let drivers = CsiDrivers::new();
    drivers.insert(RegisteredDriver {
        name: DRIVER.into(),
        endpoint: "unix:///in-process".into(),
        versions: vec!["1.0.0".into()],
        node_id: n.node.clone(),
        max_volumes_per_node: 0,
        topology: BTreeMap::new(),
        capabilities: NodeCapabilities {
            stage_unstage: true,
            ..Default::default()
        },
        client: driver.clone(),
    });
    let machine = nodelet::stats::machine::MachineInfo::read(Path::new("/"), &cfg.root_dir);
    let root = cfg.root_dir.clone();
    let agent = nodelet::agent::NodeletBuilder::new(cfg)
        .node_info(nodelet::stats::machine::NodeInfo {
            name: n.node.clone(),
            host_ips: vec!["127.0.0.1".into()],
            machine,
        })
        .objects(Arc::new(objects()))
        .csi_drivers(drivers)
        .start()
        .await
        .expect("nodelet starts on the test containerd");
    let uid = format!("csi-bind-{}", std::process::id());
    let pod = Arc::new(writer_pod(&uid));
    agent.workers().update(PodWork::Sync(pod.clone()));

    let running = |agent: &nodelet::agent::Nodelet| {
        agent.status().pods().iter().any(|p| {
            p.metadata.uid.as_deref() == Some(uid.as_str())
                && p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.first())
                    .and_then(|c| c.state.as_ref())
                    .and_then(|s| s.running.as_ref())
                    .is_some()
        })
    };
    wait_for("the main container to run after the writer", || {
        running(&agent)
    })
    .await;
    let status = serde_json::to_string(
        &agent
            .status()
            .pods()
            .iter()
            .map(|p| (**p).clone())
            .collect::<Vec<Pod>>(),
    )
    .unwrap();
    assert!(status.contains("\"exitCode\":0"), "{status}");
    assert_eq!(
        std::fs::read_to_string(backing.join("vol-bind/file"))
            .expect("the file in the backing directory"),
        "from the container"
    );
    let target = root.join(format!(
        "pods/{uid}/volumes/kubernetes.io~csi/pv-bind/mount"
    ));
    let mounted = mounts_below(&root);
    assert!(
        mounted.iter().any(|m| Path::new(m) == target),
        "the pod's target is mounted: {mounted:?}"
    );
    assert!(
        mounted.iter().any(|m| m.ends_with("/globalmount")),
        "the global mount: {mounted:?}"
    );

    let mut gone = (*pod).clone();
    gone.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    gone.metadata.deletion_grace_period_seconds = Some(0);
    agent.workers().update(PodWork::Delete {
        pod: Arc::new(gone),
    });
    wait_for("the pod reclaimed", || {
        agent.status().lifecycle(&uid).reclaimed
    })
    .await;
    assert_eq!(
        *driver.calls.lock().unwrap(),
        ["stage", "publish", "unpublish", "unstage"]
    );
    assert_eq!(
        mounts_below(n.dir.path()),
        Vec::<String>::new(),
        "nothing stays mounted"
    );
    assert!(!root.join(format!("pods/{uid}")).exists());
    agent.cancel_token().cancel();
}
