//! Component tests: real files in temp dirs, the fake runtime for container state.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::*;
use crate::cri::fake::FakeRuntime;
use crate::cri::{api, labels, Runtime};

const UID: &str = "uid-1";

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn entry(second: u32, stream: &str, tag: &str, text: &str) -> String {
    format!("2026-01-01T00:00:{second:02}.5Z {stream} {tag} {text}\n")
}

/// A fake runtime with one sandbox of pod `UID` and the image `img`.
async fn fake() -> (Arc<FakeRuntime>, String) {
    let fake = Arc::new(FakeRuntime::default());
    fake.add_image("img");
    let sandbox = fake
        .run_pod_sandbox(
            api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: UID.into(),
                    attempt: 0,
                }),
                labels: [(labels::POD_UID.to_string(), UID.to_string())].into(),
                ..Default::default()
            },
            "",
        )
        .await
        .unwrap();
    (fake, sandbox)
}

/// Creates (and starts, when `start`) an instance of container `name` logging to `log`.
async fn add_container(
    fake: &FakeRuntime,
    sandbox: &str,
    name: &str,
    attempt: u32,
    log: &Path,
    start: bool,
) -> String {
    let id = fake
        .create_container(
            sandbox,
            api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: name.into(),
                    attempt,
                }),
                image: Some(api::ImageSpec {
                    image: "img".into(),
                    ..Default::default()
                }),
                labels: [
                    (labels::POD_UID.to_string(), UID.to_string()),
                    (labels::CONTAINER_NAME.to_string(), name.to_string()),
                ]
                .into(),
                log_path: log.display().to_string(),
                ..Default::default()
            },
            api::PodSandboxConfig::default(),
        )
        .await
        .unwrap();
    if start {
        fake.start_container(&id).await.unwrap();
    }
    id
}

fn log_of(id: &str, path: &Path) -> ContainerLog {
    ContainerLog {
        container_id: id.into(),
        path: path.to_path_buf(),
    }
}

async fn read_all(fake: Arc<FakeRuntime>, log: ContainerLog, options: LogOptions) -> String {
    let chunks: Vec<_> = stream_logs(fake, log, options).collect().await;
    let mut out = Vec::new();
    for c in chunks {
        out.extend_from_slice(&c.unwrap());
    }
    String::from_utf8(out).unwrap()
}

fn sample_file(dir: &Path) -> PathBuf {
    let path = dir.join("0.log");
    let text = [
        entry(1, "stdout", "F", "one"),
        entry(2, "stderr", "F", "two"),
        entry(3, "stdout", "P", "thr"),
        entry(4, "stdout", "F", "ee"),
        entry(5, "stdout", "F", "four"),
    ]
    .concat();
    append(&path, &text);
    path
}

#[tokio::test]
async fn reads_a_finished_log_with_each_option() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample_file(dir.path());
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, false).await;
    let since = |s: &str| Some(s.parse::<jiff::Timestamp>().unwrap());
    let cases: Vec<(&str, LogOptions, &str)> = vec![
        (
            "everything",
            LogOptions::default(),
            "one\ntwo\nthree\nfour\n",
        ),
        (
            "tail 2",
            LogOptions {
                tail_lines: Some(2),
                ..Default::default()
            },
            "three\nfour\n",
        ),
        (
            "tail 0",
            LogOptions {
                tail_lines: Some(0),
                ..Default::default()
            },
            "",
        ),
        (
            "tail 99",
            LogOptions {
                tail_lines: Some(99),
                ..Default::default()
            },
            "one\ntwo\nthree\nfour\n",
        ),
        (
            "timestamps",
            LogOptions {
                timestamps: true,
                tail_lines: Some(2),
                ..Default::default()
            },
            "2026-01-01T00:00:03.500000000Z three\n2026-01-01T00:00:05.500000000Z four\n",
        ),
        (
            "limit",
            LogOptions {
                limit_bytes: Some(10),
                ..Default::default()
            },
            "one\ntwo\nth",
        ),
        (
            "since",
            LogOptions {
                since: since("2026-01-01T00:00:02.5Z"),
                ..Default::default()
            },
            "two\nthree\nfour\n",
        ),
        (
            "stderr",
            LogOptions {
                stream: LogStream::Stderr,
                ..Default::default()
            },
            "two\n",
        ),
        // follow on an exited container: everything, then the end.
        (
            "follow exited",
            LogOptions {
                follow: true,
                ..Default::default()
            },
            "one\ntwo\nthree\nfour\n",
        ),
    ];
    for (name, options, want) in cases {
        let got = read_all(fake.clone(), log_of(&id, &path), options).await;
        assert_eq!(got, want, "{name}");
    }
}

