//! The registration sockets under `plugins_registry`: reading the directory (the kubelet's
//! plugin watcher: unix sockets only, names starting with `.` skipped, subdirectories walked),
//! and the pure decision of which sockets to register and which to deregister.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What tells one socket file from another at the same path: a socket created anew (a driver
/// that restarted) is registered again, as the kubelet's timestamps do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SocketId {
    pub dev: u64,
    pub ino: u64,
    pub ctime_ns: i128,
}

/// How deep below `plugins_registry` sockets are looked for.
pub const MAX_DEPTH: usize = 4;

/// What a directory entry is to the watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Socket,
    Directory,
    Other,
}

/// The kubelet's watcher rule: names starting with `.` are skipped; sockets count, directories
/// are walked, anything else is ignored.
pub fn classify(name: &str, kind: EntryKind) -> EntryKind {
    if name.starts_with('.') {
        EntryKind::Other
    } else {
        kind
    }
}

/// The sockets below `dir` now (never following a symlink: `symlink_metadata`).
pub fn scan(dir: &Path) -> BTreeMap<PathBuf, SocketId> {
    let mut found = BTreeMap::new();
    scan_into(dir, 0, &mut found);
    found
}

fn scan_into(dir: &Path, depth: usize, found: &mut BTreeMap<PathBuf, SocketId>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let ft = meta.file_type();
        let kind = if ft.is_socket() {
            EntryKind::Socket
        } else if ft.is_dir() {
            EntryKind::Directory
        } else {
            EntryKind::Other
        };
        match classify(&entry.file_name().to_string_lossy(), kind) {
            EntryKind::Socket => {
                found.insert(
                    path,
                    SocketId {
                        dev: meta.dev(),
                        ino: meta.ino(),
                        ctime_ns: i128::from(meta.ctime()) * 1_000_000_000
                            + i128::from(meta.ctime_nsec()),
                    },
                );
            }
            EntryKind::Directory if depth + 1 < MAX_DEPTH => scan_into(&path, depth + 1, found),
            _ => {}
        }
    }
}

/// A socket whose registration failed, retried after `retry_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed {
    pub id: SocketId,
    pub attempts: u32,
    pub retry_at: Instant,
}

/// What one pass does: deregistrations first (as the kubelet's reconciler), then
/// registrations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub deregister: Vec<PathBuf>,
    pub register: Vec<PathBuf>,
    /// Failed sockets that are gone or were replaced: their failure is forgotten.
    pub forget: Vec<PathBuf>,
}

/// Compares the sockets registered (`registered`: path → the socket registered) and failed
/// with the sockets present (`seen`). A registered socket that is gone or was created anew is
/// deregistered (and a new one registered); a present socket neither registered nor waiting
/// out a failure is registered.
pub fn plan(
    registered: &BTreeMap<PathBuf, SocketId>,
    failed: &BTreeMap<PathBuf, Failed>,
    seen: &BTreeMap<PathBuf, SocketId>,
    now: Instant,
) -> Plan {
    let mut out = Plan::default();
    let mut still_registered = BTreeSet::new();
    for (path, id) in registered {
        if seen.get(path) == Some(id) {
            still_registered.insert(path);
        } else {
            out.deregister.push(path.clone());
        }
    }
    for (path, f) in failed {
        if seen.get(path) != Some(&f.id) {
            out.forget.push(path.clone());
        }
    }
    for (path, id) in seen {
        if still_registered.contains(path) {
            continue;
        }
        let waiting = failed
            .get(path)
            .is_some_and(|f| f.id == *id && f.retry_at > now);
        if !waiting {
            out.register.push(path.clone());
        }
    }
    out
}

