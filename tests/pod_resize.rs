//! In-place pod resize on a real containerd: nodelet joined to the real v1.37.2 control plane
//! (the fixture where a resize must reach the node that the real server refuses), resized with the real `kubectl patch --subresource resize`, the result read from the
//! containers' cgroups and from the pod's status.

mod common;

use std::path::Path;

use apiserver_fixture::Fixture;
use common::*;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use nodelet::cri::StatsRuntime;

/// A pod bound to `node`: one testbox container with Burstable resources (requests
/// cpu 100m / memory 32Mi, limits `cpu_limit` / `memory_limit`) and `extra` in the container.
fn resizable_pod(
    name: &str,
    node: &str,
    cpu_request: &str,
    cpu_limit: &str,
    extra: &str,
) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    resources:\n      requests: {{cpu: {cpu_request}, memory: 32Mi}}\n      limits: {{cpu: {cpu_limit}, memory: 64Mi}}\n{extra}"
    )
}

fn main_status(p: &Pod) -> Option<ContainerStatus> {
    nodelet_testkit::pod::container_status(p, "main").cloned()
}

fn running_main(p: &Pod) -> Option<ContainerStatus> {
    main_status(p).filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

fn condition(p: &Pod, type_: &str) -> Option<PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

fn quantity(
    list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
    name: &str,
) -> Option<String> {
    list?.get(name).map(|q| q.0.clone())
}

fn resize(api: &str, name: &str, patch: &str) {
    let (ok, out, err) = kubectl(
        api,
        &[
            "patch",
            "pod",
            name,
            "--subresource",
            "resize",
            "--patch",
            patch,
        ],
    );
    assert!(ok, "kubectl patch --subresource resize: {out}{err}");
}

/// A container's cgroup file, found through the cgroupsPath of its verbose status (v1: the
/// named controller's hierarchy; v2: the unified one).
async fn cgroup_file(container_id: &str, controller: &str, v1: &str, v2: &str) -> String {
    cgroup_file_at(container_id, false, controller, v1, v2).await
}

/// [`cgroup_file`] of the container's cgroup, or with `pod` of its parent (the pod cgroup).
async fn cgroup_file_at(
    container_id: &str,
    pod: bool,
    controller: &str,
    v1: &str,
    v2: &str,
) -> String {
    let id = container_id.rsplit("://").next().unwrap().to_string();
    let info = runtime().container_info(&id).await.expect("verbose status");
    let path = nodelet::stats::container_cgroup::cgroups_path_from_info(&info)
        .expect("cgroupsPath in the verbose status");
    // A systemd cgroupsPath is "slice:prefix:name"; the tests run nodelet with cgroupfs.
    let path = if pod {
        path.rsplit_once('/')
            .map(|(parent, _)| parent.to_string())
            .unwrap()
    } else {
        path
    };
    let relative = path.trim_start_matches('/');
    let v1_dir = Path::new("/sys/fs/cgroup").join(controller).join(relative);
    let file = if v1_dir.exists() {
        v1_dir.join(v1)
    } else {
        Path::new("/sys/fs/cgroup").join(relative).join(v2)
    };
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .to_string()
}

/// The container's cpu quota in microseconds per 100 ms period (`None`: unlimited).
async fn cpu_quota(container_id: &str) -> Option<i64> {
    cpu_quota_at(container_id, false).await
}

/// The cpu quota of the container's cgroup, or with `pod` of its pod's.
async fn cpu_quota_at(container_id: &str, pod: bool) -> Option<i64> {
    let v = cgroup_file_at(container_id, pod, "cpu", "cpu.cfs_quota_us", "cpu.max").await;
    v.split_whitespace()
        .next()
        .and_then(|q| q.parse().ok())
        .filter(|q: &i64| *q > 0)
}

async fn memory_limit(container_id: &str) -> i64 {
    cgroup_file(
        container_id,
        "memory",
        "memory.limit_in_bytes",
        "memory.max",
    )
    .await
    .parse()
    .unwrap()
}

/// (a) A raised cpu limit reaches the running container's cgroup in place: no restart, the same
/// container, and `containerStatuses[].resources` shows it (from the runtime's report, or on
/// containerd 1.6, which reports none, from what nodelet applied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_limit_raised_in_place_reaches_the_cgroup() {
    let server = RealServer::start("resize-cpu");
    let api = server.api();
    let n = Nodelet::start_in_real_cluster("resize-cpu", &server, "");
    kubectl_apply(
        &api,
        n.dir.path(),
        "cpu",
        &resizable_pod("cpu", &n.node, "100m", "200m", ""),
    );
    let before = wait_api("the pod running", &n, || {
        running_main(&api_pod(&server, "cpu")?)
    })
    .await;
    let id = before.container_id.clone().expect("container ID");
    assert_eq!(cpu_quota(&id).await, Some(20_000));
    assert_eq!(
        cpu_quota_at(&id, true).await,
        Some(20_000),
        "the pod cgroup"
    );
    assert_eq!(
        quantity(before.allocated_resources.as_ref(), "cpu").as_deref(),
        Some("100m")
    );

    resize(
        &api,
        "cpu",
        r#"{"spec":{"containers":[{"name":"main","resources":{"limits":{"cpu":"500m"}}}]}}"#,
    );
    let after = wait_api("the new cpu limit in the status", &n, || {
        let c = running_main(&api_pod(&server, "cpu")?)?;
        (quantity(c.resources.as_ref()?.limits.as_ref(), "cpu").as_deref() == Some("500m"))
            .then_some(c)
    })
    .await;
    assert_eq!(cpu_quota(&id).await, Some(50_000), "the container's cgroup");
    assert_eq!(
        cpu_quota_at(&id, true).await,
        Some(50_000),
        "the pod cgroup"
    );
    assert_eq!(
        after.container_id.as_deref(),
        Some(id.as_str()),
        "same container"
    );
    assert_eq!(after.restart_count, 0);
    // Done: no resize condition is left, and the status observed the new generation.
    let pod = wait_api("the resize conditions gone", &n, || {
        let p = api_pod(&server, "cpu")?;
        (condition(&p, "PodResizeInProgress").is_none()
            && condition(&p, "PodResizePending").is_none())
        .then_some(p)
    })
    .await;
    assert_eq!(pod.metadata.generation, Some(2));
    // The kubelet's resize events, with its JSON summary of the allocated resources.
    let summary = r#"{"containers":[{"name":"main","resources":{"limits":{"cpu":"500m","memory":"64Mi"},"requests":{"cpu":"100m","memory":"32Mi"}}}],"generation":2}"#;
    let events = wait_api("ResizeStarted and ResizeCompleted events", &n, || {
        let (ok, out, _) = kubectl(&api, &["get", "events", "-o", "json"]);
        let json: serde_json::Value = serde_json::from_str(&out).ok()?;
        let events: Vec<(String, String)> = json["items"]
            .as_array()?
            .iter()
            .filter(|e| e["involvedObject"]["name"] == "cpu")
            .filter_map(|e| {
                Some((
                    e["reason"].as_str()?.to_string(),
                    e["message"].as_str()?.to_string(),
                ))
            })
            .collect();
        (ok && events.iter().any(|(r, _)| r == "ResizeCompleted")).then_some(events)
    })
    .await;
    for (reason, prefix) in [
        ("ResizeStarted", "Pod resize started"),
        ("ResizeCompleted", "Pod resize completed"),
    ] {
        assert!(
            events.contains(&(reason.to_string(), format!("{prefix}: {summary}"))),
            "{reason}: {events:?}"
        );
    }
    // After the pod cgroup, the runtime hears the sandbox's new resources (best effort: the
    // call is made whether or not the runtime has it).
    let calls = n
        .metric(r#"nodelet_runtime_operations_duration_seconds_count{operation_type="update_pod_sandbox_resources"}"#)
        .await;
    assert!(
        calls.is_some_and(|c| c >= 1.0),
        "UpdatePodSandboxResources calls: {calls:?}"
    );
    assert!(
        n.logs().contains("UpdateContainerResources"),
        "{}",
        nodelet_testkit::tail(&n.logs(), 40)
    );
}

/// A resize is done in the status only together with its values: no version of the pod ever
/// shows the new generation without `PodResizeInProgress` while `resources` still has the old
/// CPU request (25m runs with 25 shares, which read back as 25m). Kubernetes' `resize pod via
/// the replace endpoint` [Conformance] test found nodelet clearing the condition in the sync
/// that applied the resize, with `resources` from the runtime's report before it (19m); every
/// version the API server had is read through a watch, so the window cannot be missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resize_condition_goes_only_with_the_new_values_in_the_status() {
    let server = RealServer::start("resize-req");
    let api = server.api();
    let n = Nodelet::start_in_real_cluster("resize-req", &server, "");
    kubectl_apply(
        &api,
        n.dir.path(),
        "req",
        &resizable_pod("req", &n.node, "20m", "200m", ""),
    );
    let before = wait_api("the pod running", &n, || {
        running_main(&api_pod(&server, "req")?)
    })
    .await;
    let cpu_request = |c: &ContainerStatus| {
        quantity(
            c.resources.as_ref().and_then(|r| r.requests.as_ref()),
            "cpu",
        )
    };
    assert_eq!(cpu_request(&before).as_deref(), Some("20m"), "{before:?}");
    // Every version of the pod from here on.
    let versions = PodVersions::start(&api, &n, "req").await;
    resize(
        &api,
        "req",
        r#"{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"25m","memory":"40Mi"}}}]}}"#,
    );
    let done = |p: &Pod| {
        p.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
            && condition(p, "PodResizeInProgress").is_none()
            && condition(p, "PodResizePending").is_none()
    };
    let pod = wait_api("the resize observed and no longer in progress", &n, || {
        let p = api_pod(&server, "req")?;
        done(&p).then_some(p)
    })
    .await;
    let c = main_status(&pod).expect("the container's status");
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    assert_eq!(quantity(requests, "cpu").as_deref(), Some("25m"), "{c:?}");
    assert_eq!(
        quantity(requests, "memory").as_deref(),
        Some("40Mi"),
        "{c:?}"
    );
    assert_eq!(
        quantity(c.allocated_resources.as_ref(), "cpu").as_deref(),
        Some("25m")
    );
    assert_eq!(c.restart_count, 0);
    // Every version up to the one just read.
    let seen = versions.through(&n, &pod).await;
    for p in seen.iter().filter(|p| done(p)) {
        let c = main_status(p).expect("the container's status");
        assert_eq!(
            cpu_request(&c).as_deref(),
            Some("25m"),
            "version {:?} says the resize is done with the old request: {c:?}",
            p.metadata.resource_version
        );
    }
}

