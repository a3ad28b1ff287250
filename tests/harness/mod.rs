//! The component-test harness: nodelet started through the same builder as `main`
//! (`nodelet::agent::NodeletBuilder`), against the in-memory fake runtime, with tokio's clock
//! paused (tests use `#[tokio::test(start_paused = true)]`). No pod source is configured: the
//! tests hand pods to the workers themselves.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio_util::sync::CancellationToken;

use nodelet::agent::{CgroupSetup, Nodelet, NodeletBuilder, RuntimeServices};
use nodelet::clock::Clock;
use nodelet::cri::fake::FakeRuntime;
use nodelet::pod::workers::PodWorkers;
use nodelet::stats::machine::NodeInfo;
use nodelet::status::StatusManager;

pub struct Harness {
    pub fake: Arc<FakeRuntime>,
    /// The pods' events; the node's own (`Starting`) are in `nodelet.events()`.
    pub events: PodEvents,
    pub status: StatusManager,
    pub workers: PodWorkers,
    pub nodelet: Nodelet,
    pub _dir: TestDir,
    pub cancel: CancellationToken,
}

/// The test's directory (nodelet's rootDir is in it), removed when dropped. nodelet bind-mounts
/// its rootDir onto itself with shared propagation where the host's mount is private, as the
/// kubelet does, even over the fake runtime: that mount goes first.
pub struct TestDir(tempfile::TempDir);

impl TestDir {
    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for point in nodelet::volume::mounts::mounts_under(&table, self.0.path()) {
            let _ = nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// The events nodelet recorded about pods, oldest first (those about the node left out).
pub struct PodEvents(pub nodelet::events::EventRecorder);

impl PodEvents {
    pub fn events(&self) -> Vec<k8s_openapi::api::core::v1::Event> {
        self.0
            .events()
            .into_iter()
            .filter(|e| e.involved_object.kind.as_deref() == Some("Pod"))
            .collect()
    }
}

pub async fn harness() -> Harness {
    harness_with_backoff((Duration::from_secs(10), Duration::from_secs(300))).await
}

/// The configuration the harness starts nodelet with: node `node1`, its directories in `dir`,
/// no servers, no pod source, no resolv.conf, and the restart backoff `(initial, max)` (one
/// the configuration can express: 10 s or, with `ReduceDefaultCrashLoopBackOffDecay`, 1 s,
/// either capped by `maxContainerRestartPeriod`).
pub fn config(
    dir: &std::path::Path,
    crash_loop_backoff: (Duration, Duration),
) -> nodelet::config::Config {
    let text = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         nodeName: node1\n\
         rootDir: {root}\n\
         podLogsDir: {logs}\n\
         containerLogLinksDir: {links}\n\
         syncFrequency: 60s\n\
         readOnlyPort: 0\n\
         healthzPort: 0\n\
         port: 0\n",
        root = dir.join("root").display(),
        logs = dir.join("logs").display(),
        links = dir.join("containers").display(),
    );
    let mut cfg = nodelet::config::parse(
        &text,
        std::path::Path::new("harness.yaml"),
        &nodelet::config::Environment {
            hostname: "node1".into(),
        },
    )
    .expect("the harness configuration")
    .config;
    cfg.resolv_conf = std::path::PathBuf::new();
    let (initial, max) = crash_loop_backoff;
    cfg.crash_loop_back_off.max_container_restart_period = max;
    cfg.feature_gates.insert(
        nodelet::config::kubelet_fields::REDUCE_DEFAULT_CRASH_LOOP_BACK_OFF_DECAY.to_string(),
        initial < Duration::from_secs(10).min(max),
    );
    assert_eq!(
        cfg.crash_loop_back_off_delays(),
        crash_loop_backoff,
        "a restart backoff the configuration cannot express"
    );
    cfg
}

pub async fn harness_with_backoff(crash_loop_backoff: (Duration, Duration)) -> Harness {
    harness_with(crash_loop_backoff, |_| {}).await
}

/// A harness whose configuration `edit` changes first (to turn a server on, say).
pub async fn harness_with(
    crash_loop_backoff: (Duration, Duration),
    edit: impl FnOnce(&mut nodelet::config::Config),
) -> Harness {
    let cgroups = CgroupSetup::Given {
        settings: Default::default(),
        node: None,
    };
    harness_with_cgroups(crash_loop_backoff, edit, cgroups).await
}

/// [`harness_with`] with the pods' cgroups set up as `cgroups` says.
pub async fn harness_with_cgroups(
    crash_loop_backoff: (Duration, Duration),
    edit: impl FnOnce(&mut nodelet::config::Config),
    cgroups: CgroupSetup,
) -> Harness {
    harness_with_builder(crash_loop_backoff, edit, cgroups, |b| b).await
}

/// [`harness_with_cgroups`] with more builder calls (objects, CSI drivers).
pub async fn harness_with_builder(
    crash_loop_backoff: (Duration, Duration),
    edit: impl FnOnce(&mut nodelet::config::Config),
    cgroups: CgroupSetup,
    builder: impl FnOnce(NodeletBuilder) -> NodeletBuilder,
) -> Harness {
    let clock = Clock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
    let fake = Arc::new(FakeRuntime::new(clock));
    fake.add_image("localhost/app:1");
    let dir = tempfile::tempdir().unwrap();
    let runtime = RuntimeServices {
        runtime: fake.clone(),
        images: fake.clone(),
        streaming: None,
        stats: None,
        tasks: Some(fake.clone()),
        housekeeping: None,
        containerd_events: None,
        version: nodelet::cri::api::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "0.0.0".into(),
            runtime_api_version: "v1".into(),
        },
        runtime_features: Default::default(),
        cgroup_driver: nodelet::cri::runtime_config::CgroupDriverAnswer::NotAsked,
    };
    let mut cfg = config(dir.path(), crash_loop_backoff);
    edit(&mut cfg);
    let nodelet = builder(NodeletBuilder::new(cfg))
        .runtime(runtime)
        .clock(clock)
        .node_info(NodeInfo {
            name: "node1".into(),
            host_ips: vec!["192.168.1.10".into()],
            machine: nodelet::stats::machine::MachineInfo {
                num_cores: 2,
                memory_capacity: 4 << 30,
                ..Default::default()
            },
        })
        .cgroups(cgroups)
        .start()
        .await
        .expect("nodelet starts on the fake runtime");
    Harness {
        fake,
        events: PodEvents(nodelet.events().clone()),
        status: nodelet.status().clone(),
        workers: nodelet.workers().clone(),
        cancel: nodelet.cancel_token().clone(),
        nodelet,
        _dir: TestDir(dir),
    }
}

