//! The module layering of `docs/architecture.md` ("Who imports whom"), checked on the source.
//!
//! Every top-level module of `src/` has a row in [`ROWS`]; a module may refer only to modules of
//! a lower row (a higher number), never to its own row or above. So there is no import cycle
//! between modules, and what two modules of one row need to share lives in a row below both.
//!
//! The scanner reads each file as the compiler would for this purpose: comments and string
//! literals removed, `crate::…` and `super::…` paths resolved against the file's module path
//! (inline `mod x { … }` blocks included), grouped imports (`use crate::{a, b::{c, d}}`) over
//! several lines. `docs/architecture.md` carries the same rows and the resulting graph between
//! its `layering` markers; a test compares them, so the picture cannot drift from the code.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Rows from the top (1) down; a module imports only modules of a higher row number.
const ROWS: &[(u8, &[&str])] = &[
    (1, &["agent"]),
    (2, &["server"]),
    (
        3,
        &["pod", "gc", "eviction", "nodeshutdown", "node", "plugins"],
    ),
    (4, &["lifecycle"]),
    (5, &["sync"]),
    (6, &["probe", "events", "stats", "images"]),
    (7, &["status", "volume", "pleg", "logs"]),
    (8, &["cgroup"]),
    (9, &["certificate", "objects"]),
    (10, &["cluster", "cri", "csi"]),
    (11, &["source"]),
    (12, &["config"]),
    (13, &["podspec", "watchdog"]),
    (
        14,
        &[
            "clock",
            "quantity",
            "backoff",
            "places",
            "metrics",
            "query",
            "redact",
            "allocator",
            "userns",
            "unix_grpc",
        ],
    ),
];

/// Files of `src/` that are no module of the library: the crate roots.
const CRATE_ROOTS: &[&str] = &["lib.rs", "main.rs"];

fn row(module: &str) -> Option<u8> {
    ROWS.iter()
        .find(|(_, ms)| ms.contains(&module))
        .map(|(r, _)| *r)
}

/// The source with comments removed and the contents of string and character literals blanked
/// (newlines kept, so byte offsets still give line numbers).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend([b' ', b' ']);
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend([b' ', b' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == b'r'
            && matches!(b.get(i + 1), Some(b'#') | Some(b'"'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: r"…", r#"…"#, … (a lone `r#ident` is a raw identifier).
            let hashes = b[i + 1..].iter().take_while(|&&h| h == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let start = i + 2 + hashes;
            let end = b[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| start + p + close.len());
            out.extend(b[i..end].iter().map(|&x| blank(x)));
            i = end;
        } else if c == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    out.push(b' ');
                    out.push(blank(b[i + 1]));
                    i += 2;
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{7b}'), else a lifetime or label.
            let len = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&x| x == b'\'').map(|p| p + 3)
            } else {
                let ch_len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch_len) == Some(&b'\'')).then_some(ch_len + 2)
            };
            match len {
                Some(n) => {
                    out.extend(std::iter::repeat_n(b' ', n));
                    i += n;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).expect("only ASCII was replaced")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The first segments of the paths of a use-tree starting at `s` (after `crate::` or a
/// resolved `super::`): `x::y` gives `x`, `{a, b::{c, d}}` gives `a` and `b`.
fn first_segments(s: &str) -> Vec<String> {
    let s = s.trim_start();
    let Some(group) = s.strip_prefix('{') else {
        let name: String = s
            .bytes()
            .take_while(|&c| is_ident(c))
            .map(char::from)
            .collect();
        return if name.is_empty() { vec![] } else { vec![name] };
    };
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut item_start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && !c.is_whitespace() => {
                item_start = false;
                names.extend(first_segments(&group[i..]));
            }
            _ => {}
        }
    }
    names
}

/// The module path of a file under `src/`: `a.rs` and `a/mod.rs` are `[a]`, `a/b.rs` is `[a, b]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// One reference from a file to a top-level module: its line and the module.
#[derive(Debug, PartialEq, Eq)]
struct Reference {
    line: usize,
    module: String,
}

/// Every top-level module `text` (the file at `rel` under `src/`) refers to by path.
fn references(rel: &Path, text: &str) -> Vec<Reference> {
    let code = code_only(text);
    let b = code.as_bytes();
    let file_path = module_path(rel);
    // Inline modules open at this point: (name, brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending_mod: Option<String> = None;
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let word_start = i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b':');
        match c {
            b'\n' => line += 1,
            b'{' => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline.push((name, depth));
                }
            }
            b'}' => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            b';' => pending_mod = None,
            _ => {}
        }
        if word_start && b[i..].starts_with(b"mod ") {
            let name: String = code[i + 4..]
                .trim_start()
                .bytes()
                .take_while(|&c| is_ident(c))
                .map(char::from)
                .collect();
            pending_mod = Some(name);
        }
        let resolved = if word_start && b[i..].starts_with(b"crate::") {
            Some((i + "crate::".len(), Vec::<String>::new()))
        } else if word_start && b[i..].starts_with(b"super::") {
            let mut at = i;
            let mut ups = 0;
            while b[at..].starts_with(b"super::") {
                ups += 1;
                at += "super::".len();
            }
            let mut path: Vec<String> = file_path.clone();
            path.extend(inline.iter().map(|(n, _)| n.clone()));
            path.truncate(path.len().saturating_sub(ups));
            Some((at, path))
        } else {
            None
        };
        if let Some((at, base)) = resolved {
            let top: Vec<String> = match base.first() {
                Some(top) => vec![top.clone()],
                None => first_segments(&code[at..]),
            };
            for module in top {
                out.push(Reference {
                    line,
                    module: module.clone(),
                });
            }
        }
        i += 1;
    }
    out
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

