//! One pass over the static pod directory: list the manifests, parse each, keep the last good pod
//! of a file that broke, resolve duplicate names, and produce the snapshot.
//!
//! The decisions (what a file contributes, which duplicate wins, when to log) are made from the
//! previous [`ScanState`] and the files' bytes; the only effects are reading the directory and
//! logging, and both take the directory as a parameter.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use super::manifest::{decode_manifest, first_seen, mark_first_seen, MAX_MANIFEST_BYTES};
use super::{ManifestError, SourceSnapshot, FILE_SOURCE};

/// What the previous scan learnt; feed it to the next one.
#[derive(Debug, Clone, Default)]
pub struct ScanState {
    files: BTreeMap<PathBuf, FileRecord>,
    /// The pods of the last complete scan (re-sent when the directory cannot be listed).
    pods: Vec<Pod>,
    dir_missing: bool,
    /// The last directory-level problem we logged, so it is logged once.
    dir_error: Option<String>,
}

#[derive(Debug, Clone, Default)]
struct FileRecord {
    /// The last pod this file produced successfully (with its first-seen time).
    last_good: Option<Pod>,
    /// What was last logged for this file: a persistent problem is logged once, not every scan.
    logged: Vec<ManifestError>,
}

impl ScanState {
    /// The last good pod of the manifest file with this name.
    pub fn pod_from_file_named(&self, name: &std::ffi::OsStr) -> Option<&Pod> {
        self.files
            .iter()
            .find(|(path, _)| path.file_name() == Some(name))
            .and_then(|(_, record)| record.last_good.as_ref())
    }

    /// The files that currently have a last good pod (for diagnostics and tests).
    pub fn known_files(&self) -> impl Iterator<Item = &Path> {
        self.files
            .iter()
            .filter(|(_, r)| r.last_good.is_some())
            .map(|(p, _)| p.as_path())
    }
}

/// Editors and tools leave these next to manifests; the kubelet skips dot-files, and `~` backups
/// are never manifests.
pub fn is_ignored_name(name: &str) -> bool {
    name.starts_with('.') || name.ends_with('~')
}

