//! Local-storage limits (the kubelet's `localStorageEviction`): a pod goes, whatever the node's
//! signals say, when an emptyDir holds more than its `sizeLimit`, when the pod uses more
//! ephemeral storage than its containers' `ephemeral-storage` limits add up to, or when one
//! container's logs (and, without a separate image filesystem, its writable layer) exceed its
//! own limit. Checked in that order, the first violation per pod, as the kubelet does; pure over
//! the pod and its Summary stats.

use k8s_openapi::api::core::v1::Pod;

use crate::podspec::resources::{pod_limits, pod_overhead};
use crate::quantity::Quantity;
use crate::stats::summary::{FsStats, PodStats};

use super::rank::binary_si;
use crate::config::eviction::Resource;

/// Why a pod is over its local-storage limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// emptyDir `volume` holds more than `limit` (its `sizeLimit`, as the kubelet prints it).
    EmptyDir { volume: String, limit: String },
    /// The pod's ephemeral storage exceeds the sum of its containers' limits.
    Pod { limit: String },
    /// Container `container` exceeds its own `ephemeral-storage` limit.
    Container { container: String, limit: String },
}

impl Violation {
    /// The kubelet's eviction message for it.
    pub fn message(&self) -> String {
        match self {
            Violation::EmptyDir { volume, limit } => {
                format!("Usage of EmptyDir volume {volume:?} exceeds the limit {limit:?}. ")
            }
            Violation::Pod { limit } => format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
            ),
            Violation::Container { container, limit } => {
                format!(
                    "Container {container} exceeded its local ephemeral storage limit {limit:?}. "
                )
            }
        }
    }

    /// The `eviction_signal` label of `evictions_total` (the kubelet's internal signal names).
    pub fn signal_label(&self) -> &'static str {
        match self {
            Violation::EmptyDir { .. } => "emptydirfs.limit",
            Violation::Pod { .. } => "ephemeralpodfs.limit",
            Violation::Container { .. } => "ephemeralcontainerfs.limit",
        }
    }
}

/// A quantity as Go's `Quantity.String()` prints it for the usual cases: a binary suffix in the
/// spec is printed canonically (`1024Ki` → `1Mi`), anything else as written.
fn quantity_text(written: &str, value: i64) -> String {
    if written.ends_with('i') {
        binary_si(value, Resource::EphemeralStorage)
    } else {
        written.to_string()
    }
}

fn used(fs: Option<&FsStats>) -> i64 {
    fs.and_then(|f| f.used_bytes)
        .map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX))
}

/// The pod's `ephemeral-storage` limit as the kubelet's `PodLimits` (overhead included) has
/// it: the containers' limits summed (or the pod-level one), plus `spec.overhead`'s
/// ephemeral storage — added only to a limit that is there, so overhead alone sets none.
pub fn pod_ephemeral_storage_limit(pod: &Pod) -> Option<i64> {
    let limit = pod_limits(pod).0.ephemeral_storage?;
    let overhead = pod_overhead(pod)
        .and_then(|o| o.ephemeral_storage)
        .unwrap_or(0);
    Some(limit.saturating_add(overhead))
}

