//! CSI volumes through the whole agent on the fake runtime: a pod whose claim is not bound
//! waits in `ContainerCreating` with the kubelet's `FailedMount` event; once the claim is bound
//! and the driver registered, the volume is staged and published and the container mounts the
//! pod's target; deleting the pod unpublishes and unstages it before its directory goes.

mod harness;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use harness::*;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource,
    PersistentVolumeSpec, Pod, Volume, VolumeMount,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use nodelet::agent::CgroupSetup;
use nodelet::csi::{api, CsiDrivers, CsiError, CsiNode, NodeCapabilities, RegisteredDriver};
use nodelet::objects::FakeObjects;
use nodelet::pod::worker_state::PodWork;

const DRIVER: &str = "dir.csi.example.com";

#[derive(Default)]
struct Driver {
    calls: Mutex<Vec<String>>,
}

impl Driver {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
    fn push(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

#[async_trait]
impl CsiNode for Driver {
    async fn node_get_info(&self) -> Result<api::NodeGetInfoResponse, CsiError> {
        Ok(Default::default())
    }
    async fn node_get_capabilities(&self) -> Result<api::NodeGetCapabilitiesResponse, CsiError> {
        Ok(Default::default())
    }
    async fn node_stage_volume(&self, r: api::NodeStageVolumeRequest) -> Result<(), CsiError> {
        self.push(format!("stage {} {}", r.volume_id, r.staging_target_path));
        Ok(())
    }
    async fn node_unstage_volume(&self, r: api::NodeUnstageVolumeRequest) -> Result<(), CsiError> {
        self.push(format!("unstage {}", r.volume_id));
        Ok(())
    }
    async fn node_publish_volume(&self, r: api::NodePublishVolumeRequest) -> Result<(), CsiError> {
        std::fs::create_dir_all(&r.target_path).unwrap();
        self.push(format!("publish {} {}", r.volume_id, r.target_path));
        Ok(())
    }
    async fn node_unpublish_volume(
        &self,
        r: api::NodeUnpublishVolumeRequest,
    ) -> Result<(), CsiError> {
        let _ = std::fs::remove_dir(&r.target_path);
        self.push(format!("unpublish {}", r.volume_id));
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

fn claim(phase: &str, volume: Option<&str>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            namespace: Some("default".into()),
            uid: Some("claim-uid".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: volume.map(str::to_string),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some(phase.into()),
            ..Default::default()
        }),
    }
}

fn bound_volume() -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pv-1".into()),
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
                volume_handle: "vol-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

fn pod_with_claim() -> Arc<Pod> {
    let mut p = (*pod("csi1", "Always", &["a"], "localhost/app:1")).clone();
    let spec = p.spec.as_mut().unwrap();
    spec.volumes = Some(vec![Volume {
        name: "data".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: "data".into(),
            read_only: None,
        }),
        ..Default::default()
    }]);
    spec.containers[0].volume_mounts = Some(vec![VolumeMount {
        name: "data".into(),
        mount_path: "/data".into(),
        ..Default::default()
    }]);
    Arc::new(p)
}

