//! Pod cgroups on the real node: nodelet creates `/kubepods[/<qos>]/pod<uid>` with the pod's
//! effective limits before the sandbox, containerd places the sandbox and containers below it,
//! and the cgroup is gone once the pod is removed.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use nodelet::cgroup::fs::{PodCgroups, Version};

const T: Duration = Duration::from_secs(90);
const MOUNT: &str = "/sys/fs/cgroup";

/// The directory of `relative` for `controller` on this node's hierarchy.
fn cgroup_dir(version: Version, controller: &str, relative: &str) -> PathBuf {
    match version {
        Version::V1 => Path::new(MOUNT).join(controller).join(relative),
        Version::V2 => Path::new(MOUNT).join(relative),
    }
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

/// Reads (memory limit, cpu quota) of a cgroup as `(bytes, Some(microseconds per 100 ms))`.
fn limits(version: Version, relative: &str) -> (i64, Option<i64>) {
    let memory = cgroup_dir(version, "memory", relative);
    let cpu = cgroup_dir(version, "cpu", relative);
    match version {
        Version::V1 => {
            let quota: i64 = read(&cpu, "cpu.cfs_quota_us").parse().unwrap();
            (
                read(&memory, "memory.limit_in_bytes").parse().unwrap(),
                (quota > 0).then_some(quota),
            )
        }
        Version::V2 => {
            let max = read(&cpu, "cpu.max");
            let quota = max.split_whitespace().next().unwrap_or("max").parse().ok();
            (read(&memory, "memory.max").parse().unwrap(), quota)
        }
    }
}

fn uid(p: &k8s_openapi::api::core::v1::Pod) -> String {
    p.metadata.uid.clone().expect("uid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_cgroups_carry_the_effective_limits_and_go_with_the_pod() {
    let version = PodCgroups::detect(Path::new(MOUNT)).version();
    let n = Nodelet::start("pod-cgroups");
    // Guaranteed: one container, limits = requests → /kubepods/pod<uid>, quota and memory.
    n.write_manifest(
        "g.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: g\nspec:\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    resources:\n      limits: {{cpu: 500m, memory: 64Mi}}\n"
        ),
    );
    // Burstable: an init container needing more memory than the two app containers together →
    // the pod's memory limit is the init container's (max of init and the sum); cpu has no
    // limit on one container → no quota.
    n.write_manifest(
        "b.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: b\nspec:\n  initContainers:\n  - name: init\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"0\"]\n    resources:\n      limits: {{memory: 96Mi}}\n  containers:\n  - name: one\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve, --http, \"8080\"]\n    resources:\n      requests: {{cpu: 100m}}\n      limits: {{cpu: 200m, memory: 32Mi}}\n  - name: two\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve, --http, \"8081\"]\n    resources:\n      limits: {{memory: 32Mi}}\n"
        ),
    );
    let g = n.wait_pod("g", T, "g running", all_running).await;
    let b = n.wait_pod("b", T, "b running", all_running).await;
    let g_path = format!("kubepods/pod{}", uid(&g));
    let b_path = format!("kubepods/burstable/pod{}", uid(&b));

    assert_eq!(
        limits(version, &g_path),
        (64 << 20, Some(50_000)),
        "{g_path}"
    );
    assert_eq!(limits(version, &b_path).0, 96 << 20, "{b_path}");
    assert_eq!(limits(version, &b_path).1, None, "{b_path}: no cpu quota");
    // The runtime put the containers inside the pod cgroup.
    let procs = match version {
        Version::V1 => cgroup_dir(version, "memory", &g_path),
        Version::V2 => cgroup_dir(version, "", &g_path),
    };
    let children = std::fs::read_dir(&procs)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .count();
    assert!(
        children >= 2,
        "sandbox and container below {}",
        procs.display()
    );

    n.remove_manifest("g.yaml");
    n.remove_manifest("b.yaml");
    n.wait_gone("g", T).await;
    n.wait_gone("b", T).await;
    for path in [&g_path, &b_path] {
        for controller in ["cpu", "memory", "pids"] {
            let dir = cgroup_dir(version, controller, path);
            assert!(
                !dir.exists(),
                "{} left behind\n{}",
                dir.display(),
                tail(&n.logs(), 30)
            );
        }
    }
}
