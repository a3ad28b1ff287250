//! subPath directories (`doSafeMakeDir` in the kubelet's `pkg/volume/util/subpath`): before the
//! runtime bind-mounts `<volume>/<subPath>` into a container, the directory is created when
//! missing and resolved, so the container config builder (`sync::container_config`) stays pure:
//! it only names the subPaths a container needs ([`SubPathMount`]), and the executor creates them
//! here before it creates the container.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::cri::api;
use crate::podspec::ConfigError;

/// One mount of a container config whose host path is a subPath inside a volume, still to be
/// created and resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubPathMount {
    /// Index into the config's `mounts`.
    pub mount: usize,
    /// The mount's field path, for example `spec.containers[0].volumeMounts[1]`.
    pub field: String,
    pub volume: String,
    pub container: String,
    /// The volume's host directory.
    pub volume_path: PathBuf,
    /// The validated (relative, no `..`) subPath inside it.
    pub sub_path: String,
}

/// Creates every subPath directory `sub_paths` names and points the corresponding mount of
/// `mounts` at the resolved directory. The first failure is returned as the container's
/// `CreateContainerConfigError`.
pub fn prepare_sub_paths(
    mounts: &mut [api::Mount],
    sub_paths: &[SubPathMount],
) -> Result<(), ConfigError> {
    for s in sub_paths {
        let resolved =
            ensure_sub_path(&s.volume_path, &s.sub_path).map_err(|e| ConfigError::SubPath {
                field: format!("{}.subPath", s.field),
                volume: s.volume.clone(),
                container: s.container.clone(),
                path: s.volume_path.join(&s.sub_path),
                reason: e.to_string(),
            })?;
        if let Some(m) = mounts.get_mut(s.mount) {
            m.host_path = resolved.to_string_lossy().into_owned();
        }
    }
    Ok(())
}

/// Creates `sub_path` inside `volume` when missing, with the volume directory's mode (so an
/// fsGroup-writable volume stays writable below), and returns it resolved. Each existing
/// component is resolved before descending, so a symlink a container planted cannot lead the
/// creation (or the mount) outside the volume.
pub fn ensure_sub_path(volume: &Path, sub_path: &str) -> io::Result<PathBuf> {
    let root = fs::canonicalize(volume)?;
    let mode = fs::metadata(&root)?.permissions().mode() & 0o7777;
    let mut current = root.clone();
    for part in Path::new(sub_path).components() {
        let Component::Normal(part) = part else {
            continue;
        };
        let next = current.join(part);
        match fs::symlink_metadata(&next) {
            Ok(_) => {
                let resolved = fs::canonicalize(&next)?;
                if !resolved.starts_with(&root) {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!("{} resolves outside of the volume", next.display()),
                    ));
                }
                current = resolved;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new().mode(mode).create(&next)?;
                fs::set_permissions(&next, fs::Permissions::from_mode(mode))?;
                current = next;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(current)
}
