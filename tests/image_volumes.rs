//! Image volumes (`spec.volumes[].image`) on the real containerd, in cluster mode against the
//! real v1.37.2 control plane.
//!
//! On containerd 2.1 and newer (the CRI's `Mount.image`): an image of the test's own, pushed to
//! the project's private test registry (TLS, htpasswd; `scripts/registry.sh`), is pulled with
//! the pod's `imagePullSecrets` (`Pulling`/`Pulled` events on the pod), mounted at the volume's
//! mount path where the container reads its files, read-only even though the volumeMount says
//! `readOnly: false` (a write fails with EROFS); image GC counts the image in use while the
//! container exists (the container's `io.nodelet.image-volumes` label, read back through
//! `CriGc::images_in_use` from the runtime); a pod whose volume image cannot be pulled (no
//! credentials, `pullPolicy: Always`) keeps its container waiting in `ErrImagePull` /
//! `ImagePullBackOff` with the registry's refusal, and no container is created for it.
//!
//! On containerd 1.6 (the ctd16 lane), which does not know `Mount.image` and would start the
//! container without the volume: the pod is rejected at admission (`PodFieldNotSupported`,
//! naming the field, the reference and the runtime), and no sandbox is created.
//!
//! In standalone mode, on both: the `ImageVolume` gate off rejects a static pod with an image
//! volume; a subPath of an image volume is rejected where the runtime does not know
//! `Mount.image_sub_path` (containerd 2.1.9; on 1.6 the volume itself is refused).
//!
//! Fails (never skips) when the registry's environment is missing on containerd 2.x.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Event, Pod};
use nodelet::cri::{ImageService, Runtime};
use nodelet::gc::images::ImageGcRuntime;
use nodelet_testkit::pod::{container_status, phase, waiting_reason};
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(120);

fn env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: the image volume test needs the project's test registry on \
             containerd 2.x. Run it with scripts/test.sh, or eval \"$(scripts/test-env.sh up)\" \
             first (it starts scripts/registry.sh and prints its environment)."
        ),
    }
}

/// Builds an image of the test's own holding `/data/hello.txt` (with `content`) and
/// `/data/sub/inner.txt`, pushes it to the private test registry as
/// `private/<name>:1` and returns its reference.
fn push_data_image(name: &str, content: &str) -> String {
    let address = env("NODELET_TEST_REGISTRY");
    let user = env("NODELET_TEST_REGISTRY_USER");
    let password = env("NODELET_TEST_REGISTRY_PASSWORD");
    let cert_dir = env("NODELET_TEST_REGISTRY_CERT_DIR");
    assert!(
        std::net::TcpStream::connect(&address).is_ok(),
        "the test registry does not answer on {address}: run scripts/registry.sh start"
    );
    let image = format!("{address}/private/{name}:1");
    let dir = tempfile::tempdir().unwrap();
    let hello = dir.path().join("hello.txt");
    std::fs::write(&hello, content).unwrap();
    let inner = dir.path().join("inner.txt");
    std::fs::write(&inner, "inner\n").unwrap();
    let archive = dir.path().join("image.tar");
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/images/build-image.py"
        ))
        .args(["--name", &image, "--out"])
        .arg(&archive)
        .arg("--dir")
        .arg("/data:0755")
        .arg("--dir")
        .arg("/data/sub:0755")
        .arg("--file")
        .arg(format!("/data/hello.txt={}:0644", hello.display()))
        .arg("--file")
        .arg(format!("/data/sub/inner.txt={}:0644", inner.display()))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "building {image} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("skopeo")
        .args([
            "copy",
            "--quiet",
            "--dest-cert-dir",
            &cert_dir,
            "--dest-creds",
        ])
        .arg(format!("{user}:{password}"))
        .arg(format!("oci-archive:{}", archive.display()))
        .arg(format!("docker://{image}"))
        .output()
        .expect("skopeo (apt-get install skopeo, or scripts/install-deps.sh)");
    assert!(
        out.status.success(),
        "skopeo copy to {image} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    image
}

