//! Where `tailLines=N` starts reading: the start of the last N lines of the file, found by
//! reading backwards in fixed blocks (a log file can be hundreds of MiB; the tail is usually a
//! few KiB), as the kubelet's `FindTailLineStartIndex` does.
//!
//! A "line" here is a whole log line: a run of `P` entries and the entry that ends it, so a long
//! line split by the runtime counts once (the kubelet counts file lines). Pieces still waiting
//! for their end when the file ends count as one line. The incomplete last file line (no `\n`
//! yet) is never counted, as in the kubelet's `FindTailLineStartIndex`.
//!
//! The search is bounded: a line longer than [`TAIL_LINE_CAP`] bytes of file (a container that
//! writes without newlines makes one of any length) counts as one line per [`TAIL_LINE_CAP`]
//! bytes, cut at an entry boundary (or, for a single file line longer than the cap, which
//! containerd never writes, at the cap itself; the reader skips the headless rest of that entry).
//! So the search reads at most about `(N + 1) × TAIL_LINE_CAP` bytes and holds one block, and
//! the reader that follows returns what the search passed over: the kubelet's `tailLines` of a
//! newline-less flood returns N of containerd's 16 KiB pieces; nodelet returns at most N parts
//! of [`JOIN_CAP`](super::lines::JOIN_CAP).

use std::io::{Read, Seek, SeekFrom};

use super::lines::JOIN_CAP;
use super::parse::parse_cri_line;

/// Bytes read at a time, backwards from the end.
const BLOCK: u64 = 16 * 1024;

/// Bytes of an entry's start enough to tell whether it is a `P` entry: a time of at most 35
/// characters, the stream and the tag.
const HEAD: u64 = 128;

/// The most file bytes counted as one line (see the module doc): the reader's join cap and room
/// for the entries' headers, so that a part the search counts is about a part the reader
/// writes (four of containerd's 16 KiB pieces).
pub const TAIL_LINE_CAP: u64 = (JOIN_CAP + JOIN_CAP / 8) as u64;

/// What a non-following `tailLines` read covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailRange {
    /// Where the last N lines start.
    pub start: u64,
    /// Where a non-following read of them ends: the end of the last complete file line when the
    /// search ran, when the file had N lines (the kubelet stops after N lines even if more were
    /// written since); the file's size when the search ran, when it had fewer (everything there
    /// was, but not what a container writes meanwhile: a flood that starts just then would
    /// otherwise be read whole). `None` only without `tailLines`: the whole file.
    pub end: Option<u64>,
}

/// A window of the file, moved backwards one block at a time.
struct Backwards<'f, F> {
    file: &'f mut F,
    size: u64,
    buf: Vec<u8>,
    /// The file offset of `buf[0]`.
    start: u64,
}

impl<F: Read + Seek> Backwards<'_, F> {
    /// Loads the block that ends at `pos` (and [`HEAD`] bytes after it, for the entries that
    /// start in it), unless the window already covers it.
    fn cover(&mut self, pos: u64) -> std::io::Result<()> {
        if self.start < pos && pos <= self.start + self.buf.len() as u64 {
            return Ok(());
        }
        let from = pos.saturating_sub(BLOCK);
        let to = pos.saturating_add(HEAD).min(self.size);
        self.file.seek(SeekFrom::Start(from))?;
        self.buf.clear();
        self.file
            .by_ref()
            .take(to.saturating_sub(from))
            .read_to_end(&mut self.buf)?;
        self.start = from;
        Ok(())
    }

    /// The offset of the last `\n` in `[floor, pos)`.
    fn newline_before(&mut self, mut pos: u64, floor: u64) -> std::io::Result<Option<u64>> {
        while pos > floor {
            self.cover(pos)?;
            let lo = floor.max(self.start);
            let hi = pos.min(self.start + self.buf.len() as u64);
            if hi <= lo {
                // The file shrank under us: nothing more to find.
                return Ok(None);
            }
            let window = &self.buf[(lo - self.start) as usize..(hi - self.start) as usize];
            if let Some(i) = window.iter().rposition(|b| *b == b'\n') {
                return Ok(Some(lo + i as u64));
            }
            pos = lo;
        }
        Ok(None)
    }

    /// Whether the entry starting at `at` (inside the window) is a `P` entry.
    fn continues(&self, at: u64) -> bool {
        let Some(from) = at.checked_sub(self.start) else {
            return false;
        };
        let from = (from as usize).min(self.buf.len());
        let to = from.saturating_add(HEAD as usize).min(self.buf.len());
        let head = &self.buf[from..to];
        let head = &head[..head
            .iter()
            .position(|b| *b == b'\n')
            .map_or(head.len(), |i| i + 1)];
        parse_cri_line(head).is_ok_and(|e| e.partial)
    }
}

