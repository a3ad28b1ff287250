//! A cgroup v2 node under systemd, in the test VM (tests/vm, scripts/vm.sh): one VM per cgroup
//! driver, each running every check of that driver in one boot. containerd runs as
//! `containerd.service` with the matching `SystemdCgroup`, nodelet as `nodelet.service` from
//! `systemd/nodelet.service`, both driven with `systemctl`.
//!
//! To add a check: add lines to a step below (the pods of [`QOS_PODS`] are running and their
//! cgroup directories known in [`qos_pods_land_in_their_cgroups`]), or a new step `async fn` called
//! from [`node_checks`]. Everything on the [`vm::Guest`] works inside the guest only.

mod common;
mod vm;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{all_running, running_ids, terminated, TESTBOX};
use k8s_openapi::api::core::v1::Pod;
use vm::{Driver, Guest, Qos};

#[test]
fn systemd_driver() {
    vm::scenario("systemd_driver", Driver::Systemd, node_checks);
}

#[test]
fn cgroupfs_driver() {
    vm::scenario("cgroupfs_driver", Driver::Cgroupfs, node_checks);
}

/// Every check of one driver, in one boot, in this order.
async fn node_checks(node: Guest) {
    nodelet_runs_as_a_systemd_service(&node);
    let pods = qos_pods_land_in_their_cgroups(&node).await;
    container_over_its_memory_limit_is_oom_killed(&node).await;
    restarting_nodelet_adopts_the_running_containers(&node, &pods).await;
    stopping_nodelet_leaves_the_pods_alone(&node, &pods).await;
    restarting_containerd_leaves_nodelet_running_and_connected(&node, &pods).await;
}

/// The QoS pods: (name, QoS class, `resources:` of the one container).
const QOS_PODS: [(&str, Qos, &str); 3] = [
    (
        "guaranteed",
        Qos::Guaranteed,
        "{limits: {cpu: 200m, memory: 64Mi}}",
    ),
    (
        "burstable",
        Qos::Burstable,
        "{requests: {cpu: 100m, memory: 32Mi}, limits: {memory: 128Mi}}",
    ),
    ("besteffort", Qos::BestEffort, "{}"),
];

/// A running QoS pod as the steps see it.
struct QosPod {
    name: &'static str,
    qos: Qos,
    uid: String,
    /// The pod's cgroup directory (absolute).
    cgroup: PathBuf,
    /// Its containers' IDs as the pod status reports them (`containerd://...`).
    container_ids: Vec<String>,
}

/// A testbox pod with one container `main` that appends its events (start, signals) to a file
/// in a hostPath directory of the node, `<state>/events/<name>/main.log`.
fn testbox_pod(node: &Guest, name: &str, policy: &str, resources: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {policy}\n\
         \x20 terminationGracePeriodSeconds: 5\n  volumes:\n  - name: events\n    hostPath:\n\
         \x20     path: {events}\n      type: DirectoryOrCreate\n  containers:\n  - name: main\n\
         \x20   image: {TESTBOX}\n    imagePullPolicy: Never\n\
         \x20   args: [\"--event-file\", \"/events/main.log\", {args}]\n\
         \x20   volumeMounts:\n    - {{name: events, mountPath: /events}}\n\
         \x20   resources: {resources}\n",
        events = events_dir(node, name).display(),
        args = args.join(", "),
    )
}

fn events_dir(node: &Guest, pod: &str) -> PathBuf {
    node.state.join("events").join(pod)
}

fn events_of(node: &Guest, pod: &str) -> String {
    std::fs::read_to_string(events_dir(node, pod).join("main.log")).unwrap_or_default()
}

/// `containerd://<id>` → `<id>`.
fn bare_id(container_id: &str) -> &str {
    container_id.rsplit("://").next().unwrap_or(container_id)
}

fn qos_class(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .unwrap_or("")
}

