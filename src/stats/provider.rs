//! `/stats/summary`: the node's, its pods' and their containers' stats, gathered on request.
//!
//! One request costs: `ListPodSandbox` and `ListContainers` (this node's, running only), a
//! verbose `ContainerStatus` for each container not seen before (its cgroup path is cached by
//! container ID), and — unless only CPU and memory are asked for — `ImageFsInfo` and
//! `ListContainerStats` (writable layers). Then, off the async runtime, a handful of small
//! files per cgroup (container, pod, `kubepods`, root), five under `/proc`, a statfs per
//! filesystem, a directory walk of each container's log directory, and — at most once a
//! minute per pod, cached in between — a walk of the pod's volumes ([`super::volumes`]).
//!
//! Pods are the ones with a ready sandbox on this node; containers the running ones, as the
//! kubelet lists them from the runtime. The pod cgroup's path comes from the cgroup manager's
//! naming ([`crate::cgroup::pod_cgroup_parent`]) for pods nodelet knows; without one (no
//! `cgroupsPerQOS`, or a pod nodelet no longer tracks) the pod's CPU and memory are the sums
//! of its containers'.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::time::Instant;

use super::cadvisor::{
    interface_reported, resolve_devices, CadvisorInput, CgroupSeries, FsSeries, NetworkSeries,
    SeriesLabels,
};
use super::cgroup::{CgroupReader, CgroupReadout, CgroupSample, Resource};
use super::container_cgroup::{
    cgroup_of_cgroups_path, cgroups_path_from_info, image_name_from_info,
};
use super::convert::{
    add_usage, cpu_stats, fs_stats, io_stats, memory_stats, sum_cpu, sum_memory, usage_on_fs,
};
use super::cpu_rate::{CpuRates, CpuSample};
use super::machine::MachineInfo;
use super::node::{self as proc, FsUsage};
use super::psi::Psi;
use super::summary::{
    ContainerStats, FsStats, NodeStats, PodReference, PodStats, ProcessStats, RlimitStats,
    RuntimeStats, Summary, VolumeStats, SYSTEM_CONTAINER_PODS,
};
use super::volumes::{
    dir_usage, ephemeral_volume_names, read_pod_volumes, VolumeCache, VolumeUsage,
};
use super::{Error, Result};
use crate::cgroup::{kubepods_cgroup_name, Driver};
use crate::clock::Clock;
use crate::cri::{api, labels, Runtime, StatsRuntime};

/// The pods nodelet knows (for their QoS class, hence their cgroup, and their start time).
pub type PodsFn = Arc<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>;

/// Where things are on this node.
#[derive(Debug, Clone)]
pub struct StatsSettings {
    pub node_name: String,
    /// `/sys/fs/cgroup`.
    pub cgroup_mount: PathBuf,
    /// `/proc`.
    pub proc_root: PathBuf,
    /// nodelet's `rootDir`: its filesystem is the node's `fs` (nodefs).
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    pub cgroup_driver: Driver,
    pub cgroup_root: String,
    pub cgroups_per_qos: bool,
    /// `volumeStatsAggPeriod`: how long a pod's volume usage is served before its volumes are
    /// walked again.
    pub volume_stats_period: std::time::Duration,
}

/// What to gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Full,
    /// `?only_cpu_and_memory=true`: CPU and memory of the node, pods and containers only (no
    /// runtime calls beyond the two lists, no filesystems).
    CpuAndMemory,
    /// The node's CPU, memory and pressure only: no runtime call, no pod (the eviction
    /// manager's passes between full ones, whose memory signals are node-level; it reads the
    /// pods only when it has to rank them). Its cost does not grow with the pods.
    Node,
}

/// What the runtime's verbose status says of a container, asked once per container ID.
#[derive(Debug, Clone, Default)]
struct ContainerFacts {
    cgroup: Option<String>,
    /// The image name in the container's OCI spec, cAdvisor's `image` label.
    image_name: Option<String>,
}

/// One container to read.
#[derive(Debug, Clone)]
struct ContainerPlan {
    id: String,
    name: String,
    /// The image name the runtime gave the container (its OCI spec's annotation; else the
    /// list's `userSpecifiedImage` or image): cAdvisor's `image` label.
    image: String,
    created: Time,
    cgroup: Option<String>,
    log_dir: PathBuf,
    writable_layer: Option<api::FilesystemUsage>,
}

/// One pod to read.
#[derive(Debug, Clone)]
struct PodPlan {
    pod_ref: PodReference,
    start_time: Time,
    cgroup: Option<String>,
    containers: Vec<ContainerPlan>,
    /// `<rootDir>/pods/<uid>`: volumes and the managed `/etc/hosts`.
    pod_dir: PathBuf,
    /// From the pod's spec, when nodelet knows the pod.
    ephemeral_volumes: Option<HashSet<String>>,
}

