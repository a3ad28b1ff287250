//! The component-test harness: pod workers and the executor against the in-memory fake
//! runtime, with tokio's clock paused (tests use `#[tokio::test(start_paused = true)]`).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio_util::sync::CancellationToken;

use nodelet::clock::Clock;
use nodelet::cri::fake::FakeRuntime;
use nodelet::node::NodeInfo;
use nodelet::pod::PodWorkers;
use nodelet::status::StatusManager;
use nodelet::sync::executor::{PodSyncer, SyncSettings};

pub struct Harness {
    pub fake: Arc<FakeRuntime>,
    pub events: nodelet::events::EventRecorder,
    pub status: StatusManager,
    pub workers: PodWorkers,
    pub _dir: tempfile::TempDir,
    pub cancel: CancellationToken,
}

pub fn harness() -> Harness {
    harness_with_backoff((Duration::from_secs(10), Duration::from_secs(300)))
}

pub fn harness_with_backoff(crash_loop_backoff: (Duration, Duration)) -> Harness {
    let clock = Clock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
    let fake = Arc::new(FakeRuntime::new(clock));
    fake.add_image("localhost/app:1");
    let dir = tempfile::tempdir().unwrap();
    let status = StatusManager::new();
    let events = nodelet::events::EventRecorder::new(clock, "kubelet", "node1");
    // Probe result changes wake the pod's worker, as the PLEG channel does in nodelet.
    let (probe_tx, mut probe_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let syncer = PodSyncer {
        runtime: fake.clone(),
        images: fake.clone(),
        status: status.clone(),
        node: Arc::new(NodeInfo {
            name: "node1".into(),
            host_ips: vec!["192.168.1.10".into()],
            cpu_capacity_milli: 2000,
            memory_capacity: 4 << 30,
        }),
        settings: Arc::new(SyncSettings {
            root_dir: dir.path().join("root"),
            pod_logs_dir: dir.path().join("logs"),
            cgroup_driver: nodelet::cgroup::Driver::Cgroupfs,
            cgroup_root: "/".into(),
            cgroups_per_qos: true,
            cluster_dns: vec![],
            cluster_domain: String::new(),
            resolv_conf: None,
            runtime_name: "fake".into(),
            crash_loop_backoff,
            cgroup_v2: false,
            cgroups: None,
            pod_cgroup: Default::default(),
        }),
        clock,
        tasks: Some(fake.clone()),
        objects: Arc::new(nodelet::objects::NoApiServer),
        events: events.clone(),
        probes: nodelet::probe::ProbeManager::new(
            fake.clone(),
            clock,
            Arc::new(move |uid: &str| {
                let _ = probe_tx.send(uid.to_string());
            }),
            Arc::new({
                let events = events.clone();
                move |e: nodelet::probe::ProbeEvent| {
                    let object = nodelet::events::ObjectRef {
                        kind: "Pod".into(),
                        namespace: e.pod_namespace.clone(),
                        name: e.pod_name.clone(),
                        uid: e.pod_uid.clone(),
                        field_path: Some(format!("spec.containers{{{}}}", e.container_name)),
                    };
                    events.record(
                        &object,
                        nodelet::events::EventType::Warning,
                        e.reason,
                        e.message,
                    );
                }
            }),
        ),
    };
    let cancel = CancellationToken::new();
    let workers = PodWorkers::new(syncer, Duration::from_secs(60), cancel.clone());
    tokio::spawn({
        let workers = workers.clone();
        async move {
            while let Some(uid) = probe_rx.recv().await {
                workers.wake(&uid);
            }
        }
    });
    Harness {
        fake,
        events,
        status,
        workers,
        _dir: dir,
        cancel,
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