/// When the next failed socket is due for another try.
pub fn next_retry(failed: &BTreeMap<PathBuf, Failed>) -> Option<Instant> {
    failed.values().map(|f| f.retry_at).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn id(ino: u64) -> SocketId {
        SocketId {
            dev: 1,
            ino,
            ctime_ns: 0,
        }
    }

    fn map(items: &[(&str, u64)]) -> BTreeMap<PathBuf, SocketId> {
        items
            .iter()
            .map(|(p, i)| (PathBuf::from(p), id(*i)))
            .collect()
    }

    fn paths(items: &[&str]) -> Vec<PathBuf> {
        items.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn entries_are_classified_as_the_kubelets_watcher_does() {
        for (name, kind, want) in [
            ("d-reg.sock", EntryKind::Socket, EntryKind::Socket),
            (".d-reg.sock", EntryKind::Socket, EntryKind::Other),
            ("sub", EntryKind::Directory, EntryKind::Directory),
            (".hidden", EntryKind::Directory, EntryKind::Other),
            ("notes.txt", EntryKind::Other, EntryKind::Other),
        ] {
            assert_eq!(classify(name, kind), want, "{name}");
        }
    }

    #[test]
    fn which_sockets_are_registered_and_deregistered() {
        let now = Instant::now();
        let later = now + Duration::from_secs(5);
        let failed = |items: &[(&str, u64, Instant)]| -> BTreeMap<PathBuf, Failed> {
            items
                .iter()
                .map(|(p, i, at)| {
                    (
                        PathBuf::from(p),
                        Failed {
                            id: id(*i),
                            attempts: 1,
                            retry_at: *at,
                        },
                    )
                })
                .collect()
        };
        let cases = [
            ("nothing", map(&[]), failed(&[]), map(&[]), Plan::default()),
            (
                "a new socket",
                map(&[]),
                failed(&[]),
                map(&[("/r/a.sock", 1)]),
                Plan {
                    register: paths(&["/r/a.sock"]),
                    ..Plan::default()
                },
            ),
            (
                "registered and still there",
                map(&[("/r/a.sock", 1)]),
                failed(&[]),
                map(&[("/r/a.sock", 1)]),
                Plan::default(),
            ),
            (
                "registered and gone",
                map(&[("/r/a.sock", 1)]),
                failed(&[]),
                map(&[]),
                Plan {
                    deregister: paths(&["/r/a.sock"]),
                    ..Plan::default()
                },
            ),
            (
                "created anew at the same path: deregistered, then registered",
                map(&[("/r/a.sock", 1)]),
                failed(&[]),
                map(&[("/r/a.sock", 2)]),
                Plan {
                    deregister: paths(&["/r/a.sock"]),
                    register: paths(&["/r/a.sock"]),
                    ..Plan::default()
                },
            ),
            (
                "failed, waiting out its backoff",
                map(&[]),
                failed(&[("/r/a.sock", 1, later)]),
                map(&[("/r/a.sock", 1)]),
                Plan::default(),
            ),
            (
                "failed, due again",
                map(&[]),
                failed(&[("/r/a.sock", 1, now)]),
                map(&[("/r/a.sock", 1)]),
                Plan {
                    register: paths(&["/r/a.sock"]),
                    ..Plan::default()
                },
            ),
            (
                "failed, then created anew: tried at once, the failure forgotten",
                map(&[]),
                failed(&[("/r/a.sock", 1, later)]),
                map(&[("/r/a.sock", 2)]),
                Plan {
                    register: paths(&["/r/a.sock"]),
                    forget: paths(&["/r/a.sock"]),
                    ..Plan::default()
                },
            ),
            (
                "failed and gone",
                map(&[]),
                failed(&[("/r/a.sock", 1, later)]),
                map(&[]),
                Plan {
                    forget: paths(&["/r/a.sock"]),
                    ..Plan::default()
                },
            ),
        ];
        for (what, registered, failed, seen, want) in cases {
            assert_eq!(plan(&registered, &failed, &seen, now), want, "{what}");
        }
    }

    #[test]
    fn a_scan_finds_sockets_only_and_skips_dot_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::create_dir(root.join(".hidden")).unwrap();
        let _a = std::os::unix::net::UnixListener::bind(root.join("a.sock")).unwrap();
        let _b = std::os::unix::net::UnixListener::bind(root.join("sub/b.sock")).unwrap();
        let _c = std::os::unix::net::UnixListener::bind(root.join(".c.sock")).unwrap();
        let _d = std::os::unix::net::UnixListener::bind(root.join(".hidden/d.sock")).unwrap();
        std::fs::write(root.join("file.sock"), "not a socket").unwrap();
        std::os::unix::fs::symlink(root.join("a.sock"), root.join("link.sock")).unwrap();
        let found: Vec<PathBuf> = scan(root).into_keys().collect();
        assert_eq!(found, vec![root.join("a.sock"), root.join("sub/b.sock")]);
    }
}
