//! The termination message of an exited container, as the kubelet builds it
//! (`kuberuntime_container.go`: `getTerminationMessage`, `readLastStringFromContainerLogs`,
//! and the enrichment in `getPodContainerStatuses`):
//!
//! - the termination-message file mounted at `terminationMessagePath`, its last
//!   [`MAX_MESSAGE_BYTES`] bytes;
//! - with `terminationMessagePolicy: FallbackToLogsOnError`, when the file is empty or missing
//!   and the container failed (exit code not 0, reason not `ContainerCannotRun`), the tail of its
//!   log: the last [`MAX_LOG_LINES`] lines, of which the last [`MAX_LOG_BYTES`] bytes;
//! - a file that cannot be read gives `Error on reading termination log <path>: <error>`, a log
//!   that cannot be read `Error on reading termination message from logs: <error>`;
//! - the runtime's own message, when it has one, comes first, then `": "` and the above.
//!
//! The pod-wide cap (12 KiB shared by every container status) is applied where the statuses
//! are built (`status::generate`). What to read is decided by [`plan`] and what was read is
//! turned into the message by [`file_message`] and [`enrich`]; the reading itself sits behind
//! [`MessageSources`] (the file through `volume::read_termination_message`, which never follows
//! a symlink and never reads more than it keeps; the log through `logs::stream_logs`).
//!
//! Like the kubelet, the message is read again at each sync (an exited instance's file no longer
//! changes, so the result does too); it costs one bounded read per exited container instance.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cri::labels;
use crate::cri::model::{ContainerState, PodRuntime, RuntimeContainer};
use crate::cri::Runtime;
use crate::logs;

/// The kubelet's `kubecontainer.MaxContainerTerminationMessageLength`: the bytes read of the
/// file (its end).
pub const MAX_MESSAGE_BYTES: u64 = 1024 * 4;
/// `MaxContainerTerminationMessageLogLines`: the log lines `FallbackToLogsOnError` reads.
pub const MAX_LOG_LINES: i64 = 80;
/// `MaxContainerTerminationMessageLogLength`: the bytes kept of those lines (their end).
pub const MAX_LOG_BYTES: usize = 1024 * 2;

const FALLBACK_TO_LOGS_ON_ERROR: &str = "FallbackToLogsOnError";
/// A container that could not even start has no log to fall back to.
const CONTAINER_CANNOT_RUN: &str = "ContainerCannotRun";

/// Where an exited container's termination message comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The termination-message file to read, if the container has one mounted.
    pub file: Option<PathBuf>,
    /// Whether an empty or missing file falls back to the log.
    pub fallback_to_logs: bool,
}

/// What the kubelet reads for `container`: `None` unless it exited.
pub fn plan(container: &RuntimeContainer) -> Option<Plan> {
    if container.state != ContainerState::Exited {
        return None;
    }
    let policy = container
        .annotations
        .get(labels::CONTAINER_TERMINATION_MESSAGE_POLICY)
        .map(String::as_str);
    Some(Plan {
        file: container.termination_message_file.clone(),
        fallback_to_logs: policy == Some(FALLBACK_TO_LOGS_ON_ERROR)
            && container.exit_code != 0
            && container.reason != CONTAINER_CANNOT_RUN,
    })
}

/// What came of reading the file.
#[derive(Debug)]
pub enum FileRead {
    /// No file is mounted at the container's terminationMessagePath.
    NoFile,
    Read(Vec<u8>),
    Failed(io::Error),
}

/// What the file gives (`getTerminationMessage`): the message, and whether to read the log
/// instead.
pub fn file_message(plan: &Plan, read: FileRead) -> (String, bool) {
    match read {
        FileRead::NoFile => (String::new(), plan.fallback_to_logs),
        FileRead::Failed(e) if e.kind() == io::ErrorKind::NotFound => {
            (String::new(), plan.fallback_to_logs)
        }
        FileRead::Failed(e) => {
            let path = plan.file.as_deref().unwrap_or(Path::new(""));
            (
                format!("Error on reading termination log {}: {e}", path.display()),
                false,
            )
        }
        FileRead::Read(data) => {
            let empty = data.is_empty();
            (
                String::from_utf8_lossy(&data).into_owned(),
                plan.fallback_to_logs && empty,
            )
        }
    }
}

