//! Init containers and sidecars on a real containerd, through the real `nodelet` binary.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use nodelet::cri::{api, labels, Runtime};
use nodelet_testkit::pod::{all_running, container_status, phase, terminated};

const T: Duration = Duration::from_secs(120);

/// Exact start and finish times (nanoseconds) of the newest instance of each container of a
/// pod, from the runtime (the API's times have whole-second precision).
async fn runtime_times(n: &Nodelet, pod: &str) -> HashMap<String, (i64, i64)> {
    let rt = runtime();
    let selector: HashMap<String, String> = [
        (labels::NODE_NAME.to_string(), n.node.clone()),
        (labels::POD_NAME.to_string(), n.pod_name(pod)),
    ]
    .into();
    let containers = rt
        .list_containers(Some(api::ContainerFilter {
            label_selector: selector,
            ..Default::default()
        }))
        .await
        .unwrap();
    let mut out: HashMap<String, (i64, i64, i64)> = HashMap::new();
    for c in containers {
        let s = rt.container_status(&c.id).await.unwrap();
        let name = c.labels[labels::CONTAINER_NAME].clone();
        let newer = out
            .get(&name)
            .is_none_or(|(created, _, _)| s.created_at > *created);
        if newer {
            out.insert(name, (s.created_at, s.started_at, s.finished_at));
        }
    }
    out.into_iter().map(|(k, (_, s, f))| (k, (s, f))).collect()
}

