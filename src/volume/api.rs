//! Setting up and refreshing configMap, secret, downwardAPI and projected volumes: read the
//! objects, build each volume's payload ([`super::projection`]), make its directory (a tmpfs
//! for everything but ConfigMaps, as the kubelet wraps them) and project the payload with the
//! atomic writer. Called on every pod sync, so a changed ConfigMap, Secret or pod label reaches
//! running containers through the `..data` swap.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use nix::sys::stat::{fchmod, fstat, Mode};
use nix::unistd::{fchown, Gid};

use super::atomic_writer::{for_each_beneath, write_payload, WriteOutcome};
use super::projection::{
    token_requests, volume_payload, volume_references, ApiVolumeKind, NodeAllocatable,
};
use super::{check_component, checked_pod_uid, emptydir, make_pod_dirs, mounts, VolumeError};
use crate::objects::{fetch_objects, FetchedTokens, ObjectSource};
use crate::podspec::references::FetchedObjects;

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// What setting up API volumes needs from the node.
#[derive(Debug, Clone, Copy)]
pub struct ApiVolumeContext<'a> {
    pub node: NodeAllocatable,
    /// The mount table consulted before mounting a tmpfs (`/proc/self/mountinfo`).
    pub mountinfo: &'a Path,
}

impl ApiVolumeContext<'static> {
    pub fn new(node: NodeAllocatable) -> ApiVolumeContext<'static> {
        ApiVolumeContext {
            node,
            mountinfo: Path::new(MOUNTINFO),
        }
    }
}

/// The result of one pass over a pod's API volumes.
#[derive(Debug, Default)]
pub struct ApiVolumes {
    /// Volume name → host path of every API volume containers can mount: set up now, or set
    /// up by an earlier pass and kept as it was because this pass failed (the kubelet keeps a
    /// mounted volume when a refresh fails).
    pub paths: BTreeMap<String, PathBuf>,
    /// Volumes this pass could not set up or refresh, each a `FailedMount` event
    /// (`MountVolume.SetUp failed for volume "x" : configmap "y" not found`).
    pub failures: Vec<VolumeError>,
}

impl ApiVolumes {
    /// The first failure of a volume that was never set up: the pod's containers cannot start
    /// yet and stay `ContainerCreating` (the kubelet waits for every volume of the pod).
    pub fn unmounted(&self) -> Option<&VolumeError> {
        self.failures.iter().find(|e| match e {
            VolumeError::MountFailed { volume, .. } => !self.paths.contains_key(volume),
            _ => true,
        })
    }
}

/// Reads what the pod's configMap, secret and projected volumes refer to from `objects` (and
/// the service account tokens of its projected volumes: cached ones while they are fresh,
/// refreshed ones when they are old), then sets up or refreshes every configMap, secret,
/// downwardAPI and projected volume of the pod (see [`set_up_api_volumes`]). A refreshed token
/// reaches the volume like a changed ConfigMap. Like the kubelet's atomic writer, it must not
/// run twice at once for one pod (the pod worker never syncs a pod twice at once).
pub async fn update_api_volumes(
    pod: &Pod,
    root_dir: &Path,
    objects: &dyn ObjectSource,
    ctx: &ApiVolumeContext<'_>,
) -> ApiVolumes {
    let refs = volume_references(pod);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let fetched = fetch_objects(objects, namespace, &refs).await;
    let tokens = FetchedTokens::fetch(objects, token_requests(pod)).await;
    set_up_api_volumes(
        pod,
        root_dir,
        &fetched,
        &tokens,
        ctx,
        jiff::Timestamp::now(),
    )
}

/// `<pod>/volumes/<plugin dir>/<volume>`.
pub fn api_volume_path(pod_dir: &Path, kind: ApiVolumeKind, volume: &str) -> PathBuf {
    pod_dir.join("volumes").join(kind.plugin_dir()).join(volume)
}

