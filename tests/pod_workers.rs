//! Component tests: pod workers and the executor against the in-memory fake runtime, with
//! tokio's clock paused so timings are exact and the tests take milliseconds.

mod harness;

use std::sync::Arc;
use std::time::Duration;

use harness::*;
use nodelet::agent::CgroupSetup;
use nodelet::pod::worker_state::PodWork;

#[tokio::test(start_paused = true)]
async fn starts_sandbox_then_containers_in_order_and_reports_running() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u1",
        "Always",
        &["a", "b"],
        "localhost/app:1",
    )));
    h.settle("both running and Ready", |h| {
        h.phase("u1") == "Running" && h.fake.running_container_names() == ["a", "b"]
    })
    .await;
    let ops: Vec<String> = h
        .fake
        .calls()
        .iter()
        .filter(|c| {
            matches!(
                c.op,
                "run_pod_sandbox" | "create_container" | "start_container"
            )
        })
        .map(|c| format!("{} {}", c.op, c.target))
        .collect();
    assert_eq!(
        ops,
        [
            "run_pod_sandbox default/u1-node1",
            "create_container a",
            "start_container a",
            "create_container b",
            "start_container b"
        ]
    );
    let status = h.status.status("u1").unwrap();
    let ready = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.2"));
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn always_restarts_an_exited_container_and_keeps_its_last_state() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u2",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    h.fake.exit_container("a", 2);
    h.workers.wake("u2");
    h.settle("restarted once", |h| {
        h.restart_count("u2", "a") == 1 && h.fake.running_container_names() == ["a"]
    })
    .await;
    let cs = h.status.status("u2").unwrap().container_statuses.unwrap();
    let last = cs[0]
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(last.exit_code, 2);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    assert_eq!(
        h.fake.calls_of("run_pod_sandbox").len(),
        1,
        "the sandbox is kept"
    );
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn never_policy_failure_makes_the_pod_failed_and_stops_the_sandbox() {
    let h = harness().await;
    h.workers
        .update(PodWork::Sync(pod("u3", "Never", &["a"], "localhost/app:1")));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    h.fake.exit_container("a", 3);
    h.workers.wake("u3");
    h.settle("Failed", |h| h.phase("u3") == "Failed").await;
    h.settle("sandbox stopped", |h| {
        !h.fake.calls_of("stop_pod_sandbox").is_empty()
    })
    .await;
    assert!(
        h.fake.calls_of("create_container").len() == 1,
        "never restarted"
    );
    // Resyncs after the pod is terminal do nothing; a canary pod failing at its deadline
    // meanwhile shows the workers were acting all along.
    h.start_canary("u3-canary", 200).await;
    let before = h.fake.calls().len();
    tokio::time::sleep(Duration::from_secs(300)).await;
    h.assert_canary_failed("u3-canary");
    let after: Vec<_> = h.fake.calls()[before..]
        .iter()
        .filter(|c| !matches!(c.op, "image_status"))
        .filter(|c| c.target != "canary" && !c.target.contains("u3-canary"))
        .map(|c| c.op)
        .collect();
    assert!(
        after
            .iter()
            .all(|op| *op != "create_container" && *op != "run_pod_sandbox"),
        "{after:?}"
    );
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn kill_with_remove_stops_with_the_grace_period_and_forgets_the_pod() {
    let h = harness().await;
    let p = pod("u4", "Always", &["a", "b"], "localhost/app:1");
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("running", |h| h.fake.running_container_names().len() == 2)
        .await;
    h.workers.update(PodWork::Kill {
        pod: p,
        grace: None,
        remove: true,
    });
    h.settle("removed", |h| {
        h.fake.sandbox_count() == 0 && !h.workers.has_worker("u4")
    })
    .await;
    let stops: Vec<String> = h
        .fake
        .calls()
        .iter()
        .filter(|c| c.op == "stop_container")
        .map(|c| c.detail.clone())
        .collect();
    assert_eq!(
        stops,
        ["timeout=7", "timeout=7"],
        "both containers stopped with the pod's grace period"
    );
    assert_eq!(h.fake.container_count(), 0);
    assert!(h.status.status("u4").is_none());
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn missing_image_with_never_policy_waits_with_err_image_never_pull() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u5",
        "Always",
        &["a"],
        "localhost/missing:1",
    )));
    h.settle("ErrImageNeverPull", |h| {
        h.status
            .status("u5")
            .and_then(|s| s.container_statuses)
            .and_then(|cs| cs[0].state.clone())
            .and_then(|s| s.waiting)
            .and_then(|w| w.reason)
            .as_deref()
            == Some("ErrImageNeverPull")
    })
    .await;
    assert_eq!(h.phase("u5"), "Pending");
    assert!(h.fake.calls_of("create_container").is_empty());
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_removed_pod_that_comes_back_is_started_again() {
    let h = harness().await;
    let p = pod("u6", "Always", &["a"], "localhost/app:1");
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    let first = h.fake.container_ids("a");
    // Removal and return in quick succession: the latest update wins.
    h.workers.update(PodWork::Kill {
        pod: p.clone(),
        grace: Some(Duration::ZERO),
        remove: true,
    });
    h.workers.update(PodWork::Sync(p));
    // "Running" held before the removal too: only a container other than the first one shows
    // that the pod was removed and started again.
    h.settle("running again, in a new container", |h| {
        let ids = h.fake.container_ids("a");
        h.fake.running_container_names() == ["a"]
            && h.phase("u6") == "Running"
            && !ids.is_empty()
            && ids.iter().all(|id| !first.contains(id))
    })
    .await;
    assert_eq!(
        h.fake.calls_of("stop_container").len(),
        1,
        "the removal stopped the first container"
    );
    h.cancel.cancel();
}

/// A container that fails the moment it starts is restarted at once the first time, then at 10,
/// 30, 70, 150, 310 and 610 s (10 s doubling, capped at 300 s), measured from each instance's
/// finishedAt.
#[tokio::test(start_paused = true)]
async fn crash_loop_backoff_restart_times() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u7",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    let starts = h.crash_loop_starts("u7", "a", 8, |_| Duration::ZERO).await;
    // The first entry is the initial start; the restarts follow.
    assert_eq!(starts, [0, 0, 10, 30, 70, 150, 310, 610]);
    // Between restarts the container waits with the kubelet's reason and message.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waiting = h.status.status("u7").unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    assert_eq!(
        waiting.message.as_deref(),
        Some("back-off 5m0s restarting failed container=a pod=u7-node1_default(u7)")
    );
    assert_eq!(h.restart_count("u7", "a"), 7);
    h.cancel.cancel();
}

