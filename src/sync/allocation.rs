//! The allocation manager (the kubelet's `pkg/kubelet/allocation`): the resources admitted per
//! pod (`allocated_pods_state`) and the resources nodelet last applied to the runtime and the
//! pod cgroup (`actuated_pods_state`), each a checkpoint file under the root directory (JSON
//! with a checksum, written atomically: a temporary file, fsync, rename) loaded at start, so a
//! restart neither re-admits a pod nor forgets a resize it allocated or applied. It also holds
//! each pod's resize conditions (`PodResizePending`, `PodResizeInProgress`) and the pods whose
//! resize waits for room (`Deferred`), to retry when a pod leaves or another resize is applied.
//!
//! The runtime's report of a container's resources (`ContainerStatus.resources`) is not what
//! decides whether an update is still due: containerd 1.6 never fills it. The actuated record
//! does.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use serde::{Deserialize, Serialize};

use crate::podspec::pod_uid;
use crate::podspec::resize::{
    allocation_of, decide, with_allocation, Decision, PodAllocation, ResizeInputs,
};
use crate::podspec::resources::{pod_overhead, pod_requests, NodeAllocatable};

pub const ALLOCATED_FILE: &str = "allocated_pods_state";
pub const ACTUATED_FILE: &str = "actuated_pods_state";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("checkpoint {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The kubelet's refusal (`NewStateCheckpoint`), naming the file and the way out.
    #[error(
        "could not restore state from checkpoint: {message}, please drain this node and delete \
         pod resource information checkpoint file {path:?} before restarting nodelet"
    )]
    Corrupt { path: PathBuf, message: String },
}

/// What was last applied to one container: its ID (a new instance starts from the allocation
/// it was created with) and the resources.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActuatedContainer {
    pub container_id: String,
    pub resources: ResourceRequirements,
}

/// What was last applied to one pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActuatedPod {
    pub containers: BTreeMap<String, ActuatedContainer>,
    /// The allocation the pod cgroup was last written from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_cgroup: Option<PodAllocation>,
}

/// One checkpoint file's contents.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct File<T> {
    data: T,
    checksum: String,
}

fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The checkpoint text for `data`.
pub fn encode<T: Serialize>(data: &T) -> String {
    let body = serde_json::to_string(data).unwrap_or_default();
    let file = serde_json::json!({
        "data": serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default(),
        "checksum": format!("{:016x}", fnv64(body.as_bytes())),
    });
    file.to_string()
}

/// The data of a checkpoint text, or why it is not one (a bad checksum included).
pub fn decode<T: Serialize + for<'de> Deserialize<'de>>(text: &str) -> Result<T, String> {
    let file: File<T> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let body = serde_json::to_string(&file.data).map_err(|e| e.to_string())?;
    let sum = format!("{:016x}", fnv64(body.as_bytes()));
    if sum != file.checksum {
        return Err(format!(
            "checksum mismatch: recorded {}, computed {sum}",
            file.checksum
        ));
    }
    Ok(file.data)
}

/// The kubelet's checkpoint of the same name (`pkg/kubelet/allocation/state`, v1.33 and
/// later): `data` is the JSON *text* of `{"entries": {uid: PodResourceInfo}}` and `checksum`
/// the FNV-32a hash of what `hashutil.DeepHashObject` prints for a Go string: `(string)`
/// followed by the text (spew's `%#v`).
#[derive(Deserialize)]
struct KubeletFile {
    data: String,
    checksum: u64,
}

#[derive(Deserialize)]
struct KubeletEntries {
    #[serde(default)]
    entries: Option<BTreeMap<String, KubeletPodInfo>>,
}

/// The kubelet's `PodResourceInfo` (no JSON tags: Go's field names). Its
/// `EmptyDirVolumeLimits` are left out: the kubelet writes them only with the alpha
/// `InPlacePodVerticalScalingMemoryBackedVolumes` gate, which nodelet refuses, and with the
/// gate off the kubelet too sizes memory-backed emptyDirs from the spec.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct KubeletPodInfo {
    #[serde(default)]
    container_resources: Option<BTreeMap<String, ResourceRequirements>>,
    #[serde(default)]
    pod_level_resources: Option<ResourceRequirements>,
}

fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x01000193);
    }
    h
}

/// The kubelet's checksum of a checkpoint's `data` text.
fn kubelet_checksum(data: &str) -> u64 {
    let mut printed = Vec::with_capacity(data.len() + 8);
    printed.extend_from_slice(b"(string)");
    printed.extend_from_slice(data.as_bytes());
    u64::from(fnv32a(&printed))
}

/// The pods of a checkpoint the kubelet wrote, or why it is not one (a bad checksum
/// included, as the kubelet's `CorruptCheckpointError` says it).
fn decode_kubelet(text: &str) -> Result<BTreeMap<String, PodAllocation>, String> {
    let file: KubeletFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let computed = kubelet_checksum(&file.data);
    if computed != file.checksum {
        return Err(format!(
            "checkpoint is corrupted (checksum {}, computed {computed})",
            file.checksum
        ));
    }
    let entries: KubeletEntries = serde_json::from_str(&file.data)
        .map_err(|e| format!("failed to get pod resource information: {e}"))?;
    Ok(entries
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(|(uid, info)| {
            let allocation = PodAllocation {
                containers: info.container_resources.unwrap_or_default(),
                pod_level: info.pod_level_resources,
            };
            (uid, allocation)
        })
        .collect())
}

