//! Pod cgroups on the real node: nodelet creates `kubepods` with node allocatable, the QoS tiers
//! with their shares, and `[<qos>/]pod<uid>` with the pod's effective limits and the pid limit
//! before the sandbox; containerd places the sandbox and containers below it; the cgroup goes
//! with the pod and the tier shares follow.
//!
//! The test runs with its own `cgroupRoot`, so the tiers it checks are its own: other tests
//! running beside it share `/kubepods` (and update its tiers for their pods).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use nodelet::cgroup::fs::CgroupfsManager;
use nodelet::cgroup::manager::{CgroupManager, Version};
use nodelet_testkit::pod::all_running;
use nodelet_testkit::tail;

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

/// cpu.shares (v1) or cpu.weight (v2) of a cgroup, as the shares nodelet computed.
fn shares(version: Version, relative: &str) -> String {
    let cpu = cgroup_dir(version, "cpu", relative);
    match version {
        Version::V1 => read(&cpu, "cpu.shares"),
        Version::V2 => read(&cpu, "cpu.weight"),
    }
}

fn expected_shares(version: Version, shares: u64) -> String {
    match version {
        Version::V1 => shares.to_string(),
        Version::V2 => nodelet::cgroup::shares_to_weight(shares).to_string(),
    }
}

/// The running containers' IDs, by name.
fn container_ids(p: &k8s_openapi::api::core::v1::Pod) -> Vec<(String, String)> {
    let mut ids: Vec<(String, String)> = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c.name.clone(), c.container_id.clone().unwrap_or_default()))
        .collect();
    ids.sort();
    ids
}

fn uid(p: &k8s_openapi::api::core::v1::Pod) -> String {
    p.metadata.uid.clone().expect("uid")
}

/// This test's `cgroupRoot`, made in every hierarchy nodelet writes (the kubelet requires it
/// to exist) and removed, with everything left below it, when the test ends.
struct CgroupRoot {
    name: String,
    manager: CgroupfsManager,
}

