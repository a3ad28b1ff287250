//! Reads a CRI log file into response chunks, and follows it while the container runs: the
//! kubelet's `ReadLogs` and `waitLogs`.
//!
//! Following wakes on changes in the log's directory (the node's one shared watcher,
//! [`LogFollowers`]) and, as the kubelet does, at least every second anyway; at each end of the
//! file it asks the runtime whether the container still runs, and once it does not, drains the
//! file and ends. A log file replaced under the reader (rotation: renamed away, a new one
//! created) is switched to once the old one is drained.
//!
//! Memory is bounded whatever the container writes: a file line is read up to
//! [`MAX_FILE_LINE`] bytes (containerd writes at most 16 KiB of content per entry; a longer line
//! is skipped), partial entries are joined up to [`JOIN_CAP`](super::lines::JOIN_CAP) and then
//! handed on, output is sent in chunks of about [`CHUNK`] through a channel of
//! [`CHANNEL_DEPTH`], `tailLines` reads a bounded window backwards (`tail`) and stops at the end
//! of the lines it found, `limitBytes` stops the reading once met, and `sinceTime` drops lines
//! as they are read.

use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use super::follow::{DirWatch, FollowPermit, LogFollowers};
use super::lines::{LineAssembler, LineFormatter, LogLine, Output, JOIN_CAP};
use super::locate::ContainerLog;
use super::options::LogOptions;
use super::parse::parse_cri_line;
use super::tail::tail_range;
use super::LogError;
use crate::cri::{api, Runtime};
use crate::places::Owner;

/// The longest file line read: a CRI entry's header and containerd's 16 KiB of content fit many
/// times over. A longer line (not something containerd writes) is skipped, read in pieces of
/// this size.
pub const MAX_FILE_LINE: usize = JOIN_CAP + 1024;

/// Output bytes gathered before they are sent: small lines go out together, a line of the join
/// cap on its own.
pub const CHUNK: usize = 32 * 1024;

/// How long a follower waits without a file event before reading again (the kubelet's
/// `logForceCheckPeriod`): the safety net for missed events.
const FORCE_CHECK: Duration = Duration::from_secs(1);

/// Chunks buffered between the reader task and the response writer (each at most about
/// [`JOIN_CAP`]).
pub const CHANNEL_DEPTH: usize = 4;

/// What one reading held at most, for tests of the bounds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReadStats {
    /// Bytes held at once for the file line being read, the lines being joined and the output
    /// being gathered (buffers' capacity).
    pub max_held: usize,
    /// The largest chunk sent.
    pub max_chunk: usize,
    /// File bytes read after the tail search.
    pub bytes_read: u64,
}

/// The log as bytes in chunks, as the kubelet writes it to the HTTP response: content only
/// (partial lines joined up to the cap), each line prefixed with its RFC3339Nano timestamp and a
/// space when `timestamps`, tailLines/limitBytes/since/stream applied; with `follow`, keeps
/// reading new lines until the container is no longer running (checked through the runtime) and
/// the file is drained, or the receiver is dropped.
///
/// Errors (the file cannot be opened, a read fails, the runtime fails while following, too many
/// followers) arrive as an `Err` item, after which the stream ends. An error opening the file is
/// the first item, so a server that polls one item before sending its headers can still answer
/// with an error status. Followers count against [`LogFollowers::global`]; a server that answers
/// a refusal with its own status uses [`stream_logs_with`].
pub fn stream_logs(
    runtime: Arc<dyn Runtime>,
    log: ContainerLog,
    options: LogOptions,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + 'static {
    use futures::StreamExt;
    match stream_logs_with(
        &LogFollowers::global(),
        &Owner::default(),
        runtime,
        log,
        options,
    ) {
        Ok(stream) => stream.left_stream(),
        Err(e) => futures::stream::once(async move { Err(io::Error::other(e.to_string())) })
            .right_stream(),
    }
}

