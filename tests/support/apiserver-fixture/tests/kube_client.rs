//! kube-rs (the client nodelet uses) against the fixture: watch, patch_status, delete with
//! preconditions, the runtime watcher, leases.

use std::time::Duration;

use apiserver_fixture::Fixture;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use kube::runtime::watcher;
use kube::{Client, Config};
use serde_json::json;

fn client(fixture: &Fixture) -> Client {
    let config = Config::new(fixture.url().parse::<axum::http::Uri>().unwrap());
    Client::try_from(config).unwrap()
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx:1.27"}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn watch_patch_status_and_final_delete() {
    let fixture = Fixture::start(None).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&fixture), "default");
    let created = pods
        .create(&PostParams::default(), &pod("web", "node-1"))
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();

    let all: Api<Pod> = Api::all(client(&fixture));
    let wp = WatchParams::default()
        .fields("spec.nodeName=node-1")
        .timeout(30);
    let mut stream = all.watch(&wp, &rv).await.unwrap().boxed();

    // The kubelet's status update: a strategic merge patch of pods/status.
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let patched = pods
        .patch_status("web", &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap();
    assert_eq!(
        patched.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(
        patched.status.as_ref().unwrap().qos_class.as_deref(),
        Some("BestEffort")
    );

    // Graceful delete from a user, then the node agent's final delete with the UID precondition.
    let graceful = pods
        .delete(
            "web",
            &DeleteParams {
                grace_period_seconds: Some(10),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let terminating = graceful.left().expect("pods come back as the object");
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(10));
    let wrong = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let err = pods.delete("web", &wrong).await.unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"))
        }
        other => panic!("expected a Conflict, got {other:?}"),
    }
    let last = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    pods.delete("web", &last).await.unwrap();
    assert!(pods.get_opt("web").await.unwrap().is_none());

    let mut seen = Vec::new();
    while seen.len() < 4 {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(match event {
            WatchEvent::Added(p) => ("ADDED", p.metadata.deletion_timestamp.is_some()),
            WatchEvent::Modified(p) => ("MODIFIED", p.metadata.deletion_timestamp.is_some()),
            WatchEvent::Deleted(p) => ("DELETED", p.metadata.deletion_timestamp.is_some()),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        });
    }
    assert_eq!(
        seen,
        [
            ("MODIFIED", false),
            ("MODIFIED", true),
            ("MODIFIED", true),
            ("DELETED", true)
        ]
    );

    let deletes: Vec<_> = fixture
        .request_log()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 3);
    assert_eq!(
        deletes[2].body.as_ref().unwrap()["preconditions"]["uid"],
        uid
    );
}

#[tokio::test]
async fn runtime_watcher_lists_then_watches() {
    let fixture = Fixture::start(None).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&fixture), "default");
    pods.create(&PostParams::default(), &pod("a", "node-1"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("other", "node-2"))
        .await
        .unwrap();
    let all: Api<Pod> = Api::all(client(&fixture));
    let config = watcher::Config::default().fields("spec.nodeName=node-1");
    let mut events = watcher(all, config).boxed();
    let mut names = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match event {
            watcher::Event::InitApply(p) => names.push(p.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, ["a"]);
    pods.create(&PostParams::default(), &pod("b", "node-1"))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(10), events.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match event {
        watcher::Event::Apply(p) => assert_eq!(p.metadata.name.as_deref(), Some("b")),
        other => panic!("expected Apply(b), got {other:?}"),
    }
    let listed = pods.list(&ListParams::default().labels("")).await.unwrap();
    assert_eq!(listed.items.len(), 3);
}

#[tokio::test]
async fn node_registration_and_lease_heartbeat() {
    let fixture = Fixture::start(None).await.unwrap();
    let nodes: Api<Node> = Api::all(client(&fixture));
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}
    }))
    .unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    // The node status is kept on create (the kubelet registers with its status).
    assert_eq!(
        created.status.unwrap().conditions.unwrap()[0].status,
        "False"
    );
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    let ready = nodes
        .patch_status("node-1", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    assert_eq!(ready.status.unwrap().conditions.unwrap()[0].status, "True");

    let leases: Api<Lease> = Api::namespaced(client(&fixture), "kube-node-lease");
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("node-1".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("node-1".into()),
            lease_duration_seconds: Some(40),
            renew_time: Some(MicroTime("2025-01-01T00:00:00.123456Z".parse().unwrap())),
            ..Default::default()
        }),
    };
    let mut current = leases.create(&PostParams::default(), &lease).await.unwrap();
    for _ in 0..3 {
        current.spec.as_mut().unwrap().renew_time = Some(MicroTime(jiff::Timestamp::now()));
        current = leases
            .replace("node-1", &PostParams::default(), &current)
            .await
            .unwrap();
    }
    // A stale resourceVersion is a Conflict, as the kubelet's lease controller expects.
    let mut stale = current.clone();
    stale.metadata.resource_version = Some("1".into());
    match leases
        .replace("node-1", &PostParams::default(), &stale)
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 409),
        other => panic!("expected a Conflict, got {other:?}"),
    }
    let puts = fixture
        .request_log()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .count();
    assert_eq!(puts, 4);
}

