//! Environment variable files (`env[].valueFrom.fileKeyRef`, the EnvFiles feature): the
//! kubelet's strict parser (`pkg/kubelet/util/env` `ParseEnv`), a subset of POSIX shell:
//!
//! * `NAME='value'`: the value in single quotes, kept literally (no escapes, no expansion),
//!   newlines inside the quotes included; a comment may follow the closing quote;
//! * blank lines and lines starting with `#` are skipped, leading blanks are ignored;
//! * a blank before `=` is an error; a blank after it assigns the empty string (as a shell
//!   would: `NAME= 'v'` sets `NAME` to nothing);
//! * the first assignment of a name wins: lines after it are not read.
//!
//! The content is read beneath its emptyDir by `volume::env_file`; this is the pure part.

/// Longest line the kubelet's line scanner takes (`bufio.MaxScanTokenSize`).
pub const MAX_LINE: usize = 64 * 1024;

/// Why an environment file could not be parsed; the line is 1-based.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvFileError {
    #[error("invalid environment variable format at line {0}: missing '='")]
    MissingEquals(usize),
    #[error("invalid environment variable format at line {0}: empty variable name")]
    EmptyName(usize),
    #[error(
        "invalid environment variable format at line {0}: whitespace before '=' is not allowed"
    )]
    BlankBeforeEquals(usize),
    #[error(
        "invalid environment variable format at line {0}: value must be enclosed in single quotes"
    )]
    NotQuoted(usize),
    #[error(
        "invalid environment variable format at line {0}: unexpected content after closing quote"
    )]
    AfterQuote(usize),
    #[error("invalid environment variable format starting at line {0}: unclosed single quote")]
    Unclosed(usize),
    #[error("line {0} is longer than {MAX_LINE} bytes")]
    LineTooLong(usize),
    #[error("the file is not UTF-8 text")]
    NotText,
}

/// The value of `key` in the file `content`; `""` when the key is not assigned (or assigned
/// the empty string, which the kubelet does not tell apart).
pub fn parse_env(content: &[u8], key: &str) -> Result<String, EnvFileError> {
    let text = std::str::from_utf8(content).map_err(|_| EnvFileError::NotText)?;
    let mut lines = scan_lines(text);
    let mut line_num = 0;
    while let Some(raw) = lines.next() {
        line_num += 1;
        if raw.len() > MAX_LINE {
            return Err(EnvFileError::LineTooLong(line_num));
        }
        let line = raw.trim_start_matches(BLANK);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(eq) = line.find('=') else {
            return Err(EnvFileError::MissingEquals(line_num));
        };
        let name_part = &line[..eq];
        let name = name_part.trim_end_matches(BLANK);
        if name.is_empty() {
            return Err(EnvFileError::EmptyName(line_num));
        }
        if name != name_part {
            return Err(EnvFileError::BlankBeforeEquals(line_num));
        }
        let value_part = &line[eq + 1..];
        let value = value_part.trim_start_matches(BLANK);
        if value != value_part {
            if name == key {
                return Ok(String::new());
            }
            continue;
        }
        let Some(mut rest) = value.strip_prefix('\'') else {
            return Err(EnvFileError::NotQuoted(line_num));
        };
        let start = line_num;
        let mut collected = String::new();
        loop {
            if let Some(close) = rest.find('\'') {
                collected.push_str(&rest[..close]);
                let after = rest[close + 1..].trim_start_matches(BLANK);
                if !after.is_empty() && !after.starts_with('#') {
                    return Err(EnvFileError::AfterQuote(line_num));
                }
                if name == key {
                    return Ok(collected);
                }
                break;
            }
            collected.push_str(rest);
            collected.push('\n');
            rest = lines.next().ok_or(EnvFileError::Unclosed(start))?;
            line_num += 1;
            if rest.len() > MAX_LINE {
                return Err(EnvFileError::LineTooLong(line_num));
            }
        }
    }
    Ok(String::new())
}

