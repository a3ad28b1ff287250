//! Growing a CSI volume's filesystem on the node after its claim was expanded (the kubelet's
//! `NodeExpander`, `pkg/volume/util/operationexecutor/node_expander.go`): when the
//! PersistentVolume is larger than the claim's `status.capacity` and the resize controller left
//! `status.allocatedResourceStatuses.storage` at `NodeResizePending` (or `NodeResizeInProgress`
//! after an interrupted attempt), the claim is marked `NodeResizeInProgress`,
//! `NodeExpandVolume` is called on the published volume, and the claim's capacity is set to the
//! new size with the resize status and the `FileSystemResizePending` condition removed;
//! `FileSystemResizeSuccessful` events go to the pod and the claim.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::{json, Value};

use crate::quantity::Quantity;

pub const NODE_RESIZE_PENDING: &str = "NodeResizePending";
pub const NODE_RESIZE_IN_PROGRESS: &str = "NodeResizeInProgress";
pub const FS_RESIZE_PENDING: &str = "FileSystemResizePending";

/// What to do about one published claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expansion {
    /// Nothing to grow, or not the node's turn (the resize controller has not asked).
    None,
    /// Grow to `new_size` bytes (`new_size_text`: the PV's quantity as written).
    Expand {
        new_size: i64,
        new_size_text: String,
    },
}

fn storage(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Option<(i64, String)> {
    let q = map?.get("storage")?;
    let v = Quantity::try_from(q).ok()?.value();
    Some((v, q.0.clone()))
}

/// The kubelet's `runPreCheck`, from the claim and its volume.
pub fn expansion(pvc: &PersistentVolumeClaim, pv: &PersistentVolume) -> Expansion {
    let Some((pv_size, pv_text)) = storage(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()))
    else {
        return Expansion::None;
    };
    let status = pvc.status.as_ref();
    let claim_size = storage(status.and_then(|s| s.capacity.as_ref())).map(|(v, _)| v);
    if claim_size.is_some_and(|c| c >= pv_size) {
        return Expansion::None;
    }
    let resize_status = status
        .and_then(|s| s.allocated_resource_statuses.as_ref())
        .and_then(|m| m.get("storage"))
        .map(String::as_str);
    match resize_status {
        Some(NODE_RESIZE_PENDING) | Some(NODE_RESIZE_IN_PROGRESS) => Expansion::Expand {
            new_size: pv_size,
            new_size_text: pv_text,
        },
        _ => Expansion::None,
    }
}

/// The status patch that marks node expansion under way (`MarkNodeExpansionInProgress`).
pub fn in_progress_patch() -> Value {
    json!({"status": {"allocatedResourceStatuses": {"storage": NODE_RESIZE_IN_PROGRESS}}})
}

/// The status patch after a successful `NodeExpandVolume` (`MarkFSResizeFinished`): the new
/// capacity, the resize status and the `FileSystemResizePending` condition gone (a merge patch
/// replaces the conditions list, so the others are kept).
pub fn finished_patch(pvc: &PersistentVolumeClaim, new_size_text: &str) -> Value {
    let conditions: Vec<Value> = pvc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_ != FS_RESIZE_PENDING)
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    json!({"status": {
        "capacity": {"storage": new_size_text},
        "allocatedResourceStatuses": {"storage": null},
        "conditions": conditions,
    }})
}