/// `dir` without `//`, `.` components or a trailing `/`, so file paths (part of each UID) do not
/// depend on how the path was spelt in the configuration.
pub fn normalize_dir(dir: &Path) -> PathBuf {
    dir.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// One pass at the current wall-clock time.
pub fn scan_dir(dir: &Path, node_name: &str, previous: &ScanState) -> (ScanState, SourceSnapshot) {
    scan_dir_at(dir, node_name, previous, Timestamp::now())
}

/// One pass; `now` becomes the first-seen time of pods not seen before.
pub fn scan_dir_at(
    dir: &Path,
    node_name: &str,
    previous: &ScanState,
    now: Timestamp,
) -> (ScanState, SourceSnapshot) {
    let dir = normalize_dir(dir);
    let files = match list_manifest_files(&dir) {
        Ok(files) => files,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if !previous.dir_missing {
                tracing::warn!(
                    dir = %dir.display(),
                    "static pod path does not exist; no static pods until it appears"
                );
            }
            let state = ScanState {
                dir_missing: true,
                ..ScanState::default()
            };
            return (state, snapshot(Vec::new(), Vec::new()));
        }
        Err(e) => {
            // Something else stopped us reading anything at all: keep what we had (the kubelet
            // also sends no update then) and say why.
            let reason = format!("cannot list static pod path: {e}");
            if previous.dir_error.as_deref() != Some(reason.as_str()) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot list static pod path; keeping the current static pods");
            }
            let mut state = previous.clone();
            state.dir_missing = false;
            state.dir_error = Some(reason.clone());
            let pods = previous.pods.clone();
            return (
                state,
                snapshot(pods, vec![ManifestError::new(&dir, None, reason)]),
            );
        }
    };
    if previous.dir_missing {
        tracing::info!(dir = %dir.display(), "static pod path appeared");
    }

    let mut state = ScanState::default();
    // (file, candidate pod, errors, notes) in path order.
    let mut results = Vec::with_capacity(files.len());
    for path in files {
        let prev = previous.files.get(&path);
        let prev_good = prev.and_then(|r| r.last_good.as_ref());
        let decoded = read_manifest(&path)
            .map_err(|e| {
                vec![ManifestError::new(
                    &path,
                    None,
                    format!("cannot read manifest: {e}"),
                )]
            })
            .and_then(|bytes| decode_manifest(&bytes, &path, node_name));
        let (candidate, errors, notes) = match decoded {
            Ok(parsed) => {
                let mut pod = parsed.pod;
                let seen = prev_good
                    .filter(|p| p.metadata.uid == pod.metadata.uid)
                    .and_then(first_seen)
                    .unwrap_or(now);
                mark_first_seen(&mut pod, seen);
                let notes = parsed
                    .unknown_fields
                    .into_iter()
                    .map(|f| ManifestError::new(&path, Some(f), "unknown field (ignored)"))
                    .collect();
                (Some(pod), Vec::new(), notes)
            }
            // Better than the kubelet: a manifest broken mid-edit keeps its last good pod running.
            Err(errors) => (prev_good.cloned(), errors, Vec::new()),
        };
        results.push((path, candidate, errors, notes));
    }

    // Two files defining one pod: the first path wins, the other is an error. Same for UIDs
    // (two manifests with the same explicit metadata.uid), which must be unique per node.
    let mut by_name: BTreeMap<(String, String), PathBuf> = BTreeMap::new();
    let mut by_uid: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut pods = Vec::new();
    let mut all_errors = Vec::new();
    for (path, candidate, mut errors, notes) in results {
        let mut record = FileRecord {
            last_good: candidate.clone(),
            logged: Vec::new(),
        };
        if let Some(pod) = candidate {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if let Some(first) = by_name.get(&(ns.clone(), name.clone())) {
                errors.push(ManifestError::new(
                    &path,
                    Some("metadata.name".to_string()),
                    format!(
                        "duplicate pod name {ns}/{name}: also defined in {}",
                        first.display()
                    ),
                ));
            } else if let Some(first) = by_uid.get(&uid) {
                errors.push(ManifestError::new(
                    &path,
                    Some("metadata.uid".to_string()),
                    format!("duplicate pod UID {uid}: also used by {}", first.display()),
                ));
            } else {
                by_name.insert((ns, name), path.clone());
                by_uid.insert(uid, path.clone());
                pods.push(pod);
            }
        }
        let logged: Vec<ManifestError> = errors.iter().chain(&notes).cloned().collect();
        let previously_logged = previous.files.get(&path).map(|r| r.logged.as_slice());
        if previously_logged != Some(logged.as_slice()) {
            log_file_problems(&path, &errors, &notes, record.last_good.is_some());
        }
        record.logged = logged;
        all_errors.extend(errors);
        state.files.insert(path, record);
    }
    for gone in previous
        .files
        .keys()
        .filter(|p| !state.files.contains_key(*p))
    {
        tracing::info!(file = %gone.display(), "static pod manifest removed");
    }

    state.pods = pods.clone();
    (state, snapshot(pods, all_errors))
}

fn snapshot(pods: Vec<Pod>, errors: Vec<ManifestError>) -> SourceSnapshot {
    SourceSnapshot {
        source: FILE_SOURCE,
        pods,
        errors,
        deleted: Vec::new(),
    }
}

fn log_file_problems(
    path: &Path,
    errors: &[ManifestError],
    notes: &[ManifestError],
    has_pod: bool,
) {
    for e in errors {
        if has_pod {
            tracing::warn!(file = %path.display(), error = %e, "invalid static pod manifest; keeping its last good pod");
        } else {
            tracing::warn!(file = %path.display(), error = %e, "invalid static pod manifest");
        }
    }
    let fields: BTreeSet<&str> = notes.iter().filter_map(|n| n.field.as_deref()).collect();
    if !fields.is_empty() {
        tracing::info!(file = %path.display(), ?fields, "static pod manifest has unknown fields; they are ignored");
    }
}

