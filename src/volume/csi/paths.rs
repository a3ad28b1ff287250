//! The kubelet's on-disk layout for CSI volumes (`pkg/volume/csi/csi_attacher.go`,
//! `csi_mounter.go`, `csi_util.go`), kept exactly so a restart of nodelet — or of a kubelet in
//! its place — finds the volumes again:
//!
//! ```text
//! <root>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount   staging path
//! <root>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/vol_data.json
//! <root>/pods/<uid>/volumes/kubernetes.io~csi/<specVolumeID>/mount               target path
//! <root>/pods/<uid>/volumes/kubernetes.io~csi/<specVolumeID>/vol_data.json
//! ```
//!
//! `vol_data.json` is written atomically (a temporary file renamed over it) and read back
//! opened beneath its directory with `O_NOFOLLOW`, at most [`MAX_VOL_DATA`] bytes.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The plugin's name in unique volume names and under `plugins/`.
pub const CSI_PLUGIN_NAME: &str = "kubernetes.io/csi";
/// The plugin's directory name below a pod's `volumes/` (`kubernetes.io~csi`).
pub const CSI_POD_PLUGIN_DIR: &str = "kubernetes.io~csi";
pub const GLOBAL_MOUNT: &str = "globalmount";
pub const POD_MOUNT: &str = "mount";
pub const VOL_DATA_FILE: &str = "vol_data.json";
/// vol_data.json is a handful of short strings; anything longer is not one of ours.
pub const MAX_VOL_DATA: u64 = 64 * 1024;

/// The keys of vol_data.json (`csi_util.go`'s `volDataKey`).
pub mod keys {
    pub const SPEC_VOLUME_ID: &str = "specVolumeID";
    pub const VOLUME_HANDLE: &str = "volumeHandle";
    pub const DRIVER_NAME: &str = "driverName";
    pub const NODE_NAME: &str = "nodeName";
    pub const ATTACHMENT_ID: &str = "attachmentID";
    pub const VOLUME_LIFECYCLE_MODE: &str = "volumeLifecycleMode";
}

/// Lower-case hex of SHA-256 (Go's `fmt.Sprintf("%x", sha256.Sum256(...))`).
pub fn sha256_hex(data: &str) -> String {
    hex::encode(Sha256::digest(data.as_bytes()))
}

/// The VolumeAttachment the attach/detach controller makes for a volume on a node
/// (`getAttachmentName`): `csi-<sha256(volumeHandle + driver + nodeName)>`.
pub fn attachment_name(handle: &str, driver: &str, node_name: &str) -> String {
    format!(
        "csi-{}",
        sha256_hex(&format!("{handle}{driver}{node_name}"))
    )
}

/// The handle of an inline (ephemeral) CSI volume (`makeVolumeHandle`):
/// `csi-<sha256(podUID + volumeName)>`.
pub fn inline_volume_handle(pod_uid: &str, volume_name: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{pod_uid}{volume_name}")))
}

/// The unique volume name (`kubernetes.io/csi/<driver>^<volumeHandle>`), as `volumesInUse`
/// lists it.
pub fn unique_volume_name(driver: &str, handle: &str) -> String {
    format!("{CSI_PLUGIN_NAME}/{driver}^{handle}")
}

/// Whether `value` can be one path component.
pub fn is_component(value: &str) -> bool {
    !(value.is_empty()
        || value == "."
        || value == ".."
        || value.contains('/')
        || value.contains('\0'))
}

/// `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>`: the volume's node-wide
/// directory (`globalmount` and its vol_data.json inside).
pub fn global_dir(root_dir: &Path, driver: &str, handle: &str) -> PathBuf {
    root_dir
        .join("plugins")
        .join(CSI_PLUGIN_NAME)
        .join(driver)
        .join(sha256_hex(handle))
}

/// `<root>/plugins/kubernetes.io/csi/volumeDevices`: raw block volumes (`csi_block.go`).
pub fn block_root(root_dir: &Path) -> PathBuf {
    root_dir
        .join("plugins")
        .join(CSI_PLUGIN_NAME)
        .join("volumeDevices")
}

