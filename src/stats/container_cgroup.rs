//! Where a container's cgroup is: asked of the runtime, not guessed.
//!
//! The runtime decides the last component (containerd: `<pod cgroup>/<id>` with the cgroupfs
//! driver, `<pod slice>/cri-containerd-<id>.scope` with systemd; CRI-O and other shims name it
//! differently), so nodelet reads the path the runtime gave the OCI runtime:
//! `runtimeSpec.linux.cgroupsPath` in the verbose `ContainerStatus` info, which containerd and
//! CRI-O both return. It is fixed for the life of a container, so it is asked once per container
//! ID (see [`super::provider`]). The task PID's `/proc/<pid>/cgroup` would say the same, but
//! needs the PID from the same verbose info and races with the container's exit.
//!
//! The path has one of two forms:
//! - cgroupfs: an absolute path, `/kubepods/burstable/pod<uid>/<id>`;
//! - systemd: `<slice>:<prefix>:<name>`, e.g.
//!   `kubepods-burstable-pod<uid_>.slice:cri-containerd:<id>`, which systemd places at
//!   `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope`
//!   (runc's `ExpandSlice` and unit naming).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::cgroup::CgroupReader;
use crate::cri::StatsRuntime;

/// The image name the runtime put in the container's OCI spec (containerd's
/// `io.kubernetes.cri.image-name` annotation, the name cAdvisor labels the container with),
/// from the same verbose info as the cgroup path; `None` where the runtime sets none.
pub fn image_name_from_info(info: &HashMap<String, String>) -> Option<String> {
    let document: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    document
        .pointer("/runtimeSpec/annotations/io.kubernetes.cri.image-name")?
        .as_str()
        .filter(|name| !name.is_empty())
        .map(str::to_string)
}

/// The `cgroupsPath` of the OCI spec in a verbose `ContainerStatus` info map (key `info`, a
/// JSON document with `runtimeSpec.linux.cgroupsPath`).
pub fn cgroups_path_from_info(info: &HashMap<String, String>) -> Option<String> {
    let document: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    document
        .pointer("/runtimeSpec/linux/cgroupsPath")?
        .as_str()
        .filter(|p| !p.is_empty())
        .map(str::to_string)
}

/// Whether the kernel OOM-killed in a container's cgroup, read from the cgroup's own count
/// (`CgroupReader::oom_kills`) where the runtime's verbose status places it: the PLEG asks it
/// for a SIGKILL exit whose `/tasks/oom` event has not come (containerd publishes the two in
/// either order, and its CRI may record the exit as `Error` before the OOM). The runtime
/// removes the cgroup when it deletes the task, so the answer is often "not known".
pub struct ContainerOomKills {
    runtime: Arc<dyn StatsRuntime>,
    reader: CgroupReader,
}

impl ContainerOomKills {
    pub fn new(runtime: Arc<dyn StatsRuntime>, reader: CgroupReader) -> Self {
        ContainerOomKills { runtime, reader }
    }
}

#[async_trait]
impl crate::pleg::OomKills for ContainerOomKills {
    async fn oom_killed(&self, container_id: &str) -> Option<bool> {
        let info = self.runtime.container_info(container_id).await.ok()?;
        let cgroup = cgroup_of_cgroups_path(&cgroups_path_from_info(&info)?).ok()?;
        let reader = self.reader.clone();
        // A few small files, but a blocking read all the same: off the async workers.
        let kills = tokio::task::spawn_blocking(move || reader.oom_kills(&cgroup))
            .await
            .ok()?;
        match kills {
            Ok(count) => count.map(|n| n > 0),
            Err(e) => {
                tracing::debug!(container = %container_id, error = %e, "container OOM count");
                None
            }
        }
    }
}

/// A `cgroupsPath` (either driver's form) → the cgroup's path below the mount point.
pub fn cgroup_of_cgroups_path(cgroups_path: &str) -> Result<String, String> {
    if cgroups_path.starts_with('/') {
        return Ok(cgroups_path.to_string());
    }
    let parts: Vec<&str> = cgroups_path.split(':').collect();
    let [slice, prefix, name] = parts[..] else {
        // runc treats a relative path without the systemd form as relative to its own cgroup;
        // nodelet's runtimes never hand one out for pods.
        return Err(format!(
            "cgroupsPath {cgroups_path:?} is neither absolute nor slice:prefix:name"
        ));
    };
    if name.is_empty() {
        return Err(format!("cgroupsPath {cgroups_path:?} has no unit name"));
    }
    let parent = expand_slice(if slice.is_empty() {
        "system.slice"
    } else {
        slice
    })?;
    let unit = if name.ends_with(".slice") {
        name.to_string()
    } else if prefix.is_empty() {
        format!("{name}.scope")
    } else {
        format!("{prefix}-{name}.scope")
    };
    Ok(if parent == "/" {
        format!("/{unit}")
    } else {
        format!("{parent}/{unit}")
    })
}