/// Everything read from files for one request (off the async runtime).
#[derive(Debug, Default)]
struct Readings {
    root: Option<CgroupSample>,
    kubepods: Option<CgroupSample>,
    node_pressure: [Option<Psi>; 3],
    mem_total: Option<u64>,
    task_limit: Option<u64>,
    tasks: Option<u64>,
    boot_time: Option<jiff::Timestamp>,
    node_fs: Option<FsUsage>,
    /// statfs by mount point (image filesystem, writable layers).
    filesystems: HashMap<String, FsUsage>,
    logs_fs: Option<FsUsage>,
    pods: Vec<Option<CgroupSample>>,
    containers: Vec<Vec<Option<CgroupSample>>>,
    /// (bytes, inodes) of each container's log directory.
    logs: Vec<Vec<Option<(u64, u64)>>>,
    volumes: Vec<Vec<VolumeUsage>>,
    /// (bytes, inodes) of each pod's managed `/etc/hosts`.
    etc_hosts: Vec<Option<(u64, u64)>>,
}

pub struct SummaryProvider {
    settings: StatsSettings,
    reader: CgroupReader,
    runtime: Arc<dyn Runtime>,
    stats_runtime: Arc<dyn StatsRuntime>,
    pods: PodsFn,
    clock: Clock,
    rates: CpuRates,
    /// Container ID → its cgroup path and image name (fixed for a container's life); a
    /// `None` path when the runtime's answer had no usable one.
    cgroups: Mutex<HashMap<String, ContainerFacts>>,
    volumes: Arc<VolumeCache>,
    /// The machine's facts, for cAdvisor's `machine_*` series (`None`: not served).
    machine: Option<MachineInfo>,
    /// CSI volumes' usage as their drivers report it (`None`: no CSI volumes reported).
    csi_volumes: Option<Arc<super::csi_volumes::CsiVolumeStats>>,
}

fn nanos_to_time(nanos: i64) -> Option<Time> {
    crate::cri::model::timestamp_from_nanos(nanos).map(Time)
}

/// Logs a readout's errors: a cgroup that is gone is normal (the container exited after the
/// list); anything else is worth a warning.
fn keep_sample(what: &str, result: Result<CgroupReadout>) -> Option<CgroupSample> {
    match result {
        Ok(readout) => {
            for e in &readout.errors {
                tracing::warn!(cgroup = what, error = %e, "stats: cgroup file unreadable");
            }
            Some(readout.sample)
        }
        Err(e @ Error::NoCgroup { .. }) => {
            tracing::debug!(cgroup = what, error = %e, "stats: cgroup gone");
            None
        }
        Err(e) => {
            tracing::warn!(cgroup = what, error = %e, "stats: cgroup unreadable");
            None
        }
    }
}

fn keep<T>(what: &str, result: Result<T>) -> Option<T> {
    result
        .map_err(|e| tracing::warn!(what, error = %e, "stats: unreadable"))
        .ok()
}

impl SummaryProvider {
    pub fn new(
        settings: StatsSettings,
        runtime: Arc<dyn Runtime>,
        stats_runtime: Arc<dyn StatsRuntime>,
        pods: PodsFn,
        clock: Clock,
    ) -> SummaryProvider {
        let volumes = Arc::new(VolumeCache::new(settings.volume_stats_period));
        SummaryProvider {
            reader: CgroupReader::detect(&settings.cgroup_mount),
            settings,
            runtime,
            stats_runtime,
            pods,
            clock,
            rates: CpuRates::new(),
            cgroups: Mutex::new(HashMap::new()),
            volumes,
            machine: None,
            csi_volumes: None,
        }
    }

    /// Reports the pods' CSI volumes from `stats` (refreshed by its own task).
    pub fn with_csi_volumes(mut self, stats: Arc<super::csi_volumes::CsiVolumeStats>) -> Self {
        self.csi_volumes = Some(stats);
        self
    }

    /// The machine facts `/metrics/cadvisor` reports as `machine_*` (the node's one
    /// `MachineInfo`, so they agree with the Node's capacity).
    pub fn with_machine(mut self, machine: MachineInfo) -> SummaryProvider {
        self.machine = Some(machine);
        self
    }

    /// Uses `reader` instead of detecting the layout of the cgroup mount (tests).
    pub fn with_reader(mut self, reader: CgroupReader) -> SummaryProvider {
        self.reader = reader;
        self
    }

    /// The `kubepods` cgroup (the kubelet's `pods` system container).
    fn kubepods_cgroup(&self) -> Option<String> {
        self.settings.cgroups_per_qos.then(|| {
            kubepods_cgroup_name(&self.settings.cgroup_root).to_driver(self.settings.cgroup_driver)
        })
    }

