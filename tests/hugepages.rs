//! Hugepages on the real containerd: a container's `hugepages-2Mi` limit reaches the runtime as
//! the kubelet sends it (a `hugepage_limits` entry per page size the node has, "2MB" with the
//! limit and 0 for the sizes it does not ask), and the pod cgroup gets its hugetlb limit where
//! the host has the hugetlb controller.
//!
//! The host needs no reserved hugepages (`HugePages_Total` may be 0): a limit can be set on
//! any size the kernel offers. It must offer 2 MiB pages (`/sys/kernel/mm/hugepages`).

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use nodelet::cri::StatsRuntime;
use nodelet_testkit::pod::all_running;

const T: Duration = Duration::from_secs(90);

/// Whether the host's cgroups have the hugetlb controller (v1: its hierarchy mounted; v2: in
/// the root's `cgroup.controllers`). containerd leaves hugepage limits out of the OCI spec
/// without it (`tolerate_missing_hugetlb_controller`).
fn hugetlb_controller() -> bool {
    Path::new("/sys/fs/cgroup/hugetlb").is_dir()
        || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "hugetlb"))
}

/// nodelet in this process on the real containerd (configuration, manifests and API port from
/// [`Nodelet::prepare_with`]), with the machine's facts read from this host except the number
/// of 2 MiB pages: this host reserves none (`HugePages_Total: 0`), so a pod asking for them is
/// rightly refused at admission (`OutOfhugepages-2Mi`, as by the kubelet). Told 8 pages, the
/// node admits it; the limits and the hugetlbfs need no reserved page.
async fn start_with_2mi_pages(n: &Nodelet) -> nodelet::agent::Nodelet {
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
    let mut machine = nodelet::stats::machine::MachineInfo::read(Path::new("/"), &cfg.root_dir);
    let sizes: Vec<u64> = machine.hugepages.iter().map(|(s, _)| *s).collect();
    assert!(
        sizes.contains(&(2 << 20)),
        "this host's kernel offers no 2 MiB hugepages (/sys/kernel/mm/hugepages: {sizes:?}); \
         the test needs them"
    );
    for (size, count) in &mut machine.hugepages {
        if *size == 2 << 20 {
            *count = 8;
        }
    }
    nodelet::agent::NodeletBuilder::new(cfg)
        .node_info(nodelet::stats::machine::NodeInfo {
            name: n.node.clone(),
            host_ips: vec!["127.0.0.1".into()],
            machine,
        })
        .start()
        .await
        .expect("nodelet starts on the test containerd")
}

/// Unmounts whatever is still mounted below the test's directory (the hugetlbfs emptyDirs:
/// the in-process nodelet is cancelled without tearing its pods down), even when the test
/// fails. Dropped before the [`Nodelet`], which then removes the sandboxes.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        common::unmount_below(&self.0);
    }
}

