//! The status manager's API server sync, final delete, failed-pod cleanup and event sink against
//! the API server fixture (real HTTP, real kube client, real time with short periods: the
//! reconcile runs every 100 ms, so a second of steady state is ten reconciles).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use apiserver_fixture::{
    DeleteOptions, Fixture, FixtureOptions, LoggedRequest, Release, ServerProfile,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod, PodStatus};
use kube::api::{Api, DeleteParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Config};
use nodelet::clock::Clock;
use nodelet::config::PodCleanup;
use nodelet::events::api_sink::{ApiEventSink, EventSinkOptions};
use nodelet::events::{pod_ref, EventRecorder, EventType};
use nodelet::status::{ApiStatusSync, ApiStatusSyncOptions, ApiStatusSyncStats, StatusManager};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-1";
const KUBECTL: &str = "/usr/bin/kubectl";

struct Env {
    fixture: Fixture,
    client: Client,
    store: Store<Pod>,
    statuses: StatusManager,
    cancel: CancellationToken,
}

impl Env {
    /// A fixture, a client, and the pod store the lead's API source keeps (a reflector of the
    /// pods bound to the node).
    async fn start() -> Env {
        Self::start_as(ServerProfile::default()).await
    }

    /// [`Env::start`] against a fixture that is `server` (an older release, dropped fields).
    async fn start_as(server: ServerProfile) -> Env {
        let fixture = Fixture::start_with(FixtureOptions {
            server,
            ..Default::default()
        })
        .await
        .unwrap();
        let client = Client::try_from(Config::new(fixture.url().parse().unwrap())).unwrap();
        let (store, writer) = reflector::store();
        let pods: Api<Pod> = Api::all(client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={NODE}"));
        let cancel = CancellationToken::new();
        let stream = reflector::reflector(writer, watcher(pods, config).default_backoff());
        let token = cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = stream.for_each(|_| async {}) => {}
            }
        });
        Env {
            fixture,
            client,
            store,
            statuses: StatusManager::new(),
            cancel,
        }
    }

    fn sync_with(&self, options: ApiStatusSyncOptions) -> (CancellationToken, JoinHandle<()>) {
        let (cancel, task, _) = self.sync_with_stats(options);
        (cancel, task)
    }

    /// [`Env::sync_with`], and what the sync counts (reconciles, writes).
    fn sync_with_stats(
        &self,
        options: ApiStatusSyncOptions,
    ) -> (CancellationToken, JoinHandle<()>, Arc<ApiStatusSyncStats>) {
        let cancel = self.cancel.child_token();
        let sync = ApiStatusSync::new(
            self.statuses.clone(),
            self.client.clone(),
            self.store.clone(),
            NODE,
            Clock::system(),
            options,
        );
        let stats = sync.stats();
        let task = tokio::spawn(sync.run(cancel.clone()));
        (cancel, task, stats)
    }

    fn sync(&self) -> (CancellationToken, JoinHandle<()>) {
        self.sync_with(fast())
    }

    fn create(&self, name: &str, extra: Value) -> Pod {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "nginx:1.27"}]},
        });
        merge(&mut pod, extra);
        self.fixture
            .create(&serde_json::from_value::<Pod>(pod).unwrap())
            .unwrap()
    }

    fn api_pod(&self, name: &str) -> Option<Pod> {
        self.fixture.get(Some("default"), name).unwrap()
    }

    fn phase(&self, name: &str) -> Option<String> {
        self.api_pod(name)
            .and_then(|p| p.status)
            .and_then(|s| s.phase)
    }

    /// The pod as the store has it once it shows `uid` (what the lead's pod source hands the
    /// pod worker).
    async fn stored(&self, name: &str, uid: &str) -> Pod {
        let mut found = None;
        eventually(&format!("{name} ({uid}) in the store"), || {
            found = self
                .store
                .state()
                .into_iter()
                .find(|p| p.metadata.uid.as_deref() == Some(uid))
                .map(|p| (*p).clone());
            let done = found.is_some();
            async move { done }
        })
        .await;
        let pod = found.unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some(name));
        pod
    }

    /// Writes (method other than GET) to one path, in order.
    fn writes_to(&self, path: &str) -> Vec<LoggedRequest> {
        self.fixture
            .request_log()
            .into_iter()
            .filter(|r| r.method != "GET" && r.path == path)
            .collect()
    }

    fn all_writes(&self) -> Vec<LoggedRequest> {
        self.fixture
            .request_log()
            .into_iter()
            .filter(|r| r.method != "GET")
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn fast() -> ApiStatusSyncOptions {
    ApiStatusSyncOptions {
        reconcile_period: Duration::from_millis(100),
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(500),
        request_timeout: Duration::from_secs(5),
        pod_cleanup: PodCleanup::default(),
        ..ApiStatusSyncOptions::default()
    }
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                match b.get_mut(&k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, e) => *b = e,
    }
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the sync finished `n` more full reconciles (one every 100 ms with [`fast`]): the
/// positive sign that it compared every pod with the API since, so that a write or DELETE it
/// would make has been made before a test asserts there was none.
async fn more_reconciles(stats: &ApiStatusSyncStats, n: u64) {
    let before = stats.reconciles();
    eventually(&format!("{n} more reconciles"), || {
        let done = stats.reconciles() >= before + n;
        async move { done }
    })
    .await;
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap()
}

fn pod_path(name: &str) -> String {
    format!("/api/v1/namespaces/default/pods/{name}")
}

fn status_path(name: &str) -> String {
    format!("/api/v1/namespaces/default/pods/{name}/status")
}

/// A status like the one nodelet generates for a running single-container pod; `started_ms`
/// moves the container's start below the second.
fn running(started_ms: i64) -> PodStatus {
    let started = format!("2026-01-01T00:00:10.{started_ms:03}Z");
    let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"});
    serde_json::from_value(json!({
        "phase": "Running",
        "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"),
                       cond("ContainersReady"), cond("PodScheduled")],
        "hostIP": "10.0.0.5", "hostIPs": [{"ip": "10.0.0.5"}],
        "podIP": "10.88.0.7", "podIPs": [{"ip": "10.88.0.7"}],
        "startTime": "2026-01-01T00:00:09Z",
        "qosClass": "BestEffort",
        "containerStatuses": [{
            "name": "app", "image": "nginx:1.27", "imageID": "sha256:1", "ready": true,
            "started": true, "restartCount": 0, "containerID": "containerd://c1",
            "state": {"running": {"startedAt": started}},
        }],
    }))
    .unwrap()
}