    /// What the runtime's verbose status says of each container (its cgroup path, its image
    /// name), from the cache or (a few calls at a time) the runtime. A container whose status
    /// names no usable path is remembered as such, so it is not asked about again; a failed
    /// call is retried on the next request.
    async fn container_facts(&self, ids: &[String]) -> HashMap<String, ContainerFacts> {
        use futures::StreamExt;
        let mut known: HashMap<String, ContainerFacts> = {
            let cache = self.cgroups.lock().unwrap_or_else(|e| e.into_inner());
            ids.iter()
                .filter_map(|id| cache.get(id).map(|p| (id.clone(), p.clone())))
                .collect()
        };
        let missing: Vec<String> = ids
            .iter()
            .filter(|id| !known.contains_key(*id))
            .cloned()
            .collect();
        let asked: Vec<(String, Option<ContainerFacts>)> = futures::stream::iter(missing)
            .map(|id| async move {
                let answer = match self.stats_runtime.container_info(&id).await {
                    Ok(info) => Some(ContainerFacts {
                        cgroup: match cgroups_path_from_info(&info) {
                            Some(path) => match cgroup_of_cgroups_path(&path) {
                                Ok(cgroup) => Some(cgroup),
                                Err(reason) => {
                                    tracing::warn!(container = %id, %reason, "stats: container cgroup path not understood");
                                    None
                                }
                            },
                            None => {
                                tracing::warn!(
                                    container = %id,
                                    "stats: the runtime's verbose container status has no runtimeSpec.linux.cgroupsPath"
                                );
                                None
                            }
                        },
                        image_name: image_name_from_info(&info),
                    }),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => {
                        tracing::warn!(container = %id, error = %e, "stats: container status");
                        None
                    }
                };
                (id, answer)
            })
            .buffer_unordered(8)
            .collect()
            .await;
        for (id, answer) in asked {
            if let Some(facts) = answer {
                known.insert(id, facts);
            }
        }
        // Keep exactly the running containers' answers.
        *self.cgroups.lock().unwrap_or_else(|e| e.into_inner()) = known.clone();
        known
    }

    /// Gathers the Summary.
    pub async fn summary(&self, scope: Scope) -> Result<Summary> {
        if scope == Scope::Node {
            return self.node_summary().await;
        }
        let (plans, readings, image_fs) = self.gather(scope).await?;
        let now = Instant::now();
        let summary = self.build(plans, readings, image_fs, scope, now);
        self.rates.forget_stale(now);
        Ok(summary)
    }

    /// What `/metrics/cadvisor` renders: the same lists and files as a full Summary (one
    /// gathering, [`Self::gather`]), kept as the cgroups' own readings — cAdvisor reports
    /// counters and spec values the Summary has no field for. The CPU rates of the Summary
    /// are left alone: a scrape does not shorten their window.
    pub async fn cadvisor(&self) -> Result<CadvisorInput> {
        let (plans, readings, _) = self.gather(Scope::Full).await?;
        let at = self.clock.now();
        // cAdvisor names a filesystem by its device (the mount table says which) and reads a
        // pod's network from one of its processes: the files beyond the Summary's.
        let proc_root = self.settings.proc_root.clone();
        let reader = self.reader.clone();
        let pods_containers: Vec<Vec<String>> = plans
            .iter()
            .map(|p| {
                p.containers
                    .iter()
                    .filter_map(|c| c.cgroup.clone())
                    .collect()
            })
            .collect();
        let (mounts, networks) = tokio::task::spawn_blocking(move || {
            let mounts = read_mount_sources(&proc_root.join("self/mountinfo"));
            let networks: Vec<Vec<NetworkSeries>> = pods_containers
                .iter()
                .map(|cgroups| pod_network(&reader, &proc_root, cgroups))
                .collect();
            (mounts, networks)
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))?;
        let mut input = cadvisor_input(
            &plans,
            &readings,
            &networks,
            self.kubepods_cgroup().as_deref(),
            at,
            self.machine.clone(),
        );
        resolve_devices(&mut input, &keep("mountinfo", mounts).unwrap_or_default());
        // The CPU settings (`container_spec_cpu_*`): files the Summary does not read.
        let reader = self.reader.clone();
        let ids: Vec<String> = input.cgroups.iter().map(|c| c.labels.id.clone()).collect();
        let specs = tokio::task::spawn_blocking(move || {
            ids.iter()
                .map(|id| keep("cpu spec", reader.cpu_spec(id)).flatten())
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))?;
        for (cg, spec) in input.cgroups.iter_mut().zip(specs) {
            cg.cpu_spec = spec;
        }
        Ok(input)
    }