/// `maxContainerRestartPeriod: 2s`: the initial delay is min(10 s, 2 s) and the cap 2 s.
#[tokio::test(start_paused = true)]
async fn crash_loop_backoff_with_a_two_second_cap() {
    let h = harness_with_backoff((Duration::from_secs(2), Duration::from_secs(2))).await;
    h.workers.update(PodWork::Sync(pod(
        "u8",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    let starts = h.crash_loop_starts("u8", "a", 6, |_| Duration::ZERO).await;
    assert_eq!(starts, [0, 0, 2, 4, 6, 8]);
    h.cancel.cancel();
}

/// A preStop hook that outlives the grace period is abandoned at its end, and the container
/// still gets the 2 s minimum window after the stop signal.
#[tokio::test(start_paused = true)]
async fn pre_stop_outliving_the_grace_period_gets_a_2s_window() {
    let h = harness().await;
    h.fake.set_exec_behaviour("a", 0, Duration::from_secs(100));
    let p = with_lifecycle(pod("u9", "Always", &["a"], "localhost/app:1"), |c| {
        c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
            pre_stop: Some(exec_handler(&["sleep", "100"])),
            ..Default::default()
        });
    });
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    let t0 = tokio::time::Instant::now();
    h.workers.update(PodWork::Kill {
        pod: p,
        grace: None,
        remove: false,
    });
    for _ in 0..200 {
        if !h.fake.calls_of("stop_container").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls = h.fake.calls();
    let hook = calls
        .iter()
        .find(|c| c.op == "exec_sync")
        .expect("preStop ran");
    assert_eq!(hook.detail, "sleep 100");
    let stop = calls
        .iter()
        .find(|c| c.op == "stop_container")
        .expect("stopped");
    assert_eq!(
        (stop.at - t0).as_secs(),
        7,
        "the hook had the whole grace period (7 s)"
    );
    assert_eq!(stop.detail, "timeout=2", "then the 2 s minimum window");
    h.cancel.cancel();
}

/// preStop time counts against the grace period.
#[tokio::test(start_paused = true)]
async fn pre_stop_time_counts_against_the_grace_period() {
    let h = harness().await;
    h.fake.set_exec_behaviour("a", 0, Duration::from_secs(3));
    let p = with_lifecycle(pod("u10", "Always", &["a"], "localhost/app:1"), |c| {
        c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
            pre_stop: Some(exec_handler(&["drain"])),
            ..Default::default()
        });
    });
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    h.workers.update(PodWork::Kill {
        pod: p,
        grace: None,
        remove: false,
    });
    for _ in 0..100 {
        if !h.fake.calls_of("stop_container").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stop = h
        .fake
        .calls()
        .into_iter()
        .find(|c| c.op == "stop_container")
        .expect("stopped");
    assert_eq!(stop.detail, "timeout=4", "7 s grace - 3 s of preStop");
    h.cancel.cancel();
}

/// A grace override of 0 (force) skips preStop and kills at once.
#[tokio::test(start_paused = true)]
async fn force_kill_skips_pre_stop() {
    let h = harness().await;
    let p = with_lifecycle(pod("u11", "Always", &["a"], "localhost/app:1"), |c| {
        c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
            pre_stop: Some(exec_handler(&["drain"])),
            ..Default::default()
        });
    });
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    h.workers.update(PodWork::Kill {
        pod: p,
        grace: Some(Duration::ZERO),
        remove: false,
    });
    h.settle("stopped", |h| !h.fake.calls_of("stop_container").is_empty())
        .await;
    let calls = h.fake.calls();
    assert!(
        calls.iter().all(|c| c.op != "exec_sync"),
        "no preStop on force kill"
    );
    let stop = calls.iter().find(|c| c.op == "stop_container").unwrap();
    assert_eq!(stop.detail, "timeout=0");
    h.cancel.cancel();
}

/// `lifecycle.stopSignal` is sent through the task API, then the runtime SIGKILLs what is left.
#[tokio::test(start_paused = true)]
async fn stop_signal_is_delivered_before_the_kill() {
    let h = harness().await;
    let p = with_lifecycle(pod("u12", "Always", &["a"], "localhost/app:1"), |c| {
        c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
            stop_signal: Some("SIGUSR1".into()),
            ..Default::default()
        });
    });
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    h.workers.update(PodWork::Kill {
        pod: p,
        grace: None,
        remove: false,
    });
    h.settle("stopped", |h| !h.fake.calls_of("stop_container").is_empty())
        .await;
    let ops: Vec<String> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| matches!(c.op, "signal" | "stop_container"))
        .map(|c| format!("{} {}", c.op, c.detail))
        .collect();
    assert_eq!(ops, ["signal signal=10", "stop_container timeout=0"]);
    h.cancel.cancel();
}

/// `activeDeadlineSeconds` fails the pod with DeadlineExceeded and kills its containers.
#[tokio::test(start_paused = true)]
async fn active_deadline_fails_the_pod() {
    let h = harness().await;
    let mut p = (*pod("u13", "Always", &["a"], "localhost/app:1")).clone();
    p.spec.as_mut().unwrap().active_deadline_seconds = Some(30);
    h.workers.update(PodWork::Sync(Arc::new(p)));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    let t0 = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(h.phase("u13"), "Running");
    tokio::time::sleep(Duration::from_secs(2)).await;
    h.settle("Failed", |h| h.phase("u13") == "Failed").await;
    let status = h.status.status("u13").unwrap();
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    assert!(h.fake.running_container_names().is_empty());
    assert!(t0.elapsed() < Duration::from_secs(40));
    h.cancel.cancel();
}

/// A failing postStart hook kills the container (reason PostStartHookError) and the pod
/// restarts it with backoff.
#[tokio::test(start_paused = true)]
async fn failing_post_start_kills_the_container() {
    let h = harness().await;
    h.fake.set_exec_behaviour("a", 1, Duration::ZERO);
    let p = with_lifecycle(pod("u14", "Always", &["a"], "localhost/app:1"), |c| {
        c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
            post_start: Some(exec_handler(&["false"])),
            ..Default::default()
        });
    });
    h.workers.update(PodWork::Sync(p));
    h.settle("PostStartHookError", |h| {
        h.status
            .status("u14")
            .and_then(|s| s.container_statuses)
            .and_then(|cs| cs[0].state.clone()?.waiting?.reason)
            .is_some_and(|r| r == "PostStartHookError" || r == "CrashLoopBackOff")
    })
    .await;
    assert!(
        h.fake.running_container_names().is_empty(),
        "the container was killed"
    );
    assert_eq!(h.fake.calls_of("stop_container").len(), 1);
    h.cancel.cancel();
}