/// What the pod worker reports once the containers are gone.
fn terminal(phase: &str, reason: Option<&str>) -> PodStatus {
    let mut status = running(0);
    status.phase = Some(phase.into());
    status.reason = reason.map(str::to_string);
    let exit_code = if phase == "Succeeded" { 0 } else { 137 };
    let cs = &mut status.container_statuses.as_mut().unwrap()[0];
    cs.ready = false;
    cs.started = Some(false);
    cs.state = Some(
        serde_json::from_value(json!({"terminated": {
            "exitCode": exit_code, "reason": if exit_code == 0 { "Completed" } else { "Error" },
            "startedAt": "2026-01-01T00:00:10Z", "finishedAt": "2026-01-01T00:01:00Z",
            "containerID": "containerd://c1"}}))
        .unwrap(),
    );
    status
}

/// Sets a running status for `pod` and waits until the API shows it.
async fn deliver_running(env: &Env, pod: &Pod) {
    env.statuses.set_pod_status(pod, running(0));
    let name = pod.metadata.name.clone().unwrap();
    eventually(&format!("{name} Running in the API"), || {
        let done = env.phase(&name).as_deref() == Some("Running");
        async move { done }
    })
    .await;
}

#[tokio::test]
async fn steady_state_sends_no_patch() {
    let env = Env::start().await;
    let mut pods = Vec::new();
    for i in 0..20 {
        let created = env.create(&format!("web-{i:02}"), json!({}));
        pods.push(env.stored(&format!("web-{i:02}"), &uid(&created)).await);
    }
    for pod in &pods {
        env.statuses.set_pod_status(pod, running(0));
    }
    let (_cancel, _task, stats) = env.sync_with_stats(fast());
    eventually("20 pods Running in the API", || {
        let done = pods
            .iter()
            .all(|p| env.phase(p.metadata.name.as_deref().unwrap()).as_deref() == Some("Running"));
        async move { done }
    })
    .await;
    let patches = env.all_writes();
    assert_eq!(patches.len(), 20, "one PATCH per pod: {patches:#?}");
    assert!(patches.iter().all(|r| r.method == "PATCH"
        && r.path.ends_with("/status")
        && r.content_type.as_deref() == Some("application/strategic-merge-patch+json")));

    // New versions that differ only below a second (what the API keeps), then reconciles.
    env.fixture.clear_log();
    for pod in &pods {
        assert!(
            env.statuses.set_pod_status(pod, running(400)),
            "a new version"
        );
    }
    // The positive sign first: the sync compared every pod with the API many times over.
    let before = stats.reconciles();
    eventually("15 reconciles", || {
        let done = stats.reconciles() >= before + 15;
        async move { done }
    })
    .await;
    assert_eq!(
        env.all_writes(),
        Vec::<LoggedRequest>::new(),
        "nothing to send at steady state"
    );
}