const BLANK: [char; 2] = [' ', '\t'];

/// Lines as Go's `bufio.ScanLines` gives them: split at `\n`, one trailing `\r` dropped, no
/// empty last line after a final newline.
fn scan_lines(text: &str) -> impl Iterator<Item = &str> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let mut lines = (!text.is_empty()).then(|| body.split('\n'));
    std::iter::from_fn(move || {
        let line = lines.as_mut()?.next()?;
        Some(line.strip_suffix('\r').unwrap_or(line))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_as_the_kubelet_parses_them() {
        use EnvFileError::*;
        let cases: &[(&str, &str, Result<&str, EnvFileError>)] = &[
            ("A='1'\nB='2'\n", "B", Ok("2")),
            ("A='1'\nB='2'", "B", Ok("2")),
            ("A='1'\r\nB='2'\r\n", "A", Ok("1")),
            ("A='1'\n", "C", Ok("")),
            ("", "A", Ok("")),
            ("\n\n", "A", Ok("")),
            // Comments, blank lines and leading blanks.
            ("# comment\n\n  \t\n   A='x' # trailing\n", "A", Ok("x")),
            ("A='x'   ", "A", Ok("x")),
            // Literal content: no escapes, no expansion, '=' and '#' inside.
            ("A='$HOME \\n # = \"q\"'", "A", Ok("$HOME \\n # = \"q\"")),
            // Multi-line values.
            ("A='one\ntwo\n'\nB='3'", "A", Ok("one\ntwo\n")),
            ("A='one\ntwo'\nB='3'", "B", Ok("3")),
            // A blank after '=' assigns nothing, even with a quoted value after it.
            ("A= 'v'\n", "A", Ok("")),
            ("A= 'v'\nB='w'", "B", Ok("w")),
            // The empty value and the first assignment.
            ("A=''\n", "A", Ok("")),
            ("A='1'\nA='2'\n", "A", Ok("1")),
            // Errors, and lines after the key are never read.
            ("A='1'\nnonsense\n", "A", Ok("1")),
            ("nonsense\nA='1'\n", "A", Err(MissingEquals(1))),
            ("A='1'\n='2'\n", "B", Err(EmptyName(2))),
            ("A ='1'\n", "A", Err(BlankBeforeEquals(1))),
            ("A=1\n", "A", Err(NotQuoted(1))),
            ("A=\"1\"\n", "A", Err(NotQuoted(1))),
            ("A=\n", "A", Err(NotQuoted(1))),
            ("A='1' B='2'\n", "A", Err(AfterQuote(1))),
            ("X='a\nb' junk\n", "A", Err(AfterQuote(2))),
            ("A='1\n2\n", "A", Err(Unclosed(1))),
            ("B='1'\nA='open\n", "A", Err(Unclosed(2))),
        ];
        for (content, key, want) in cases {
            let want = want.clone().map(str::to_string);
            assert_eq!(
                parse_env(content.as_bytes(), key),
                want,
                "{content:?} {key}"
            );
        }
    }

    #[test]
    fn lines_and_text_are_bounded() {
        let long = format!("A='{}'\n", "x".repeat(MAX_LINE));
        assert_eq!(
            parse_env(long.as_bytes(), "A"),
            Err(EnvFileError::LineTooLong(1))
        );
        let long_inside = format!("A='start\n{}'\n", "x".repeat(MAX_LINE + 1));
        assert_eq!(
            parse_env(long_inside.as_bytes(), "A"),
            Err(EnvFileError::LineTooLong(2))
        );
        let fits = format!("A='{}'", "x".repeat(MAX_LINE - 4));
        assert_eq!(parse_env(fits.as_bytes(), "A").unwrap().len(), MAX_LINE - 4);
        assert_eq!(parse_env(b"A='\xff'", "A"), Err(EnvFileError::NotText));
    }
}
