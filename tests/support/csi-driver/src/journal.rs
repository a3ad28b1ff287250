//! The call journal: one JSON object per line for every RPC the driver received, appended with
//! one `write` each so a test reading the file concurrently never sees half a line.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot open journal {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where RPCs are recorded; without `--journal`, nowhere.
pub struct Journal {
    file: Option<Mutex<File>>,
}

impl Journal {
    pub fn open(path: Option<&Path>) -> Result<Self, JournalError> {
        let file = match path {
            None => None,
            Some(path) => {
                if let Some(parent) = path.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| JournalError::Open {
                        path: path.display().to_string(),
                        source,
                    })?;
                Some(Mutex::new(file))
            }
        };
        Ok(Self { file })
    }

    /// Appends `entry` (a JSON object) as one line. A failed write is reported on stderr: the
    /// driver keeps serving, and the test that reads the journal sees the line missing.
    pub fn record(&self, entry: Map<String, Value>) {
        let Some(file) = &self.file else { return };
        let mut line = Value::Object(entry).to_string();
        line.push('\n');
        let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(err) = file.write_all(line.as_bytes()) {
            eprintln!("nodelet-test-csi: cannot write the journal: {err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_is_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/journal.jsonl");
        let journal = Journal::open(Some(&path)).unwrap();
        for n in 0..3 {
            let mut entry = Map::new();
            entry.insert("method".into(), Value::from(format!("M{n}")));
            entry.insert("text".into(), Value::from("a\nb"));
            journal.record(entry);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let last: Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(last["method"], "M2");
        assert_eq!(last["text"], "a\nb");
    }
}