#[tokio::test]
async fn unfinished_last_line_is_returned_without_follow() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    append(&path, &entry(1, "stdout", "F", "done"));
    append(&path, "2026-01-01T00:00:02Z stdout F half-writ");
    let (fake, _) = fake().await;
    let got = read_all(fake, log_of("x", &path), LogOptions::default()).await;
    assert_eq!(got, "done\nhalf-writ");
}

#[tokio::test]
async fn unparseable_lines_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    append(&path, &entry(1, "stdout", "F", "a"));
    append(&path, "not a log line\n");
    append(&path, &entry(2, "stdout", "F", "b"));
    let (fake, _) = fake().await;
    let got = read_all(fake, log_of("x", &path), LogOptions::default()).await;
    assert_eq!(got, "a\nb\n");
}

#[tokio::test]
async fn missing_file_is_the_first_item_and_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app").join("3.log");
    let (fake, _) = fake().await;
    let items: Vec<_> = stream_logs(fake, log_of("x", &path), LogOptions::default())
        .collect()
        .await;
    assert_eq!(items.len(), 1);
    let err = items[0].as_ref().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(err.to_string().contains("app/3.log"), "{err}");
}

#[tokio::test]
async fn symlinked_log_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample_file(dir.path());
    let link = dir.path().join("link.log");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let (fake, _) = fake().await;
    let got = read_all(
        fake,
        log_of("x", &link),
        LogOptions {
            tail_lines: Some(1),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(got, "four\n");
}

/// The next chunk, or `None` at the end; fails the test after 10 s instead of hanging.
async fn next_chunk<S: futures::Stream<Item = std::io::Result<bytes::Bytes>> + Unpin>(
    s: &mut S,
) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("no chunk within 10s")
        .map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap())
}

#[tokio::test]
async fn follow_streams_new_lines_until_the_container_exits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    append(&path, &entry(1, "stdout", "F", "old-1"));
    append(&path, &entry(2, "stdout", "F", "old-2"));
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, true).await;
    let options = LogOptions {
        follow: true,
        tail_lines: Some(1),
        ..Default::default()
    };
    let mut s = Box::pin(stream_logs(fake.clone(), log_of(&id, &path), options));
    assert_eq!(next_chunk(&mut s).await.as_deref(), Some("old-2\n"));

    append(&path, &entry(3, "stdout", "F", "new-1"));
    assert_eq!(next_chunk(&mut s).await.as_deref(), Some("new-1\n"));

    // A line written in two steps arrives once it is complete; pieces are joined.
    append(&path, "2026-01-01T00:00:04Z stdout P par");
    append(&path, "t\n");
    append(&path, &entry(5, "stdout", "F", "-joined"));
    assert_eq!(next_chunk(&mut s).await.as_deref(), Some("part-joined\n"));

    // Lines written just before the exit are still delivered, then the stream ends.
    append(&path, &entry(6, "stderr", "F", "last words"));
    fake.exit_container("app", 1);
    assert_eq!(next_chunk(&mut s).await.as_deref(), Some("last words\n"));
    assert_eq!(next_chunk(&mut s).await, None);
}

#[tokio::test]
async fn follow_ends_when_the_container_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample_file(dir.path());
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, true).await;
    let options = LogOptions {
        follow: true,
        tail_lines: Some(1),
        ..Default::default()
    };
    let mut s = Box::pin(stream_logs(fake.clone(), log_of(&id, &path), options));
    assert_eq!(next_chunk(&mut s).await.as_deref(), Some("four\n"));
    fake.stop_container(&id, Duration::ZERO).await.unwrap();
    fake.remove_container(&id).await.unwrap();
    assert_eq!(next_chunk(&mut s).await, None);
}