/// Where the last `n` lines of the file start (`None` = the whole file), and where a
/// non-following read of them ends.
pub fn tail_range<F: Read + Seek>(file: &mut F, n: Option<i64>) -> std::io::Result<TailRange> {
    let Some(n) = n else {
        return Ok(TailRange {
            start: 0,
            end: None,
        });
    };
    let n = u64::try_from(n).unwrap_or(0);
    let size = file.seek(SeekFrom::End(0))?;
    let mut back = Backwards {
        file,
        size,
        buf: Vec::with_capacity((BLOCK + HEAD) as usize),
        start: size,
    };
    // The end of the last complete file line; an unterminated last line longer than the cap
    // (never written by containerd) is given up on at the cap.
    let (complete_end, mut mid_entry) =
        match back.newline_before(size, size.saturating_sub(TAIL_LINE_CAP))? {
            Some(nl) => (nl + 1, false),
            None if size <= TAIL_LINE_CAP => (0, false),
            None => (size - TAIL_LINE_CAP, true),
        };
    if n == 0 {
        return Ok(TailRange {
            start: complete_end,
            end: Some(complete_end),
        });
    }
    let found_all = TailRange {
        start: 0,
        end: Some(complete_end),
    };
    let mut found = 0;
    // The end of the line being counted, and of the entry being looked at.
    let mut line_end = complete_end;
    let mut end = complete_end;
    while end > 0 {
        let floor = line_end.saturating_sub(TAIL_LINE_CAP);
        // The entry's own `\n` is at `end - 1` unless `end` is a cut inside an entry.
        let search_to = if mid_entry { end } else { end - 1 };
        let start = match back.newline_before(search_to, floor)? {
            Some(nl) => Some(nl + 1),
            None if floor == 0 => Some(0),
            None => None,
        };
        // Where a counted line starts, if one starts here, and where the next entry (going
        // backwards) ends.
        let (boundary, next_end) = match start {
            // A line starts after every entry that ends one.
            Some(start) => (
                (end < line_end && !back.continues(start)).then_some(end),
                Some(start),
            ),
            // The line reaches past the cap: a part of it starts at this entry's end (and the
            // same entry is looked at again against the new part's cap)...
            None if end < line_end => (Some(end), None),
            // ...or, when this one entry is longer than the cap, at the cap, inside it.
            None => (Some(floor), Some(floor)),
        };
        if let Some(at) = boundary {
            found += 1;
            if found == n {
                return Ok(TailRange {
                    start: at,
                    end: Some(complete_end),
                });
            }
            line_end = at;
        }
        if let Some(next) = next_end {
            mid_entry = start.is_none();
            end = next;
        }
    }
    // The first line of the file starts at 0.
    if line_end > 0 && found + 1 == n {
        return Ok(found_all);
    }
    Ok(TailRange {
        start: 0,
        end: Some(size),
    })
}

