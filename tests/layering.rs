//! The module layering of `docs/architecture.md` ("Who imports whom"), checked on the source:
//!
//! ```text
//!              sync
//!          ╱    │    ╲
//!     probe   status   volume
//!          ╲    │    ╱
//!             podspec
//! ```
//!
//! A module may import only modules of a lower layer: `probe`, `status` and `volume` never
//! import `sync` or one another, and `podspec` imports none of them. So there is no import
//! cycle among them. What two of them need to share belongs in `podspec`.

use std::fs;
use std::path::{Path, PathBuf};

/// The layer of each module the rule covers; higher layers import lower ones only.
const LAYERS: &[(&str, u8)] = &[
    ("podspec", 0),
    ("probe", 1),
    ("status", 1),
    ("volume", 1),
    ("sync", 2),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// Every module of `LAYERS` a line of Rust refers to through `crate::` or `super::` (the latter
/// from a module's top file, where `super` is the crate root), including grouped imports such
/// as `use crate::{sync, volume::x}`. Comment lines are skipped.
fn referenced_modules(line: &str) -> Vec<&'static str> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return Vec::new();
    }
    let code = code.split(" //").next().unwrap_or(code);
    let mut found = Vec::new();
    for prefix in ["crate::", "super::"] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let after = &rest[at + prefix.len()..];
            let names: Vec<&str> = if let Some(group) = after.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or(group);
                group
                    .split(',')
                    .map(|item| item.trim().split("::").next().unwrap_or("").trim())
                    .collect()
            } else {
                vec![after
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("")]
            };
            for name in names {
                if let Some((m, _)) = LAYERS.iter().find(|(m, _)| *m == name) {
                    found.push(*m);
                }
            }
            rest = after;
        }
    }
    found
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = fs::read_dir(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for entry in entries {
            rust_files(&entry, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// `file:line: <module> imports <other> (...)` for every import against the layering.
fn violations(src: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (module, own) in LAYERS {
        let mut files = Vec::new();
        for path in [src.join(module), src.join(format!("{module}.rs"))] {
            if path.exists() {
                rust_files(&path, &mut files);
            }
        }
        assert!(!files.is_empty(), "no source found for module {module}");
        for file in files {
            let text = fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
            for (i, line) in text.lines().enumerate() {
                for other in referenced_modules(line) {
                    let theirs = layer(other).expect("listed module");
                    if other != *module && theirs >= *own {
                        out.push(format!(
                            "{}:{}: {module} imports {other}, which is not below it: {}",
                            file.display(),
                            i + 1,
                            line.trim()
                        ));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn sync_probe_status_volume_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "imports against the layering (move what is shared into podspec):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_sees_every_form_of_import() {
    let cases: &[(&str, &[&str])] = &[
        ("use crate::sync::env::expand;", &["sync"]),
        ("    crate::sync::restart::x(a, b)", &["sync"]),
        ("use super::sync;", &["sync"]),
        (
            "use crate::{cri, status::StatusManager, volume};",
            &["status", "volume"],
        ),
        ("use crate::podspec::{ConfigError, env};", &["podspec"]),
        ("// crate::sync in a comment", &[]),
        ("use crate::cri::api; // see crate::sync", &[]),
        ("use crate::synchronise::x;", &[]),
        ("use tokio::sync::watch;", &[]),
    ];
    for (line, want) in cases {
        assert_eq!(referenced_modules(line), *want, "{line}");
    }
}

#[test]
fn a_planted_upward_import_is_reported_with_file_and_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (module, _) in LAYERS {
        fs::create_dir(dir.path().join(module)).expect("module dir");
        fs::write(dir.path().join(module).join("mod.rs"), "pub mod x;\n").expect("mod.rs");
    }
    fs::write(
        dir.path().join("status").join("x.rs"),
        "use std::fmt;\nuse crate::sync::restart::should_restart;\n",
    )
    .expect("x.rs");
    let found = violations(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("status/x.rs:2: status imports sync"),
        "{}",
        found[0]
    );
}