/// Checkpoint data nodelet reads from either writer: its own format, or the kubelet's (a node
/// taken over from a kubelet v1.33 or later).
trait Checkpointed: Serialize + for<'de> Deserialize<'de> + Default {
    fn from_kubelet(pods: BTreeMap<String, PodAllocation>) -> Self;
}

impl Checkpointed for BTreeMap<String, PodAllocation> {
    fn from_kubelet(pods: BTreeMap<String, PodAllocation>) -> Self {
        pods
    }
}

impl Checkpointed for BTreeMap<String, ActuatedPod> {
    /// The kubelet keys what it applied by container name; the instance it applied it to is
    /// the one running when nodelet takes over (an empty ID, filled in by the first sync).
    /// The pod cgroup is written again on that sync anyway (the pod is adopted).
    fn from_kubelet(pods: BTreeMap<String, PodAllocation>) -> Self {
        pods.into_iter()
            .map(|(uid, allocation)| {
                let containers = allocation
                    .containers
                    .into_iter()
                    .map(|(name, resources)| {
                        let applied = ActuatedContainer {
                            container_id: String::new(),
                            resources,
                        };
                        (name, applied)
                    })
                    .collect();
                let pod = ActuatedPod {
                    containers,
                    pod_cgroup: None,
                };
                (uid, pod)
            })
            .collect()
    }
}

/// The data of a checkpoint text in nodelet's format or the kubelet's (told apart by `data`:
/// an object in nodelet's, a string in the kubelet's).
fn decode_either<T: Checkpointed>(text: &str) -> Result<T, String> {
    let is_kubelets = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .is_some_and(|v| v.get("data").is_some_and(|d| d.is_string()));
    if is_kubelets {
        decode_kubelet(text).map(T::from_kubelet)
    } else {
        decode(text)
    }
}

fn load<T: Checkpointed>(path: &Path) -> Result<T, Error> {
    match std::fs::read_to_string(path) {
        Ok(text) => decode_either(&text).map_err(|message| Error::Corrupt {
            path: path.to_path_buf(),
            message,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn store(path: &Path, text: &str) -> Result<(), Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The two files' paths and texts.
type Texts = [(PathBuf, String); 2];

/// Writes the checkpoint files on a blocking thread, never on a runtime worker (each write
/// waits for `fsync`). Changes come faster than the disk at times (a node's pods admitted at
/// start): the latest texts wait in `pending`, and at most one blocking task writes, taking
/// whatever is latest each time, so the files end at the last state and the queue is one deep.
/// Without a tokio runtime (the unit tests, `nodelet` commands) a write happens at once.
#[derive(Default)]
struct Writer {
    inner: Mutex<WriterState>,
}

#[derive(Default)]
struct WriterState {
    pending: Option<Texts>,
    writing: bool,
}

impl Writer {
    fn submit(self: &Arc<Self>, texts: Texts) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            write_texts(&texts);
            return;
        };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.pending = Some(texts);
        if inner.writing {
            return;
        }
        inner.writing = true;
        let writer = Arc::clone(self);
        handle.spawn_blocking(move || writer.drain());
    }

    fn drain(&self) {
        loop {
            let texts = {
                let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                match inner.pending.take() {
                    Some(texts) => texts,
                    None => {
                        inner.writing = false;
                        return;
                    }
                }
            };
            write_texts(&texts);
        }
    }
}

fn write_texts(texts: &Texts) {
    for (path, text) in texts {
        if let Err(e) = store(path, text) {
            tracing::error!(error = %e, "writing the allocation checkpoint");
        }
    }
}

/// A pod's resize conditions, as the kubelet's status manager keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResizeConditions {
    /// `PodResizePending`: reason, message, the pod generation it was decided for.
    pub pending: Option<(String, String, i64)>,
    /// `PodResizeInProgress`: the generation being actuated and an error (reason `Error`) if
    /// the last attempt failed.
    pub in_progress: Option<(i64, Option<String>)>,
}

#[derive(Default)]
struct State {
    allocated: BTreeMap<String, PodAllocation>,
    actuated: BTreeMap<String, ActuatedPod>,
    conditions: BTreeMap<String, ResizeConditions>,
    /// Pods whose resize is `Deferred`, to retry when room may have appeared: the desired pod
    /// and its place in the kubelet's retry order.
    deferred: BTreeMap<String, DeferredResize>,
    /// The next `DeferredResize::since` (the order in which resizes were deferred).
    next_deferral: u64,
    /// The allocated requests (cpu millicores, memory bytes) of each active pod: what a resize
    /// of another pod is weighed against.
    active: BTreeMap<String, (i64, i64)>,
}

/// A resize waiting for room.
#[derive(Debug, Clone)]
struct DeferredResize {
    /// The pod as desired (its spec's resources).
    pod: Pod,
    rank: ResizeRank,
}

/// Requested cpu millicores and memory bytes.
pub type Requests = (i64, i64);

/// A deferred resize ahead of another in the kubelet's order: its rank, the pod's allocated
/// requests now, and its desired requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AheadResize {
    pub rank: ResizeRank,
    pub current: Requests,
    pub desired: Requests,
}

