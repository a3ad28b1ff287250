//! Where `tailLines=N` starts reading: the start of the last N lines of the file, found by
//! reading backwards (a log file can be tens of MiB; the tail is usually a few KiB).
//!
//! A "line" here is a whole log line: a run of `P` entries and the entry that ends it, so a long
//! line split by the runtime counts once (the kubelet counts file lines). Pieces still waiting
//! for their end when the file ends count as one line. The incomplete last file line (no `\n`
//! yet) is never counted, as in the kubelet's `FindTailLineStartIndex`.

use std::io::{Read, Seek, SeekFrom};

use super::parse::parse_cri_line;

/// The first block read from the end; doubled until the tail is found.
const FIRST_BLOCK: u64 = 64 * 1024;

/// The offset in `data` where the last `n` lines start, or `None` when `data` (a suffix of the
/// file that does not start at the file's beginning) is too short to tell.
pub fn tail_start(data: &[u8], at_file_start: bool, n: u64) -> Option<usize> {
    let complete_end = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if n == 0 {
        return Some(complete_end);
    }
    // Lines before the first `\n` of a suffix may be cut: only later ones can be parsed.
    let trusted_start = if at_file_start {
        0
    } else {
        data.iter()
            .position(|b| *b == b'\n')
            .map_or(data.len(), |i| i + 1)
    };
    let mut found = 0;
    let mut end = complete_end;
    while end > trusted_start {
        let start = data[..end - 1]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1)
            .max(trusted_start);
        let continues = parse_cri_line(&data[start..end]).is_ok_and(|e| e.partial);
        // A line starts right after every entry that ends one.
        if !continues && end < complete_end {
            found += 1;
            if found == n {
                return Some(end);
            }
        }
        end = start;
    }
    at_file_start.then_some(0)
}

/// The file offset where the last `n` lines start (`None` = the whole file).
pub fn tail_start_offset<F: Read + Seek>(file: &mut F, n: Option<i64>) -> std::io::Result<u64> {
    let Some(n) = n else { return Ok(0) };
    let n = u64::try_from(n).unwrap_or(0);
    let size = file.seek(SeekFrom::End(0))?;
    let mut block = FIRST_BLOCK;
    loop {
        let from = size.saturating_sub(block);
        file.seek(SeekFrom::Start(from))?;
        let mut data = Vec::with_capacity(usize::try_from(size - from).unwrap_or(0));
        file.by_ref().take(size - from).read_to_end(&mut data)?;
        if let Some(i) = tail_start(&data, from == 0, n) {
            return Ok(from + i as u64);
        }
        block = block.saturating_mul(2);
    }
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
            assert_eq!(tail_start(data.as_bytes(), true, n), Some(want), "{name}");
        }
    }

    #[test]
    fn suffix_too_short_asks_for_more() {
        let full = [f("F", "a"), f("F", "b"), f("F", "c")].concat();
        // A suffix cut inside the first line: only "b" and "c" can be judged, and whether "b"
        // starts a line depends on the cut line "a" (it could be a `P` piece of it).
        let suffix = &full.as_bytes()[3..];
        let offset = 3;
        assert_eq!(
            tail_start(suffix, false, 1).map(|i| i + offset),
            Some(full.len() - f("F", "c").len())
        );
        assert_eq!(tail_start(suffix, false, 2), None);
        assert_eq!(tail_start(suffix, false, 3), None);
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