/// [`stream_logs`] with the node's followers, for a container of `owner`'s; a follow past
/// a cap is refused at once with [`LogError::TooManyFollowers`].
pub fn stream_logs_with(
    followers: &LogFollowers,
    owner: &Owner,
    runtime: Arc<dyn Runtime>,
    log: ContainerLog,
    options: LogOptions,
) -> Result<impl Stream<Item = Result<Bytes, io::Error>> + Send + 'static, LogError> {
    let permit = if options.follow {
        Some(
            followers
                .admit(owner)
                .map_err(|cap| LogError::TooManyFollowers { cap })?,
        )
    } else {
        None
    };
    let followers = followers.clone();
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    tokio::spawn(async move {
        let mut stats = ReadStats::default();
        let reading = Reading {
            runtime: runtime.as_ref(),
            log: &log,
            options: &options,
            followers: &followers,
            permit,
        };
        if let Err(e) = read_logs(reading, &tx, &mut stats).await {
            let _ = tx.send(Err(e)).await;
        }
    });
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Whether to go on after handing a line over.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

/// Turns file lines into response chunks.
struct Sink<'a> {
    tx: &'a mpsc::Sender<io::Result<Bytes>>,
    assembler: LineAssembler,
    formatter: LineFormatter,
    /// Output gathered and not yet sent (less than [`CHUNK`] between lines).
    pending: Vec<u8>,
    stats: &'a mut ReadStats,
}

impl Sink<'_> {
    async fn file_line(&mut self, raw: &[u8], terminated: bool, path: &Path) -> Flow {
        match parse_cri_line(raw) {
            Ok(entry) => {
                for line in self.assembler.push(&entry, terminated) {
                    if self.line(line).await == Flow::Stop {
                        return Flow::Stop;
                    }
                }
                Flow::Continue
            }
            Err(e) => {
                // Like the kubelet: a line that is not CRI format is skipped, not fatal.
                tracing::warn!(path = %path.display(), error = %e, "skipping unparseable log line");
                Flow::Continue
            }
        }
    }

    async fn line(&mut self, line: LogLine) -> Flow {
        let (bytes, last) = match self.formatter.format(&line) {
            Output::Skip => return Flow::Continue,
            Output::Write(b) => (b, false),
            Output::Last(b) => (b, true),
        };
        if self.pending.len() + bytes.len() > CHUNK && self.send_pending().await == Flow::Stop {
            return Flow::Stop;
        }
        if self.pending.is_empty() && bytes.len() >= CHUNK {
            if self.send(bytes).await == Flow::Stop {
                return Flow::Stop;
            }
        } else {
            self.pending.extend_from_slice(&bytes);
        }
        if last {
            self.send_pending().await;
            return Flow::Stop;
        }
        Flow::Continue
    }

    async fn send(&mut self, bytes: Vec<u8>) -> Flow {
        self.stats.max_chunk = self.stats.max_chunk.max(bytes.len());
        if self.tx.send(Ok(Bytes::from(bytes))).await.is_err() {
            return Flow::Stop;
        }
        Flow::Continue
    }

    /// Sends what was gathered (before waiting for more, and at the end).
    async fn send_pending(&mut self) -> Flow {
        if self.pending.is_empty() {
            return Flow::Continue;
        }
        let bytes = std::mem::replace(&mut self.pending, Vec::with_capacity(CHUNK));
        self.send(bytes).await
    }

    /// Records what is held now, with `line_buf` bytes for the file line being read.
    fn note_held(&mut self, line_buf: usize) {
        let held = line_buf + self.assembler.held() + self.pending.capacity();
        self.stats.max_held = self.stats.max_held.max(held);
    }

    /// Lines still waiting for their end, written as they are when the reading ends.
    async fn finish(&mut self) {
        for line in self.assembler.flush() {
            if self.line(line).await == Flow::Stop {
                return;
            }
        }
        self.send_pending().await;
    }
}