/// A sandbox the runtime cannot make (a CNI that is not ready) is a Warning
/// `FailedCreatePodSandBox` on the pod, quoting the runtime's error as the kubelet does, and the
/// next sync tries again.
#[tokio::test(start_paused = true)]
async fn a_failed_sandbox_is_an_event_and_is_tried_again() {
    let h = harness().await;
    h.fake.fail_next(
        "run_pod_sandbox",
        tonic::Status::unknown(
            "failed to setup network for sandbox \"x\": plugin type=\"bridge\" failed (add): no IP",
        ),
    );
    let p = pod("u16", "Always", &["a"], "localhost/app:1");
    h.workers.update(PodWork::Sync(p));
    h.settle("the sandbox failure recorded", |h| {
        h.events
            .events()
            .iter()
            .any(|e| e.reason.as_deref() == Some("FailedCreatePodSandBox"))
    })
    .await;
    // A failed sync is tried again after 10 s (`SYNC_ERROR_RETRY`), on the paused clock.
    tokio::time::sleep(Duration::from_secs(10)).await;
    h.settle("running after the retry", |h| {
        h.fake.running_container_names() == ["a"]
    })
    .await;
    let failed: Vec<_> = h
        .events
        .events()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedCreatePodSandBox"))
        .collect();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    assert_eq!(
        failed[0].message.as_deref(),
        Some(
            "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox \"x\": plugin type=\"bridge\" failed (add): no IP"
        )
    );
    assert_eq!(failed[0].involved_object.name.as_deref(), Some("u16-node1"));
    assert_eq!(h.fake.calls_of("run_pod_sandbox").len(), 2, "tried again");
    h.cancel.cancel();
}

/// Standalone, a pod's `runtimeClassName` cannot be resolved: the pod does not run (the kubelet
/// without an API client would run it under the default handler, dropping the isolation it
/// asked for), and says so in a `FailedCreatePodSandBox` event.
#[tokio::test(start_paused = true)]
async fn a_runtime_class_without_an_api_server_is_refused_with_an_event() {
    let h = harness().await;
    let mut p = (*pod("u21", "Always", &["a"], "localhost/app:1")).clone();
    p.spec.as_mut().unwrap().runtime_class_name = Some("gvisor".into());
    h.workers.update(PodWork::Sync(Arc::new(p)));
    h.settle("the refusal recorded", |h| {
        h.events
            .events()
            .iter()
            .any(|e| e.reason.as_deref() == Some("FailedCreatePodSandBox"))
    })
    .await;
    let event = h
        .events
        .events()
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("FailedCreatePodSandBox"))
        .unwrap();
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some(
            "Failed to create pod sandbox: RuntimeClass \"gvisor\" cannot be resolved without an API server (standalone mode); the pod is not run with the default handler"
        )
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(h.fake.calls_of("run_pod_sandbox").is_empty(), "no sandbox");
    assert!(h.fake.running_container_names().is_empty());
    h.cancel.cancel();
}

/// A volume that cannot be set up (a hostPath of type Directory that is missing) is the
/// kubelet's `FailedMount` event, in its words; nothing starts.
#[tokio::test(start_paused = true)]
async fn a_volume_that_cannot_be_set_up_is_a_failed_mount_event() {
    let h = harness().await;
    let mut p = (*pod("u19", "Always", &["a"], "localhost/app:1")).clone();
    let missing = h._dir.path().join("missing");
    p.spec.as_mut().unwrap().volumes = Some(vec![k8s_openapi::api::core::v1::Volume {
        name: "data".into(),
        host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
            path: missing.display().to_string(),
            type_: Some("Directory".into()),
        }),
        ..Default::default()
    }]);
    h.workers.update(PodWork::Sync(Arc::new(p)));
    let event = h.event("FailedMount").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some(
            format!(
                "MountVolume.SetUp failed for volume \"data\" : hostPath type check failed: {} is not a directory (type Directory)",
                missing.display()
            )
            .as_str()
        )
    );
    assert!(h.fake.running_container_names().is_empty());
    h.cancel.cancel();
}

/// A pod whose cgroup cannot be made does not start without its pod-level limits: the
/// kubelet's `FailedCreatePodContainer` event, no sandbox; it starts once the cgroup can be made.
#[tokio::test(start_paused = true)]
async fn a_pod_cgroup_that_cannot_be_made_keeps_the_pod_from_starting() {
    use nodelet::cgroup::fs::CgroupfsManager;
    use nodelet::cgroup::manager::Version;
    use nodelet::cgroup::node::{NodeCgroupConfig, NodeCgroups};
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("cgroup.controllers"), "cpu io memory pids").unwrap();
    let node = Arc::new(NodeCgroups::new(
        Arc::new(CgroupfsManager::new(root.path(), Version::V2)),
        NodeCgroupConfig {
            cgroup_root: "/".into(),
            pod: nodelet::cgroup::PodCgroupSettings {
                cgroup_v2: true,
                node_allocatable_memory: 1 << 30,
                ..Default::default()
            },
            capacity: nodelet::cgroup::allocatable::NodeResources {
                cpu_milli: 2000,
                memory: 2 << 30,
                pids: None,
            },
            reserved: Default::default(),
            enforce_pods: true,
        },
    ));
    node.start().await.unwrap();
    let settings = node.settings().clone();
    let h = harness_with_cgroups(
        (Duration::from_secs(10), Duration::from_secs(300)),
        |_| {},
        CgroupSetup::Given {
            settings,
            node: Some(node),
        },
    )
    .await;
    // A file where the pod's cgroup directory goes.
    let blocker = root.path().join("kubepods/besteffort/podu20");
    std::fs::write(&blocker, "").unwrap();
    let p = pod("u20", "Always", &["a"], "localhost/app:1");
    h.workers.update(PodWork::Sync(p));
    let event = h.event("FailedCreatePodContainer").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let message = event.message.unwrap_or_default();
    assert!(
        message.starts_with("unable to ensure pod container exists: "),
        "{message}"
    );
    assert!(h.fake.calls_of("run_pod_sandbox").is_empty(), "no sandbox");
    std::fs::remove_file(&blocker).unwrap();
    h.wait_running(&["a"], "running once it can be made").await;
    assert!(root.path().join("kubepods/besteffort/podu20").is_dir());
    h.cancel.cancel();
}