/// The top-level modules of `src/` (a `x.rs` or a `x/` directory), crate roots left out.
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    fs::read_dir(src)
        .unwrap_or_else(|e| panic!("reading {}: {e}", src.display()))
        .map(|e| e.expect("directory entry").path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            if p.is_dir() {
                Some(name)
            } else if name.ends_with(".rs") && !CRATE_ROOTS.contains(&name.as_str()) {
                Some(name.trim_end_matches(".rs").to_string())
            } else {
                None
            }
        })
        .collect()
}

/// Every module's references to other top-level modules: (from, to) → the first `file:line`.
fn graph(src: &Path) -> BTreeMap<(String, String), String> {
    let modules = top_level_modules(src);
    let mut edges = BTreeMap::new();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        if rel.components().count() == 1 && CRATE_ROOTS.contains(&rel.to_str().expect("UTF-8 path"))
        {
            continue;
        }
        let from = module_path(rel).remove(0);
        let text =
            fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for r in references(rel, &text) {
            if r.module != from && modules.contains(&r.module) {
                edges
                    .entry((from.clone(), r.module))
                    .or_insert_with(|| format!("{}:{}", file.display(), r.line));
            }
        }
    }
    edges
}

/// `file:line: <module> (row r) imports <other> (row s)` for every import against the rows.
fn violations(src: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for ((from, to), at) in graph(src) {
        let (Some(own), Some(theirs)) = (row(&from), row(&to)) else {
            continue;
        };
        if theirs <= own {
            out.push(format!(
                "{at}: {from} (row {own}) imports {to} (row {theirs}), which is not below it"
            ));
        }
    }
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_has_exactly_one_row() {
    let modules = top_level_modules(&src());
    let listed: Vec<&str> = ROWS.iter().flat_map(|(_, ms)| ms.iter().copied()).collect();
    let unlisted: Vec<&String> = modules
        .iter()
        .filter(|m| !listed.contains(&m.as_str()))
        .collect();
    assert!(unlisted.is_empty(), "modules without a row: {unlisted:?}");
    let gone: Vec<&&str> = listed.iter().filter(|m| !modules.contains(**m)).collect();
    assert!(
        gone.is_empty(),
        "rows name modules that do not exist: {gone:?}"
    );
    let unique: BTreeSet<&str> = listed.iter().copied().collect();
    assert_eq!(unique.len(), listed.len(), "a module in two rows");
}

#[test]
fn every_import_points_down_the_rows() {
    let found = violations(&src());
    assert!(
        found.is_empty(),
        "imports against the layering of docs/architecture.md (move what is shared below both):\n{}",
        found.join("\n")
    );
}

/// The block between the `layering` markers of `docs/architecture.md`: each row, then each
/// module with the modules it imports.
fn rendered(src: &Path) -> String {
    let edges = graph(src);
    let mut out = String::from("```text\n");
    for (r, modules) in ROWS {
        out.push_str(&format!("row {r:>2}: {}\n", modules.join(", ")));
    }
    out.push('\n');
    for (_, modules) in ROWS {
        for m in *modules {
            let to: Vec<&str> = edges
                .keys()
                .filter(|(from, _)| from == m)
                .map(|(_, to)| to.as_str())
                .collect();
            let to = if to.is_empty() {
                "(nothing)".to_string()
            } else {
                to.join(", ")
            };
            out.push_str(&format!("{m:<13}→ {to}\n"));
        }
    }
    out.push_str("```\n");
    out
}

#[test]
fn the_architecture_doc_shows_the_rows_and_the_graph_of_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = fs::read_to_string(root.join("docs/architecture.md")).expect("architecture.md");
    let begin = "<!-- layering:begin (tests/layering.rs renders this block) -->\n";
    let end = "<!-- layering:end -->";
    let start = doc
        .find(begin)
        .expect("the begin marker in docs/architecture.md")
        + begin.len();
    let stop = doc[start..].find(end).expect("the end marker") + start;
    let want = rendered(&src());
    assert!(
        doc[start..stop] == want,
        "docs/architecture.md's layering block is not the code's; it should read:\n{want}"
    );
}