/// The effects of [`update_api_volumes`] once the objects are read: for each volume, its
/// payload is built first (a missing object leaves the directory alone), then the directory
/// is created (and a tmpfs mounted on it, falling back to the disk with a warning where
/// mounting is not permitted), then the payload is written atomically; `now` names the data
/// directory. With `spec.securityContext.fsGroup`, new data gets that group and group read
/// access (`SetVolumeOwnership` of a read-only volume).
pub fn set_up_api_volumes(
    pod: &Pod,
    root_dir: &Path,
    objects: &FetchedObjects,
    tokens: &FetchedTokens,
    ctx: &ApiVolumeContext<'_>,
    now: jiff::Timestamp,
) -> ApiVolumes {
    let mut out = ApiVolumes::default();
    let volumes: Vec<_> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .enumerate()
        .filter_map(|(i, v)| ApiVolumeKind::of(v).map(|k| (i, v, k)))
        .collect();
    if volumes.is_empty() {
        return out;
    }
    let pod_dir = match checked_pod_uid(pod).and_then(|uid| make_pod_dirs(root_dir, uid)) {
        Ok(dir) => dir,
        Err(e) => {
            out.failures.push(e);
            return out;
        }
    };
    let fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group);
    for (index, volume, kind) in volumes {
        if let Err(e) = check_component(&format!("spec.volumes[{index}].name"), &volume.name) {
            out.failures.push(e);
            continue;
        }
        let dir = api_volume_path(&pod_dir, kind, &volume.name);
        let set_up_before = fs::symlink_metadata(dir.join("..data")).is_ok();
        let failed = |message: String| VolumeError::MountFailed {
            volume: volume.name.clone(),
            message,
        };
        let payload = match volume_payload(volume, index, pod, objects, tokens, &ctx.node) {
            Some(Ok(payload)) => payload,
            Some(Err(message)) => {
                out.failures.push(failed(message));
                if set_up_before {
                    out.paths.insert(volume.name.clone(), dir);
                }
                continue;
            }
            None => continue,
        };
        if !set_up_before {
            if let Err(e) = prepare_dir(pod, &volume.name, &dir, kind, ctx) {
                out.failures.push(e);
                continue;
            }
        }
        let chown = |vol: BorrowedFd<'_>, data: BorrowedFd<'_>| -> io::Result<()> {
            if let Some(gid) = fs_group {
                apply_fs_group(&dir, vol, data, gid);
            }
            Ok(())
        };
        match write_payload(&dir, &payload, now, Some(&chown)) {
            Ok(WriteOutcome::Written(data)) => {
                tracing::debug!(volume = %volume.name, %data, "wrote volume data");
                out.paths.insert(volume.name.clone(), dir);
            }
            Ok(WriteOutcome::Unchanged) => {
                out.paths.insert(volume.name.clone(), dir);
            }
            Err(e) => {
                out.failures.push(failed(e.to_string()));
                if set_up_before {
                    out.paths.insert(volume.name.clone(), dir);
                }
            }
        }
    }
    out
}

/// Creates the volume directory (0777, as the kubelet's wrapped emptyDir) and, for
/// memory-backed kinds, mounts a tmpfs on it sized like a memory emptyDir without a size
/// limit. Where mounting is not permitted (an unprivileged nodelet, a test), the directory
/// stays on the node's disk and a warning says so: secrets then touch the disk.
fn prepare_dir(
    pod: &Pod,
    volume: &str,
    dir: &Path,
    kind: ApiVolumeKind,
    ctx: &ApiVolumeContext<'_>,
) -> Result<(), VolumeError> {
    let set_up = |source| VolumeError::SetUp {
        volume: volume.to_string(),
        path: dir.to_path_buf(),
        source,
    };
    emptydir::setup_dir(dir).map_err(set_up)?;
    if !kind.memory_backed() {
        return Ok(());
    }
    let table = fs::read_to_string(ctx.mountinfo).map_err(|source| VolumeError::Io {
        path: ctx.mountinfo.to_path_buf(),
        source,
    })?;
    let canonical = fs::canonicalize(dir).map_err(set_up)?;
    if mounts::is_mount_point(&table, &canonical) {
        return Ok(());
    }
    let size = emptydir::tmpfs_size(pod, None, Some(ctx.node.memory));
    // The tmpfs root keeps its own mode (01777), as the kubelet's wrapped emptyDir leaves it.
    match emptydir::mount_tmpfs(&canonical, size) {
        Ok(()) => Ok(()),
        Err(error) => {
            tracing::warn!(
                volume,
                path = %dir.display(),
                %error,
                "cannot mount a tmpfs for the volume; its files stay on the node's disk"
            );
            Ok(())
        }
    }
}

/// The mode bits `SetVolumeOwnership` adds for fsGroup on a read-only volume: group read, and
/// for directories also group search and setgid.
pub fn fs_group_mode(mode: u32, is_dir: bool) -> u32 {
    const READ: u32 = 0o440;
    const SEARCH: u32 = 0o110;
    const SETGID: u32 = 0o2000;
    if is_dir {
        mode | READ | SEARCH | SETGID
    } else {
        mode | READ
    }
}