/// The open log file and which file it is (device, inode), to notice a replacement.
struct OpenLog {
    reader: BufReader<tokio::fs::File>,
    identity: (u64, u64),
    /// File bytes still to read when the reading stops at the end of the tail lines.
    left: Option<u64>,
}

fn io_context(what: &str, path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} log file {}: {e}", path.display()))
}

/// Opens the log file at the start of its last `tail` lines (all of it with `None`); `bounded`:
/// stop at the end of those lines.
async fn open_log(path: &Path, tail: Option<i64>, bounded: bool) -> io::Result<OpenLog> {
    let owned = path.to_path_buf();
    let (file, identity, left) = tokio::task::spawn_blocking(move || -> io::Result<_> {
        let mut file = std::fs::File::open(&owned).map_err(|e| io_context("open", &owned, e))?;
        let meta = file.metadata().map_err(|e| io_context("stat", &owned, e))?;
        let range = tail_range(&mut file, tail)
            .map_err(|e| io_context(&format!("tail {tail:?} lines of"), &owned, e))?;
        file.seek(SeekFrom::Start(range.start))
            .map_err(|e| io_context("seek", &owned, e))?;
        let left = range
            .end
            .filter(|_| bounded)
            .map(|end| end.saturating_sub(range.start));
        Ok((file, (meta.dev(), meta.ino()), left))
    })
    .await
    .map_err(io::Error::other)??;
    Ok(OpenLog {
        reader: BufReader::new(tokio::fs::File::from_std(file)),
        identity,
        left,
    })
}

/// The file now at `path`, if it is another one than `identity` (the log was rotated).
async fn replacement(path: &Path, identity: (u64, u64)) -> io::Result<Option<OpenLog>> {
    match tokio::fs::metadata(path).await {
        Ok(meta) if (meta.dev(), meta.ino()) != identity => {
            open_log(path, None, false).await.map(Some)
        }
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

/// How reading a file line ended.
#[derive(Debug, PartialEq, Eq)]
enum LineEnd {
    /// With its `\n`.
    Newline,
    /// At the end of the file (or of the bytes to read), possibly inside a line.
    End,
    /// `max` bytes without a `\n`.
    TooLong,
}

/// Appends the rest of the current file line to `buf`, up to `max` bytes in all and never more
/// than `left` bytes of the file (which it counts down).
async fn read_file_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
    left: &mut Option<u64>,
    read: &mut u64,
) -> io::Result<LineEnd> {
    loop {
        if buf.len() >= max {
            return Ok(LineEnd::TooLong);
        }
        let available = reader.fill_buf().await?;
        let allowed = left.map_or(available.len(), |l| {
            available
                .len()
                .min(usize::try_from(l).unwrap_or(usize::MAX))
        });
        let available = &available[..allowed];
        if available.is_empty() {
            return Ok(LineEnd::End);
        }
        let room = max - buf.len();
        let (take, newline) = match available.iter().position(|b| *b == b'\n') {
            Some(i) if i < room => (i + 1, true),
            _ => (available.len().min(room), false),
        };
        buf.extend_from_slice(&available[..take]);
        reader.consume(take);
        *read += take as u64;
        if let Some(l) = left.as_mut() {
            *l -= take as u64;
        }
        if newline {
            return Ok(LineEnd::Newline);
        }
    }
}

/// File bytes a reader parses between two yields to the runtime.
const YIELD_EVERY: u64 = 256 * 1024;

/// What one reading is of.
pub(super) struct Reading<'a> {
    pub runtime: &'a dyn Runtime,
    pub log: &'a ContainerLog,
    pub options: &'a LogOptions,
    pub followers: &'a LogFollowers,
    /// The follower's place (held for as long as it reads).
    pub permit: Option<FollowPermit>,
}

