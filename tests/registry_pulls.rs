//! Pulls from a real registry: Debian's docker-registry on 127.0.0.1 with TLS (a test CA that
//! containerd trusts through its hosts.toml) and htpasswd authentication, started by
//! `scripts/registry.sh` (from `scripts/test-env.sh up`). Each test builds and pushes images of
//! its own (own names and own IDs, see `Registry::push`), so none is on the node before its
//! pull, and removes them from the node at the end.
//!
//! Fails (never skips) when the registry's environment is missing or it does not answer.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Event, Pod};
use nodelet::cri::{ImageService, Runtime};
use nodelet_testkit::pod::{container_status, phase, restart_count, running_ids, waiting_reason};
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(120);

/// The test registry, from `scripts/registry.sh env`.
struct Registry {
    address: String,
    user: String,
    password: String,
    cert_dir: String,
    oci_dir: PathBuf,
}

fn env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: the pull tests need the project's test registry. Run them with \
             scripts/test.sh, or eval \"$(scripts/test-env.sh up)\" first (it starts \
             scripts/registry.sh and prints its environment)."
        ),
    }
}

fn registry() -> Registry {
    let r = Registry {
        address: env("NODELET_TEST_REGISTRY"),
        user: env("NODELET_TEST_REGISTRY_USER"),
        password: env("NODELET_TEST_REGISTRY_PASSWORD"),
        cert_dir: env("NODELET_TEST_REGISTRY_CERT_DIR"),
        oci_dir: PathBuf::from(env("NODELET_TEST_IMAGES_OCI")),
    };
    assert!(
        std::net::TcpStream::connect(&r.address).is_ok(),
        "the test registry does not answer on {}: run scripts/registry.sh start",
        r.address
    );
    r
}