/// (b) A memory change under `resizePolicy: RestartContainer` restarts that container, which
/// comes back with the new limit in its cgroup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_resize_under_restart_container_restarts_it() {
    let server = RealServer::start("resize-mem");
    let api = server.api();
    let n = Nodelet::start_in_real_cluster("resize-mem", &server, "");
    let policy =
        "    resizePolicy:\n    - {resourceName: memory, restartPolicy: RestartContainer}\n";
    kubectl_apply(
        &api,
        n.dir.path(),
        "mem",
        &resizable_pod("mem", &n.node, "100m", "200m", policy),
    );
    let before = wait_api("the pod running", &n, || {
        running_main(&api_pod(&server, "mem")?)
    })
    .await;
    let old_id = before.container_id.clone().expect("container ID");
    assert_eq!(memory_limit(&old_id).await, 64 << 20);

    resize(
        &api,
        "mem",
        r#"{"spec":{"containers":[{"name":"main","resources":{"limits":{"memory":"96Mi"}}}]}}"#,
    );
    let after = wait_api("the container restarted", &n, || {
        let c = running_main(&api_pod(&server, "mem")?)?;
        (c.restart_count == 1 && c.container_id.as_deref() != Some(old_id.as_str())).then_some(c)
    })
    .await;
    let new_id = after.container_id.clone().unwrap();
    assert_eq!(
        memory_limit(&new_id).await,
        96 << 20,
        "the new container's cgroup"
    );
    wait_api("the new limit in the status", &n, || {
        let c = running_main(&api_pod(&server, "mem")?)?;
        (quantity(c.resources.as_ref()?.limits.as_ref(), "memory").as_deref() == Some("96Mi"))
            .then_some(())
    })
    .await;
}