/// A pending resize's place in the kubelet's retry order (`sortPendingResizes`): one that
/// does not grow the pod's requests first, then the higher pod priority, then Guaranteed before
/// the other classes, then the one deferred longest; a resize not yet deferred comes after all
/// that were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ResizeRank {
    grows: bool,
    priority: std::cmp::Reverse<i32>,
    not_guaranteed: bool,
    since: u64,
}

impl ResizeRank {
    /// `current`: the pod's allocated requests now; `since`: when it was deferred (`u64::MAX`
    /// when it is not).
    pub fn of(pod: &Pod, current: Requests, since: u64) -> Self {
        use crate::podspec::qos::{qos_class, QosClass};
        let desired = requests_of(pod);
        ResizeRank {
            grows: desired.0 > current.0 || desired.1 > current.1,
            priority: std::cmp::Reverse(pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)),
            not_guaranteed: qos_class(pod) != QosClass::Guaranteed,
            since,
        }
    }
}

/// What the resize of a pod of `rank` is weighed against: the other active pods' allocated
/// requests (`others`), plus what every deferred resize ahead of it in the kubelet's order
/// would take, taken greedily in that order as the kubelet's `RetryPendingResizes` would
/// (one that does not fit takes nothing). `ahead` lists each such resize as (its rank, the
/// pod's current allocated requests, its desired requests, whether it fits given what the
/// ones before it took — decided by `fits(others + taken so far)`).
pub fn weighed_against<F>(
    rank: ResizeRank,
    others: Requests,
    ahead: &[AheadResize],
    mut fits: F,
) -> Requests
where
    F: FnMut(usize, Requests) -> bool,
{
    let mut order: Vec<usize> = (0..ahead.len()).filter(|i| ahead[*i].rank < rank).collect();
    order.sort_by_key(|i| ahead[*i].rank);
    let mut taken = (0i64, 0i64);
    for i in order {
        let AheadResize {
            current, desired, ..
        } = ahead[i];
        let load = (
            others.0.saturating_add(taken.0),
            others.1.saturating_add(taken.1),
        );
        if fits(i, load) {
            taken.0 = taken
                .0
                .saturating_add(desired.0.saturating_sub(current.0).max(0));
            taken.1 = taken
                .1
                .saturating_add(desired.1.saturating_sub(current.1).max(0));
        }
    }
    (
        others.0.saturating_add(taken.0),
        others.1.saturating_add(taken.1),
    )
}

/// Wakes a pod's worker (set once the workers exist).
pub type Waker = Arc<dyn Fn(&str) + Send + Sync>;

fn requests_of(pod: &Pod) -> (i64, i64) {
    let r = pod_requests(pod).plus(pod_overhead(pod).unwrap_or_default());
    (r.cpu_milli.unwrap_or(0), r.memory.unwrap_or(0))
}

/// What the allocation manager did with a pod's resize this sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    Unchanged,
    /// A new allocation was made (event `ResizeStarted`).
    Allocated,
    /// Newly pending (event `ResizeDeferred` / `ResizeInfeasible`, Warning).
    NewlyPending {
        reason: &'static str,
        message: String,
    },
    /// Still pending as before.
    StillPending,
}

/// The allocation manager; clones share one state.
#[derive(Clone)]
pub struct AllocationManager {
    dir: Option<PathBuf>,
    state: Arc<Mutex<State>>,
    waker: Arc<std::sync::OnceLock<Waker>>,
    writer: Arc<Writer>,
}

