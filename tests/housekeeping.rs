//! Node housekeeping on a real containerd: image garbage collection, container garbage
//! collection and container log rotation.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use nodelet::cri::{ImageService, Runtime};
use nodelet::gc::images::{ImageGc, ImageGcPolicy};
use nodelet::gc::CriGc;
use nodelet::logs::{find_container_log, stream_logs, LogOptions};

use common::*;
use nodelet_testkit::pod::{all_running, restart_count};
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(120);

async fn wait_metric(n: &Nodelet, name: &str, at_least: f64) {
    let deadline = std::time::Instant::now() + T;
    loop {
        if n.metric(name).await.is_some_and(|v| v >= at_least) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} below {at_least} after {T:?}\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn containerd_sock() -> String {
    cri_endpoint().trim_start_matches("unix://").to_string()
}

/// The `ctr` of the test containerd's own version (`NODELET_TEST_CTR`, from
/// `scripts/containerd.sh env`; containerd 2.x's is not the system's), else the one on PATH.
fn ctr() -> String {
    std::env::var("NODELET_TEST_CTR").unwrap_or_else(|_| "ctr".to_string())
}

/// Builds a one-file OCI image with the project's image builder and imports it with `ctr`.
fn import_image(dir: &Path, name: &str) {
    let content = dir.join(format!("{}.txt", name.replace(['/', ':'], "_")));
    std::fs::write(
        &content,
        format!("image {name} of test process {}\n", std::process::id()),
    )
    .unwrap();
    let tar = content.with_extension("tar");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = Command::new("python3")
        .arg(repo.join("images/build-image.py"))
        .args(["--name", name, "--out"])
        .arg(&tar)
        .arg("--file")
        .arg(format!("/data={}:0644", content.display()))
        .output()
        .expect("python3 images/build-image.py");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let imported = Command::new(ctr())
        .args(["-a", &containerd_sock(), "-n", "k8s.io", "images", "import"])
        .arg(&tar)
        .output()
        .expect("ctr images import");
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
}

async fn image_names(images: &dyn ImageService) -> HashSet<String> {
    images
        .list_images()
        .await
        .expect("list images")
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .collect()
}

/// Image GC on containerd, with thresholds that the disk's current usage is above (high 1 %,
/// low 0 %): it removes every unused image and fails to free the rest of the disk
/// (`FreeDiskSpaceFailed`), while the images of running containers and the sandbox image stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_gc_removes_unused_images_and_keeps_used_and_pause() {
    // A running container keeps testbox in use (other tests of this binary run pods too).
    let n = Nodelet::start("image-gc");
    n.write_manifest(
        "web.yaml",
        &testbox_pod("web", "Always", &[("web", &["sleep"])]),
    );
    n.wait_pod("web", T, "running", all_running).await;
    let pid = std::process::id();
    let old = format!("localhost/gc-old:{pid}");
    let new = format!("localhost/gc-new:{pid}");
    import_image(n.dir.path(), &old);
    import_image(n.dir.path(), &new);
    let rt = runtime();
    // containerd 2.x's CRI learns of an image `ctr` imported from containerd's image event, a
    // moment after the import returned (1.6 listed it at once): wait for both names.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let before = loop {
        let names = image_names(rt.as_ref()).await;
        if (names.contains(&old) && names.contains(&new)) || tokio::time::Instant::now() > deadline
        {
            break names;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(before.contains(&old) && before.contains(&new), "{before:?}");

    // The nodelet's own image GC, through the same CRI client type the binary uses.
    let cri = Arc::new(CriGc {
        runtime: rt.clone(),
        images: rt.clone(),
        stats: Some(rt.clone()),
        housekeeping: Some(rt.clone()),
        node_name: n.node.clone(),
    });
    let events =
        nodelet::events::EventRecorder::new(nodelet::clock::Clock::system(), "kubelet", &n.node);
    let gc = ImageGc::new(
        cri,
        ImageGcPolicy {
            high_threshold_percent: 1,
            low_threshold_percent: 0,
            min_age: Duration::ZERO,
            max_age: Duration::ZERO,
        },
        events.clone(),
        n.node.clone(),
    );
    let err = gc
        .garbage_collect()
        .await
        .expect_err("the whole disk cannot be freed");
    let after = image_names(rt.as_ref()).await;
    assert!(!after.contains(&old), "{old} still there: {after:?}");
    assert!(!after.contains(&new), "{new} still there: {after:?}");
    assert!(
        after.contains(TESTBOX),
        "the running container's image went: {after:?}"
    );
    let pause = std::env::var("NODELET_TEST_PAUSE_IMAGE").unwrap_or("localhost/pause:1".into());
    assert!(after.contains(&pause), "the sandbox image went: {after:?}");
    let message = err.to_string();
    assert!(
        message
            .starts_with("Failed to garbage collect required amount of images. Attempted to free "),
        "{message}"
    );
    let reasons: Vec<String> = events
        .events()
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert!(
        reasons.contains(&"FreeDiskSpaceFailed".to_string()),
        "{reasons:?}"
    );
    // The pod still runs.
    n.wait_pod("web", T, "running", all_running).await;
}

/// Dead containers beyond the policy go, and nothing of a deleted pod stays on disk, also when
/// the pod went away while nodelet was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_gc_keeps_the_policy_and_leaves_nothing_of_gone_pods() {
    let mut n = Nodelet::start("container-gc");
    n.write_manifest(
        "crash.yaml",
        &testbox_pod(
            "crash",
            "Always",
            &[("crash", &["exit", "--code", "1"]), ("web", &["sleep"])],
        ),
    );
    let pod = n
        .wait_pod("crash", T, "restarted 3 times", |p| {
            restart_count(p, "crash") >= 3
        })
        .await;
    let uid = pod.metadata.uid.clone().unwrap();
    // A run after the extra instances were gone (they go at the pod's next sync, and their
    // logs at the next GC run after that; a run is every minute).
    let runs = n
        .metric("nodelet_container_gc_runs_total")
        .await
        .unwrap_or(0.0);
    wait_metric(&n, "nodelet_container_gc_runs_total", runs + 1.0).await;
    // The newest instance (state) and one dead one (lastState): no more.
    let (_, containers) = n.runtime_objects().await;
    let crash: Vec<_> = containers
        .iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == "crash"))
        .collect();
    assert!(
        !crash.is_empty() && crash.len() <= 2,
        "{} crash instances",
        crash.len()
    );
    let logs_dir = n.dir.path().join("logs");
    let pods_dir = n.dir.path().join("root/pods");
    let crash_logs = std::fs::read_dir(&logs_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(&uid))
        .expect("the pod's log directory");
    let files = std::fs::read_dir(crash_logs.join("crash")).unwrap().count();
    assert!(
        files <= 2,
        "{files} log files of crash: the removed instances' logs stay"
    );

    // Gone while nodelet was down: the manifest, and (as after a crash half-way through a
    // removal) the directories of a pod the runtime no longer has.
    n.kill9();
    n.remove_manifest("crash.yaml");
    let ghost = "00000000-0000-4000-8000-00000000dead";
    let ghost_logs = logs_dir.join(format!("default_ghost_{ghost}"));
    std::fs::create_dir_all(ghost_logs.join("c")).unwrap();
    std::fs::write(ghost_logs.join("c/0.log"), "old\n").unwrap();
    std::fs::create_dir_all(pods_dir.join(ghost).join("volumes")).unwrap();
    let runs_before = 0.0;
    n.restart();
    wait_metric(&n, "nodelet_container_gc_runs_total", runs_before + 1.0).await;
    let deadline = std::time::Instant::now() + T;
    loop {
        let (sandboxes, containers) = n.runtime_objects().await;
        let left = [
            !sandboxes.is_empty(),
            !containers.is_empty(),
            crash_logs.exists(),
            pods_dir.join(&uid).exists(),
            ghost_logs.exists(),
            pods_dir.join(ghost).exists(),
        ];
        if left.iter().all(|l| !l) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left on the node (sandboxes, containers, logs, pod dir, ghost logs, ghost dir): {left:?}\n{}",
            tail(&n.logs(), 80)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn file_sizes(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut v: Vec<(PathBuf, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| (e.path(), e.metadata().map(|m| m.len()).unwrap_or(0)))
        .collect();
    v.sort();
    v
}

/// 50 MiB of log lines with `containerLogMaxSize: 1Mi` and `containerLogMaxFiles: 3`: at most
/// three files, none far above 1 MiB, and `tailLines=5` gives the last five lines written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_rotation_keeps_max_files_and_tail_reads_the_last_lines() {
    let n = Nodelet::start_with(
        "log-rotation",
        "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
    );
    // 51200 lines of 1 KiB (50 MiB) at about 340 KiB/s, so that a 3 s check finds a file
    // little above 1 MiB; then a short numbered line every 200 ms.
    let script = r#"L=$(head -c 1000 /dev/zero | tr '\0' x); i=0; while [ $i -lt 51200 ]; do j=0; while [ $j -lt 256 ]; do echo "$i $L"; i=$((i+1)); j=$((j+1)); done; usleep 750000; done; k=0; while true; do echo "tick $k"; k=$((k+1)); usleep 200000; done"#;
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: chatty\nspec:\n  containers:\n  - name: chatty\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    command: [\"/bin/sh\", \"-c\", {script:?}]\n"
    );
    n.write_manifest("chatty.yaml", &manifest);
    let pod = n.wait_pod("chatty", T, "running", all_running).await;
    let uid = pod.metadata.uid.clone().unwrap();
    let name = pod.metadata.name.clone().unwrap();
    let rt: Arc<dyn Runtime> = runtime();
    let log = find_container_log(rt.as_ref(), &uid, &name, "chatty", false)
        .await
        .expect("log of chatty");
    let dir = log.path.parent().unwrap().to_path_buf();

    // Until the writer is through its 50 MiB: the directory never holds more than 3 files, and
    // no file is far above 1 MiB.
    let mut max_seen = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    loop {
        let files = file_sizes(&dir);
        let names: Vec<String> = files
            .iter()
            .map(|(p, s)| format!("{} {s}", p.display()))
            .collect();
        assert!(files.len() <= 3, "more than 3 log files: {names:?}");
        for (path, size) in &files {
            max_seen = max_seen.max(*size);
            assert!(
                *size < 3 << 20,
                "{} is {size} bytes: {names:?}",
                path.display()
            );
        }
        let current = std::fs::read_to_string(&log.path).unwrap_or_default();
        if current.contains(" stdout F tick ") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the writer did not finish: {names:?}\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let rotations = n
        .metric("nodelet_container_log_rotations_total")
        .await
        .unwrap_or(0.0);
    assert!(rotations >= 20.0, "only {rotations} rotations for 50 MiB");
    // A rotated file is compressed at a later check, through `<file>.gz.tmp` after the oldest
    // `.gz` went (the kubelet's order: remove excess, compress, rotate); a loaded machine once
    // showed that moment as the writer finished, so the `.gz` is awaited, the limit kept.
    let deadline = std::time::Instant::now() + T;
    loop {
        let files = file_sizes(&dir);
        assert!(files.len() <= 3, "more than 3 log files: {files:?}");
        if files
            .iter()
            .any(|(p, _)| p.to_string_lossy().ends_with(".gz"))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no compressed rotated file: {files:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Wait for five tick lines in the current file, then tail.
    let deadline = std::time::Instant::now() + T;
    loop {
        let current = std::fs::read_to_string(&log.path).unwrap_or_default();
        if current.matches(" stdout F tick ").count() >= 6 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no tick lines in {}",
            log.path.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let options = LogOptions::from_query("tailLines=5", jiff::Timestamp::now()).unwrap();
    let mut out = Vec::new();
    let mut s = Box::pin(stream_logs(rt.clone(), log.clone(), options));
    while let Some(chunk) = tokio::time::timeout(T, s.next())
        .await
        .expect("log read hangs")
    {
        out.extend_from_slice(&chunk.expect("chunk"));
    }
    let text = String::from_utf8(out).unwrap();
    let ticks: Vec<u64> = text
        .lines()
        .map(|l| {
            l.strip_prefix("tick ")
                .and_then(|k| k.parse().ok())
                .unwrap_or_else(|| panic!("not a tick line: {l:?} in {text:?}"))
        })
        .collect();
    assert_eq!(ticks.len(), 5, "{text:?}");
    assert!(
        ticks.windows(2).all(|w| w[1] == w[0] + 1),
        "not consecutive: {ticks:?}"
    );
    // They are the newest lines: the current file's last tick is the last of them (give or
    // take the lines written since the read).
    let current = std::fs::read_to_string(&log.path).unwrap();
    let newest: u64 = current
        .lines()
        .rev()
        .find_map(|l| l.split(" stdout F tick ").nth(1)?.parse().ok())
        .unwrap();
    assert!(
        newest >= ticks[4] && newest - ticks[4] < 25,
        "tail {ticks:?}, newest {newest}"
    );
    eprintln!("largest log file seen: {max_seen} bytes; {rotations} rotations");
}