/// A sync that cannot read what the runtime holds is the kubelet's `FailedSync` event
/// ("error determining status"), and is tried again.
#[tokio::test(start_paused = true)]
async fn a_sync_that_cannot_read_the_runtime_is_a_failed_sync_event() {
    let h = harness().await;
    h.fake.fail_next(
        "list_pod_sandbox",
        tonic::Status::deadline_exceeded("context deadline exceeded"),
    );
    let p = pod("u18", "Always", &["a"], "localhost/app:1");
    h.workers.update(PodWork::Sync(p));
    let event = h.event("FailedSync").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some(
            "error determining status: rpc error: code = DeadlineExceeded desc = context deadline exceeded"
        )
    );
    h.wait_running(&["a"], "running after the retry").await;
    h.cancel.cancel();
}

/// An image the runtime cannot inspect is the kubelet's `InspectFailed` event and the
/// container waits with `ImageInspectError`; the next sync tries again.
#[tokio::test(start_paused = true)]
async fn an_image_that_cannot_be_inspected_is_an_inspect_failed_event() {
    let h = harness().await;
    h.fake.fail_next(
        "image_status",
        tonic::Status::unavailable("image store busy"),
    );
    let p = pod("u17", "Always", &["a"], "localhost/app:1");
    h.workers.update(PodWork::Sync(p));
    let event = h.event("InspectFailed").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let message = event.message.unwrap_or_default();
    assert!(
        message.starts_with("Failed to inspect image \"localhost/app:1\": ")
            && message.contains("image store busy"),
        "{message}"
    );
    assert_eq!(
        event.involved_object.field_path.as_deref(),
        Some("spec.containers{a}")
    );
    let waiting = h.status.status("u17").and_then(|s| {
        s.container_statuses?[0]
            .state
            .as_ref()?
            .waiting
            .as_ref()?
            .reason
            .clone()
    });
    assert_eq!(waiting.as_deref(), Some("ImageInspectError"));
    // Tried again at the next sync (the resync period, on the paused clock).
    h.wait_running(&["a"], "running after the retry").await;
    h.cancel.cancel();
}

/// The kubelet's events, in order, for a pod that starts, crashes into backoff and is killed.
#[tokio::test(start_paused = true)]
async fn records_the_kubelets_events() {
    let h = harness().await;
    let p = pod("u15", "Always", &["a"], "localhost/app:1");
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    h.fake.exit_container("a", 1);
    h.workers.wake("u15");
    h.settle("restarted", |h| h.restart_count("u15", "a") == 1)
        .await;
    h.fake.exit_container("a", 1);
    h.workers.wake("u15");
    h.settle("backing off", |h| {
        h.events
            .events()
            .iter()
            .any(|e| e.reason.as_deref() == Some("BackOff"))
    })
    .await;
    h.workers.update(PodWork::Kill {
        pod: p,
        grace: None,
        remove: false,
    });
    h.settle("killed", |h| {
        !h.fake.calls_of("stop_pod_sandbox").is_empty()
    })
    .await;
    let events: Vec<(String, String, String)> = h
        .events
        .events()
        .into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.involved_object.field_path.unwrap_or_default(),
            )
        })
        .collect();
    let reasons: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        reasons,
        ["Pulled", "Created", "Started", "BackOff"],
        "{events:#?}"
    );
    assert_eq!(
        events[0].1,
        "Container image \"localhost/app:1\" already present on machine"
    );
    assert_eq!(events[1].1, "Created container: a");
    assert_eq!(events[2].2, "spec.containers{a}");
    assert_eq!(
        events[3].1,
        "Back-off restarting failed container a in pod u15-node1_default(u15)"
    );
    // Repeats are counted, not duplicated.
    let started = h
        .events
        .events()
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("Started"))
        .unwrap();
    assert_eq!(started.count, Some(2));
    h.cancel.cancel();
}