impl CgroupRoot {
    fn create() -> CgroupRoot {
        let name = format!("nodelet-it-cgroups-{}", std::process::id());
        let manager = CgroupfsManager::detect(Path::new(MOUNT));
        for controller in ["cpu", "memory", "pids"] {
            let dir = cgroup_dir(manager.version(), controller, &name);
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        CgroupRoot { name, manager }
    }
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        let _ = self.manager.remove_path(&self.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_cgroups_carry_the_effective_limits_and_go_with_the_pod() {
    let version = Version::detect(Path::new(MOUNT));
    // Dropped after the nodelet below (declared first): the pods are gone by then.
    let root = CgroupRoot::create();
    // The cgroup of a pod that went away while nodelet was down: no sandbox carries its UID.
    let orphan = format!(
        "{}/kubepods/burstable/podorphan-{}",
        root.name,
        std::process::id()
    );
    for controller in ["cpu", "memory", "pids"] {
        std::fs::create_dir_all(cgroup_dir(version, controller, &orphan)).unwrap();
    }
    let orphan_made = std::time::Instant::now();
    let mut n = Nodelet::start_with(
        "pod-cgroups",
        &format!(
            "cgroupRoot: /{}\npodPidsLimit: 256\nkubeReserved: {{cpu: 100m, memory: 100Mi, pid: '100'}}\n",
            root.name
        ),
    );
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
    let kubepods = format!("{}/kubepods", root.name);
    let g_path = format!("{kubepods}/pod{}", uid(&g));
    let b_path = format!("{kubepods}/burstable/pod{}", uid(&b));

    assert_eq!(
        limits(version, &g_path),
        (64 << 20, Some(50_000)),
        "{g_path}"
    );
    assert_eq!(limits(version, &b_path).0, 96 << 20, "{b_path}");
    assert_eq!(limits(version, &b_path).1, None, "{b_path}: no cpu quota");
    // podPidsLimit on every pod cgroup.
    for path in [&g_path, &b_path] {
        assert_eq!(
            read(&cgroup_dir(version, "pids", path), "pids.max"),
            "256",
            "{path}"
        );
    }
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

    // Node allocatable on kubepods: the machine's capacity less kubeReserved.
    let node =
        nodelet::stats::machine::NodeInfo::detect("probe", None, Path::new("/"), Path::new("/"));
    assert_eq!(
        shares(version, &kubepods),
        expected_shares(
            version,
            nodelet::cgroup::milli_cpu_to_shares(node.cpu_capacity_milli() - 100)
        ),
        "{kubepods}"
    );
    let memory = i64::try_from(node.memory_capacity()).unwrap() - (100 << 20);
    let memory_file = match version {
        Version::V1 => "memory.limit_in_bytes",
        Version::V2 => "memory.max",
    };
    let limit: i64 = read(&cgroup_dir(version, "memory", &kubepods), memory_file)
        .parse()
        .unwrap();
    // The kernel keeps memory limits in whole pages.
    assert_eq!(limit, memory / 4096 * 4096, "{kubepods}/{memory_file}");
    let pids = nodelet::cgroup::allocatable::pid_capacity(Path::new("/proc")).unwrap() - 100;
    assert_eq!(
        read(&cgroup_dir(version, "pids", &kubepods), "pids.max"),
        pids.to_string()
    );
    // The tiers: Burstable shares are the Burstable pods' cpu requests (100m → 102), BestEffort
    // the minimum.
    assert_eq!(
        shares(version, &format!("{kubepods}/burstable")),
        expected_shares(version, 102)
    );
    assert_eq!(
        shares(version, &format!("{kubepods}/besteffort")),
        expected_shares(version, 2)
    );

    // A restart sweeps the orphan once it is older than a pod being started could be, and
    // never the cgroups of the pods that still run (they are adopted, same containers).
    let before: Vec<_> = [&g, &b].iter().map(|p| container_ids(p)).collect();
    let min_age = nodelet::cgroup::node::ORPHAN_MIN_AGE + Duration::from_secs(1);
    tokio::time::sleep(min_age.saturating_sub(orphan_made.elapsed())).await;
    assert!(
        cgroup_dir(version, "cpu", &orphan).exists(),
        "the first start kept the young cgroup"
    );
    n.restart();
    let swept = std::time::Instant::now() + T;
    while n.logs().matches("orphaned pod cgroups swept").count() < 2 {
        assert!(
            std::time::Instant::now() < swept,
            "no sweep after the restart\n{}",
            tail(&n.logs(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for controller in ["cpu", "memory", "pids"] {
        let dir = cgroup_dir(version, controller, &orphan);
        assert!(
            !dir.exists(),
            "{} not swept\n{}",
            dir.display(),
            tail(&n.logs(), 30)
        );
    }
    for path in [&g_path, &b_path] {
        assert!(
            cgroup_dir(version, "cpu", path).exists(),
            "{path} of a running pod was swept"
        );
    }
    n.wait_pod("g", T, "g adopted", all_running).await;
    n.wait_pod("b", T, "b adopted", all_running).await;
    // The positive sign first: four pod syncs since both showed running (each pod is synced
    // again at least every syncFrequency, 10 s): a sync that restarts containers instead of
    // adopting them, or gets the tier wrong, has run by then.
    n.wait_more_syncs(4, T).await;
    let g = n.pod("g").await.expect("g listed");
    let b = n.pod("b").await.expect("b listed");
    let after: Vec<_> = [&g, &b].iter().map(|p| container_ids(p)).collect();
    assert_eq!(before, after, "the restart adopted the running containers");
    // The new nodelet started its tiers from no pods (Burstable shares 2) and counted the
    // adopted Burstable pod again on its first sync, before publishing its status.
    assert_eq!(
        shares(version, &format!("{kubepods}/burstable")),
        expected_shares(version, 102),
        "adopted pods are counted in their tier\n{}",
        tail(&n.logs(), 30)
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
    // With the Burstable pod gone, its tier is back to the minimum shares.
    assert_eq!(
        shares(version, &format!("{kubepods}/burstable")),
        expected_shares(version, 2),
        "{}",
        tail(&n.logs(), 30)
    );
}
