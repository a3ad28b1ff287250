//! One line of a CRI log file: `<RFC3339Nano time> <stdout|stderr> <tags> <content>`, where the
//! first tag is `P` (partial: the content continues in the next entry of the same stream) or `F`
//! (full: the entry ends the line). This is the format containerd writes for every container; the
//! kubelet's `parseCRILog` is the reference for what is accepted.

use jiff::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One parsed entry; `content` excludes the separator space and the line's `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriEntry<'a> {
    pub timestamp: Timestamp,
    /// The time as written in the file, for output (see [`fixed_timestamp`]).
    pub time_text: &'a str,
    pub stream: Stream,
    /// The `P` tag: the line continues in the next entry of this stream.
    pub partial: bool,
    pub content: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("timestamp is not found")]
    NoTimestamp,
    #[error("unexpected timestamp format {0:?}")]
    BadTimestamp(String),
    #[error("stream type is not found")]
    NoStream,
    #[error("unexpected stream type {0:?}")]
    BadStream(String),
    #[error("log tag is not found")]
    NoTag,
}

/// Parses one line of a CRI log file (with or without its trailing `\n`).
pub fn parse_cri_line(line: &[u8]) -> Result<CriEntry<'_>, ParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (time, rest) = split_space(line).ok_or(ParseError::NoTimestamp)?;
    let time_text = std::str::from_utf8(time)
        .map_err(|_| ParseError::BadTimestamp(String::from_utf8_lossy(time).into_owned()))?;
    let timestamp = time_text
        .parse::<Timestamp>()
        .map_err(|_| ParseError::BadTimestamp(time_text.to_string()))?;
    let (stream, rest) = split_space(rest).ok_or(ParseError::NoStream)?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        other => {
            return Err(ParseError::BadStream(
                String::from_utf8_lossy(other).into_owned(),
            ))
        }
    };
    let (tags, content) = split_space(rest).ok_or(ParseError::NoTag)?;
    // Tags are `:`-separated; only the first one (P or F) means anything today.
    let partial = tags.split(|b| *b == b':').next() == Some(b"P".as_slice());
    Ok(CriEntry {
        timestamp,
        time_text,
        stream,
        partial,
        content,
    })
}

fn split_space(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|b| *b == b' ')?;
    Some((&s[..i], &s[i + 1..]))
}

/// The kubelet's output time format, Go's `RFC3339NanoFixed`
/// (`2006-01-02T15:04:05.000000000Z07:00`): always nine fractional digits, the file's own UTC
/// offset kept (`Z` for a zero offset). Containerd writes times in its local zone, so the offset
/// is taken from the text rather than normalised to UTC, as Go's parse-then-format does.
pub fn fixed_timestamp(time_text: &str, timestamp: Timestamp) -> String {
    fixed_from_text(time_text).unwrap_or_else(|| format!("{timestamp:.9}"))
}