#[tokio::test]
async fn follow_switches_to_a_rotated_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    append(&path, &entry(1, "stdout", "F", "before"));
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, true).await;
    let options = LogOptions {
        follow: true,
        ..Default::default()
    };
    let mut s = Box::pin(stream_logs(fake.clone(), log_of(&id, &path), options));
    assert_eq!(next_chunk(&mut s).await.as_deref(), Some("before\n"));
    // Rotation as the kubelet's log manager does it: rename, then the runtime reopens.
    append(&path, &entry(2, "stdout", "F", "in the old file"));
    std::fs::rename(&path, dir.path().join("0.log.20260101-000002")).unwrap();
    append(&path, &entry(3, "stdout", "F", "in the new file"));
    let mut got = String::new();
    while got != "in the old file\nin the new file\n" {
        got.push_str(&next_chunk(&mut s).await.expect("stream ended early"));
    }
    fake.exit_container("app", 0);
    assert_eq!(next_chunk(&mut s).await, None);
}

#[tokio::test(start_paused = true)]
async fn follow_notices_an_exit_without_any_file_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample_file(dir.path());
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, true).await;
    let options = LogOptions {
        follow: true,
        tail_lines: Some(0),
        ..Default::default()
    };
    let start = tokio::time::Instant::now();
    let mut s = Box::pin(stream_logs(fake.clone(), log_of(&id, &path), options));
    // Nothing to send yet: the follower waits.
    assert!(
        tokio::time::timeout(Duration::from_secs(30), s.next())
            .await
            .is_err(),
        "the stream must stay open while the container runs"
    );
    fake.exit_container("app", 0);
    let exited = tokio::time::Instant::now();
    assert!(s.next().await.is_none());
    // Seen at the next forced check, as the kubelet's once-a-second re-check would.
    assert!(
        exited.elapsed() <= Duration::from_secs(1),
        "{:?}",
        exited.elapsed()
    );
    assert!(exited - start >= Duration::from_secs(30));
}

#[tokio::test]
async fn dropping_the_receiver_stops_the_follower() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample_file(dir.path());
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, true).await;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let task = tokio::spawn({
        let fake: Arc<dyn Runtime> = fake.clone();
        let log = log_of(&id, &path);
        async move {
            // Nothing to send: the follower sits waiting for new lines.
            let options = LogOptions {
                follow: true,
                tail_lines: Some(0),
                ..Default::default()
            };
            let followers = LogFollowers::new(crate::places::Limits::node(1));
            let reading = reader::Reading {
                runtime: fake.as_ref(),
                log: &log,
                options: &options,
                followers: &followers,
                permit: None,
            };
            reader::read_logs(reading, &tx, &mut Default::default()).await
        }
    });
    drop(rx);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("follower still running after the receiver was dropped")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn find_container_log_picks_current_and_previous_instances() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, sandbox) = fake().await;
    let first_log = dir.path().join("app-0.log");
    let second_log = dir.path().join("app-1.log");
    let first = add_container(&fake, &sandbox, "app", 0, &first_log, true).await;
    fake.exit_container("app", 2);
    // The fake stamps creation times from the clock: make the second instance newer.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = add_container(&fake, &sandbox, "app", 1, &second_log, true).await;

    let current = find_container_log(fake.as_ref(), UID, "web", "app", false)
        .await
        .unwrap();
    assert_eq!(current, log_of(&second, &second_log));
    let previous = find_container_log(fake.as_ref(), UID, "web", "app", true)
        .await
        .unwrap();
    assert_eq!(previous, log_of(&first, &first_log));

    let err = find_container_log(fake.as_ref(), UID, "web", "sidecar", false)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"container "sidecar" in pod "web" is waiting to start: ContainerCreating"#
    );
    assert_eq!(err.status_code(), 400);
    let err = find_container_log(fake.as_ref(), "other-uid", "other", "app", true)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"previous terminated container "app" in pod "other" not found"#
    );
}

#[tokio::test]
async fn container_log_reports_runtime_failures() {
    let (fake, _) = fake().await;
    let err = container_log(fake.as_ref(), "containerd://nope")
        .await
        .unwrap_err();
    assert_eq!(err.status_code(), 500);
    assert!(
        err.to_string()
            .starts_with("unable to retrieve container logs for nope"),
        "{err}"
    );
}