/// `…/volumeDevices/staging/<specName>`: a block volume's `staging_target_path` (a directory).
pub fn block_staging_path(root_dir: &Path, spec_name: &str) -> PathBuf {
    block_root(root_dir).join("staging").join(spec_name)
}

/// `…/volumeDevices/publish/<specName>`: the parent of a block volume's pod targets.
pub fn block_publish_dir(root_dir: &Path, spec_name: &str) -> PathBuf {
    block_root(root_dir).join("publish").join(spec_name)
}

/// `…/volumeDevices/publish/<specName>/<podUID>`: one pod's `target_path`, a file the driver
/// makes and binds the device on.
pub fn block_publish_path(root_dir: &Path, spec_name: &str, pod_uid: &str) -> PathBuf {
    block_publish_dir(root_dir, spec_name).join(pod_uid)
}

/// `…/volumeDevices/<specName>/data`: the block volume's vol_data.json.
pub fn block_data_dir(root_dir: &Path, spec_name: &str) -> PathBuf {
    block_root(root_dir).join(spec_name).join("data")
}

/// The names under `block_root` that are not volumes.
pub const BLOCK_RESERVED: &[&str] = &["staging", "publish"];

/// `<root>/pods/<uid>/volumes/kubernetes.io~csi/<specVolumeID>`: one pod volume's directory
/// (`mount` and its vol_data.json inside). A spec name with `/` has it escaped as `~`
/// (`EscapeQualifiedName`).
pub fn pod_volume_dir(root_dir: &Path, pod_uid: &str, spec_name: &str) -> PathBuf {
    pod_plugin_dir(root_dir, pod_uid).join(spec_name.replace('/', "~"))
}

/// `<root>/pods/<uid>/volumes/kubernetes.io~csi`.
pub fn pod_plugin_dir(root_dir: &Path, pod_uid: &str) -> PathBuf {
    super::super::pod_dir(root_dir, pod_uid)
        .join("volumes")
        .join(CSI_POD_PLUGIN_DIR)
}

/// vol_data.json's contents.
pub type VolData = BTreeMap<String, String>;

/// Writes `<dir>/vol_data.json` atomically (creating `dir`, 0750): a temporary file beside it,
/// synced, renamed over it.
pub fn write_vol_data(dir: &Path, data: &VolData) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)?;
    let body = serde_json::to_vec(data).map_err(io::Error::other)?;
    let tmp = dir.join(format!(".{VOL_DATA_FILE}.tmp"));
    let _ = fs::remove_file(&tmp);
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(&body)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(VOL_DATA_FILE))
}

/// [`write_vol_data`] on a blocking thread: the fsync waits on the disk, never on a runtime
/// worker.
pub async fn write_vol_data_off_runtime(dir: PathBuf, data: VolData) -> io::Result<()> {
    tokio::task::spawn_blocking(move || write_vol_data(&dir, &data))
        .await
        .map_err(io::Error::other)?
}