fn node_page_sizes() -> Vec<u64> {
    nodelet::stats::machine::read_hugepages(Path::new("/sys/kernel/mm/hugepages"))
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_containers_hugepage_limit_reaches_the_runtime_for_every_page_size() {
    let sizes = node_page_sizes();
    let n = Nodelet::prepare_with("hugepages", "");
    let agent = start_with_2mi_pages(&n).await;
    n.write_manifest(
        "huge.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: huge\nspec:\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    resources:\n      limits: {{hugepages-2Mi: 4Mi, memory: 64Mi, cpu: 100m}}\n      requests: {{hugepages-2Mi: 4Mi, memory: 64Mi, cpu: 100m}}\n  - name: none\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve, --http, \"8081\"]\n    resources:\n      limits: {{memory: 64Mi, cpu: 100m}}\n"
        ),
    );
    let pod = n.wait_pod("huge", T, "huge running", all_running).await;
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let id = |name: &str| {
        statuses
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.container_id.clone())
            .unwrap_or_else(|| panic!("no container id for {name}: {statuses:?}"))
            .trim_start_matches("containerd://")
            .to_string()
    };
    // Every node size, in the node's order: the asked limit for 2MB, 0 for the rest.
    let want = |two_mb: u64| -> Vec<(String, u64)> {
        sizes
            .iter()
            .map(|s| {
                let name = nodelet::podspec::hugepages::page_size_string(*s).unwrap();
                (name, if *s == 2 << 20 { two_mb } else { 0 })
            })
            .collect()
    };
    let rt = runtime();
    for (container, two_mb) in [("main", 4u64 << 20), ("none", 0)] {
        let info = rt
            .container_info(&id(container))
            .await
            .expect("verbose status");
        let info: serde_json::Value =
            serde_json::from_str(info.get("info").expect("containerd's info")).unwrap();
        // What nodelet sent: containerd keeps the CRI config in the verbose status.
        let sent: Vec<(String, u64)> = info["config"]["linux"]["resources"]["hugepage_limits"]
            .as_array()
            .unwrap_or_else(|| panic!("{container}: no hugepage_limits in the CRI config: {info}"))
            .iter()
            .map(|h| {
                (
                    h["page_size"].as_str().unwrap().to_string(),
                    h["limit"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(sent, want(two_mb), "{container}: CRI hugepage_limits");
        // What containerd put into the OCI spec: the same, where the host has the controller.
        let spec = &info["runtimeSpec"]["linux"]["resources"]["hugepageLimits"];
        if hugetlb_controller() {
            let got: Vec<(String, u64)> = spec
                .as_array()
                .unwrap_or_else(|| panic!("{container}: no hugepageLimits in the OCI spec: {info}"))
                .iter()
                .map(|h| {
                    (
                        h["pageSize"].as_str().unwrap().to_string(),
                        h["limit"].as_u64().unwrap_or(0),
                    )
                })
                .collect();
            assert_eq!(got, want(two_mb), "{container}: OCI hugepageLimits");
        } else {
            eprintln!(
                "host without the hugetlb cgroup controller: containerd leaves hugepageLimits out \
                 of the OCI spec ({spec})"
            );
        }
    }
    // The pod cgroup (Guaranteed: /kubepods/pod<uid>; hugepages do not count for QoS): the
    // pod's sum, 0 for the
    // other sizes.
    if hugetlb_controller() {
        let uid = pod.metadata.uid.clone().unwrap();
        let v1 = Path::new("/sys/fs/cgroup/hugetlb").is_dir();
        let dir = if v1 {
            format!("/sys/fs/cgroup/hugetlb/kubepods/pod{uid}")
        } else {
            format!("/sys/fs/cgroup/kubepods/pod{uid}")
        };
        for (name, limit) in want(4 << 20) {
            let file = if v1 {
                format!("{dir}/hugetlb.{name}.limit_in_bytes")
            } else {
                format!("{dir}/hugetlb.{name}.max")
            };
            let got = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{file}: {e}"))
                .trim()
                .to_string();
            assert_eq!(got, limit.to_string(), "{file}");
        }
    } else {
        eprintln!(
            "host without the hugetlb cgroup controller: pod cgroup hugetlb files not checked"
        );
    }
    agent.cancel_token().cancel();
}

/// `emptyDir.medium: HugePages`: a hugetlbfs of the one page size the pod requests, mounted
/// with the kubelet's `pagesize=` option; without a hugepages request the volume is refused with
/// the kubelet's error and the pod does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hugepages_empty_dir_is_a_hugetlbfs_of_the_requested_page_size() {
    let n = Nodelet::prepare_with("hugepages_dir", "");
    let _unmount = Unmount(n.dir.path().to_path_buf());
    n.write_manifest(
        "hp.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hp\nspec:\n  volumes:\n  - name: hp\n    emptyDir: {{medium: HugePages}}\n  - name: sized\n    emptyDir: {{medium: HugePages-2Mi}}\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    resources:\n      limits: {{hugepages-2Mi: 2Mi, memory: 64Mi, cpu: 100m}}\n    volumeMounts:\n    - {{name: hp, mountPath: /hp}}\n    - {{name: sized, mountPath: /sized}}\n"
        ),
    );
    n.write_manifest(
        "none.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: none\nspec:\n  volumes:\n  - name: hp\n    emptyDir: {{medium: HugePages}}\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    resources:\n      limits: {{memory: 64Mi, cpu: 100m}}\n    volumeMounts:\n    - {{name: hp, mountPath: /hp}}\n"
        ),
    );
    let agent = start_with_2mi_pages(&n).await;
    let pod = n.wait_pod("hp", T, "hp running", all_running).await;
    let uid = pod.metadata.uid.clone().expect("uid");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    for volume in ["hp", "sized"] {
        let suffix = format!("{uid}/volumes/kubernetes.io~empty-dir/{volume}");
        let line = mountinfo
            .lines()
            .find(|l| {
                l.split_whitespace()
                    .nth(4)
                    .is_some_and(|m| m.ends_with(&suffix))
            })
            .unwrap_or_else(|| panic!("no mount of {suffix}:\n{mountinfo}"));
        // The kernel shows the page size it took from `pagesize=2Mi` as `pagesize=2M`.
        assert!(
            line.contains(" - hugetlbfs ") && line.contains("pagesize=2M"),
            "{volume}: a hugetlbfs of 2 MiB pages: {line}"
        );
    }
    // In process there is no log to read: the refusal shows in the container's waiting
    // message.
    let want = "medium HugePages: hugePages storage requested, but there is no resource request for huge pages";
    let none = n
        .wait_pod("none", T, "none refused", |p| {
            serde_json::to_string(&p.status).is_ok_and(|s| s.contains(want))
        })
        .await;
    assert!(
        !all_running(&none),
        "a pod whose HugePages emptyDir cannot be set up must not run"
    );
    agent.cancel_token().cancel();
}