#[test]
fn the_scanner_resolves_every_form_of_path() {
    let refs = |rel: &str, text: &str| -> Vec<(usize, String)> {
        references(Path::new(rel), text)
            .into_iter()
            .map(|r| (r.line, r.module))
            .collect()
    };
    let m = |pairs: &[(usize, &str)]| -> Vec<(usize, String)> {
        pairs.iter().map(|(l, s)| (*l, s.to_string())).collect()
    };
    type Case = (&'static str, &'static str, Vec<(usize, String)>);
    let cases: &[Case] = &[
        (
            "status/x.rs",
            "use crate::sync::env::expand;",
            m(&[(1, "sync")]),
        ),
        (
            "status/x.rs",
            "fn f() {\n    crate::sync::restart::x(a, b)\n}",
            m(&[(2, "sync")]),
        ),
        (
            "status/x.rs",
            "use crate::{cri, status::StatusManager, volume::{a, b}};",
            m(&[(1, "cri"), (1, "status"), (1, "volume")]),
        ),
        (
            "status/x.rs",
            "use crate::{\n    podspec::{ConfigError, env},\n    sync,\n};",
            m(&[(1, "podspec"), (1, "sync")]),
        ),
        // `super` from a top file is the crate root; from a file below, its own module.
        ("status.rs", "use super::sync;", m(&[(1, "sync")])),
        (
            "status/mod.rs",
            "use super::{sync, cri};",
            m(&[(1, "sync"), (1, "cri")]),
        ),
        (
            "cgroup/x.rs",
            "use super::node::PodShare;",
            m(&[(1, "cgroup")]),
        ),
        (
            "cgroup/a/b.rs",
            "use super::super::node::X;",
            m(&[(1, "cgroup")]),
        ),
        (
            "cgroup/x.rs",
            "use super::super::node::X;",
            m(&[(1, "node")]),
        ),
        // Inside an inline module `super` is the file's module.
        (
            "cgroup/mod.rs",
            "fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::node::X;\n}\nuse super::pod;",
            m(&[(4, "cgroup"), (6, "pod")]),
        ),
        // Comments, strings and characters are no code; other crates' `sync` is no module.
        ("status/x.rs", "// crate::sync in a comment", m(&[])),
        (
            "status/x.rs",
            "use crate::cri::api; // see crate::sync",
            m(&[(1, "cri")]),
        ),
        (
            "status/x.rs",
            "let s = \"crate::sync\"; let t = r#\"super::a\"#;",
            m(&[]),
        ),
        (
            "status.rs",
            "let c = '{'; mod x { use super::super::sync; }",
            m(&[(1, "sync")]),
        ),
        (
            "status/x.rs",
            "/* crate::sync */ fn f<'a>(x: &'a str) {}",
            m(&[]),
        ),
        (
            "status/x.rs",
            "use crate::synchronise::x;",
            m(&[(1, "synchronise")]),
        ),
        (
            "status/x.rs",
            "use tokio::sync::watch; use my_crate::x;",
            m(&[]),
        ),
        ("status/x.rs", "$crate::sync::x", m(&[(1, "sync")])),
    ];
    for (rel, text, want) in cases {
        assert_eq!(&refs(rel, text), want, "{rel}: {text}");
    }
}

/// A tree of empty modules, one per row entry, under a temporary `src/`.
fn planted_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (_, modules) in ROWS {
        for m in *modules {
            fs::create_dir(dir.path().join(m)).expect("module dir");
            fs::write(dir.path().join(m).join("mod.rs"), "pub mod x;\n").expect("mod.rs");
            fs::write(dir.path().join(m).join("x.rs"), "\n").expect("x.rs");
        }
    }
    dir
}

#[test]
fn a_planted_upward_import_is_reported_with_file_and_line() {
    let dir = planted_tree();
    assert_eq!(violations(dir.path()), Vec::<String>::new());
    fs::write(
        dir.path().join("status").join("x.rs"),
        "use std::fmt;\nuse crate::sync::restart::should_restart;\n",
    )
    .expect("x.rs");
    let found = violations(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("status/x.rs:2: status (row 7) imports sync (row 5)"),
        "{}",
        found[0]
    );
}

#[test]
fn a_planted_import_within_a_row_is_reported() {
    let dir = planted_tree();
    fs::write(
        dir.path().join("eviction").join("x.rs"),
        "fn f() {\n    let _ = crate::pod::kill::PodKiller::new();\n}\n",
    )
    .expect("x.rs");
    let found = violations(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("eviction/x.rs:2: eviction (row 3) imports pod (row 3)"),
        "{}",
        found[0]
    );
}

/// The other files of `sync` a file of `<src>/sync` refers to (`super::x` from a file of sync,
/// `crate::sync::x`), code only.
fn sync_files_referenced(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for prefix in ["super::", "crate::sync::"] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let after = &rest[at + prefix.len()..];
            found.extend(first_segments(after));
            rest = after;
        }
    }
    found
}

/// An import cycle among the files of `<src>/sync` (`a -> b -> a`), if there is one.
fn sync_import_cycle(src: &Path) -> Option<Vec<String>> {
    let dir = src.join("sync");
    let mut graph: BTreeMap<String, BTreeSet<String>> = Default::default();
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
        let code = code_only(text.split("#[cfg(test)]").next().unwrap_or(&text));
        let edges = graph.entry(name.to_string()).or_default();
        for other in sync_files_referenced(&code) {
            if other != name && names.contains(&other) {
                edges.insert(other);
            }
        }
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
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
    let cycle = sync_import_cycle(&src());
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
