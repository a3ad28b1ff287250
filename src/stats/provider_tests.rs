//! The provider end to end on a fake cgroup v2 tree (systemd driver layout), a fake `/proc`,
//! the in-memory runtime and a paused clock: every number in the summary is checked against
//! the files written here.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, Pod, PodSpec, PodStatus, ResourceRequirements,
    SecretVolumeSource, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::cgroup::{CgroupReader, CgroupVersion};
use super::node::test_support::{write, MEMINFO};
use super::provider::{Scope, StatsSettings, SummaryProvider};
use super::summary::Summary;
use crate::cgroup::Driver;
use crate::clock::Clock;
use crate::cri::fake::FakeRuntime;
use crate::cri::{api, labels, Runtime, StatsRuntime};

const NODE: &str = "n1";
const UID: &str = "1234-5678";
const SLICE: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice";
const START: &str = "2026-01-01T00:00:00Z";

/// The verbose info, image filesystem and writable layers a containerd with the systemd
/// cgroup driver would give.
struct FakeStats {
    image_mount: String,
    /// Verbose status calls made.
    info_calls: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl StatsRuntime for FakeStats {
    async fn container_info(&self, id: &str) -> crate::cri::Result<HashMap<String, String>> {
        self.info_calls
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let info = serde_json::json!({
            "pid": 42,
            "runtimeSpec": {"linux": {"cgroupsPath": format!(
                "kubepods-burstable-pod1234_5678.slice:cri-containerd:{id}"
            )}}
        });
        Ok(HashMap::from([("info".to_string(), info.to_string())]))
    }

    async fn image_fs_info(&self) -> crate::cri::Result<api::ImageFsInfoResponse> {
        Ok(api::ImageFsInfoResponse {
            image_filesystems: vec![api::FilesystemUsage {
                timestamp: 1_767_225_600_000_000_000,
                fs_id: Some(api::FilesystemIdentifier {
                    mountpoint: self.image_mount.clone(),
                }),
                used_bytes: Some(api::UInt64Value { value: 7_000_000 }),
                inodes_used: Some(api::UInt64Value { value: 300 }),
            }],
            container_filesystems: vec![],
        })
    }

    async fn list_container_stats(
        &self,
        _: Option<api::ContainerStatsFilter>,
    ) -> crate::cri::Result<Vec<api::ContainerStats>> {
        Ok(vec![api::ContainerStats {
            attributes: Some(api::ContainerAttributes {
                id: "container-2".into(),
                ..Default::default()
            }),
            writable_layer: Some(api::FilesystemUsage {
                fs_id: Some(api::FilesystemIdentifier {
                    mountpoint: self.image_mount.clone(),
                }),
                used_bytes: Some(api::UInt64Value { value: 4096 }),
                inodes_used: Some(api::UInt64Value { value: 3 }),
                ..Default::default()
            }),
            ..Default::default()
        }])
    }
}

fn pod() -> Pod {
    let container = |name: &str| Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "cpu".to_string(),
                Quantity("100m".into()),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some("web-n1".into()),
            namespace: Some("default".into()),
            uid: Some(UID.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container("app"), container("sidecar")],
            volumes: Some(vec![
                Volume {
                    name: "cache".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
                Volume {
                    name: "creds".into(),
                    secret: Some(SecretVolumeSource::default()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        status: Some(PodStatus {
            start_time: Some(Time("2026-01-01T00:00:00Z".parse().unwrap())),
            ..Default::default()
        }),
    }
}

fn labels_for(container: Option<&str>) -> HashMap<String, String> {
    let mut l = HashMap::from([
        (labels::POD_UID.to_string(), UID.to_string()),
        (labels::POD_NAME.to_string(), "web-n1".to_string()),
        (labels::POD_NAMESPACE.to_string(), "default".to_string()),
        (labels::NODE_NAME.to_string(), NODE.to_string()),
    ]);
    if let Some(c) = container {
        l.insert(labels::CONTAINER_NAME.to_string(), c.to_string());
    }
    l
}

/// A sandbox and two running containers (`container-2` app, `container-3` sidecar).
async fn runtime(clock: Clock) -> Arc<FakeRuntime> {
    let rt = Arc::new(FakeRuntime::new(clock));
    rt.add_image("busybox");
    let sandbox_config = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "web-n1".into(),
            namespace: "default".into(),
            uid: UID.into(),
            attempt: 0,
        }),
        labels: labels_for(None),
        ..Default::default()
    };
    let sandbox = rt
        .run_pod_sandbox(sandbox_config.clone(), "")
        .await
        .unwrap();
    for name in ["app", "sidecar"] {
        let id = rt
            .create_container(
                &sandbox,
                api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: name.into(),
                        attempt: 0,
                    }),
                    image: Some(api::ImageSpec {
                        image: "busybox".into(),
                        ..Default::default()
                    }),
                    labels: labels_for(Some(name)),
                    ..Default::default()
                },
                sandbox_config.clone(),
            )
            .await
            .unwrap();
        rt.start_container(&id).await.unwrap();
    }
    assert_eq!(rt.container_ids("app"), vec!["container-2".to_string()]);
    assert_eq!(rt.container_ids("sidecar"), vec!["container-3".to_string()]);
    rt
}