/// The message of a log read (`readLastStringFromContainerLogs`).
pub fn log_message(read: io::Result<Vec<u8>>) -> String {
    match read {
        Ok(tail) => String::from_utf8_lossy(&tail).into_owned(),
        Err(e) => format!("Error on reading termination message from logs: {e}"),
    }
}

/// The status message: the runtime's, then `": "` and the termination message when both are
/// there.
pub fn enrich(runtime_message: &str, termination: &str) -> String {
    match (runtime_message.is_empty(), termination.is_empty()) {
        (_, true) => runtime_message.to_string(),
        (true, false) => termination.to_string(),
        (false, false) => format!("{runtime_message}: {termination}"),
    }
}

/// Keeps the last `cap` bytes of everything pushed (the kubelet's `circbuf`), holding at most
/// `cap` bytes however much arrives.
#[derive(Debug)]
pub struct TailBuffer {
    cap: usize,
    buf: std::collections::VecDeque<u8>,
}

impl TailBuffer {
    pub fn new(cap: usize) -> Self {
        TailBuffer {
            cap,
            buf: std::collections::VecDeque::with_capacity(cap),
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(self.cap)..];
        let overflow = (self.buf.len() + chunk.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(chunk);
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf.into()
    }
}

/// The reads behind a termination message.
#[async_trait::async_trait]
pub trait MessageSources: Send + Sync {
    /// The last [`MAX_MESSAGE_BYTES`] of the termination-message file at `path`; `NotFound`
    /// when it is gone.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The last [`MAX_LOG_BYTES`] of the last [`MAX_LOG_LINES`] lines of the container's log
    /// (content only, both streams).
    async fn log_tail(&self, container_id: &str, log_path: &Path) -> io::Result<Vec<u8>>;
}

fn read_file(plan: &Plan, sources: &dyn MessageSources) -> FileRead {
    match &plan.file {
        None => FileRead::NoFile,
        Some(path) => match sources.read_file(path) {
            Ok(data) => FileRead::Read(data),
            Err(e) => FileRead::Failed(e),
        },
    }
}

/// Sets the message of every exited container instance of `pod` as the kubelet does.
pub async fn fill_messages(pod: &mut PodRuntime, sources: &dyn MessageSources) {
    for container in &mut pod.containers {
        let Some(plan) = plan(container) else {
            continue;
        };
        let (mut message, check_logs) = file_message(&plan, read_file(&plan, sources));
        if check_logs {
            let read = if container.log_path.is_empty() {
                Err(io::Error::new(io::ErrorKind::NotFound, "no log path"))
            } else {
                sources
                    .log_tail(&container.id, Path::new(&container.log_path))
                    .await
            };
            message = log_message(read);
        }
        container.message = enrich(&container.message, &message);
    }
}

/// Sets the message of each container that `shown` has exited and the CRI's view `cri` (the
/// same instances, in the same order) does not yet: an exit known only from the runtime's event
/// (`cri::exits`). Its message is read where that exit is shown, so a status never shows an
/// exit without the message its file holds (the file is written before the process exits).
/// Only the file: an exit whose message would come from the log is not shown before the CRI
/// reports it (`cri::exits::apply`), as the runtime drains the log first.
pub fn fill_event_exit_messages(
    cri: &PodRuntime,
    shown: &mut PodRuntime,
    sources: &dyn MessageSources,
) {
    for (container, seen) in shown.containers.iter_mut().zip(&cri.containers) {
        if seen.state == ContainerState::Exited || container.id != seen.id {
            continue;
        }
        let Some(plan) = plan(container) else {
            continue;
        };
        let (message, _) = file_message(&plan, read_file(&plan, sources));
        container.message = enrich(&container.message, &message);
    }
}

/// The node's sources: the file through [`crate::volume::read_termination_message`], the log
/// through the log reader `kubectl logs --tail=80` uses.
pub struct HostSources {
    pub root_dir: PathBuf,
    pub runtime: Arc<dyn Runtime>,
}

#[async_trait::async_trait]
impl MessageSources for HostSources {
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        crate::volume::read_termination_message(&self.root_dir, path, MAX_MESSAGE_BYTES)
    }