#[tokio::test]
async fn a_status_change_is_one_patch() {
    let env = Env::start().await;
    let created = env.create("web", json!({}));
    let pod = env.stored("web", &uid(&created)).await;
    let (_cancel, _task, stats) = env.sync_with_stats(fast());
    deliver_running(&env, &pod).await;

    env.fixture.clear_log();
    env.statuses
        .set_pod_status(&pod, terminal("Failed", Some("Evicted")));
    eventually("Failed in the API", || {
        let done = env.phase("web").as_deref() == Some("Failed");
        async move { done }
    })
    .await;
    // Ten reconciles since: a second write would have gone out.
    more_reconciles(&stats, 10).await;

    let writes = env.all_writes();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    let patch = &writes[0];
    assert_eq!(
        (patch.method.as_str(), patch.path.as_str()),
        ("PATCH", status_path("web").as_str())
    );
    let body = patch.body.as_ref().unwrap();
    assert_eq!(
        body["metadata"]["uid"],
        json!(uid(&pod)),
        "the UID precondition"
    );
    assert_eq!(body["status"]["phase"], "Failed");
    assert_eq!(body["status"]["reason"], "Evicted");
    assert!(
        body["status"].get("startTime").is_none() && body["status"].get("podIP").is_none(),
        "only what changed: {body}"
    );

    // Ready went False with the terminal phase.
    let api = env.api_pod("web").unwrap().status.unwrap();
    let ready = api
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodFailed"))
    );
}

#[tokio::test]
async fn foreign_conditions_are_kept() {
    let env = Env::start().await;
    let created = env.create(
        "web",
        json!({"spec": {"readinessGates": [{"conditionType": "example.com/lb"}]}}),
    );
    let pod = env.stored("web", &uid(&created)).await;
    let _sync = env.sync();
    deliver_running(&env, &pod).await;

    // A load balancer controller sets its readiness gate condition.
    let api: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    api.patch_status(
        "web",
        &Default::default(),
        &kube::api::Patch::Strategic(json!({"status": {"conditions": [
            {"type": "example.com/lb", "status": "True"}]}})),
    )
    .await
    .unwrap();
    env.statuses
        .set_pod_status(&pod, terminal("Succeeded", None));
    eventually("Succeeded in the API", || {
        let done = env.phase("web").as_deref() == Some("Succeeded");
        async move { done }
    })
    .await;
    let conditions = env
        .api_pod("web")
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap();
    let gate = conditions.iter().find(|c| c.type_ == "example.com/lb");
    assert_eq!(
        gate.map(|c| c.status.as_str()),
        Some("True"),
        "{conditions:#?}"
    );
}

