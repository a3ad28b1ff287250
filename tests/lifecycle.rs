//! Container lifecycle on a real containerd: graceful termination, hooks, restart rules, OOM
//! kills, activeDeadlineSeconds — through the real `nodelet` binary.

mod common;

use std::time::Duration;

use common::*;
use nodelet_testkit::pod::{all_running, container_status, phase, restart_count, terminated};
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(90);

fn pod_yaml(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

/// activeDeadlineSeconds ends the pod; the container that ignores SIGTERM is SIGKILLed after
/// the grace period (exit 137), the one that handles it exits 0 (Completed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ignored_is_killed_after_grace_and_handled_is_completed() {
    let n = Nodelet::start("sigterm");
    n.write_manifest(
        "d.yaml",
        &pod_yaml(
            "d",
            &format!(
                "  restartPolicy: Never\n  activeDeadlineSeconds: 3\n  terminationGracePeriodSeconds: 3\n  containers:\n\
                 \x20 - name: stubborn\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve, --on-sigterm, ignore]\n\
                 \x20 - name: polite\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve, --sigterm-exit-code, \"0\"]\n"
            ),
        ),
    );
    n.wait_pod("d", T, "running", all_running).await;
    let pod = n
        .wait_pod(
            "d",
            T,
            "Failed with DeadlineExceeded and both containers terminated",
            |p| {
                phase(p) == "Failed"
                    && terminated(p, "stubborn").is_some()
                    && terminated(p, "polite").is_some()
            },
        )
        .await;
    let status = pod.status.as_ref().unwrap();
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(terminated(&pod, "stubborn"), Some((137, "Error".into())));
    assert_eq!(terminated(&pod, "polite"), Some((0, "Completed".into())));
    // The stubborn container got its grace period (3 s) before the SIGKILL.
    let t = |name: &str| {
        container_status(&pod, name)
            .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.clone())
            .unwrap()
            .0
    };
    let gap = t("stubborn").duration_since(t("polite"));
    assert!(
        gap.as_secs() >= 2,
        "SIGKILL came only {gap:?} after the polite container stopped"
    );
    // Never reported running or waiting again: the PLEG has relisted the runtime since (a
    // container started again would have reached the status), then some more time.
    n.wait_metric_advance("nodelet_pleg_relist_duration_seconds_count", T)
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = n.pod("d").await.unwrap();
    assert_eq!(phase(&later), "Failed");
    assert!(terminated(&later, "stubborn").is_some());
}

/// postStart runs after the container starts, preStop before the stop signal; both observed
/// through files the hooks write into a hostPath.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_start_and_pre_stop_hooks_run_inside_the_container() {
    let n = Nodelet::start("hooks");
    let host = n.dir.path().join("hooks");
    std::fs::create_dir_all(&host).unwrap();
    n.write_manifest(
        "h.yaml",
        &pod_yaml(
            "h",
            &format!(
                "  terminationGracePeriodSeconds: 10\n  volumes:\n  - name: out\n    hostPath:\n      path: {host}\n  containers:\n\
                 \x20 - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n\
                 \x20   volumeMounts:\n    - name: out\n      mountPath: /out\n\
                 \x20   lifecycle:\n      postStart:\n        exec:\n          command: [/bin/sh, -c, \"echo started > /out/poststart\"]\n\
                 \x20     preStop:\n        exec:\n          command: [/bin/sh, -c, \"echo stopping > /out/prestop\"]\n",
                host = host.display()
            ),
        ),
    );
    n.wait_pod("h", T, "running", all_running).await;
    assert_eq!(
        std::fs::read_to_string(host.join("poststart"))
            .unwrap()
            .trim(),
        "started"
    );
    assert!(!host.join("prestop").exists());
    n.remove_manifest("h.yaml");
    n.wait_gone("h", T).await;
    assert_eq!(
        std::fs::read_to_string(host.join("prestop"))
            .unwrap()
            .trim(),
        "stopping"
    );
}

/// A failing postStart hook kills the container; it is restarted with backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_post_start_hook_kills_and_restarts() {
    let n = Nodelet::start("poststart-fail");
    n.write_manifest(
        "f.yaml",
        &pod_yaml(
            "f",
            &format!(
                "  terminationGracePeriodSeconds: 2\n  containers:\n\
                 \x20 - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n\
                 \x20   lifecycle:\n      postStart:\n        exec:\n          command: [/bin/sh, -c, \"exit 3\"]\n"
            ),
        ),
    );
    let pod = n
        .wait_pod("f", T, "restarted after the hook failed", |p| {
            restart_count(p, "main") >= 1
        })
        .await;
    container_status(&pod, "main")
        .and_then(|c| c.last_state.clone()?.terminated)
        .expect("the killed instance is the last state");
    assert!(
        n.logs().contains("FailedPostStartHook"),
        "{}",
        tail(&n.logs(), 30)
    );
}