const PSI_FULL: &str = "some avg10=1.25 avg60=0.50 avg300=0.10 total=1000\n\
                        full avg10=0.75 avg60=0.25 avg300=0.05 total=600\n";

fn cpu_stat(usage_usec: u64) -> String {
    format!("usage_usec {usage_usec}\nuser_usec {usage_usec}\nsystem_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
}

/// The node's files: `/proc` and the cgroup tree.
fn write_tree(proc: &Path, cg: &Path, cpu_usec: [u64; 5]) {
    write(proc, "meminfo", MEMINFO);
    write(proc, "loadavg", "0.10 0.20 0.30 2/345 999\n");
    write(proc, "uptime", "1000.00 1500.00\n");
    write(proc, "sys/kernel/pid_max", "4194304\n");
    write(proc, "sys/kernel/threads-max", "31000\n");
    // Before Linux 5.13 the system cpu pressure has no full line.
    write(
        proc,
        "pressure/cpu",
        "some avg10=5.00 avg60=4.00 avg300=3.00 total=123\n",
    );
    write(proc, "pressure/memory", PSI_FULL);
    write(proc, "pressure/io", PSI_FULL);

    // The root: no memory.current, usage = anon + file.
    write(cg, "cpu.stat", &cpu_stat(cpu_usec[0]));
    write(
        cg,
        "memory.stat",
        "anon 1073741824\nfile 536870912\ninactive_file 268435456\npgfault 10\npgmajfault 1\n",
    );
    write(cg, "kubepods.slice/cpu.stat", &cpu_stat(cpu_usec[1]));
    write(cg, "kubepods.slice/memory.current", "209715200\n");
    write(cg, "kubepods.slice/memory.max", "3221225472\n");
    write(
        cg,
        "kubepods.slice/memory.stat",
        "anon 104857600\ninactive_file 0\n",
    );

    write(cg, &format!("{SLICE}/cpu.stat"), &cpu_stat(cpu_usec[2]));
    write(cg, &format!("{SLICE}/memory.current"), "104857600\n");
    write(cg, &format!("{SLICE}/memory.max"), "max\n");
    write(
        cg,
        &format!("{SLICE}/memory.stat"),
        "anon 73400320\nfile 31457280\ninactive_file 20971520\npgfault 500\npgmajfault 5\n",
    );
    write(cg, &format!("{SLICE}/pids.current"), "9\n");
    for f in ["cpu.pressure", "memory.pressure", "io.pressure"] {
        write(cg, &format!("{SLICE}/{f}"), PSI_FULL);
    }
    // app: every file, a 256 MiB limit.
    let app = format!("{SLICE}/cri-containerd-container-2.scope");
    write(cg, &format!("{app}/cpu.stat"), &cpu_stat(cpu_usec[3]));
    write(cg, &format!("{app}/memory.current"), "83886080\n");
    write(cg, &format!("{app}/memory.max"), "268435456\n");
    write(
        cg,
        &format!("{app}/memory.stat"),
        "anon 62914560\nfile 20971520\ninactive_file 16777216\npgfault 300\npgmajfault 3\n",
    );
    write(cg, &format!("{app}/pids.current"), "5\n");
    for f in ["cpu.pressure", "memory.pressure", "io.pressure"] {
        write(cg, &format!("{app}/{f}"), PSI_FULL);
    }
    // sidecar: a kernel without PSI, memory.stat without inactive_file.
    let sidecar = format!("{SLICE}/cri-containerd-container-3.scope");
    write(cg, &format!("{sidecar}/cpu.stat"), &cpu_stat(cpu_usec[4]));
    write(cg, &format!("{sidecar}/memory.current"), "10485760\n");
    write(cg, &format!("{sidecar}/memory.max"), "max\n");
    write(cg, &format!("{sidecar}/memory.stat"), "anon 8388608\n");
    write(cg, &format!("{sidecar}/pids.current"), "2\n");
}

struct Setup {
    provider: SummaryProvider,
    runtime: Arc<FakeRuntime>,
    info_calls: Arc<std::sync::atomic::AtomicUsize>,
    proc: tempfile::TempDir,
    cgroups: tempfile::TempDir,
    logs: tempfile::TempDir,
}

async fn setup(cgroups_per_qos: bool) -> Setup {
    let clock = Clock::starting_at(START.parse().unwrap());
    let (proc, cgroups, logs) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    write_tree(proc.path(), cgroups.path(), [0; 5]);
    // app's log directory: one 5000-byte log file.
    write(
        logs.path(),
        &format!("default_web-n1_{UID}/app/0.log"),
        &"x".repeat(5000),
    );
    // Volumes: a disk emptyDir (ephemeral) with one file, a secret (not); the managed hosts file.
    let pod_dir = format!("pods/{UID}");
    write(
        logs.path(),
        &format!("{pod_dir}/volumes/kubernetes.io~empty-dir/cache/data"),
        &"d".repeat(20_000),
    );
    write(
        logs.path(),
        &format!("{pod_dir}/volumes/kubernetes.io~secret/creds/token"),
        "t",
    );
    write(
        logs.path(),
        &format!("{pod_dir}/etc-hosts"),
        "127.0.0.1 localhost\n",
    );
    let settings = StatsSettings {
        node_name: NODE.into(),
        cgroup_mount: cgroups.path().to_path_buf(),
        proc_root: proc.path().to_path_buf(),
        root_dir: logs.path().to_path_buf(),
        pod_logs_dir: logs.path().to_path_buf(),
        cgroup_driver: Driver::Systemd,
        cgroup_root: "/".into(),
        cgroups_per_qos,
        volume_stats_period: crate::stats::volumes::VOLUME_STATS_PERIOD,
    };
    let rt = runtime(clock).await;
    let pods = Arc::new(|| vec![Arc::new(pod())]);
    let info_calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let provider = SummaryProvider::new(
        settings,
        rt.clone() as Arc<dyn Runtime>,
        Arc::new(FakeStats {
            image_mount: logs.path().display().to_string(),
            info_calls: info_calls.clone(),
        }),
        pods,
        clock,
    )
    .with_reader(CgroupReader::new(cgroups.path(), CgroupVersion::V2));
    Setup {
        provider,
        runtime: rt,
        info_calls,
        proc,
        cgroups,
        logs,
    }
}

fn json(s: &Summary) -> serde_json::Value {
    serde_json::to_value(s).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_pod_with_two_containers_on_a_v2_node_under_systemd() {
    let s = setup(true).await;
    let first = s.provider.summary(Scope::Full).await.unwrap();
    let j = json(&first);
    let t = "2026-01-01T00:00:00Z";

    // The node: boot time from uptime; root CPU; memory as runc emulates it for the root
    // (usage = anon + file = 1.5 GiB, working set 1.25 GiB), available = MemTotal − that.
    let node = &j["node"];
    assert_eq!(node["nodeName"], NODE);
    assert_eq!(node["startTime"], "2025-12-31T23:43:20Z");
    assert_eq!(node["memory"]["usageBytes"], 1_610_612_736u64);
    assert_eq!(node["memory"]["workingSetBytes"], 1_342_177_280u64);
    assert_eq!(
        node["memory"]["availableBytes"],
        4_028_580u64 * 1024 - 1_342_177_280
    );
    assert_eq!(node["memory"]["rssBytes"], 1_073_741_824u64);
    assert_eq!(node["memory"]["psi"]["full"]["total"], 600);
    assert_eq!(node["cpu"]["usageCoreNanoSeconds"], 0);
    assert!(node["cpu"].get("usageNanoCores").is_none(), "no rate yet");
    // system cpu pressure without a full line: zeros
    assert_eq!(
        node["cpu"]["psi"],
        serde_json::json!({
            "some": {"total": 123, "avg10": 5.0, "avg60": 4.0, "avg300": 3.0},
            "full": {"total": 0, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0}
        })
    );
    assert_eq!(node["io"]["psi"]["some"]["avg10"], 1.25);
    assert_eq!(
        node["rlimit"],
        serde_json::json!({"time": t, "maxpid": 31000, "curproc": 345})
    );
    assert_eq!(node["runtime"]["imageFs"]["usedBytes"], 7_000_000);
    assert_eq!(node["runtime"]["imageFs"]["inodesUsed"], 300);
    assert!(
        node["runtime"]["imageFs"]["capacityBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(node["fs"]["capacityBytes"].as_u64().unwrap() > 0);
    let pods_container = &node["systemContainers"][0];
    assert_eq!(pods_container["name"], "pods");
    assert_eq!(pods_container["memory"]["workingSetBytes"], 209_715_200);
    assert_eq!(
        pods_container["memory"]["availableBytes"],
        3_221_225_472u64 - 209_715_200
    );

    // The pod: its slice's files, not the sum of the containers.
    let pod = &j["pods"][0];
    assert_eq!(
        pod["podRef"],
        serde_json::json!({"name": "web-n1", "namespace": "default", "uid": UID})
    );
    assert_eq!(pod["startTime"], t);
    assert_eq!(pod["memory"]["usageBytes"], 104_857_600);
    assert_eq!(pod["memory"]["workingSetBytes"], 104_857_600 - 20_971_520);
    assert!(
        pod["memory"].get("availableBytes").is_none(),
        "memory.max is max"
    );
    assert_eq!(pod["memory"]["pageFaults"], 500);
    assert_eq!(pod["memory"]["majorPageFaults"], 5);
    assert_eq!(pod["cpu"]["psi"]["some"]["total"], 1000);
    assert_eq!(pod["io"]["psi"]["full"]["avg10"], 0.75);
    assert_eq!(pod["process_stats"]["process_count"], 9);

    let containers = pod["containers"].as_array().unwrap();
    let names: Vec<&str> = containers
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["app", "sidecar"]);
    let app = &containers[0];
    assert_eq!(app["startTime"], t);
    assert_eq!(app["memory"]["usageBytes"], 83_886_080);
    assert_eq!(app["memory"]["workingSetBytes"], 83_886_080 - 16_777_216);
    assert_eq!(
        app["memory"]["availableBytes"],
        268_435_456 - (83_886_080 - 16_777_216)
    );
    assert_eq!(app["memory"]["rssBytes"], 62_914_560);
    assert_eq!(app["memory"]["psi"]["some"]["avg60"], 0.5);
    assert_eq!(app["io"]["psi"]["some"]["avg300"], 0.1);
    assert_eq!(app["rootfs"]["usedBytes"], 4096);
    assert_eq!(app["rootfs"]["inodesUsed"], 3);
    assert_eq!(app["logs"]["inodesUsed"], 2, "the directory and 0.log");
    let log_bytes = app["logs"]["usedBytes"].as_u64().unwrap();
    assert!(log_bytes >= 5000, "{log_bytes}");
    let sidecar = &containers[1];
    assert_eq!(
        sidecar["memory"]["workingSetBytes"], 10_485_760,
        "no inactive_file"
    );
    assert!(sidecar["memory"].get("availableBytes").is_none());
    assert!(
        sidecar["memory"].get("psi").is_none(),
        "no PSI on this kernel"
    );
    assert!(sidecar["cpu"].get("psi").is_none());
    assert!(sidecar.get("io").is_none());
    assert!(
        sidecar.get("rootfs").is_none(),
        "no writable layer reported"
    );
    assert!(sidecar.get("logs").is_none(), "no log directory");
    // Volumes, each with its own numbers; the emptyDir counts as ephemeral storage.
    let volumes = pod["volume"].as_array().unwrap();
    let names: Vec<&str> = volumes
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["cache", "creds"]);
    let cache_bytes = volumes[0]["usedBytes"].as_u64().unwrap();
    assert!(cache_bytes >= 20_000, "{}", volumes[0]);
    assert_eq!(volumes[0]["inodesUsed"], 2);
    assert_eq!(volumes[1]["inodesUsed"], 2);
    assert!(volumes[0]["capacityBytes"].as_u64().unwrap() > 0);
    // ephemeral storage: the app's writable layer and logs, the emptyDir, /etc/hosts
    let hosts_bytes = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(s.logs.path().join(format!("pods/{UID}/etc-hosts")))
            .unwrap()
            .blocks()
            * 512
    };
    assert_eq!(
        pod["ephemeral-storage"]["usedBytes"].as_u64().unwrap(),
        4096 + log_bytes + cache_bytes + hosts_bytes
    );
    assert_eq!(pod["ephemeral-storage"]["inodesUsed"], 3 + 2 + 2 + 1);
    assert!(pod["ephemeral-storage"]["capacityBytes"].as_u64().unwrap() > 0);

    // Two seconds later, with more CPU used: rates.
    tokio::time::advance(Duration::from_secs(2)).await;
    // node 4 cores busy, kubepods 1, pod 0.5, app 0.25, sidecar 0.125
    write_tree(
        s.proc.path(),
        s.cgroups.path(),
        [8_000_000, 2_000_000, 1_000_000, 500_000, 250_000],
    );
    let second = json(&s.provider.summary(Scope::Full).await.unwrap());
    assert_eq!(
        s.info_calls.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one verbose status per container, then the cached cgroup paths"
    );
    assert_eq!(second["node"]["cpu"]["time"], "2026-01-01T00:00:02Z");
    assert_eq!(second["node"]["cpu"]["usageNanoCores"], 4_000_000_000u64);
    assert_eq!(
        second["node"]["systemContainers"][0]["cpu"]["usageNanoCores"],
        1_000_000_000
    );
    let pod = &second["pods"][0];
    assert_eq!(pod["cpu"]["usageNanoCores"], 500_000_000);
    assert_eq!(pod["cpu"]["usageCoreNanoSeconds"], 1_000_000_000);
    assert_eq!(pod["containers"][0]["cpu"]["usageNanoCores"], 250_000_000);
    assert_eq!(pod["containers"][1]["cpu"]["usageNanoCores"], 125_000_000);

    // Only CPU and memory: no filesystems, I/O, rlimit or tasks.
    let small = json(&s.provider.summary(Scope::CpuAndMemory).await.unwrap());
    for key in ["fs", "runtime", "rlimit", "io"] {
        assert!(small["node"].get(key).is_none(), "{key}: {small}");
    }
    let pod = &small["pods"][0];
    assert!(pod.get("process_stats").is_none() && pod.get("ephemeral-storage").is_none());
    assert!(pod.get("volume").is_none());
    assert!(pod["containers"][0].get("logs").is_none());
    assert_eq!(pod["containers"][0]["memory"]["usageBytes"], 83_886_080);
    drop(s.logs);
}

#[tokio::test(start_paused = true)]
async fn the_node_scope_reads_the_node_and_asks_the_runtime_nothing() {
    let s = setup(true).await;
    let full = json(&s.provider.summary(Scope::Full).await.unwrap());
    s.runtime.clear_calls();
    let info_calls = s.info_calls.load(std::sync::atomic::Ordering::SeqCst);
    let node = json(&s.provider.summary(Scope::Node).await.unwrap());
    assert!(s.runtime.calls().is_empty(), "{:?}", s.runtime.calls());
    assert_eq!(
        s.info_calls.load(std::sync::atomic::Ordering::SeqCst),
        info_calls
    );
    assert_eq!(node["pods"], serde_json::json!([]), "{node}");
    // The node's memory and kubepods' (the eviction signals) as the full summary has them.
    for pointer in [
        "/node/memory/workingSetBytes",
        "/node/memory/availableBytes",
        "/node/systemContainers/0/memory/workingSetBytes",
    ] {
        assert!(node.pointer(pointer).is_some(), "{pointer}: {node}");
        assert_eq!(node.pointer(pointer), full.pointer(pointer), "{pointer}");
    }
    // The container cgroup paths learnt before are kept for the next pod-level summary.
    s.provider.summary(Scope::CpuAndMemory).await.unwrap();
    assert_eq!(
        s.info_calls.load(std::sync::atomic::Ordering::SeqCst),
        info_calls
    );
}

#[tokio::test(start_paused = true)]
async fn without_pod_cgroups_the_pod_is_the_sum_of_its_containers() {
    let s = setup(false).await;
    let j = json(&s.provider.summary(Scope::Full).await.unwrap());
    let pod = &j["pods"][0];
    assert_eq!(pod["memory"]["usageBytes"], 83_886_080 + 10_485_760);
    assert_eq!(
        pod["memory"]["workingSetBytes"],
        83_886_080 - 16_777_216 + 10_485_760
    );
    assert_eq!(pod["process_stats"]["process_count"], 5 + 2);
    assert!(j["node"].get("systemContainers").is_none(), "no kubepods");
}

#[tokio::test(start_paused = true)]
async fn a_container_whose_cgroup_is_gone_is_listed_without_numbers() {
    let s = setup(true).await;
    std::fs::remove_dir_all(
        s.cgroups
            .path()
            .join(SLICE)
            .join("cri-containerd-container-3.scope"),
    )
    .unwrap();
    // A file that does not parse hides only itself.
    write(
        s.cgroups.path(),
        &format!("{SLICE}/cri-containerd-container-2.scope/memory.current"),
        "lots\n",
    );
    let j = json(&s.provider.summary(Scope::Full).await.unwrap());
    let containers = j["pods"][0]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2);
    let app = &containers[0];
    assert!(app["memory"].get("usageBytes").is_none(), "{app}");
    assert_eq!(
        app["memory"]["psi"]["some"]["total"], 1000,
        "pressure still read"
    );
    assert_eq!(app["cpu"]["usageCoreNanoSeconds"], 0);
    let sidecar = &containers[1];
    assert_eq!(sidecar["name"], "sidecar");
    assert!(sidecar.get("cpu").is_none() && sidecar.get("memory").is_none());
}