#[tokio::test]
async fn a_recreated_pod_is_never_patched_or_deleted_with_the_old_status() {
    let env = Env::start().await;
    let old = env.create("web", json!({}));
    let old_pod = env.stored("web", &uid(&old)).await;
    let (_cancel, _task, stats) = env.sync_with_stats(fast());
    deliver_running(&env, &old_pod).await;

    env.fixture
        .delete::<Pod>(
            Some("default"),
            "web",
            &DeleteOptions {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    let new = env.create("web", json!({}));
    assert_ne!(uid(&new), uid(&old));
    env.stored("web", &uid(&new)).await;

    env.fixture.clear_log();
    env.statuses
        .set_pod_status(&old_pod, terminal("Failed", Some("Evicted")));
    env.statuses.set_reclaimed(&uid(&old_pod));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The positive sign first: the sync has compared every pod with the API since.
    let before = stats.reconciles();
    eventually("3 more reconciles", || {
        let done = stats.reconciles() >= before + 3;
        async move { done }
    })
    .await;
    assert_eq!(env.all_writes(), Vec::<LoggedRequest>::new());
    assert_eq!(env.phase("web").as_deref(), Some("Pending"));
    assert_eq!(env.api_pod("web").map(|p| uid(&p)), Some(uid(&new)));
}

#[tokio::test]
async fn a_status_set_during_an_outage_is_delivered_after_resume() {
    let env = Env::start().await;
    let created = env.create("web", json!({}));
    let pod = env.stored("web", &uid(&created)).await;
    let (_cancel, _task, stats) = env.sync_with_stats(fast());
    deliver_running(&env, &pod).await;

    env.fixture.stop().await;
    env.fixture.clear_log();
    env.statuses
        .set_pod_status(&pod, terminal("Failed", Some("Evicted")));
    // The sync went on reconciling (and failing to write) while the fixture was down.
    more_reconciles(&stats, 30).await;
    assert_eq!(
        env.phase("web").as_deref(),
        Some("Running"),
        "the fixture was down"
    );
    env.fixture.resume().await.unwrap();

    eventually("Failed in the API after resume", || {
        let done = env.phase("web").as_deref() == Some("Failed");
        async move { done }
    })
    .await;
    // Five reconciles since: a second write would have gone out.
    more_reconciles(&stats, 5).await;
    let writes = env.all_writes();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    assert_eq!(
        writes[0].body.as_ref().unwrap()["status"]["phase"],
        "Failed"
    );
}

/// A pod running on the node that a user deletes with a grace period.
async fn deleted_by_user(env: &Env, extra: Value) -> Pod {
    let created = env.create("web", extra);
    let pod = env.stored("web", &uid(&created)).await;
    deliver_running(env, &pod).await;
    let api: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    api.delete(
        "web",
        &DeleteParams {
            grace_period_seconds: Some(30),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut deleting = None;
    eventually("deletionTimestamp in the store", || {
        deleting = env
            .store
            .state()
            .into_iter()
            .find(|p| p.metadata.deletion_timestamp.is_some())
            .map(|p| (*p).clone());
        let done = deleting.is_some();
        async move { done }
    })
    .await;
    deleting.unwrap()
}

fn assert_final_delete(request: &LoggedRequest, uid: &str) {
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("DELETE", pod_path("web").as_str())
    );
    let body = request.body.as_ref().unwrap();
    assert_eq!(body["gracePeriodSeconds"], 0, "{body}");
    assert_eq!(body["preconditions"]["uid"], uid, "{body}");
}

#[tokio::test]
async fn deletion_requested_terminal_and_reclaimed_is_one_delete() {
    let env = Env::start().await;
    let (_cancel, _task, stats) = env.sync_with_stats(fast());
    let pod = deleted_by_user(&env, json!({})).await;
    env.fixture.clear_log();

    // Terminal, but the pod worker has not reclaimed the resources yet: no DELETE.
    env.statuses
        .set_pod_status(&pod, terminal("Succeeded", None));
    eventually("Succeeded in the API", || {
        let done = env.phase("web").as_deref() == Some("Succeeded");
        async move { done }
    })
    .await;
    // Eight reconciles since the terminal status: a DELETE would have gone out.
    more_reconciles(&stats, 8).await;
    assert!(env.writes_to(&pod_path("web")).is_empty());

    env.statuses.set_reclaimed(&uid(&pod));
    eventually("the pod gone from the API", || {
        let done = env.api_pod("web").is_none();
        async move { done }
    })
    .await;
    // Ten reconciles since: a second DELETE or PATCH would have gone out.
    more_reconciles(&stats, 10).await;
    let deletes = env.writes_to(&pod_path("web"));
    assert_eq!(deletes.len(), 1, "{deletes:#?}");
    assert_final_delete(&deletes[0], &uid(&pod));
    let patches = env.writes_to(&status_path("web"));
    assert_eq!(patches.len(), 1, "the terminal status, once: {patches:#?}");
}

#[tokio::test]
async fn a_pod_with_a_finalizer_gets_one_delete_and_stays() {
    let env = Env::start().await;
    let (_cancel, _task, stats) = env.sync_with_stats(fast());
    let pod = deleted_by_user(
        &env,
        json!({"metadata": {"finalizers": ["example.com/keep"]}}),
    )
    .await;
    env.fixture.clear_log();

    env.statuses.set_pod_status(&pod, terminal("Failed", None));
    env.statuses.set_reclaimed(&uid(&pod));
    eventually("the final DELETE", || {
        let done = !env.writes_to(&pod_path("web")).is_empty();
        async move { done }
    })
    .await;
    // Fifteen reconciles since, the pod still in the API: a second DELETE would have gone out.
    more_reconciles(&stats, 15).await;
    let deletes = env.writes_to(&pod_path("web"));
    assert_eq!(deletes.len(), 1, "no second DELETE: {deletes:#?}");
    assert_final_delete(&deletes[0], &uid(&pod));
    let kept = env.api_pod("web").expect("kept for its finalizer");
    assert_eq!(kept.metadata.deletion_grace_period_seconds, Some(0));
}

fn annotated(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn failed_pods_are_cleaned_up_after_retention() {
    let env = Env::start().await;
    let owner = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4b", "uid": "rs-1",
        "controller": true}]}});
    let owned = env.create("owned", owner.clone());
    // A Job's pod that failed on its own (its container exited 1): owned, but its record stays.
    let job_pod = env.create("job-pod", owner);
    let bare = env.create("bare", json!({}));
    // A static pod's mirror (owned by the Node, as the kubelet makes them).
    let mirror = env.create(
        "static-node-1",
        json!({"metadata": {
            "annotations": {"kubernetes.io/config.mirror": "hash-1"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                 "uid": "node-uid", "controller": true}]}}),
    );
    let owned = env.stored("owned", &uid(&owned)).await;
    let job_pod = env.stored("job-pod", &uid(&job_pod)).await;
    let bare = env.stored("bare", &uid(&bare)).await;
    env.stored("static-node-1", &uid(&mirror)).await;
    let mut static_pod = mirror.clone();
    static_pod.metadata.uid = Some("hash-1".into());
    static_pod.metadata.annotations = Some(annotated(&[
        ("kubernetes.io/config.source", "file"),
        ("kubernetes.io/config.hash", "hash-1"),
    ]));

    let retention = Duration::from_secs(1);
    let mut options = fast();
    options.pod_cleanup = PodCleanup {
        enabled: true,
        retention,
        bare_pods: false,
    };
    let (first_sync, first_task, stats) = env.sync_with_stats(options.clone());
    // Evicted: failed by the node. The Job's pod failed on its own (no pod-level reason).
    for pod in [&owned, &bare, &static_pod] {
        env.statuses
            .set_pod_status(pod, terminal("Failed", Some("Evicted")));
    }
    env.statuses
        .set_pod_status(&job_pod, terminal("Failed", None));
    eventually("the controller-owned pod deleted", || {
        let done = env.api_pod("owned").is_none();
        async move { done }
    })
    .await;
    // Fifteen reconciles since (the bare pod's retention is over by then): a DELETE of the bare
    // or the mirror pod, or a second one of the owned pod, would have gone out.
    more_reconciles(&stats, 15).await;

    let published = env.writes_to(&status_path("owned"));
    assert_eq!(published.len(), 1);
    let deletes = env.writes_to(&pod_path("owned"));
    assert_eq!(deletes.len(), 1, "{deletes:#?}");
    let body = deletes[0].body.as_ref().unwrap();
    assert_eq!(body["propagationPolicy"], "Background", "{body}");
    assert_eq!(body["preconditions"]["uid"], json!(uid(&owned)), "{body}");
    let waited = deletes[0].at.duration_since(published[0].at);
    assert!(
        waited >= jiff::SignedDuration::try_from(retention).unwrap(),
        "retention counted from the published Failed phase: {waited:?}"
    );

    assert_eq!(
        env.phase("bare").as_deref(),
        Some("Failed"),
        "a bare pod is kept"
    );
    assert!(env.writes_to(&pod_path("bare")).is_empty());
    // The Job's pod got its Failed phase, and its retention is long over, yet it stays.
    assert_eq!(env.phase("job-pod").as_deref(), Some("Failed"));
    assert!(
        env.writes_to(&pod_path("job-pod")).is_empty(),
        "a pod that failed on its own is never cleaned up"
    );
    // The mirror pod got the static pod's status, under its own UID, and is never deleted.
    let mirror_patches = env.writes_to(&status_path("static-node-1"));
    assert_eq!(mirror_patches.len(), 1);
    assert_eq!(
        mirror_patches[0].body.as_ref().unwrap()["metadata"]["uid"],
        json!(uid(&mirror))
    );
    assert_eq!(env.phase("static-node-1").as_deref(), Some("Failed"));

    // With barePods, the bare one goes too (its retention is long over); the mirror stays.
    first_sync.cancel();
    first_task.await.unwrap();
    options.pod_cleanup.bare_pods = true;
    let (_cancel, _task, stats) = env.sync_with_stats(options);
    eventually("the bare pod deleted", || {
        let done = env.api_pod("bare").is_none();
        async move { done }
    })
    .await;
    // Five reconciles since: a second DELETE, or one of the mirror pod, would have gone out.
    more_reconciles(&stats, 5).await;
    let deletes = env.writes_to(&pod_path("bare"));
    assert_eq!(deletes.len(), 1, "{deletes:#?}");
    assert_eq!(
        deletes[0].body.as_ref().unwrap()["propagationPolicy"],
        "Background"
    );
    assert!(env.writes_to(&pod_path("static-node-1")).is_empty());
    assert!(env.api_pod("static-node-1").is_some());
}

