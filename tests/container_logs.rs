//! Container logs on a real containerd: nodelet runs a static pod, containerd writes the CRI log
//! files, and the `logs` module reads them through the CRI (`RemoteRuntime`) as the
//! `/containerLogs` handler will.

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use nodelet::cri::Runtime;
use nodelet::logs::{find_container_log, stream_logs, ContainerLog, LogOptions};

use common::*;
use nodelet_testkit::pod::{container_status, restart_count};

const T: Duration = Duration::from_secs(90);

fn options(query: &str) -> LogOptions {
    LogOptions::from_query(query, jiff::Timestamp::now()).expect("valid query")
}

/// The whole (non-follow) output as text.
async fn read(runtime: Arc<dyn Runtime>, log: ContainerLog, query: &str) -> String {
    let mut out = Vec::new();
    let mut s = Box::pin(stream_logs(runtime, log, options(query)));
    while let Some(chunk) = tokio::time::timeout(T, s.next())
        .await
        .expect("log read hangs")
    {
        out.extend_from_slice(&chunk.expect("log chunk"));
    }
    String::from_utf8(out).expect("utf-8 log")
}

/// Reads chunks until `want` appears in the output; fails with what arrived after `T`.
async fn read_until<S>(s: &mut S, want: &str) -> String
where
    S: Stream<Item = std::io::Result<bytes::Bytes>> + Unpin,
{
    let mut got = String::new();
    let deadline = tokio::time::Instant::now() + T;
    while !got.contains(want) {
        match tokio::time::timeout_at(deadline, s.next()).await {
            Ok(Some(chunk)) => got.push_str(&String::from_utf8_lossy(&chunk.expect("chunk"))),
            Ok(None) => panic!("stream ended before {want:?}; got {got:?}"),
            Err(_) => panic!("no {want:?} within {T:?}; got {got:?}"),
        }
    }
    got
}