fn nodelet_runs_as_a_systemd_service(node: &Guest) {
    let _step = node.step("nodelet starts as a systemd service");
    assert_eq!(
        std::fs::read_to_string("/proc/1/comm").unwrap().trim(),
        "systemd"
    );
    assert_eq!(
        nix::sys::statfs::statfs("/sys/fs/cgroup")
            .expect("statfs /sys/fs/cgroup")
            .filesystem_type(),
        nix::sys::statfs::CGROUP2_SUPER_MAGIC,
        "the guest runs the unified cgroup v2 hierarchy"
    );
    node.start_nodelet("");
    assert_eq!(
        node.unit("nodelet.service", "FragmentPath"),
        "/etc/systemd/system/nodelet.service"
    );
    let pid = node.main_pid("nodelet.service");
    assert_eq!(node.cgroup_of(pid), "system.slice/nodelet.service");
    assert_eq!(node.unit("nodelet.service", "KillMode"), "process");
}

async fn qos_pods_land_in_their_cgroups(node: &Guest) -> Vec<QosPod> {
    let _step = node.step("pods of the three QoS classes in their cgroups");
    for (name, _, resources) in QOS_PODS {
        node.write_manifest(
            &format!("{name}.yaml"),
            &testbox_pod(node, name, "Always", resources, &["serve"]),
        );
    }
    let mut pods = Vec::new();
    for (name, qos, _) in QOS_PODS {
        let pod = node.wait_pod(name, "running container", all_running).await;
        assert_eq!(qos_class(&pod), qos.class(), "{name}: status.qosClass");
        let uid = pod.metadata.uid.clone().expect("uid");
        let cgroup = node.pod_cgroup(qos, &uid);
        assert!(
            cgroup.is_dir(),
            "{name}: no pod cgroup {}",
            cgroup.display()
        );
        pods.push(QosPod {
            name,
            qos,
            uid,
            cgroup,
            container_ids: running_ids(&pod),
        });
    }
    // Every process of a pod (its sandbox's pause and its container) runs below the pod cgroup;
    // each container in a cgroup of its own there.
    let tasks = node.tasks();
    for pod in &pods {
        let relative = pod
            .cgroup
            .strip_prefix("/sys/fs/cgroup")
            .expect("below the cgroup mount")
            .display()
            .to_string();
        let inside: Vec<&String> = tasks
            .iter()
            .filter(|(_, (pid, _))| node.cgroup_of(*pid).starts_with(&format!("{relative}/")))
            .map(|(id, _)| id)
            .collect();
        assert_eq!(
            inside.len(),
            2,
            "{}: want the sandbox and one container below {relative}, got {inside:?} (tasks {tasks:?})",
            pod.name
        );
        for id in &pod.container_ids {
            let (pid, _) = tasks[bare_id(id)];
            let cgroup = node.cgroup_of(pid);
            assert!(
                cgroup.starts_with(&format!("{relative}/")) && cgroup.contains(bare_id(id)),
                "{}: container {id} runs in {cgroup}, want a cgroup of its own below {relative}",
                pod.name
            );
        }
        println!(
            "vm scenario: {} ({:?}, uid {}) in {relative}",
            pod.name, pod.qos, pod.uid
        );
        if node.driver == Driver::Systemd {
            // The pod's slice is a systemd unit, not a directory someone wrote into the tree.
            let slice = relative.rsplit('/').next().unwrap();
            assert_eq!(node.unit(slice, "ActiveState"), "active", "{slice}");
        }
    }
    pods
}

