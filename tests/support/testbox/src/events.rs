//! One line per event: on stdout (so the container log shows it) and, with `--event-file`, appended
//! with a nanosecond timestamp to a file, so a test can read back the order and timing of what
//! happened inside the container (signals, probe requests, exits) after the container is gone.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub struct Events {
    file: Option<Arc<PathBuf>>,
}

impl Events {
    pub fn new(file: Option<PathBuf>) -> Self {
        Self {
            file: file.map(Arc::new),
        }
    }

    #[cfg(test)]
    pub fn stdout_only() -> Self {
        Self::default()
    }

    /// Prints `testbox: <event>` and appends `<RFC 3339 nanos> <event>` to the event file.
    /// A failing event file is reported on stderr but never stops the program: the event log is
    /// a test aid, the behaviour under test is what matters.
    pub fn emit(&self, event: &str) {
        println!("testbox: {event}");
        if let Some(path) = &self.file {
            let line = event_file_line(jiff::Timestamp::now(), event);
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path.as_path())
                .and_then(|mut file| file.write_all(line.as_bytes()));
            if let Err(err) = written {
                eprintln!(
                    "testbox: cannot append to event file {}: {err}",
                    path.display()
                );
            }
        }
    }
}

/// One event-file line; a single `write` of the whole line with `O_APPEND`, so lines written by
/// several processes (e.g. a `preStop` hook running `sh -c 'echo ... >> file'`) do not interleave.
pub fn event_file_line(at: jiff::Timestamp, event: &str) -> String {
    format!("{at:.9} {event}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_file_line_cases() {
        let cases: &[(i64, i32, &str, &str)] = &[
            (
                0,
                0,
                "received SIGTERM",
                "1970-01-01T00:00:00.000000000Z received SIGTERM\n",
            ),
            (
                1_700_000_000,
                123_456_789,
                "exiting with 3",
                "2023-11-14T22:13:20.123456789Z exiting with 3\n",
            ),
        ];
        for (secs, nanos, event, want) in cases {
            let at = jiff::Timestamp::new(*secs, *nanos).unwrap();
            assert_eq!(event_file_line(at, event), *want);
        }
    }

    #[test]
    fn emit_appends_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events");
        let events = Events::new(Some(path.clone()));
        events.emit("first");
        events.emit("second");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].ends_with("Z first"), "{text}");
        assert!(lines[1].ends_with("Z second"), "{text}");
        let stamp = lines[0].split(' ').next().unwrap();
        assert!(stamp.parse::<jiff::Timestamp>().is_ok(), "{stamp}");
    }

    #[test]
    fn emit_survives_an_unwritable_event_file() {
        let dir = tempfile::tempdir().unwrap();
        let events = Events::new(Some(dir.path().join("missing-dir/events")));
        events.emit("still fine");
        assert!(!dir.path().join("missing-dir").exists());
    }
}