const SCRIPT: &str = r#"echo "hello=$(cat /vol/data/hello.txt)"; echo "inner=$(cat /vol/data/sub/inner.txt)"; if touch /vol/data/x 2>/tmp/err; then echo write=ok; else echo "write=$(cat /tmp/err)"; fi; echo done=1; sleep 3600"#;

fn pod_yaml(name: &str, node: &str, image: &str, policy: &str, secrets: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 2\n  automountServiceAccountToken: false\n{secrets}\
         \x20 volumes:\n  - name: data\n    image: {{reference: \"{image}\", pullPolicy: {policy}}}\n\
         \x20 containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {SCRIPT:?}]\n\
         \x20   volumeMounts:\n    - {{name: data, mountPath: /vol, readOnly: false}}\n"
    )
}

async fn wait_api_pod(
    fixture: &impl TestApi,
    n: &Nodelet,
    name: &str,
    what: &str,
    check: impl Fn(&Pod) -> bool,
) -> Pod {
    let deadline = Instant::now() + T;
    let mut last = None;
    loop {
        if let Some(p) = fixture.object::<Pod>(Some(&fixture.namespace()), name) {
            if check(&p) {
                return p;
            }
            last = Some(p);
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {name}: {what}\nlast: {}\n{}",
            last.map(|p| serde_json::to_string_pretty(&p.status).unwrap())
                .unwrap_or_default(),
            tail(&n.logs(), 80)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The pod's events: (reason, message, the involved object's fieldPath).
fn pod_events(fixture: &impl TestApi, pod: &str) -> Vec<(String, String, Option<String>)> {
    fixture
        .objects::<Event>(Some(&fixture.namespace()))
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.involved_object.field_path,
            )
        })
        .collect()
}

