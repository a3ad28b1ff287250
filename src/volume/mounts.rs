//! Reading `/proc/self/mountinfo`: which directories are mount points. nodelet never deletes a
//! pod directory while something is still mounted below it, and never mounts a tmpfs twice.

use std::path::{Path, PathBuf};

/// Undoes the octal escapes the kernel uses in mountinfo paths (`\040` for a space, `\011`,
/// `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(b) = u8::try_from(value) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount points listed in a mountinfo file, in file order (parents before children).
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .collect()
}

pub fn is_mount_point(mountinfo: &str, path: &Path) -> bool {
    mount_points(mountinfo).iter().any(|m| m == path)
}

/// Mount points strictly below `dir`, deepest first (the order to unmount them in).
pub fn mounts_under(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    let mut below: Vec<PathBuf> = mount_points(mountinfo)
        .into_iter()
        .filter(|m| m != dir && m.starts_with(dir))
        .collect();
    below.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    below.dedup();
    below
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
25 22 0:21 / /proc rw,nosuid - proc proc rw
90 22 0:50 / /var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache rw - tmpfs tmpfs rw,size=1024k
91 90 0:51 / /var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache/inner rw - tmpfs tmpfs rw
92 22 0:52 / /var/lib/nodelet/pods/u10/volumes/kubernetes.io~empty-dir/x rw - tmpfs tmpfs rw
93 22 0:53 / /mnt/with\\040space rw - tmpfs tmpfs rw
";

    #[test]
    fn mount_point_table() {
        let cases = [
            ("/", true),
            ("/proc", true),
            (
                "/var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache",
                true,
            ),
            ("/var/lib/nodelet/pods/u1", false),
            ("/mnt/with space", true),
            ("/mnt/with\\040space", false),
        ];
        for (path, want) in cases {
            assert_eq!(is_mount_point(MOUNTINFO, Path::new(path)), want, "{path}");
        }
    }

    #[test]
    fn mounts_under_are_deepest_first_and_exclude_siblings() {
        let got = mounts_under(MOUNTINFO, Path::new("/var/lib/nodelet/pods/u1"));
        assert_eq!(
            got,
            [
                PathBuf::from(
                    "/var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache/inner"
                ),
                PathBuf::from("/var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache"),
            ]
        );
        assert!(mounts_under(MOUNTINFO, Path::new("/var/lib/nodelet/pods/u2")).is_empty());
    }

    #[test]
    fn unescape_table() {
        let cases = [
            ("a\\040b", "a b"),
            ("tab\\011", "tab\t"),
            ("back\\134slash", "back\\slash"),
            ("x\\04", "x\\04"),
            ("plain", "plain"),
        ];
        for (input, want) in cases {
            assert_eq!(unescape(input), want);
        }
    }
}