/// Gives the volume directory `vol` and everything in the new data directory `data` (both
/// descriptors opened without following a symlink) the group `gid` and group read access, as
/// `SetVolumeOwnership` does for a read-only volume. Only the new data, written by nodelet and
/// not yet visible, is walked: nothing a container could have planted is followed or changed.
/// Like the kubelet, failures are logged and do not fail the volume; `dir` names the volume
/// in them.
fn apply_fs_group(dir: &Path, vol: BorrowedFd<'_>, data: BorrowedFd<'_>, gid: i64) {
    let Ok(gid) = u32::try_from(gid) else {
        tracing::warn!(gid, "fsGroup out of range; volume ownership unchanged");
        return;
    };
    let mut own = |fd: BorrowedFd<'_>, is_dir: bool| -> io::Result<()> {
        if let Err(error) = fchown(fd, None, Some(Gid::from_raw(gid))) {
            tracing::warn!(path = %dir.display(), %error, "chown for fsGroup");
        }
        let mode = fstat(fd)?.st_mode & 0o7777;
        let want = fs_group_mode(mode, is_dir);
        if want != mode {
            if let Err(error) = fchmod(fd, Mode::from_bits_truncate(want)) {
                tracing::warn!(path = %dir.display(), %error, "chmod for fsGroup");
            }
        }
        Ok(())
    };
    if let Err(error) = own(vol, true) {
        tracing::warn!(path = %dir.display(), %error, "setting volume ownership");
    }
    if let Err(error) = for_each_beneath(data, &mut own) {
        tracing::warn!(path = %dir.display(), %error, "setting volume ownership");
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use k8s_openapi::api::core::v1::{
        ConfigMap, ConfigMapVolumeSource, DownwardAPIVolumeFile, DownwardAPIVolumeSource,
        ObjectFieldSelector, PodSecurityContext, PodSpec, Secret, SecretVolumeSource, Volume,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::ByteString;

    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const NODE: NodeAllocatable = NodeAllocatable {
        cpu_milli: 2000,
        memory: 1 << 30,
        ephemeral_storage: None,
    };

    /// Unmounts whatever a test mounted below its root, even when the test fails.
    struct Root(tempfile::TempDir);

    impl Drop for Root {
        fn drop(&mut self) {
            let _ = super::super::cleanup_pod_dir(
                self.0.path(),
                "uid-1",
                &super::super::trash::Trash::new(self.0.path()).0,
            );
        }
    }

    fn root() -> Root {
        Root(tempfile::tempdir().unwrap())
    }

    fn now() -> jiff::Timestamp {
        "2024-05-01T10:00:00Z".parse().unwrap()
    }

    fn pod(volumes: Vec<Volume>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("uid-1".into()),
                labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(volumes),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn cm_volume(mode: Option<i32>) -> Volume {
        Volume {
            name: "cfg".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "settings".into(),
                default_mode: mode,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn objects(cm: Option<&[(&str, &str)]>) -> FetchedObjects {
        let cm = cm.map(|data| ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        });
        FetchedObjects {
            namespace: "prod".into(),
            env_files: Default::default(),
            config_maps: BTreeMap::from([("settings".to_string(), Ok(cm))]),
            secrets: BTreeMap::from([(
                "creds".to_string(),
                Ok(Some(Secret {
                    data: Some(BTreeMap::from([(
                        "password".to_string(),
                        ByteString(b"pw".to_vec()),
                    )])),
                    ..Default::default()
                })),
            )]),
            services: Default::default(),
        }
    }

    /// `set_up_api_volumes` on the test's root, with the node's real mount table and a fixed
    /// clock, as every test here calls it.
    fn set_up(
        p: &Pod,
        root: &Root,
        objects: &FetchedObjects,
        tokens: &FetchedTokens,
    ) -> ApiVolumes {
        set_up_api_volumes(
            p,
            root.0.path(),
            objects,
            tokens,
            &ApiVolumeContext::new(NODE),
            now(),
        )
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut out: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("..2024"))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn config_map_volume_is_written_and_updated_in_place() {
        let root = root();
        let p = pod(vec![cm_volume(None)]);
        let first = objects(Some(&[("a.conf", "1"), ("b.conf", "2")]));
        let out = set_up(&p, &root, &first, &FetchedTokens::default());
        assert!(out.failures.is_empty(), "{:?}", out.failures);
        let dir = root
            .0
            .path()
            .join("pods/uid-1/volumes/kubernetes.io~configmap/cfg");
        assert_eq!(out.paths["cfg"], dir);
        assert_eq!(names(&dir), ["..data", "a.conf", "b.conf"]);
        assert_eq!(fs::read_to_string(dir.join("a.conf")).unwrap(), "1");
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
            0o777
        );
        assert_eq!(
            fs::metadata(dir.join("a.conf"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o644
        );
        let data_before = fs::read_link(dir.join("..data")).unwrap();

        // an unchanged object writes nothing
        set_up(&p, &root, &first, &FetchedTokens::default());
        assert_eq!(fs::read_link(dir.join("..data")).unwrap(), data_before);

        // a change swaps the data; a removed key disappears
        let second = objects(Some(&[("a.conf", "one")]));
        let out = set_up(&p, &root, &second, &FetchedTokens::default());
        assert!(out.failures.is_empty());
        assert_ne!(fs::read_link(dir.join("..data")).unwrap(), data_before);
        assert_eq!(names(&dir), ["..data", "a.conf"]);
        assert_eq!(fs::read_to_string(dir.join("a.conf")).unwrap(), "one");
    }

    #[test]
    fn missing_object_is_a_failed_mount_and_a_set_up_volume_is_kept() {
        let root = root();
        let p = pod(vec![cm_volume(None)]);
        let dir = root
            .0
            .path()
            .join("pods/uid-1/volumes/kubernetes.io~configmap/cfg");

        let out = set_up(&p, &root, &objects(None), &FetchedTokens::default());
        let messages: Vec<String> = out.failures.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            messages,
            ["MountVolume.SetUp failed for volume \"cfg\" : configmap \"settings\" not found"]
        );
        assert!(out.paths.is_empty());
        assert!(out.unmounted().is_some());
        assert!(!dir.exists());

        let present = objects(Some(&[("k", "v")]));
        let out = set_up(&p, &root, &present, &FetchedTokens::default());
        assert!(out.unmounted().is_none() && out.failures.is_empty());

        // deleted later: the event again, but running and new containers keep the last data
        let out = set_up(&p, &root, &objects(None), &FetchedTokens::default());
        assert_eq!(out.failures.len(), 1);
        assert!(out.unmounted().is_none());
        assert_eq!(out.paths["cfg"], dir);
        assert_eq!(fs::read_to_string(dir.join("k")).unwrap(), "v");
    }

    #[test]
    fn memory_backed_volumes_use_a_tmpfs_or_fall_back_to_disk() {
        let root = root();
        let secret = Volume {
            name: "creds".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some("creds".into()),
                default_mode: Some(0o400),
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = pod(vec![secret]);
        let out = set_up(&p, &root, &objects(None), &FetchedTokens::default());
        assert!(out.failures.is_empty(), "{:?}", out.failures);
        let dir = &out.paths["creds"];
        assert!(dir.ends_with("volumes/kubernetes.io~secret/creds"));
        assert_eq!(fs::read_to_string(dir.join("password")).unwrap(), "pw");
        assert_eq!(
            fs::metadata(dir.join("password"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o400
        );
        let canonical = fs::canonicalize(dir).unwrap();
        let table = fs::read_to_string(MOUNTINFO).unwrap();
        let mounted = mounts::is_mount_point(&table, &canonical);
        if mounted {
            let line = table
                .lines()
                .find(|l| l.split(' ').nth(4) == canonical.to_str())
                .unwrap();
            // sized to the node's allocatable memory (the pod has no limit)
            assert!(
                line.contains("tmpfs") && line.contains("size=1048576k"),
                "{line}"
            );
            // the tmpfs root's own mode, as the kubelet's wrapped emptyDir leaves it
            assert_eq!(
                fs::metadata(dir).unwrap().permissions().mode() & 0o7777,
                0o1777
            );
        }
        // a second pass neither mounts again nor fails
        let out = set_up(&p, &root, &objects(None), &FetchedTokens::default());
        assert!(out.failures.is_empty());
        let table = fs::read_to_string(MOUNTINFO).unwrap();
        let count = mounts::mount_points(&table)
            .iter()
            .filter(|m| **m == canonical)
            .count();
        assert_eq!(count, usize::from(mounted));
    }

    /// The volume the ServiceAccount admission plugin adds to every pod.
    fn kube_api_access() -> Volume {
        serde_yaml::from_str(
            "
name: kube-api-access-abcde
projected:
  defaultMode: 420
  sources:
  - serviceAccountToken: {expirationSeconds: 3607, path: token}
  - configMap:
      name: kube-root-ca.crt
      items: [{key: ca.crt, path: ca.crt}]
  - downwardAPI:
      items:
      - path: namespace
        fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}
",
        )
        .unwrap()
    }

    fn root_ca() -> FetchedObjects {
        FetchedObjects {
            namespace: "prod".into(),
            env_files: Default::default(),
            config_maps: BTreeMap::from([(
                "kube-root-ca.crt".to_string(),
                Ok(Some(ConfigMap {
                    data: Some(BTreeMap::from([(
                        "ca.crt".to_string(),
                        "-----BEGIN CERTIFICATE-----\n".to_string(),
                    )])),
                    ..Default::default()
                })),
            )]),
            secrets: BTreeMap::new(),
            services: Default::default(),
        }
    }

    fn token(p: &Pod, value: &str) -> FetchedTokens {
        let mut tokens = FetchedTokens::default();
        for request in super::super::projection::token_requests(p) {
            tokens.insert(request, Ok(value.to_string()));
        }
        tokens
    }

    #[test]
    fn kube_api_access_volume_is_written_and_its_token_refreshed_in_place() {
        let root = root();
        let p = pod(vec![kube_api_access()]);
        let out = set_up(&p, &root, &root_ca(), &token(&p, "first"));
        assert!(out.failures.is_empty(), "{:?}", out.failures);
        let dir = root
            .0
            .path()
            .join("pods/uid-1/volumes/kubernetes.io~projected/kube-api-access-abcde");
        assert_eq!(out.paths["kube-api-access-abcde"], dir);
        assert_eq!(names(&dir), ["..data", "ca.crt", "namespace", "token"]);
        let cases = [
            ("token", "first"),
            ("namespace", "prod"),
            ("ca.crt", "-----BEGIN CERTIFICATE-----\n"),
        ];
        for (file, content) in cases {
            assert_eq!(
                fs::read_to_string(dir.join(file)).unwrap(),
                content,
                "{file}"
            );
            let mode = fs::metadata(dir.join(file)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "{file}");
        }
        let data_before = fs::read_link(dir.join("..data")).unwrap();

        // the same token: nothing is written
        set_up(&p, &root, &root_ca(), &token(&p, "first"));
        assert_eq!(fs::read_link(dir.join("..data")).unwrap(), data_before);

        // a refreshed token replaces the old one in place
        let out = set_up(&p, &root, &root_ca(), &token(&p, "second"));
        assert!(out.failures.is_empty(), "{:?}", out.failures);
        assert_ne!(fs::read_link(dir.join("..data")).unwrap(), data_before);
        assert_eq!(fs::read_to_string(dir.join("token")).unwrap(), "second");

        // a token that cannot be had: the event, and the volume keeps its last token
        let out = set_up(&p, &root, &root_ca(), &FetchedTokens::default());
        assert_eq!(
            out.failures[0].to_string(),
            "MountVolume.SetUp failed for volume \"kube-api-access-abcde\" : failed to fetch token: cannot use TokenManager when kubelet is in standalone mode"
        );
        assert!(out.unmounted().is_none());
        assert_eq!(fs::read_to_string(dir.join("token")).unwrap(), "second");
    }

    #[test]
    fn token_of_a_pod_with_fs_group_is_group_readable_only() {
        let root = root();
        let gid = nix::unistd::getgid().as_raw();
        let mut p = pod(vec![kube_api_access()]);
        p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            fs_group: Some(i64::from(gid)),
            ..Default::default()
        });
        let out = set_up(&p, &root, &root_ca(), &token(&p, "t0k"));
        let dir = &out.paths["kube-api-access-abcde"];
        // 0600 from the plugin, group read from SetVolumeOwnership; the others keep 0644
        let cases = [("token", 0o640), ("namespace", 0o644), ("ca.crt", 0o644)];
        for (file, want) in cases {
            let meta = fs::metadata(dir.join(file)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, want, "{file}");
            assert_eq!(meta.gid(), gid, "{file}");
        }
    }

    #[test]
    fn downward_api_volume_follows_label_changes() {
        let root = root();
        let volume = Volume {
            name: "info".into(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![DownwardAPIVolumeFile {
                    path: "labels".into(),
                    field_ref: Some(ObjectFieldSelector {
                        api_version: None,
                        field_path: "metadata.labels".into(),
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut p = pod(vec![volume]);
        let none = FetchedObjects::default();
        let out = set_up(&p, &root, &none, &FetchedTokens::default());
        let file = out.paths["info"].join("labels");
        assert_eq!(fs::read_to_string(&file).unwrap(), "app=\"web\"");
        p.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("tier".into(), "front".into());
        set_up(&p, &root, &none, &FetchedTokens::default());
        assert_eq!(
            fs::read_to_string(&file).unwrap(),
            "app=\"web\"\ntier=\"front\""
        );
    }

    #[test]
    fn fs_group_owns_the_volume_with_group_read() {
        let root = root();
        // The process's own group, so the test needs no privilege.
        let gid = nix::unistd::getgid().as_raw();
        let mut p = pod(vec![cm_volume(Some(0o400))]);
        p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            fs_group: Some(i64::from(gid)),
            ..Default::default()
        });
        let out = set_up(
            &p,
            &root,
            &objects(Some(&[("k", "v")])),
            &FetchedTokens::default(),
        );
        let dir = &out.paths["cfg"];
        let data = dir.join(fs::read_link(dir.join("..data")).unwrap());
        let cases = [
            (data.join("k"), 0o440),
            (data.clone(), 0o2755),
            (dir.clone(), 0o2777),
        ];
        for (path, mode) in cases {
            let meta = fs::metadata(&path).unwrap();
            assert_eq!(
                meta.permissions().mode() & 0o7777,
                mode,
                "{}",
                path.display()
            );
            assert_eq!(meta.gid(), gid, "{}", path.display());
        }
    }

    /// A container of an older, writable mount re-pointed `..data` at a host directory and a
    /// key at a host file: with fsGroup set, the next pass changes no owner, mode or content
    /// outside the volume, removes nothing there, and leaves a sound volume.
    #[test]
    fn fs_group_with_planted_links_changes_nothing_outside() {
        let root = root();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("k"), "host").unwrap();
        fs::set_permissions(outside.path().join("k"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(outside.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let stat = |p: &Path| {
            let m = fs::symlink_metadata(p).unwrap();
            (m.mode(), m.uid(), m.gid())
        };
        let before = (stat(outside.path()), stat(&outside.path().join("k")));
        // Another group needs privilege; without it the mode still shows a chmod.
        let gid = if nix::unistd::geteuid().is_root() {
            4242
        } else {
            nix::unistd::getgid().as_raw()
        };
        let mut p = pod(vec![cm_volume(Some(0o400))]);
        p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            fs_group: Some(i64::from(gid)),
            ..Default::default()
        });
        let out = set_up(
            &p,
            &root,
            &objects(Some(&[("k", "v")])),
            &FetchedTokens::default(),
        );
        let dir = out.paths["cfg"].clone();
        fs::remove_file(dir.join("..data")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.join("..data")).unwrap();
        fs::remove_file(dir.join("k")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("k"), dir.join("k")).unwrap();

        let out = set_up(
            &p,
            &root,
            &objects(Some(&[("k", "v")])),
            &FetchedTokens::default(),
        );
        assert!(out.failures.is_empty(), "{:?}", out.failures);
        assert_eq!(
            (stat(outside.path()), stat(&outside.path().join("k"))),
            before
        );
        assert_eq!(
            fs::read_to_string(outside.path().join("k")).unwrap(),
            "host"
        );
        assert_eq!(fs::read_to_string(dir.join("k")).unwrap(), "v");
        let meta = fs::metadata(dir.join("k")).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o440, gid));
    }

    #[test]
    fn fs_group_mode_table() {
        let cases = [
            (0o400, false, 0o440),
            (0o644, false, 0o644),
            (0o600, false, 0o640),
            (0o755, true, 0o2755),
            (0o700, true, 0o2750),
            (0o777, true, 0o2777),
        ];
        for (mode, is_dir, want) in cases {
            assert_eq!(fs_group_mode(mode, is_dir), want, "{mode:o} {is_dir}");
        }
    }

    #[test]
    fn invalid_uid_or_name_is_reported() {
        let root = root();
        let mut p = pod(vec![cm_volume(None)]);
        p.metadata.uid = Some("../x".into());
        let out = set_up(&p, &root, &objects(Some(&[])), &FetchedTokens::default());
        assert_eq!(
            out.failures[0].to_string(),
            "metadata.uid: Invalid value: \"../x\": must be a single path component"
        );
        assert!(out.unmounted().is_some());
    }
}
