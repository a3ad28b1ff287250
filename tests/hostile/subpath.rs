//! subPath against a sibling that swaps the directory for a symlink to `/` (the
//! CVE-2017-1002101 / CVE-2021-25741 class). nodelet opens each subPath beneath its volume
//! without leaving it and hands the runtime a bind mount of what it opened, so however the race
//! falls, the victim gets a directory of the volume or a CreateContainerConfigError, never the
//! host's root.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;
use nodelet_testkit::pod::{container_status, restart_count};
use nodelet_testkit::tail;

/// How long the attacker races.
const RACE: Duration = Duration::from_secs(60);

/// Mount points whose path lies under `dir`, but for nodelet's rootDir `dir/root` itself
/// (bind-mounted onto itself with shared propagation, as the kubelet does; the test's
/// harness unmounts it at the end).
fn mounts_under(dir: &Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let root = dir.join("root");
    table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| Path::new(m).starts_with(dir) && Path::new(m) != root)
        .map(str::to_string)
        .collect()
}

fn manifest(marker: &str) -> String {
    // The attacker cycles `d` through: a directory, missing, a symlink to `/`, missing, and a
    // directory again, with fresh names so a directory nodelet creates in a gap cannot jam it.
    let attack = r#"cd /shared
mkdir -p d && touch d/inside
n=0
while :; do
  n=$((n+1))
  mv -T d h$n 2>/dev/null
  ln -s / d 2>/dev/null
  mv -T d l$n 2>/dev/null
  mv -T h$n d 2>/dev/null || rm -rf h$n
  rm -f l$n
done"#;
    // The victim looks for the host's marker through its subPath mount, writes down what it
    // saw, and exits at once, so it crash-loops for as long as the test runs.
    let victim = format!(
        r#"if [ -e /sub/tmp/{marker} ]; then r=HOST-ROOT; elif [ -e /sub/inside ]; then r=volume; else r=volume-new-dir; fi
echo "$r" >> /record/seen
exit 1"#
    );
    let quote = |s: &str| serde_json::to_string(s).expect("json string");
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: subpath-race
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 1
  volumes:
  - name: shared
    emptyDir: {{}}
  - name: record
    emptyDir: {{}}
  containers:
  - name: attacker
    image: {TESTBOX}
    imagePullPolicy: Never
    command: [\"/bin/sh\", \"-c\", {attack}]
    volumeMounts:
    - {{name: shared, mountPath: /shared}}
  - name: victim
    image: {TESTBOX}
    imagePullPolicy: Never
    command: [\"/bin/sh\", \"-c\", {victim}]
    volumeMounts:
    - {{name: shared, mountPath: /sub, subPath: d}}
    - {{name: record, mountPath: /record}}
",
        attack = quote(attack),
        victim = quote(&victim),
    )
}

/// Two containers share an emptyDir; the attacker swaps `d` for a symlink to `/` and back in
/// a tight loop for a minute while the victim, which mounts the emptyDir with `subPath: d`,
/// crash-loops (back-off capped at 1 s, so it starts dozens of times). The victim must never
/// see a file that exists only on the host; afterwards no bind mount is left anywhere under the
/// test's directories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_a_subpath_against_a_symlink_to_root_never_reaches_the_host() {
    let marker = format!(
        "nodelet-subpath-marker-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let host_marker = PathBuf::from("/tmp").join(&marker);
    std::fs::write(&host_marker, "only on the host").expect("write the host marker");
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _marker_guard = Remove(host_marker.clone());

    let n = Nodelet::start_with(
        "subpath_race",
        "featureGates: {KubeletCrashLoopBackOffMax: true}\n\
         crashLoopBackOff: {maxContainerRestartPeriod: 1s}\n",
    );
    let test_dir = std::fs::canonicalize(n.dir.path()).expect("test dir");
    n.write_manifest("race.yaml", &manifest(&marker));

    // The attacker runs: the race is on.
    let pod = n
        .wait_pod(
            "subpath-race",
            Duration::from_secs(120),
            "the attacker running",
            |p| {
                container_status(p, "attacker")
                    .and_then(|c| c.state.as_ref())
                    .is_some_and(|s| s.running.is_some())
            },
        )
        .await;
    let started = Instant::now();
    let uid = pod.metadata.uid.clone().expect("pod uid");
    let pod_dir = test_dir.join("root/pods").join(&uid);
    let seen = pod_dir.join("volumes/kubernetes.io~empty-dir/record/seen");

    // The positive sign: the victim really starts, again and again, while the race goes on.
    n.wait_pod(
        "subpath-race",
        Duration::from_secs(180),
        "the victim restarted at least 3 times",
        |p| restart_count(p, "victim") >= 3,
    )
    .await;
    if let Some(rest) = RACE.checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let last = n.pod("subpath-race").await.expect("pod listed");
    let restarts = restart_count(&last, "victim");
    let record = std::fs::read_to_string(&seen).expect("the victim's record");
    let lines: Vec<&str> = record.lines().collect();
    let log = n.logs();
    // Other outcomes of the race, none of which reaches the host: nodelet found `d` a symlink
    // (CreateContainerConfigError), or the attacker deleted the pinned directory before runc
    // mounted it (RunContainerError, "no such file or directory").
    let refused = log.matches("reason=CreateContainerConfigError").count();
    let deleted = log.matches("reason=RunContainerError").count();
    println!(
        "victim restarts: {restarts}; starts recorded: {}, {} of them in a directory nodelet \
         created; refused because d was a symlink: {refused}; pinned directory deleted before \
         the start: {deleted}",
        lines.len(),
        lines.iter().filter(|l| **l == "volume-new-dir").count(),
    );
    assert!(
        lines.len() >= 3,
        "the victim recorded only {} starts: {record}",
        lines.len()
    );
    assert!(
        lines
            .iter()
            .all(|l| *l == "volume" || *l == "volume-new-dir"),
        "the victim saw the host's root through its subPath: {record}"
    );
    // A bind mount lives only from just before CreateContainer until StartContainer returned:
    // after some twenty starts at most the one of a start under way is there.
    let pinned_now = mounts_under(&pod_dir.join("volume-subpaths"));
    assert!(
        pinned_now.len() <= 1,
        "subPath mounts pile up: {pinned_now:?}"
    );
    // The attacker is still at it (it never exits), so the race lasted the whole minute.
    assert_eq!(
        restart_count(&last, "attacker"),
        0,
        "the attacker restarted"
    );
    assert!(host_marker.exists());

    // Gone: the pod, its directory, and every bind mount nodelet made for it.
    n.remove_manifest("race.yaml");
    n.wait_gone("subpath-race", Duration::from_secs(120)).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while (pod_dir.exists() || !mounts_under(&test_dir).is_empty()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        mounts_under(&test_dir),
        Vec::<String>::new(),
        "mounts left under {}\n{}",
        test_dir.display(),
        tail(&n.logs(), 40)
    );
    assert!(
        !pod_dir.exists(),
        "{} was not removed\n{}",
        pod_dir.display(),
        tail(&n.logs(), 40)
    );
    assert_no_runtime_stalls(&n).await;
}