#[tokio::test]
async fn events_reach_the_api_and_kubectl() {
    let env = Env::start().await;
    let pod = env.create("web", json!({}));
    let recorder = EventRecorder::new(Clock::system(), "kubelet", NODE);
    let sink = ApiEventSink::new(
        env.client.clone(),
        EventSinkOptions {
            max_attempts: 1,
            retry_interval: Duration::from_millis(50),
            request_timeout: Duration::from_secs(5),
        },
    );
    let stats = sink.stats();
    tokio::spawn(sink.run(recorder.subscribe(), env.cancel.clone()));

    let object = pod_ref(&pod);
    recorder.record(
        &object,
        EventType::Normal,
        "Scheduled",
        "assigned to node-1",
    );
    recorder.record(
        &object,
        EventType::Warning,
        "BackOff",
        "Back-off restarting failed container",
    );
    recorder.record(
        &object,
        EventType::Warning,
        "BackOff",
        "Back-off restarting failed container",
    );
    eventually("3 writes", || {
        let done = stats.written() == 3;
        async move { done }
    })
    .await;

    let events: Vec<Event> = env.fixture.list(Some("default")).unwrap();
    let backoff = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("BackOff"))
        .unwrap();
    assert_eq!(backoff.count, Some(2));
    assert_eq!(events.len(), 2);
    let backoff_path = format!(
        "/api/v1/namespaces/default/events/{}",
        backoff.metadata.name.as_deref().unwrap()
    );
    assert_eq!(
        env.writes_to(&backoff_path).len(),
        1,
        "the repeat is a PATCH"
    );

    let out = tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .args([
            "--server",
            &env.fixture.url(),
            "get",
            "events",
            "-n",
            "default",
        ])
        .output()
        .await
        .expect("kubectl at /usr/bin/kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Scheduled") && stdout.contains("assigned to node-1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("BackOff") && stdout.contains("pod/web"),
        "{stdout}"
    );

    // An event that cannot be written is dropped; its repeat, once the API is back, finds no
    // event to patch and creates it with the count so far.
    env.fixture.stop().await;
    recorder.record(
        &object,
        EventType::Warning,
        "Unhealthy",
        "Readiness probe failed",
    );
    eventually("the unwritable event dropped", || {
        let done = stats.dropped() == 1;
        async move { done }
    })
    .await;
    env.fixture.resume().await.unwrap();
    recorder.record(
        &object,
        EventType::Warning,
        "Unhealthy",
        "Readiness probe failed",
    );
    eventually("4 writes", || {
        let done = stats.written() == 4;
        async move { done }
    })
    .await;
    let events: Vec<Event> = env.fixture.list(Some("default")).unwrap();
    let unhealthy = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Unhealthy"))
        .unwrap();
    assert_eq!(unhealthy.count, Some(2));
    assert_eq!(stats.rejected(), 0);
}