/// ReduceDefaultCrashLoopBackOffDecay: 1 s initial delay doubling to a 60 s cap.
#[tokio::test(start_paused = true)]
async fn crash_loop_backoff_with_the_reduced_decay_gate() {
    let cfg = nodelet::config::parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates: {ReduceDefaultCrashLoopBackOffDecay: true}\n",
        std::path::Path::new("test.yaml"),
        &nodelet::config::Environment { hostname: "node1".into() },
    )
    .unwrap()
    .config;
    let h = harness_with_backoff(cfg.crash_loop_back_off_delays()).await;
    h.workers.update(PodWork::Sync(pod(
        "u16",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    let starts = h
        .crash_loop_starts("u16", "a", 10, |_| Duration::ZERO)
        .await;
    assert_eq!(starts, [0, 0, 1, 3, 7, 15, 31, 63, 123, 183]);
    h.cancel.cancel();
}

/// A failing liveness probe kills the container after failureThreshold periods and the pod
/// restarts it; the Unhealthy events and the Killing reason say why.
#[tokio::test(start_paused = true)]
async fn liveness_failure_kills_and_restarts_the_container() {
    let h = harness().await;
    h.fake.set_exec_behaviour("a", 1, Duration::ZERO);
    let p = with_lifecycle(pod("u17", "Always", &["a"], "localhost/app:1"), |c| {
        c.liveness_probe = Some(exec_probe(10, 3));
    });
    h.workers.update(PodWork::Sync(p));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    // The first probe runs when the container starts.
    let t0 = h
        .fake
        .calls()
        .into_iter()
        .find(|c| c.op == "start_container")
        .unwrap()
        .at;
    for _ in 0..400 {
        if !h.fake.calls_of("stop_container").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stop = h
        .fake
        .calls()
        .into_iter()
        .find(|c| c.op == "stop_container")
        .expect("killed");
    assert_eq!(
        (stop.at - t0).as_secs(),
        20,
        "3rd failed probe, 20 s after the first"
    );
    assert_eq!(stop.detail, "timeout=7");
    h.settle("restarted", |h| {
        h.restart_count("u17", "a") == 1 && h.fake.running_container_names() == ["a"]
    })
    .await;
    let reasons: Vec<(String, String)> = h
        .events
        .events()
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect();
    assert!(
        reasons
            .iter()
            .any(|(r, m)| r == "Unhealthy" && m.starts_with("Liveness probe failed")),
        "{reasons:#?}"
    );
    assert!(
        reasons
            .iter()
            .any(|(r, m)| r == "Killing"
                && m == "Container a failed liveness probe, will be restarted"),
        "{reasons:#?}"
    );
    h.cancel.cancel();
}

/// A failing readiness probe keeps the pod not Ready without restarting anything; once it
/// succeeds the pod becomes Ready.
#[tokio::test(start_paused = true)]
async fn readiness_drives_ready_without_restarts() {
    let h = harness().await;
    h.fake.set_exec_behaviour("a", 1, Duration::ZERO);
    let p = with_lifecycle(pod("u18", "Always", &["a"], "localhost/app:1"), |c| {
        c.readiness_probe = Some(exec_probe(5, 3));
    });
    h.workers.update(PodWork::Sync(p));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    let ready = |h: &Harness| {
        h.status
            .status("u18")
            .and_then(|s| s.conditions)
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status)
            .unwrap_or_default()
    };
    tokio::time::sleep(Duration::from_secs(60)).await;
    // The positive sign first: the readiness probe ran (and failed) all along.
    let probed = h.fake.calls_of("exec_sync");
    assert!(probed.len() >= 3, "the readiness probe ran: {probed:?}");
    assert_eq!(ready(&h), "False");
    assert_eq!(h.restart_count("u18", "a"), 0);
    assert!(h.fake.calls_of("stop_container").is_empty());
    h.fake.set_exec_behaviour("a", 0, Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(6)).await;
    h.settle("Ready", |h| ready(h) == "True").await;
    h.cancel.cancel();
}

/// A startup probe holds liveness back: the liveness probe (which would fail) never runs
/// before startup succeeds.
#[tokio::test(start_paused = true)]
async fn startup_probe_gates_liveness() {
    let h = harness().await;
    h.fake.set_exec_behaviour("a", 1, Duration::ZERO);
    let p = with_lifecycle(pod("u19", "Always", &["a"], "localhost/app:1"), |c| {
        let mut startup = exec_probe(10, 30);
        startup.exec = Some(k8s_openapi::api::core::v1::ExecAction {
            command: Some(vec!["started?".into()]),
        });
        c.startup_probe = Some(startup);
        c.liveness_probe = Some(exec_probe(10, 1));
    });
    h.workers.update(PodWork::Sync(p));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    tokio::time::sleep(Duration::from_secs(100)).await;
    let probes: Vec<String> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.op == "exec_sync")
        .map(|c| c.detail)
        .collect();
    assert!(
        !probes.is_empty() && probes.iter().all(|d| d == "started?"),
        "{probes:?}"
    );
    assert!(
        h.fake.calls_of("stop_container").is_empty(),
        "liveness did not kill during startup"
    );
    h.cancel.cancel();
}

/// A container that ran ten minutes without trouble starts its backoff over: it is restarted
/// at once, and the crash after that waits the initial 10 s again.
#[tokio::test(start_paused = true)]
async fn crash_loop_backoff_resets_after_ten_minutes_of_running() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u20",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    let starts = h
        .crash_loop_starts("u20", "a", 7, |n| {
            // The fifth instance runs for 11 minutes before it crashes.
            if n == 5 {
                Duration::from_secs(660)
            } else {
                Duration::ZERO
            }
        })
        .await;
    // 0 (start), 0, 10, 30, 70 (backoff 40 s), crash at 730 → restarted at once, then 10 s.
    assert_eq!(starts, [0, 0, 10, 30, 70, 730, 740]);
    h.cancel.cancel();
}

/// Failed pulls back off per image: ErrImagePull, then ImagePullBackOff for 10 s, 20 s, ...
#[tokio::test(start_paused = true)]
async fn image_pull_backoff() {
    let h = harness().await;
    let mut p = (*pod("u21", "Always", &["a"], "localhost/unpullable:1")).clone();
    p.spec.as_mut().unwrap().containers[0].image_pull_policy = Some("Always".into());
    h.workers.update(PodWork::Sync(Arc::new(p)));
    let waiting = |h: &Harness| {
        h.status
            .status("u21")
            .and_then(|s| s.container_statuses)
            .and_then(|cs| cs[0].state.clone()?.waiting?.reason)
            .unwrap_or_default()
    };
    h.settle("ErrImagePull", |h| waiting(h) == "ErrImagePull")
        .await;
    h.workers.wake("u21");
    h.settle("ImagePullBackOff", |h| waiting(h) == "ImagePullBackOff")
        .await;
    tokio::time::sleep(Duration::from_secs(65)).await;
    let calls: Vec<_> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.op == "pull_image")
        .collect();
    let first = calls[0].at;
    let pulls: Vec<u64> = calls.iter().map(|c| (c.at - first).as_secs()).collect();
    // After the first failure, pulls wait 10 s, then 20 s, then 40 s.
    assert_eq!(pulls, [0, 10, 30], "pull times");
    h.cancel.cancel();
}