impl Registry {
    /// Builds an image of its own (a label makes its config, so its ID, unique) from one of
    /// the project's static binaries, `pause` or `testbox` (both run with no arguments until
    /// SIGTERM), and pushes it as `private/<name>:1`; returns the image reference and the
    /// manifest digest the registry stored. Its own ID matters: the CRI's RemoveImage removes
    /// every name of an image, and the node status lists only five names per image, so a test
    /// image must never share an ID with `localhost/testbox:1`.
    fn push(&self, binary: &str, name: &str) -> (String, String) {
        let image = format!("{}/private/{name}:1", self.address);
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("image.tar");
        let stage = self.oci_dir.parent().unwrap().join("stage");
        let out = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/images/build-image.py"
            ))
            .args(["--name", &image, "--out"])
            .arg(&archive)
            .arg("--file")
            .arg(format!("/{binary}={}:0755", stage.join(binary).display()))
            .arg("--entrypoint")
            .arg(format!("[\"/{binary}\"]"))
            .arg("--label")
            .arg(format!(
                "io.nodelet.test.variant={name}-{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            ))
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "building {image} from {} failed (run scripts/images.sh build): {}",
            stage.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let digest_file = dir.path().join("digest");
        let out = Command::new("skopeo")
            .args([
                "copy",
                "--quiet",
                "--dest-cert-dir",
                &self.cert_dir,
                "--dest-creds",
            ])
            .arg(format!("{}:{}", self.user, self.password))
            .arg("--digestfile")
            .arg(&digest_file)
            .arg(format!("oci-archive:{}", archive.display()))
            .arg(format!("docker://{image}"))
            .output()
            .expect("skopeo (apt-get install skopeo, or scripts/install-deps.sh)");
        assert!(
            out.status.success(),
            "skopeo copy to {image} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let digest = std::fs::read_to_string(&digest_file).unwrap();
        assert!(digest.starts_with("sha256:"), "digest file: {digest:?}");
        (image, digest.trim().to_string())
    }
}

/// A name no other test run uses, so the image is not on the node yet.
fn unique(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// Removes a test image from the node (each has an ID of its own, see [`Registry::push`]).
async fn remove_image(image: &str) {
    let _ = runtime().remove_image(image).await;
}

fn base64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn image_id(p: &Pod) -> String {
    container_status(p, "main")
        .map(|s| s.image_id.clone())
        .unwrap_or_default()
}

fn waiting_message(p: &Pod) -> String {
    container_status(p, "main")
        .and_then(|s| s.state.as_ref()?.waiting.as_ref()?.message.clone())
        .unwrap_or_default()
}

async fn wait_api_pod(
    fixture: &impl TestApi,
    n: &Nodelet,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&Pod) -> bool,
) -> Pod {
    let deadline = Instant::now() + T;
    let mut last = None;
    loop {
        if let Some(p) = fixture.object::<Pod>(Some(namespace), name) {
            if check(&p) {
                return p;
            }
            last = Some(p);
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {namespace}/{name}: {what}\nlast: {}\n{}",
            last.map(|p| serde_json::to_string_pretty(&p.status).unwrap())
                .unwrap_or_default(),
            tail(&n.logs(), 80)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The waiting message of container `main` in the first successful status write for pod
/// `name` whose waiting reason is `reason`, from what the API server logged of nodelet's
/// requests.
async fn wait_written_waiting(
    fixture: &impl TestApi,
    n: &Nodelet,
    name: &str,
    reason: &str,
) -> String {
    let deadline = Instant::now() + T;
    let path = format!("/pods/{name}/status");
    loop {
        let written = fixture.requests().into_iter().find_map(|r| {
            if r.method != "PATCH" || !r.path.ends_with(&path) || r.status != 200 {
                return None;
            }
            let statuses = r.body?["status"]["containerStatuses"].as_array()?.clone();
            statuses.iter().find_map(|c| {
                let waiting = &c["state"]["waiting"];
                (c["name"] == "main" && waiting["reason"] == reason)
                    .then(|| waiting["message"].as_str().unwrap_or_default().to_string())
            })
        });
        if let Some(message) = written {
            return message;
        }
        assert!(
            Instant::now() < deadline,
            "no status write with waiting reason {reason} for {name}\n{}",
            tail(&n.logs(), 80)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn pod_events(fixture: &impl TestApi, namespace: &str, pod: &str) -> Vec<(String, String)> {
    fixture
        .objects::<Event>(Some(namespace))
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// The kubelet's `Pulled` message: `Successfully pulled image "…" in 1.2s (1.3s including
/// waiting). Image size: N bytes.` with N > 0.
fn assert_pulled_message(message: &str, image: &str) {
    let prefix = format!("Successfully pulled image {image:?} in ");
    assert!(message.starts_with(&prefix), "{message}");
    let rest = &message[prefix.len()..];
    let (took, rest) = rest.split_once(" (").unwrap_or_else(|| panic!("{message}"));
    let (total, rest) = rest
        .split_once(" including waiting). Image size: ")
        .unwrap_or_else(|| panic!("{message}"));
    for d in [took, total] {
        nodelet::config::parse_duration(d).unwrap_or_else(|e| panic!("{d:?} in {message}: {e}"));
    }
    let size: u64 = rest
        .strip_suffix(" bytes.")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{message}"));
    assert!(size > 0, "{message}");
}

fn private_pod(name: &str, namespace: &str, node: &str, image: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 2\n  automountServiceAccountToken: false\n{extra_spec}  containers:\n  - name: main\n    image: {image}\n    imagePullPolicy: IfNotPresent\n"
    )
}

/// Cluster mode: a `kubernetes.io/dockerconfigjson` pull secret named by the pod, and a
/// `kubernetes.io/dockercfg` one named by the pod's service account (the real API server's
/// ServiceAccount admission copies it into the pod), each let a private image pull; the
/// kubelet's Pulling/Pulled events reach the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_secrets_pull_private_images_in_cluster_mode() {
    let reg = registry();
    let (json_image, json_digest) = reg.push("testbox", &unique("secret-json"));
    let (cfg_image, cfg_digest) = reg.push("pause", &unique("secret-cfg"));
    remove_image(&json_image).await;
    remove_image(&cfg_image).await;

    let server = RealServer::start("pullsecret");
    let api = server.api();
    let team = server.namespace();
    let team = team.as_str();
    let n = Nodelet::start_in_real_cluster("pullsecret", &server, "");
    // kubectl's own docker-registry secret: type kubernetes.io/dockerconfigjson.
    let (ok, _, err) = kubectl(
        &api,
        &[
            "-n",
            team,
            "create",
            "secret",
            "docker-registry",
            "regcred",
            &format!("--docker-server={}", reg.address),
            &format!("--docker-username={}", reg.user),
            &format!("--docker-password={}", reg.password),
        ],
    );
    assert!(ok, "{err}");
    // The legacy type, keyed by the registry with a path prefix and an `auth` field.
    let dockercfg = format!(
        r#"{{"https://{}/private":{{"auth":"{}"}}}}"#,
        reg.address,
        base64(&format!("{}:{}", reg.user, reg.password))
    );
    kubectl_apply(
        &api,
        n.dir.path(),
        "legacy",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: legacy\n  namespace: {team}\ntype: kubernetes.io/dockercfg\ndata:\n  .dockercfg: {}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: puller\n  namespace: {team}\nimagePullSecrets:\n- name: legacy\n",
            base64(&dockercfg)
        ),
    );
    kubectl_apply(
        &api,
        n.dir.path(),
        "json",
        &private_pod(
            "json",
            team,
            &n.node,
            &json_image,
            "  imagePullSecrets: [{name: regcred}]\n",
        ),
    );
    kubectl_apply(
        &api,
        n.dir.path(),
        "cfg",
        &private_pod(
            "cfg",
            team,
            &n.node,
            &cfg_image,
            "  serviceAccountName: puller\n",
        ),
    );

    for (name, image, digest) in [
        ("json", &json_image, &json_digest),
        ("cfg", &cfg_image, &cfg_digest),
    ] {
        let pod = wait_api_pod(&server, &n, team, name, "Running", |p| {
            phase(p) == "Running"
        })
        .await;
        assert!(
            image_id(&pod).ends_with(digest.as_str()),
            "{name}: imageID {} is not the pushed digest {digest}",
            image_id(&pod)
        );
        let events = pod_events(&server, team, name);
        assert!(
            events
                .iter()
                .any(|(r, m)| r == "Pulling" && *m == format!("Pulling image {image:?}")),
            "{events:?}"
        );
        let pulled = events
            .iter()
            .find(|(r, _)| r == "Pulled")
            .unwrap_or_else(|| panic!("no Pulled event: {events:?}"));
        assert_pulled_message(&pulled.1, image);
    }
    // The service account's secret reached the pod through the API server's admission.
    let cfg: Pod = server.object(Some(team), "cfg").unwrap();
    let secrets = cfg.spec.unwrap().image_pull_secrets.unwrap_or_default();
    assert_eq!(secrets[0].name, "legacy");
    drop(n);
    remove_image(&json_image).await;
    remove_image(&cfg_image).await;
}

/// A wrong password: the registry's 401 in the pod's waiting message (ErrImagePull) and in
/// the Failed event, then ImagePullBackOff with its BackOff event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_gives_err_image_pull_then_image_pull_backoff() {
    let reg = registry();
    let (image, _) = reg.push("pause", &unique("wrong-password"));
    remove_image(&image).await;

    let server = RealServer::start("wrongpass");
    let api = server.api();
    let ns = server.namespace();
    let n = Nodelet::start_in_real_cluster("wrongpass", &server, "");
    let (ok, _, err) = kubectl(
        &api,
        &[
            "create",
            "secret",
            "docker-registry",
            "badcred",
            &format!("--docker-server={}", reg.address),
            &format!("--docker-username={}", reg.user),
            "--docker-password=not-the-password",
        ],
    );
    assert!(ok, "{err}");
    kubectl_apply(
        &api,
        n.dir.path(),
        "denied",
        &private_pod(
            "denied",
            &ns,
            &n.node,
            &image,
            "  imagePullSecrets: [{name: badcred}]\n",
        ),
    );
    // ErrImagePull lasts only until the next sync finds the pull in back-off (milliseconds when
    // an event is queued), so it is read from the status writes nodelet sent, not by polling.
    let message = wait_written_waiting(&server, &n, "denied", "ErrImagePull").await;
    assert!(
        message.contains("401 Unauthorized"),
        "ErrImagePull message without the registry's answer: {message}"
    );
    let backoff = wait_api_pod(&server, &n, &ns, "denied", "ImagePullBackOff", |p| {
        waiting_reason(p, "main").as_deref() == Some("ImagePullBackOff")
    })
    .await;
    assert_eq!(
        waiting_message(&backoff),
        format!("Back-off pulling image {image:?}")
    );
    assert_eq!(phase(&backoff), "Pending");
    let events = pod_events(&server, &ns, "denied");
    let failed_event = events
        .iter()
        .find(|(r, m)| r == "Failed" && m.starts_with("Failed to pull image"))
        .unwrap_or_else(|| panic!("no Failed event: {events:?}"));
    assert!(
        failed_event
            .1
            .starts_with(&format!("Failed to pull image {image:?}: "))
            && failed_event.1.contains("401 Unauthorized"),
        "{failed_event:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Failed" && m == "Error: ErrImagePull"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "BackOff" && *m == format!("Back-off pulling image {image:?}")),
        "{events:?}"
    );
    assert!(
        runtime().image_status(&image).await.unwrap().is_none(),
        "the image must not be on the node"
    );
}

/// Writes a credential provider plugin (a shell script) and its config; the plugin logs each
/// request it gets and answers with the registry's credentials for `cacheKeyType: Registry`.
fn credential_provider(dir: &Path, reg: &Registry, password: &str) -> String {
    let bin = dir.join("providers");
    std::fs::create_dir_all(&bin).unwrap();
    let plugin = bin.join("test-registry-login");
    std::fs::write(
        &plugin,
        "#!/bin/sh\n\
         # A credential provider plugin: the request on stdin, the response on stdout.\n\
         cat >>\"$REQUEST_LOG\"; echo >>\"$REQUEST_LOG\"\n\
         printf '{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"Registry\",\"cacheDuration\":\"0s\",\"auth\":{\"%s\":{\"username\":\"%s\",\"password\":\"%s\"}}}' \"$REGISTRY\" \"$REGISTRY_USER\" \"$REGISTRY_PASSWORD\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.join("credential-providers.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
             - name: test-registry-login\n  matchImages: [\"{addr}/private\"]\n  defaultCacheDuration: 10m\n\
             \x20 apiVersion: credentialprovider.kubelet.k8s.io/v1\n  env:\n\
             \x20 - {{name: REQUEST_LOG, value: {log}}}\n\
             \x20 - {{name: REGISTRY, value: \"{addr}\"}}\n\
             \x20 - {{name: REGISTRY_USER, value: {user}}}\n\
             \x20 - {{name: REGISTRY_PASSWORD, value: \"{password}\"}}\n",
            addr = reg.address,
            log = dir.join("requests.log").display(),
            user = reg.user,
        ),
    )
    .unwrap();
    format!(
        "imageCredentialProviderConfig: {}\nimageCredentialProviderBinDir: {}\n",
        config.display(),
        bin.display()
    )
}

fn static_pod(name: &str, image: &str, policy: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: {image}\n    imagePullPolicy: {policy}\n"
    )
}

/// Standalone, a static pod: a credential provider plugin gives the credentials; it is asked
/// with the kubelet's CredentialProviderRequest for the image's repository.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_provider_plugin_pulls_for_a_static_pod() {
    let reg = registry();
    let (image, digest) = reg.push("testbox", &unique("provider"));
    remove_image(&image).await;
    let plugin_dir = tempfile::tempdir().unwrap();
    let extra = credential_provider(plugin_dir.path(), &reg, &reg.password);
    let n = Nodelet::start_with("credprovider", &extra);
    n.write_manifest("web.yaml", &static_pod("web", &image, "IfNotPresent"));
    let pod = n
        .wait_pod("web", T, "Running", |p| phase(p) == "Running")
        .await;
    assert!(
        image_id(&pod).ends_with(&digest),
        "imageID {} is not the pushed digest {digest}",
        image_id(&pod)
    );
    let requests = std::fs::read_to_string(plugin_dir.path().join("requests.log")).unwrap();
    let first: serde_json::Value = serde_json::from_str(requests.lines().next().unwrap()).unwrap();
    assert_eq!(
        first,
        serde_json::json!({
            "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
            "kind": "CredentialProviderRequest",
            "image": image.trim_end_matches(":1"),
        })
    );
    drop(n);
    remove_image(&image).await;
}

/// `imagePullPolicy: Always`: the container's next start pulls again, and a new digest pushed
/// under the same tag meanwhile is what runs (here the pause image, then testbox, both of
/// which run with no arguments).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_runs_the_newly_pushed_digest_on_the_next_start() {
    let reg = registry();
    let name = unique("always");
    let (image, first) = reg.push("pause", &name);
    remove_image(&image).await;
    let plugin_dir = tempfile::tempdir().unwrap();
    let extra = credential_provider(plugin_dir.path(), &reg, &reg.password);
    let n = Nodelet::start_with("alwayspull", &extra);
    n.write_manifest("always.yaml", &static_pod("always", &image, "Always"));
    let pod = n
        .wait_pod("always", T, "Running the first digest", |p| {
            phase(p) == "Running" && image_id(p).ends_with(&first)
        })
        .await;
    let (_, second) = reg.push("testbox", &name);
    assert_ne!(first, second);
    // Stop the container (exit 0); restartPolicy Always starts it again, pulling first.
    let id = running_ids(&pod).remove(0);
    let id = id.trim_start_matches("containerd://");
    runtime()
        .stop_container(id, Duration::from_secs(2))
        .await
        .unwrap();
    let pod = n
        .wait_pod("always", T, "Running the second digest", |p| {
            restart_count(p, "main") >= 1
                && image_id(p).ends_with(&second)
                && container_status(p, "main")
                    .and_then(|s| s.state.as_ref()?.running.as_ref())
                    .is_some()
        })
        .await;
    assert_eq!(phase(&pod), "Running");
    let uid = pod.metadata.uid.clone().unwrap();
    let events: serde_json::Value = reqwest::get(format!("{}/events?pod={uid}", n.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pulls = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "Pulled")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>();
    assert_eq!(pulls.len(), 2, "{pulls:?}");
    for m in &pulls {
        assert_pulled_message(m, &image);
    }
    drop(n);
    remove_image(&image).await;
    let repository = image.trim_end_matches(":1");
    remove_image(&format!("{repository}@{first}")).await;
}