#[tokio::test]
async fn the_reconcile_restores_a_status_someone_else_changed() {
    let env = Env::start().await;
    let created = env.create("web", json!({}));
    let pod = env.stored("web", &uid(&created)).await;
    let _sync = env.sync();
    deliver_running(&env, &pod).await;

    let api: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    api.patch_status(
        "web",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"status": {"podIP": "192.0.2.1"}})),
    )
    .await
    .unwrap();
    eventually("podIP restored by the reconcile", || {
        let ip = env.api_pod("web").unwrap().status.unwrap().pod_ip;
        async move { ip.as_deref() == Some("10.88.0.7") }
    })
    .await;
    let last = env.writes_to(&status_path("web")).pop().unwrap();
    assert_eq!(
        last.body.unwrap()["status"],
        json!({"podIP": "10.88.0.7"}),
        "only the field that differs"
    );
}

/// An API server that answers every request with 500 and counts the PATCHes (the kube client
/// retries 429/503/504 itself; a 500 is left to nodelet).
async fn unavailable_api() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    let app = axum::Router::new().fallback(move |method: axum::http::Method| {
        if method == axum::http::Method::PATCH {
            counter.fetch_add(1, Ordering::SeqCst);
        }
        async {
            (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                [("content-type", "application/json")],
                r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcd is down","reason":"InternalError","code":500}"#,
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, count)
}

// On the paused clock: the 2 s window is virtual time, whatever the machine's load (in real time a
// slow host fitted fewer attempts in it, a test on time rather than on the backoff).
#[tokio::test(start_paused = true)]
async fn failures_back_off_per_pod_without_a_busy_loop() {
    use std::sync::atomic::Ordering;
    let (url, requests) = unavailable_api().await;
    let client = Client::try_from(Config::new(url.parse().unwrap())).unwrap();
    let (store, mut writer) = reflector::store::<Pod>();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "5"},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "nginx:1.27"}]},
        "status": {"phase": "Pending"},
    }))
    .unwrap();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitApply(pod.clone()));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let statuses = StatusManager::new();
    statuses.set_pod_status(&pod, running(0));

    let cancel = CancellationToken::new();
    let sync = ApiStatusSync::new(
        statuses.clone(),
        client,
        store,
        NODE,
        Clock::system(),
        fast(),
    );
    let task = tokio::spawn(sync.run(cancel.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    cancel.cancel();
    task.await.unwrap();
    // Backoff 100, 200, 400, 500, 500, ... ms: about 6 attempts in 2 s, whatever the reconcile
    // (every 100 ms) or status changes do.
    let attempts = requests.load(Ordering::SeqCst);
    assert!(
        (3..=8).contains(&attempts),
        "{attempts} PATCH attempts in 2 s"
    );
}

/// What nodelet's v1.37 status generator produces for a running pod: [`running`] plus the
/// fields older servers do not store (observedGeneration, container resources).
fn running_v137() -> PodStatus {
    let mut status = serde_json::to_value(running(0)).unwrap();
    status["observedGeneration"] = json!(1);
    for c in status["conditions"].as_array_mut().unwrap() {
        c["observedGeneration"] = json!(1);
    }
    let cs = &mut status["containerStatuses"][0];
    cs["resources"] = json!({"requests": {"cpu": "100m"}});
    cs["allocatedResources"] = json!({"cpu": "100m"});
    cs["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    serde_json::from_value(status).unwrap()
}

fn patches(env: &Env) -> Vec<LoggedRequest> {
    env.all_writes()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/status"))
        .collect()
}

#[tokio::test]
async fn older_servers_get_no_status_writes_at_steady_state() {
    for release in [Release::new(1, 32), Release::new(1, 33)] {
        let env = Env::start_as(ServerProfile::release(release)).await;
        let mut pods = Vec::new();
        for i in 0..20 {
            let created = env.create(&format!("web-{i:02}"), json!({}));
            pods.push(env.stored(&format!("web-{i:02}"), &uid(&created)).await);
        }
        for pod in &pods {
            env.statuses.set_pod_status(pod, running_v137());
        }
        let (_cancel, _task, stats) = env.sync_with_stats(fast());
        eventually(&format!("{release}: 20 pods Running"), || {
            let done = pods.iter().all(|p| {
                env.phase(p.metadata.name.as_deref().unwrap()).as_deref() == Some("Running")
            });
            async move { done }
        })
        .await;
        let before = stats.reconciles();
        eventually("20 reconciles", || {
            let done = stats.reconciles() >= before + 20;
            async move { done }
        })
        .await;
        let sent = patches(&env);
        assert_eq!(sent.len(), 20, "{release}: one PATCH per pod: {sent:#?}");
        for r in &sent {
            let body = r.body.as_ref().unwrap();
            assert!(
                body.pointer("/status/observedGeneration").is_none(),
                "{release}: {body}"
            );
            let conditions = body["status"]["conditions"].as_array().unwrap();
            assert!(
                conditions
                    .iter()
                    .all(|c| c.get("observedGeneration").is_none()),
                "{release}: {body}"
            );
            let resources = body.pointer("/status/containerStatuses/0/resources");
            assert_eq!(
                resources.is_some(),
                release >= Release::new(1, 33),
                "{body}"
            );
        }
        // Steady: two seconds (twenty reconciles) more, nothing.
        let before = stats.reconciles();
        eventually("20 more reconciles", || {
            let done = stats.reconciles() >= before + 20;
            async move { done }
        })
        .await;
        assert_eq!(
            patches(&env).len(),
            20,
            "{release}: no writes at steady state"
        );
        assert_eq!(stats.writes(), 20);
    }
}

#[tokio::test]
async fn a_status_change_still_goes_out_at_once_to_an_older_server() {
    let env = Env::start_as(ServerProfile::release(Release::new(1, 32))).await;
    let created = env.create("web", json!({}));
    let pod = env.stored("web", &uid(&created)).await;
    let (_cancel, _task, stats) = env.sync_with_stats(fast());
    env.statuses.set_pod_status(&pod, running_v137());
    eventually("Running", || {
        let done = env.phase("web").as_deref() == Some("Running");
        async move { done }
    })
    .await;
    let mut failed = running_v137();
    failed.phase = Some("Failed".into());
    env.statuses.set_pod_status(&pod, failed);
    eventually("Failed", || {
        let done = env.phase("web").as_deref() == Some("Failed");
        async move { done }
    })
    .await;
    // The server stores the write before the sync counts its answer (a loaded machine once
    // showed the phase with the count still at 1), so the count is awaited, then checked.
    eventually("the second write counted", || {
        let done = stats.writes() >= 2;
        async move { done }
    })
    .await;
    assert_eq!(stats.writes(), 2);
}

/// The virtual seconds (since `t0`) of each PATCH to `path`, sampled every second.
async fn patch_times(env: &Env, t0: tokio::time::Instant, path: &str, seconds: u32) -> Vec<u32> {
    let mut times = Vec::new();
    let mut seen = 0;
    for second in 0..seconds {
        tokio::time::sleep_until(t0 + Duration::from_millis(u64::from(second) * 1000 + 500)).await;
        let now = env.writes_to(path).len();
        times.extend(std::iter::repeat_n(second, now - seen));
        seen = now;
    }
    times
}

#[tokio::test(start_paused = true)]
async fn without_stripping_an_older_server_costs_one_write_per_reconcile_then_backs_off() {
    // The version-aware stripping switched off: nodelet sends v1.37 fields to a v1.32 server,
    // which drops them (a server that normalizes something nodelet does not know).
    let env = Env::start_as(ServerProfile::release(Release::new(1, 32))).await;
    let created = env.create("web", json!({}));
    let pod = env.stored("web", &uid(&created)).await;
    env.statuses.set_pod_status(&pod, running_v137());
    let t0 = tokio::time::Instant::now();
    let (_cancel, _task, stats) = env.sync_with_stats(ApiStatusSyncOptions {
        strip_unsupported_fields: false,
        ..ApiStatusSyncOptions::default()
    });
    let times = patch_times(&env, t0, &status_path("web"), 1000).await;
    // Reconcile every 10 s; the same dropped fields are written again after 10, 20, 40, 80,
    // 160 s, then every 300 s. (Deciding from the server's copy at every watch event, as
    // nodelet did before, wrote this pod about 27 times a second.)
    assert_eq!(times, vec![0, 10, 30, 70, 150, 310, 610, 910]);
    assert!(
        stats.reconciles() >= 99,
        "{} reconciles",
        stats.reconciles()
    );
    assert_eq!(stats.writes(), 8);
    // The server kept the rest of the status.
    assert_eq!(env.phase("web").as_deref(), Some("Running"));
}

#[tokio::test]
async fn the_version_is_read_again_after_the_server_was_away() {
    // A v1.32 server is upgraded to v1.37 while nodelet cannot reach it.
    let env = Env::start_as(ServerProfile::release(Release::new(1, 32))).await;
    let created = env.create("web", json!({}));
    let pod = env.stored("web", &uid(&created)).await;
    let (_cancel, _task, _stats) = env.sync_with_stats(fast());
    env.statuses.set_pod_status(&pod, running_v137());
    eventually("Running", || {
        let done = env.phase("web").as_deref() == Some("Running");
        async move { done }
    })
    .await;
    let api_generation = |env: &Env| {
        env.api_pod("web")
            .unwrap()
            .status
            .unwrap()
            .observed_generation
    };
    assert_eq!(api_generation(&env), None, "not sent to v1.32");

    env.fixture.stop().await;
    env.fixture.set_server(ServerProfile::default());
    // A change while the server is away: the PATCH fails, the version becomes stale.
    let mut ready_false = running_v137();
    ready_false.conditions.as_mut().unwrap()[2].status = "False".into();
    env.statuses.set_pod_status(&pod, ready_false);
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.fixture.resume().await.unwrap();
    eventually("observedGeneration stored by the upgraded server", || {
        let done = api_generation(&env) == Some(1);
        async move { done }
    })
    .await;
    let conditions = env
        .api_pod("web")
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap();
    assert!(conditions.iter().all(|c| c.observed_generation == Some(1)));
    let reads = env
        .fixture
        .request_log()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == "/version")
        .count();
    assert_eq!(reads, 2, "at start and after the outage");
}
