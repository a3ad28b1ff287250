//! `hostUsers: false` on the real containerd: the pod runs in a user namespace of its own, and
//! the test checks what the host sees of it — the container's process has
//! `/proc/<pid>/uid_map` `0 <start> 65536` with `start` at or above 65536 and is owned on the
//! host by that non-root ID, while `id -u` inside says 0; it writes an emptyDir and reads a
//! downwardAPI file nodelet wrote; the range is kept in `<rootDir>/pods/<uid>/userns` and a
//! restart of nodelet keeps it (a pod added after the restart gets another one); a removed pod's
//! range is given again. On a runtime handler that does not declare user namespaces
//! (containerd 1.6 declares nothing; containerd 2.x only over a runc with ID-mapped mounts) the
//! pod is rejected at admission with `UserNamespacesNotSupported` and the kubelet's message. The
//! declaration itself is checked against the instance's containerd and runc, so neither branch
//! passes on the wrong runtime.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use nodelet::cri::{HousekeepingRuntime, StatsRuntime};
use nodelet_testkit::pod::container_status;

const T: Duration = Duration::from_secs(180);

const SCRIPT: &str = r#"echo "uid=$(id -u)"; echo "gid=$(id -g)"; echo written > /data/f; echo "write=$?"; echo "labels=$(cat /podinfo/labels | tr '\n' ' ')"; echo "done=1"; sleep 3600"#;

fn manifest(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{app: userns}}\nspec:\n  hostUsers: false\n  terminationGracePeriodSeconds: 2\n\
         \x20 volumes:\n  - name: data\n    emptyDir: {{}}\n  - name: podinfo\n    downwardAPI:\n      items:\n      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}\n\
         \x20 containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {SCRIPT:?}]\n\
         \x20   volumeMounts:\n    - {{name: data, mountPath: /data}}\n    - {{name: podinfo, mountPath: /podinfo}}\n"
    )
}

/// Whether the node's runc offers ID-mapped mounts (`runc features`:
/// `linux.mountExtensions.idmap.enabled`), which containerd 2.x needs to declare user namespaces.
fn runc_idmap() -> bool {
    let out = std::process::Command::new("runc")
        .arg("features")
        .output()
        .expect("runc features");
    let features: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    features["linux"]["mountExtensions"]["idmap"]["enabled"] == serde_json::Value::Bool(true)
}