fn fixed_from_text(text: &str) -> Option<String> {
    // `YYYY-MM-DDTHH:MM:SS` is 19 ASCII characters.
    if text.len() < 20 || !text.is_ascii() {
        return None;
    }
    let (head, rest) = text.split_at(19);
    let (fraction, offset) = match rest.strip_prefix('.') {
        Some(r) => {
            let digits = r.bytes().take_while(u8::is_ascii_digit).count();
            r.split_at(digits)
        }
        None => ("", rest),
    };
    let offset = match offset {
        "Z" | "z" | "+00:00" | "-00:00" => "Z",
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => o,
        _ => return None,
    };
    let fraction: String = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(9)
        .collect();
    Some(format!("{head}.{fraction}{offset}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_cri_line_cases() {
        type Want = Result<(&'static str, Stream, bool, &'static str), ParseError>;
        let cases: Vec<(&str, Want)> = vec![
            (
                "2016-10-06T00:17:09.669794202Z stdout F log content 1\n",
                Ok((
                    "2016-10-06T00:17:09.669794202Z",
                    Stream::Stdout,
                    false,
                    "log content 1",
                )),
            ),
            (
                "2016-10-06T00:17:09.669794203Z stderr P part\n",
                Ok((
                    "2016-10-06T00:17:09.669794203Z",
                    Stream::Stderr,
                    true,
                    "part",
                )),
            ),
            // No trailing newline (the last, incomplete line of a file).
            (
                "2016-10-06T00:17:09Z stdout F tail",
                Ok(("2016-10-06T00:17:09Z", Stream::Stdout, false, "tail")),
            ),
            // Empty content and content with spaces.
            (
                "2016-10-06T00:17:09Z stdout F \n",
                Ok(("2016-10-06T00:17:09Z", Stream::Stdout, false, "")),
            ),
            (
                "2016-10-06T00:17:09Z stdout F  a  b \n",
                Ok(("2016-10-06T00:17:09Z", Stream::Stdout, false, " a  b ")),
            ),
            // Extra tags after ':' are ignored (forward compatibility).
            (
                "2016-10-06T00:17:09Z stdout P:x:y more\n",
                Ok(("2016-10-06T00:17:09Z", Stream::Stdout, true, "more")),
            ),
            (
                "2016-10-06T02:17:09.5+02:00 stdout F offset\n",
                Ok((
                    "2016-10-06T02:17:09.5+02:00",
                    Stream::Stdout,
                    false,
                    "offset",
                )),
            ),
            ("garbage", Err(ParseError::NoTimestamp)),
            (
                "yesterday stdout F x\n",
                Err(ParseError::BadTimestamp("yesterday".into())),
            ),
            ("2016-10-06T00:17:09Z stdout\n", Err(ParseError::NoStream)),
            (
                "2016-10-06T00:17:09Z stdin F x\n",
                Err(ParseError::BadStream("stdin".into())),
            ),
            ("2016-10-06T00:17:09Z stdout F\n", Err(ParseError::NoTag)),
        ];
        for (line, want) in cases {
            let got = parse_cri_line(line.as_bytes()).map(|e| {
                (
                    e.time_text.to_string(),
                    e.stream,
                    e.partial,
                    String::from_utf8(e.content.to_vec()).unwrap(),
                )
            });
            let want = want.map(|(t, s, p, c)| (t.to_string(), s, p, c.to_string()));
            assert_eq!(got, want, "{line:?}");
        }
    }

    #[test]
    fn parsed_timestamp_is_the_instant() {
        let e = parse_cri_line(b"2016-10-06T02:17:09.5+02:00 stdout F x\n").unwrap();
        assert_eq!(
            e.timestamp,
            "2016-10-06T00:17:09.5Z".parse::<Timestamp>().unwrap()
        );
    }

    #[test]
    fn fixed_timestamp_cases() {
        let cases = [
            (
                "2016-10-06T00:17:09.669794202Z",
                "2016-10-06T00:17:09.669794202Z",
            ),
            ("2016-10-06T00:17:09.5Z", "2016-10-06T00:17:09.500000000Z"),
            ("2016-10-06T00:17:09Z", "2016-10-06T00:17:09.000000000Z"),
            (
                "2016-10-06T02:17:09.1234+02:00",
                "2016-10-06T02:17:09.123400000+02:00",
            ),
            (
                "2016-10-06T00:17:09.1+00:00",
                "2016-10-06T00:17:09.100000000Z",
            ),
        ];
        for (text, want) in cases {
            let ts: Timestamp = text.parse().unwrap();
            assert_eq!(fixed_timestamp(text, ts), want, "{text}");
        }
    }

    #[test]
    fn fixed_timestamp_falls_back_to_utc_for_unusual_text() {
        let ts: Timestamp = "2016-10-06T00:17:09.25Z".parse().unwrap();
        assert_eq!(fixed_timestamp("odd", ts), "2016-10-06T00:17:09.250000000Z");
    }
}