    async fn log_tail(&self, container_id: &str, log_path: &Path) -> io::Result<Vec<u8>> {
        use futures::StreamExt;
        let log = logs::ContainerLog {
            container_id: container_id.to_string(),
            path: log_path.to_path_buf(),
        };
        let options = logs::LogOptions {
            tail_lines: Some(MAX_LOG_LINES),
            ..Default::default()
        };
        let mut stream = std::pin::pin!(logs::stream_logs(self.runtime.clone(), log, options));
        let mut tail = TailBuffer::new(MAX_LOG_BYTES);
        while let Some(chunk) = stream.next().await {
            tail.push(&chunk?);
        }
        Ok(tail.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;

    fn exited(code: i32, policy: &str, file: Option<&str>) -> RuntimeContainer {
        RuntimeContainer {
            id: "c1".into(),
            name: "app".into(),
            state: ContainerState::Exited,
            exit_code: code,
            annotations: BTreeMap::from([(
                labels::CONTAINER_TERMINATION_MESSAGE_POLICY.to_string(),
                policy.to_string(),
            )]),
            log_path: "/var/log/pods/x/app/0.log".into(),
            termination_message_file: file.map(PathBuf::from),
            ..Default::default()
        }
    }

    /// Files by path (absent = NotFound, `Err` text = that error) and one log.
    struct Fake {
        files: BTreeMap<&'static str, Result<&'static [u8], &'static str>>,
        log: Result<&'static [u8], &'static str>,
        log_reads: Mutex<u32>,
    }

    #[async_trait::async_trait]
    impl MessageSources for Fake {
        fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
            match self.files.get(path.to_str().unwrap()) {
                None => Err(io::ErrorKind::NotFound.into()),
                Some(Ok(data)) => Ok(data.to_vec()),
                Some(Err(e)) => Err(io::Error::other(*e)),
            }
        }
        async fn log_tail(&self, _: &str, _: &Path) -> io::Result<Vec<u8>> {
            *self.log_reads.lock().unwrap() += 1;
            self.log.map(<[u8]>::to_vec).map_err(io::Error::other)
        }
    }

    #[tokio::test]
    async fn the_message_comes_from_the_file_else_the_log_tail_as_the_kubelet_decides() {
        const F: &str = "/root/pods/u/containers/app/f";
        // (container, runtime message, file content, log, expected message, log read?)
        type Case = (
            RuntimeContainer,
            &'static str,
            Option<Result<&'static [u8], &'static str>>,
            Result<&'static [u8], &'static str>,
            &'static str,
            bool,
        );
        let cases: Vec<Case> = vec![
            // The file's content, whatever the exit code and policy.
            (exited(1, "File", Some(F)), "", Some(Ok(b"boom")), Ok(b"log"), "boom", false),
            (exited(0, "FallbackToLogsOnError", Some(F)), "", Some(Ok(b"done")), Ok(b"log"), "done", false),
            (exited(1, "FallbackToLogsOnError", Some(F)), "", Some(Ok(b"boom")), Ok(b"log"), "boom", false),
            // Empty file, exit 0: nothing, even with FallbackToLogsOnError.
            (exited(0, "FallbackToLogsOnError", Some(F)), "", Some(Ok(b"")), Ok(b"log"), "", false),
            // Empty file, exit 1: the log tail only with FallbackToLogsOnError.
            (exited(1, "File", Some(F)), "", Some(Ok(b"")), Ok(b"log"), "", false),
            (exited(1, "FallbackToLogsOnError", Some(F)), "", Some(Ok(b"")), Ok(b"last lines\n"), "last lines\n", true),
            // A missing file or no file at all falls back as an empty one.
            (exited(2, "FallbackToLogsOnError", Some(F)), "", None, Ok(b"tail"), "tail", true),
            (exited(2, "FallbackToLogsOnError", None), "", None, Ok(b"tail"), "tail", true),
            (exited(2, "File", None), "", None, Ok(b"tail"), "", false),
            // A file that cannot be read (a symlink in its place: ELOOP) says so, no fallback.
            (
                exited(1, "FallbackToLogsOnError", Some(F)),
                "",
                Some(Err("Too many levels of symbolic links (os error 40)")),
                Ok(b"tail"),
                "Error on reading termination log /root/pods/u/containers/app/f: Too many levels of symbolic links (os error 40)",
                false,
            ),
            // A log that cannot be read says so.
            (
                exited(1, "FallbackToLogsOnError", Some(F)),
                "",
                Some(Ok(b"")),
                Err("gone"),
                "Error on reading termination message from logs: gone",
                true,
            ),
            // The runtime's message first.
            (exited(137, "File", Some(F)), "OOMKilled", Some(Ok(b"bye")), Ok(b""), "OOMKilled: bye", false),
            (exited(137, "File", Some(F)), "OOMKilled", Some(Ok(b"")), Ok(b""), "OOMKilled", false),
            // A container that could not run has no log to fall back to.
            (
                RuntimeContainer {
                    reason: CONTAINER_CANNOT_RUN.into(),
                    ..exited(128, "FallbackToLogsOnError", Some(F))
                },
                "",
                Some(Ok(b"")),
                Ok(b"tail"),
                "",
                false,
            ),
            // Invalid UTF-8 (a cut through a character) becomes U+FFFD, as JSON encoding does.
            (exited(1, "File", Some(F)), "", Some(Ok(b"\xa9 ok")), Ok(b""), "\u{fffd} ok", false),
        ];
        for (i, (container, runtime_message, file, log, want, log_read)) in
            cases.into_iter().enumerate()
        {
            let fake = Fake {
                files: file.map(|f| (F, f)).into_iter().collect(),
                log,
                log_reads: Mutex::new(0),
            };
            let mut pod = PodRuntime::empty("u");
            pod.containers = vec![RuntimeContainer {
                message: runtime_message.into(),
                ..container
            }];
            fill_messages(&mut pod, &fake).await;
            assert_eq!(pod.containers[0].message, want, "case {i}");
            assert_eq!(*fake.log_reads.lock().unwrap() == 1, log_read, "case {i}");
        }
    }

    #[tokio::test]
    async fn running_and_created_containers_are_not_read() {
        let fake = Fake {
            files: BTreeMap::from([("/f", Ok(&b"x"[..]))]),
            log: Ok(b"log"),
            log_reads: Mutex::new(0),
        };
        let mut pod = PodRuntime::empty("u");
        for state in [
            ContainerState::Running,
            ContainerState::Created,
            ContainerState::Unknown,
        ] {
            pod.containers.push(RuntimeContainer {
                state,
                ..exited(1, "FallbackToLogsOnError", Some("/f"))
            });
        }
        fill_messages(&mut pod, &fake).await;
        assert!(pod.containers.iter().all(|c| c.message.is_empty()));
        assert_eq!(*fake.log_reads.lock().unwrap(), 0);
    }

    /// An exit shown from the runtime's event gets its file's message where it is shown; the
    /// containers the CRI already reports exited (their message was read with the CRI's view)
    /// and those still running are not read again.
    #[test]
    fn an_exit_shown_from_the_event_carries_its_files_message() {
        let fake = Fake {
            files: BTreeMap::from([("/a", Ok(&b"from a"[..])), ("/b", Ok(&b"from b"[..]))]),
            log: Ok(b"log"),
            log_reads: Mutex::new(0),
        };
        let container = |id: &str, state, file| RuntimeContainer {
            id: id.into(),
            state,
            ..exited(4, "File", Some(file))
        };
        let mut cri = PodRuntime::empty("u");
        cri.containers = vec![
            container("a", ContainerState::Running, "/a"),
            RuntimeContainer {
                message: "read with the CRI's view".into(),
                ..container("b", ContainerState::Exited, "/b")
            },
            container("c", ContainerState::Running, "/a"),
        ];
        let mut shown = cri.clone();
        shown.containers[0].state = ContainerState::Exited;
        fill_event_exit_messages(&cri, &mut shown, &fake);
        let messages: Vec<&str> = shown
            .containers
            .iter()
            .map(|c| c.message.as_str())
            .collect();
        assert_eq!(messages, ["from a", "read with the CRI's view", ""]);
        assert_eq!(*fake.log_reads.lock().unwrap(), 0);
    }

    #[test]
    fn the_tail_buffer_keeps_the_last_bytes_and_never_more() {
        let mut t = TailBuffer::new(8);
        t.push(b"abc");
        t.push(b"defgh");
        assert_eq!(t.into_bytes(), b"abcdefgh");
        let mut t = TailBuffer::new(8);
        t.push(b"abcdef");
        t.push(b"ghij");
        assert_eq!(t.into_bytes(), b"cdefghij");
        let mut t = TailBuffer::new(8);
        t.push(b"x");
        t.push(&[b'y'; 100]);
        assert!(t.buf.capacity() < 100);
        assert_eq!(t.into_bytes(), b"yyyyyyyy");
        let mut t = TailBuffer::new(MAX_LOG_BYTES);
        for _ in 0..1000 {
            t.push(b"0123456789\n");
        }
        let out = t.into_bytes();
        assert_eq!(out.len(), MAX_LOG_BYTES);
        assert!(out.ends_with(b"0123456789\n"));
    }
}