/// Container restart rules: restartPolicy Never with a rule restarting on exit code 42 restarts
/// the container that exits 42 and not the one that exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policy_rules_restart_only_on_exit_code_42() {
    let n = Nodelet::start("rules");
    let rule = "    restartPolicy: Never\n    restartPolicyRules:\n    - action: Restart\n      exitCodes:\n        operator: In\n        values: [42]\n";
    n.write_manifest(
        "r.yaml",
        &pod_yaml(
            "r",
            &format!(
                "  restartPolicy: Never\n  containers:\n\
                 \x20 - name: answer\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"42\", --after, 1s]\n{rule}\
                 \x20 - name: other\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"1\", --after, 1s]\n{rule}"
            ),
        ),
    );
    let pod = n
        .wait_pod("r", T, "exit 42 restarted", |p| {
            restart_count(p, "answer") >= 1
        })
        .await;
    assert_eq!(restart_count(&pod, "other"), 0);
    // The positive sign first: `other` exited and was reported, and the pod worker has since
    // finished two more syncs (the one that may have decided a restart, and one that reported
    // its result).
    n.wait_pod("r", T, "other reported exited", |p| {
        terminated(p, "other").is_some()
    })
    .await;
    for _ in 0..2 {
        n.wait_metric_advance("nodelet_pod_worker_duration_seconds_count", T)
            .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pod = n.pod("r").await.unwrap();
    assert_eq!(restart_count(&pod, "other"), 0, "exit 1 is not restarted");
    assert_eq!(terminated(&pod, "other"), Some((1, "Error".into())));
}

/// A container allocating past its memory limit is OOM-killed and reported as OOMKilled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_exceeded_is_oom_killed() {
    let n = Nodelet::start("oom");
    n.write_manifest(
        "o.yaml",
        &pod_yaml(
            "o",
            &format!(
                "  restartPolicy: Never\n  containers:\n\
                 \x20 - name: hog\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [alloc, --mib, \"256\", --hold]\n\
                 \x20   resources:\n      limits:\n        memory: 64Mi\n"
            ),
        ),
    );
    let pod = n.wait_pod("o", T, "Failed", |p| phase(p) == "Failed").await;
    assert_eq!(terminated(&pod, "hog"), Some((137, "OOMKilled".into())));
}

/// The OOM kills nodelet reads in a container's own cgroup when a SIGKILL exit comes before
/// its `/tasks/oom` event (`stats::container_cgroup::ContainerOomKills`, asked by the PLEG):
/// found where the runtime's verbose status places the cgroup, on this host's real containerd.
/// A process exec'd into a running container with a 64Mi limit allocates 256 MiB and is
/// OOM-killed while the container's main process runs on, so the count stays readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oom_kills_of_a_container_are_read_from_its_cgroup() {
    use nodelet::cri::Runtime;
    use nodelet::pleg::OomKills;
    use nodelet::stats::cgroup::CgroupReader;
    use nodelet::stats::container_cgroup::ContainerOomKills;
    let n = Nodelet::start("oomcount");
    n.write_manifest(
        "k.yaml",
        &pod_yaml(
            "k",
            &format!(
                "  containers:\n\
                 \x20 - name: limited\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [sleep]\n\
                 \x20   resources:\n      limits:\n        memory: 64Mi\n\
                 \x20 - name: calm\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [sleep]\n"
            ),
        ),
    );
    let pod = n.wait_pod("k", T, "Running", all_running).await;
    let id = |name: &str| {
        let id = container_status(&pod, name)
            .and_then(|s| s.container_id.clone())
            .expect("container ID");
        id.rsplit("://").next().unwrap().to_string()
    };
    let (limited, calm) = (id("limited"), id("calm"));
    let rt = runtime();
    let kills = ContainerOomKills::new(
        rt.clone(),
        CgroupReader::detect(std::path::Path::new("/sys/fs/cgroup")),
    );
    assert_eq!(
        kills.oom_killed(&limited).await,
        Some(false),
        "before the allocation"
    );
    let hog = rt
        .exec_sync(
            &limited,
            vec![
                "/testbox".into(),
                "alloc".into(),
                "--mib".into(),
                "256".into(),
                "--hold".into(),
            ],
            Duration::from_secs(60),
        )
        .await
        .expect("ExecSync");
    assert_eq!(hog.exit_code, 137, "the allocation is OOM-killed: {hog:?}");
    assert_eq!(
        kills.oom_killed(&limited).await,
        Some(true),
        "after the OOM kill"
    );
    assert_eq!(
        kills.oom_killed(&calm).await,
        Some(false),
        "the other container"
    );
    assert_eq!(kills.oom_killed("no-such-container").await, None);
}