async fn container_over_its_memory_limit_is_oom_killed(node: &Guest) {
    let _step = node.step("container over its memory limit is OOM-killed");
    // The allocating process is a child of the container's shell, which outlives it by two
    // seconds: containerd 1.6's shim reads the container cgroup's memory.events when the kernel
    // bumps oom_kill, and under the systemd driver systemd removes the scope as soon as it is
    // empty; under emulation that removal won the race now and then, the OOM event was lost and
    // the CRI said "Error" (containerd/containerd#8180 is the same loss for containers killed
    // right after their start). A kubelet on this containerd reports exactly what nodelet does.
    node.write_manifest(
        "oom.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: oom\nspec:\n  restartPolicy: Never\n\
             \x20 containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n\
             \x20   command: [/bin/sh, -c, '/testbox alloc --mib 256 --chunk-mib 4 --interval 100ms; \
             status=$?; sleep 2; exit $status']\n\
             \x20   resources: {{limits: {{memory: 48Mi}}}}\n"
        ),
    );
    let pod = node
        .wait_pod("oom", "terminated main container", |p| {
            terminated(p, "main").is_some()
        })
        .await;
    assert_eq!(
        terminated(&pod, "main"),
        Some((137, "OOMKilled".to_string())),
        "{:?}",
        pod.status
    );
    // The kernel did kill in it: the pod cgroup's (hierarchical) memory.events counts it.
    let uid = pod.metadata.uid.as_deref().expect("uid");
    let cgroup = node.pod_cgroup(Qos::Burstable, uid);
    let events = node.cgroup_file(&cgroup, "memory.events");
    let oom_kills: u64 = events
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}/memory.events: {events}", cgroup.display()));
    assert!(
        oom_kills >= 1,
        "{}/memory.events: {events}",
        cgroup.display()
    );
    // Gone again, so the later steps see only the long-running pods.
    node.remove_manifest("oom.yaml");
    node.wait_gone("oom").await;
}

/// Waits until every pod runs the containers it ran before; fails with nodelet's events for the
/// pods whose containers changed (a `SandboxChanged` or `Killing` says why).
async fn wait_same_containers(node: &Guest, pods: &[QosPod], after: &str) {
    for pod in pods {
        let seen = node
            .pod(pod.name)
            .await
            .map(|p| running_ids(&p))
            .unwrap_or_default();
        // Not listed, or no container yet: wait_pod below waits and reports.
        if !seen.is_empty() && seen != pod.container_ids {
            panic!(
                "{}: after {after} its containers are {seen:?}, before {:?}\n\
                 --- nodelet's events for the pod ---\n{}",
                pod.name,
                pod.container_ids,
                node.events(&pod.uid).await
            );
        }
        node.wait_pod(pod.name, "the same running containers", |p| {
            all_running(p) && running_ids(p) == pod.container_ids
        })
        .await;
    }
}

/// Every running task (id → pid) of containerd, sandboxes included.
fn running_tasks(node: &Guest) -> BTreeMap<String, u32> {
    node.tasks()
        .into_iter()
        .filter(|(_, (_, status))| status == "RUNNING")
        .map(|(id, (pid, _))| (id, pid))
        .collect()
}

async fn restarting_nodelet_adopts_the_running_containers(node: &Guest, pods: &[QosPod]) {
    let _step = node.step("systemctl restart nodelet adopts the running containers");
    let tasks = running_tasks(node);
    let old_pid = node.main_pid("nodelet.service");
    node.systemctl(&["restart", "nodelet.service"]);
    let new_pid = node.main_pid("nodelet.service");
    assert_ne!(new_pid, old_pid, "nodelet was restarted");
    // Alive and at work: the new process has relisted and synced every pod more than once
    // (syncFrequency 10s), so whatever it would do to them it has done.
    node.wait_metric(
        "nodelet_pleg_relist_duration_seconds_count",
        "three relists",
        |n| n >= 3.0,
    )
    .await;
    node.wait_metric(
        "nodelet_pod_worker_duration_seconds_count",
        "two syncs of each of the three pods",
        |n| n >= 6.0,
    )
    .await;
    wait_same_containers(node, pods, "nodelet's restart").await;
    assert_eq!(
        node.metric_now("nodelet_started_containers_total").await,
        0.0,
        "the restarted nodelet started containers"
    );
    assert_eq!(
        node.metric_now("nodelet_started_pods_total").await,
        0.0,
        "the restarted nodelet started sandboxes"
    );
    assert_eq!(running_tasks(node), tasks, "containerd's running tasks");
}

/// PLEG events that came from containerd's task event stream.
const CONTAINERD_EVENTS: &str = "nodelet_pleg_events_total{source=\"containerd\"}";