/// A systemd slice name → its cgroup path: `a-b-c.slice` is `/a.slice/a-b.slice/a-b-c.slice`,
/// `-.slice` is the root.
pub fn expand_slice(slice: &str) -> Result<String, String> {
    let bad = || format!("invalid slice name {slice:?}");
    let name = slice.strip_suffix(".slice").ok_or_else(bad)?;
    if name.is_empty() || slice.contains('/') {
        return Err(bad());
    }
    if name == "-" {
        return Ok("/".to_string());
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for component in name.split('-') {
        if component.is_empty() {
            return Err(bad());
        }
        path.push('/');
        path.push_str(&prefix);
        path.push_str(component);
        path.push_str(".slice");
        prefix.push_str(component);
        prefix.push('-');
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroups_path_table() {
        let cases = [
            (
                "/kubepods/burstable/pod1234-5678/abcdef",
                Ok("/kubepods/burstable/pod1234-5678/abcdef"),
            ),
            (
                "kubepods-burstable-pod1234_5678.slice:cri-containerd:abcdef",
                Ok("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice/cri-containerd-abcdef.scope"),
            ),
            (
                "kubepods-pod1234_5678.slice:cri-containerd:abcdef",
                Ok("/kubepods.slice/kubepods-pod1234_5678.slice/cri-containerd-abcdef.scope"),
            ),
            // CRI-O's prefix
            (
                "kubepods-besteffort-podab.slice:crio:0123",
                Ok("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podab.slice/crio-0123.scope"),
            ),
            (":cri-containerd:x", Ok("/system.slice/cri-containerd-x.scope")),
            ("-.slice:p:x", Ok("/p-x.scope")),
            ("machine.slice::x.slice", Ok("/machine.slice/x.slice")),
            (
                "kubepods",
                Err("cgroupsPath \"kubepods\" is neither absolute nor slice:prefix:name"),
            ),
            ("a.slice:p:", Err("cgroupsPath \"a.slice:p:\" has no unit name")),
            ("a--b.slice:p:x", Err("invalid slice name \"a--b.slice\"")),
            ("nope:p:x", Err("invalid slice name \"nope\"")),
        ];
        for (input, want) in cases {
            assert_eq!(
                cgroup_of_cgroups_path(input),
                want.map(str::to_string).map_err(str::to_string),
                "{input}"
            );
        }
    }

    #[test]
    fn reads_the_path_from_verbose_info() {
        let info = |json: &str| HashMap::from([("info".to_string(), json.to_string())]);
        let containerd = info(
            r#"{"sandboxID":"s","pid":4242,"runtimeSpec":{"ociVersion":"1.0.2","linux":{"cgroupsPath":"/kubepods/besteffort/podu/c1","namespaces":[]}}}"#,
        );
        assert_eq!(
            cgroups_path_from_info(&containerd).as_deref(),
            Some("/kubepods/besteffort/podu/c1")
        );
        assert_eq!(cgroups_path_from_info(&HashMap::new()), None);
        // (info, the image name read from it)
        let images = [
            (
                r#"{"runtimeSpec":{"annotations":{"io.kubernetes.cri.image-name":"localhost/testbox:1"}}}"#,
                Some("localhost/testbox:1"),
            ),
            (
                r#"{"runtimeSpec":{"annotations":{"io.kubernetes.cri.image-name":""}}}"#,
                None,
            ),
            (r#"{"runtimeSpec":{"annotations":{}}}"#, None),
            ("not json", None),
        ];
        for (text, want) in images {
            assert_eq!(image_name_from_info(&info(text)).as_deref(), want, "{text}");
        }
        assert_eq!(cgroups_path_from_info(&info("not json")), None);
        assert_eq!(cgroups_path_from_info(&info(r#"{"runtimeSpec":{}}"#)), None);
        assert_eq!(
            cgroups_path_from_info(&info(r#"{"runtimeSpec":{"linux":{"cgroupsPath":""}}}"#)),
            None
        );
    }
}