/// `size` bytes of 16 KiB `P` entries, as containerd writes a container's output without a
/// newline (`head -c 200M /dev/zero | tr '\0' a`).
fn flood(path: &Path, size: usize) -> usize {
    let piece = "a".repeat(16 * 1024);
    let line = entry(1, "stdout", "P", &piece);
    append(path, &line.repeat(flood_pieces(size)));
    flood_pieces(size) * piece.len()
}

/// How many pieces [`flood`] writes for `size`.
fn flood_pieces(size: usize) -> usize {
    size / entry(1, "stdout", "P", &"a".repeat(16 * 1024)).len() + 1
}

/// The most one reading may hold: a file line, two streams' joined lines, the gathered output.
const HELD_BOUND: usize = MAX_FILE_LINE + 2 * JOIN_CAP + CHUNK + 16 * 1024;

/// Reads with `read_logs` to the end (or `max_bytes` of output), keeping only the chunk sizes;
/// returns the output size, the largest chunk and the reader's stats.
async fn read_bounded(
    fake: Arc<FakeRuntime>,
    log: ContainerLog,
    options: LogOptions,
    max_bytes: usize,
) -> (usize, usize, reader::ReadStats) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(CHANNEL_DEPTH);
    let task = tokio::spawn(async move {
        let followers = LogFollowers::new(crate::places::Limits::node(1));
        let mut stats = reader::ReadStats::default();
        let reading = reader::Reading {
            runtime: fake.as_ref(),
            log: &log,
            options: &options,
            followers: &followers,
            permit: None,
        };
        reader::read_logs(reading, &tx, &mut stats).await.unwrap();
        stats
    });
    let (mut total, mut largest) = (0, 0);
    while total < max_bytes {
        match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
            Ok(Some(chunk)) => {
                let chunk = chunk.unwrap();
                assert!(chunk.iter().all(|b| *b == b'a' || *b == b'\n'));
                total += chunk.len();
                largest = largest.max(chunk.len());
            }
            Ok(None) => break,
            Err(_) => panic!("no chunk within 60s after {total} bytes"),
        }
    }
    drop(rx);
    let stats = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("reader still running")
        .unwrap();
    (total, largest, stats)
}

/// The attack: 16 MiB of one line without a newline. Read whole, it comes out in parts of the
/// join cap; nothing holds more than a bounded window (the old reader joined it all into one
/// 16 MiB line, sent as one chunk).
#[tokio::test]
async fn a_line_without_end_is_streamed_in_bounded_parts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    let content = flood(&path, 16 << 20);
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, false).await;
    // Through the public stream: every chunk is bounded, every byte arrives.
    let mut s = Box::pin(stream_logs(
        fake.clone(),
        log_of(&id, &path),
        LogOptions::default(),
    ));
    let (mut total, mut largest) = (0, 0);
    while let Some(chunk) = next_chunk(&mut s).await {
        total += chunk.len();
        largest = largest.max(chunk.len());
    }
    assert_eq!(total, content);
    assert!(largest <= JOIN_CAP, "a chunk of {largest} bytes");
    // And the reader's own buffers stay bounded.
    let (total, largest, stats) =
        read_bounded(fake, log_of(&id, &path), LogOptions::default(), usize::MAX).await;
    assert_eq!(total, content);
    assert!(largest <= JOIN_CAP);
    assert!(stats.max_held <= HELD_BOUND, "{stats:?}");
}

/// `tailLines=10` of the flood: about ten parts of the cap, read from a bounded window before
/// the end (the old reader read the whole file into memory and returned the whole line).
#[tokio::test]
async fn tail_lines_of_a_line_without_end_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    flood(&path, 16 << 20);
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, false).await;
    let options = LogOptions {
        tail_lines: Some(10),
        ..Default::default()
    };
    let got = read_all(fake.clone(), log_of(&id, &path), options.clone()).await;
    assert!(
        got.len() > 8 * JOIN_CAP && got.len() <= 11 * JOIN_CAP,
        "{} bytes",
        got.len()
    );
    let (total, largest, stats) = read_bounded(fake, log_of(&id, &path), options, usize::MAX).await;
    assert_eq!(total, got.len());
    assert!(largest <= JOIN_CAP);
    assert!(stats.max_held <= HELD_BOUND, "{stats:?}");
    assert!(stats.bytes_read <= 12 * TAIL_LINE_CAP, "{stats:?}");
}

