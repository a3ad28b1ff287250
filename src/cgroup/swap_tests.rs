use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::podspec::qos::qos_class;
use crate::podspec::resources::test_support::{container, pod};

const MI: i64 = 1 << 20;
const GI: i64 = 1 << 30;

/// How the pod of a row is marked.
#[derive(Clone, Copy)]
enum Kind {
    Api,
    /// `kubernetes.io/config.source: file`.
    Static,
    /// `kubernetes.io/config.mirror`.
    Mirror,
    /// priority system-critical.
    Critical,
}

fn pod_of(kind: Kind, containers: &[(&str, &str)]) -> Pod {
    let mut p = pod(
        containers
            .iter()
            .enumerate()
            .map(|(i, (req, lim))| container(&format!("c{i}"), req, lim))
            .collect(),
        vec![],
    );
    let annotate = |p: &mut Pod, k: &str, v: &str| {
        p.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k.to_string(), v.to_string());
    };
    match kind {
        Kind::Api => annotate(&mut p, "kubernetes.io/config.source", "api"),
        Kind::Static => annotate(&mut p, "kubernetes.io/config.source", "file"),
        Kind::Mirror => {
            annotate(&mut p, "kubernetes.io/config.source", "api");
            annotate(&mut p, "kubernetes.io/config.mirror", "abc");
        }
        Kind::Critical => {
            annotate(&mut p, "kubernetes.io/config.source", "api");
            p.spec.as_mut().unwrap().priority = Some(2_000_000_000);
        }
    }
    p
}

fn node(behavior: SwapBehavior, cgroup_v2: bool, controller: bool) -> SwapNode {
    SwapNode {
        behavior,
        cgroup_v2,
        controller,
        memory_capacity: 8 * GI as u64,
        swap_capacity: 2 * GI as u64,
    }
}

use SwapBehavior::{LimitedSwap, NoSwap};

/// (name, how the pod is marked, its containers' (requests, limits), the node, what the first
/// container gets)
type Case<'a> = (
    &'a str,
    Kind,
    &'a [(&'a str, &'a str)],
    SwapNode,
    SwapSetting,
);
use SwapSetting::{MemorySwapLimit, SwapMax, Unset};

/// Every branch of `configureContainerSwapResources` / `GetContainerSwapBehavior` /
/// `calcSwapForBurstablePods`; the container under test is the pod's first.
#[test]
fn container_swap_table() {
    let burstable: &[(&str, &str)] = &[("memory=1Gi", "memory=2Gi")];
    let v2_limited = node(LimitedSwap, true, true);
    #[rustfmt::skip]
    let cases: &[Case] = &[
        // No swap controller: nothing, whatever the behaviour or hierarchy.
        ("no controller, v2", Kind::Api, burstable, node(LimitedSwap, true, false), Unset),
        ("no controller, v1", Kind::Api, burstable, node(NoSwap, false, false), Unset),
        // NoSwap: v2 swap.max 0; v1 memory+swap = the memory limit (0 without one).
        ("NoSwap v2 Burstable", Kind::Api, burstable, node(NoSwap, true, true), SwapMax(0)),
        ("NoSwap v2 BestEffort", Kind::Api, &[("", "")], node(NoSwap, true, true), SwapMax(0)),
        ("NoSwap v1 limit", Kind::Api, burstable, node(NoSwap, false, true), MemorySwapLimit(2 * GI)),
        ("NoSwap v1 no limit", Kind::Api, &[("memory=1Gi", "")], node(NoSwap, false, true), MemorySwapLimit(0)),
        // LimitedSwap on cgroup v1 is NoSwap.
        ("LimitedSwap v1", Kind::Api, burstable, node(LimitedSwap, false, true), MemorySwapLimit(2 * GI)),
        // LimitedSwap on v2: request / memory × swap = 1Gi / 8Gi × 2Gi.
        ("Burstable request < limit", Kind::Api, burstable, v2_limited, SwapMax(256 * MI)),
        ("Burstable request, no limit", Kind::Api, &[("memory=1Gi", "")], v2_limited, SwapMax(256 * MI)),
        ("Burstable, request = limit (cpu differs)", Kind::Api, &[("cpu=100m,memory=1Gi", "memory=1Gi")], v2_limited, SwapMax(0)),
        ("Burstable, container names no memory", Kind::Api, &[("cpu=100m", ""), ("memory=1Gi", "")], v2_limited, SwapMax(0)),
        ("Burstable, the other container", Kind::Api, &[("memory=1Gi", ""), ("cpu=100m", "")], v2_limited, SwapMax(256 * MI)),
        ("Guaranteed", Kind::Api, &[("cpu=1,memory=1Gi", "cpu=1,memory=1Gi")], v2_limited, SwapMax(0)),
        ("BestEffort", Kind::Api, &[("", "")], v2_limited, SwapMax(0)),
        // Critical pods never swap.
        ("static pod", Kind::Static, burstable, v2_limited, SwapMax(0)),
        ("mirror pod", Kind::Mirror, burstable, v2_limited, SwapMax(0)),
        ("system-critical priority", Kind::Critical, burstable, v2_limited, SwapMax(0)),
        // calcSwapForBurstablePods' errors disallow swap.
        ("node memory 0", Kind::Api, burstable, SwapNode { memory_capacity: 0, ..v2_limited }, SwapMax(0)),
        ("request above node memory", Kind::Api, &[("memory=9Gi", "memory=10Gi")], v2_limited, SwapMax(0)),
        ("swap off", Kind::Api, burstable, SwapNode { swap_capacity: 0, ..v2_limited }, SwapMax(0)),
    ];
    for (name, kind, containers, node, want) in cases {
        let p = pod_of(*kind, containers);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let limit = container_limits(c).memory.unwrap_or(0);
        let got = container_swap(&p, c, qos_class(&p), limit, node);
        assert_eq!(got, *want, "{name}");
    }
}