/// (c) A request above the node's allocatable is `PodResizePending`/`Infeasible` with the
/// kubelet's message, and changes nothing: same container, same cgroup, same allocation.
/// Against the fixture: the v1.37 API server already refuses such a resize (`node didn't have
/// enough allocatable resources`), so only a server that lets it through (an older one) shows
/// the node's own decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_above_allocatable_is_infeasible_and_changes_nothing() {
    let fixture = Fixture::start(None).await.unwrap();
    let api = fixture.url();
    let n = Nodelet::start_in_cluster("resize-infeasible", &api, "");
    kubectl_apply(
        &api,
        n.dir.path(),
        "big",
        &resizable_pod("big", &n.node, "100m", "200m", ""),
    );
    let before = wait_api("the pod running", &n, || {
        running_main(&api_pod(&fixture, "big")?)
    })
    .await;
    let id = before.container_id.clone().unwrap();

    resize(
        &api,
        "big",
        r#"{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"1000"},"limits":{"cpu":"1000"}}}]}}"#,
    );
    let pending = wait_api("PodResizePending", &n, || {
        condition(&api_pod(&fixture, "big")?, "PodResizePending")
    })
    .await;
    assert_eq!(pending.reason.as_deref(), Some("Infeasible"));
    let message = pending.message.unwrap_or_default();
    assert!(
        message
            .starts_with("Node didn't have enough capacity: cpu, requested: 1000000, capacity: "),
        "{message}"
    );
    assert_eq!(pending.observed_generation, Some(2));
    let pod = api_pod(&fixture, "big").unwrap();
    let c = running_main(&pod).unwrap();
    assert_eq!(c.container_id.as_deref(), Some(id.as_str()));
    assert_eq!(c.restart_count, 0);
    assert_eq!(
        quantity(c.allocated_resources.as_ref(), "cpu").as_deref(),
        Some("100m")
    );
    assert_eq!(
        quantity(c.resources.as_ref().unwrap().limits.as_ref(), "cpu").as_deref(),
        Some("200m")
    );
    assert_eq!(cpu_quota(&id).await, Some(20_000));
    assert!(condition(&pod, "PodResizeInProgress").is_none());
}

