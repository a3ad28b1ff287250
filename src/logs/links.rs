//! `/var/log/containers/<pod>_<namespace>_<container>-<containerID>.log`: the kubelet's links
//! to each container's current log file (`pkg/kubelet/kuberuntime/legacy.go`), which log
//! shippers (Fluent Bit, Fluentd, Filebeat) read, taking the pod's identity from the name. A
//! link is made when a container has started and its log file exists; container GC removes
//! links whose file is gone unless their container still runs (a rotation renames the file
//! for a moment).

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

/// The longest file name ext4 takes.
const MAX_FILE_NAME: usize = 255;
const SUFFIX: &str = ".log";

/// The link of one container instance (`legacyLogSymlink`): `<pod>_<namespace>_<container>-<id>.log`,
/// the part before `.log` cut at 251 bytes as the kubelet cuts it.
pub fn link_path(dir: &Path, pod: &str, namespace: &str, container: &str, id: &str) -> PathBuf {
    let mut name = format!("{pod}_{namespace}_{container}-{id}");
    let max = MAX_FILE_NAME - SUFFIX.len();
    if name.len() > max {
        let mut cut = max;
        // The kubelet cuts bytes; names are DNS labels (ASCII), but never split a character.
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    name.push_str(SUFFIX);
    dir.join(name)
}

/// The container ID a link's file name ends with (`getContainerIDFromLegacyLogSymlink`): after
/// the last `-`, before `.log`, at least 6 characters.
pub fn link_container_id(file_name: &str) -> Option<&str> {
    let id = file_name.rsplit('-').next()?.strip_suffix(SUFFIX)?;
    (id.len() >= 6).then_some(id)
}

/// Of the links whose target is gone (`dangling`, file names), those to remove: all but the
/// ones of containers still running (matched by ID prefix, as a cut name may hold only part
/// of the ID). A name without an ID is removed too, as the kubelet does.
pub fn links_to_remove<'a>(dangling: &'a [String], running: &HashSet<String>) -> Vec<&'a str> {
    dangling
        .iter()
        .filter(|name| {
            link_container_id(name).is_none_or(|id| !running.iter().any(|r| r.starts_with(id)))
        })
        .map(String::as_str)
        .collect()
}

/// Links `link` to `target` when the target exists (a link to nothing would only wait for GC,
/// as the kubelet reasons). Blocking, two syscalls.
pub fn create_link(target: &Path, link: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        _ => {}
    }
    if let Some(dir) = link.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::os::unix::fs::symlink(target, link)?;
    Ok(true)
}

/// The file names ending in `.log` in `dir` whose link leads nowhere (the kubelet's glob and
/// `Stat`). Blocking: one directory read.
pub fn dangling_links(dir: &Path) -> io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other?,
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !name.ends_with(SUFFIX) || !entry.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        if matches!(std::fs::metadata(entry.path()), Err(e) if e.kind() == io::ErrorKind::NotFound)
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_as_the_kubelets() {
        let dir = Path::new("/var/log/containers");
        assert_eq!(
            link_path(dir, "web-0", "default", "nginx", "4f2a9c"),
            PathBuf::from("/var/log/containers/web-0_default_nginx-4f2a9c.log")
        );
        let id = "a".repeat(64);
        let long_pod = "p".repeat(200);
        let cut = link_path(dir, &long_pod, "ns", "c", &id);
        let name = cut.file_name().unwrap().to_str().unwrap();
        assert_eq!(name.len(), 255);
        assert!(
            name.ends_with(&format!("_ns_c-{}.log", &id[..45])),
            "{name}"
        );
        assert_eq!(link_container_id(name), Some(&id[..45]));
    }

    #[test]
    fn container_ids_from_link_names() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                "web-0_default_nginx-4f2a9cdeadbeef.log",
                Some("4f2a9cdeadbeef"),
            ),
            ("web_default_c-abcdef.log", Some("abcdef")),
            ("web_default_c-abcde.log", None),
            ("web_default_c-4f2a9cdeadbeef.txt", None),
            // Without a '-' the whole name is taken, as Go's `strings.Split` gives it.
            ("noseparator.log", Some("noseparator")),
            ("short.log", None),
        ];
        for (name, want) in cases {
            assert_eq!(link_container_id(name), *want, "{name}");
        }
    }

    #[test]
    fn dangling_links_of_running_containers_stay() {
        let dangling: Vec<String> = [
            "a_ns_c-1111111111.log",
            "b_ns_c-2222222222.log",
            "cut_ns_c-333333.log",
            "odd.log",
        ]
        .map(String::from)
        .to_vec();
        let running: HashSet<String> = ["2222222222".into(), "333333abcdef".into()].into();
        assert_eq!(
            links_to_remove(&dangling, &running),
            ["a_ns_c-1111111111.log", "odd.log"]
        );
        assert_eq!(links_to_remove(&dangling, &HashSet::new()).len(), 4);
    }

    #[test]
    fn links_made_and_found_dangling() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("pods/ns_p_u/c/0.log");
        let links = tmp.path().join("containers");
        let link = link_path(&links, "p", "ns", "c", "abcdef123");
        assert!(!create_link(&target, &link).unwrap(), "no file: no link");
        assert!(!link.exists());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(&target, "x").unwrap();
        assert!(create_link(&target, &link).unwrap());
        assert_eq!(std::fs::read_link(&link).unwrap(), target);
        std::fs::write(links.join("plain.log"), "not a link").unwrap();
        assert!(dangling_links(&links).unwrap().is_empty());
        std::fs::remove_file(&target).unwrap();
        assert_eq!(dangling_links(&links).unwrap(), ["p_ns_c-abcdef123.log"]);
        assert!(dangling_links(&tmp.path().join("missing"))
            .unwrap()
            .is_empty());
    }
}