/// `key=value` lines the container printed, once it printed `done=1`.
async fn report(n: &Nodelet, p: &Pod) -> std::collections::BTreeMap<String, String> {
    let m = &p.metadata;
    let file: PathBuf = n
        .dir
        .path()
        .join("logs")
        .join(format!(
            "{}_{}_{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            m.uid.as_deref().unwrap_or_default()
        ))
        .join("main/0.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let lines: std::collections::BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.splitn(4, ' ').nth(3))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect();
        if lines.contains_key("done") {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} never said done=1: {text:?}\n{}",
            file.display(),
            tail(&n.logs(), 80)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn running(p: &Pod) -> bool {
    container_status(p, "main")
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_volume_is_pulled_with_the_pods_secret_and_mounted_read_only() {
    let version = std::env::var("NODELET_TEST_CONTAINERD_VERSION")
        .expect("NODELET_TEST_CONTAINERD_VERSION (scripts/containerd.sh env)");
    let served = runtime().version().await.expect("CRI Version");
    let support = nodelet::podspec::image_volume::image_volume_support(
        &served.runtime_name,
        &served.runtime_version,
    );
    // Judged against the instance's containerd, so neither branch passes on the wrong runtime.
    assert_eq!(
        support.volumes,
        !version.starts_with("1.") && !version.starts_with("2.0"),
        "containerd {version} ({served:?})"
    );

    let server = RealServer::start("imgvol");
    let api = server.api();
    let n = Nodelet::start_in_real_cluster("imgvol", &server, "");

    if !support.volumes {
        let reference = "registry.invalid/private/never-pulled:1";
        kubectl_apply(
            &api,
            n.dir.path(),
            "refused",
            &pod_yaml("refused", &n.node, reference, "IfNotPresent", ""),
        );
        let pod = wait_api_pod(&server, &n, "refused", "rejected at admission", |p| {
            phase(p) == "Failed"
        })
        .await;
        let status = pod.status.unwrap_or_default();
        let want = format!(
            "Pod was rejected: spec.volumes[0].image: Unsupported value: {reference}: the container runtime ({} {}) does not mount image volumes (the CRI's Mount.image: containerd 2.1 or CRI-O 1.31 and newer), it would start the containers without the volume",
            served.runtime_name, served.runtime_version
        );
        assert_eq!(
            (status.reason.as_deref(), status.message.as_deref()),
            (Some("PodFieldNotSupported"), Some(want.as_str()))
        );
        let (sandboxes, containers) = n.runtime_objects().await;
        assert!(
            sandboxes.is_empty() && containers.is_empty(),
            "a rejected pod got a sandbox or containers: {sandboxes:?} {containers:?}"
        );
        let events = pod_events(&server, "refused");
        assert!(
            events
                .iter()
                .any(|(r, m, _)| r == "PodFieldNotSupported" && m.contains("spec.volumes[0].image")),
            "{events:?}"
        );
        assert!(
            !events.iter().any(|(r, _, _)| r == "Pulling"),
            "a refused pod's volume image was pulled: {events:?}"
        );
        return;
    }

    let content = format!("from-the-image-{}", std::process::id());
    let image = push_data_image(&format!("imgvol-{}", std::process::id()), &content);
    let rt = runtime();
    let _ = rt.remove_image(&image).await;

    let (ok, _, err) = kubectl(
        &api,
        &[
            "create",
            "secret",
            "docker-registry",
            "regcred",
            &format!("--docker-server={}", env("NODELET_TEST_REGISTRY")),
            &format!("--docker-username={}", env("NODELET_TEST_REGISTRY_USER")),
            &format!(
                "--docker-password={}",
                env("NODELET_TEST_REGISTRY_PASSWORD")
            ),
        ],
    );
    assert!(ok, "{err}");
    kubectl_apply(
        &api,
        n.dir.path(),
        "vol",
        &pod_yaml(
            "vol",
            &n.node,
            &image,
            "IfNotPresent",
            "  imagePullSecrets: [{name: regcred}]\n",
        ),
    );
    let pod = wait_api_pod(&server, &n, "vol", "its container running", running).await;
    let r = report(&n, &pod).await;
    assert_eq!(r.get("hello"), Some(&content), "{r:?}");
    assert_eq!(r.get("inner").map(String::as_str), Some("inner"), "{r:?}");
    let write = r.get("write").cloned().unwrap_or_default();
    assert!(
        write.contains("Read-only file system"),
        "a write to the image volume did not fail with EROFS: {write:?}"
    );

    // Pulled with the pod's secret, the events on the pod itself (no container fieldPath).
    let events = pod_events(&server, "vol");
    assert!(
        events.iter().any(|(r, m, f)| r == "Pulling"
            && *m == format!("Pulling image {image:?}")
            && f.is_none()),
        "{events:?}"
    );
    assert!(
        events.iter().any(|(r, m, f)| r == "Pulled"
            && m.starts_with(&format!("Successfully pulled image {image:?} in "))
            && f.is_none()),
        "{events:?}"
    );

    // Image GC: the image is in use while the container exists.
    let present = rt
        .image_status(&image)
        .await
        .expect("ImageStatus")
        .unwrap_or_else(|| panic!("{image} is not on the node"));
    let (_, containers) = n.runtime_objects().await;
    let main = containers
        .iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == "main"))
        .expect("the container");
    assert_eq!(
        main.labels.get(nodelet::cri::labels::IMAGE_VOLUMES),
        Some(&present.id),
        "{:?}",
        main.labels
    );
    let gc = nodelet::gc::CriGc {
        runtime: rt.clone(),
        images: rt.clone(),
        stats: None,
        housekeeping: None,
        node_name: n.node.clone(),
    };
    let in_use = gc.images_in_use().await.expect("images in use");
    assert!(
        nodelet::gc::images::image_in_use(&present, &in_use),
        "{} ({image}) is not in use for image GC: {in_use:?}",
        present.id
    );

    // No credentials and pullPolicy Always: the registry's refusal keeps the container waiting.
    kubectl_apply(
        &api,
        n.dir.path(),
        "nosecret",
        &pod_yaml("nosecret", &n.node, &image, "Always", ""),
    );
    let pod = wait_api_pod(
        &server,
        &n,
        "nosecret",
        "waiting on the volume's image",
        |p| {
            matches!(
                waiting_reason(p, "main").as_deref(),
                Some("ErrImagePull" | "ImagePullBackOff")
            )
        },
    )
    .await;
    let events = pod_events(&server, "nosecret");
    assert!(
        events.iter().any(|(r, m, _)| r == "Failed"
            && m.starts_with(&format!("Failed to pull image {image:?}"))
            && m.contains("authorization failed")),
        "{events:?}\n{:?}",
        pod.status
    );
    assert!(
        !n.runtime_objects().await.1.iter().any(|c| c
            .labels
            .get(nodelet::cri::labels::POD_NAME)
            .map(String::as_str)
            == Some("nosecret")),
        "a container of nosecret was created without its volume"
    );

    for name in ["vol", "nosecret"] {
        let (ok, _, err) = kubectl(&api, &["delete", "pod", name, "--wait=false"]);
        assert!(ok, "{err}");
    }
    drop(n);
    let _ = rt.remove_image(&image).await;
}

fn static_pod(name: &str, mount_extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 2\n\
         \x20 volumes:\n  - name: data\n    image: {{reference: \"registry.invalid/data:1\"}}\n\
         \x20 containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n\
         \x20   volumeMounts:\n    - {{name: data, mountPath: /vol{mount_extra}}}\n"
    )
}

async fn wait_rejected(n: &Nodelet, name: &str) -> (Option<String>, Option<String>) {
    let pod = n
        .wait_pod(name, T, "rejected at admission", |p| phase(p) == "Failed")
        .await;
    let status = pod.status.unwrap_or_default();
    (status.reason, status.message)
}

/// Static pods: on a runtime that does not mount `Mount.image_sub_path` (containerd 2.1.9, and
/// 1.6, which mounts no image volume at all) a subPath of an image volume is rejected instead of
/// the whole image being mounted. Nothing is pulled and no sandbox is created. (The
/// `ImageVolume` gate is GA and locked on in v1.37: `false` is refused at start, as by the
/// kubelet.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_path_the_runtime_cannot_mount_is_refused() {
    let served = runtime().version().await.expect("CRI Version");
    let support = nodelet::podspec::image_volume::image_volume_support(
        &served.runtime_name,
        &served.runtime_version,
    );
    let runtime_name = format!("{} {}", served.runtime_name, served.runtime_version);

    let n = Nodelet::start("imgvol-subpath");
    n.write_manifest("sub.yaml", &static_pod("sub", ", subPath: data/sub"));
    let (reason, message) = wait_rejected(&n, "sub").await;
    let want = if support.volumes {
        assert!(
            !support.sub_path,
            "{runtime_name} mounts image subPaths: this test expects a runtime that does not"
        );
        format!("Pod was rejected: spec.containers[0].volumeMounts[0].subPath: Unsupported value: data/sub: the container runtime ({runtime_name}) does not mount a subPath of an image volume (the CRI's Mount.image_sub_path: containerd 2.2 or CRI-O 1.33 and newer), it would mount the whole image")
    } else {
        format!("Pod was rejected: spec.volumes[0].image: Unsupported value: registry.invalid/data:1: the container runtime ({runtime_name}) does not mount image volumes (the CRI's Mount.image: containerd 2.1 or CRI-O 1.31 and newer), it would start the containers without the volume")
    };
    assert_eq!(
        (reason.as_deref(), message.as_deref()),
        (Some("PodFieldNotSupported"), Some(want.as_str()))
    );
    let (sandboxes, _) = n.runtime_objects().await;
    assert!(
        sandboxes.is_empty(),
        "a rejected pod got a sandbox: {sandboxes:?}"
    );
}
