//! The state file `graceful_node_shutdown_state` under the root directory, as the kubelet's
//! (`{"startTime": ..., "endTime": ...}`, Go's `time.Time` JSON, the zero time when unset):
//! when the last graceful shutdown started and ended. It outlives the reboot, so the next
//! start reports the last shutdown (log line and metrics).

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub const STATE_FILE: &str = "graceful_node_shutdown_state";

/// Go's zero `time.Time` in JSON: what the kubelet writes for a time not reached yet.
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownState {
    pub start: Option<Timestamp>,
    pub end: Option<Timestamp>,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    #[serde(rename = "startTime")]
    start_time: String,
    #[serde(rename = "endTime")]
    end_time: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("node shutdown state {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("node shutdown state {path}: {message}")]
    Decode { path: PathBuf, message: String },
}

fn encode_time(t: Option<Timestamp>) -> String {
    t.map_or_else(|| GO_ZERO_TIME.to_string(), |t| t.to_string())
}

fn decode_time(path: &Path, field: &str, text: &str) -> Result<Option<Timestamp>, StateError> {
    if text == GO_ZERO_TIME {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|e| StateError::Decode {
        path: path.to_path_buf(),
        message: format!("{field} {text:?}: {e}"),
    })
}

/// The file's text.
pub fn encode(state: &ShutdownState) -> String {
    serde_json::to_string(&Wire {
        start_time: encode_time(state.start),
        end_time: encode_time(state.end),
    })
    .unwrap_or_default()
}

/// Parses the file's text (`path` only names it in errors).
pub fn decode(path: &Path, text: &str) -> Result<ShutdownState, StateError> {
    let wire: Wire = serde_json::from_str(text).map_err(|e| StateError::Decode {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(ShutdownState {
        start: decode_time(path, "startTime", &wire.start_time)?,
        end: decode_time(path, "endTime", &wire.end_time)?,
    })
}

/// Reads the state; a missing file is the empty state, as the kubelet's `Load`.
pub fn load(path: &Path) -> Result<ShutdownState, StateError> {
    match std::fs::read_to_string(path) {
        Ok(text) => decode(path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ShutdownState::default()),
        Err(source) => Err(StateError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes the state atomically (a temporary file in the same directory, synced, renamed).
pub fn store(path: &Path, state: &ShutdownState) -> Result<(), StateError> {
    use std::io::Write;
    let io = |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(STATE_FILE);
    let tmp = path.with_file_name(format!(".tmp-{name}"));
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(encode(state).as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn the_file_reads_like_the_kubelets() {
        let cases: &[(ShutdownState, &str)] = &[
            (
                ShutdownState::default(),
                r#"{"startTime":"0001-01-01T00:00:00Z","endTime":"0001-01-01T00:00:00Z"}"#,
            ),
            (
                ShutdownState {
                    start: Some(ts("2026-12-01T10:00:00Z")),
                    end: None,
                },
                r#"{"startTime":"2026-12-01T10:00:00Z","endTime":"0001-01-01T00:00:00Z"}"#,
            ),
            (
                ShutdownState {
                    start: Some(ts("2026-12-01T10:00:00Z")),
                    end: Some(ts("2026-12-01T10:00:21.5Z")),
                },
                r#"{"startTime":"2026-12-01T10:00:00Z","endTime":"2026-12-01T10:00:21.5Z"}"#,
            ),
        ];
        let path = Path::new("/x/graceful_node_shutdown_state");
        for (state, text) in cases {
            assert_eq!(&encode(state), text);
            assert_eq!(&decode(path, text).unwrap(), state);
        }
        // What the kubelet writes (Go's RFC 3339 with nanoseconds and an offset) reads too.
        let go = r#"{"startTime":"2026-12-01T10:00:00.123456789+01:00","endTime":"0001-01-01T00:00:00Z"}"#;
        assert_eq!(
            decode(path, go).unwrap().start,
            Some(ts("2026-12-01T09:00:00.123456789Z"))
        );
        for bad in [
            "",
            "{}",
            r#"{"startTime":"yesterday","endTime":"0001-01-01T00:00:00Z"}"#,
        ] {
            let err = decode(path, bad).unwrap_err().to_string();
            assert!(err.contains("/x/graceful_node_shutdown_state"), "{err}");
        }
    }

    #[test]
    fn stored_and_loaded_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STATE_FILE);
        assert_eq!(load(&path).unwrap(), ShutdownState::default());
        let state = ShutdownState {
            start: Some(ts("2026-12-01T10:00:00Z")),
            end: Some(ts("2026-12-01T10:00:30Z")),
        };
        store(&path, &state).unwrap();
        assert_eq!(load(&path).unwrap(), state);
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file left behind");
    }
}
