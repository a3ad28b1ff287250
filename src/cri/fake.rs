//! An in-memory CRI runtime for component tests. It keeps sandboxes, containers and images in
//! maps, stamps times from tokio's clock (so paused-clock tests see exact times), records every
//! call in order, and lets a test make containers exit or calls fail.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::{api, Error, ImageService, Result, Runtime};
use crate::clock::Clock;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub at: tokio::time::Instant,
    pub op: &'static str,
    /// Sandbox `namespace/name`, container name, or image, whichever the call is about.
    pub target: String,
    pub detail: String,
}

#[derive(Debug, Clone)]
struct FakeSandbox {
    config: api::PodSandboxConfig,
    /// The handler RunPodSandbox was given (`""`: the default).
    runtime_handler: String,
    state: api::PodSandboxState,
    /// The sandbox task's `processStatus` in the verbose status (containerd's words:
    /// `running`, `stopped`, `deleted`).
    process: &'static str,
    created_at: i64,
    ip: String,
}

#[derive(Debug, Clone)]
struct FakeContainer {
    sandbox_id: String,
    config: api::ContainerConfig,
    state: api::ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
    image_ref: String,
}

#[derive(Default)]
struct State {
    next_id: u64,
    sandboxes: BTreeMap<String, FakeSandbox>,
    containers: BTreeMap<String, FakeContainer>,
    images: HashSet<String>,
    pullable: HashSet<String>,
    failures: HashMap<&'static str, VecDeque<tonic::Status>>,
    /// Calls that panic once (a bug in a part of nodelet under the call, as a test sees it).
    panics: HashSet<&'static str>,
    calls: Vec<Call>,
    /// ContainerStatus calls (reads are not in `calls`): for tests of what is asked how often.
    container_status_reads: usize,
    /// Exit code a container reports when stopped (per container name); 143 if unset.
    stop_exit_codes: HashMap<String, i32>,
    /// Containers (by name) that ignore the stop signal: StopContainer waits its whole timeout,
    /// then they die of SIGKILL (137).
    ignores_sigterm: HashSet<String>,
    /// How ExecSync behaves per container name: (exit code, how long it takes).
    exec_behaviour: HashMap<String, (i32, Duration)>,
    /// How long a PullImage takes (tokio time).
    pull_delay: Duration,
    /// How long a CreateContainer takes after the container exists (tokio time): the window
    /// in which the runtime holds a container its caller has no ID of yet.
    create_delay: Duration,
    /// Images that pull only with this username in the AuthConfig (else 401 Unauthorized).
    pull_users: HashMap<String, String>,
    /// `NetworkReady=false` with this reason and message; ready when `None`.
    network_not_ready: Option<(String, String)>,
}

#[derive(Clone)]
pub struct FakeRuntime {
    state: Arc<Mutex<State>>,
    clock: Clock,
    /// Container IDs whose state changed, for tests that wire the fake to a PLEG.
    changes: broadcast::Sender<String>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new(Clock::system())
    }
}