/// An event the expansion of a pod's volume asks for: (type is Warning, reason, message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpandEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl super::CsiVolumes {
    /// Grows the pod's published claims whose PersistentVolume was expanded (the kubelet's
    /// in-use expansion from its reconciler): for each claim of the pod published on this node
    /// through a driver with `EXPAND_VOLUME`, when [`expansion`] says so. Returns the events to
    /// record on the pod.
    pub async fn expand_pod(&self, pod: &k8s_openapi::api::core::v1::Pod) -> Vec<ExpandEvent> {
        let mut events = Vec::new();
        let uid = crate::podspec::pod_uid(pod).to_string();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for volume in &volumes {
            let Some((claim_name, _)) = super::resolve::claim_of(pod, volume) else {
                continue;
            };
            let Ok(Some(pvc)) = self
                .objects
                .persistent_volume_claim(&namespace, &claim_name)
                .await
            else {
                continue;
            };
            let Some(pv_name) = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()) else {
                continue;
            };
            let Ok(Some(pv)) = self.objects.persistent_volume(&pv_name).await else {
                continue;
            };
            let Expansion::Expand {
                new_size,
                new_size_text,
            } = expansion(&pvc, &pv)
            else {
                continue;
            };
            let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) else {
                continue;
            };
            let Ok(driver) = self.drivers.get(&csi.driver) else {
                continue;
            };
            if !driver.capabilities.expand_volume {
                continue;
            }
            let dir = super::paths::pod_volume_dir(&self.root_dir, &uid, &pv_name);
            // Only a volume published for this pod (its vol_data.json is there).
            if !matches!(super::paths::read_vol_data(&dir), Ok(Some(_))) {
                continue;
            }
            let target = dir.join(super::paths::POD_MOUNT);
            let staged = super::paths::global_dir(&self.root_dir, &csi.driver, &csi.volume_handle);
            let staging = matches!(super::paths::read_vol_data(&staged), Ok(Some(_)))
                .then(|| staged.join(super::paths::GLOBAL_MOUNT));
            let failed = |message: String| ExpandEvent {
                warning: true,
                reason: "FileSystemResizeFailed",
                message: format!(
                    "MountVolume.NodeExpandVolume failed for volume {pv_name:?} : {message}"
                ),
            };
            let in_progress = pvc
                .status
                .as_ref()
                .and_then(|s| s.allocated_resource_statuses.as_ref())
                .and_then(|m| m.get("storage"))
                .is_some_and(|s| s == NODE_RESIZE_IN_PROGRESS);
            if !in_progress {
                if let Err(e) = self
                    .objects
                    .patch_persistent_volume_claim_status(
                        &namespace,
                        &claim_name,
                        &in_progress_patch(),
                    )
                    .await
                {
                    events.push(failed(format!(
                        "failed to mark node expansion in progress: {e}"
                    )));
                    continue;
                }
            }
            let secret = csi
                .node_expand_secret_ref
                .as_ref()
                .map(|r| super::resolve::SecretRef {
                    namespace: r.namespace.clone().unwrap_or_default(),
                    name: r.name.clone().unwrap_or_default(),
                });
            let secrets = match self.secret_data("nodeExpandSecretRef", &secret).await {
                Ok(s) => s,
                Err(e) => {
                    events.push(failed(e));
                    continue;
                }
            };
            let access_mode = pv
                .spec
                .as_ref()
                .and_then(|s| s.access_modes.as_ref())
                .and_then(|m| m.first().cloned())
                .unwrap_or_default();
            let request = crate::csi::api::NodeExpandVolumeRequest {
                volume_id: csi.volume_handle.clone(),
                volume_path: target.to_string_lossy().into_owned(),
                capacity_range: Some(crate::csi::api::CapacityRange {
                    required_bytes: new_size,
                    limit_bytes: 0,
                }),
                staging_target_path: staging
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                volume_capability: Some(crate::csi::api::VolumeCapability {
                    access_type: Some(crate::csi::api::volume_capability::AccessType::Mount(
                        crate::csi::api::volume_capability::MountVolume {
                            fs_type: csi.fs_type.clone().unwrap_or_default(),
                            mount_flags: pv
                                .spec
                                .as_ref()
                                .and_then(|s| s.mount_options.clone())
                                .unwrap_or_default(),
                            volume_mount_group: String::new(),
                        },
                    )),
                    access_mode: Some(crate::csi::api::volume_capability::AccessMode {
                        mode: super::csi_access_mode(&access_mode) as i32,
                    }),
                }),
                secrets: secrets.into_iter().collect(),
            };
            if let Err(e) = driver.client.node_expand_volume(request).await {
                events.push(failed(e.to_string()));
                continue;
            }
            if let Err(e) = self
                .objects
                .patch_persistent_volume_claim_status(
                    &namespace,
                    &claim_name,
                    &finished_patch(&pvc, &new_size_text),
                )
                .await
            {
                events.push(failed(format!("update pvc status failed: {e}")));
                continue;
            }
            events.push(ExpandEvent {
                warning: false,
                reason: "FileSystemResizeSuccessful",
                message: format!(
                    "MountVolume.NodeExpandVolume succeeded for volume {pv_name:?} {}",
                    self.node_name
                ),
            });
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(status_capacity: Option<&str>, resize: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"volumeName": "pv-1", "resources": {"requests": {"storage": "2Gi"}}},
            "status": {
                "phase": "Bound",
                "capacity": status_capacity.map(|c| json!({"storage": c})),
                "allocatedResourceStatuses": resize.map(|r| json!({"storage": r})),
                "conditions": [
                    {"type": "FileSystemResizePending", "status": "True"},
                    {"type": "Other", "status": "True"}
                ]
            }
        }))
        .unwrap()
    }

    fn volume(capacity: &str) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": "pv-1"},
            "spec": {"capacity": {"storage": capacity}, "csi": {"driver": "d", "volumeHandle": "h"}}
        }))
        .unwrap()
    }

    #[test]
    fn node_expansion_follows_the_kubelets_precheck() {
        let grow = Expansion::Expand {
            new_size: 2 << 30,
            new_size_text: "2Gi".into(),
        };
        let cases = [
            // The controller grew the PV and asked the node.
            (Some("1Gi"), Some(NODE_RESIZE_PENDING), "2Gi", grow.clone()),
            // An attempt interrupted after marking it in progress.
            (
                Some("1Gi"),
                Some(NODE_RESIZE_IN_PROGRESS),
                "2Gi",
                grow.clone(),
            ),
            // Not asked (an old resize controller), or another resize state.
            (Some("1Gi"), None, "2Gi", Expansion::None),
            (
                Some("1Gi"),
                Some("ControllerResizeInProgress"),
                "2Gi",
                Expansion::None,
            ),
            (
                Some("1Gi"),
                Some("NodeResizeInfeasible"),
                "2Gi",
                Expansion::None,
            ),
            // Already that size.
            (
                Some("2Gi"),
                Some(NODE_RESIZE_PENDING),
                "2Gi",
                Expansion::None,
            ),
            (
                Some("3Gi"),
                Some(NODE_RESIZE_PENDING),
                "2Gi",
                Expansion::None,
            ),
            // No recorded size yet: grows.
            (None, Some(NODE_RESIZE_PENDING), "2Gi", grow.clone()),
        ];
        for (status, resize, pv, want) in cases {
            assert_eq!(
                expansion(&claim(status, resize), &volume(pv)),
                want,
                "{status:?} {resize:?} {pv}"
            );
        }
    }

    #[test]
    fn the_status_patches_mark_and_finish_the_resize() {
        assert_eq!(
            in_progress_patch(),
            json!({"status": {"allocatedResourceStatuses": {"storage": "NodeResizeInProgress"}}})
        );
        let finished = finished_patch(&claim(Some("1Gi"), Some(NODE_RESIZE_IN_PROGRESS)), "2Gi");
        assert_eq!(finished["status"]["capacity"]["storage"], "2Gi");
        assert_eq!(
            finished["status"]["allocatedResourceStatuses"]["storage"],
            Value::Null
        );
        let conditions = finished["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0]["type"], "Other");
    }
}