pub fn pod(uid: &str, policy: &str, containers: &[&str], image: &str) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(format!("{uid}-node1")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            termination_grace_period_seconds: Some(7),
            containers: containers
                .iter()
                .map(|n| Container {
                    name: n.to_string(),
                    image: Some(image.into()),
                    image_pull_policy: Some("Never".into()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

impl Harness {
    /// The positive sign for a test that proves an absence over a quiet period: a canary pod
    /// (its own UID, one container `canary`) whose `activeDeadlineSeconds` ends inside the
    /// period. Start it before the period; [`Self::assert_canary_failed`] after it shows the pod
    /// workers kept acting on time meanwhile, so the absence is not that of a stalled agent.
    pub async fn start_canary(&self, uid: &str, deadline_seconds: i64) {
        let mut p = (*pod(uid, "Always", &["canary"], "localhost/app:1")).clone();
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(deadline_seconds);
        self.workers
            .update(nodelet::pod::worker_state::PodWork::Sync(Arc::new(p)));
        self.settle("the canary pod runs", |h| h.phase(uid) == "Running")
            .await;
    }

    /// The canary's deadline passed and its worker failed it (see [`Self::start_canary`]).
    pub fn assert_canary_failed(&self, uid: &str) {
        let status = self.status.status(uid).expect("the canary's status");
        assert_eq!(
            (status.phase.as_deref(), status.reason.as_deref()),
            (Some("Failed"), Some("DeadlineExceeded")),
            "the canary pod's worker acted during the quiet period"
        );
    }

    /// Lets the workers run until `check` holds (at most 100 steps of 10 ms of paused time).
    pub async fn settle(&self, what: &str, check: impl Fn(&Self) -> bool) {
        for _ in 0..100 {
            if check(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "never reached: {what}\ncalls: {:#?}\nstatuses: {:#?}",
            self.fake
                .calls()
                .iter()
                .map(|c| format!("{} {} {}", c.op, c.target, c.detail))
                .collect::<Vec<_>>(),
            self.status
                .pods()
                .iter()
                .map(|p| p.status.clone())
                .collect::<Vec<_>>()
        );
    }

    /// The first event recorded with `reason`, once there is one (see [`Self::settle`]).
    pub async fn event(&self, reason: &str) -> k8s_openapi::api::core::v1::Event {
        let find = |h: &Self| {
            h.events
                .events()
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
        };
        self.settle(&format!("a {reason} event"), |h| find(h).is_some())
            .await;
        find(self).unwrap()
    }

    /// Lets paused time pass, a second at a time for at most two minutes (a resync or a
    /// retry), until exactly `names` run; fails with `what` otherwise.
    pub async fn wait_running(&self, names: &[&str], what: &str) {
        for _ in 0..120 {
            if self.fake.running_container_names() == names {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(self.fake.running_container_names(), names, "{what}");
    }

    pub fn phase(&self, uid: &str) -> String {
        self.status
            .status(uid)
            .and_then(|s| s.phase)
            .unwrap_or_default()
    }

    pub fn restart_count(&self, uid: &str, container: &str) -> i32 {
        self.status
            .status(uid)
            .and_then(|s| s.container_statuses)
            .and_then(|cs| cs.into_iter().find(|c| c.name == container))
            .map_or(-1, |c| c.restart_count)
    }
}

pub fn with_lifecycle(p: Arc<Pod>, f: impl FnOnce(&mut Container)) -> Arc<Pod> {
    let mut p = (*p).clone();
    f(&mut p.spec.as_mut().unwrap().containers[0]);
    Arc::new(p)
}

pub fn exec_handler(cmd: &[&str]) -> k8s_openapi::api::core::v1::LifecycleHandler {
    k8s_openapi::api::core::v1::LifecycleHandler {
        exec: Some(k8s_openapi::api::core::v1::ExecAction {
            command: Some(cmd.iter().map(|s| s.to_string()).collect()),
        }),
        ..Default::default()
    }
}

pub fn exec_probe(period: i32, failure_threshold: i32) -> k8s_openapi::api::core::v1::Probe {
    k8s_openapi::api::core::v1::Probe {
        exec: Some(k8s_openapi::api::core::v1::ExecAction {
            command: Some(vec!["check".into()]),
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failure_threshold),
        ..Default::default()
    }
}

impl Harness {
    /// Drives a crash loop: every time container `name` of pod `uid` is started it exits 1
    /// at once (after running `runs_for(n)` for the n-th start, n from 1). Returns the start
    /// times in whole seconds from now, once `count` starts happened.
    pub async fn crash_loop_starts(
        &self,
        uid: &str,
        name: &str,
        count: usize,
        runs_for: impl Fn(usize) -> Duration,
    ) -> Vec<u64> {
        let t0 = tokio::time::Instant::now();
        let mut starts = Vec::new();
        let mut seen = 0;
        while starts.len() < count {
            let calls: Vec<_> = self
                .fake
                .calls()
                .into_iter()
                .filter(|c| c.op == "start_container" && c.target == name)
                .collect();
            if calls.len() > seen {
                seen = calls.len();
                starts.push((calls[seen - 1].at - t0).as_secs());
                tokio::time::sleep(runs_for(starts.len())).await;
                self.fake.exit_container(name, 1);
                self.workers.wake(uid);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(
                t0.elapsed() < Duration::from_secs(10_000),
                "starts so far: {starts:?}"
            );
        }
        starts
    }
}