fn is_fixed_rfc3339_nano(s: &str) -> bool {
    // 2026-01-02T03:04:05.123456789Z or ...+01:00
    let b = s.as_bytes();
    b.len() >= 30
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[20..29].iter().all(u8::is_ascii_digit)
        && (s[29..] == *"Z" || s[29..].len() == 6)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_running_restarted_and_followed_containers() {
    let n = Nodelet::start("container-logs");
    n.write_manifest(
        "logs.yaml",
        &testbox_pod(
            "logs",
            "Always",
            &[
                ("web", &["serve", "--http", "8080"]),
                ("crash", &["exit", "--code", "3", "--after", "1s"]),
            ],
        ),
    );
    let pod = n
        .wait_pod("logs", T, "web running and crash restarted once", |p| {
            container_status(p, "web")
                .is_some_and(|s| s.state.as_ref().is_some_and(|st| st.running.is_some()))
                && restart_count(p, "crash") >= 1
        })
        .await;
    let uid = pod.metadata.uid.clone().expect("pod UID");
    let name = pod.metadata.name.clone().expect("pod name");
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("pod IP");
    let runtime: Arc<dyn Runtime> = runtime();

    // Full read of the running container.
    let web = find_container_log(runtime.as_ref(), &uid, &name, "web", false)
        .await
        .expect("web log");
    assert!(web.path.ends_with("web/0.log"), "{}", web.path.display());
    let full = read(runtime.clone(), web.clone(), "").await;
    assert!(full.starts_with("testbox: started serve (pid "), "{full:?}");
    assert!(
        full.contains("\ntestbox: http listening on 0.0.0.0:8080\n"),
        "{full:?}"
    );

    // tailLines: only the last line.
    let last = read(runtime.clone(), web.clone(), "tailLines=1").await;
    assert_eq!(last, full.lines().last().map(|l| format!("{l}\n")).unwrap());

    // timestamps: every line carries its time, in the kubelet's fixed nanosecond format.
    let stamped = read(runtime.clone(), web.clone(), "timestamps=true").await;
    let lines: Vec<&str> = stamped.lines().collect();
    assert_eq!(lines.len(), full.lines().count(), "{stamped:?}");
    for (stamped_line, plain) in lines.iter().zip(full.lines()) {
        let (time, rest) = stamped_line.split_once(' ').expect("timestamp prefix");
        assert!(is_fixed_rfc3339_nano(time), "{time:?}");
        assert_eq!(rest, plain);
    }

    // limitBytes: cut exactly.
    assert_eq!(
        read(runtime.clone(), web.clone(), "limitBytes=8").await,
        "testbox:"
    );

    // previous: there is no terminated instance of web; crash has one.
    let err = find_container_log(runtime.as_ref(), &uid, &name, "web", true)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("previous terminated container \"web\" in pod \"{name}\" not found")
    );
    let previous = find_container_log(runtime.as_ref(), &uid, &name, "crash", true)
        .await
        .expect("previous crash log");
    let current = find_container_log(runtime.as_ref(), &uid, &name, "crash", false)
        .await
        .expect("current crash log");
    // `crash/<restartCount>.log`: the previous attempt's file, not the current one.
    assert_eq!(previous.path.parent(), current.path.parent());
    assert_ne!(previous.container_id, current.container_id);
    assert_ne!(previous.path, current.path);
    let previous_text = read(runtime.clone(), previous, "").await;
    assert!(
        previous_text.starts_with("testbox: started exit (pid ")
            && previous_text.ends_with("\ntestbox: exiting with 3\n"),
        "{previous_text:?}"
    );

    // follow: a request to the server is logged and arrives while the stream is open.
    let mut follow = Box::pin(stream_logs(
        runtime.clone(),
        web.clone(),
        options("follow=true&tailLines=0"),
    ));
    // The stream positions itself at the end of the file in a task of its own; a line written
    // before that is (rightly) not followed, so the request is repeated until one arrives.
    let url = format!("http://{ip}:8080/healthz");
    let line = "testbox: http GET /healthz -> 200";
    let mut got = String::new();
    let deadline = tokio::time::Instant::now() + T;
    while !got.contains(line) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {line:?} followed within {T:?}; got {got:?}"
        );
        let status = reqwest::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .status();
        assert_eq!(status, 200);
        while let Ok(Some(chunk)) =
            tokio::time::timeout(Duration::from_millis(500), follow.next()).await
        {
            got.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
        }
    }
    assert!(
        got.lines().all(|l| l == line),
        "only the requests are followed: {got:?}"
    );
    drop(follow);

    // follow ends when the container stops: the current crash instance exits after 1 s (or
    // already has); the stream ends after its last line.
    let current = find_container_log(runtime.as_ref(), &uid, &name, "crash", false)
        .await
        .expect("current crash log");
    let mut follow = Box::pin(stream_logs(runtime.clone(), current, options("follow=1")));
    read_until(&mut follow, "testbox: exiting with 3\n").await;
    let end = tokio::time::timeout(T, follow.next())
        .await
        .expect("follow did not end after the container exited");
    assert!(end.is_none(), "unexpected chunk after the exit: {end:?}");
}

/// The kubelet's `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` links (here under
/// the test's `containerLogLinksDir`), which log shippers read: one per started container,
/// leading to its current log file; when the pod is gone and its logs with it, container GC
/// removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_log_links_for_log_shippers() {
    let n = Nodelet::start("log-links");
    n.write_manifest(
        "shipped.yaml",
        &testbox_pod("shipped", "Always", &[("talk", &["serve"])]),
    );
    let pod = n
        .wait_pod("shipped", T, "running", nodelet_testkit::pod::all_running)
        .await;
    let id = container_status(&pod, "talk")
        .and_then(|c| c.container_id.clone())
        .expect("container id")
        .trim_start_matches("containerd://")
        .to_string();
    let links = n.dir.path().join("containers");
    let link = links.join(format!("{}_default_talk-{id}.log", n.pod_name("shipped")));
    let deadline = std::time::Instant::now() + T;
    let content = loop {
        match std::fs::read_to_string(&link) {
            Ok(content) if content.contains("testbox: started serve") => break content,
            other => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{}: {other:?}; the directory holds {:?}",
                    link.display(),
                    std::fs::read_dir(&links)
                        .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(
        content.contains(" F testbox: started serve"),
        "CRI log format: {content}"
    );
    let target = std::fs::read_link(&link).expect("a symlink");
    assert!(
        target.ends_with(format!("talk/{}.log", restart_count(&pod, "talk"))),
        "{}",
        target.display()
    );

    n.remove_manifest("shipped.yaml");
    n.wait_gone("shipped", T).await;
    // Container GC runs every minute.
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    while std::fs::symlink_metadata(&link).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} outlived its pod\n{}",
            link.display(),
            nodelet_testkit::tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