/// `limitBytes` stops the reading once met: the old reader joined the whole 16 MiB line before
/// cutting it.
#[tokio::test]
async fn limit_bytes_stops_reading_a_line_without_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    flood(&path, 16 << 20);
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, false).await;
    let options = LogOptions {
        limit_bytes: Some(1000),
        ..Default::default()
    };
    let (total, _, stats) = read_bounded(fake, log_of(&id, &path), options, usize::MAX).await;
    assert_eq!(total, 1000);
    assert!(stats.bytes_read <= 2 * TAIL_LINE_CAP, "{stats:?}");
    assert!(stats.max_held <= HELD_BOUND, "{stats:?}");
}

/// `sinceTime` after everything: nothing is returned and nothing is gathered while skipping.
#[tokio::test]
async fn since_skips_a_line_without_end_without_holding_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    flood(&path, 16 << 20);
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, false).await;
    let options = LogOptions {
        since: Some("2026-01-01T00:00:05Z".parse().unwrap()),
        ..Default::default()
    };
    let (total, _, stats) = read_bounded(fake, log_of(&id, &path), options, usize::MAX).await;
    assert_eq!(total, 0);
    assert!(stats.max_held <= HELD_BOUND, "{stats:?}");
}

/// Following a container that writes without newlines: the parts arrive while it writes (the
/// old reader waited for the line's end, holding everything), and the follower's buffers stay
/// bounded.
#[tokio::test]
async fn follow_streams_a_line_without_end_as_it_grows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    let first = flood(&path, 4 << 20);
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, true).await;
    let options = LogOptions {
        follow: true,
        ..Default::default()
    };
    // More is written while the follower reads.
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            for _ in 0..8 {
                std::thread::sleep(Duration::from_millis(100));
                flood(&path, 1 << 20);
            }
        })
    };
    let written = first + 8 * flood_pieces(1 << 20) * 16 * 1024;
    let (total, largest, stats) =
        read_bounded(fake.clone(), log_of(&id, &path), options, written).await;
    writer.join().unwrap();
    assert_eq!(total, written, "the follower got every byte written");
    assert!(largest <= JOIN_CAP);
    assert!(stats.max_held <= HELD_BOUND, "{stats:?}");
}

/// Followers past the cap are refused with 429; a place is given back when a follower ends.
#[tokio::test]
async fn follows_past_the_cap_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample_file(dir.path());
    let (fake, sandbox) = fake().await;
    let id = add_container(&fake, &sandbox, "app", 0, &path, true).await;
    let followers = LogFollowers::new(crate::places::Limits {
        node: 2,
        namespace: 2,
        pod: 2,
    });
    let owner = crate::places::Owner {
        namespace: "ns".into(),
        pod_uid: "pod".into(),
    };
    let follow = LogOptions {
        follow: true,
        tail_lines: Some(1),
        ..Default::default()
    };
    let start = |options: LogOptions| {
        stream_logs_with(
            &followers,
            &owner,
            fake.clone(),
            log_of(&id, &path),
            options,
        )
    };
    let mut a = Box::pin(start(follow.clone()).expect("first follower"));
    let mut b = Box::pin(start(follow.clone()).expect("second follower"));
    assert_eq!(next_chunk(&mut a).await.as_deref(), Some("four\n"));
    assert_eq!(next_chunk(&mut b).await.as_deref(), Some("four\n"));
    let Err(refused) = start(follow.clone()) else {
        panic!("a third follower past the cap of 2");
    };
    assert_eq!(refused.status_code(), 429);
    assert_eq!(
        refused.to_string(),
        "too many log streams are being followed from this pod (at most 2 per pod); \
         try again later"
    );
    // Reading without follow is not a follower.
    let once = start(LogOptions::default()).expect("a read without follow");
    assert_eq!(once.collect::<Vec<_>>().await.len(), 1);
    // Both share one watch of the log directory.
    assert_eq!(followers.watching(), (1, 1));
    drop(a);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while followers.active() > 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dropped follower kept its place"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _c = start(follow).expect("a place was given back");
    drop(b);
}