/// `serializeImagePulls` (the default): two pods pulling at once take turns, node-wide; the
/// second's `Pulled` event counts its wait ("in 2s (4s including waiting)"). With
/// `serializeImagePulls: false` both pull at once.
#[tokio::test(start_paused = true)]
async fn serialized_pulls_take_turns_and_report_the_wait() {
    for (serialize, want) in [(true, ["2s (2s", "2s (4s"]), (false, ["2s (2s", "2s (2s"])] {
        let h = harness_with((Duration::from_secs(10), Duration::from_secs(300)), |c| {
            c.serialize_image_pulls = serialize
        })
        .await;
        h.fake.add_pullable_image("localhost/slow:1");
        h.fake.add_pullable_image("localhost/slow:2");
        h.fake.set_pull_delay(Duration::from_secs(2));
        for (uid, image) in [("u31", "localhost/slow:1"), ("u32", "localhost/slow:2")] {
            let mut p = (*pod(uid, "Always", &["a"], image)).clone();
            p.spec.as_mut().unwrap().containers[0].image_pull_policy = Some("Always".into());
            h.workers.update(PodWork::Sync(Arc::new(p)));
        }
        let pulled = |h: &Harness| -> Vec<String> {
            let mut m: Vec<String> = h
                .events
                .events()
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("Pulled"))
                .filter_map(|e| e.message)
                .collect();
            m.sort();
            m
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        h.settle("both pulled", |h| pulled(h).len() == 2).await;
        let messages = pulled(&h);
        let mut got: Vec<&str> = messages
            .iter()
            .map(|m| {
                let start = m.find(" in ").unwrap() + 4;
                &m[start..start + 6]
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "serializeImagePulls: {serialize}: {messages:?}");
        assert!(
            messages[0].ends_with("including waiting). Image size: 0 bytes."),
            "{messages:?}"
        );
        h.cancel.cancel();
    }
}

/// The 110-pod fault test's finding (a restart 16 s after its exit against a 20 s backoff) was
/// the test's reading, not nodelet's schedule: the first restart has no backoff, and when load
/// made it come 9 s or more after the first exit, the test took it for the 10 s one and the next
/// (a 10 s backoff) for the 20 s one. Here no exit is announced (no wake): the relist finds each
/// one, so the first restart comes late; the schedule after it still counts 10 s, then 20 s,
/// from each instance's finishedAt, and the late first restart shifts nothing.
#[tokio::test(start_paused = true)]
async fn crash_loop_backoff_counts_from_each_exit_when_the_first_restart_is_late() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u40",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    let t0 = tokio::time::Instant::now();
    let mut starts = Vec::new();
    let mut exits = Vec::new();
    while starts.len() < 4 {
        let calls: Vec<_> = h
            .fake
            .calls()
            .into_iter()
            .filter(|c| c.op == "start_container" && c.target == "a")
            .collect();
        if calls.len() > starts.len() {
            starts.push((calls[calls.len() - 1].at - t0).as_millis());
            // Crashes at once; nobody tells the worker.
            h.fake.exit_container("a", 1);
            exits.push(t0.elapsed().as_millis());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "starts: {starts:?}"
        );
    }
    // Waits from each exit to the next start, in whole seconds (the exits are seen within 100 ms).
    let waits: Vec<u128> = starts[1..]
        .iter()
        .zip(&exits)
        .map(|(start, exit)| (start - exit) / 1000)
        .collect();
    assert!(waits[0] >= 1, "the first restart was not late: {starts:?}");
    assert_eq!(waits[1..], [10, 20], "starts {starts:?}, exits {exits:?}");
    h.cancel.cancel();
}

/// containerd reports NOTREADY for a sandbox whose state it could not load as it restarted,
/// while the sandbox's process runs: the pod keeps its sandbox and containers.
#[tokio::test(start_paused = true)]
async fn a_sandbox_reported_not_ready_whose_process_runs_is_kept() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u9",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    let lost = h.fake.lose_sandbox_states();
    assert_eq!(lost.len(), 1, "one sandbox");
    // Two syncs that asked whether the process runs: the first has ended when the second asks.
    h.workers.wake("u9");
    h.settle("a sync asked for the verbose status", |h| {
        h.fake.calls_of("pod_sandbox_info").len() == 1
    })
    .await;
    h.workers.wake("u9");
    h.settle("a second sync asked", |h| {
        h.fake.calls_of("pod_sandbox_info").len() == 2
    })
    .await;
    assert_eq!(
        h.fake.calls_of("pod_sandbox_info"),
        [&lost[..], &lost[..]].concat()
    );
    assert_eq!(
        h.fake.calls_of("run_pod_sandbox").len(),
        1,
        "no new sandbox"
    );
    assert!(
        h.fake.calls_of("stop_container").is_empty(),
        "nothing stopped"
    );
    assert!(
        h.fake.calls_of("stop_pod_sandbox").is_empty(),
        "nothing stopped"
    );
    assert_eq!(h.fake.running_container_names(), ["a"]);
    assert_eq!(h.phase("u9"), "Running");
    h.cancel.cancel();
}

/// A sandbox whose process ended is not ready: the pod is killed and gets a new sandbox, as
/// with the kubelet.
#[tokio::test(start_paused = true)]
async fn a_sandbox_whose_process_ended_is_replaced() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u10",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    let first = h.fake.container_ids("a");
    assert_eq!(h.fake.end_sandbox_processes().len(), 1, "one sandbox");
    h.workers.wake("u10");
    h.settle("a new sandbox and a new container", |h| {
        h.fake.calls_of("run_pod_sandbox").len() == 2 && h.fake.running_container_names() == ["a"]
    })
    .await;
    assert_eq!(h.fake.calls_of("pod_sandbox_info").len(), 1);
    assert_ne!(
        h.fake.container_ids("a"),
        first,
        "the container was recreated"
    );
    assert!(h
        .events
        .events()
        .iter()
        .any(|e| e.reason.as_deref() == Some("SandboxChanged")));
    h.cancel.cancel();
}

/// The pod as the API server shows it once deleted: `deletionTimestamp` set, with this
/// `deletionGracePeriodSeconds` (0: forced).
fn deleted(
    p: &Arc<k8s_openapi::api::core::v1::Pod>,
    grace: i64,
) -> Arc<k8s_openapi::api::core::v1::Pod> {
    let mut p = (**p).clone();
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    p.metadata.deletion_grace_period_seconds = Some(grace);
    Arc::new(p)
}

