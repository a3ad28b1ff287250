//! From CRI entries to response bytes: partial entries joined into whole lines, then the
//! `since`, `stream`, `timestamps` and `limitBytes` options applied as the kubelet's `logWriter`
//! applies them.
//!
//! One deliberate difference from the kubelet: it writes every CRI entry on its own, so a long
//! line that containerd split into `P` entries comes out with a timestamp prefix in the middle
//! of the line (`… 2026-…Z rest`) and counts as several lines for `tailLines`. nodelet joins the
//! pieces first: one line, one timestamp (the first piece's), one line for `tailLines`. For the
//! usual short lines the output is byte for byte the kubelet's.
//!
//! Joining is bounded: a container that writes without newlines makes containerd write `P`
//! entries without end, and joining them all would hold the whole output in nodelet's memory.
//! Once the pieces of one stream reach [`JOIN_CAP`] bytes of content they are handed on as a
//! line of their own without a newline, and the pieces after them start a new one (with its own
//! timestamp prefix, as the kubelet writes each piece). A line longer than the cap thus comes
//! out as the kubelet writes it, only in fewer, larger pieces.

use jiff::Timestamp;

use super::options::{LogOptions, LogStream};
use super::parse::{fixed_timestamp, CriEntry, Stream};

/// The most content of one line joined before it is handed on (see the module doc): four of
/// containerd's 16 KiB pieces. Each stream holds less than this between entries, so a reader
/// holds at most two streams' worth plus one entry, whatever the container writes.
pub const JOIN_CAP: usize = 64 * 1024;

/// One whole log line of one stream (or a [`JOIN_CAP`] sized part of a longer one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub timestamp: Timestamp,
    /// The first piece's time in the kubelet's output format.
    pub time_text: String,
    pub stream: Stream,
    pub content: Vec<u8>,
    /// The line is complete (ended by an `F` entry with its newline); false for what was still
    /// partial when the file ended, and for a part of a line longer than [`JOIN_CAP`].
    pub newline: bool,
}

/// Joins `P` entries with the entries that continue them, per stream (stdout and stderr pieces
/// may interleave in the file).
#[derive(Debug, Default)]
pub struct LineAssembler {
    stdout: Option<LogLine>,
    stderr: Option<LogLine>,
}

impl LineAssembler {
    /// Adds one entry; `terminated` says whether its file line ended with `\n` (an unterminated
    /// entry is the incomplete end of the file, returned as it is). Returns what is ready: the
    /// open line of this stream when this entry would take it past [`JOIN_CAP`] (handed on
    /// without a newline), then the line this entry completes, or the open line once it has
    /// reached the cap.
    pub fn push(&mut self, entry: &CriEntry<'_>, terminated: bool) -> Assembled {
        let slot = match entry.stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        let mut ready = Assembled::default();
        if slot
            .as_ref()
            .is_some_and(|open| open.content.len().saturating_add(entry.content.len()) > JOIN_CAP)
        {
            ready.0[0] = slot.take();
        }
        let line = slot.get_or_insert_with(|| LogLine {
            timestamp: entry.timestamp,
            time_text: fixed_timestamp(entry.time_text, entry.timestamp),
            stream: entry.stream,
            content: Vec::new(),
            newline: false,
        });
        line.content.extend_from_slice(entry.content);
        if entry.partial && terminated {
            if line.content.len() >= JOIN_CAP {
                ready.0[1] = slot.take();
            }
            return ready;
        }
        ready.0[1] = slot.take().map(|mut line| {
            line.newline = terminated;
            line
        });
        ready
    }

    /// Bytes of content held for lines not yet complete.
    pub fn held(&self) -> usize {
        [&self.stdout, &self.stderr]
            .into_iter()
            .flatten()
            .map(|l| l.content.capacity())
            .sum()
    }

    /// Lines still waiting for their end, oldest first (when the file ends without one).
    pub fn flush(&mut self) -> Vec<LogLine> {
        let mut lines: Vec<LogLine> = [self.stdout.take(), self.stderr.take()]
            .into_iter()
            .flatten()
            .collect();
        lines.sort_by_key(|l| l.timestamp);
        lines
    }
}

/// The lines one [`LineAssembler::push`] made ready, oldest first (at most two).
#[derive(Debug, Default)]
pub struct Assembled([Option<LogLine>; 2]);

impl IntoIterator for Assembled {
    type Item = LogLine;
    type IntoIter = std::iter::Flatten<std::array::IntoIter<Option<LogLine>, 2>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter().flatten()
    }
}