fn running(p: &Pod) -> bool {
    container_status(p, "main")
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// `key=value` lines the container printed, once it printed `done=1`.
async fn report(n: &Nodelet, p: &Pod) -> std::collections::BTreeMap<String, String> {
    let m = &p.metadata;
    let file = n
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
            n.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The host PID of the pod's container, from containerd's verbose status.
async fn host_pid(p: &Pod) -> (String, u32) {
    let id = container_status(p, "main")
        .and_then(|c| c.container_id.as_deref())
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("container id")
        .to_string();
    let info = runtime().container_info(&id).await.expect("verbose status");
    let info: serde_json::Value =
        serde_json::from_str(info.get("info").expect("containerd's info")).unwrap();
    let pid = info["pid"].as_u64().expect("pid") as u32;
    (id, pid)
}

/// `/proc/<pid>/{uid,gid}_map` as (container, host, length) triples.
fn id_map(pid: u32, which: &str) -> Vec<(u64, u64, u64)> {
    std::fs::read_to_string(format!("/proc/{pid}/{which}"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/{which}: {e}"))
        .lines()
        .map(|l| {
            let v: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
            (v[0], v[1], v[2])
        })
        .collect()
}

fn pod_dir(n: &Nodelet, p: &Pod) -> PathBuf {
    n.dir
        .path()
        .join("root/pods")
        .join(p.metadata.uid.as_deref().unwrap())
}

/// The range in the pod's mapping file (the kubelet's JSON).
fn file_range(n: &Nodelet, p: &Pod) -> u64 {
    let text = std::fs::read_to_string(pod_dir(n, p).join("userns")).expect("mapping file");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["uidMappings"], v["gidMappings"], "{text}");
    assert_eq!(v["uidMappings"][0]["containerId"], 0, "{text}");
    assert_eq!(v["uidMappings"][0]["length"], 65536, "{text}");
    v["uidMappings"][0]["hostId"].as_u64().unwrap()
}

/// Checks a running pod from the host and from inside; returns its range's first host ID.
async fn check_pod(n: &Nodelet, name: &str) -> (u64, String) {
    let p = n.wait_pod(name, T, "its container running", running).await;
    let r = report(n, &p).await;
    let (id, pid) = host_pid(&p).await;
    let uid_map = id_map(pid, "uid_map");
    assert_eq!(uid_map.len(), 1, "{name}: uid_map {uid_map:?}");
    let (inside, start, length) = uid_map[0];
    assert_eq!((inside, length), (0, 65536), "{name}: uid_map {uid_map:?}");
    assert!(start >= 65536, "{name}: uid_map {uid_map:?}");
    assert_eq!(id_map(pid, "gid_map"), uid_map, "{name}: gid_map");
    // Root inside, the range's first ID outside.
    let meta = std::fs::metadata(format!("/proc/{pid}")).unwrap();
    assert_eq!(
        (u64::from(meta.uid()), u64::from(meta.gid())),
        (start, start),
        "{name}: host owner of the process"
    );
    assert_eq!((r["uid"].as_str(), r["gid"].as_str()), ("0", "0"), "{r:?}");
    // The emptyDir is writable by root inside; the file lands in the pod's directory.
    assert_eq!(r["write"], "0", "{r:?}");
    let f = pod_dir(n, &p).join("volumes/kubernetes.io~empty-dir/data/f");
    assert_eq!(
        std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display())),
        Ok("written\n".to_string())
    );
    // nodelet's downwardAPI file (the atomic writer configMap and secret volumes share).
    assert_eq!(r["labels"], "app=\"userns\"", "{r:?}");
    assert_eq!(file_range(n, &p), start, "{name}: the mapping file");
    (start, id)
}

/// The Warning event of the rejection, as `nodelet events` lists it.
fn assert_rejection_event(n: &Nodelet) {
    let (ok, out, err) = n.cli(&["events", "--server", &n.base_url()]);
    assert!(ok, "nodelet events: {err}");
    let line = out
        .lines()
        .find(|l| l.contains("UserNamespacesNotSupported"))
        .unwrap_or_else(|| panic!("no UserNamespacesNotSupported event:\n{out}"));
    assert!(line.contains("Warning"), "{line}");
    assert!(line.to_lowercase().contains("hostusers"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_users_false_runs_in_a_user_namespace_of_its_own() {
    let rt = runtime();
    let declared = rt.runtime_feature_set().await.expect("CRI Status");
    let supported = declared.user_namespaces("");
    let version = std::env::var("NODELET_TEST_CONTAINERD_VERSION")
        .expect("NODELET_TEST_CONTAINERD_VERSION (scripts/containerd.sh env)");
    let idmap = runc_idmap();
    assert_eq!(
        supported,
        !version.starts_with("1.") && idmap,
        "containerd {version} (runc ID-mapped mounts: {idmap}) declares user namespaces {supported}: {:?}",
        declared.handlers()
    );

    let mut n = Nodelet::start("userns");
    n.write_manifest("own.yaml", &manifest("own"));
    if !supported {
        let pod = n
            .wait_pod("own", T, "rejected at admission", |p| {
                p.status
                    .as_ref()
                    .is_some_and(|s| s.phase.as_deref() == Some("Failed"))
            })
            .await;
        let status = pod.status.unwrap_or_default();
        assert_eq!(
            (status.reason.as_deref(), status.message.as_deref()),
            (
                Some("UserNamespacesNotSupported"),
                Some("Pod was rejected: can't set `spec.hostUsers: false`, runtime does not support user namespaces")
            )
        );
        let (sandboxes, _) = n.runtime_objects().await;
        assert!(
            sandboxes.is_empty(),
            "a rejected pod got a sandbox: {sandboxes:?}"
        );
        assert_rejection_event(&n);
        return;
    }

    let (first, container) = check_pod(&n, "own").await;

    // A restart keeps the range: the running container is left as it is, and a pod added
    // afterwards gets another range.
    n.restart();
    n.write_manifest("second.yaml", &manifest("second"));
    let (second, _) = check_pod(&n, "second").await;
    assert_ne!(
        first, second,
        "the restarted nodelet gave the first pod's range again"
    );
    let p = n.wait_pod("own", T, "still running", running).await;
    assert_eq!(
        host_pid(&p).await.0,
        container,
        "the first pod's container was replaced"
    );
    assert_eq!(file_range(&n, &p), first);

    // A removed pod's range is free again: the lowest slot goes to the next pod.
    let own_dir = pod_dir(&n, &p);
    n.remove_manifest("own.yaml");
    n.wait_gone("own", T).await;
    let deadline = Instant::now() + T;
    while own_dir.exists() {
        assert!(Instant::now() < deadline, "{} stays", own_dir.display());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    n.write_manifest("third.yaml", &manifest("third"));
    let (third, _) = check_pod(&n, "third").await;
    assert_eq!(
        third,
        first.min(second),
        "the freed lowest range goes to the next pod"
    );
}