/// `/metrics/cadvisor`'s readings come from the Summary's gathering (no second verbose status
/// per container), plus the files only a scrape reads: the mount table for the writable
/// layer's device, the pod's `net/dev` through one of its processes, the CPU settings.
#[tokio::test(start_paused = true)]
async fn cadvisor_reads_the_same_gathering_and_the_scrape_only_files() {
    use super::cadvisor::SeriesLabels;
    let s = setup(true).await;
    let app = format!("{SLICE}/cri-containerd-container-2.scope");
    write(s.cgroups.path(), &format!("{app}/cgroup.procs"), "4242\n");
    write(
        s.cgroups.path(),
        &format!("{app}/cpu.max"),
        "50000 100000\n",
    );
    write(
        s.proc.path(),
        "4242/net/dev",
        "Inter-|   Receive                                                |  Transmit\n \
         face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
         lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0\n  \
         eth0:    1500      10    0    1    0     0          0         0      700       7    2    0    0     0       0          0\n",
    );
    write(
        s.proc.path(),
        "self/mountinfo",
        &format!(
            "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
             40 22 254:16 / {} rw,relatime shared:2 - ext4 /dev/vdb rw\n",
            s.logs.path().display()
        ),
    );
    s.provider.summary(Scope::Full).await.unwrap();
    let calls = s.info_calls.load(std::sync::atomic::Ordering::SeqCst);
    let input = s.provider.cadvisor().await.unwrap();
    assert_eq!(
        s.info_calls.load(std::sync::atomic::Ordering::SeqCst),
        calls,
        "the verbose status is asked once per container, whoever reads"
    );
    let ids: Vec<&str> = input.cgroups.iter().map(|c| c.labels.id.as_str()).collect();
    let pod_id = format!("/{SLICE}");
    let app_id = format!("/{app}");
    let sidecar_id = format!("/{SLICE}/cri-containerd-container-3.scope");
    assert_eq!(
        ids,
        vec!["/", "/kubepods.slice", &pod_id, &app_id, &sidecar_id]
    );
    let pod = &input.cgroups[2];
    assert_eq!(
        pod.labels,
        SeriesLabels {
            id: pod_id.clone(),
            pod: "web-n1".into(),
            namespace: "default".into(),
            ..SeriesLabels::default()
        }
    );
    let interfaces: Vec<(&str, u64, u64)> = pod
        .network
        .iter()
        .map(|n| (n.interface.as_str(), n.rx_bytes, n.tx_errors))
        .collect();
    assert_eq!(interfaces, vec![("eth0", 1500, 2)], "lo left out");
    let app_series = &input.cgroups[3];
    assert_eq!(
        (
            app_series.labels.container.as_str(),
            app_series.labels.name.as_str(),
            app_series.labels.image.as_str()
        ),
        ("app", "container-2", "busybox"),
        "no image-name annotation: the list's image"
    );
    assert!(app_series.network.is_empty(), "network is the pod's");
    let spec = app_series.cpu_spec.unwrap();
    assert_eq!(
        (spec.quota_us, spec.period_us),
        (Some(50_000), Some(100_000))
    );
    assert_eq!(
        app_series.sample.memory.map(|m| m.usage),
        Some(83_886_080),
        "the Summary's reading"
    );
    // Only container-2 has a writable layer; its filesystem's device from the mount table.
    let fs: Vec<(&str, u64)> = app_series
        .fs
        .iter()
        .map(|f| (f.device.as_str(), f.usage))
        .collect();
    assert_eq!(fs, vec![("/dev/vdb", 4096)]);
    assert!(input.cgroups[4].fs.is_empty());
    assert!(input.cgroups[0].start_time.is_none() && app_series.start_time.is_some());
}