impl AllocationManager {
    /// Loads the checkpoints under `dir`. A corrupt checkpoint is an error: a node that forgot
    /// what it admitted must not guess.
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let allocated = load(&dir.join(ALLOCATED_FILE))?;
        let actuated = load(&dir.join(ACTUATED_FILE))?;
        Ok(AllocationManager {
            dir: Some(dir.to_path_buf()),
            state: Arc::new(Mutex::new(State {
                allocated,
                actuated,
                ..Default::default()
            })),
            waker: Arc::default(),
            writer: Arc::default(),
        })
    }

    /// No files (tests).
    pub fn in_memory() -> Self {
        AllocationManager {
            dir: None,
            state: Arc::new(Mutex::new(State::default())),
            waker: Arc::default(),
            writer: Arc::default(),
        }
    }

    /// How deferred resizes are retried: the pod's worker is woken.
    pub fn set_waker(&self, waker: Waker) {
        let _ = self.waker.set(waker);
    }

    /// Wakes the worker of every pod whose resize is deferred (a pod left, or a resize was
    /// applied: the kubelet's `RetryPendingResizes` triggers).
    pub fn retry_deferred(&self) {
        let uids = self.deferred();
        if let Some(w) = self.waker.get() {
            for uid in uids {
                tracing::debug!(pod.uid = %uid, "retrying a deferred resize");
                w(&uid);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands the state's two files to the writer (called with the state locked, so the
    /// writer's texts are in the order of the changes).
    fn save(&self, state: &State) {
        let Some(dir) = &self.dir else { return };
        let texts = [
            (dir.join(ALLOCATED_FILE), encode(&state.allocated)),
            (dir.join(ACTUATED_FILE), encode(&state.actuated)),
        ];
        self.writer.submit(texts);
    }

    pub fn allocation(&self, uid: &str) -> Option<PodAllocation> {
        self.lock().allocated.get(uid).cloned()
    }

    pub fn is_allocated(&self, uid: &str) -> bool {
        self.lock().allocated.contains_key(uid)
    }

    /// The pod as its allocation says (the spec's resources when it has none yet).
    pub fn allocated_pod(&self, pod: &Pod) -> Pod {
        match self.allocation(pod_uid(pod)) {
            Some(a) => with_allocation(pod, &a),
            None => pod.clone(),
        }
    }

    /// Admission allocated the pod its spec's resources (the kubelet's `AddPod`); a pod that
    /// has an allocation keeps it.
    pub fn admit(&self, pod: &Pod) {
        let mut state = self.lock();
        let uid = pod_uid(pod).to_string();
        if let Some(a) = state.allocated.get(&uid) {
            let r = requests_of(&with_allocation(pod, a));
            state.active.insert(uid, r);
            return;
        }
        state.active.insert(uid.clone(), requests_of(pod));
        state.allocated.insert(uid, allocation_of(pod));
        self.save(&state);
    }

    /// The pod's containers will not run again: its requests stop counting against others'
    /// resizes (its allocation stays until the pod is removed). Deferred resizes are retried.
    pub fn release(&self, uid: &str) {
        let had = self.lock().active.remove(uid).is_some();
        if had {
            self.retry_deferred();
        }
    }

    /// The summed allocated requests (cpu millicores, memory bytes) of every active pod but
    /// `uid`.
    fn others(state: &State, uid: &str) -> (i64, i64) {
        state
            .active
            .iter()
            .filter(|(u, _)| u.as_str() != uid)
            .fold((0i64, 0i64), |(c, m), (_, (rc, rm))| {
                (c.saturating_add(*rc), m.saturating_add(*rm))
            })
    }

    /// The kubelet's `handlePodResourcesResize`: decides the pod's desired resources against
    /// the node's allocatable and the other active pods' allocations, allocates them or records
    /// why not, against the allocated requests of the other active pods.
    pub fn handle_resize(
        &self,
        pod: &Pod,
        allocatable: NodeAllocatable,
        is_static: bool,
    ) -> Handled {
        let uid = pod_uid(pod).to_string();
        let generation = pod.metadata.generation.unwrap_or(0);
        let mut state = self.lock();
        let Some(allocated) = state.allocated.get(&uid).cloned() else {
            // Not admitted through the manager (standalone static pods, tests): its spec is
            // what it was admitted with.
            state.active.insert(uid.clone(), requests_of(pod));
            state.allocated.insert(uid, allocation_of(pod));
            self.save(&state);
            return Handled::Unchanged;
        };
        state
            .active
            .insert(uid.clone(), requests_of(&with_allocation(pod, &allocated)));
        let rank = state.deferred.get(&uid).map_or_else(
            || {
                ResizeRank::of(
                    pod,
                    requests_of(&with_allocation(pod, &allocated)),
                    u64::MAX,
                )
            },
            |d| d.rank,
        );
        // Deferred resizes ahead of this one in the kubelet's order have the first claim on
        // the room (their workers were woken too; whichever syncs first, the order holds).
        let (ahead_uids, ahead): (Vec<String>, Vec<AheadResize>) = state
            .deferred
            .iter()
            .filter(|(u, _)| **u != uid)
            .map(|(u, d)| {
                let current = state.active.get(u).copied().unwrap_or((0, 0));
                (
                    u.clone(),
                    AheadResize {
                        rank: d.rank,
                        current,
                        desired: requests_of(&d.pod),
                    },
                )
            })
            .unzip();
        let others = Self::others(&state, &uid);
        let (others_cpu_milli, others_memory) =
            weighed_against(rank, others, &ahead, |i, (cpu, memory)| {
                let u = &ahead_uids[i];
                let (Some(d), Some(a)) = (state.deferred.get(u), state.allocated.get(u)) else {
                    return false;
                };
                // The load given is every active pod's but `uid`'s; the ahead pod's own
                // allocation is in it, and `decide` wants the others of that pod.
                let own = state.active.get(u).copied().unwrap_or((0, 0));
                let this = state.active.get(&uid).copied().unwrap_or((0, 0));
                decide(&ResizeInputs {
                    desired: &d.pod,
                    allocated: a,
                    others_cpu_milli: cpu.saturating_sub(own.0).saturating_add(this.0),
                    others_memory: memory.saturating_sub(own.1).saturating_add(this.1),
                    allocatable,
                    is_static: false,
                }) == Decision::Allocate
            });
        let decision = decide(&ResizeInputs {
            desired: pod,
            allocated: &allocated,
            others_cpu_milli,
            others_memory,
            allocatable,
            is_static,
        });
        match decision {
            Decision::NoChange => {
                state.deferred.remove(&uid);
                let c = state.conditions.entry(uid).or_default();
                c.pending = None;
                Handled::Unchanged
            }
            Decision::Allocate => {
                state.deferred.remove(&uid);
                state.allocated.insert(uid.clone(), allocation_of(pod));
                state.active.insert(uid.clone(), requests_of(pod));
                let c = state.conditions.entry(uid).or_default();
                c.pending = None;
                c.in_progress = Some((generation, None));
                self.save(&state);
                Handled::Allocated
            }
            Decision::Pending { reason, message } => {
                if reason == crate::podspec::resize::REASON_DEFERRED {
                    let since = match state.deferred.get(&uid) {
                        Some(d) => d.rank.since,
                        None => {
                            state.next_deferral += 1;
                            state.next_deferral
                        }
                    };
                    state.deferred.insert(
                        uid.clone(),
                        DeferredResize {
                            pod: pod.clone(),
                            rank: ResizeRank::of(
                                pod,
                                requests_of(&with_allocation(pod, &allocated)),
                                since,
                            ),
                        },
                    );
                } else {
                    state.deferred.remove(&uid);
                }
                let c = state.conditions.entry(uid).or_default();
                let new = Some((reason.to_string(), message.clone(), generation));
                if c.pending == new {
                    Handled::StillPending
                } else {
                    c.pending = new;
                    Handled::NewlyPending { reason, message }
                }
            }
        }
    }

    /// The pods with a `Deferred` resize: the ones to sync again when room may have appeared
    /// (a pod left, another resize was applied).
    pub fn deferred(&self) -> Vec<String> {
        self.lock().deferred.keys().cloned().collect()
    }

    pub fn conditions(&self, uid: &str) -> ResizeConditions {
        self.lock().conditions.get(uid).cloned().unwrap_or_default()
    }

    /// The actuation failed (`PodResizeInProgress` reason `Error`) or went on.
    pub fn set_in_progress_error(&self, uid: &str, generation: i64, error: Option<String>) {
        let mut state = self.lock();
        let c = state.conditions.entry(uid.to_string()).or_default();
        let gen = c.in_progress.as_ref().map_or(generation, |(g, _)| *g);
        c.in_progress = Some((gen, error));
    }

    /// Everything allocated is applied: `PodResizeInProgress` goes.
    pub fn clear_in_progress(&self, uid: &str) -> bool {
        let mut state = self.lock();
        state
            .conditions
            .get_mut(uid)
            .and_then(|c| c.in_progress.take())
            .is_some()
    }

    pub fn actuated(&self, uid: &str) -> ActuatedPod {
        self.lock().actuated.get(uid).cloned().unwrap_or_default()
    }

    /// Records what was applied to a container.
    pub fn set_actuated_container(&self, uid: &str, name: &str, actuated: ActuatedContainer) {
        let mut state = self.lock();
        let pod = state.actuated.entry(uid.to_string()).or_default();
        if pod.containers.get(name) == Some(&actuated) {
            return;
        }
        pod.containers.insert(name.to_string(), actuated);
        self.save(&state);
    }

    /// Records the allocation the pod cgroup was written from.
    pub fn set_actuated_pod_cgroup(&self, uid: &str, allocation: PodAllocation) {
        let mut state = self.lock();
        let pod = state.actuated.entry(uid.to_string()).or_default();
        if pod.pod_cgroup.as_ref() == Some(&allocation) {
            return;
        }
        pod.pod_cgroup = Some(allocation);
        self.save(&state);
    }

    /// The pod is gone: its allocation, actuation and conditions go. Returns the pods whose
    /// deferred resize may fit now.
    pub fn remove(&self, uid: &str) -> Vec<String> {
        let retry = {
            let mut state = self.lock();
            let had = state.allocated.remove(uid).is_some() | state.actuated.remove(uid).is_some();
            state.active.remove(uid);
            state.conditions.remove(uid);
            state.deferred.remove(uid);
            if had {
                self.save(&state);
            }
            state.deferred.keys().cloned().collect()
        };
        self.retry_deferred();
        retry
    }

    /// Drops the state of every pod not in `keep` (after all sources reported).
    pub fn retain(&self, keep: &BTreeSet<String>) -> Vec<String> {
        let gone: Vec<String> = {
            let state = self.lock();
            state
                .allocated
                .keys()
                .chain(state.actuated.keys())
                .filter(|u| !keep.contains(*u))
                .cloned()
                .collect()
        };
        let mut retry = Vec::new();
        for uid in gone {
            retry = self.remove(&uid);
        }
        retry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podspec::resources::test_support::{container, pod};

    fn uid(mut p: Pod, u: &str) -> Pod {
        p.metadata.uid = Some(u.into());
        p.metadata.generation = Some(1);
        p
    }

    fn node() -> NodeAllocatable {
        NodeAllocatable {
            cpu_milli: 1000,
            memory: 1 << 30,
            ephemeral_storage: None,
        }
    }

    #[test]
    fn checkpoint_round_trip_and_checksum() {
        let p = uid(
            pod(vec![container("c", "cpu=100m", "cpu=200m")], vec![]),
            "a",
        );
        let data: BTreeMap<String, PodAllocation> = [("a".to_string(), allocation_of(&p))].into();
        let text = encode(&data);
        let back: BTreeMap<String, PodAllocation> = decode(&text).unwrap();
        assert_eq!(back, data);
        let cases = [
            (text.replace("200m", "300m"), "checksum mismatch"),
            ("{".to_string(), "EOF"),
            (
                r#"{"data":{},"checksum":"0"}"#.to_string(),
                "checksum mismatch",
            ),
        ];
        for (bad, want) in cases {
            let err = decode::<BTreeMap<String, PodAllocation>>(&bad).unwrap_err();
            assert!(err.contains(want), "{bad}: {err}");
        }
    }

    #[test]
    fn a_restart_keeps_allocation_and_actuation() {
        let dir = tempfile::tempdir().unwrap();
        let p = uid(
            pod(vec![container("c", "cpu=100m", "cpu=200m")], vec![]),
            "a",
        );
        let m = AllocationManager::load(dir.path()).unwrap();
        m.admit(&p);
        m.set_actuated_container(
            "a",
            "c",
            ActuatedContainer {
                container_id: "id1".into(),
                resources: allocation_of(&p).containers["c"].clone(),
            },
        );
        // The spec changes while nodelet is down: the allocation stands.
        let resized = uid(
            pod(vec![container("c", "cpu=100m", "cpu=900m")], vec![]),
            "a",
        );
        let again = AllocationManager::load(dir.path()).unwrap();
        again.admit(&resized);
        assert_eq!(again.allocation("a"), Some(allocation_of(&p)));
        assert_eq!(again.actuated("a").containers["c"].container_id, "id1");
        assert_eq!(again.allocated_pod(&resized), p);
        // Gone: both files forget it.
        again.remove("a");
        let third = AllocationManager::load(dir.path()).unwrap();
        assert!(!third.is_allocated("a"));
        assert!(third.actuated("a").containers.is_empty());
        // A corrupt file is an error, not an empty state.
        std::fs::write(
            dir.path().join(ALLOCATED_FILE),
            "{\"data\":{},\"checksum\":\"1\"}",
        )
        .unwrap();
        assert!(matches!(
            AllocationManager::load(dir.path()),
            Err(Error::Corrupt { .. })
        ));
    }

    /// What the kubelet v1.37.2's own code wrote (tests/support/k8s/kubelet-checkpoint).
    fn kubelet_checkpoints() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kubelet-checkpoints")
    }

    #[test]
    fn the_kubelets_checksum_is_fnv32a_of_the_printed_string() {
        let text = std::fs::read_to_string(kubelet_checkpoints().join(ALLOCATED_FILE)).unwrap();
        let file: KubeletFile = serde_json::from_str(&text).unwrap();
        assert_eq!(kubelet_checksum(&file.data), file.checksum);
        assert_ne!(kubelet_checksum(&format!("{} ", file.data)), file.checksum);
        // FNV-32a's published test vectors.
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn a_node_taken_over_from_the_kubelet_keeps_its_allocations() {
        let dir = tempfile::tempdir().unwrap();
        for f in [ALLOCATED_FILE, ACTUATED_FILE] {
            std::fs::copy(kubelet_checkpoints().join(f), dir.path().join(f)).unwrap();
        }
        let m = AllocationManager::load(dir.path()).unwrap();
        let resized = "0b7e2c8a-1d2f-4c55-9e0a-5f6b7c8d9e01";
        let cpu = |r: &ResourceRequirements, which: &str| {
            let list = if which == "requests" {
                &r.requests
            } else {
                &r.limits
            };
            list.as_ref()
                .and_then(|l| l.get("cpu"))
                .map(|q| q.0.clone())
        };
        let allocated = m.allocation(resized).expect("the resized pod's allocation");
        assert_eq!(
            cpu(&allocated.containers["app"], "requests").as_deref(),
            Some("300m")
        );
        assert_eq!(
            cpu(&allocated.containers["app"], "limits").as_deref(),
            Some("300m")
        );
        assert_eq!(
            cpu(&allocated.containers["sidecar"], "requests").as_deref(),
            Some("50m")
        );
        assert_eq!(allocated.pod_level, None);
        // What the kubelet applied is not yet what it allocated: the resize is still due.
        let actuated = m.actuated(resized);
        let app = &actuated.containers["app"];
        assert_eq!(cpu(&app.resources, "requests").as_deref(), Some("200m"));
        assert_eq!(
            app.container_id, "",
            "the instance is the one running at takeover"
        );
        let pod_level = m
            .allocation("5c1d9f3e-2a4b-4d6c-8e7f-9a0b1c2d3e02")
            .and_then(|a| a.pod_level)
            .expect("pod-level resources");
        assert_eq!(cpu(&pod_level, "limits").as_deref(), Some("2"));

        // nodelet writes its own format from then on, and reads it back.
        m.remove("5c1d9f3e-2a4b-4d6c-8e7f-9a0b1c2d3e02");
        let again = AllocationManager::load(dir.path()).unwrap();
        assert_eq!(again.allocation(resized), Some(allocated));
        assert!(!again.is_allocated("5c1d9f3e-2a4b-4d6c-8e7f-9a0b1c2d3e02"));
    }

    #[test]
    fn a_corrupt_checkpoint_is_refused_naming_the_file_and_the_way_out() {
        let kubelets = std::fs::read_to_string(kubelet_checkpoints().join(ALLOCATED_FILE)).unwrap();
        let file: KubeletFile = serde_json::from_str(&kubelets).unwrap();
        let cases = [
            // The kubelet's, one byte of its data changed.
            (
                kubelets.replace("300m", "900m"),
                format!("checkpoint is corrupted (checksum {}", file.checksum),
            ),
            // The kubelet's, its data not the kubelet's structure.
            (
                {
                    let data = r#"{"entries":[]}"#;
                    serde_json::json!({"data": data, "checksum": kubelet_checksum(data)})
                        .to_string()
                },
                "failed to get pod resource information".to_string(),
            ),
            // nodelet's own, checksum wrong.
            (
                r#"{"data":{},"checksum":"1"}"#.to_string(),
                "checksum mismatch".to_string(),
            ),
            ("not json".to_string(), "expected".to_string()),
        ];
        for (text, cause) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(ALLOCATED_FILE);
            std::fs::write(&path, &text).unwrap();
            let err = AllocationManager::load(dir.path()).err().expect("refused");
            let message = err.to_string();
            assert!(
                message.starts_with("could not restore state from checkpoint: "),
                "{message}"
            );
            assert!(message.contains(&cause), "{text}: {message}");
            assert!(
                message.ends_with(&format!(
                    ", please drain this node and delete pod resource information checkpoint \
                     file {path:?} before restarting nodelet"
                )),
                "{message}"
            );
        }
    }

    #[tokio::test]
    async fn checkpoint_writes_leave_the_runtime_and_end_at_the_last_state() {
        let dir = tempfile::tempdir().unwrap();
        let m = AllocationManager::load(dir.path()).unwrap();
        for i in 0..50 {
            let p = uid(
                pod(vec![container("c", "cpu=100m", "cpu=200m")], vec![]),
                &format!("pod-{i}"),
            );
            m.admit(&p);
        }
        m.remove("pod-7");
        // The writer drains on a blocking thread; wait until the file holds the last state.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let on_disk = AllocationManager::load(dir.path()).unwrap();
            if on_disk.is_allocated("pod-49") && !on_disk.is_allocated("pod-7") {
                assert!(on_disk.is_allocated("pod-0"));
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never written");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    #[test]
    fn admission_counts_allocations_and_deferred_resizes_are_retried() {
        let m = AllocationManager::in_memory();
        let a = uid(pod(vec![container("c", "cpu=600m", "")], vec![]), "a");
        let b = uid(pod(vec![container("c", "cpu=300m", "")], vec![]), "b");
        m.admit(&a);
        m.admit(&b);
        // b asks for 500m: 600m + 500m > 1000m → Deferred.
        let b2 = uid(pod(vec![container("c", "cpu=500m", "")], vec![]), "b");
        let got = m.handle_resize(&b2, node(), false);
        assert_eq!(
            got,
            Handled::NewlyPending {
                reason: "Deferred",
                message: "Node didn't have enough resource: cpu, requested: 500, used: 600, capacity: 1000".into()
            }
        );
        assert_eq!(m.handle_resize(&b2, node(), false), Handled::StillPending);
        assert_eq!(m.deferred(), vec!["b".to_string()]);
        // The allocation, not the spec, is what b runs with and what others count.
        assert_eq!(m.allocated_pod(&b2), b);
        // a ends: b's resize is retried (its worker woken), and now fits.
        let woken = Arc::new(Mutex::new(Vec::<String>::new()));
        let w = woken.clone();
        m.set_waker(Arc::new(move |uid: &str| {
            w.lock().unwrap().push(uid.to_string())
        }));
        m.release("a");
        assert_eq!(*woken.lock().unwrap(), vec!["b".to_string()]);
        assert_eq!(m.handle_resize(&b2, node(), false), Handled::Allocated);
        assert!(m.deferred().is_empty());
        assert_eq!(m.conditions("b").pending, None);
        assert_eq!(m.conditions("b").in_progress, Some((1, None)));
        assert!(m.clear_in_progress("b"));
    }

    /// The kubelet's order among pending resizes: when room appears for one of two deferred
    /// resizes, the higher-priority pod gets it whichever worker syncs first; then priority
    /// ties go to Guaranteed over Burstable, then to the one deferred first.
    #[test]
    fn room_goes_to_deferred_resizes_in_the_kubelets_order() {
        let with_priority = |mut p: Pod, priority: i32| {
            p.spec.as_mut().unwrap().priority = Some(priority);
            p
        };
        let cpu = |name: &str, request: &str, priority: i32| {
            with_priority(
                uid(
                    pod(vec![container("c", &format!("cpu={request}"), "")], vec![]),
                    name,
                ),
                priority,
            )
        };
        let m = AllocationManager::in_memory();
        for p in [
            cpu("keep", "500m", 0),
            cpu("leaver", "300m", 0),
            cpu("low", "100m", 0),
            cpu("high", "100m", 1000),
        ] {
            m.admit(&p);
        }
        // Both ask for 400m (+300m each) with 0 free: both deferred, low first.
        let (low2, high2) = (cpu("low", "400m", 0), cpu("high", "400m", 1000));
        let deferred = |h: Handled| {
            matches!(
                h,
                Handled::NewlyPending {
                    reason: "Deferred",
                    ..
                } | Handled::StillPending
            )
        };
        assert!(deferred(m.handle_resize(&low2, node(), false)));
        assert!(deferred(m.handle_resize(&high2, node(), false)));
        // leaver goes: 300m free, room for one of them. low syncs first and still waits (on
        // its own it would fit: 500m + 100m + 400m), high's claim counted in the use.
        m.release("leaver");
        assert_eq!(m.handle_resize(&low2, node(), false), Handled::StillPending);
        assert_eq!(
            m.conditions("low")
                .pending
                .map(|(_, message, _)| message)
                .as_deref(),
            Some(
                "Node didn't have enough resource: cpu, requested: 400, used: 900, capacity: 1000"
            )
        );
        assert_eq!(m.handle_resize(&high2, node(), false), Handled::Allocated);
        assert_eq!(m.deferred(), vec!["low".to_string()]);
        // keep goes too: now low fits.
        m.release("keep");
        assert_eq!(m.handle_resize(&low2, node(), false), Handled::Allocated);
        assert!(m.deferred().is_empty());
    }

    /// `weighed_against`: only the resizes ahead in rank count, greedily, and one that does not
    /// fit takes nothing.
    #[test]
    fn weighed_against_table() {
        let r = |priority: i32, qos: u8, since: u64| ResizeRank {
            grows: true,
            priority: std::cmp::Reverse(priority),
            not_guaranteed: qos != 0,
            since,
        };
        let me = r(0, 1, 5);
        // (case, ahead, which fit, want)
        let a = |rank: ResizeRank, current: Requests, desired: Requests| AheadResize {
            rank,
            current,
            desired,
        };
        let cases: Vec<(&str, Vec<AheadResize>, Vec<bool>, Requests)> = vec![
            ("none", vec![], vec![], (100, 10)),
            (
                "a higher priority takes its growth",
                vec![a(r(10, 2, 9), (50, 0), (80, 5))],
                vec![true],
                (130, 15),
            ),
            (
                "a lower priority does not count",
                vec![a(r(-1, 0, 1), (50, 0), (80, 0))],
                vec![true],
                (100, 10),
            ),
            (
                "Guaranteed before Burstable at equal priority",
                vec![a(r(0, 0, 9), (0, 0), (10, 0))],
                vec![true],
                (110, 10),
            ),
            (
                "BestEffort with Burstable, deferred earlier",
                vec![a(r(0, 2, 1), (0, 0), (10, 0))],
                vec![true],
                (110, 10),
            ),
            (
                "deferred earlier at equal priority and QoS",
                vec![a(r(0, 1, 4), (0, 0), (10, 0))],
                vec![true],
                (110, 10),
            ),
            (
                "deferred later",
                vec![a(r(0, 1, 6), (0, 0), (10, 0))],
                vec![true],
                (100, 10),
            ),
            (
                "one that does not fit takes nothing",
                vec![
                    a(r(5, 0, 1), (0, 0), (999, 0)),
                    a(r(4, 0, 1), (0, 0), (20, 0)),
                ],
                vec![false, true],
                (120, 10),
            ),
            (
                "a shrink takes nothing",
                vec![a(r(5, 0, 1), (50, 50), (10, 10))],
                vec![true],
                (100, 10),
            ),
        ];
        // A resize that does not grow the pod's requests goes before any that does, whatever
        // its priority: nothing is ahead of it.
        let shrink = ResizeRank {
            grows: false,
            ..r(-5, 1, u64::MAX)
        };
        assert!(shrink < r(1000, 0, 1));
        assert_eq!(
            weighed_against(
                shrink,
                (100, 10),
                &[a(r(1000, 0, 1), (0, 0), (10, 0))],
                |_, _| true
            ),
            (100, 10)
        );
        for (case, ahead, fit, want) in cases {
            let got = weighed_against(me, (100, 10), &ahead, |i, _| fit[i]);
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn retain_drops_pods_that_are_gone() {
        let m = AllocationManager::in_memory();
        m.admit(&uid(pod(vec![container("c", "cpu=1m", "")], vec![]), "a"));
        m.admit(&uid(pod(vec![container("c", "cpu=1m", "")], vec![]), "b"));
        m.retain(&["b".to_string()].into());
        assert!(!m.is_allocated("a"));
        assert!(m.is_allocated("b"));
    }
}