/// Deleted in any state — admitted but not yet synced, waiting for an image, waiting for a
/// volume, after its sandbox failed, in back-off, running — a pod reaches a terminal status
/// with every container terminated (those that never ran as the kubelet's `TerminatePod`
/// reports them: ContainerStatusUnknown, 137; one that ran with its own last exit), and is
/// reclaimed, which is what
/// lets the final DELETE go out; nothing of it is left in the runtime. Each state is deleted
/// gracefully (5 s) and forcibly (0 s). Before the fix the never-run states stayed Pending,
/// so their final DELETE never went out.
#[tokio::test(start_paused = true)]
async fn a_deleted_pod_in_any_state_ends_terminal_and_reclaimed() {
    use k8s_openapi::api::core::v1::{HostPathVolumeSource, Volume, VolumeMount};
    #[derive(Clone, Copy, Debug)]
    enum Before {
        NotYetSynced,
        WaitingForImage,
        WaitingForVolume,
        SandboxFailed,
        BackOff,
        Running,
    }
    let h = harness().await;
    let missing = h._dir.path().join("missing");
    let mut n = 0;
    for before in [
        Before::NotYetSynced,
        Before::WaitingForImage,
        Before::WaitingForVolume,
        Before::SandboxFailed,
        Before::BackOff,
        Before::Running,
    ] {
        for grace in [5, 0] {
            n += 1;
            let uid = format!("del{n}");
            let name = format!("c{n}");
            let case = format!("{before:?}, deleted with grace {grace}");
            let image = match before {
                Before::WaitingForImage => "localhost/missing:1",
                _ => "localhost/app:1",
            };
            let mut p = (*pod(&uid, "Always", &[&name], image)).clone();
            if let Before::WaitingForVolume = before {
                let spec = p.spec.as_mut().unwrap();
                spec.volumes = Some(vec![Volume {
                    name: "data".into(),
                    host_path: Some(HostPathVolumeSource {
                        path: missing.display().to_string(),
                        type_: Some("Directory".into()),
                    }),
                    ..Default::default()
                }]);
                spec.containers[0].volume_mounts = Some(vec![VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    ..Default::default()
                }]);
            }
            if let Before::SandboxFailed = before {
                h.fake.fail_next(
                    "run_pod_sandbox",
                    tonic::Status::unknown("failed to setup network for sandbox: no IP"),
                );
            }
            let p = Arc::new(p);
            h.workers.update(PodWork::Sync(p.clone()));
            let waiting_reason = |h: &Harness| {
                h.status
                    .status(&uid)
                    .and_then(|s| s.container_statuses)
                    .and_then(|cs| cs[0].state.clone())
                    .and_then(|s| s.waiting)
                    .and_then(|w| w.reason)
                    .unwrap_or_default()
            };
            match before {
                Before::NotYetSynced => {}
                Before::WaitingForImage => {
                    h.settle(&case, |h| waiting_reason(h) == "ErrImageNeverPull")
                        .await
                }
                Before::WaitingForVolume => {
                    h.settle(&case, |h| {
                        h.events.events().iter().any(|e| {
                            e.reason.as_deref() == Some("FailedMount")
                                && e.involved_object.uid.as_deref() == Some(uid.as_str())
                        })
                    })
                    .await
                }
                Before::SandboxFailed => {
                    h.settle(&case, |h| {
                        h.events.events().iter().any(|e| {
                            e.reason.as_deref() == Some("FailedCreatePodSandBox")
                                && e.involved_object.uid.as_deref() == Some(uid.as_str())
                        })
                    })
                    .await
                }
                Before::BackOff => {
                    h.settle(&case, |h| {
                        h.fake.running_container_names() == [name.clone()]
                    })
                    .await;
                    // The first restart comes at once; the second exit waits its back-off.
                    h.fake.exit_container(&name, 1);
                    h.workers.wake(&uid);
                    h.settle(&case, |h| {
                        h.fake
                            .calls()
                            .iter()
                            .filter(|c| c.op == "start_container" && c.target == name)
                            .count()
                            == 2
                            && h.fake.running_container_names() == [name.clone()]
                    })
                    .await;
                    h.fake.exit_container(&name, 1);
                    h.workers.wake(&uid);
                    h.settle(&case, |h| waiting_reason(h) == "CrashLoopBackOff")
                        .await;
                }
                Before::Running => {
                    h.settle(&case, |h| {
                        h.fake.running_container_names() == [name.clone()]
                    })
                    .await
                }
            }
            h.workers.update(PodWork::Delete {
                pod: deleted(&p, grace),
            });
            h.settle(&format!("{case}: reclaimed"), |h| {
                h.status.lifecycle(&uid).reclaimed
            })
            .await;
            let status = h
                .status
                .status(&uid)
                .expect("the status stays until the API object goes");
            match before {
                // A stopped container's own exit decides (0 on SIGTERM: Succeeded).
                Before::Running => assert!(
                    matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")),
                    "{case}: {status:#?}"
                ),
                _ => assert_eq!(
                    status.phase.as_deref(),
                    Some("Failed"),
                    "{case}: {status:#?}"
                ),
            }
            let state = status.container_statuses.as_ref().unwrap()[0]
                .state
                .clone()
                .unwrap();
            let terminated = state
                .terminated
                .unwrap_or_else(|| panic!("{case}: {status:#?}"));
            match before {
                // It ran: its own last exit, not an unknown one (a deleted pod is not restarted,
                // so one in back-off shows the exit it waited after, as the kubelet's).
                Before::Running | Before::BackOff => assert_ne!(
                    terminated.reason.as_deref(),
                    Some("ContainerStatusUnknown"),
                    "{case}"
                ),
                _ => {
                    assert_eq!(
                        (terminated.reason.as_deref(), terminated.exit_code),
                        (Some("ContainerStatusUnknown"), 137),
                        "{case}"
                    );
                    assert_eq!(
                        terminated.message.as_deref(),
                        Some("The container could not be located when the pod was terminated"),
                        "{case}"
                    );
                }
            }
            assert_eq!(h.fake.sandbox_count(), 0, "{case}: a sandbox left");
            assert_eq!(h.fake.container_count(), 0, "{case}: a container left");
        }
    }
    h.cancel.cancel();
}

/// The status of an exit containerd's event announces does not wait for a sync of the same pod:
/// here the pod's sync is busy restarting its other container (CreateContainer takes 30 s),
/// and the exit of `b` shows in the status long before that sync ends.
#[tokio::test(start_paused = true)]
async fn an_exit_shows_in_the_status_while_the_pods_sync_is_busy() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u-busy",
        "Always",
        &["a", "b"],
        "localhost/app:1",
    )));
    h.settle("both running", |h| {
        h.fake.running_container_names() == ["a", "b"]
    })
    .await;
    let b = h.fake.container_ids("b").pop().expect("b's instance");
    h.fake.set_create_delay(Duration::from_secs(30));
    h.fake.exit_container("a", 1);
    h.workers.wake("u-busy");
    // The sync that restarts `a` is inside its CreateContainer (the container exists from the
    // call's start; the call returns 30 s later).
    h.settle("a's restart under way", |h| {
        h.fake.calls_of("create_container").len() == 3
    })
    .await;
    let busy_since = tokio::time::Instant::now();
    let b_state = |h: &Harness| {
        h.status
            .status("u-busy")
            .and_then(|s| s.container_statuses)
            .and_then(|cs| cs.into_iter().find(|c| c.name == "b"))
            .and_then(|c| c.state)
    };
    assert!(
        b_state(&h).is_some_and(|s| s.running.is_some()),
        "a positive sign first: b shows running before its exit"
    );
    // containerd's event: b's process exited with 2. The CRI still says running (the fake
    // is not told), as containerd's CRI does until it has recorded the exit.
    let at = jiff::Timestamp::new(1_767_225_700, 0).unwrap();
    let pleg = h.nodelet.pleg().clone();
    let event = tokio::spawn(async move { pleg.runtime_exit(&b, 2, at).await });
    h.settle("b's exit in the status", |h| {
        b_state(h)
            .and_then(|s| s.terminated)
            .is_some_and(|t| t.exit_code == 2 && t.reason.as_deref() == Some("Error"))
    })
    .await;
    assert!(
        busy_since.elapsed() < Duration::from_secs(30),
        "shown before the pod's sync ended ({:?})",
        busy_since.elapsed()
    );
    assert_eq!(
        h.fake.calls_of("start_container").len(),
        2,
        "the sync is still inside a's CreateContainer"
    );
    let ready = h
        .status
        .status("u-busy")
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .expect("a Ready condition");
    assert_eq!(ready.status, "False", "an exited container is not ready");
    event.abort();
    h.cancel.cancel();
}

