//! The Summary API (`GET /stats/summary`) in the kubelet's JSON shape:
//! `k8s.io/kubelet/pkg/apis/stats/v1alpha1` (`Summary`, `NodeStats`, `PodStats`, ...),
//! including the PSI fields (`cpu.psi`, `memory.psi`, `io`) the kubelet added in v1.34.
//!
//! Field names and optionality follow the Go types: `omitempty` pointers are `Option`s that are
//! left out when `None`; timestamps are `metav1.Time` (RFC 3339, whole seconds, UTC).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// The kubelet reports the node's boot time here.
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// System-wide task limits (`RlimitStats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlimitStats {
    pub time: Time,
    /// min(`kernel.pid_max`, `kernel.threads-max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<i64>,
    /// Tasks (threads) that exist now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curproc: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

/// The names the kubelet gives its system containers.
pub const SYSTEM_CONTAINER_PODS: &str = "pods";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: Time,
    pub containers: Vec<ContainerStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(default, rename = "volume", skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    #[serde(
        default,
        rename = "ephemeral-storage",
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(
        default,
        rename = "process_stats",
        skip_serializing_if = "Option::is_none"
    )]
    pub process_stats: Option<ProcessStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkStats {
    pub time: Time,
    #[serde(flatten)]
    pub default_interface: InterfaceStats,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: Time,
    /// CPU use averaged over the window between two samples, in nanocores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// Cumulative CPU time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: Time,
    /// Limit − working set, where there is a limit (the node: capacity − working set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// `some` and `full` are plain structs in the Go type, so both are always present.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PsiStats {
    #[serde(default)]
    pub some: PsiData,
    #[serde(default)]
    pub full: PsiData,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PsiData {
    /// Cumulative stall time as the kernel prints it (microseconds).
    pub total: u64,
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwapStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_usage_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The claim a persistent (or generic ephemeral) volume came through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
    /// The driver's volume condition (with the `CSIVolumeHealth` gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_health_stats: Option<VolumeHealthStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PvcReference {
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeHealthStats {
    pub abnormal: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

impl FsStats {
    pub fn empty(time: Time) -> FsStats {
        FsStats {
            time,
            available_bytes: None,
            capacity_bytes: None,
            used_bytes: None,
            inodes_free: None,
            inodes: None,
            inodes_used: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Time {
        Time("2026-01-02T03:04:05.678Z".parse().unwrap())
    }

    #[test]
    fn serializes_with_the_kubelets_names_and_omits_what_is_unset() {
        let summary = Summary {
            node: NodeStats {
                node_name: "n1".into(),
                system_containers: vec![],
                start_time: t(),
                cpu: Some(CpuStats {
                    time: t(),
                    usage_nano_cores: None,
                    usage_core_nano_seconds: Some(5),
                    psi: Some(PsiStats {
                        some: PsiData {
                            total: 1,
                            avg10: 2.1,
                            avg60: 0.0,
                            avg300: 0.0,
                        },
                        full: PsiData::default(),
                    }),
                }),
                memory: None,
                io: Some(IoStats {
                    time: t(),
                    psi: None,
                }),
                network: None,
                fs: None,
                runtime: Some(RuntimeStats {
                    image_fs: Some(FsStats {
                        used_bytes: Some(3),
                        ..FsStats::empty(t())
                    }),
                    container_fs: None,
                }),
                rlimit: Some(RlimitStats {
                    time: t(),
                    maxpid: Some(32768),
                    curproc: Some(100),
                }),
                swap: None,
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "p".into(),
                    namespace: "default".into(),
                    uid: "u".into(),
                },
                start_time: t(),
                containers: vec![ContainerStats {
                    name: "c".into(),
                    start_time: t(),
                    cpu: None,
                    memory: Some(MemoryStats {
                        time: t(),
                        available_bytes: None,
                        usage_bytes: Some(10),
                        working_set_bytes: Some(8),
                        rss_bytes: Some(6),
                        page_faults: Some(1),
                        major_page_faults: Some(0),
                        psi: None,
                    }),
                    io: None,
                    rootfs: None,
                    logs: None,
                    swap: None,
                }],
                cpu: None,
                memory: None,
                io: None,
                network: None,
                volume_stats: vec![VolumeStats {
                    fs: FsStats {
                        used_bytes: Some(4),
                        ..FsStats::empty(t())
                    },
                    name: "data".into(),
                    pvc_ref: Some(PvcReference {
                        name: "data-web".into(),
                        namespace: "shop".into(),
                    }),
                    volume_health_stats: None,
                }],
                ephemeral_storage: Some(FsStats {
                    used_bytes: Some(7),
                    ..FsStats::empty(t())
                }),
                process_stats: Some(ProcessStats {
                    process_count: Some(2),
                }),
                swap: None,
            }],
        };
        let json = serde_json::to_value(&summary).unwrap();
        let want = serde_json::json!({
            "node": {
                "nodeName": "n1",
                "startTime": "2026-01-02T03:04:05Z",
                "cpu": {
                    "time": "2026-01-02T03:04:05Z",
                    "usageCoreNanoSeconds": 5,
                    "psi": {
                        "some": {"total": 1, "avg10": 2.1, "avg60": 0.0, "avg300": 0.0},
                        "full": {"total": 0, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0}
                    }
                },
                "io": {"time": "2026-01-02T03:04:05Z"},
                "runtime": {"imageFs": {"time": "2026-01-02T03:04:05Z", "usedBytes": 3}},
                "rlimit": {"time": "2026-01-02T03:04:05Z", "maxpid": 32768, "curproc": 100}
            },
            "pods": [{
                "podRef": {"name": "p", "namespace": "default", "uid": "u"},
                "startTime": "2026-01-02T03:04:05Z",
                "containers": [{
                    "name": "c",
                    "startTime": "2026-01-02T03:04:05Z",
                    "memory": {
                        "time": "2026-01-02T03:04:05Z",
                        "usageBytes": 10,
                        "workingSetBytes": 8,
                        "rssBytes": 6,
                        "pageFaults": 1,
                        "majorPageFaults": 0
                    }
                }],
                "volume": [{"time": "2026-01-02T03:04:05Z", "usedBytes": 4, "name": "data", "pvcRef": {"name": "data-web", "namespace": "shop"}}],
                "ephemeral-storage": {"time": "2026-01-02T03:04:05Z", "usedBytes": 7},
                "process_stats": {"process_count": 2}
            }]
        });
        assert_eq!(json, want);
        // and it reads back (timestamps at the second, as metav1.Time keeps them)
        let back: Summary = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
    }
}