async fn restarting_containerd_leaves_nodelet_running_and_connected(node: &Guest, pods: &[QosPod]) {
    let _step = node.step("systemctl restart containerd under nodelet");
    node.systemctl(&["start", "nodelet.service"]);
    wait_same_containers(node, pods, "nodelet's start").await;
    let nodelet_pid = node.main_pid("nodelet.service");
    let nodelet_restarts = node.unit("nodelet.service", "NRestarts");
    let containerd_pid = node.main_pid("containerd.service");
    let tasks = running_tasks(node);
    // No series yet when no event came since nodelet started.
    let metrics = node.metrics().await.expect("nodelet answers /metrics");
    let events_before = vm::metric_sum(&metrics, CONTAINERD_EVENTS).unwrap_or(0.0);

    node.systemctl(&["restart", "containerd.service"]);
    assert_ne!(node.main_pid("containerd.service"), containerd_pid);
    // nodelet's CRI client reconnects: a pod created now runs...
    node.write_manifest(
        "after-restart.yaml",
        &testbox_pod(node, "after-restart", "Always", "{}", &["serve"]),
    );
    node.wait_pod("after-restart", "running container", all_running)
        .await;
    // ...and so does its subscription to containerd's task events: the new pod's start reached
    // nodelet as an event (a relist counts as source="relist").
    node.wait_metric(
        CONTAINERD_EVENTS,
        "containerd task event after the restart",
        |n| n > events_before,
    )
    .await;
    assert_eq!(
        node.main_pid("nodelet.service"),
        nodelet_pid,
        "nodelet's PID"
    );
    assert_eq!(
        node.unit("nodelet.service", "NRestarts"),
        nodelet_restarts,
        "nodelet restarted (crashed?)"
    );
    assert_eq!(node.unit("nodelet.service", "ActiveState"), "active");
    // containerd's restart left the containers running (its unit is KillMode=process too), and
    // nodelet left them alone.
    wait_same_containers(node, pods, "containerd's restart").await;
    let now = running_tasks(node);
    for (id, pid) in &tasks {
        assert_eq!(
            now.get(id),
            Some(pid),
            "task {id} after containerd's restart"
        );
    }
}

async fn stopping_nodelet_leaves_the_pods_alone(node: &Guest, pods: &[QosPod]) {
    let _step = node.step("systemctl stop nodelet leaves the pods alone");
    // The nodelet stopped here was just restarted and has seen no containerd event since: its
    // subscription to containerd's events is still unanswered, which once held the stop up.
    for pod in pods {
        assert!(
            events_of(node, pod.name).contains("started serve"),
            "{}: the event file works: {:?}",
            pod.name,
            events_of(node, pod.name)
        );
    }
    let tasks = running_tasks(node);
    let pid = node.main_pid("nodelet.service");
    let said = node.journal_count("shutting down; pods keep running");
    node.systemctl(&["stop", "nodelet.service"]);
    // The stop is complete: nodelet handled SIGTERM and exited, systemd reports the unit down.
    assert_eq!(node.unit("nodelet.service", "ActiveState"), "inactive");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert_eq!(
        node.journal_count("shutting down; pods keep running"),
        said + 1,
        "nodelet's own shutdown message\n{}",
        node.journal(20)
    );
    assert_eq!(
        node.journal_count("did not stop within"),
        0,
        "nodelet's shutdown was not clean\n{}",
        node.journal(20)
    );
    assert_eq!(running_tasks(node), tasks, "containerd's running tasks");
    for (id, pid) in &tasks {
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "task {id}: pid {pid} is gone"
        );
    }
    for pod in pods.iter().map(|p| p.name) {
        let events = events_of(node, pod);
        assert!(
            !events.contains("SIGTERM"),
            "{pod}: its container was signalled: {events}"
        );
    }
}

// Host-side tables for the helpers the scenarios rely on.