/// What nodelet reads to keep a sandbox containerd reports NOTREADY after a restart while its
/// process runs (`cri::model::sandbox_process_runs`): containerd's verbose sandbox status says
/// the process runs while the pause process runs, and no longer once the sandbox is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_verbose_sandbox_status_says_whether_the_process_runs() {
    use nodelet::cri::model::sandbox_process_runs;
    use nodelet::cri::{api, Runtime};
    let rt = runtime();
    let name = format!("verbose-status-{}", std::process::id());
    let config = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.clone(),
            uid: name.clone(),
            namespace: "nodelet-tests".into(),
            attempt: 0,
        }),
        ..Default::default()
    };
    let id = rt.run_pod_sandbox(config, "").await.expect("RunPodSandbox");
    let running = rt.pod_sandbox_info(&id).await;
    let stopped = match rt.stop_pod_sandbox(&id).await {
        Ok(()) => rt.pod_sandbox_info(&id).await,
        Err(e) => Err(e),
    };
    rt.remove_pod_sandbox(&id).await.expect("RemovePodSandbox");
    let running = running.expect("verbose PodSandboxStatus of the running sandbox");
    assert!(sandbox_process_runs(&running), "running: {running:?}");
    let stopped = stopped.expect("verbose PodSandboxStatus of the stopped sandbox");
    assert!(!sandbox_process_runs(&stopped), "stopped: {stopped:?}");
}

/// A running pod's status has the `PodReadyToStartContainers` condition, True once the sandbox
/// is up (the gate is GA and locked on in v1.37).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_to_start_condition_is_published() {
    let condition = |p: &k8s_openapi::api::core::v1::Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodReadyToStartContainers"))
            .map(|c| c.status.clone())
    };
    let running = |p: &k8s_openapi::api::core::v1::Pod| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    };
    let on = Nodelet::start("ready-to-start-on");
    on.write_manifest(
        "p.yaml",
        &testbox_pod("p", "Always", &[("main", &["sleep"])]),
    );
    let p = on
        .wait_pod("p", Duration::from_secs(90), "Running", running)
        .await;
    assert_eq!(condition(&p).as_deref(), Some("True"), "{:?}", p.status);
}

/// The runtime's major version from the CRI's Version answer (`1.6.20~ds1`, `v2.1.9`).
async fn containerd_major() -> u32 {
    use nodelet::cri::Runtime;
    let version = runtime().version().await.expect("CRI Version");
    version
        .runtime_version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("runtime version {:?}", version.runtime_version))
}