/// The node's allocatable cpu in millicores, as its status reports it.
fn allocatable_cpu_milli(server: &RealServer, node: &str) -> Option<i64> {
    let node = server.object::<k8s_openapi::api::core::v1::Node>(None, node)?;
    let q = node.status?.allocatable?.get("cpu")?.0.clone();
    match q.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => q.parse::<i64>().ok().map(|c| c * 1000),
    }
}

/// (d) A resize that fits the node but not beside another pod is `Deferred`, and is applied
/// once that pod leaves (the deferred resize is retried when a pod goes, not after a period).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_resize_is_applied_once_another_pod_leaves() {
    let server = RealServer::start("resize-deferred");
    let api = server.api();
    let n = Nodelet::start_in_real_cluster("resize-deferred", &server, "");
    let alloc = wait_api("the node's allocatable cpu", &n, || {
        allocatable_cpu_milli(&server, &n.node)
    })
    .await;
    let half = alloc / 2;
    let limit = format!("{alloc}m");
    kubectl_apply(
        &api,
        n.dir.path(),
        "hog",
        &resizable_pod("hog", &n.node, &format!("{half}m"), &limit, ""),
    );
    kubectl_apply(
        &api,
        n.dir.path(),
        "grow",
        &resizable_pod("grow", &n.node, "100m", &limit, ""),
    );
    wait_api("both pods running", &n, || {
        running_main(&api_pod(&server, "hog")?)?;
        running_main(&api_pod(&server, "grow")?)
    })
    .await;
    let want = half + 100;
    resize(
        &api,
        "grow",
        &format!(
            r#"{{"spec":{{"containers":[{{"name":"main","resources":{{"requests":{{"cpu":"{want}m"}}}}}}]}}}}"#
        ),
    );
    let pending = wait_api("PodResizePending Deferred", &n, || {
        condition(&api_pod(&server, "grow")?, "PodResizePending")
    })
    .await;
    assert_eq!(pending.reason.as_deref(), Some("Deferred"), "{pending:?}");
    let message = pending.message.unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "Node didn't have enough resource: cpu, requested: {want}, used: {half}"
        )),
        "{message}"
    );
    let c = running_main(&api_pod(&server, "grow").unwrap()).unwrap();
    assert_eq!(
        quantity(c.allocated_resources.as_ref(), "cpu").as_deref(),
        Some("100m")
    );

    let (ok, _, err) = kubectl(
        &api,
        &["delete", "pod", "hog", "--grace-period=1", "--wait=false"],
    );
    assert!(ok, "{err}");
    let c = wait_api("the deferred resize allocated", &n, || {
        let p = api_pod(&server, "grow")?;
        let c = running_main(&p)?;
        (condition(&p, "PodResizePending").is_none()
            && quantity(c.allocated_resources.as_ref(), "cpu") == Some(format!("{want}m")))
        .then_some(c)
    })
    .await;
    assert_eq!(c.restart_count, 0);
    let log = n.logs();
    assert!(
        log.contains("retrying a deferred resize") || log.contains("pod resize allocated"),
        "{}",
        nodelet_testkit::tail(&log, 40)
    );
}

