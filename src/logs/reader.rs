//! Reads a CRI log file into response chunks, and follows it while the container runs: the
//! kubelet's `ReadLogs` and `waitLogs`.
//!
//! Following wakes on file events (inotify through `notify`) and, as the kubelet does, at least
//! every second anyway; at each end of the file it asks the runtime whether the container still
//! runs, and once it does not, drains the file and ends. A log file replaced under the reader
//! (rotation: renamed away, a new one created) is switched to once the old one is drained.

use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use super::lines::{LineAssembler, LineFormatter, LogLine, Output};
use super::locate::ContainerLog;
use super::options::LogOptions;
use super::parse::parse_cri_line;
use super::tail::tail_start_offset;
use crate::cri::{api, Runtime};

/// How long a follower waits without a file event before reading again (the kubelet's
/// `logForceCheckPeriod`): the safety net for missed events.
const FORCE_CHECK: Duration = Duration::from_secs(1);

/// Chunks buffered between the reader task and the response writer.
const CHANNEL_DEPTH: usize = 16;

/// The log as bytes in chunks, as the kubelet writes it to the HTTP response: content only
/// (partial lines joined), each line prefixed with its RFC3339Nano timestamp and a space when
/// `timestamps`, tailLines/limitBytes/since/stream applied; with `follow`, keeps reading new lines
/// until the container is no longer running (checked through the runtime) and the file is
/// drained, or the receiver is dropped.
///
/// Errors (the file cannot be opened, a read fails, the runtime fails while following) arrive as
/// an `Err` item, after which the stream ends. An error opening the file is the first item, so a
/// server that polls one item before sending its headers can still answer with an error status.
pub fn stream_logs(
    runtime: Arc<dyn Runtime>,
    log: ContainerLog,
    options: LogOptions,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + 'static {
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    tokio::spawn(async move {
        if let Err(e) = read_logs(runtime.as_ref(), &log, &options, &tx).await {
            let _ = tx.send(Err(e)).await;
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Whether to go on after handing a line over.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

/// Turns file lines into response chunks and counts what `tailLines` still allows.
struct Sink<'a> {
    tx: &'a mpsc::Sender<io::Result<Bytes>>,
    assembler: LineAssembler,
    formatter: LineFormatter,
    /// Without `follow`, the kubelet stops after the tail lines even if more were written since
    /// the tail was found.
    lines_left: Option<u64>,
}

impl Sink<'_> {
    fn done(&self) -> bool {
        self.lines_left == Some(0)
    }

    async fn file_line(&mut self, raw: &[u8], terminated: bool, path: &Path) -> Flow {
        match parse_cri_line(raw) {
            Ok(entry) => match self.assembler.push(&entry, terminated) {
                Some(line) => self.line(line).await,
                None => Flow::Continue,
            },
            Err(e) => {
                // Like the kubelet: a line that is not CRI format is skipped, not fatal.
                tracing::warn!(path = %path.display(), error = %e, "skipping unparseable log line");
                Flow::Continue
            }
        }
    }

    async fn line(&mut self, line: LogLine) -> Flow {
        if let Some(n) = self.lines_left.as_mut() {
            *n = n.saturating_sub(1);
        }
        let (bytes, last) = match self.formatter.format(&line) {
            Output::Skip => return self.flow_after(false),
            Output::Write(b) => (b, false),
            Output::Last(b) => (b, true),
        };
        if self.tx.send(Ok(Bytes::from(bytes))).await.is_err() {
            return Flow::Stop;
        }
        self.flow_after(last)
    }

    fn flow_after(&self, last: bool) -> Flow {
        if last || self.done() {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }

    /// Lines still waiting for their end, written as they are when the reading ends.
    async fn finish(&mut self) {
        for line in self.assembler.flush() {
            if self.line(line).await == Flow::Stop {
                return;
            }
        }
    }
}

/// The open log file and which file it is (device, inode), to notice a replacement.
struct OpenLog {
    reader: BufReader<tokio::fs::File>,
    identity: (u64, u64),
}

fn io_context(what: &str, path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} log file {}: {e}", path.display()))
}

/// Opens the log file at the start of its last `tail` lines (all of it with `None`).
async fn open_log(path: &Path, tail: Option<i64>) -> io::Result<OpenLog> {
    let owned = path.to_path_buf();
    let (file, identity) = tokio::task::spawn_blocking(move || -> io::Result<_> {
        let mut file = std::fs::File::open(&owned).map_err(|e| io_context("open", &owned, e))?;
        let meta = file.metadata().map_err(|e| io_context("stat", &owned, e))?;
        let start = tail_start_offset(&mut file, tail)
            .map_err(|e| io_context(&format!("tail {tail:?} lines of"), &owned, e))?;
        file.seek(SeekFrom::Start(start))
            .map_err(|e| io_context("seek", &owned, e))?;
        Ok((file, (meta.dev(), meta.ino())))
    })
    .await
    .map_err(io::Error::other)??;
    Ok(OpenLog {
        reader: BufReader::new(tokio::fs::File::from_std(file)),
        identity,
    })
}

/// The file now at `path`, if it is another one than `identity` (the log was rotated).
async fn replacement(path: &Path, identity: (u64, u64)) -> io::Result<Option<OpenLog>> {
    match tokio::fs::metadata(path).await {
        Ok(meta) if (meta.dev(), meta.ino()) != identity => open_log(path, None).await.map(Some),
        Ok(_) => Ok(None),
        // Renamed away and not yet re-created: keep waiting on the old one.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_context("stat", path, e)),
    }
}

async fn container_running(runtime: &dyn Runtime, id: &str) -> io::Result<bool> {
    match runtime.container_status(id).await {
        Ok(status) => Ok(status.state == api::ContainerState::ContainerRunning as i32),
        // Removed while we followed it: it certainly does not run.
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(io::Error::other(format!(
            "following the log of container {id}: {e}"
        ))),
    }
}

/// Wakes the follower on any event of the watched file; `try_send` on a one-slot channel
/// coalesces bursts of writes into one wake-up.
fn watch(path: &Path) -> io::Result<(RecommendedWatcher, mpsc::Receiver<()>)> {
    let (tx, rx) = mpsc::channel(1);
    let mut watcher = notify::recommended_watcher(move |_event: notify::Result<notify::Event>| {
        let _ = tx.try_send(());
    })
    .map_err(|e| io::Error::other(format!("watch log file {}: {e}", path.display())))?;
    watcher
        .watch(path, RecursiveMode::NonRecursive)
        .map_err(|e| io::Error::other(format!("watch log file {}: {e}", path.display())))?;
    Ok((watcher, rx))
}

pub(super) async fn read_logs(
    runtime: &dyn Runtime,
    log: &ContainerLog,
    options: &LogOptions,
    tx: &mpsc::Sender<io::Result<Bytes>>,
) -> io::Result<()> {
    // The kubelet resolves symlinks first so that watching follows the real file.
    let path: PathBuf = tokio::fs::canonicalize(&log.path)
        .await
        .map_err(|e| io_context("resolve", &log.path, e))?;
    let mut file = open_log(&path, options.tail_lines).await?;
    let mut sink = Sink {
        tx,
        assembler: LineAssembler::default(),
        formatter: LineFormatter::new(options),
        lines_left: options
            .tail_lines
            .filter(|_| !options.follow)
            .map(|n| u64::try_from(n).unwrap_or(0)),
    };
    // Bytes of a line whose end has not been written yet (following only).
    let mut carry = Vec::new();
    let mut running = true;
    let mut watcher: Option<(RecommendedWatcher, mpsc::Receiver<()>)> = None;
    // The file that replaced ours (rotation), once seen; switched to after draining ours.
    let mut next_file: Option<OpenLog> = None;
    loop {
        if sink.done() {
            return Ok(());
        }
        let mut buf = std::mem::take(&mut carry);
        file.reader
            .read_until(b'\n', &mut buf)
            .await
            .map_err(|e| io_context("read", &path, e))?;
        if buf.ends_with(b"\n") {
            if sink.file_line(&buf, true, &path).await == Flow::Stop {
                return Ok(());
            }
            continue;
        }
        // At the end of the file; `buf` holds an unfinished last line, if any.
        if !options.follow {
            if !buf.is_empty() && sink.file_line(&buf, false, &path).await == Flow::Stop {
                return Ok(());
            }
            sink.finish().await;
            return Ok(());
        }
        if !running {
            // The container stopped and everything it wrote has been read.
            sink.finish().await;
            return Ok(());
        }
        carry = buf;
        if let Some(new) = next_file.take() {
            // The old file was drained after its replacement appeared: go on with the new one.
            file = new;
            carry.clear();
            watcher = None;
            continue;
        }
        if let Some(new) = replacement(&path, file.identity).await? {
            // Lines may have reached the old file after our last read and before the rename:
            // read it to its end once more before switching.
            next_file = Some(new);
            continue;
        }
        let Some((_, events)) = watcher.as_mut() else {
            watcher = Some(watch(&path)?);
            // Lines written before the watch started raise no event: read once more.
            continue;
        };
        if !container_running(runtime, &log.container_id).await? {
            running = false;
            continue;
        }
        tokio::select! {
            _ = events.recv() => {}
            () = tokio::time::sleep(FORCE_CHECK) => {}
            () = tx.closed() => return Ok(()),
        }
    }
}