fn init_status<'a>(
    p: &'a k8s_openapi::api::core::v1::Pod,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    p.status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_and_sidecars_start_in_order_and_the_pod_succeeds_with_its_main_container() {
    let n = Nodelet::start("sidecar-order");
    let init = |name: &str| {
        format!("  - name: {name}\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"0\", --after, 500ms]\n")
    };
    let sidecar = |name: &str| {
        format!("  - name: {name}\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    restartPolicy: Always\n    args: [serve]\n")
    };
    n.write_manifest(
        "s.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: s\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 5\n  initContainers:\n{}{}{}{}{}  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"0\", --after, 3s]\n",
            init("init1"),
            sidecar("sidecar1"),
            init("init2"),
            sidecar("sidecar2"),
            init("init3")
        ),
    );
    // Both sidecars run beside main.
    let p = n
        .wait_pod("s", T, "main running", |p| {
            container_status(p, "main")
                .and_then(|c| c.state.as_ref()?.running.as_ref())
                .is_some()
        })
        .await;
    for s in ["sidecar1", "sidecar2"] {
        assert!(
            init_status(&p, s)
                .and_then(|c| c.state.as_ref()?.running.as_ref())
                .is_some(),
            "{s} runs with main: {:?}",
            init_status(&p, s)
        );
    }
    let times = runtime_times(&n, "s").await;
    let order = ["init1", "sidecar1", "init2", "sidecar2", "init3", "main"];
    let starts: Vec<i64> = order.iter().map(|c| times[*c].0).collect();
    assert!(
        starts.windows(2).all(|w| w[0] < w[1]),
        "start order {order:?}: {starts:?}"
    );
    // Each init container finished before the next container started.
    assert!(times["init1"].1 < times["sidecar1"].0);
    assert!(times["init2"].1 < times["sidecar2"].0);
    assert!(times["init3"].1 < times["main"].0);
    // main exits 0 while the sidecars would run forever: the pod succeeds, the sidecars stop.
    let p = n
        .wait_pod("s", T, "Succeeded", |p| phase(p) == "Succeeded")
        .await;
    for s in ["sidecar1", "sidecar2"] {
        assert!(
            init_status(&p, s)
                .and_then(|c| c.state.as_ref()?.terminated.as_ref())
                .is_some(),
            "{s} stopped"
        );
    }
    assert_eq!(terminated(&p, "main"), Some((0, "Completed".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_stop_after_the_main_containers_in_reverse_order() {
    let n = Nodelet::start("sidecar-stop");
    let sidecar = |name: &str| {
        format!("  - name: {name}\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    restartPolicy: Always\n    args: [serve, --sigterm-delay, 1s]\n")
    };
    n.write_manifest(
        "t.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: t\nspec:\n  activeDeadlineSeconds: 15\n  terminationGracePeriodSeconds: 20\n  initContainers:\n{}{}  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve, --sigterm-delay, 1s]\n",
            sidecar("sidecar1"),
            sidecar("sidecar2")
        ),
    );
    n.wait_pod("t", T, "running", all_running).await;
    let p = n
        .wait_pod("t", T, "terminated by its deadline", |p| {
            phase(p) == "Failed"
                && ["sidecar1", "sidecar2"].iter().all(|s| {
                    init_status(p, s)
                        .and_then(|c| c.state.as_ref()?.terminated.as_ref())
                        .is_some()
                })
        })
        .await;
    assert_eq!(
        p.status.as_ref().unwrap().reason.as_deref(),
        Some("DeadlineExceeded")
    );
    let times = runtime_times(&n, "t").await;
    let (main, s2, s1) = (times["main"].1, times["sidecar2"].1, times["sidecar1"].1);
    assert!(
        main < s2 && s2 < s1,
        "finishedAt: main {main}, sidecar2 {s2}, sidecar1 {s1}"
    );
    // Each waited for the one before (1 s SIGTERM handling each).
    assert!(
        s2 - main >= 900_000_000 && s1 - s2 >= 900_000_000,
        "{main} {s2} {s1}"
    );
}

/// When a container of `dir`'s event files (written by testbox's `--event-file`) logged `event`.
fn event_time(dir: &std::path::Path, container: &str, event: &str) -> jiff::Timestamp {
    let text = std::fs::read_to_string(dir.join(container)).unwrap_or_default();
    text.lines()
        .find_map(|line| {
            let (at, what) = line.split_once(' ')?;
            (what == event).then(|| at.parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("{container} never logged {event:?}: {text:?}"))
}

/// Deleting the pod (removing its manifest): the main container stops first, then the sidecars in
/// reverse order, each receiving SIGTERM only once the one after it has exited. Seen from inside
/// the containers: each writes when it received SIGTERM and when it exited to a hostPath file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_exit_in_reverse_order_when_the_pod_is_deleted() {
    let n = Nodelet::start("sidecar-delete");
    let host = n.dir.path().join("events");
    std::fs::create_dir_all(&host).unwrap();
    let container = |name: &str, sidecar: bool| {
        format!(
            "  - name: {name}\n    image: {TESTBOX}\n    imagePullPolicy: Never\n{policy}    args: [serve, --sigterm-delay, 1s, --event-file, /ev/{name}]\n    volumeMounts:\n    - name: ev\n      mountPath: /ev\n",
            policy = if sidecar { "    restartPolicy: Always\n" } else { "" }
        )
    };
    n.write_manifest(
        "d.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: d\nspec:\n  terminationGracePeriodSeconds: 30\n  volumes:\n  - name: ev\n    hostPath:\n      path: {host}\n  initContainers:\n{}{}  containers:\n{}",
            container("sidecar1", true),
            container("sidecar2", true),
            container("main", false),
            host = host.display()
        ),
    );
    n.wait_pod("d", T, "running", all_running).await;
    n.remove_manifest("d.yaml");
    n.wait_gone("d", T).await;
    let term = |c| event_time(&host, c, "received SIGTERM");
    let exit = |c| event_time(&host, c, "exiting with 0");
    // main is told first; sidecar2 only after main exited; sidecar1 only after sidecar2 exited.
    assert!(term("main") < exit("main"));
    assert!(
        exit("main") <= term("sidecar2"),
        "sidecar2 told before main exited"
    );
    assert!(
        exit("sidecar2") <= term("sidecar1"),
        "sidecar1 told before sidecar2 exited"
    );
    assert!(exit("sidecar2") < exit("sidecar1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_init_container_under_never_fails_the_pod() {
    let n = Nodelet::start("init-never");
    n.write_manifest(
        "f.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: f\nspec:\n  restartPolicy: Never\n  initContainers:\n\
             \x20 - name: init-ok\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"0\"]\n\
             \x20 - name: init-fail\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"3\"]\n\
             \x20 containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
        ),
    );
    let p = n.wait_pod("f", T, "Failed", |p| phase(p) == "Failed").await;
    let initialized = p
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Initialized")
        .unwrap()
        .clone();
    assert_eq!(initialized.status, "False");
    assert_eq!(
        initialized.reason.as_deref(),
        Some("ContainersNotInitialized")
    );
    assert_eq!(
        initialized.message.as_deref(),
        Some("containers with incomplete status: [init-fail]")
    );
    assert!(
        container_status(&p, "main")
            .and_then(|c| c.container_id.clone())
            .is_none(),
        "main never started"
    );
    let (_, out, _) = n.cli(&["pods", "--server", &n.base_url()]);
    assert!(
        out.lines()
            .any(|l| l.contains(&n.pod_name("f")) && l.contains("Init:Error")),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_table_shows_init_progress_like_kubectl() {
    let n = Nodelet::start("init-table");
    n.write_manifest(
        "slow.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: slow\nspec:\n  initContainers:\n\
             \x20 - name: wait\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [sleep, infinity]\n\
             \x20 - name: second\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"0\"]\n\
             \x20 containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
        ),
    );
    n.write_manifest(
        "crash.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: crash\nspec:\n  initContainers:\n\
             \x20 - name: boom\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [exit, --code, \"1\"]\n\
             \x20 containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
        ),
    );
    let status_of = |out: &str, name: &str| -> String {
        out.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(2))
            .unwrap_or_default()
            .to_string()
    };
    let deadline = std::time::Instant::now() + T;
    loop {
        let (_, out, _) = n.cli(&["pods", "--server", &n.base_url()]);
        let slow = status_of(&out, &n.pod_name("slow"));
        let crash = status_of(&out, &n.pod_name("crash"));
        if slow == "Init:0/2" && crash == "Init:CrashLoopBackOff" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "table never showed Init:0/2 and Init:CrashLoopBackOff:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The seed's ml-worker pod (busybox image replaced by the local testbox image, and the
/// watcher's 60 s shortened to 5 s): exit 88 of the watcher restarts the whole pod in place, with
/// the same sandbox and IP; setup-environment runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ml_worker_restarts_in_place_on_exit_code_88() {
    let n = Nodelet::start("ml-worker");
    let seed = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: ml-worker
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 30
  initContainers:
  - name: setup-environment
    image: {TESTBOX}
    imagePullPolicy: Never
    command: ['sh', '-c', 'echo "Setting up environment"']
  - name: watcher-sidecar
    image: {TESTBOX}
    imagePullPolicy: Never
    command: ['sh', '-c', 'sleep 5; exit 88']
    restartPolicy: Always
    restartPolicyRules:
    - action: RestartAllContainers
      onExit:
        exitCodes:
          operator: In
          values: [88]
  containers:
  - name: main-application
    image: {TESTBOX}
    imagePullPolicy: Never
    command: ['sh', '-c', 'echo "Application is running"; sleep 3600']
"#
    );
    n.write_manifest("ml-worker.yaml", &seed);
    let before = n.wait_pod("ml-worker", T, "running", all_running).await;
    let ip = before.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let (sandboxes, _) = n.runtime_objects().await;
    assert_eq!(sandboxes.len(), 1);
    let sandbox = sandboxes[0].id.clone();
    let main_id = container_status(&before, "main-application")
        .unwrap()
        .container_id
        .clone();
    let after = n
        .wait_pod("ml-worker", T, "restarted in place", |p| {
            all_running(p)
                && container_status(p, "main-application")
                    .unwrap()
                    .container_id
                    != main_id
                && init_status(p, "setup-environment").is_some_and(|c| c.restart_count >= 1)
        })
        .await;
    let status = after.status.as_ref().unwrap();
    assert_eq!(status.pod_ip.as_deref(), Some(ip.as_str()), "same IP");
    assert_eq!(after.metadata.uid, before.metadata.uid, "same pod");
    let (sandboxes, _) = n.runtime_objects().await;
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(sandboxes[0].id, sandbox, "same sandbox");
    let restart = status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "PodRestartInPlace")
        .expect("PodRestartInPlace condition");
    assert_eq!(restart.status, "False", "False once the restart is done");
    assert_eq!(phase(&after), "Running");
}

/// The suite's "node reboot" (Kubernetes' `[Serial]` "restart the containers in right order
/// after the node reboot"): the pod's sandbox is stopped under nodelet, which creates a new one,
/// purges the old init containers (as the kubelet's `purgeInitContainers`) and runs them again
/// from the first. The sidecar and the second init container start in later syncs, when the
/// runtime no longer holds their old instances: their restart count comes from the log files
/// left (the kubelet's `calcRestartCountByLogDir`), so each new instance writes `1.log`, not
/// onto the old instance's `0.log` (which showed the old lines twice to `kubectl logs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_sandbox_continues_the_purged_init_containers_logs() {
    let mut n = Nodelet::start("reboot-logs");
    let c = |name: &str, args: &str, extra: &str| {
        format!("  - name: {name}\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [{args}]\n{extra}")
    };
    n.write_manifest(
        "r.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: r\nspec:\n  terminationGracePeriodSeconds: 2\n  initContainers:\n{}{}{}  containers:\n{}",
            c("init-1", "exit, --code, \"0\"", ""),
            c("sidecar", "sleep", "    restartPolicy: Always\n"),
            c("init-3", "exit, --code, \"0\"", ""),
            c("main", "sleep", ""),
        ),
    );
    let pod = n.wait_pod("r", T, "Running", all_running).await;
    let uid = pod.metadata.uid.clone().expect("uid");
    let rt = runtime();
    let sandboxes = rt
        .list_pod_sandbox(Some(api::PodSandboxFilter {
            label_selector: [(labels::POD_UID.to_string(), uid.clone())].into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(sandboxes.len(), 1, "{sandboxes:?}");
    // As the suite: the agent stopped, the sandbox stopped under it, the agent started.
    n.kill9();
    rt.stop_pod_sandbox(&sandboxes[0].id)
        .await
        .expect("StopPodSandbox");
    n.relaunch();
    let again = n
        .wait_pod(
            "r",
            T,
            "every container running again in a new sandbox",
            |p| {
                all_running(p)
                    && ["init-1", "sidecar", "init-3"].iter().all(|name| {
                        p.status
                            .as_ref()
                            .and_then(|s| s.init_container_statuses.as_ref())
                            .and_then(|cs| cs.iter().find(|c| c.name == *name))
                            .is_some_and(|c| c.restart_count >= 1)
                    })
            },
        )
        .await;
    let logs = n
        .dir
        .path()
        .join("logs")
        .join(format!("default_{}_{uid}", n.pod_name("r")));
    for name in ["init-1", "sidecar", "init-3"] {
        let mut files: Vec<String> = std::fs::read_dir(logs.join(name))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files, ["0.log", "1.log"], "{name}: {again:?}");
    }
    // The restart counts the status shows are the instances' own.
    let status = again.status.unwrap();
    let statuses = status.init_container_statuses.unwrap();
    assert!(
        statuses.iter().all(|s| s.restart_count == 1),
        "{statuses:?}"
    );
    assert_eq!(status.container_statuses.unwrap()[0].restart_count, 1);
}