#[tokio::test]
async fn an_older_server_says_so_and_does_not_store_newer_status_fields() {
    use apiserver_fixture::{FixtureOptions, Release, ServerProfile};
    let fixture = Fixture::start_with(FixtureOptions {
        server: ServerProfile::release(Release::new(1, 32)),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&fixture);
    let info = client.apiserver_version().await.unwrap();
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "32"));
    assert_eq!(info.git_version, "v1.32.0-apiserver-fixture");

    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("web", "node-1"))
        .await
        .unwrap();
    let status = json!({"status": {
        "phase": "Running",
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}],
    }});
    let patched = pods
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(status.clone()),
        )
        .await
        .unwrap();
    let stored = patched.status.unwrap();
    assert_eq!(
        stored.phase.as_deref(),
        Some("Running"),
        "the rest is stored"
    );
    assert_eq!(stored.observed_generation, None, "v1.34 field dropped");
    assert_eq!(stored.conditions.unwrap()[0].observed_generation, None);

    // Sending the same again is a no-op: nothing the server keeps changed.
    let rv = patched.metadata.resource_version;
    let again = pods
        .patch_status("web", &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, rv);

    // Upgraded: the same write is stored whole.
    fixture.set_server(ServerProfile::default());
    let info = client_version(&fixture).await;
    assert_eq!(info.minor, "37");
    let status = json!({"status": {"observedGeneration": 1}});
    let upgraded = pods
        .patch_status("web", &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap();
    assert_eq!(upgraded.status.unwrap().observed_generation, Some(1));
}

async fn client_version(fixture: &Fixture) -> k8s_openapi::apimachinery::pkg::version::Info {
    client(fixture).apiserver_version().await.unwrap()
}

#[tokio::test]
async fn dropped_fields_are_dropped_whatever_the_release() {
    use apiserver_fixture::{FixtureOptions, ServerProfile};
    let fixture = Fixture::start_with(FixtureOptions {
        server: ServerProfile {
            dropped: vec!["Node:status.nodeInfo.swap".parse().unwrap()],
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .unwrap();
    let nodes: Api<Node> = Api::all(client(&fixture));
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-1"},
        "status": {"nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b",
            "kernelVersion": "k", "osImage": "o", "containerRuntimeVersion": "c",
            "kubeletVersion": "v", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "amd64", "swap": {"capacity": 0}}}
    }))
    .unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    let info = created.status.unwrap().node_info.unwrap();
    assert_eq!(info.boot_id, "b");
    assert!(info.swap.is_none());
}

#[tokio::test]
async fn stamped_writes_are_new_resource_versions_even_when_nothing_else_changed() {
    use apiserver_fixture::version::WRITE_STAMP_ANNOTATION;
    use apiserver_fixture::{FixtureOptions, ServerProfile};
    let fixture = Fixture::start_with(FixtureOptions {
        server: ServerProfile {
            stamp_writes: true,
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&fixture), "default");
    pods.create(&PostParams::default(), &pod("web", "node-1"))
        .await
        .unwrap();
    let status = json!({"status": {"phase": "Running"}});
    let first = pods
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(status.clone()),
        )
        .await
        .unwrap();
    let second = pods
        .patch_status("web", &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap();
    let stamp = |p: &Pod| p.metadata.annotations.as_ref().unwrap()[WRITE_STAMP_ANNOTATION].clone();
    assert_ne!(
        first.metadata.resource_version,
        second.metadata.resource_version
    );
    assert_eq!(Some(stamp(&second)), second.metadata.resource_version);
    assert_ne!(stamp(&first), stamp(&second));
}