impl FakeRuntime {
    pub fn new(clock: Clock) -> Self {
        let (changes, _) = broadcast::channel(1024);
        FakeRuntime {
            state: Arc::default(),
            clock,
            changes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another test thread panicked; the data is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_nanos(&self) -> i64 {
        i64::try_from(self.clock.now().as_nanosecond()).unwrap_or(i64::MAX)
    }

    /// Makes an image present on the node.
    pub fn add_image(&self, image: &str) {
        self.lock().images.insert(image.to_string());
    }

    /// The `NetworkReady` condition from now on: `Some((reason, message))` is false with
    /// those, `None` true (the default).
    pub fn set_network_not_ready(&self, not_ready: Option<(&str, &str)>) {
        self.lock().network_not_ready = not_ready.map(|(r, m)| (r.to_string(), m.to_string()));
    }

    /// How long every PullImage takes from now on (tokio time, so paused-clock tests see it).
    pub fn set_pull_delay(&self, delay: Duration) {
        self.lock().pull_delay = delay;
    }

    /// How long every CreateContainer takes from now on; the container exists (created) from
    /// the call's start, its ID comes back only at the end.
    pub fn set_create_delay(&self, delay: Duration) {
        self.lock().create_delay = delay;
    }

    /// CreateContainer's effect (the container exists from here) and how long the call takes.
    fn create_now(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
    ) -> Result<(String, Duration)> {
        let now = self.now_nanos();
        let mut st = self.lock();
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        self.record(&mut st, "create_container", name, String::new())?;
        if !st.sandboxes.contains_key(sandbox_id) {
            return Err(Self::not_found("create_container", sandbox_id));
        }
        let image = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        // Like containerd, accept an image by name or by the ID ImageStatus reported.
        let known = st.images.contains(&image)
            || image
                .strip_prefix("sha256:")
                .is_some_and(|name| st.images.contains(name));
        if !known {
            return Err(Error::Call {
                op: "create_container",
                target: image.clone(),
                status: tonic::Status::not_found(format!("image {image:?} not found")),
            });
        }
        st.next_id += 1;
        let id = format!("container-{}", st.next_id);
        st.containers.insert(
            id.clone(),
            FakeContainer {
                sandbox_id: sandbox_id.into(),
                config,
                state: api::ContainerState::ContainerCreated,
                created_at: now,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
                image_ref: format!("sha256:{image}"),
            },
        );
        let delay = st.create_delay;
        Ok((id, delay))
    }

    /// The image pulls only with `username` in its AuthConfig; otherwise the pull fails as a
    /// registry refusing the credentials does.
    pub fn require_pull_user(&self, image: &str, username: &str) {
        self.lock()
            .pull_users
            .insert(image.to_string(), username.to_string());
    }

    /// Makes an image pullable (present after a pull).
    pub fn add_pullable_image(&self, image: &str) {
        self.lock().pullable.insert(image.to_string());
    }

    /// The next call of `op` fails with `status`.
    pub fn fail_next(&self, op: &'static str, status: tonic::Status) {
        self.lock()
            .failures
            .entry(op)
            .or_default()
            .push_back(status);
    }

    /// The next call of `op` panics.
    pub fn panic_next(&self, op: &'static str) {
        self.lock().panics.insert(op);
    }

    /// The exit code containers of this name report when stopped.
    pub fn set_stop_exit_code(&self, container_name: &str, code: i32) {
        self.lock()
            .stop_exit_codes
            .insert(container_name.to_string(), code);
    }

    /// ExecSync in containers of this name exits with `code` after `takes` (honouring the
    /// call's timeout like the CRI: a timeout is an error).
    pub fn set_exec_behaviour(&self, container_name: &str, code: i32, takes: Duration) {
        self.lock()
            .exec_behaviour
            .insert(container_name.to_string(), (code, takes));
    }

    /// Containers of this name ignore SIGTERM: stopping them takes the whole timeout.
    pub fn set_ignores_sigterm(&self, container_name: &str) {
        self.lock()
            .ignores_sigterm
            .insert(container_name.to_string());
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Calls of one operation, as `target` strings, in order.
    pub fn calls_of(&self, op: &str) -> Vec<String> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.op == op)
            .map(|c| c.target.clone())
            .collect()
    }

    /// How many ContainerStatus calls were made so far.
    pub fn container_status_reads(&self) -> usize {
        self.lock().container_status_reads
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// IDs of containers with the given name, oldest first.
    /// The mounts of the newest container named `name`: (container path, host path,
    /// read-only).
    pub fn container_mounts(&self, name: &str) -> Vec<(String, String, bool)> {
        let st = self.lock();
        st.containers
            .values()
            .filter(|c| c.config.metadata.as_ref().is_some_and(|m| m.name == name))
            .max_by_key(|c| c.created_at)
            .map(|c| {
                c.config
                    .mounts
                    .iter()
                    .map(|m| (m.container_path.clone(), m.host_path.clone(), m.readonly))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn container_ids(&self, name: &str) -> Vec<String> {
        let st = self.lock();
        let mut v: Vec<_> = st
            .containers
            .iter()
            .filter(|(_, c)| c.config.metadata.as_ref().is_some_and(|m| m.name == name))
            .map(|(id, c)| (c.created_at, id.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, id)| id).collect()
    }

    pub fn running_container_names(&self) -> Vec<String> {
        let st = self.lock();
        let mut v: Vec<_> = st
            .containers
            .values()
            .filter(|c| c.state == api::ContainerState::ContainerRunning)
            .filter_map(|c| c.config.metadata.as_ref().map(|m| m.name.clone()))
            .collect();
        v.sort();
        v
    }

    pub fn sandbox_count(&self) -> usize {
        self.lock().sandboxes.len()
    }

    pub fn container_count(&self) -> usize {
        self.lock().containers.len()
    }

    /// Reports every ready sandbox NOTREADY while its process keeps running, as containerd does
    /// for the sandboxes whose state it could not load after a restart (its `StateUnknown`).
    pub fn lose_sandbox_states(&self) -> Vec<String> {
        self.set_sandboxes_not_ready("running")
    }

    /// Ends the process of every ready sandbox (the pause process died); the containers in
    /// them keep running.
    pub fn end_sandbox_processes(&self) -> Vec<String> {
        self.set_sandboxes_not_ready("stopped")
    }

    fn set_sandboxes_not_ready(&self, process: &'static str) -> Vec<String> {
        let ids: Vec<String> = {
            let mut st = self.lock();
            st.sandboxes
                .iter_mut()
                .filter(|(_, s)| s.state == api::PodSandboxState::SandboxReady)
                .map(|(id, s)| {
                    s.state = api::PodSandboxState::SandboxNotready;
                    s.process = process;
                    id.clone()
                })
                .collect()
        };
        for id in &ids {
            let _ = self.changes.send(id.clone());
        }
        ids
    }

    /// Makes the newest running container of this name exit with `code`.
    pub fn exit_container(&self, name: &str, code: i32) {
        let now = self.now_nanos();
        let id = {
            let mut st = self.lock();
            let found = st
                .containers
                .iter_mut()
                .filter(|(_, c)| {
                    c.state == api::ContainerState::ContainerRunning
                        && c.config.metadata.as_ref().is_some_and(|m| m.name == name)
                })
                .max_by_key(|(_, c)| c.created_at);
            let Some((id, c)) = found else { return };
            c.state = api::ContainerState::ContainerExited;
            c.finished_at = now;
            c.exit_code = code;
            c.reason = if code == 0 { "Completed" } else { "Error" }.into();
            id.clone()
        };
        let _ = self.changes.send(id);
    }

    fn record(
        &self,
        st: &mut State,
        op: &'static str,
        target: String,
        detail: String,
    ) -> Result<()> {
        st.calls.push(Call {
            at: tokio::time::Instant::now(),
            op,
            target: target.clone(),
            detail,
        });
        if let Some(status) = st.failures.get_mut(op).and_then(VecDeque::pop_front) {
            return Err(Error::Call { op, target, status });
        }
        if st.panics.remove(op) {
            panic!("injected panic in {op} of {target}");
        }
        Ok(())
    }

    fn container_name(st: &State, id: &str) -> String {
        st.containers
            .get(id)
            .and_then(|c| c.config.metadata.as_ref())
            .map(|m| m.name.clone())
            .unwrap_or_else(|| id.to_string())
    }

    fn not_found(op: &'static str, id: &str) -> Error {
        Error::Call {
            op,
            target: id.to_string(),
            status: tonic::Status::not_found(format!("{id} not found")),
        }
    }

    fn stop_locked(&self, st: &mut State, id: &str, now: i64) -> bool {
        let codes = st.stop_exit_codes.clone();
        let Some(c) = st.containers.get_mut(id) else {
            return false;
        };
        if c.state != api::ContainerState::ContainerRunning {
            return false;
        }
        let name = c
            .config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        c.state = api::ContainerState::ContainerExited;
        c.finished_at = now;
        c.exit_code = codes.get(&name).copied().unwrap_or(143);
        c.reason = if c.exit_code == 0 {
            "Completed"
        } else {
            "Error"
        }
        .into();
        true
    }
}

#[async_trait]
impl Runtime for FakeRuntime {
    async fn version(&self) -> Result<api::VersionResponse> {
        let mut st = self.lock();
        self.record(&mut st, "version", String::new(), String::new())?;
        Ok(api::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "0.0.0".into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn runtime_conditions(&self) -> Result<Vec<api::RuntimeCondition>> {
        let mut st = self.lock();
        self.record(&mut st, "status", String::new(), String::new())?;
        let ready = |type_: &str| api::RuntimeCondition {
            r#type: type_.into(),
            status: true,
            ..Default::default()
        };
        let network = match &st.network_not_ready {
            None => ready("NetworkReady"),
            Some((reason, message)) => api::RuntimeCondition {
                r#type: "NetworkReady".into(),
                status: false,
                reason: reason.clone(),
                message: message.clone(),
            },
        };
        Ok(vec![ready("RuntimeReady"), network])
    }

    async fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let now = self.now_nanos();
        let mut st = self.lock();
        let target = config
            .metadata
            .as_ref()
            .map(|m| format!("{}/{}", m.namespace, m.name))
            .unwrap_or_default();
        self.record(&mut st, "run_pod_sandbox", target, String::new())?;
        st.next_id += 1;
        let id = format!("sandbox-{}", st.next_id);
        let ip = format!("10.0.{}.{}", st.next_id / 250, st.next_id % 250 + 1);
        st.sandboxes.insert(
            id.clone(),
            FakeSandbox {
                config,
                runtime_handler: runtime_handler.to_string(),
                state: api::PodSandboxState::SandboxReady,
                process: "running",
                created_at: now,
                ip,
            },
        );
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        let now = self.now_nanos();
        let mut changed = Vec::new();
        {
            let mut st = self.lock();
            self.record(
                &mut st,
                "stop_pod_sandbox",
                sandbox_id.into(),
                String::new(),
            )?;
            let ids: Vec<String> = st
                .containers
                .iter()
                .filter(|(_, c)| c.sandbox_id == sandbox_id)
                .map(|(id, _)| id.clone())
                .collect();
            for id in ids {
                if self.stop_locked(&mut st, &id, now) {
                    changed.push(id);
                }
            }
            if let Some(s) = st.sandboxes.get_mut(sandbox_id) {
                s.state = api::PodSandboxState::SandboxNotready;
                s.process = "deleted";
            }
        }
        for id in changed {
            let _ = self.changes.send(id);
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        let mut st = self.lock();
        self.record(
            &mut st,
            "remove_pod_sandbox",
            sandbox_id.into(),
            String::new(),
        )?;
        st.sandboxes.remove(sandbox_id);
        st.containers.retain(|_, c| c.sandbox_id != sandbox_id);
        Ok(())
    }

    async fn pod_sandbox_status(&self, sandbox_id: &str) -> Result<api::PodSandboxStatus> {
        let st = self.lock();
        let s = st
            .sandboxes
            .get(sandbox_id)
            .ok_or_else(|| Self::not_found("pod_sandbox_status", sandbox_id))?;
        // containerd reports the IP while the network namespace is open: until the sandbox
        // is stopped, whatever its state.
        let ready = s.process == "running";
        Ok(api::PodSandboxStatus {
            id: sandbox_id.into(),
            metadata: s.config.metadata.clone(),
            state: s.state as i32,
            created_at: s.created_at,
            network: Some(api::PodSandboxNetworkStatus {
                ip: if ready { s.ip.clone() } else { String::new() },
                additional_ips: vec![],
            }),
            labels: s.config.labels.clone(),
            annotations: s.config.annotations.clone(),
            runtime_handler: s.runtime_handler.clone(),
            // The namespaces the sandbox was asked for (a host-network pod's, say), as
            // containerd reports them.
            linux: Some(api::LinuxPodSandboxStatus {
                namespaces: Some(api::Namespace {
                    options: s
                        .config
                        .linux
                        .as_ref()
                        .and_then(|l| l.security_context.as_ref())
                        .and_then(|c| c.namespace_options.clone()),
                }),
            }),
        })
    }

    async fn pod_sandbox_info(&self, sandbox_id: &str) -> Result<HashMap<String, String>> {
        let mut st = self.lock();
        self.record(
            &mut st,
            "pod_sandbox_info",
            sandbox_id.into(),
            String::new(),
        )?;
        let s = st
            .sandboxes
            .get(sandbox_id)
            .ok_or_else(|| Self::not_found("pod_sandbox_info", sandbox_id))?;
        let info = serde_json::json!({
            "pid": 0,
            "processStatus": s.process,
            "netNamespaceClosed": false,
        });
        Ok(HashMap::from([("info".to_string(), info.to_string())]))
    }

    async fn list_pod_sandbox(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>> {
        let mut st = self.lock();
        let selector = filter.map(|f| f.label_selector).unwrap_or_default();
        // A failure asked for hits a pod's own listing (a worker's inspect), not the node-wide
        // ones of the PLEG or the orphan cleanup.
        if selector.contains_key(crate::cri::labels::POD_UID) {
            if let Some(status) = st
                .failures
                .get_mut("list_pod_sandbox")
                .and_then(VecDeque::pop_front)
            {
                return Err(Error::Call {
                    op: "list_pod_sandbox",
                    target: selector[crate::cri::labels::POD_UID].clone(),
                    status,
                });
            }
        }
        Ok(st
            .sandboxes
            .iter()
            .filter(|(_, s)| {
                selector
                    .iter()
                    .all(|(k, v)| s.config.labels.get(k) == Some(v))
            })
            .map(|(id, s)| api::PodSandbox {
                id: id.clone(),
                metadata: s.config.metadata.clone(),
                state: s.state as i32,
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                runtime_handler: s.runtime_handler.clone(),
            })
            .collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        _sandbox_config: api::PodSandboxConfig,
    ) -> Result<String> {
        let (id, delay) = self.create_now(sandbox_id, config)?;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok(id)
    }

    async fn start_container(&self, container_id: &str) -> Result<()> {
        let now = self.now_nanos();
        {
            let mut st = self.lock();
            let name = Self::container_name(&st, container_id);
            self.record(&mut st, "start_container", name, String::new())?;
            let c = st
                .containers
                .get_mut(container_id)
                .ok_or_else(|| Self::not_found("start_container", container_id))?;
            c.state = api::ContainerState::ContainerRunning;
            c.started_at = now;
        }
        let _ = self.changes.send(container_id.to_string());
        Ok(())
    }

    async fn stop_container(&self, container_id: &str, timeout: Duration) -> Result<()> {
        let now = self.now_nanos();
        let changed = {
            let mut st = self.lock();
            let name = Self::container_name(&st, container_id);
            self.record(
                &mut st,
                "stop_container",
                name.clone(),
                format!("timeout={}", timeout.as_secs()),
            )?;
            if !st.containers.contains_key(container_id) {
                return Err(Self::not_found("stop_container", container_id));
            }
            if st.ignores_sigterm.contains(&name) {
                None
            } else {
                Some(self.stop_locked(&mut st, container_id, now))
            }
        };
        let changed = match changed {
            Some(changed) => changed,
            None => {
                // SIGTERM ignored: SIGKILL when the timeout runs out.
                tokio::time::sleep(timeout).await;
                let now = self.now_nanos();
                let mut st = self.lock();
                match st.containers.get_mut(container_id) {
                    Some(c) if c.state == api::ContainerState::ContainerRunning => {
                        c.state = api::ContainerState::ContainerExited;
                        c.finished_at = now;
                        c.exit_code = 137;
                        c.reason = "Error".into();
                        true
                    }
                    _ => false,
                }
            }
        };
        if changed {
            let _ = self.changes.send(container_id.to_string());
        }
        Ok(())
    }

    async fn remove_container(&self, container_id: &str) -> Result<()> {
        let mut st = self.lock();
        let name = Self::container_name(&st, container_id);
        self.record(&mut st, "remove_container", name, String::new())?;
        st.containers.remove(container_id);
        Ok(())
    }

    async fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>> {
        let st = self.lock();
        let filter = filter.unwrap_or_default();
        // As containerd: the state filter too, not only the labels.
        let state = filter.state.map(|s| s.state);
        Ok(st
            .containers
            .iter()
            .filter(|(_, c)| {
                filter
                    .label_selector
                    .iter()
                    .all(|(k, v)| c.config.labels.get(k) == Some(v))
                    && state.is_none_or(|s| c.state as i32 == s)
            })
            .map(|(id, c)| api::Container {
                id: id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: c.image_ref.clone(),
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                ..Default::default()
            })
            .collect())
    }

    async fn container_status(&self, container_id: &str) -> Result<api::ContainerStatus> {
        let mut st = self.lock();
        st.container_status_reads += 1;
        let c = st
            .containers
            .get(container_id)
            .ok_or_else(|| Self::not_found("container_status", container_id))?;
        Ok(api::ContainerStatus {
            id: container_id.into(),
            metadata: c.config.metadata.clone(),
            state: c.state as i32,
            created_at: c.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.config.image.clone(),
            image_ref: c.image_ref.clone(),
            reason: c.reason.clone(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            log_path: c.config.log_path.clone(),
            resources: c
                .config
                .linux
                .as_ref()
                .and_then(|l| l.resources.clone())
                .map(|linux| api::ContainerResources {
                    linux: Some(linux),
                    windows: None,
                }),
            ..Default::default()
        })
    }

    async fn update_container_resources(
        &self,
        container_id: &str,
        linux: api::LinuxContainerResources,
    ) -> Result<()> {
        let mut st = self.lock();
        let name = Self::container_name(&st, container_id);
        self.record(&mut st, "update_container_resources", name, String::new())?;
        let c = st
            .containers
            .get_mut(container_id)
            .ok_or_else(|| Self::not_found("update_container_resources", container_id))?;
        c.config
            .linux
            .get_or_insert_with(Default::default)
            .resources = Some(linux);
        Ok(())
    }

    async fn update_pod_sandbox_resources(
        &self,
        sandbox_id: &str,
        overhead: api::LinuxContainerResources,
        resources: api::LinuxContainerResources,
    ) -> Result<()> {
        let mut st = self.lock();
        let detail = format!(
            "cpu_quota={} memory_limit_in_bytes={}",
            resources.cpu_quota, resources.memory_limit_in_bytes
        );
        self.record(
            &mut st,
            "update_pod_sandbox_resources",
            sandbox_id.to_string(),
            detail,
        )?;
        let sandbox = st
            .sandboxes
            .get_mut(sandbox_id)
            .ok_or_else(|| Self::not_found("update_pod_sandbox_resources", sandbox_id))?;
        let linux = sandbox.config.linux.get_or_insert_with(Default::default);
        linux.overhead = Some(overhead);
        linux.resources = Some(resources);
        Ok(())
    }

    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<api::ExecSyncResponse> {
        let (code, takes) = {
            let mut st = self.lock();
            let name = Self::container_name(&st, container_id);
            self.record(&mut st, "exec_sync", name.clone(), cmd.join(" "))?;
            st.exec_behaviour
                .get(&name)
                .copied()
                .unwrap_or((0, Duration::ZERO))
        };
        // A call given up before its command ended (the caller dropped it) is recorded as
        // `exec_sync_cancelled`: the real runtime kills the command then.
        let mut cancelled = ExecCancelled {
            fake: self,
            container: container_id.to_string(),
            detail: cmd.join(" "),
            armed: true,
        };
        if !timeout.is_zero() && takes > timeout {
            tokio::time::sleep(timeout).await;
            cancelled.armed = false;
            return Err(Error::Call {
                op: "exec_sync",
                target: container_id.to_string(),
                status: tonic::Status::deadline_exceeded(format!(
                    "command timed out after {}s",
                    timeout.as_secs()
                )),
            });
        }
        tokio::time::sleep(takes).await;
        cancelled.armed = false;
        Ok(api::ExecSyncResponse {
            exit_code: code,
            ..Default::default()
        })
    }
}

/// Records an `exec_sync` whose caller dropped it before the command ended.
struct ExecCancelled<'a> {
    fake: &'a FakeRuntime,
    container: String,
    detail: String,
    armed: bool,
}

impl Drop for ExecCancelled<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut st = self.fake.lock();
            let target = FakeRuntime::container_name(&st, &self.container);
            st.calls.push(Call {
                at: tokio::time::Instant::now(),
                op: "exec_sync_cancelled",
                target,
                detail: std::mem::take(&mut self.detail),
            });
        }
    }
}

#[async_trait]
impl super::containerd::TaskSignaller for FakeRuntime {
    /// Records the signal; a running container exits as if the signal killed it (128 + signal),
    /// unless a stop exit code was set for its name.
    async fn signal(&self, container_id: &str, signal: i32) -> Result<()> {
        let now = self.now_nanos();
        let changed = {
            let mut st = self.lock();
            let name = Self::container_name(&st, container_id);
            self.record(&mut st, "signal", name.clone(), format!("signal={signal}"))?;
            let code = st.stop_exit_codes.get(&name).copied();
            match st.containers.get_mut(container_id) {
                Some(c) if c.state == api::ContainerState::ContainerRunning => {
                    c.state = api::ContainerState::ContainerExited;
                    c.finished_at = now;
                    c.exit_code = code.unwrap_or(128 + signal);
                    c.reason = if c.exit_code == 0 {
                        "Completed"
                    } else {
                        "Error"
                    }
                    .into();
                    true
                }
                Some(_) => false,
                None => return Err(Self::not_found("signal", container_id)),
            }
        };
        if changed {
            let _ = self.changes.send(container_id.to_string());
        }
        Ok(())
    }
}

#[async_trait]
impl ImageService for FakeRuntime {
    async fn image_status(&self, image: &str) -> Result<Option<api::Image>> {
        let mut st = self.lock();
        self.record(&mut st, "image_status", image.into(), String::new())?;
        Ok(st.images.contains(image).then(|| api::Image {
            id: format!("sha256:{image}"),
            repo_tags: vec![image.to_string()],
            ..Default::default()
        }))
    }

    async fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        _sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String> {
        let username = auth.map(|a| a.username).unwrap_or_default();
        let delay = {
            let mut st = self.lock();
            self.record(&mut st, "pull_image", image.into(), username.clone())?;
            st.pull_delay
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let mut st = self.lock();
        if st.pull_users.get(image).is_some_and(|u| *u != username) {
            return Err(Error::Call {
                op: "pull_image",
                target: image.into(),
                status: tonic::Status::unknown(format!(
                    "failed to pull and unpack image {image:?}: unexpected status: 401 Unauthorized"
                )),
            });
        }
        if st.pullable.contains(image) || st.images.contains(image) {
            st.images.insert(image.to_string());
            Ok(format!("sha256:{image}"))
        } else {
            Err(Error::Call {
                op: "pull_image",
                target: image.into(),
                status: tonic::Status::not_found(format!(
                    "failed to pull and unpack image {image:?}: not found"
                )),
            })
        }
    }

    async fn list_images(&self) -> Result<Vec<api::Image>> {
        let st = self.lock();
        Ok(st
            .images
            .iter()
            .map(|i| api::Image {
                id: format!("sha256:{i}"),
                repo_tags: vec![i.clone()],
                ..Default::default()
            })
            .collect())
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        let mut st = self.lock();
        self.record(&mut st, "remove_image", image.into(), String::new())?;
        st.images.remove(image);
        Ok(())
    }
}