/// The file offset where the last `n` lines start (`None` = the whole file).
pub fn tail_start_offset<F: Read + Seek>(file: &mut F, n: Option<i64>) -> std::io::Result<u64> {
    tail_range(file, n).map(|r| r.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(tag: &str, text: &str) -> String {
        format!("2026-01-01T00:00:00Z stdout {tag} {text}\n")
    }

    #[test]
    fn tail_start_cases() {
        let full = [f("F", "a"), f("F", "b"), f("F", "c")].concat();
        let split = [
            f("F", "a"),
            f("P", "b1"),
            f("P", "b2"),
            f("F", "b3"),
            f("F", "c"),
        ]
        .concat();
        let trailing_partial = [f("F", "a"), f("F", "b"), f("P", "c1")].concat();
        let incomplete = format!("{}2026-01-01T00:00:00Z stdout F d", full);
        let garbage = [f("F", "a"), "not a cri line\n".to_string(), f("F", "c")].concat();
        let cases: Vec<(&str, &str, u64, usize)> = vec![
            ("empty", "", 1, 0),
            ("last of three", &full, 1, full.len() - f("F", "c").len()),
            ("two of three", &full, 2, f("F", "a").len()),
            ("all three", &full, 3, 0),
            ("more than there are", &full, 10, 0),
            ("zero lines: from the end", &full, 0, full.len()),
            // A split line counts once and is returned whole.
            ("split line is one line", &split, 2, f("F", "a").len()),
            (
                "after the split line",
                &split,
                1,
                split.len() - f("F", "c").len(),
            ),
            // Pieces still open at the end count as one line.
            (
                "trailing partial",
                &trailing_partial,
                1,
                trailing_partial.len() - f("P", "c1").len(),
            ),
            (
                "trailing partial and one more",
                &trailing_partial,
                2,
                f("F", "a").len(),
            ),
            // The incomplete last file line is not counted.
            (
                "incomplete last line not counted",
                &incomplete,
                1,
                full.len() - f("F", "c").len(),
            ),
            ("zero with incomplete", &incomplete, 0, full.len()),
            // Unparseable lines count as lines.
            ("garbage line counts", &garbage, 2, f("F", "a").len()),
        ];
        for (name, data, n, want) in cases {
            let mut file = std::io::Cursor::new(data.as_bytes());
            let got = tail_start_offset(&mut file, Some(n as i64)).unwrap();
            assert_eq!(got, want as u64, "{name}");
        }
    }

    #[test]
    fn range_ends_at_the_last_complete_line_when_there_are_enough() {
        let full = [f("F", "a"), f("F", "b"), f("F", "c")].concat();
        let incomplete = format!("{full}2026-01-01T00:00:00Z stdout F d");
        let range = |data: &str, n: i64| {
            tail_range(&mut std::io::Cursor::new(data.as_bytes()), Some(n)).unwrap()
        };
        let b = f("F", "a").len() as u64;
        let cases: Vec<(&str, &str, i64, TailRange)> = vec![
            (
                "two of three",
                &full,
                2,
                TailRange {
                    start: b,
                    end: Some(full.len() as u64),
                },
            ),
            (
                "exactly all",
                &full,
                3,
                TailRange {
                    start: 0,
                    end: Some(full.len() as u64),
                },
            ),
            (
                "more than there are: all there was",
                &full,
                4,
                TailRange {
                    start: 0,
                    end: Some(full.len() as u64),
                },
            ),
            (
                "incomplete last line left out",
                &incomplete,
                2,
                TailRange {
                    start: b,
                    end: Some(full.len() as u64),
                },
            ),
            (
                "zero",
                &incomplete,
                0,
                TailRange {
                    start: full.len() as u64,
                    end: Some(full.len() as u64),
                },
            ),
            (
                "empty",
                "",
                1,
                TailRange {
                    start: 0,
                    end: Some(0),
                },
            ),
        ];
        for (name, data, n, want) in cases {
            assert_eq!(range(data, n), want, "{name}");
        }
    }

    /// A reader that counts what it hands out.
    struct Counting {
        inner: std::io::Cursor<Vec<u8>>,
        read: u64,
    }

    impl Read for Counting {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.read += n as u64;
            Ok(n)
        }
    }

    impl Seek for Counting {
        fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
            self.inner.seek(pos)
        }
    }

    /// 16 KiB `P` entries of a container writing without newlines (`size` bytes of them), as
    /// containerd writes them.
    fn flood(size: usize, end: &str) -> Vec<u8> {
        let piece = f("P", &"a".repeat(16 * 1024));
        let mut data = piece.repeat(size / piece.len() + 1);
        data.push_str(end);
        data.into_bytes()
    }

    /// The attack: many MiB of one line without a newline. `tailLines=10` reads about ten
    /// parts of the cap backwards, not the file, and starts at an entry of the line.
    #[test]
    fn tail_of_a_line_without_end_reads_a_bounded_window() {
        for end in [
            "",
            "2026-01-01T00:00:00Z stdout F end\n",
            "2026-01-01T00:00:00Z stdout F cut-off",
        ] {
            let data = flood(16 << 20, end);
            let len = data.len() as u64;
            let mut file = Counting {
                inner: std::io::Cursor::new(data),
                read: 0,
            };
            let range = tail_range(&mut file, Some(10)).unwrap();
            let bound = 12 * TAIL_LINE_CAP;
            assert!(
                file.read <= bound,
                "read {} bytes (bound {bound}), end {end:?}",
                file.read
            );
            let returned = range.end.unwrap() - range.start;
            assert!(
                returned > 8 * JOIN_CAP as u64 && returned <= 11 * TAIL_LINE_CAP,
                "returns {returned} bytes, end {end:?}"
            );
            // It starts at an entry.
            let data = file.inner.into_inner();
            assert!(data[range.start as usize..].starts_with(b"2026-01-01T00:00:00Z stdout "));
            assert!(range.end.unwrap() <= len);
        }
    }

    /// One file line longer than the cap (containerd never writes one; a broken file might):
    /// the search gives up at the cap instead of reading backwards to the file's start.
    #[test]
    fn tail_of_a_file_line_longer_than_the_cap_is_bounded() {
        for end in ["\n", ""] {
            let mut data = f("F", "first").into_bytes();
            data.extend(std::iter::repeat_n(b'x', 8 << 20));
            data.extend_from_slice(end.as_bytes());
            let mut file = Counting {
                inner: std::io::Cursor::new(data),
                read: 0,
            };
            let range = tail_range(&mut file, Some(3)).unwrap();
            assert!(file.read <= 5 * TAIL_LINE_CAP, "read {} bytes", file.read);
            let end = range.end.unwrap();
            assert!(end - range.start <= 3 * TAIL_LINE_CAP + 1, "{range:?}");
        }
    }

    #[test]
    fn tail_start_offset_reads_backwards_across_blocks() {
        // ~200 KiB of lines: the first 64 KiB block is not enough for 3000 lines.
        let mut data = String::new();
        let mut starts = Vec::new();
        for i in 0..5000 {
            starts.push(data.len() as u64);
            data.push_str(&f("F", &format!("line {i:05}")));
        }
        let mut cursor = std::io::Cursor::new(data.into_bytes());
        let cases: &[(Option<i64>, u64)] = &[
            (None, 0),
            (Some(1), starts[4999]),
            (Some(3000), starts[2000]),
            (Some(5000), 0),
            (Some(9999), 0),
        ];
        for (n, want) in cases {
            assert_eq!(tail_start_offset(&mut cursor, *n).unwrap(), *want, "{n:?}");
        }
    }
}