/// The kubelet's float64 arithmetic, truncated toward zero.
#[test]
fn burstable_swap_limit_table() {
    let cases: &[(i64, u64, u64, Option<i64>)] = &[
        (GI, 8 << 30, 2 << 30, Some(256 * MI)),
        (2, 3, 10, Some(6)),
        (1, 3, 2, Some(0)),
        (0, 3, 2, Some(0)),
        (3, 3, 7, Some(7)),
        (4, 3, 7, None),
        (1, 0, 7, None),
        // 256Mi of a 3 GiB guest's 3_140_000_000-byte MemTotal and 512Mi of swap.
        (256 * MI, 3_140_000_000, 512 << 20, Some(45_896_556)),
    ];
    for (request, memory, swap, want) in cases {
        assert_eq!(
            burstable_swap_limit(*request, *memory, *swap),
            *want,
            "{request} of {memory} × {swap}"
        );
    }
}

#[test]
fn controller_file_table() {
    let mount = Path::new("/sys/fs/cgroup");
    let cases: &[(bool, &str, Option<&str>)] = &[
        (
            false,
            "",
            Some("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"),
        ),
        (
            true,
            "0::/system.slice/nodelet.service\n",
            Some("/sys/fs/cgroup/system.slice/nodelet.service/memory.swap.max"),
        ),
        (true, "0::/\n", Some("/sys/fs/cgroup/memory.swap.max")),
        (
            true,
            "12:memory:/x\n0::/user.slice\n",
            Some("/sys/fs/cgroup/user.slice/memory.swap.max"),
        ),
        (true, "12:memory:/x\n", None),
    ];
    for (v2, text, want) in cases {
        assert_eq!(
            controller_file(mount, *v2, text),
            want.map(PathBuf::from),
            "v2={v2} {text:?}"
        );
    }
}

#[test]
fn controller_available_reads_own_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    let (mount, proc) = (dir.path().join("cg"), dir.path().join("proc"));
    std::fs::create_dir_all(proc.join("self")).unwrap();
    std::fs::create_dir_all(mount.join("a.slice")).unwrap();
    std::fs::write(proc.join("self/cgroup"), "0::/a.slice\n").unwrap();
    assert!(!controller_available(&mount, &proc, true));
    std::fs::write(mount.join("a.slice/memory.swap.max"), "max\n").unwrap();
    assert!(controller_available(&mount, &proc, true));
    assert!(!controller_available(&mount, &proc, false));
}