/// The first local-storage violation of `pod` by its `stats`, if any. `dedicated_image_fs`:
/// container writable layers live on the image filesystem, so only logs count for a container.
pub fn violation(pod: &Pod, stats: &PodStats, dedicated_image_fs: bool) -> Option<Violation> {
    let spec = pod.spec.as_ref()?;
    for volume in spec.volumes.iter().flatten() {
        let Some(limit) = volume
            .empty_dir
            .as_ref()
            .and_then(|e| e.size_limit.as_ref())
        else {
            continue;
        };
        let Ok(size) = Quantity::parse(&limit.0) else {
            continue;
        };
        let Some(usage) = stats
            .volume_stats
            .iter()
            .find(|v| v.name == volume.name)
            .and_then(|v| v.fs.used_bytes)
        else {
            continue;
        };
        if size.value() > 0 && i64::try_from(usage).unwrap_or(i64::MAX) > size.value() {
            return Some(Violation::EmptyDir {
                volume: volume.name.clone(),
                limit: quantity_text(&limit.0, size.value()),
            });
        }
    }
    if let Some(limit) = pod_ephemeral_storage_limit(pod) {
        if used(stats.ephemeral_storage.as_ref()) > limit {
            return Some(Violation::Pod {
                limit: binary_si(limit, Resource::EphemeralStorage),
            });
        }
    }
    for container in &stats.containers {
        let Some(limit) = spec
            .containers
            .iter()
            .find(|c| c.name == container.name)
            .and_then(|c| {
                c.resources
                    .as_ref()?
                    .limits
                    .as_ref()?
                    .get("ephemeral-storage")
            })
        else {
            continue;
        };
        let Ok(limit_value) = Quantity::parse(&limit.0) else {
            continue;
        };
        if limit_value.value() == 0 {
            continue;
        }
        let mut usage = used(container.logs.as_ref());
        if !dedicated_image_fs {
            usage = usage.saturating_add(used(container.rootfs.as_ref()));
        }
        if usage > limit_value.value() {
            return Some(Violation::Container {
                container: container.name.clone(),
                limit: quantity_text(&limit.0, limit_value.value()),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{ContainerStats, VolumeStats};

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).expect("pod yaml")
    }

    fn fs(used: u64) -> FsStats {
        FsStats {
            used_bytes: Some(used),
            ..serde_json::from_str("{\"time\": \"2026-12-01T00:00:00Z\"}").unwrap()
        }
    }

    /// Stats of pod `p`: volumes (name, used), the pod's ephemeral use, containers (name, logs,
    /// rootfs).
    fn stats(
        volumes: &[(&str, u64)],
        pod_used: Option<u64>,
        containers: &[(&str, u64, u64)],
    ) -> PodStats {
        let mut s: PodStats = serde_json::from_value(serde_json::json!({
            "podRef": {"name": "p", "namespace": "default", "uid": "u"},
            "startTime": "2026-12-01T00:00:00Z",
            "containers": [],
        }))
        .unwrap();
        s.volume_stats = volumes
            .iter()
            .map(|(name, used)| VolumeStats {
                fs: fs(*used),
                name: name.to_string(),
                pvc_ref: None,
                volume_health_stats: None,
            })
            .collect();
        s.ephemeral_storage = pod_used.map(fs);
        s.containers = containers
            .iter()
            .map(|(name, logs, rootfs)| {
                let mut c: ContainerStats = serde_json::from_value(serde_json::json!({
                    "name": name, "startTime": "2026-12-01T00:00:00Z"
                }))
                .unwrap();
                c.logs = Some(fs(*logs));
                c.rootfs = Some(fs(*rootfs));
                c
            })
            .collect();
        s
    }

    const MI: u64 = 1 << 20;

    const POD: &str = "
metadata: {name: p, namespace: default, uid: u}
spec:
  volumes:
  - {name: cache, emptyDir: {sizeLimit: 1Mi}}
  - {name: scratch, emptyDir: {}}
  - {name: bigger, emptyDir: {sizeLimit: 2048Ki}}
  containers:
  - name: a
    image: x
    resources: {limits: {ephemeral-storage: 4Mi}}
  - name: b
    image: x
    resources: {limits: {ephemeral-storage: 2Mi}}
  - name: c
    image: x
";

    #[test]
    fn violations_in_the_kubelets_order_with_its_messages() {
        let p = pod(POD);
        // (volumes, pod ephemeral use, containers (name, logs, rootfs), dedicated imagefs) → message
        type Row<'a> = (
            Vec<(&'a str, u64)>,
            Option<u64>,
            Vec<(&'a str, u64, u64)>,
            bool,
            Option<&'a str>,
        );
        let table: Vec<Row> = vec![
            (vec![("cache", MI)], None, vec![], false, None),
            (
                vec![("cache", MI + 1)],
                None,
                vec![],
                false,
                Some("Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". "),
            ),
            // No sizeLimit: never a violation, however full.
            (vec![("scratch", 1 << 40)], None, vec![], false, None),
            // The limit as Go prints it: 2048Ki is 2Mi.
            (
                vec![("bigger", 3 * MI)],
                None,
                vec![],
                false,
                Some("Usage of EmptyDir volume \"bigger\" exceeds the limit \"2Mi\". "),
            ),
            // The emptyDir first, the pod total second.
            (
                vec![("cache", 2 * MI)],
                Some(100 * MI),
                vec![],
                false,
                Some("Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". "),
            ),
            (vec![], Some(6 * MI), vec![], false, None),
            (
                vec![],
                Some(6 * MI + 1),
                vec![],
                false,
                Some(
                    "Pod ephemeral local storage usage exceeds the total limit of containers 6Mi. ",
                ),
            ),
            // A container: logs + writable layer...
            (
                vec![],
                Some(3 * MI),
                vec![("b", MI, MI + 1)],
                false,
                Some("Container b exceeded its local ephemeral storage limit \"2Mi\". "),
            ),
            // ... only logs when the writable layers are on their own filesystem.
            (vec![], Some(3 * MI), vec![("b", MI, MI + 1)], true, None),
            // A container without a limit is not checked on its own.
            (vec![], Some(3 * MI), vec![("c", 5 * MI, 0)], false, None),
        ];
        for (volumes, pod_used, containers, dedicated, want) in table {
            let got = violation(&p, &stats(&volumes, pod_used, &containers), dedicated);
            assert_eq!(
                got.as_ref().map(Violation::message).as_deref(),
                want,
                "{volumes:?} {pod_used:?} {containers:?} dedicated={dedicated}"
            );
        }
    }

    #[test]
    fn overhead_counts_in_the_pod_limit_as_pod_limits_adds_it() {
        // (pod yaml, the pod's limit)
        let cases = [
            (POD.to_string(), Some(6 * MI as i64)),
            (
                format!("{POD}  overhead: {{ephemeral-storage: 1Mi, memory: 10Mi}}\n"),
                Some(7 * MI as i64),
            ),
            // Overhead alone sets no limit (it is added to non-zero limits only).
            (
                "metadata: {name: p}\nspec:\n  overhead: {ephemeral-storage: 1Mi}\n  containers:\n  - {name: a, image: x}\n".to_string(),
                None,
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(pod_ephemeral_storage_limit(&pod(&yaml)), want, "{yaml}");
        }
        let p = pod(&format!("{POD}  overhead: {{ephemeral-storage: 1Mi}}\n"));
        // 6Mi + 1 is within 7Mi; 7Mi + 1 is over it, named so in the message.
        assert_eq!(
            violation(&p, &stats(&[], Some(6 * MI + 1), &[]), false),
            None
        );
        assert_eq!(
            violation(&p, &stats(&[], Some(7 * MI + 1), &[]), false)
                .as_ref()
                .map(Violation::message)
                .as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 7Mi. ")
        );
    }

    #[test]
    fn a_pod_without_ephemeral_limits_has_no_pod_total() {
        let p = pod("metadata: {name: p}\nspec:\n  containers:\n  - {name: a, image: x}\n");
        assert_eq!(
            violation(&p, &stats(&[], Some(1 << 40), &[("a", 1 << 30, 0)]), false),
            None
        );
    }

    #[test]
    fn signal_labels() {
        let v = [
            Violation::EmptyDir {
                volume: "v".into(),
                limit: "1Mi".into(),
            },
            Violation::Pod {
                limit: "1Mi".into(),
            },
            Violation::Container {
                container: "c".into(),
                limit: "1Mi".into(),
            },
        ];
        let labels: Vec<_> = v.iter().map(Violation::signal_label).collect();
        assert_eq!(
            labels,
            [
                "emptydirfs.limit",
                "ephemeralpodfs.limit",
                "ephemeralcontainerfs.limit"
            ]
        );
    }
}