/// (e) A restart of nodelet keeps the allocation (against the fixture, as (c)): a pod whose spec now asks for more than the
/// node has (an infeasible resize) is not admitted again against its spec (it would be
/// rejected, OutOfcpu), keeps running in the same container, and its `allocatedResources` stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_the_allocation() {
    let fixture = Fixture::start(None).await.unwrap();
    let api = fixture.url();
    let mut n = Nodelet::start_in_cluster("resize-restart", &api, "");
    kubectl_apply(
        &api,
        n.dir.path(),
        "kept",
        &resizable_pod("kept", &n.node, "100m", "200m", ""),
    );
    let before = wait_api("the pod running", &n, || {
        running_main(&api_pod(&fixture, "kept")?)
    })
    .await;
    let id = before.container_id.clone().unwrap();
    resize(
        &api,
        "kept",
        r#"{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"1000"},"limits":{"cpu":"1000"}}}]}}"#,
    );
    wait_api("PodResizePending", &n, || {
        condition(&api_pod(&fixture, "kept")?, "PodResizePending")
    })
    .await;
    let checkpoint =
        std::fs::read_to_string(n.dir.path().join("root").join("allocated_pods_state"))
            .expect("allocated_pods_state in the root directory");
    assert!(checkpoint.contains("\"checksum\""), "{checkpoint}");

    n.restart();
    // Back: the same container, the allocation unchanged, the resize still infeasible.
    wait_api("the condition again after the restart", &n, || {
        let p = api_pod(&fixture, "kept")?;
        let c = running_main(&p)?;
        let pending = condition(&p, "PodResizePending")?;
        (pending.reason.as_deref() == Some("Infeasible")).then_some(c)
    })
    .await;
    // A few syncs later still the same.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let p = api_pod(&fixture, "kept").unwrap();
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running"),
        "not re-admitted (OutOfcpu) against its spec: {:?}",
        p.status
    );
    let c = running_main(&p).unwrap();
    assert_eq!(c.container_id.as_deref(), Some(id.as_str()));
    assert_eq!(c.restart_count, 0);
    assert_eq!(
        quantity(c.allocated_resources.as_ref(), "cpu").as_deref(),
        Some("100m")
    );
    assert_eq!(cpu_quota(&id).await, Some(20_000));
}
