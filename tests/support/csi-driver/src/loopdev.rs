//! Loop devices for block volumes, through `losetup` (util-linux).

use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("cannot run losetup: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("losetup {args} failed: {stderr}")]
    Failed { args: String, stderr: String },
    #[error("losetup printed {0:?}, not a loop device")]
    Output(String),
}

/// A loop device path as `losetup --show` prints it or the driver recorded it: `/dev/loopN`
/// and nothing else.
pub fn parse_loop_device(text: &str) -> Option<PathBuf> {
    let text = text.trim();
    let number = text.strip_prefix("/dev/loop")?;
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(PathBuf::from(text))
}

/// The file the kernel says backs `device` (`/sys/block/loopN/loop/backing_file`); `None` when
/// the device is not attached.
pub fn backing_file(device: &Path) -> Option<PathBuf> {
    let name = device.file_name()?.to_str()?;
    let text = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    Some(PathBuf::from(text.trim_end_matches('\n')))
}

fn losetup(args: &[&str]) -> Result<String, LoopError> {
    let output = Command::new("losetup")
        .args(args)
        .output()
        .map_err(LoopError::Spawn)?;
    if !output.status.success() {
        return Err(LoopError::Failed {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Attaches `image` to a free loop device; the device.
pub fn attach(image: &Path) -> Result<PathBuf, LoopError> {
    let image = image.to_string_lossy();
    let out = losetup(&["--find", "--show", &image])?;
    parse_loop_device(&out).ok_or(LoopError::Output(out))
}

/// Detaches `device`; one already detached is fine.
pub fn detach(device: &Path) -> Result<(), LoopError> {
    if backing_file(device).is_none() {
        return Ok(());
    }
    losetup(&["--detach", &device.to_string_lossy()]).map(drop)
}

/// Makes the kernel re-read the size of the backing file (after an expansion).
pub fn refresh_capacity(device: &Path) -> Result<(), LoopError> {
    losetup(&["--set-capacity", &device.to_string_lossy()]).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loop_device_paths_are_accepted() {
        let cases = [
            ("/dev/loop0\n", Some("/dev/loop0")),
            ("/dev/loop12", Some("/dev/loop12")),
            ("/dev/loop", None),
            ("/dev/loop1p1", None),
            ("/dev/sda", None),
            ("/dev/loop0/../sda", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_loop_device(text), want.map(PathBuf::from), "{text:?}");
        }
    }
}