#[test]
fn guest_report_is_parsed_from_the_console() {
    let console = [
        "vm guest [  30.1s]: running: ...",
        "thread 'x' (323) panicked at tests/vm_node.rs:264:5:",
        "assertion `left == right` failed",
        "stack backtrace:",
        "   0: __rustc::rust_begin_unwind",
        "NODELET-VM-SCENARIO-PASSED: y",
        "==== NODELET-VM-JOURNAL-BEGIN journalctl -u nodelet -u containerd ====",
        "nodelet[1]: starting nodelet",
        "==== NODELET-VM-JOURNAL-END ====",
        "NODELET-VM-RESULT: 101",
    ]
    .map(str::to_string);
    let report = vm::GuestReport::parse(&console);
    assert_eq!(report.result, Some(101));
    assert_eq!(report.journal, vec!["nodelet[1]: starting nodelet"]);
    assert_eq!(
        report.panics,
        vec![
            "thread 'x' (323) panicked at tests/vm_node.rs:264:5:",
            "assertion `left == right` failed"
        ]
    );
    assert_eq!(report.passed, vec!["y"]);
    assert_eq!(
        report.failure("x").as_deref(),
        Some("the scenario exited 101")
    );

    let cases: [(&[&str], Option<&str>); 4] = [
        (
            &["NODELET-VM-SCENARIO-PASSED: x", "NODELET-VM-RESULT: 0"],
            None,
        ),
        (
            &["NODELET-VM-RESULT: 0"],
            Some("the guest ran no scenario \"x\" (is it the name of the test function?)"),
        ),
        (
            &["NODELET-VM-SCENARIO-PASSED: y", "NODELET-VM-RESULT: 0"],
            Some("the guest ran no scenario \"x\" (is it the name of the test function?)"),
        ),
        (
            &["[  1.0] Kernel panic"],
            Some("the guest reported no result (boot failure, crash or timeout)"),
        ),
    ];
    for (lines, want) in cases {
        assert_eq!(
            vm::GuestReport::parse(lines).failure("x").as_deref(),
            want,
            "{lines:?}"
        );
    }
}

#[test]
fn pod_cgroup_paths_follow_the_kubelet_naming() {
    let uid = "1234-ab-5";
    let cases = [
        (
            Driver::Systemd,
            Qos::Guaranteed,
            "kubepods.slice/kubepods-pod1234_ab_5.slice",
        ),
        (
            Driver::Systemd,
            Qos::Burstable,
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab_5.slice",
        ),
        (
            Driver::Systemd,
            Qos::BestEffort,
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_ab_5.slice",
        ),
        (Driver::Cgroupfs, Qos::Guaranteed, "kubepods/pod1234-ab-5"),
        (
            Driver::Cgroupfs,
            Qos::Burstable,
            "kubepods/burstable/pod1234-ab-5",
        ),
        (
            Driver::Cgroupfs,
            Qos::BestEffort,
            "kubepods/besteffort/pod1234-ab-5",
        ),
    ];
    for (driver, qos, want) in cases {
        assert_eq!(
            vm::pod_cgroup_path(driver, qos, uid),
            want,
            "{driver:?} {qos:?}"
        );
    }
}

#[test]
fn metrics_and_tasks_are_read_from_their_text() {
    let text = "# HELP nodelet_pleg_events Pod lifecycle events\n\
                nodelet_pleg_events_total{source=\"containerd\"} 4\n\
                nodelet_pleg_events_total{source=\"relist\"} 2\n\
                nodelet_started_containers_total 0\n\
                nodelet_pod_worker_duration_seconds_count 7\n";
    let cases = [
        ("nodelet_pleg_events_total", Some(6.0)),
        (
            "nodelet_pleg_events_total{source=\"containerd\"}",
            Some(4.0),
        ),
        ("nodelet_pleg_events_total{source=\"other\"}", None),
        ("nodelet_started_containers_total", Some(0.0)),
        ("nodelet_pod_worker_duration_seconds_count", Some(7.0)),
        ("nodelet_started_container_total", None),
    ];
    for (series, want) in cases {
        assert_eq!(vm::metric_sum(text, series), want, "{series}");
    }

    let tasks = vm::parse_tasks(
        "TASK                                                                PID     STATUS\n\
         0f1e2d                                                              812     RUNNING\n\
         9a8b7c                                                              0       STOPPED\n",
    );
    assert_eq!(
        tasks,
        [
            ("0f1e2d".to_string(), (812, "RUNNING".to_string())),
            ("9a8b7c".to_string(), (0, "STOPPED".to_string())),
        ]
        .into()
    );
}
