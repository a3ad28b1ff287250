//! CSI volumes' usage as their drivers report it (`NodeGetVolumeStats`), for the pods' `volume`
//! entries of the Summary API.
//!
//! The kubelet never walks a CSI volume: its CSI metrics provider asks the driver, and a driver
//! without the `GET_VOLUME_STATS` node capability gives no entry. Like the other volume numbers
//! (the kubelet's per-pod volume stat calculator, `volumeStatsAggPeriod`) a volume is asked at
//! most once per period; a volume published since the last pass is asked at the next one
//! ([`REFRESH_TICK`]), so a new pod's volume shows up within seconds. The readings are kept by
//! pod UID under the pod's own volume name (`data`, not the PersistentVolume's name) with the
//! claim it came through (`pvcRef`), as the kubelet reports them. With the `CSIVolumeHealth`
//! gate the driver's volume condition becomes `volumeHealthStats.abnormal`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use super::provider::PodsFn;
use super::summary::{FsStats, PvcReference, VolumeHealthStats, VolumeStats};
use crate::csi::{api, CsiDrivers};
use crate::objects::ObjectSource;
use crate::volume::csi::MountedCsiVolume;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// How often the refresher looks for volumes without a reading or with an old one.
pub const REFRESH_TICK: Duration = Duration::from_secs(5);

/// The numbers of one `NodeGetVolumeStats` answer, as the Summary reports them. A negative
/// number from the driver is left out rather than wrapped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverUsage {
    pub capacity_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    pub inodes: Option<u64>,
    pub inodes_free: Option<u64>,
    pub inodes_used: Option<u64>,
    /// The driver's volume condition, when it reported one.
    pub abnormal: Option<bool>,
}

/// Reads a driver's answer (the kubelet's `csiMetricsProvider`: BYTES and INODES usages,
/// the condition when present).
pub fn driver_usage(response: &api::NodeGetVolumeStatsResponse) -> DriverUsage {
    use api::volume_usage::Unit;
    let number = |n: i64| u64::try_from(n).ok();
    let mut usage = DriverUsage {
        abnormal: response.volume_condition.as_ref().map(|c| c.abnormal),
        ..DriverUsage::default()
    };
    for u in &response.usage {
        match Unit::try_from(u.unit) {
            Ok(Unit::Bytes) => {
                usage.capacity_bytes = number(u.total);
                usage.available_bytes = number(u.available);
                usage.used_bytes = number(u.used);
            }
            Ok(Unit::Inodes) => {
                usage.inodes = number(u.total);
                usage.inodes_free = number(u.available);
                usage.inodes_used = number(u.used);
            }
            _ => {}
        }
    }
    usage
}

/// The pod volume a published CSI volume serves: its name in the pod and the claim it came
/// through (`None` for an inline CSI volume). `spec_name` is the volume's directory name under
/// `kubernetes.io~csi` — the PersistentVolume's name for a claim, the pod's volume name for an
/// inline volume; `bound_volume` gives the PersistentVolume a claim of the pod's namespace is
/// bound to.
pub fn pod_volume_for(
    pod: &Pod,
    spec_name: &str,
    bound_volume: &dyn Fn(&str) -> Option<String>,
) -> Option<(String, Option<PvcReference>)> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let volumes = pod.spec.as_ref()?.volumes.as_deref().unwrap_or_default();
    for v in volumes {
        if v.csi.is_some() && v.name == spec_name {
            return Some((v.name.clone(), None));
        }
        if let Some((claim, _)) = crate::volume::csi::resolve::claim_of(pod, v) {
            if bound_volume(&claim).as_deref() == Some(spec_name) {
                return Some((
                    v.name.clone(),
                    Some(PvcReference {
                        name: claim,
                        namespace: namespace.clone(),
                    }),
                ));
            }
        }
    }
    None
}

/// One reading of one pod volume.
#[derive(Debug, Clone, PartialEq)]
struct Reading {
    name: String,
    pvc: Option<PvcReference>,
    time: Time,
    usage: DriverUsage,
    taken: Instant,
}

/// The last readings of the node's CSI volumes.
pub struct CsiVolumeStats {
    period: Duration,
    health: bool,
    /// Pod UID → (spec name → reading).
    readings: Mutex<HashMap<String, BTreeMap<String, Reading>>>,
}

impl std::fmt::Debug for CsiVolumeStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsiVolumeStats")
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

/// What a refresh pass needs.
pub struct CsiStatsSources {
    pub root_dir: PathBuf,
    pub mountinfo: PathBuf,
    pub pods: PodsFn,
    pub drivers: CsiDrivers,
    pub objects: Arc<dyn ObjectSource>,
    pub clock: crate::clock::Clock,
}

