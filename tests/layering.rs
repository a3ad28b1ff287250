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

/// The other files of `sync` a line of `src/sync/<file>.rs` refers to (`super::x`,
/// `crate::sync::x`); comment lines are skipped.
fn sync_files_referenced(line: &str) -> Vec<String> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return Vec::new();
    }
    let code = code.split(" //").next().unwrap_or(code);
    let mut found = Vec::new();
    for prefix in ["super::", "crate::sync::"] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let after = &rest[at + prefix.len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
            rest = after;
        }
    }
    found
}

/// An import cycle among the files of `<src>/sync` (`a -> b -> a`), if there is one.
fn sync_import_cycle(src: &Path) -> Option<Vec<String>> {
    let dir = src.join("sync");
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let names: Vec<String> = files
        .iter()
        .filter_map(|f| Some(f.file_stem()?.to_str()?.to_string()))
        .filter(|n| n != "mod")
        .collect();
    for file in &files {
        let Some(name) = file.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if name == "mod" {
            continue;
        }
        let text =
            fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        // A file's own test module may use its parent's neighbours freely.
        let code = text.split("#[cfg(test)]").next().unwrap_or(&text);
        let edges = graph.entry(name.to_string()).or_default();
        for line in code.lines() {
            for other in sync_files_referenced(line) {
                if other != name && names.contains(&other) {
                    edges.insert(other);
                }
            }
        }
    }
    fn visit(
        node: &str,
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = Default::default();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn the_files_of_sync_import_one_another_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cycle = sync_import_cycle(&src);
    assert_eq!(
        cycle, None,
        "an import cycle among the files of sync: {cycle:?}"
    );
}

#[test]
fn a_planted_cycle_among_the_files_of_sync_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sync = dir.path().join("sync");
    fs::create_dir(&sync).expect("sync dir");
    fs::write(sync.join("mod.rs"), "pub mod a;\npub mod b;\npub mod c;\n").expect("mod.rs");
    fs::write(sync.join("a.rs"), "use super::b::B;\n").expect("a.rs");
    fs::write(
        sync.join("b.rs"),
        "use crate::sync::c::C;\n// super::a in a comment\n",
    )
    .expect("b.rs");
    fs::write(sync.join("c.rs"), "pub struct C;\n").expect("c.rs");
    assert_eq!(
        sync_import_cycle(dir.path()),
        None,
        "a -> b -> c is no cycle"
    );
    fs::write(sync.join("c.rs"), "fn f() { super::a::g() }\n").expect("c.rs");
    assert_eq!(
        sync_import_cycle(dir.path()),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
