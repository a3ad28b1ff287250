//! API volumes (configMap, secret, downwardAPI, projected): a container tries to re-point the
//! atomic writer's `..data` link of its volume at a host directory, so that nodelet, rewriting
//! the volume on every sync, would follow it and delete the directory (the CVE-2017-1002102
//! class). The volume is mounted read-only whatever the manifest says, so the container gets
//! EROFS; and the host directory survives many syncs at a one-second `syncFrequency`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;
use nodelet_testkit::pod::all_running;
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(120);

/// Starts nodelet with `syncFrequency: 1s` (the harness writes `10s`; the field may appear
/// only once, so the line is replaced before the first start).
fn start_fast_sync(test: &str) -> Nodelet {
    let mut n = Nodelet::prepare_with(test, "");
    let config = std::fs::read_to_string(&n.config).expect("read config");
    assert!(config.contains("syncFrequency: 10s\n"), "{config}");
    std::fs::write(
        &n.config,
        config.replace("syncFrequency: 10s\n", "syncFrequency: 1s\n"),
    )
    .expect("write config");
    n.launch();
    n
}

/// The pod directory of the static pod `name` (its uid from the local API).
async fn pod_dir(n: &Nodelet, name: &str) -> PathBuf {
    let pod = n
        .pod(name)
        .await
        .unwrap_or_else(|| panic!("pod {name} listed"));
    let uid = pod.metadata.uid.expect("static pod uid");
    n.dir.path().join("root/pods").join(uid)
}

/// Everything below `dir` (not following symlinks): path, mode and content.
fn snapshot(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let meta = std::fs::symlink_metadata(&d).expect("host directory still there");
        out.push((d.clone(), meta.mode(), Vec::new()));
        for entry in std::fs::read_dir(&d).expect("list host directory") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            if meta.is_dir() {
                stack.push(path);
            } else {
                let data = std::fs::read(&path).expect("read host file");
                out.push((path, meta.mode(), data));
            }
        }
    }
    out.sort();
    out
}

/// A static pod whose container keeps trying, as root, to point `..data` of its downwardAPI
/// volume (mounted with `readOnly: false`) at a host directory, to remove the link, and to
/// write through a subPath mount of the same volume; it records each attempt's exit codes
/// and error text in an emptyDir the test reads from the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_cannot_repoint_data_link_of_an_api_volume() {
    let host = tempfile::Builder::new()
        .prefix("nodelet-hostile-target-")
        .tempdir()
        .expect("host tempdir");
    std::fs::write(host.path().join("precious"), "do not delete").unwrap();
    std::fs::create_dir(host.path().join("sub")).unwrap();
    std::fs::write(host.path().join("sub/more"), "nor this").unwrap();
    let before = snapshot(host.path());

    let n = start_fast_sync("api-volume-data-link");
    // Each attack step, its exit code and error text, one line each; `ln -sfn` is the
    // one-liner of the issue (busybox unlinks, which fails, then reports the name exists);
    // a new link, a removal and a rename over `..data` are its primitives.
    let script = format!(
        r#"try() {{ tag=$1; shift; "$@" 2>/out/err; echo "$tag rc=$? $(cat /out/err)" >>/out/result.tmp; }}
i=0
while true; do
  i=$((i+1))
  echo "attempt=$i" >/out/result.tmp
  try ln-sfn ln -sfn {host} /info/..data
  try ln-new ln -s {host} /info/..data_new
  try rm rm -f /info/..data
  try mv mv -f /info/labels /info/..data
  try sub sh -c 'echo pwned >/labels'
  mv /out/result.tmp /out/result
  sleep 0.5
done"#,
        host = host.path().display()
    );
    let script_yaml = serde_json::to_string(&script).unwrap();
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: repoint
  labels:
    app: hostile
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: info
    downwardAPI:
      items:
      - path: labels
        fieldRef:
          fieldPath: metadata.labels
  - name: out
    emptyDir: {{}}
  containers:
  - name: attacker
    image: {TESTBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", {script_yaml}]
    securityContext:
      runAsUser: 0
    volumeMounts:
    - name: info
      mountPath: /info
      readOnly: false
    - name: info
      mountPath: /labels
      subPath: labels
      readOnly: false
    - name: out
      mountPath: /out
"#
    );
    n.write_manifest("repoint.yaml", &manifest);
    n.wait_pod("repoint", T, "running", all_running).await;
    let dir = pod_dir(&n, "repoint").await;
    let result = dir.join("volumes/kubernetes.io~empty-dir/out/result");
    let volume = dir.join("volumes/kubernetes.io~downward-api/info");

    // The positive sign: the container ran its attempts and reported them.
    let deadline = Instant::now() + T;
    let report = loop {
        let text = std::fs::read_to_string(&result).unwrap_or_default();
        let attempts: u64 = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("attempt="))
            .and_then(|l| l.split(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if attempts >= 3 {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the attacker reported no attempts: {text:?}\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let line = |tag: &str| -> String {
        report
            .lines()
            .find(|l| l.starts_with(&format!("{tag} rc=")))
            .unwrap_or_else(|| panic!("no {tag} line: {report}"))
            .to_string()
    };
    assert!(!line("ln-sfn").starts_with("ln-sfn rc=0"), "{report}");
    for tag in ["ln-new", "rm", "mv", "sub"] {
        let l = line(tag);
        assert!(
            !l.starts_with(&format!("{tag} rc=0")) && l.contains("Read-only file system"),
            "{tag} must fail with EROFS: {report}"
        );
    }

    // Many syncs at a one-second syncFrequency while the attacker keeps trying.
    let metric = "nodelet_pod_worker_duration_seconds_count";
    let syncs_before = n.metric(metric).await.unwrap_or(0.0);
    for _ in 0..8 {
        n.wait_metric_advance(metric, T).await;
    }
    assert_eq!(
        snapshot(host.path()),
        before,
        "the host directory changed\n{}",
        tail(&n.logs(), 40)
    );
    // The volume is intact: `..data` names one data directory, and the file is the labels.
    let data = std::fs::read_link(volume.join("..data")).expect("..data is a link");
    let data = data.to_string_lossy();
    assert!(
        data.starts_with("..") && !data.contains('/'),
        "..data -> {data}"
    );
    assert_eq!(
        std::fs::read_to_string(volume.join("labels")).unwrap(),
        "app=\"hostile\""
    );
    let still = std::fs::read_to_string(&result).unwrap_or_default();
    eprintln!(
        "pod syncs while attacked: {}; attacker's last report: {}",
        n.metric(metric).await.unwrap_or(0.0) - syncs_before,
        still.lines().next().unwrap_or_default()
    );
    assert!(
        still.starts_with("attempt=") && !still.contains(" rc=0"),
        "{still}"
    );
    n.remove_manifest("repoint.yaml");
    n.wait_gone("repoint", T).await;
    assert_eq!(snapshot(host.path()), before);
    assert_no_runtime_stalls(&n).await;
}