pub(super) async fn read_logs(
    reading: Reading<'_>,
    tx: &mpsc::Sender<io::Result<Bytes>>,
    stats: &mut ReadStats,
) -> io::Result<()> {
    let Reading {
        runtime,
        log,
        options,
        followers,
        permit: _permit,
    } = reading;
    // The kubelet resolves symlinks first so that watching follows the real file.
    let path: PathBuf = tokio::fs::canonicalize(&log.path)
        .await
        .map_err(|e| io_context("resolve", &log.path, e))?;
    // Without `follow`, the kubelet stops after the tail lines even if more were written since
    // the tail was found.
    let mut file = open_log(&path, options.tail_lines, !options.follow).await?;
    let mut sink = Sink {
        tx,
        assembler: LineAssembler::default(),
        formatter: LineFormatter::new(options),
        pending: Vec::with_capacity(CHUNK),
        stats,
    };
    // The file line being read (carried over a wait while following).
    let mut buf = Vec::with_capacity(MAX_FILE_LINE.min(16 * 1024 + 256));
    // Inside a file line longer than `MAX_FILE_LINE`, until its end.
    let mut skipping = false;
    let mut running = true;
    let mut watch: Option<DirWatch> = None;
    // The file that replaced ours (rotation), once seen; switched to after draining ours.
    let mut next_file: Option<OpenLog> = None;
    let mut yielded_at = 0u64;
    loop {
        // Reading a long file finds its data ready and its channel free for many lines in a
        // row: tokio's budget alone let one poll parse megabytes (117 ms in a debug build, a
        // stall for everything behind it on the worker). A yield every YIELD_EVERY bytes.
        if sink.stats.bytes_read.saturating_sub(yielded_at) >= YIELD_EVERY {
            yielded_at = sink.stats.bytes_read;
            tokio::task::yield_now().await;
        }
        let end = read_file_line(
            &mut file.reader,
            &mut buf,
            MAX_FILE_LINE,
            &mut file.left,
            &mut sink.stats.bytes_read,
        )
        .await
        .map_err(|e| io_context("read", &path, e))?;
        sink.note_held(buf.capacity());
        match end {
            LineEnd::Newline if skipping => {
                skipping = false;
                buf.clear();
                continue;
            }
            LineEnd::Newline => {
                let flow = sink.file_line(&buf, true, &path).await;
                buf.clear();
                if flow == Flow::Stop {
                    return Ok(());
                }
                continue;
            }
            LineEnd::TooLong => {
                if !skipping {
                    tracing::warn!(path = %path.display(), max = MAX_FILE_LINE, "skipping a log file line longer than the maximum");
                }
                skipping = true;
                buf.clear();
                continue;
            }
            LineEnd::End => {}
        }
        // At the end of the file (or of the tail lines); `buf` holds an unfinished last line,
        // if any.
        if !options.follow {
            if !buf.is_empty()
                && !skipping
                && file.left.is_none()
                && sink.file_line(&buf, false, &path).await == Flow::Stop
            {
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
        if sink.send_pending().await == Flow::Stop {
            return Ok(());
        }
        if let Some(new) = next_file.take() {
            // The old file was drained after its replacement appeared: go on with the new one.
            file = new;
            buf.clear();
            skipping = false;
            continue;
        }
        if let Some(new) = replacement(&path, file.identity).await? {
            // Lines may have reached the old file after our last read and before the rename:
            // read it to its end once more before switching.
            next_file = Some(new);
            continue;
        }
        let Some(events) = watch.as_mut() else {
            let dir = path.parent().unwrap_or(Path::new("/"));
            watch = Some(followers.watch(dir)?);
            // Lines written before the watch started raise no event: read once more.
            continue;
        };
        if !container_running(runtime, &log.container_id).await? {
            running = false;
            continue;
        }
        tokio::select! {
            () = events.changed() => {}
            () = tokio::time::sleep(FORCE_CHECK) => {}
            () = tx.closed() => return Ok(()),
        }
    }
}