/// What to do with one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Not part of the output (older than `since`, or another stream).
    Skip,
    /// Write these bytes and go on.
    Write(Vec<u8>),
    /// Write these bytes (possibly cut) and stop: `limitBytes` is reached.
    Last(Vec<u8>),
}

/// The kubelet's `logWriter`: `since` filter, timestamp prefix, byte limit.
#[derive(Debug, Clone)]
pub struct LineFormatter {
    since: Option<Timestamp>,
    timestamps: bool,
    stream: LogStream,
    /// Bytes still allowed; `None` = no limit.
    remaining: Option<u64>,
}

impl LineFormatter {
    pub fn new(options: &LogOptions) -> Self {
        LineFormatter {
            since: options.since,
            timestamps: options.timestamps,
            stream: options.stream,
            remaining: options.limit_bytes.map(|n| u64::try_from(n).unwrap_or(0)),
        }
    }

    pub fn format(&mut self, line: &LogLine) -> Output {
        if self.since.is_some_and(|since| line.timestamp < since)
            || !self.stream.includes(line.stream)
        {
            return Output::Skip;
        }
        let mut bytes = Vec::with_capacity(line.content.len() + 32);
        if self.timestamps {
            bytes.extend_from_slice(line.time_text.as_bytes());
            bytes.push(b' ');
        }
        bytes.extend_from_slice(&line.content);
        if line.newline {
            bytes.push(b'\n');
        }
        let Some(remaining) = self.remaining.as_mut() else {
            return Output::Write(bytes);
        };
        let len = bytes.len() as u64;
        if len >= *remaining {
            bytes.truncate(usize::try_from(*remaining).unwrap_or(usize::MAX));
            *remaining = 0;
            return Output::Last(bytes);
        }
        *remaining -= len;
        Output::Write(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_cri_line;
    use super::*;

    /// Feeds file lines through the assembler (the last one unterminated when it lacks `\n`)
    /// and flushes at the end; returns `(content, newline)` per line.
    fn assemble(file: &str) -> Vec<(String, bool)> {
        let mut a = LineAssembler::default();
        let mut out = Vec::new();
        for raw in file.split_inclusive('\n') {
            let entry = parse_cri_line(raw.as_bytes()).unwrap();
            out.extend(a.push(&entry, raw.ends_with('\n')));
        }
        out.extend(a.flush());
        out.into_iter()
            .map(|l| (String::from_utf8(l.content).unwrap(), l.newline))
            .collect()
    }

    #[test]
    fn assembler_cases() {
        let cases: Vec<(&str, Vec<(&str, bool)>)> = vec![
            ("2026-01-01T00:00:01Z stdout F one\n", vec![("one", true)]),
            (
                "2026-01-01T00:00:01Z stdout P a\n2026-01-01T00:00:02Z stdout P b\n2026-01-01T00:00:03Z stdout F c\n",
                vec![("abc", true)],
            ),
            // Interleaved streams keep their own pieces.
            (
                "2026-01-01T00:00:01Z stdout P out-\n2026-01-01T00:00:02Z stderr F err\n2026-01-01T00:00:03Z stdout F end\n",
                vec![("err", true), ("out-end", true)],
            ),
            // A piece still partial when the file ends is returned without a newline.
            (
                "2026-01-01T00:00:01Z stdout F done\n2026-01-01T00:00:02Z stdout P half\n",
                vec![("done", true), ("half", false)],
            ),
            // An unterminated last entry (being written) is returned as it is.
            ("2026-01-01T00:00:01Z stdout F cut", vec![("cut", false)]),
            ("2026-01-01T00:00:01Z stdout P a\n2026-01-01T00:00:02Z stdout F b", vec![("ab", false)]),
        ];
        for (file, want) in cases {
            let want: Vec<(String, bool)> =
                want.into_iter().map(|(s, n)| (s.to_string(), n)).collect();
            assert_eq!(assemble(file), want, "{file:?}");
        }
    }

    #[test]
    fn joined_line_keeps_the_first_piece_time() {
        let mut a = LineAssembler::default();
        assert!(a
            .push(
                &parse_cri_line(b"2026-01-01T00:00:01.5Z stdout P a\n").unwrap(),
                true
            )
            .into_iter()
            .next()
            .is_none());
        let line = a
            .push(
                &parse_cri_line(b"2026-01-01T00:00:09Z stdout F b\n").unwrap(),
                true,
            )
            .into_iter()
            .next()
            .unwrap();
        assert_eq!(line.time_text, "2026-01-01T00:00:01.500000000Z");
    }

    /// A container writing without newlines: containerd writes 16 KiB `P` entries without end.
    /// The assembler never holds more than [`JOIN_CAP`] of them and hands every byte on, in
    /// parts of at most the cap, the last one ended by the `F` entry's newline.
    #[test]
    fn pieces_without_end_are_handed_on_at_the_cap() {
        let piece = "a".repeat(16 * 1024);
        let p = format!("2026-01-01T00:00:01Z stdout P {piece}\n");
        let mut a = LineAssembler::default();
        let mut out: Vec<LogLine> = Vec::new();
        let pieces = 8 * 64; // 8 MiB
        for _ in 0..pieces {
            out.extend(a.push(&parse_cri_line(p.as_bytes()).unwrap(), true));
            assert!(a.held() <= JOIN_CAP, "holds {} bytes", a.held());
        }
        out.extend(a.push(
            &parse_cri_line(b"2026-01-01T00:00:02Z stdout F end\n").unwrap(),
            true,
        ));
        assert!(out.len() >= pieces / 4, "{} parts", out.len());
        assert!(out.iter().all(|l| l.content.len() <= JOIN_CAP));
        let (last, parts) = out.split_last().unwrap();
        assert!(last.newline && parts.iter().all(|l| !l.newline));
        let total: usize = out.iter().map(|l| l.content.len()).sum();
        assert_eq!(total, pieces * piece.len() + 3);
        assert!(last.content.ends_with(b"end"));
    }

    fn line(time: &str, stream: Stream, content: &str) -> LogLine {
        let timestamp: Timestamp = time.parse().unwrap();
        LogLine {
            timestamp,
            time_text: fixed_timestamp(time, timestamp),
            stream,
            content: content.as_bytes().to_vec(),
            newline: true,
        }
    }

    #[test]
    fn formatter_cases() {
        let lines = [
            line("2026-01-01T00:00:01Z", Stream::Stdout, "first"),
            line("2026-01-01T00:00:02Z", Stream::Stderr, "second"),
            line("2026-01-01T00:00:03Z", Stream::Stdout, "third"),
        ];
        let since = |s: &str| Some(s.parse::<Timestamp>().unwrap());
        let cases: Vec<(&str, LogOptions, &str)> = vec![
            ("plain", LogOptions::default(), "first\nsecond\nthird\n"),
            (
                "timestamps",
                LogOptions { timestamps: true, ..Default::default() },
                "2026-01-01T00:00:01.000000000Z first\n2026-01-01T00:00:02.000000000Z second\n2026-01-01T00:00:03.000000000Z third\n",
            ),
            // A line exactly at `since` is kept (the kubelet skips only lines before it).
            (
                "since",
                LogOptions { since: since("2026-01-01T00:00:02Z"), ..Default::default() },
                "second\nthird\n",
            ),
            ("limit inside a line", LogOptions { limit_bytes: Some(8), ..Default::default() }, "first\nse"),
            ("limit at a line end", LogOptions { limit_bytes: Some(6), ..Default::default() }, "first\n"),
            (
                "limit counts the timestamp prefix",
                LogOptions { limit_bytes: Some(10), timestamps: true, ..Default::default() },
                "2026-01-01",
            ),
            (
                "since then limit",
                LogOptions { since: since("2026-01-01T00:00:03Z"), limit_bytes: Some(3), ..Default::default() },
                "thi",
            ),
            ("stdout only", LogOptions { stream: LogStream::Stdout, ..Default::default() }, "first\nthird\n"),
            ("stderr only", LogOptions { stream: LogStream::Stderr, ..Default::default() }, "second\n"),
        ];
        for (name, options, want) in cases {
            let mut f = LineFormatter::new(&options);
            let mut out = Vec::new();
            for l in &lines {
                match f.format(l) {
                    Output::Skip => {}
                    Output::Write(b) => out.extend(b),
                    Output::Last(b) => {
                        out.extend(b);
                        break;
                    }
                }
            }
            assert_eq!(String::from_utf8(out).unwrap(), want, "{name}");
        }
    }

    #[test]
    fn unfinished_line_has_no_newline() {
        let mut l = line("2026-01-01T00:00:01Z", Stream::Stdout, "half");
        l.newline = false;
        let mut f = LineFormatter::new(&LogOptions::default());
        assert_eq!(f.format(&l), Output::Write(b"half".to_vec()));
    }
}