/// An exit shown ahead of the sync changes the container, never the pod's phase: while a pod's
/// termination waits for a container that ignores SIGTERM, an exit that leaves the pod running
/// shows at once, the exit of its last container does not, and the phase stays what the pod
/// worker published until the termination's
/// final status, which gives the reason that ended it (DeadlineExceeded).
#[tokio::test(start_paused = true)]
async fn an_exit_shown_during_a_termination_leaves_the_phase_to_the_worker() {
    let h = harness().await;
    let mut p = (*pod(
        "u-never",
        "Never",
        &["polite", "stubborn"],
        "localhost/app:1",
    ))
    .clone();
    let spec = p.spec.as_mut().unwrap();
    spec.active_deadline_seconds = Some(5);
    spec.termination_grace_period_seconds = Some(30);
    h.fake.set_ignores_sigterm("stubborn");
    h.workers.update(PodWork::Sync(Arc::new(p)));
    h.settle("running", |h| h.phase("u-never") == "Running")
        .await;
    let stubborn = h.fake.container_ids("stubborn").pop().expect("an instance");
    let polite = h.fake.container_ids("polite").pop().expect("an instance");
    // The deadline passes: the termination stops `polite` and waits for `stubborn`.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let state = |h: &Harness, name: &str| {
        h.status
            .status("u-never")
            .and_then(|s| s.container_statuses)
            .and_then(|cs| cs.into_iter().find(|c| c.name == name))
            .and_then(|c| c.state)
    };
    h.settle("polite stopped", |h| {
        h.fake.running_container_names() == ["stubborn"]
    })
    .await;
    assert_eq!(
        h.phase("u-never"),
        "Running",
        "a positive sign: mid-termination"
    );
    // containerd's events: `polite` exited, shown at once (the pod stays Running: `stubborn`
    // runs); then `stubborn` (while its StopContainer still waits, as far as the fake runtime
    // is concerned) with an exit of 1: the last container — that exit would end the pod, so
    // it waits for the termination's final status.
    let at = jiff::Timestamp::new(1_767_225_700, 0).unwrap();
    let pleg = h.nodelet.pleg().clone();
    pleg.runtime_exit(&polite, 0, at).await;
    let code = |h: &Harness, name| {
        state(h, name)
            .and_then(|s| s.terminated)
            .map(|t| t.exit_code)
    };
    h.settle("polite's exit in the status", |h| {
        code(h, "polite") == Some(0)
    })
    .await;
    let event = tokio::spawn(async move { pleg.runtime_exit(&stubborn, 1, at).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        code(&h, "stubborn"),
        None,
        "not shown ahead of the pod's end"
    );
    assert_eq!(
        h.phase("u-never"),
        "Running",
        "only the termination's final status ends the pod"
    );
    // The termination's grace period ends: the final status, with what ended the pod.
    tokio::time::sleep(Duration::from_secs(31)).await;
    h.settle("ended", |h| h.phase("u-never") != "Running").await;
    let status = h.status.status("u-never").unwrap();
    assert_eq!(
        (status.phase.as_deref(), status.reason.as_deref()),
        (Some("Failed"), Some("DeadlineExceeded"))
    );
    event.abort();
    h.cancel.cancel();
}

/// The back-off belongs to the container's spec as the kubelet hashes it (name and image, its
/// `GetStableKey`): a crash-looping container whose image is changed starts at once with the new
/// image, not after the old image's back-off (Kubernetes' `[Slow]` [NodeConformance] spec
/// "should have their auto-restart back-off timer reset on image update").
#[tokio::test(start_paused = true)]
async fn a_new_image_starts_without_the_old_images_back_off() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod(
        "u41",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    let starts = h.crash_loop_starts("u41", "a", 5, |_| Duration::ZERO).await;
    assert_eq!(starts, [0, 0, 10, 30, 70]);
    // The fifth instance has crashed: with the old image the next start waits 80 s.
    let started = |h: &Harness| h.fake.calls_of("start_container").len();
    let before = started(&h);
    h.fake.add_image("localhost/app:2");
    h.workers.update(PodWork::Sync(pod(
        "u41",
        "Always",
        &["a"],
        "localhost/app:2",
    )));
    h.settle("the new image started without a back-off", |h| {
        started(h) > before
    })
    .await;
    h.cancel.cancel();
}

/// A panic in a pod's sync (here inside a runtime call) does not lose the pod: the worker logs
/// and counts it, starts its memory over, and the sync is tried again, which starts the
/// container; a termination's panic is caught the same way and the pod still ends.
#[tokio::test(start_paused = true)]
async fn a_panicking_sync_or_termination_leaves_the_pod_its_worker() {
    let h = harness().await;
    let panics = || nodelet::metrics::metrics().pod_worker_panics_total.get();
    let before = panics();
    h.fake.panic_next("create_container");
    let p = pod("u-panic", "Always", &["a"], "localhost/app:1");
    h.workers.update(PodWork::Sync(p.clone()));
    // A failed effect is tried again after the worker's error retry (2 s of paused time).
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.settle("running after the panic", |h| {
        h.phase("u-panic") == "Running" && h.fake.running_container_names() == ["a"]
    })
    .await;
    assert!(panics() > before, "the panic is counted");
    assert!(h.workers.has_worker("u-panic"));

    let before = panics();
    h.fake.panic_next("stop_container");
    h.workers.update(PodWork::Kill {
        pod: p,
        grace: None,
        remove: true,
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.settle(
        "the pod ended and removed after the termination's panic",
        |h| !h.workers.has_worker("u-panic") && h.fake.running_container_names().is_empty(),
    )
    .await;
    assert!(panics() > before, "the termination's panic is counted");
    h.cancel.cancel();
}