impl CsiVolumeStats {
    /// `period`: `volumeStatsAggPeriod`; `health`: the `CSIVolumeHealth` gate.
    pub fn new(period: Duration, health: bool) -> CsiVolumeStats {
        CsiVolumeStats {
            period,
            health,
            readings: Mutex::new(HashMap::new()),
        }
    }

    /// The pod's CSI volume entries for the Summary, by volume name.
    pub fn pod_volumes(&self, uid: &str) -> Vec<VolumeStats> {
        let readings = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<VolumeStats> = readings
            .get(uid)
            .into_iter()
            .flat_map(|r| r.values())
            .map(|r| VolumeStats {
                fs: FsStats {
                    time: r.time.clone(),
                    available_bytes: r.usage.available_bytes,
                    capacity_bytes: r.usage.capacity_bytes,
                    used_bytes: r.usage.used_bytes,
                    inodes_free: r.usage.inodes_free,
                    inodes: r.usage.inodes,
                    inodes_used: r.usage.inodes_used,
                },
                name: r.name.clone(),
                pvc_ref: r.pvc.clone(),
                volume_health_stats: if self.health {
                    r.usage
                        .abnormal
                        .map(|abnormal| VolumeHealthStats { abnormal })
                } else {
                    None
                },
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Whether the volume needs asking now: never asked, or asked a period ago.
    fn due(&self, uid: &str, spec_name: &str, now: Instant) -> bool {
        let readings = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        readings
            .get(uid)
            .and_then(|r| r.get(spec_name))
            .is_none_or(|r| now.saturating_duration_since(r.taken) >= self.period)
    }

    /// One pass: asks the drivers of the published volumes that are due, and forgets the
    /// readings of volumes no longer published.
    pub async fn refresh(&self, sources: &CsiStatsSources) {
        // No driver to ask: nothing to read, and no reason to scan the disk (most nodes).
        if sources.drivers.names().is_empty() {
            self.forget_unpublished(&[]);
            return;
        }
        let root = sources.root_dir.clone();
        let mountinfo = sources.mountinfo.clone();
        let listed = tokio::task::spawn_blocking(move || {
            crate::volume::csi::mounted_volumes(&root, &mountinfo)
        })
        .await;
        let published: Vec<MountedCsiVolume> = match listed {
            Ok(Ok(v)) => v.into_iter().filter(|v| v.mounted).collect(),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "stats: listing CSI volumes");
                return;
            }
            Err(_) => return,
        };
        self.forget_unpublished(&published);
        let pods: HashMap<String, Arc<Pod>> = (sources.pods)()
            .into_iter()
            .map(|p| (crate::podspec::pod_uid(&p).to_string(), p))
            .collect();
        for volume in published {
            let now = Instant::now();
            if !self.due(&volume.pod_uid, &volume.spec_name, now) {
                continue;
            }
            let Some(pod) = pods.get(&volume.pod_uid) else {
                continue;
            };
            let Ok(driver) = sources.drivers.get(&volume.driver) else {
                continue;
            };
            if !driver.capabilities.get_volume_stats {
                continue;
            }
            let Some((name, pvc)) = self.pod_volume(pod, &volume, sources).await else {
                continue;
            };
            let request = api::NodeGetVolumeStatsRequest {
                volume_id: volume.handle.clone(),
                volume_path: volume.target_path.display().to_string(),
                staging_target_path: volume
                    .staging_path
                    .as_deref()
                    .map(|p: &Path| p.display().to_string())
                    .unwrap_or_default(),
            };
            match driver.client.node_get_volume_stats(request).await {
                Ok(response) => {
                    let reading = Reading {
                        name,
                        pvc,
                        time: Time(sources.clock.now()),
                        usage: driver_usage(&response),
                        taken: now,
                    };
                    self.readings
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(volume.pod_uid.clone())
                        .or_default()
                        .insert(volume.spec_name.clone(), reading);
                }
                Err(e) => tracing::debug!(
                    driver = %volume.driver,
                    volume = %volume.handle,
                    error = %e,
                    "stats: NodeGetVolumeStats failed"
                ),
            }
        }
    }

    /// The pod volume `volume` serves (the claim's PersistentVolume read through `objects`).
    async fn pod_volume(
        &self,
        pod: &Pod,
        volume: &MountedCsiVolume,
        sources: &CsiStatsSources,
    ) -> Option<(String, Option<PvcReference>)> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let mut bound = HashMap::new();
        for v in pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or_default()
        {
            if let Some((claim, _)) = crate::volume::csi::resolve::claim_of(pod, v) {
                if let Ok(Some(pvc)) = sources
                    .objects
                    .persistent_volume_claim(&namespace, &claim)
                    .await
                {
                    if let Some(pv) = pvc.spec.and_then(|s| s.volume_name) {
                        bound.insert(claim, pv);
                    }
                }
            }
        }
        pod_volume_for(pod, &volume.spec_name, &|claim| bound.get(claim).cloned())
    }

