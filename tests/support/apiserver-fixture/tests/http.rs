//! Raw HTTP: watch streams, status subresource, patches, errors, stop/resume.

mod common;

use std::time::Duration;

use apiserver_fixture::{Fixture, FixtureOptions};
use common::{http, read_watch_lines};
use serde_json::{json, Value};

fn pod(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx:1.27"}]}
    })
}

#[tokio::test]
async fn watch_sends_added_modified_deleted_for_the_node() {
    let fixture = Fixture::start(None).await.unwrap();
    let client = http();
    let base = format!("{}/api/v1", fixture.url());
    let rv = fixture.resource_version();
    let mut watch = client
        .get(format!(
            "{base}/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-1&resourceVersion={rv}"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);

    // A pod for another node is not seen; ours is.
    for p in [pod("other", "node-2"), pod("web", "node-1")] {
        let r = client
            .post(format!("{base}/namespaces/default/pods"))
            .json(&p)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let status_patch = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let r = client
        .patch(format!("{base}/namespaces/default/pods/web/status"))
        .header("Content-Type", "application/strategic-merge-patch+json")
        .body(status_patch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .delete(format!("{base}/namespaces/default/pods/web"))
        .json(&json!({"gracePeriodSeconds": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let lines = read_watch_lines(&mut watch, 4).await;
    let types: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    // The final delete first writes the deletion timestamp (MODIFIED), then removes (DELETED).
    assert_eq!(types, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
    assert!(lines
        .iter()
        .all(|l| l["object"]["metadata"]["name"] == "web"));
    assert_eq!(lines[1]["object"]["status"]["phase"], "Running");
    assert_eq!(lines[0]["object"]["kind"], "Pod");
    let rvs: Vec<u64> = lines
        .iter()
        .map(|l| {
            l["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");
}

#[tokio::test]
async fn binding_a_pod_to_the_node_shows_up_as_added() {
    let fixture = Fixture::start(None).await.unwrap();
    let client = http();
    let base = format!("{}/api/v1", fixture.url());
    let mut unbound = pod("web", "");
    unbound["spec"].as_object_mut().unwrap().remove("nodeName");
    client
        .post(format!("{base}/namespaces/default/pods"))
        .json(&unbound)
        .send()
        .await
        .unwrap();
    let mut watch = client
        .get(format!(
            "{base}/pods?watch=true&fieldSelector=spec.nodeName%3Dnode-1"
        ))
        .send()
        .await
        .unwrap();
    // A PUT may not change spec.nodeName; the scheduler binds through pods/binding.
    let mut bound: Value = client
        .get(format!("{base}/namespaces/default/pods/web"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    bound["spec"]["nodeName"] = json!("node-1");
    let r = client
        .put(format!("{base}/namespaces/default/pods/web"))
        .json(&bound)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422, "pod updates may not change spec.nodeName");
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"}, "target": {"kind": "Node", "name": "node-1"}});
    let r = client
        .post(format!("{base}/namespaces/default/pods/web/binding"))
        .json(&binding)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = client
        .post(format!("{base}/namespaces/default/pods/web/binding"))
        .json(&binding)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "already bound");
    let lines = read_watch_lines(&mut watch, 1).await;
    assert_eq!(lines[0]["type"], "ADDED");
    assert_eq!(lines[0]["object"]["spec"]["nodeName"], "node-1");
    assert_eq!(
        lines[0]["object"]["status"]["conditions"][0]["type"],
        "PodScheduled"
    );
}

#[tokio::test]
async fn watch_from_a_compacted_resource_version_is_expired() {
    let fixture = Fixture::start_with(FixtureOptions {
        history_limit: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = http();
    let base = format!("{}/api/v1/namespaces/default/configmaps", fixture.url());
    for i in 0..5 {
        client
            .post(&base)
            .json(&json!({"metadata": {"name": format!("c{i}")}}))
            .send()
            .await
            .unwrap();
    }
    let mut watch = client
        .get(format!("{base}?watch=1&resourceVersion=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);
    let lines = read_watch_lines(&mut watch, 1).await;
    assert_eq!(lines[0]["type"], "ERROR");
    assert_eq!(lines[0]["object"]["code"], 410);
    assert_eq!(lines[0]["object"]["reason"], "Expired");
    // Without a resourceVersion the watch starts with the current state.
    let mut fresh = client.get(format!("{base}?watch=1")).send().await.unwrap();
    let lines = read_watch_lines(&mut fresh, 5).await;
    assert_eq!(lines.len(), 5);
    assert!(lines.iter().all(|l| l["type"] == "ADDED"));
}

#[tokio::test]
async fn bookmarks_and_initial_events_end() {
    let fixture = Fixture::start_with(FixtureOptions {
        bookmark_interval: Duration::from_millis(200),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = http();
    let base = format!("{}/api/v1/namespaces/default/configmaps", fixture.url());
    client
        .post(&base)
        .json(&json!({"metadata": {"name": "c"}}))
        .send()
        .await
        .unwrap();
    let mut watch = client
        .get(format!("{base}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&fieldSelector=metadata.name%3Dc"))
        .send()
        .await
        .unwrap();
    let lines = read_watch_lines(&mut watch, 3).await;
    assert_eq!(lines[0]["type"], "ADDED");
    assert_eq!(lines[1]["type"], "BOOKMARK");
    assert_eq!(
        lines[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(lines[2]["type"], "BOOKMARK");
    assert_eq!(lines[2]["object"]["kind"], "ConfigMap");
}

#[tokio::test]
async fn watch_timeout_closes_the_stream() {
    let fixture = Fixture::start(None).await.unwrap();
    let client = http();
    let mut watch = client
        .get(format!(
            "{}/api/v1/nodes?watch=1&timeoutSeconds=1",
            fixture.url()
        ))
        .send()
        .await
        .unwrap();
    // Generous: without timeoutSeconds the stream would last 30 minutes.
    let end = tokio::time::timeout(Duration::from_secs(30), watch.chunk())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(end, None, "the stream ends after timeoutSeconds");
}

#[tokio::test]
async fn status_subresource_changes_only_status() {
    let fixture = Fixture::start(None).await.unwrap();
    let client = http();
    let url = format!("{}/api/v1/namespaces/default/pods", fixture.url());
    let created: Value = client
        .post(&url)
        .json(&pod("web", "node-1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // PUT of the main resource ignores status.
    let mut body = created.clone();
    body["status"]["phase"] = json!("Running");
    let updated: Value = client
        .put(format!("{url}/web"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(updated["status"]["phase"], "Pending");
    assert_eq!(
        updated["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
        "no-op update"
    );
    // Merge patch of /status ignores spec.
    let patch = json!({"spec": {"containers": [{"name": "app", "image": "evil"}]}, "status": {"phase": "Running"}});
    let r = client
        .patch(format!("{url}/web/status"))
        .header("Content-Type", "application/merge-patch+json")
        .body(patch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["status"]["phase"], "Running");
    assert_eq!(patched["spec"]["containers"][0]["image"], "nginx:1.27");
    // Stale resourceVersion on PUT.
    let r = client
        .put(format!("{url}/web"))
        .json(&created)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let status: Value = r.json().await.unwrap();
    assert_eq!(
        status["message"],
        "Operation cannot be fulfilled on pods \"web\": the object has been modified; please apply your changes to the latest version and try again"
    );
}

#[tokio::test]
async fn errors_are_status_objects() {
    let fixture = Fixture::start(None).await.unwrap();
    let client = http();
    let base = fixture.url();
    struct Case {
        method: reqwest::Method,
        path: &'static str,
        body: Option<Value>,
        code: u16,
        reason: &'static str,
        message: &'static str,
    }
    let cases = [
        Case {
            method: reqwest::Method::GET,
            path: "/api/v1/namespaces/default/pods/web",
            body: None,
            code: 404,
            reason: "NotFound",
            message: "pods \"web\" not found",
        },
        Case {
            method: reqwest::Method::GET,
            path: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
            body: None,
            code: 404,
            reason: "NotFound",
            message: "leases.coordination.k8s.io \"n1\" not found",
        },
        Case {
            method: reqwest::Method::GET,
            path: "/api/v1/deployments",
            body: None,
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource",
        },
        Case {
            method: reqwest::Method::GET,
            path: "/api/v1/pods?fieldSelector=spec.bogus%3D1",
            body: None,
            code: 400,
            reason: "BadRequest",
            message: "field label not supported: spec.bogus",
        },
        Case {
            method: reqwest::Method::POST,
            path: "/api/v1/namespaces/default/configmaps",
            body: Some(json!({"metadata": {"name": "settings"}})),
            code: 201,
            reason: "",
            message: "",
        },
        Case {
            method: reqwest::Method::POST,
            path: "/api/v1/namespaces/default/configmaps",
            body: Some(json!({"metadata": {"name": "settings"}})),
            code: 409,
            reason: "AlreadyExists",
            message: "configmaps \"settings\" already exists",
        },
        Case {
            method: reqwest::Method::POST,
            path: "/api/v1/namespaces/nope/configmaps",
            body: Some(json!({"metadata": {"name": "x"}})),
            code: 404,
            reason: "NotFound",
            message: "namespaces \"nope\" not found",
        },
        Case {
            method: reqwest::Method::DELETE,
            path: "/api/v1/namespaces/default",
            body: None,
            code: 403,
            reason: "Forbidden",
            message: "namespaces \"default\" is forbidden: this namespace may not be deleted",
        },
    ];
    for case in cases {
        let mut request = client.request(case.method.clone(), format!("{base}{}", case.path));
        if let Some(body) = &case.body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        assert_eq!(
            response.status().as_u16(),
            case.code,
            "{} {}",
            case.method,
            case.path
        );
        assert_eq!(response.headers()["content-type"], "application/json");
        if case.code >= 400 {
            let status: Value = response.json().await.unwrap();
            assert_eq!(status["kind"], "Status");
            assert_eq!(status["status"], "Failure");
            assert_eq!(status["reason"], case.reason, "{}", case.path);
            assert_eq!(status["message"], case.message, "{}", case.path);
            assert_eq!(status["code"], case.code);
        }
    }
}

#[tokio::test]
async fn stop_closes_connections_and_resume_keeps_state() {
    let fixture = Fixture::start(None).await.unwrap();
    let client = http();
    let base = format!("{}/api/v1/namespaces/default/configmaps", fixture.url());
    let created: Value = client
        .post(&base)
        .json(&json!({"metadata": {"name": "c"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut watch = client
        .get(format!(
            "{base}?watch=1&resourceVersion={}",
            fixture.resource_version()
        ))
        .send()
        .await
        .unwrap();

    fixture.stop().await;
    // The open watch ends and new requests fail (the same pooled client: keep-alive connections are closed too).
    let ended = tokio::time::timeout(Duration::from_secs(5), watch.chunk())
        .await
        .unwrap();
    assert!(
        !matches!(ended, Ok(Some(_))),
        "the watch stream must end when the server stops"
    );
    assert!(client.get(format!("{base}/c")).send().await.is_err());

    fixture.resume().await.unwrap();
    let got: Value = client
        .get(format!("{base}/c"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        got["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert_eq!(got["metadata"]["uid"], created["metadata"]["uid"]);
    // A watch from the old resourceVersion still works after resume.
    let rv: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut watch = client
        .get(format!("{base}?watch=1&resourceVersion={rv}"))
        .send()
        .await
        .unwrap();
    client
        .post(&base)
        .json(&json!({"metadata": {"name": "d"}}))
        .send()
        .await
        .unwrap();
    let lines = read_watch_lines(&mut watch, 1).await;
    assert_eq!(lines[0]["object"]["metadata"]["name"], "d");
}

#[tokio::test]
async fn request_log_records_method_path_query_body_status() {
    let fixture = Fixture::start(None).await.unwrap();
    let client = http();
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?fieldManager=test",
        fixture.url()
    );
    client
        .post(&url)
        .json(&json!({"metadata": {"name": "c"}, "data": {"k": "v"}}))
        .send()
        .await
        .unwrap();
    let log = fixture.request_log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].method, "POST");
    assert_eq!(log[0].path, "/api/v1/namespaces/default/configmaps");
    assert_eq!(log[0].query, "fieldManager=test");
    assert_eq!(log[0].body.as_ref().unwrap()["data"]["k"], "v");
    assert_eq!(log[0].content_type.as_deref(), Some("application/json"));
    assert_eq!(log[0].status, 201);
    fixture.clear_log();
    assert!(fixture.request_log().is_empty());
}

#[tokio::test]
async fn state_file_survives_a_process_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let first = Fixture::start_with(FixtureOptions {
        state_file: Some(state.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = http();
    client
        .post(format!(
            "{}/api/v1/namespaces/default/configmaps",
            first.url()
        ))
        .json(&json!({"metadata": {"name": "c"}}))
        .send()
        .await
        .unwrap();
    let rv = first.resource_version();
    first.stop().await;
    drop(first);
    let second = Fixture::start_with(FixtureOptions {
        state_file: Some(state),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(second.resource_version(), rv);
    let r = client
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps/c",
            second.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
