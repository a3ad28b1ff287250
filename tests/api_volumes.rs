//! ConfigMaps, Secrets, the Downward API and service account tokens against the project's API
//! server fixture: the watch-based object cache (created and changed with the real kubectl), the
//! token manager, and volumes and environments built from what they hold.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use apiserver_fixture::serviceaccount::token_claims;
use apiserver_fixture::Fixture;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodelet::clock::Clock;
use nodelet::objects::token::ApiTokenIssuer;
use nodelet::objects::{FakeObjects, ObjectCache, ObjectSource, TokenManager, TokenRequest};
use nodelet::podspec::env::{make_environment, EnvContext};
use nodelet::podspec::references::ObjectKind;
use nodelet::sync::env_objects::gather_env_objects;
use nodelet::volume::{update_api_volumes, ApiVolumeContext, NodeAllocatable};

const KUBECTL: &str = "/usr/bin/kubectl";
const WAIT: Duration = Duration::from_secs(20);

async fn kubectl(fixture: &Fixture, args: &[&str]) -> String {
    let out = tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .arg("--server")
        .arg(fixture.url())
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {KUBECTL}: {e}"));
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn client(fixture: &Fixture) -> kube::Client {
    kube::Client::try_from(kube::Config::new(fixture.url().parse().unwrap())).unwrap()
}

/// A pod in `default` whose container reads `settings` (envFrom and a volume) and `creds`.
fn pod(uid: &str) -> Pod {
    serde_yaml::from_str(&format!(
        "
metadata: {{name: web, namespace: default, uid: {uid}}}
spec:
  containers:
  - name: app
    image: busybox
    envFrom:
    - configMapRef: {{name: settings}}
    env:
    - name: PASSWORD
      valueFrom: {{secretKeyRef: {{name: creds, key: password}}}}
    - name: URL
      value: http://db:$(PORT)
  volumes:
  - name: cfg
    configMap: {{name: settings, defaultMode: 420}}
  - name: tls
    secret: {{secretName: creds, defaultMode: 256}}
"
    ))
    .unwrap()
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A cache whose first list may take a loaded machine's time; the 1 s default is for nodes.
fn patient_cache(fixture: &Fixture) -> ObjectCache {
    ObjectCache::new(client(fixture)).with_sync_timeout(Duration::from_secs(30))
}

async fn config_value(cache: &ObjectCache, name: &str, key: &str) -> Option<String> {
    cache
        .config_map("default", name)
        .await
        .ok()
        .flatten()
        .and_then(|cm| cm.data.and_then(|d| d.get(key).cloned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_watches_referenced_objects_and_sees_changes() {
    let fixture = Fixture::start(None).await.unwrap();
    kubectl(
        &fixture,
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=PORT=5432",
        ],
    )
    .await;
    let cache = patient_cache(&fixture);
    cache.register_pod(&pod("uid-1"));
    assert_eq!(
        cache.watched(),
        [
            (ObjectKind::ConfigMap, "default".into(), "settings".into()),
            (ObjectKind::Secret, "default".into(), "creds".into()),
        ]
    );
    assert_eq!(
        config_value(&cache, "settings", "PORT").await.as_deref(),
        Some("5432")
    );
    // the Secret does not exist (yet): a read answers "not found", not an error
    assert!(cache.secret("default", "creds").await.unwrap().is_none());

    // one watch per object, by name, in the pod's namespace
    let watches = || {
        fixture
            .request_log()
            .into_iter()
            .filter(|r| r.query_param("watch").is_some())
            .map(|r| (r.path.clone(), r.query_param("fieldSelector")))
            .collect::<Vec<_>>()
    };
    eventually("both watches started", || async {
        let w = watches();
        w.contains(&(
            "/api/v1/namespaces/default/configmaps".into(),
            Some("metadata.name=settings".into()),
        )) && w.contains(&(
            "/api/v1/namespaces/default/secrets".into(),
            Some("metadata.name=creds".into()),
        ))
    })
    .await;
    assert_eq!(watches().len(), 2, "{:?}", watches());

    // changes made with kubectl reach the cache
    kubectl(
        &fixture,
        &[
            "patch",
            "configmap",
            "settings",
            "-p",
            r#"{"data":{"PORT":"6543"}}"#,
        ],
    )
    .await;
    eventually("the cache sees the patched ConfigMap", || async {
        config_value(&cache, "settings", "PORT").await.as_deref() == Some("6543")
    })
    .await;
    kubectl(
        &fixture,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=password=pw",
        ],
    )
    .await;
    eventually("the cache sees the new Secret", || async {
        cache
            .secret("default", "creds")
            .await
            .ok()
            .flatten()
            .and_then(|s| s.data)
            .and_then(|d| d.get("password").map(|v| v.0.clone()))
            == Some(b"pw".to_vec())
    })
    .await;

    // while the API server is down, reads are served from the cache
    fixture.stop().await;
    assert_eq!(
        config_value(&cache, "settings", "PORT").await.as_deref(),
        Some("6543")
    );
    fixture.resume().await.unwrap();
    kubectl(
        &fixture,
        &[
            "patch",
            "configmap",
            "settings",
            "-p",
            r#"{"data":{"PORT":"7000"}}"#,
        ],
    )
    .await;
    eventually("the watch resumes after the outage", || async {
        config_value(&cache, "settings", "PORT").await.as_deref() == Some("7000")
    })
    .await;

    // a second pod sharing the object keeps it watched when the first goes away
    let mut other = pod("uid-2");
    other.metadata.name = Some("other".into());
    other.spec.as_mut().unwrap().volumes = None;
    other.spec.as_mut().unwrap().containers[0].env = None;
    cache.register_pod(&other);
    cache.unregister_pod("uid-1");
    assert_eq!(
        cache.watched(),
        [(ObjectKind::ConfigMap, "default".into(), "settings".into())]
    );
    cache.sync_pods(std::iter::empty());
    assert!(cache.watched().is_empty());

    // an unregistered read is a plain GET
    fixture.clear_log();
    assert_eq!(
        config_value(&cache, "settings", "PORT").await.as_deref(),
        Some("7000")
    );
    let gets: Vec<_> = fixture
        .request_log()
        .into_iter()
        .filter(|r| r.path.contains("/configmaps"))
        .map(|r| (r.method.clone(), r.path.clone(), r.query_param("watch")))
        .collect();
    assert_eq!(
        gets,
        [(
            "GET".to_string(),
            "/api/v1/namespaces/default/configmaps/settings".to_string(),
            None
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_api_server_and_immutable_objects() {
    let fixture = Fixture::start(None).await.unwrap();
    let immutable = ConfigMap {
        metadata: ObjectMeta {
            name: Some("settings".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("PORT".to_string(), "1".to_string())])),
        immutable: Some(true),
        ..Default::default()
    };
    fixture.create(&immutable).unwrap();
    let cache = ObjectCache::new(client(&fixture)).with_sync_timeout(Duration::from_millis(300));

    cache.register_pod(&pod("uid-1"));
    // The short sync limit is for the unreachable case below; the first list may take longer
    // than it on a loaded machine, so the read is repeated until the watch has listed.
    eventually("the immutable ConfigMap is read", || async {
        config_value(&cache, "settings", "PORT").await.as_deref() == Some("1")
    })
    .await;
    // an immutable object is not watched once read
    assert_eq!(
        cache.watched(),
        [(ObjectKind::Secret, "default".into(), "creds".into())]
    );

    // a watch that cannot list in time fails the read with the kubelet's message
    fixture.stop().await;
    let mut late = pod("uid-3");
    late.spec.as_mut().unwrap().volumes = Some(vec![serde_yaml::from_str(
        "{name: x, secret: {secretName: late}}",
    )
    .unwrap()]);
    cache.register_pod(&late);
    let err = cache.secret("default", "late").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to sync secret cache: timed out waiting for the condition"
    );
    fixture.resume().await.unwrap();
    eventually(
        "the late watch lists once the API server is back",
        || async { cache.secret("default", "late").await.is_ok() },
    )
    .await;
}

fn node() -> NodeAllocatable {
    NodeAllocatable {
        cpu_milli: 2000,
        memory: 1 << 30,
        ephemeral_storage: None,
    }
}

/// Unmounts the secret tmpfs a test mounted, even when it fails.
struct PodDir<'a>(&'a Path);

impl Drop for PodDir<'_> {
    fn drop(&mut self) {
        let _ = nodelet::volume::cleanup_pod_dir(
            self.0,
            "uid-1",
            &nodelet::volume::trash::Trash::new(self.0).0,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_and_environment_from_the_api_server() {
    let fixture = Fixture::start(None).await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let _cleanup = PodDir(root.path());
    let cache = patient_cache(&fixture);
    let p = pod("uid-1");
    cache.register_pod(&p);
    let ctx = ApiVolumeContext::new(node());

    // nothing exists yet: FailedMount for both volumes, CreateContainerConfigError text for env
    let out = update_api_volumes(&p, root.path(), &cache, &ctx).await;
    let failures: Vec<String> = out.failures.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        failures,
        [
            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"settings\" not found",
            "MountVolume.SetUp failed for volume \"tls\" : secret \"creds\" not found",
        ]
    );
    assert!(out.unmounted().is_some());
    let c = &p.spec.as_ref().unwrap().containers[0];
    let env_ctx = EnvContext {
        pod_ips: &[],
        host_ips: &[],
        node_name: "node-1",
        node_allocatable: nodelet::podspec::resources::NodeAllocatable {
            cpu_milli: 2000,
            memory: 1 << 30,
            ephemeral_storage: None,
        },
    };
    let objects = gather_env_objects(&p, c, &cache, std::path::Path::new("/nonexistent")).await;
    assert_eq!(
        make_environment(&p, c, &env_ctx, &objects)
            .unwrap_err()
            .to_string(),
        "configmap \"settings\" not found"
    );

    kubectl(
        &fixture,
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=PORT=5432",
        ],
    )
    .await;
    kubectl(
        &fixture,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=password=pw",
        ],
    )
    .await;
    eventually("both volumes set up", || async {
        update_api_volumes(&p, root.path(), &cache, &ctx)
            .await
            .failures
            .is_empty()
    })
    .await;
    let out = update_api_volumes(&p, root.path(), &cache, &ctx).await;
    let cfg = &out.paths["cfg"];
    let tls = &out.paths["tls"];
    assert!(cfg.ends_with("pods/uid-1/volumes/kubernetes.io~configmap/cfg"));
    assert!(tls.ends_with("pods/uid-1/volumes/kubernetes.io~secret/tls"));
    assert_eq!(std::fs::read_to_string(cfg.join("PORT")).unwrap(), "5432");
    assert_eq!(std::fs::read_to_string(tls.join("password")).unwrap(), "pw");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(tls.join("password"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o400);

    let objects = gather_env_objects(&p, c, &cache, std::path::Path::new("/nonexistent")).await;
    assert_eq!(
        make_environment(&p, c, &env_ctx, &objects).unwrap(),
        [
            ("PORT".to_string(), "5432".to_string()),
            ("PASSWORD".to_string(), "pw".to_string()),
            ("URL".to_string(), "http://db:5432".to_string()),
        ]
    );

    // a change to the ConfigMap reaches the volume on the next sync
    kubectl(
        &fixture,
        &[
            "patch",
            "configmap",
            "settings",
            "-p",
            r#"{"data":{"PORT":"6543"}}"#,
        ],
    )
    .await;
    eventually("the volume shows the new value", || async {
        update_api_volumes(&p, root.path(), &cache, &ctx).await;
        std::fs::read_to_string(cfg.join("PORT")).ok().as_deref() == Some("6543")
    })
    .await;
}

#[tokio::test]
async fn fake_source_drives_the_same_volume_code() {
    let root = tempfile::tempdir().unwrap();
    let _cleanup = PodDir(root.path());
    let fake = FakeObjects::new();
    let p = pod("uid-1");
    fake.set_config_map(ConfigMap {
        metadata: ObjectMeta {
            name: Some("settings".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("PORT".to_string(), "1".to_string())])),
        ..Default::default()
    });
    fake.fail(
        ObjectKind::Secret,
        "default",
        "creds",
        "secrets \"creds\" is forbidden",
    );
    let out = update_api_volumes(&p, root.path(), &fake, &ApiVolumeContext::new(node())).await;
    assert_eq!(out.paths.keys().collect::<Vec<_>>(), ["cfg"]);
    assert_eq!(
        out.unmounted().map(|e| e.to_string()).as_deref(),
        Some("MountVolume.SetUp failed for volume \"tls\" : secrets \"creds\" is forbidden")
    );
}

/// Unmounts and removes the directory of the pod with this UID, even when the test fails.
struct PodDirOf<'a>(&'a Path, String);

impl Drop for PodDirOf<'_> {
    fn drop(&mut self) {
        let _ = nodelet::volume::cleanup_pod_dir(
            self.0,
            &self.1,
            &nodelet::volume::trash::Trash::new(self.0).0,
        );
    }
}

/// A pod bound to a node, created in the fixture: the ServiceAccount admission plugin gives it
/// the `kube-api-access-*` volume.
fn admitted_pod(fixture: &Fixture, name: &str) -> Pod {
    let pod: Pod = serde_yaml::from_str(&format!(
        "
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: node-1
  containers:
  - {{name: app, image: busybox}}
"
    ))
    .unwrap();
    fixture.create(&pod).unwrap()
}

fn token_posts(fixture: &Fixture) -> Vec<apiserver_fixture::LoggedRequest> {
    fixture
        .request_log()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/token"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_manager_asks_once_refreshes_late_and_outlives_an_outage() {
    let fixture = Fixture::start(None).await.unwrap();
    let pod = admitted_pod(&fixture, "web");
    let uid = pod.metadata.uid.clone().unwrap();
    let manager = TokenManager::new(
        Arc::new(ApiTokenIssuer::new(client(&fixture))),
        Clock::system(),
    )
    .with_max_jitter(Duration::ZERO);
    let request = TokenRequest {
        namespace: "default".into(),
        service_account: "default".into(),
        audiences: vec![],
        expiration_seconds: 3607,
        pod_name: "web".into(),
        pod_uid: uid.clone(),
    };
    let start = jiff::Timestamp::now();
    let after = |minutes: i64| {
        start
            .checked_add(jiff::SignedDuration::from_mins(minutes))
            .unwrap()
    };

    let first = manager.token_at(&request, start).await.unwrap();
    let posts = token_posts(&fixture);
    assert_eq!(posts.len(), 1);
    assert_eq!(
        posts[0].path,
        "/api/v1/namespaces/default/serviceaccounts/default/token"
    );
    assert_eq!(
        posts[0].body.as_ref().unwrap()["spec"],
        serde_json::json!({
            "audiences": [],
            "expirationSeconds": 3607,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": uid},
        })
    );
    let claims = token_claims(&first).unwrap();
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str());
    assert_eq!(claims["sub"], "system:serviceaccount:default:default");

    // well before 80% of the lifetime: the cached token, no request
    assert_eq!(manager.token_at(&request, after(40)).await.unwrap(), first);
    assert_eq!(token_posts(&fixture).len(), 1);

    // past 80%: a new token
    let second = manager.token_at(&request, after(50)).await.unwrap();
    assert_ne!(second, first);
    assert_eq!(token_posts(&fixture).len(), 2);

    // the API server goes away: the current token is served while it is valid ...
    fixture.stop().await;
    assert_eq!(manager.token_at(&request, after(55)).await.unwrap(), second);
    // ... and reading fails once it has expired
    let err = manager
        .token_at(&request, after(50 + 61))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "token \"default\"/\"default\"/[]/3607/pod \"web\" ({uid}) expired and refresh failed: "
        )),
        "{err}"
    );
    fixture.resume().await.unwrap();

    // a request the API server refuses, with its message
    let stale = TokenRequest {
        pod_uid: "not-the-uid".into(),
        ..request.clone()
    };
    let err = manager.token_at(&stale, start).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to fetch token: Operation cannot be fulfilled on Pod \"web\": the UID in the bound object reference (not-the-uid) does not match the UID in record. The object might have been deleted and then recreated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_api_access_volume_from_the_api_server() {
    let fixture = Fixture::start(None).await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let pod = admitted_pod(&fixture, "web");
    let uid = pod.metadata.uid.clone().unwrap();
    let _cleanup = PodDirOf(root.path(), uid.clone());
    let volume = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0]
        .name
        .clone();
    assert!(volume.starts_with("kube-api-access-"), "{volume}");
    let cache = patient_cache(&fixture);
    cache.register_pod(&pod);
    let ctx = ApiVolumeContext::new(node());

    let mut out = update_api_volumes(&pod, root.path(), &cache, &ctx).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while !out.failures.is_empty() {
        // the kube-root-ca.crt watch may still be listing
        assert!(tokio::time::Instant::now() < deadline, "{:?}", out.failures);
        tokio::time::sleep(Duration::from_millis(50)).await;
        out = update_api_volumes(&pod, root.path(), &cache, &ctx).await;
    }
    let dir = &out.paths[&volume];
    assert!(dir.ends_with(format!(
        "pods/{uid}/volumes/kubernetes.io~projected/{volume}"
    )));
    assert_eq!(
        std::fs::read_to_string(dir.join("namespace")).unwrap(),
        "default"
    );
    assert!(std::fs::read_to_string(dir.join("ca.crt"))
        .unwrap()
        .starts_with("-----BEGIN CERTIFICATE-----"));
    let token = std::fs::read_to_string(dir.join("token")).unwrap();
    let claims = token_claims(&token).unwrap();
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str());
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3607
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644, "the volume's defaultMode 420");

    // later syncs use the cached token: one TokenRequest in all
    update_api_volumes(&pod, root.path(), &cache, &ctx).await;
    update_api_volumes(&pod, root.path(), &cache, &ctx).await;
    assert_eq!(token_posts(&fixture).len(), 1);
    assert_eq!(std::fs::read_to_string(dir.join("token")).unwrap(), token);

    // the pod goes away: its token is forgotten
    assert_eq!(cache.tokens().cached(), 1);
    cache.unregister_pod(&uid);
    assert_eq!(cache.tokens().cached(), 0);
}