/// Reads `<dir>/vol_data.json`: the directory opened with `O_NOFOLLOW`, the file beneath it
/// with `O_NOFOLLOW` (a symlink is an error, never followed), a regular file of at most
/// [`MAX_VOL_DATA`] bytes. `Ok(None)` when there is none.
pub fn read_vol_data(dir: &Path) -> io::Result<Option<VolData>> {
    use nix::fcntl::{open, openat, OFlag};
    use nix::sys::stat::Mode;
    let dir_fd = match open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let fd = match openat(
        &dir_fd,
        VOL_DATA_FILE,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let file = fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.file_type().is_file() || meta.len() > MAX_VOL_DATA {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a vol_data.json of this node agent", dir.display()),
        ));
    }
    let mut body = Vec::new();
    file.take(MAX_VOL_DATA + 1).read_to_end(&mut body)?;
    if body.len() as u64 > MAX_VOL_DATA {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "vol_data.json too large",
        ));
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Removes `dir/vol_data.json` and then `dir` itself if empty; a missing file or directory is
/// fine. Never recursive: a directory still holding something (a mount point the driver left)
/// stays.
pub fn remove_volume_dir(dir: &Path) -> io::Result<()> {
    match fs::remove_file(dir.join(VOL_DATA_FILE)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// `rmdir` of an empty directory (never through a mount point: the caller checked the mount
/// table; `rmdir` of a mount point fails with EBUSY anyway); a missing one is fine.
pub fn remove_empty_dir(dir: &Path) -> io::Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_table() {
        let root = Path::new("/var/lib/kubelet");
        let cases: Vec<(PathBuf, &str)> = vec![
            (
                global_dir(root, "hostpath.csi.k8s.io", "vol-1").join(GLOBAL_MOUNT),
                "/var/lib/kubelet/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/\
                 d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49/globalmount",
            ),
            (
                pod_volume_dir(root, "uid-1", "pv-data").join(POD_MOUNT),
                "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-data/mount",
            ),
            (
                pod_volume_dir(root, "uid-1", "a/b"),
                "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/a~b",
            ),
            (
                block_staging_path(root, "pv-blk"),
                "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-blk",
            ),
            (
                block_publish_path(root, "pv-blk", "uid-1"),
                "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-blk/uid-1",
            ),
            (
                block_data_dir(root, "pv-blk").join(VOL_DATA_FILE),
                "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv-blk/data/vol_data.json",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, PathBuf::from(want.replace(' ', "")));
        }
    }

    #[test]
    fn names_are_the_kubelets_hashes() {
        // sha256("") is the well-known e3b0…; the names hash the plain concatenation.
        assert_eq!(
            sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            attachment_name("h", "d", "n"),
            format!("csi-{}", sha256_hex("hdn"))
        );
        assert_eq!(
            inline_volume_handle("uid", "vol"),
            format!("csi-{}", sha256_hex("uidvol"))
        );
        assert_eq!(
            unique_volume_name("d.example.com", "h1"),
            "kubernetes.io/csi/d.example.com^h1"
        );
        for (value, ok) in [("a", true), ("", false), ("..", false), ("a/b", false)] {
            assert_eq!(is_component(value), ok, "{value:?}");
        }
    }

    #[test]
    fn vol_data_round_trip_and_hostile_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("v");
        assert!(read_vol_data(&dir).unwrap().is_none());
        let data: VolData = [
            (keys::SPEC_VOLUME_ID, "pv-1"),
            (keys::VOLUME_HANDLE, "h"),
            (keys::DRIVER_NAME, "d"),
            (keys::NODE_NAME, "n"),
            (keys::ATTACHMENT_ID, "csi-x"),
            (keys::VOLUME_LIFECYCLE_MODE, "Persistent"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        write_vol_data(&dir, &data).unwrap();
        assert_eq!(read_vol_data(&dir).unwrap(), Some(data.clone()));
        // Rewritten in place, no temporary left.
        write_vol_data(&dir, &data).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        // A symlink in the file's place is not followed.
        fs::remove_file(dir.join(VOL_DATA_FILE)).unwrap();
        fs::write(tmp.path().join("elsewhere"), "{}").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), dir.join(VOL_DATA_FILE)).unwrap();
        assert!(read_vol_data(&dir).is_err());
        // Nor a symlinked directory.
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(read_vol_data(&link).is_err());
        // Too large.
        fs::remove_file(dir.join(VOL_DATA_FILE)).unwrap();
        fs::write(
            dir.join(VOL_DATA_FILE),
            vec![b' '; MAX_VOL_DATA as usize + 1],
        )
        .unwrap();
        assert!(read_vol_data(&dir).is_err());
        remove_volume_dir(&dir).unwrap();
        assert!(!dir.exists());
        remove_volume_dir(&dir).unwrap();
    }
}