#[tokio::test(start_paused = true)]
async fn a_claim_waits_until_bound_then_is_staged_published_and_torn_down_with_the_pod() {
    let objects = Arc::new(FakeObjects::new());
    objects.set_claim(claim("Pending", None));
    let drivers = CsiDrivers::new();
    let driver = Arc::new(Driver::default());
    let (o, d) = (objects.clone(), drivers.clone());
    let h = harness_with_builder(
        (Duration::from_secs(10), Duration::from_secs(300)),
        |_| {},
        CgroupSetup::Given {
            settings: Default::default(),
            node: None,
        },
        move |b| b.objects(o).csi_drivers(d),
    )
    .await;
    let p = pod_with_claim();
    h.workers.update(PodWork::Sync(p.clone()));
    let event = h.event("FailedMount").await;
    assert_eq!(
        event.message.as_deref(),
        Some("Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC default/data: PVC is not bound")
    );
    assert_eq!(
        h.fake.container_count(),
        0,
        "no container before the volume"
    );
    let pods: Vec<Pod> = h.status.pods().iter().map(|p| (**p).clone()).collect();
    let waiting = serde_json::to_string(&pods).unwrap();
    assert!(waiting.contains("ContainerCreating"), "{waiting}");

    // Bound, the driver registered: staged once, published, mounted into the container.
    objects.set_claim(claim("Bound", Some("pv-1")));
    objects.set_persistent_volume(bound_volume());
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
    drivers.insert(RegisteredDriver {
        name: DRIVER.into(),
        endpoint: "unix:///fake".into(),
        versions: vec!["1.0.0".into()],
        node_id: "node1".into(),
        max_volumes_per_node: 0,
        topology: BTreeMap::new(),
        capabilities: NodeCapabilities {
            stage_unstage: true,
            ..Default::default()
        },
        client: driver.clone(),
    });
    h.wait_running(&["a"], "running once the claim is bound")
        .await;
    let root = &h._dir.path().join("root");
    let target = root.join("pods/csi1/volumes/kubernetes.io~csi/pv-1/mount");
    let mounts = h.fake.container_mounts("a");
    assert!(
        mounts
            .iter()
            .any(|(c, host, ro)| c == "/data" && std::path::Path::new(host) == target && !ro),
        "{mounts:?}"
    );
    let calls = driver.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0].starts_with("stage vol-1 ") && calls[0].ends_with("/globalmount"));
    assert_eq!(calls[1], format!("publish vol-1 {}", target.display()));

    // Deleted: unpublished, unstaged, the pod directory gone.
    let mut gone = (*p).clone();
    gone.metadata.deletion_timestamp = Some(Time("2026-01-01T00:01:00Z".parse().unwrap()));
    gone.metadata.deletion_grace_period_seconds = Some(0);
    h.workers.update(PodWork::Delete {
        pod: Arc::new(gone),
    });
    h.settle("reclaimed", |h| h.status.lifecycle("csi1").reclaimed)
        .await;
    assert_eq!(&driver.calls()[2..], ["unpublish vol-1", "unstage vol-1"]);
    assert!(!root.join("pods/csi1").exists());
    assert!(!root.join("plugins/kubernetes.io/csi").join(DRIVER).exists());
    h.cancel.cancel();
}

/// A pod that ran to completion has its CSI volumes unpublished and unstaged without being
/// deleted, as the kubelet unmounts a terminated pod's volumes.
#[tokio::test(start_paused = true)]
async fn a_completed_pods_volume_is_unpublished_and_unstaged() {
    let objects = Arc::new(FakeObjects::new());
    objects.set_claim(claim("Bound", Some("pv-1")));
    objects.set_persistent_volume(bound_volume());
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
    let drivers = CsiDrivers::new();
    let driver = Arc::new(Driver::default());
    drivers.insert(RegisteredDriver {
        name: DRIVER.into(),
        endpoint: "unix:///fake".into(),
        versions: vec!["1.0.0".into()],
        node_id: "node1".into(),
        max_volumes_per_node: 0,
        topology: BTreeMap::new(),
        capabilities: NodeCapabilities {
            stage_unstage: true,
            ..Default::default()
        },
        client: driver.clone(),
    });
    let (o, d) = (objects.clone(), drivers.clone());
    let h = harness_with_builder(
        (Duration::from_secs(10), Duration::from_secs(300)),
        |_| {},
        CgroupSetup::Given {
            settings: Default::default(),
            node: None,
        },
        move |b| b.objects(o).csi_drivers(d),
    )
    .await;
    let mut p = (*pod_with_claim()).clone();
    p.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    h.workers.update(PodWork::Sync(Arc::new(p)));
    h.wait_running(&["a"], "running").await;
    assert_eq!(driver.calls().len(), 2, "staged and published");
    h.fake.exit_container("a", 0);
    h.workers.wake("csi1");
    h.settle("unpublished and unstaged", |_| driver.calls().len() == 4)
        .await;
    assert_eq!(&driver.calls()[2..], ["unpublish vol-1", "unstage vol-1"]);
    assert_eq!(h.phase("csi1"), "Succeeded");
    h.cancel.cancel();
}