    /// The runtime's lists, the plan of what to read and the readings (off the async
    /// runtime), for [`Scope::Full`] or [`Scope::CpuAndMemory`].
    async fn gather(
        &self,
        scope: Scope,
    ) -> Result<(Vec<PodPlan>, Readings, Option<api::ImageFsInfoResponse>)> {
        let selector = crate::cri::model::node_selector(&self.settings.node_name);
        let sandboxes = self
            .runtime
            .list_pod_sandbox(Some(api::PodSandboxFilter {
                state: Some(api::PodSandboxStateValue {
                    state: api::PodSandboxState::SandboxReady as i32,
                }),
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await?;
        let containers: Vec<api::Container> = self
            .runtime
            .list_containers(Some(api::ContainerFilter {
                state: Some(api::ContainerStateValue {
                    state: api::ContainerState::ContainerRunning as i32,
                }),
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await?
            .into_iter()
            .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
            .collect();
        let ids: Vec<String> = containers.iter().map(|c| c.id.clone()).collect();
        let facts = self.container_facts(&ids).await;

        let (image_fs, writable_layers) = if scope == Scope::Full {
            let image_fs = keep(
                "ImageFsInfo",
                self.stats_runtime
                    .image_fs_info()
                    .await
                    .map_err(Error::from),
            );
            let layers: HashMap<String, api::FilesystemUsage> = keep(
                "ListContainerStats",
                self.stats_runtime
                    .list_container_stats(Some(api::ContainerStatsFilter {
                        label_selector: selector,
                        ..Default::default()
                    }))
                    .await
                    .map_err(Error::from),
            )
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| Some((s.attributes?.id, s.writable_layer?)))
            .collect();
            (image_fs, layers)
        } else {
            (None, HashMap::new())
        };

        let plans = self.plan(&sandboxes, &containers, &facts, writable_layers);
        let mut mounts: Vec<String> = Vec::new();
        if let Some(info) = &image_fs {
            for fs in &info.image_filesystems {
                if let Some(id) = &fs.fs_id {
                    mounts.push(id.mountpoint.clone());
                }
            }
        }
        for p in &plans {
            for c in &p.containers {
                if let Some(id) = c.writable_layer.as_ref().and_then(|w| w.fs_id.as_ref()) {
                    mounts.push(id.mountpoint.clone());
                }
            }
        }
        mounts.sort();
        mounts.dedup();

        let reader = self.reader.clone();
        let settings = self.settings.clone();
        let kubepods = self.kubepods_cgroup();
        let now_wall = self.clock.now();
        let read_plans = plans.clone();
        let volumes = self.volumes.clone();
        let started = Instant::now();
        volumes.retain(&plans.iter().map(|p| p.pod_ref.uid.as_str()).collect());
        let readings = tokio::task::spawn_blocking(move || {
            read_everything(
                &reader,
                &settings,
                kubepods.as_deref(),
                &read_plans,
                &mounts,
                scope,
                (now_wall, started),
                &volumes,
            )
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))?;
        Ok((plans, readings, image_fs))
    }

    /// [`Scope::Node`]: the node's own files, nothing of the runtime or the pods.
    async fn node_summary(&self) -> Result<Summary> {
        let reader = self.reader.clone();
        let settings = self.settings.clone();
        let kubepods = self.kubepods_cgroup();
        let now_wall = self.clock.now();
        let volumes = self.volumes.clone();
        let started = Instant::now();
        let readings = tokio::task::spawn_blocking(move || {
            read_everything(
                &reader,
                &settings,
                kubepods.as_deref(),
                &[],
                &[],
                Scope::Node,
                (now_wall, started),
                &volumes,
            )
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))?;
        Ok(self.build(Vec::new(), readings, None, Scope::Node, Instant::now()))
    }

    /// Which pods and containers to read, and where.
    fn plan(
        &self,
        sandboxes: &[api::PodSandbox],
        containers: &[api::Container],
        facts: &HashMap<String, ContainerFacts>,
        mut writable_layers: HashMap<String, api::FilesystemUsage>,
    ) -> Vec<PodPlan> {
        let known: HashMap<String, Arc<Pod>> = (self.pods)()
            .into_iter()
            .filter_map(|p| Some((p.metadata.uid.clone()?, p)))
            .collect();
        // The newest ready sandbox of each pod.
        let mut newest: BTreeMap<String, &api::PodSandbox> = BTreeMap::new();
        for s in sandboxes {
            if s.state != api::PodSandboxState::SandboxReady as i32 {
                continue;
            }
            let Some(uid) = s.labels.get(labels::POD_UID) else {
                continue;
            };
            let entry = newest.entry(uid.clone()).or_insert(s);
            if s.created_at > entry.created_at {
                *entry = s;
            }
        }
        let mut plans = Vec::new();
        for (uid, sandbox) in newest {
            let meta = sandbox.metadata.clone().unwrap_or_default();
            let pod = known.get(&uid);
            let start_time = pod
                .and_then(|p| p.status.as_ref()?.start_time.clone())
                .or_else(|| nanos_to_time(sandbox.created_at))
                .unwrap_or_else(|| Time(self.clock.now()));
            let cgroup = pod
                .map(|p| {
                    crate::cgroup::pod_cgroup_parent(
                        p,
                        self.settings.cgroup_driver,
                        &self.settings.cgroup_root,
                        self.settings.cgroups_per_qos,
                    )
                })
                .filter(|c| !c.is_empty());
            // The newest running instance of each container name.
            let mut by_name: BTreeMap<String, &api::Container> = BTreeMap::new();
            for c in containers
                .iter()
                .filter(|c| c.labels.get(labels::POD_UID) == Some(&uid))
            {
                let name = c
                    .labels
                    .get(labels::CONTAINER_NAME)
                    .cloned()
                    .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                    .unwrap_or_default();
                let entry = by_name.entry(name).or_insert(c);
                if c.created_at > entry.created_at {
                    *entry = c;
                }
            }
            let containers = by_name
                .into_iter()
                .map(|(name, c)| ContainerPlan {
                    id: c.id.clone(),
                    log_dir: crate::logs::paths::container_log_dir(
                        &self.settings.pod_logs_dir,
                        &meta.namespace,
                        &meta.name,
                        &uid,
                        &name,
                    ),
                    name,
                    image: facts
                        .get(&c.id)
                        .and_then(|f| f.image_name.clone())
                        .or_else(|| {
                            c.image.as_ref().map(|i| {
                                if i.user_specified_image.is_empty() {
                                    i.image.clone()
                                } else {
                                    i.user_specified_image.clone()
                                }
                            })
                        })
                        .unwrap_or_default(),
                    created: nanos_to_time(c.created_at).unwrap_or_else(|| start_time.clone()),
                    cgroup: facts.get(&c.id).and_then(|f| f.cgroup.clone()),
                    writable_layer: writable_layers.remove(&c.id),
                })
                .collect();
            plans.push(PodPlan {
                pod_dir: crate::volume::pod_dir(&self.settings.root_dir, &uid),
                ephemeral_volumes: pod.map(|p| ephemeral_volume_names(p)),
                pod_ref: PodReference {
                    name: meta.name.clone(),
                    namespace: meta.namespace.clone(),
                    uid: uid.clone(),
                },
                start_time,
                cgroup,
                containers,
            });
        }
        plans
    }

    fn rate(&self, key: &str, sample: Option<&CgroupSample>, now: Instant) -> Option<u64> {
        let usage = sample?.cpu?;
        self.rates.observe(
            key,
            CpuSample {
                at: now,
                usage_nanos: usage.usage_nanos,
            },
        )
    }

    fn build(
        &self,
        plans: Vec<PodPlan>,
        readings: Readings,
        image_fs: Option<api::ImageFsInfoResponse>,
        scope: Scope,
        now: Instant,
    ) -> Summary {
        let time = Time(self.clock.now());
        let full = scope == Scope::Full;
        let sample_stats = |key: &str, sample: Option<&CgroupSample>, limit: Option<u64>| {
            let rate = self.rate(key, sample, now);
            let s = sample.copied().unwrap_or_default();
            (
                cpu_stats(&time, s.cpu, rate, s.pressure.cpu.as_ref()),
                memory_stats(&time, s.memory.as_ref(), limit, s.pressure.memory.as_ref()),
                io_stats(&time, s.pressure.io.as_ref()),
            )
        };

        let mut pods = Vec::new();
        for (i, plan) in plans.into_iter().enumerate() {
            let pod_sample = readings.pods.get(i).and_then(Option::as_ref);
            let mut containers = Vec::new();
            // The kubelet's calcEphemeralStorage: containers' writable layers and logs,
            // ephemeral volumes, the managed /etc/hosts; capacity of the node's filesystem.
            let mut ephemeral: Option<FsStats> =
                full.then(|| usage_on_fs(&time, None, None, readings.node_fs.as_ref()));
            for (j, c) in plan.containers.iter().enumerate() {
                let sample = readings
                    .containers
                    .get(i)
                    .and_then(|cs| cs.get(j))
                    .and_then(Option::as_ref);
                let (cpu, memory, io) = sample_stats(&format!("c/{}", c.id), sample, None);
                let mut stats = ContainerStats {
                    name: c.name.clone(),
                    start_time: c.created.clone(),
                    cpu,
                    memory,
                    io: if full { io } else { None },
                    rootfs: None,
                    logs: None,
                    swap: None,
                };
                if full {
                    stats.rootfs = c.writable_layer.as_ref().map(|w| {
                        let fs = w
                            .fs_id
                            .as_ref()
                            .and_then(|id| readings.filesystems.get(&id.mountpoint));
                        usage_on_fs(
                            &time,
                            w.used_bytes.as_ref().map(|v| v.value),
                            w.inodes_used.as_ref().map(|v| v.value),
                            fs,
                        )
                    });
                    stats.logs = readings
                        .logs
                        .get(i)
                        .and_then(|l| l.get(j))
                        .copied()
                        .flatten()
                        .map(|(bytes, inodes)| {
                            usage_on_fs(&time, Some(bytes), Some(inodes), readings.logs_fs.as_ref())
                        });
                    // The kubelet counts a container's logs only along with its rootfs.
                    if let (Some(rootfs), Some(e)) = (&stats.rootfs, ephemeral.as_mut()) {
                        e.used_bytes = add_usage(e.used_bytes, rootfs.used_bytes);
                        e.inodes_used = add_usage(e.inodes_used, rootfs.inodes_used);
                        if let Some(logs) = &stats.logs {
                            e.used_bytes = add_usage(e.used_bytes, logs.used_bytes);
                            e.inodes_used = add_usage(e.inodes_used, logs.inodes_used);
                        }
                    }
                }
                containers.push(stats);
            }
            let (mut cpu, mut memory, io) =
                sample_stats(&format!("p/{}", plan.pod_ref.uid), pod_sample, None);
            let pids = pod_sample
                .and_then(|s| s.pids)
                .map(|p| p.current)
                .or_else(|| {
                    // Without a pod cgroup: the containers' tasks.
                    readings.containers.get(i).and_then(|cs| {
                        cs.iter()
                            .flatten()
                            .filter_map(|s| s.pids.map(|p| p.current))
                            .reduce(u64::saturating_add)
                    })
                });
            let volumes = readings.volumes.get(i).cloned().unwrap_or_default();
            if let Some(e) = ephemeral.as_mut() {
                let etc_hosts = readings.etc_hosts.get(i).copied().flatten();
                for (bytes, inodes) in volumes
                    .iter()
                    .filter(|v| v.ephemeral)
                    .map(|v| (v.bytes, v.inodes))
                    .chain(etc_hosts)
                {
                    e.used_bytes = add_usage(e.used_bytes, Some(bytes));
                    e.inodes_used = add_usage(e.inodes_used, Some(inodes));
                }
            }
            let csi_volumes = self
                .csi_volumes
                .as_ref()
                .map(|c| c.pod_volumes(&plan.pod_ref.uid))
                .unwrap_or_default();
            let mut volume_stats: Vec<VolumeStats> = volumes
                .into_iter()
                .map(|v| VolumeStats {
                    fs: usage_on_fs(&time, Some(v.bytes), Some(v.inodes), v.fs.as_ref()),
                    name: v.name,
                    pvc_ref: None,
                    volume_health_stats: None,
                })
                .chain(csi_volumes)
                .collect();
            volume_stats.sort_by(|a, b| a.name.cmp(&b.name));
            if pod_sample.is_none() {
                let cpus: Vec<_> = containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
                let memories: Vec<_> = containers
                    .iter()
                    .filter_map(|c| c.memory.as_ref())
                    .collect();
                cpu = sum_cpu(&time, &cpus);
                memory = sum_memory(&time, &memories);
            }
            pods.push(PodStats {
                pod_ref: plan.pod_ref,
                start_time: plan.start_time,
                containers,
                cpu,
                memory,
                io: if full { io } else { None },
                network: None,
                volume_stats,
                ephemeral_storage: ephemeral,
                process_stats: if full {
                    pids.map(|n| ProcessStats {
                        process_count: Some(n),
                    })
                } else {
                    None
                },
                swap: None,
            });
        }

        // The node: the root cgroup's CPU and memory (capacity − working set is available),
        // the kernel's own pressure files.
        let root = readings.root.as_ref();
        let rate = self.rate("node", root, now);
        let root_sample = root.copied().unwrap_or_default();
        let [cpu_psi, memory_psi, io_psi] = readings.node_pressure;
        let mut system_containers = Vec::new();
        if let Some(kubepods) = &readings.kubepods {
            let (cpu, memory, _) = sample_stats("sys/pods", Some(kubepods), None);
            system_containers.push(ContainerStats {
                name: SYSTEM_CONTAINER_PODS.to_string(),
                start_time: readings.boot_time.map(Time).unwrap_or_else(|| time.clone()),
                cpu,
                memory,
                io: None,
                rootfs: None,
                logs: None,
                swap: None,
            });
        }
        let node = NodeStats {
            node_name: self.settings.node_name.clone(),
            system_containers,
            start_time: readings.boot_time.map(Time).unwrap_or_else(|| time.clone()),
            cpu: cpu_stats(&time, root_sample.cpu, rate, cpu_psi.as_ref()),
            memory: memory_stats(
                &time,
                root_sample.memory.as_ref(),
                readings.mem_total,
                memory_psi.as_ref(),
            ),
            io: if full {
                io_stats(&time, io_psi.as_ref())
            } else {
                None
            },
            network: None,
            fs: readings.node_fs.as_ref().map(|fs| fs_stats(&time, fs)),
            runtime: image_fs.map(|info| {
                let image_fs = info.image_filesystems.first().map(|fs| {
                    let statfs = fs
                        .fs_id
                        .as_ref()
                        .and_then(|id| readings.filesystems.get(&id.mountpoint));
                    usage_on_fs(
                        &nanos_to_time(fs.timestamp).unwrap_or_else(|| time.clone()),
                        fs.used_bytes.as_ref().map(|v| v.value),
                        fs.inodes_used.as_ref().map(|v| v.value),
                        statfs,
                    )
                });
                RuntimeStats {
                    // The container filesystem is the image filesystem unless the runtime
                    // says otherwise (the kubelet reports the same value for both).
                    container_fs: image_fs.clone(),
                    image_fs,
                }
            }),
            rlimit: full.then(|| RlimitStats {
                time: time.clone(),
                maxpid: readings.task_limit.and_then(|v| i64::try_from(v).ok()),
                curproc: readings.tasks.and_then(|v| i64::try_from(v).ok()),
            }),
            swap: None,
        };
        Summary { node, pods }
    }
}

/// Reads every file a request needs.
#[allow(clippy::too_many_arguments)]
fn read_everything(
    reader: &CgroupReader,
    settings: &StatsSettings,
    kubepods: Option<&str>,
    plans: &[PodPlan],
    mounts: &[String],
    scope: Scope,
    (now, started): (jiff::Timestamp, Instant),
    volumes: &VolumeCache,
) -> Readings {
    let proc_root = settings.proc_root.as_path();
    let full = scope == Scope::Full;
    let mut r = Readings {
        root: keep_sample("/", reader.sample("/")),
        kubepods: kubepods.and_then(|k| keep_sample(k, reader.sample(k))),
        mem_total: keep("meminfo", proc::read_meminfo(proc_root)).map(|m| m.mem_total),
        boot_time: keep("uptime", proc::read_uptime(proc_root)).and_then(|up| {
            let boot = now
                .checked_sub(jiff::SignedDuration::try_from(up).ok()?)
                .ok()?;
            // Whole seconds, as the kubelet's boot time.
            jiff::Timestamp::from_second(boot.as_second()).ok()
        }),
        ..Default::default()
    };
    for (slot, resource) in
        r.node_pressure
            .iter_mut()
            .zip([Resource::Cpu, Resource::Memory, Resource::Io])
    {
        *slot = keep("node pressure", proc::read_pressure(proc_root, resource)).flatten();
    }
    if full {
        r.task_limit = keep("task limit", proc::read_task_limit(proc_root)).flatten();
        r.tasks = keep("loadavg", proc::read_loadavg(proc_root)).map(|l| u64::from(l.max));
        r.node_fs = keep("nodefs", proc::filesystem_usage(&settings.root_dir));
        r.logs_fs = keep(
            "pod logs fs",
            proc::filesystem_usage(&settings.pod_logs_dir),
        );
        for m in mounts {
            if let Some(fs) = keep("image fs", proc::filesystem_usage(Path::new(m))) {
                r.filesystems.insert(m.clone(), fs);
            }
        }
    }
    for plan in plans {
        r.pods.push(
            plan.cgroup
                .as_deref()
                .and_then(|c| keep_sample(c, reader.sample(c))),
        );
        r.containers.push(
            plan.containers
                .iter()
                .map(|c| {
                    c.cgroup
                        .as_deref()
                        .and_then(|cg| keep_sample(cg, reader.sample(cg)))
                })
                .collect(),
        );
        r.logs.push(
            plan.containers
                .iter()
                .map(|c| if full { dir_usage(&c.log_dir) } else { None })
                .collect(),
        );
        if full {
            r.volumes.push(volumes.get(&plan.pod_ref.uid, started, || {
                read_pod_volumes(&plan.pod_dir, plan.ephemeral_volumes.as_ref())
            }));
            r.etc_hosts.push(dir_usage(&plan.pod_dir.join("etc-hosts")));
        }
    }
    r
}

/// The cgroups cAdvisor reports, from one gathering: the root (`/`), `kubepods`, each pod's
/// cgroup and each running container's, labelled as the kubelet's cAdvisor labels them.
/// Cgroups whose files were gone (a container that exited after the list) are left out.
fn cadvisor_input(
    plans: &[PodPlan],
    readings: &Readings,
    networks: &[Vec<NetworkSeries>],
    kubepods: Option<&str>,
    at: jiff::Timestamp,
    machine: Option<MachineInfo>,
) -> CadvisorInput {
    let id = |path: &str| {
        super::cgroup::relative_cgroup_path(path)
            .map(|r| format!("/{}", r.display()))
            .unwrap_or_else(|_| path.to_string())
    };
    let mut cgroups = Vec::new();
    let node = |path: &str, sample: &CgroupSample| CgroupSeries {
        labels: SeriesLabels {
            id: id(path),
            ..SeriesLabels::default()
        },
        sample: *sample,
        start_time: None,
        fs: Vec::new(),
        network: Vec::new(),
        cpu_spec: None,
    };
    if let Some(root) = &readings.root {
        cgroups.push(node("/", root));
    }
    if let (Some(path), Some(sample)) = (kubepods, &readings.kubepods) {
        cgroups.push(node(path, sample));
    }
    for (i, plan) in plans.iter().enumerate() {
        if let (Some(path), Some(Some(sample))) = (&plan.cgroup, readings.pods.get(i)) {
            cgroups.push(CgroupSeries {
                labels: SeriesLabels {
                    id: id(path),
                    pod: plan.pod_ref.name.clone(),
                    namespace: plan.pod_ref.namespace.clone(),
                    ..SeriesLabels::default()
                },
                sample: *sample,
                start_time: None,
                fs: Vec::new(),
                network: networks.get(i).cloned().unwrap_or_default(),
                cpu_spec: None,
            });
        }
        for (j, c) in plan.containers.iter().enumerate() {
            let (Some(path), Some(Some(sample))) = (
                &c.cgroup,
                readings.containers.get(i).and_then(|cs| cs.get(j)),
            ) else {
                continue;
            };
            // The writable layer on its filesystem: what the runtime counts as the
            // container's use, and the filesystem's size as its limit.
            let fs = c
                .writable_layer
                .as_ref()
                .and_then(|w| {
                    let mountpoint = w.fs_id.as_ref()?.mountpoint.clone();
                    Some(FsSeries {
                        usage: w.used_bytes.as_ref()?.value,
                        limit: readings.filesystems.get(&mountpoint).map(|f| f.capacity),
                        device: mountpoint,
                    })
                })
                .into_iter()
                .collect();
            cgroups.push(CgroupSeries {
                labels: SeriesLabels {
                    id: id(path),
                    container: c.name.clone(),
                    pod: plan.pod_ref.name.clone(),
                    namespace: plan.pod_ref.namespace.clone(),
                    image: c.image.clone(),
                    name: c.id.clone(),
                },
                sample: *sample,
                start_time: Some(c.created.0),
                fs,
                network: Vec::new(),
                cpu_spec: None,
            });
        }
    }
    CadvisorInput {
        at,
        cgroups,
        machine,
    }
}

/// (mount point, source) of every mount in a mountinfo file.
fn read_mount_sources(path: &Path) -> Result<Vec<(PathBuf, String)>> {
    use procfs::FromRead;
    let infos = procfs::process::MountInfos::from_file(path).map_err(|source| Error::Proc {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(infos
        .into_iter()
        .filter_map(|m| Some((m.mount_point, m.mount_source?)))
        .collect())
}

/// A pod's interfaces, from `/proc/<pid>/net/dev` of the first process found in one of its
/// containers' cgroups (every container of a pod shares its network namespace). Empty when
/// none has a process left or the file cannot be read.
fn pod_network(
    reader: &CgroupReader,
    proc_root: &Path,
    container_cgroups: &[String],
) -> Vec<NetworkSeries> {
    use procfs::FromRead;
    let Some(pid) = container_cgroups
        .iter()
        .find_map(|cg| reader.first_pid(cg).ok().flatten())
    else {
        return Vec::new();
    };
    let path = proc_root.join(pid.to_string()).join("net/dev");
    let Some(status) = keep(
        "net/dev",
        procfs::net::InterfaceDeviceStatus::from_file(&path).map_err(|source| Error::Proc {
            path: path.clone(),
            source,
        }),
    ) else {
        return Vec::new();
    };
    let mut interfaces: Vec<NetworkSeries> = status
        .0
        .into_values()
        .filter(|d| interface_reported(&d.name))
        .map(|d| NetworkSeries {
            interface: d.name,
            rx_bytes: d.recv_bytes,
            rx_packets: d.recv_packets,
            rx_dropped: d.recv_drop,
            rx_errors: d.recv_errs,
            tx_bytes: d.sent_bytes,
            tx_packets: d.sent_packets,
            tx_dropped: d.sent_drop,
            tx_errors: d.sent_errs,
        })
        .collect();
    interfaces.sort_by(|a, b| a.interface.cmp(&b.interface));
    interfaces
}