    fn forget_unpublished(&self, published: &[MountedCsiVolume]) {
        let mut readings = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        readings.retain(|uid, by_spec| {
            by_spec.retain(|spec, _| {
                published
                    .iter()
                    .any(|p| &p.pod_uid == uid && &p.spec_name == spec)
            });
            !by_spec.is_empty()
        });
    }

    /// Refreshes every [`REFRESH_TICK`] until `cancel`.
    pub async fn run(
        self: Arc<Self>,
        sources: CsiStatsSources,
        cancel: tokio_util::sync::CancellationToken,
    ) {
        loop {
            self.refresh(&sources).await;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(REFRESH_TICK) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(
        unit: api::volume_usage::Unit,
        total: i64,
        available: i64,
        used: i64,
    ) -> api::VolumeUsage {
        api::VolumeUsage {
            available,
            total,
            used,
            unit: unit as i32,
        }
    }

    #[test]
    fn driver_answers_become_summary_numbers() {
        use api::volume_usage::Unit;
        let cases: Vec<(api::NodeGetVolumeStatsResponse, DriverUsage)> = vec![
            (
                api::NodeGetVolumeStatsResponse::default(),
                DriverUsage::default(),
            ),
            (
                api::NodeGetVolumeStatsResponse {
                    usage: vec![
                        usage(Unit::Bytes, 1 << 30, (1 << 30) - 4096, 4096),
                        usage(Unit::Inodes, 1000, 990, 10),
                    ],
                    volume_condition: None,
                },
                DriverUsage {
                    capacity_bytes: Some(1 << 30),
                    available_bytes: Some((1 << 30) - 4096),
                    used_bytes: Some(4096),
                    inodes: Some(1000),
                    inodes_free: Some(990),
                    inodes_used: Some(10),
                    abnormal: None,
                },
            ),
            // A negative number is left out; an unknown unit ignored; the condition kept.
            (
                api::NodeGetVolumeStatsResponse {
                    usage: vec![usage(Unit::Bytes, -1, 5, -7), usage(Unit::Unknown, 9, 9, 9)],
                    volume_condition: Some(api::VolumeCondition {
                        abnormal: true,
                        message: "disk gone".into(),
                    }),
                },
                DriverUsage {
                    available_bytes: Some(5),
                    abnormal: Some(true),
                    ..DriverUsage::default()
                },
            ),
        ];
        for (response, want) in cases {
            assert_eq!(driver_usage(&response), want, "{response:?}");
        }
    }

    #[test]
    fn a_published_volume_is_reported_under_the_pods_volume_name() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-web"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "inline", "csi": {"driver": "d"}},
                {"name": "cache", "emptyDir": {}}
            ]}
        }))
        .unwrap();
        let bound = |claim: &str| match claim {
            "data-web" => Some("pv-1".to_string()),
            "web-scratch" => Some("pvc-42".to_string()),
            _ => None,
        };
        let pvc = |name: &str| {
            Some(PvcReference {
                name: name.into(),
                namespace: "shop".into(),
            })
        };
        let cases = [
            ("pv-1", Some(("data".to_string(), pvc("data-web")))),
            ("pvc-42", Some(("scratch".to_string(), pvc("web-scratch")))),
            ("inline", Some(("inline".to_string(), None))),
            ("cache", None),
            ("pv-other", None),
        ];
        for (spec_name, want) in cases {
            assert_eq!(pod_volume_for(&pod, spec_name, &bound), want, "{spec_name}");
        }
    }

    #[test]
    fn health_is_reported_only_with_the_gate() {
        for (gate, want) in [
            (false, None),
            (true, Some(VolumeHealthStats { abnormal: true })),
        ] {
            let stats = CsiVolumeStats::new(Duration::from_secs(60), gate);
            stats
                .readings
                .lock()
                .unwrap()
                .entry("u".into())
                .or_default()
                .insert(
                    "pv".into(),
                    Reading {
                        name: "data".into(),
                        pvc: None,
                        time: Time("2026-01-01T00:00:00Z".parse().unwrap()),
                        usage: DriverUsage {
                            capacity_bytes: Some(7),
                            abnormal: Some(true),
                            ..DriverUsage::default()
                        },
                        taken: Instant::now(),
                    },
                );
            let got = stats.pod_volumes("u");
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].name, "data");
            assert_eq!(got[0].fs.capacity_bytes, Some(7));
            assert_eq!(got[0].volume_health_stats, want, "gate {gate}");
            assert!(stats.pod_volumes("other").is_empty());
        }
    }
}