/// The cgroup driver comes from the runtime's `RuntimeConfig` when it has one (containerd 2.x:
/// the configuration says `systemd`, the runtime `cgroupfs`, the runtime wins and the log says
/// so; the container lands in a cgroupfs-style path); containerd 1.6 has no `RuntimeConfig`
/// and the configured driver stands, with the kubelet's line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cgroup_driver_comes_from_the_runtime_when_it_says() {
    use nodelet::cri::{Runtime, StatsRuntime};
    let major = containerd_major().await;
    // The test containerd on this host runs runc with cgroupfs (SystemdCgroup = false).
    let configured = if major >= 2 { "systemd" } else { "cgroupfs" };
    let n = Nodelet::start_with("driver", &format!("cgroupDriver: {configured}\n"));
    n.write_manifest(
        "d.yaml",
        &pod_yaml(
            "d",
            &format!(
                "  containers:\n  - name: c\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [sleep, \"3600\"]\n"
            ),
        ),
    );
    let pod = n.wait_pod("d", T, "Running", all_running).await;
    let logs = n.logs();
    if major >= 2 {
        let line = logs
            .lines()
            .find(|l| l.contains("Using cgroup driver setting received from the CRI runtime"))
            .unwrap_or_else(|| panic!("no line on the runtime's driver:\n{}", tail(&logs, 40)));
        assert!(
            line.contains("cgroup_driver=cgroupfs") && line.contains("configured=systemd"),
            "{line}"
        );
        let id = container_status(&pod, "c")
            .and_then(|s| s.container_id.clone())
            .expect("container ID");
        let id = id.rsplit("://").next().unwrap().to_string();
        let info = runtime().container_info(&id).await.expect("verbose status");
        let path = nodelet::stats::container_cgroup::cgroups_path_from_info(&info)
            .expect("cgroupsPath in the verbose status");
        assert!(
            path.starts_with("/kubepods") && !path.contains(".slice"),
            "a cgroupfs path, not a systemd slice: {path}"
        );
    } else {
        assert!(
            logs.contains("CRI implementation should be updated to support RuntimeConfig"),
            "no fallback line:\n{}",
            tail(&logs, 40)
        );
        assert!(!logs.contains("Using cgroup driver setting received from the CRI runtime"));
    }
    // Alive and well: the runtime still has the pod's container running.
    let (_, containers) = n.runtime_objects().await;
    assert!(containers
        .iter()
        .any(|c| c.state == nodelet::cri::api::ContainerState::ContainerRunning as i32));
    let _ = runtime().version().await.expect("runtime still answers");
}

/// A crash-looping container's exits reach `/pods` with the runtime's exit code and time, and a
/// container once reported terminated is never reported running again: the status taken from
/// containerd's exit event runs ahead of the CRI, never against it. Watched every few
/// milliseconds over several exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_reaches_the_status_and_is_never_taken_back() {
    use std::collections::{BTreeMap, BTreeSet};
    let n = Nodelet::start_with(
        "exitseen",
        "crashLoopBackOff:\n  maxContainerRestartPeriod: 1s\n",
    );
    n.write_manifest(
        "e.yaml",
        &pod_yaml(
            "e",
            &format!(
                "  containers:\n  - name: c\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"3\", --after, 400ms]\n"
            ),
        ),
    );
    // Per container ID: whether it was seen terminated, and any running sighting after that.
    let mut terminated_ids: BTreeMap<String, (i32, String)> = BTreeMap::new();
    let mut running_ids: BTreeSet<String> = BTreeSet::new();
    let mut taken_back = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while terminated_ids.len() < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} exits seen in 120 s\n{}",
            terminated_ids.len(),
            tail(&n.logs(), 40)
        );
        if let Some(pod) = n.pod("e").await {
            if let Some(s) = container_status(&pod, "c") {
                let id = s.container_id.clone().unwrap_or_default();
                let state = s.state.clone().unwrap_or_default();
                if let Some(t) = state.terminated {
                    let finished = t.finished_at.map(|f| f.0.to_string()).unwrap_or_default();
                    terminated_ids.insert(id.clone(), (t.exit_code, finished));
                } else if state.running.is_some() && !id.is_empty() {
                    if terminated_ids.contains_key(&id) {
                        taken_back.push(id.clone());
                    }
                    running_ids.insert(id);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert!(
        taken_back.is_empty(),
        "terminated, then running again: {taken_back:?}"
    );
    // The reported exits are the runtime's own: code 3, finishedAt as the CRI has it.
    let rt = runtime();
    for (id, (code, finished)) in &terminated_ids {
        assert_eq!(*code, 3, "{id}");
        let bare = id.rsplit("://").next().unwrap();
        // The status may run ahead of the CRI (that is the point): wait for it to agree.
        let mut agreed = None;
        for _ in 0..200 {
            match nodelet::cri::Runtime::container_status(rt.as_ref(), bare).await {
                Ok(s) if s.finished_at > 0 => {
                    agreed = Some(s);
                    break;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                // Removed by the container GC meanwhile: nothing left to compare with.
                Err(_) => break,
            }
        }
        if let Some(status) = agreed {
            assert_eq!(status.exit_code, 3, "{id}: the CRI's exit code");
            let cri = jiff::Timestamp::from_nanosecond(i128::from(status.finished_at)).unwrap();
            assert_eq!(
                *finished,
                jiff::Timestamp::from_second(cri.as_second())
                    .unwrap()
                    .to_string(),
                "{id}: finishedAt as the CRI reports it"
            );
        }
    }
    assert!(
        running_ids.len() >= 3,
        "restarts seen running: {running_ids:?}"
    );
}
