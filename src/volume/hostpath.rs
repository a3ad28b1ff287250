//! hostPath volumes: the `type` check (and creation) the kubelet performs before mounting
//! (`pkg/volume/hostpath/host_path.go`, `checkTypeInternal`).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// A hostPath `type`, as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPathType {
    /// `""`: no check at all.
    Unset,
    DirectoryOrCreate,
    Directory,
    FileOrCreate,
    File,
    Socket,
    CharDevice,
    BlockDevice,
}

impl HostPathType {
    pub fn parse(value: Option<&str>) -> Option<HostPathType> {
        Some(match value.unwrap_or_default() {
            "" => HostPathType::Unset,
            "DirectoryOrCreate" => HostPathType::DirectoryOrCreate,
            "Directory" => HostPathType::Directory,
            "FileOrCreate" => HostPathType::FileOrCreate,
            "File" => HostPathType::File,
            "Socket" => HostPathType::Socket,
            "CharDevice" => HostPathType::CharDevice,
            "BlockDevice" => HostPathType::BlockDevice,
            _ => return None,
        })
    }
}

/// Why a hostPath failed its type check.
#[derive(Debug)]
pub enum CheckError {
    /// The path exists as something else (or not at all); the kubelet's wording of what it
    /// should have been: "a directory", "a file", "a socket file", ….
    NotA(&'static str),
    /// Creating the directory or file failed.
    Create(io::Error),
}

/// Checks `path` against `kind`, creating it for the `…OrCreate` types: directories 0755 (with
/// parents), files 0644 (the parent must exist, as in the kubelet). Symlinks are followed.
pub fn check_host_path(path: &Path, kind: HostPathType) -> Result<(), CheckError> {
    let meta = fs::metadata(path).ok();
    let is = |f: fn(&fs::FileType) -> bool| meta.as_ref().is_some_and(|m| f(&m.file_type()));
    match kind {
        HostPathType::Unset => Ok(()),
        HostPathType::DirectoryOrCreate if meta.is_none() => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
            .map_err(CheckError::Create),
        HostPathType::DirectoryOrCreate | HostPathType::Directory => {
            if is(fs::FileType::is_dir) {
                Ok(())
            } else {
                Err(CheckError::NotA("directory"))
            }
        }
        HostPathType::FileOrCreate if meta.is_none() => fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map(drop)
            .map_err(CheckError::Create),
        HostPathType::FileOrCreate | HostPathType::File => {
            if is(fs::FileType::is_file) {
                Ok(())
            } else {
                Err(CheckError::NotA("file"))
            }
        }
        HostPathType::Socket => {
            if is(FileTypeExt::is_socket) {
                Ok(())
            } else {
                Err(CheckError::NotA("socket file"))
            }
        }
        HostPathType::CharDevice => {
            if is(FileTypeExt::is_char_device) {
                Ok(())
            } else {
                Err(CheckError::NotA("character device"))
            }
        }
        HostPathType::BlockDevice => {
            if is(FileTypeExt::is_block_device) {
                Ok(())
            } else {
                Err(CheckError::NotA("block device"))
            }
        }
    }
}