/// The manifests of a static pod path: every regular, non-ignored file directly in the directory
/// (symlinks followed, no recursion), sorted; or the path itself when it is a file.
pub fn list_manifest_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let meta = fs::metadata(dir)?;
    if meta.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "skipping unreadable directory entry");
                continue;
            }
        };
        if is_ignored_name(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let path = entry.path();
        match fs::metadata(&path) {
            Ok(m) if m.is_file() => files.push(path),
            Ok(m) if m.is_dir() => {
                tracing::debug!(path = %path.display(), "not recursing into directory in static pod path")
            }
            Ok(_) => {
                tracing::debug!(path = %path.display(), "skipping non-regular file in static pod path")
            }
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "skipping unreadable entry (dangling symlink?)")
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Read at most one byte more than the manifest limit, so an oversized file is reported as such
/// without reading all of it.
pub fn read_manifest(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podspec::CONFIG_SOURCE_ANNOTATION;
    use crate::source::CONFIG_SEEN_ANNOTATION;

    const NODE: &str = "node1";

    fn manifest(name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
        )
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn names(snap: &SourceSnapshot) -> Vec<String> {
        snap.pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    fn uid(pod: &Pod) -> String {
        pod.metadata.uid.clone().unwrap()
    }

    #[test]
    fn ignored_names() {
        let cases: &[(&str, bool)] = &[
            ("web.yaml", false),
            ("web.json", false),
            ("web", false),
            (".web.yaml", true),
            (".web.yaml.swp", true),
            ("web.yaml~", true),
            ("..data", true),
        ];
        for (name, ignored) in cases {
            assert_eq!(is_ignored_name(name), *ignored, "{name}");
        }
    }

    #[test]
    fn normalized_dirs() {
        let cases: &[(&str, &str)] = &[
            ("/etc/kubernetes/manifests", "/etc/kubernetes/manifests"),
            ("/etc/kubernetes/manifests/", "/etc/kubernetes/manifests"),
            ("/etc//kubernetes/./manifests", "/etc/kubernetes/manifests"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_dir(Path::new(input)), PathBuf::from(want));
        }
    }

    #[test]
    fn good_and_broken_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("a-good.yaml"),
            manifest("web", "nginx:1.27"),
        )
        .unwrap();
        fs::write(
            dir.path().join("b-broken.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: db}\nspec:\n  containers:\n  - name: c\n",
        )
        .unwrap();
        let (_, snap) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(snap.source, "file");
        assert_eq!(names(&snap), vec!["web-node1"]);
        let ann = snap.pods[0].metadata.annotations.as_ref().unwrap();
        assert_eq!(
            ann.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str),
            Some("file")
        );
        assert_eq!(
            ann.get(CONFIG_SEEN_ANNOTATION).map(String::as_str),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(snap.errors.len(), 1, "{:?}", snap.errors);
        assert_eq!(snap.errors[0].file, dir.path().join("b-broken.yaml"));
        assert_eq!(
            snap.errors[0].field.as_deref(),
            Some("spec.containers[0].image")
        );
        assert_eq!(snap.errors[0].reason, "Required value");
    }

    #[test]
    fn broken_edit_keeps_last_good_then_fix_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("web.yaml");
        fs::write(&file, manifest("web", "nginx:1.27")).unwrap();
        let (s1, snap1) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        let original = snap1.pods[0].clone();

        fs::write(&file, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: [").unwrap();
        let (s2, snap2) = scan_dir_at(dir.path(), NODE, &s1, t("2026-01-01T00:01:00Z"));
        assert_eq!(
            snap2.pods,
            vec![original.clone()],
            "last good pod kept unchanged"
        );
        assert_eq!(snap2.errors.len(), 1);
        assert_eq!(snap2.errors[0].file, file);

        fs::write(&file, manifest("web", "nginx:1.28")).unwrap();
        let (s3, snap3) = scan_dir_at(dir.path(), NODE, &s2, t("2026-01-01T00:02:00Z"));
        assert!(snap3.errors.is_empty());
        assert_eq!(names(&snap3), vec!["web-node1"]);
        assert_ne!(
            uid(&snap3.pods[0]),
            uid(&original),
            "edited manifest gets a new UID"
        );
        assert_eq!(first_seen(&snap3.pods[0]), Some(t("2026-01-01T00:02:00Z")));

        // Breaking a file that never produced a pod yields only the error.
        fs::write(dir.path().join("new.yaml"), "kind: Pod\n").unwrap();
        let (_, snap4) = scan_dir_at(dir.path(), NODE, &s3, t("2026-01-01T00:03:00Z"));
        assert_eq!(names(&snap4), vec!["web-node1"]);
        assert_eq!(snap4.errors.len(), 1);
        assert_eq!(snap4.errors[0].file, dir.path().join("new.yaml"));
    }

    #[test]
    fn unchanged_manifest_keeps_uid_and_first_seen() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("web.yaml"), manifest("web", "nginx:1.27")).unwrap();
        let (s1, snap1) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        let (_, snap2) = scan_dir_at(dir.path(), NODE, &s1, t("2026-01-01T05:00:00Z"));
        assert_eq!(
            snap1, snap2,
            "a rescan of unchanged files is the same snapshot"
        );
        // A fresh state (nodelet restarted) gives the same UID, with a new first-seen time.
        let (_, snap3) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-02T00:00:00Z"),
        );
        assert_eq!(uid(&snap3.pods[0]), uid(&snap1.pods[0]));
        assert_eq!(first_seen(&snap3.pods[0]), Some(t("2026-01-02T00:00:00Z")));
    }

    #[test]
    fn deleted_file_removes_its_pod() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.yaml"), manifest("a", "nginx:1.27")).unwrap();
        fs::write(dir.path().join("b.yaml"), manifest("b", "nginx:1.27")).unwrap();
        let (s1, snap1) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(names(&snap1), vec!["a-node1", "b-node1"]);
        fs::remove_file(dir.path().join("a.yaml")).unwrap();
        let (s2, snap2) = scan_dir_at(dir.path(), NODE, &s1, t("2026-01-01T00:01:00Z"));
        assert_eq!(names(&snap2), vec!["b-node1"]);
        assert_eq!(s2.known_files().count(), 1);
    }

    #[test]
    fn broken_then_deleted_file_removes_the_kept_pod() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("web.yaml");
        fs::write(&file, manifest("web", "nginx:1.27")).unwrap();
        let (s1, _) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        fs::write(&file, "not: [a pod").unwrap();
        let (s2, snap2) = scan_dir_at(dir.path(), NODE, &s1, t("2026-01-01T00:01:00Z"));
        assert_eq!(snap2.pods.len(), 1);
        fs::remove_file(&file).unwrap();
        let (_, snap3) = scan_dir_at(dir.path(), NODE, &s2, t("2026-01-01T00:02:00Z"));
        assert!(snap3.pods.is_empty());
        assert!(snap3.errors.is_empty());
    }

    #[test]
    fn duplicate_names_first_path_wins() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("10-web.yaml"),
            manifest("web", "nginx:1.27"),
        )
        .unwrap();
        fs::write(
            dir.path().join("20-web-copy.yaml"),
            manifest("web", "nginx:1.28"),
        )
        .unwrap();
        let (_, snap) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(snap.pods.len(), 1);
        assert_eq!(
            snap.pods[0].spec.as_ref().unwrap().containers[0]
                .image
                .as_deref(),
            Some("nginx:1.27")
        );
        assert_eq!(snap.errors.len(), 1);
        let err = &snap.errors[0];
        assert_eq!(err.file, dir.path().join("20-web-copy.yaml"));
        assert_eq!(err.field.as_deref(), Some("metadata.name"));
        assert_eq!(
            err.reason,
            format!(
                "duplicate pod name default/web-node1: also defined in {}",
                dir.path().join("10-web.yaml").display()
            )
        );
    }

    #[test]
    fn duplicate_explicit_uids_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let with_uid = |name: &str| {
            manifest(name, "nginx:1.27").replace(
                &format!("  name: {name}\n"),
                &format!("  name: {name}\n  uid: fixed-uid\n"),
            )
        };
        fs::write(dir.path().join("a.yaml"), with_uid("a")).unwrap();
        fs::write(dir.path().join("b.yaml"), with_uid("b")).unwrap();
        let (_, snap) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(names(&snap), vec!["a-node1"]);
        assert_eq!(snap.errors.len(), 1);
        assert_eq!(snap.errors[0].field.as_deref(), Some("metadata.uid"));
    }

    #[test]
    fn hidden_backup_and_nested_entries_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("web.yaml"), manifest("web", "nginx:1.27")).unwrap();
        fs::write(dir.path().join(".web.yaml.swp"), "garbage").unwrap();
        fs::write(
            dir.path().join(".hidden.yaml"),
            manifest("hidden", "nginx:1.27"),
        )
        .unwrap();
        fs::write(
            dir.path().join("web.yaml~"),
            manifest("backup", "nginx:1.27"),
        )
        .unwrap();
        fs::create_dir(dir.path().join("nested")).unwrap();
        fs::write(
            dir.path().join("nested/inner.yaml"),
            manifest("inner", "nginx:1.27"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("missing.yaml"),
            dir.path().join("dangling.yaml"),
        )
        .unwrap();
        let (_, snap) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(names(&snap), vec!["web-node1"]);
        assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    }

    #[test]
    fn symlinked_manifest_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        fs::write(
            elsewhere.path().join("real.yaml"),
            manifest("linked", "nginx:1.27"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            elsewhere.path().join("real.yaml"),
            dir.path().join("linked.yaml"),
        )
        .unwrap();
        let (_, snap) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(names(&snap), vec!["linked-node1"]);
    }

    #[test]
    fn missing_directory_is_an_empty_snapshot_without_errors() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("manifests");
        let (s1, snap) = scan_dir_at(&dir, NODE, &ScanState::default(), t("2026-01-01T00:00:00Z"));
        assert!(snap.pods.is_empty());
        assert!(snap.errors.is_empty());
        assert!(s1.dir_missing);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("web.yaml"), manifest("web", "nginx:1.27")).unwrap();
        let (s2, snap2) = scan_dir_at(&dir, NODE, &s1, t("2026-01-01T00:01:00Z"));
        assert_eq!(names(&snap2), vec!["web-node1"]);
        assert!(!s2.dir_missing);
    }

    #[test]
    fn directory_removed_drops_all_pods() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("manifests");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("web.yaml"), manifest("web", "nginx:1.27")).unwrap();
        let (s1, snap1) = scan_dir_at(&dir, NODE, &ScanState::default(), t("2026-01-01T00:00:00Z"));
        assert_eq!(snap1.pods.len(), 1);
        fs::remove_dir_all(&dir).unwrap();
        let (_, snap2) = scan_dir_at(&dir, NODE, &s1, t("2026-01-01T00:01:00Z"));
        assert!(snap2.pods.is_empty());
    }

    #[test]
    fn static_pod_path_may_be_a_single_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("only.yaml");
        fs::write(&file, manifest("only", "nginx:1.27")).unwrap();
        let (_, snap) = scan_dir_at(
            &file,
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(names(&snap), vec!["only-node1"]);
    }

    #[test]
    fn paths_in_uids_do_not_depend_on_trailing_slash() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("web.yaml"), manifest("web", "nginx:1.27")).unwrap();
        let plain = dir.path().to_path_buf();
        let slashed = PathBuf::from(format!("{}/", dir.path().display()));
        let (_, a) = scan_dir_at(
            &plain,
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        let (_, b) = scan_dir_at(
            &slashed,
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(uid(&a.pods[0]), uid(&b.pods[0]));
    }

    #[test]
    fn read_manifest_stops_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.yaml");
        fs::write(&file, vec![b'#'; MAX_MANIFEST_BYTES + 100]).unwrap();
        assert_eq!(read_manifest(&file).unwrap().len(), MAX_MANIFEST_BYTES + 1);
        let (_, snap) = scan_dir_at(
            dir.path(),
            NODE,
            &ScanState::default(),
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(snap.errors.len(), 1);
        assert!(snap.errors[0].reason.starts_with("manifest is larger than"));
    }
}
