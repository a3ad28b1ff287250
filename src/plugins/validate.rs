//! What a plugin's `GetInfo` answer means, decided as the kubelet's plugin manager and CSI
//! registration handler decide it (`pkg/kubelet/pluginmanager/operationexecutor`,
//! `pkg/volume/csi/csi_plugin.go`): the plugin type, the versions (apimachinery's
//! `HighestSupportedVersion` over `ParseGeneric`), the name and the endpoint. Pure.

use std::cmp::Ordering;
use std::fmt;
use std::path::Path;

/// The registration type of CSI drivers (`registerapi.CSIPlugin`).
pub const CSI_PLUGIN: &str = "CSIPlugin";

/// The prefix of the kubelet's CSI messages (`log()` in `pkg/volume/csi`).
const CSI_LOG_PREFIX: &str = "kubernetes.io/csi: ";

/// A version as apimachinery's `ParseGeneric` reads it: two or more dot-separated numbers, an
/// optional leading `v`, anything after the numbers ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(Vec<u64>);

impl Version {
    pub fn major(&self) -> u64 {
        self.0[0]
    }

    /// `ParseGeneric`, with apimachinery's messages.
    pub fn parse_generic(text: &str) -> Result<Version, String> {
        let trimmed = text.trim_start();
        let rest = trimmed.strip_prefix('v').unwrap_or(trimmed);
        // The numbers: digits and dots, starting with a digit.
        let numbers_len = rest
            .char_indices()
            .take_while(|(i, c)| c.is_ascii_digit() || (*c == '.' && *i > 0))
            .count();
        let mut numbers = &rest[..numbers_len];
        // A trailing dot belongs to what follows (the expression needs a digit after a dot).
        while numbers.ends_with('.') {
            numbers = &numbers[..numbers.len() - 1];
        }
        if numbers.is_empty() {
            return Err(format!("could not parse {text:?} as version"));
        }
        let components: Vec<&str> = numbers.split('.').collect();
        if components.len() < 2 || components.iter().any(|c| c.is_empty()) {
            return Err(format!("illegal version string {text:?}"));
        }
        let mut parsed = Vec::with_capacity(components.len());
        for (i, comp) in components.iter().enumerate() {
            if i == 0 && comp.starts_with('0') && *comp != "0" {
                return Err(format!(
                    "illegal zero-prefixed version component {comp:?} in {text:?}"
                ));
            }
            let n: u64 = comp.parse().map_err(|e| {
                format!("illegal non-numeric version component {comp:?} in {text:?}: {e}")
            })?;
            parsed.push(n);
        }
        Ok(Version(parsed))
    }

    fn component(&self, i: usize) -> u64 {
        self.0.get(i).copied().unwrap_or(0)
    }
}

impl Ord for Version {
    /// apimachinery's `compareInternal`: component by component, a missing one is 0.
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.0.len().max(other.0.len());
        (0..n)
            .map(|i| self.component(i).cmp(&other.component(i)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

/// Go's `%v` of a `[]string`: `[a b]`.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// apimachinery's `HighestSupportedVersion`: the highest version of major 0 or 1 (later ones
/// ignored: CSI 2.x need not be compatible), which must be 1.x.
pub fn highest_supported_version(versions: &[String]) -> Result<Version, String> {
    if versions.is_empty() {
        return Err("empty array for supported versions".into());
    }
    let mut highest: Option<Version> = None;
    let mut last_error: Option<String> = None;
    for text in versions.iter().rev() {
        match Version::parse_generic(text) {
            Err(e) => last_error = Some(e),
            Ok(v) if v.major() > 1 => {}
            Ok(v) => {
                if highest.as_ref().is_none_or(|h| *h < v) {
                    highest = Some(v);
                }
            }
        }
    }
    let Some(highest) = highest else {
        return Err(format!(
            "could not find a highest supported version from versions ({}) reported: {}",
            go_list(versions),
            last_error.as_deref().unwrap_or("<nil>")
        ));
    };
    if highest.major() != 1 {
        return Err(format!(
            "highest supported version reported is {highest}, must be v1.x"
        ));
    }
    Ok(highest)
}

/// The kubelet's rule for the driver's endpoint: the one `GetInfo` names, else the
/// registration socket itself.
pub fn endpoint_of(info_endpoint: &str, socket: &Path) -> String {
    if info_endpoint.is_empty() {
        socket.display().to_string()
    } else {
        info_endpoint.to_string()
    }
}

/// A plugin nodelet accepts: its name, endpoint and highest supported version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub name: String,
    pub endpoint: String,
    pub highest_version: Version,
}

/// Decides on a `GetInfo` answer from `socket`. `registered` is the highest version of a
/// driver of the same name registered from another socket. `Err` is the message
/// `NotifyRegistrationStatus` carries back, the kubelet's.
pub fn validate(
    plugin_type: &str,
    name: &str,
    info_endpoint: &str,
    versions: &[String],
    socket: &Path,
    registered: Option<&Version>,
) -> Result<Accepted, String> {
    if plugin_type != CSI_PLUGIN {
        return Err(format!(
            "RegisterPlugin error -- no handler registered for plugin type: {plugin_type} at socket {}",
            socket.display()
        ));
    }
    let endpoint = endpoint_of(info_endpoint, socket);
    let refuse = |reason: String| {
        format!(
            "RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver {name} at endpoint {endpoint}: {reason}"
        )
    };
    if name.is_empty() {
        // The kubelet would register a driver without a name; nodelet cannot name it anywhere.
        return Err(refuse(format!(
            "{CSI_LOG_PREFIX}the plugin's name is empty"
        )));
    }
    if versions.is_empty() {
        return Err(refuse(format!(
            "{CSI_LOG_PREFIX}ValidatePlugin for CSI driver {name:?} failed. Plugin returned an empty list for supported versions"
        )));
    }
    let highest = highest_supported_version(versions).map_err(|e| {
        refuse(format!(
            "{CSI_LOG_PREFIX}ValidatePlugin for CSI driver {name:?} failed. None of the versions specified {} are supported. err={e}",
            go_quoted_list(versions)
        ))
    })?;
    if let Some(existing) = registered {
        if *existing >= highest {
            return Err(refuse(format!(
                "{CSI_LOG_PREFIX}ValidatePlugin for CSI driver {name:?} failed. Another driver with the same name is already registered with a higher supported version: \"{existing}\""
            )));
        }
    }
    Ok(Accepted {
        name: name.to_string(),
        endpoint,
        highest_version: highest,
    })
}

/// What the trust check of a driver's endpoint reads of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFacts {
    pub kind: FileKind,
    pub uid: u32,
    /// The permission bits.
    pub mode: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Socket,
    Symlink,
    Directory,
    Other,
}

/// Whether nodelet may talk to a driver's endpoint `socket` in directory `dir`: the socket is a
/// socket (a symlink is not followed), owned by root or by nodelet's own user `own_uid`, in a
/// directory of the same owners that nobody else may write to, so no other user can put a
/// socket of their own there and receive the volumes' secrets and mounts.
pub fn endpoint_trusted(socket: FileFacts, dir: FileFacts, own_uid: u32) -> Result<(), String> {
    let trusted_owner = |uid: u32| uid == 0 || uid == own_uid;
    match socket.kind {
        FileKind::Socket => {}
        FileKind::Symlink => {
            return Err("the endpoint is a symbolic link, which nodelet does not follow".into())
        }
        _ => return Err("the endpoint is not a unix socket".into()),
    }
    if !trusted_owner(socket.uid) {
        return Err(format!(
            "the endpoint socket is owned by uid {}, not by root (or nodelet's uid {own_uid})",
            socket.uid
        ));
    }
    if dir.kind != FileKind::Directory || !trusted_owner(dir.uid) {
        return Err(format!(
            "the endpoint's directory is owned by uid {}, not by root (or nodelet's uid {own_uid})",
            dir.uid
        ));
    }
    if dir.mode & 0o022 != 0 {
        return Err(format!(
            "the endpoint's directory has mode {:04o}: others may write to it",
            dir.mode
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn endpoint_trust_table() {
        use super::{endpoint_trusted, FileFacts, FileKind};
        let f = |kind, uid, mode| FileFacts { kind, uid, mode };
        let socket = f(FileKind::Socket, 0, 0o755);
        let dir = f(FileKind::Directory, 0, 0o755);
        let cases = [
            ("root's socket in root's 0755 directory", socket, dir, Ok(())),
            ("nodelet's own uid", f(FileKind::Socket, 1000, 0o700), f(FileKind::Directory, 1000, 0o750), Ok(())),
            ("a symlink", f(FileKind::Symlink, 0, 0o777), dir, Err("the endpoint is a symbolic link, which nodelet does not follow")),
            ("a regular file", f(FileKind::Other, 0, 0o644), dir, Err("the endpoint is not a unix socket")),
            ("another user's socket", f(FileKind::Socket, 1001, 0o755), dir, Err("the endpoint socket is owned by uid 1001, not by root (or nodelet's uid 1000)")),
            ("another user's directory", socket, f(FileKind::Directory, 1001, 0o755), Err("the endpoint's directory is owned by uid 1001, not by root (or nodelet's uid 1000)")),
            ("a world-writable directory", socket, f(FileKind::Directory, 0, 0o1777), Err("the endpoint's directory has mode 1777: others may write to it")),
            ("a group-writable directory", socket, f(FileKind::Directory, 0, 0o775), Err("the endpoint's directory has mode 0775: others may write to it")),
        ];
        for (name, socket, dir, want) in cases {
            assert_eq!(
                endpoint_trusted(socket, dir, 1000),
                want.map_err(str::to_string),
                "{name}"
            );
        }
    }

    use super::*;

    fn v(s: &str) -> Version {
        Version::parse_generic(s).unwrap()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn versions_parse_as_parse_generic() {
        for (text, want) in [
            ("1.0.0", Ok("1.0.0")),
            ("v1.2", Ok("1.2")),
            ("1.2.3-alpha", Ok("1.2.3")),
            ("  v1.10.0", Ok("1.10.0")),
            ("1.03.0", Ok("1.3.0")),
            ("1", Err("illegal version string \"1\"")),
            (
                "01.0",
                Err("illegal zero-prefixed version component \"01\" in \"01.0\""),
            ),
            ("x1.0", Err("could not parse \"x1.0\" as version")),
            ("", Err("could not parse \"\" as version")),
        ] {
            let got = Version::parse_generic(text).map(|v| v.to_string());
            assert_eq!(got.as_deref().map_err(String::as_str), want, "{text:?}");
        }
        assert!(v("1.10") > v("1.9.9"));
        assert_eq!(v("1.0").cmp(&v("1.0.0")), Ordering::Equal);
        assert!(v("0.3.0") < v("1.0.0"));
    }

    #[test]
    fn the_highest_supported_version_as_the_kubelet_finds_it() {
        for (versions, want) in [
            (vec!["1.0.0"], Ok("1.0.0")),
            (vec!["0.3.0", "1.0.0", "1.5.0"], Ok("1.5.0")),
            (vec!["1.2.0", "2.0.0"], Ok("1.2.0")),
            (vec!["v1.0.0", "junk"], Ok("1.0.0")),
            (
                vec!["0.3.0"],
                Err("highest supported version reported is 0.3.0, must be v1.x".to_string()),
            ),
            (
                vec!["2.0.0"],
                Err("could not find a highest supported version from versions ([2.0.0]) reported: <nil>".to_string()),
            ),
            (
                vec!["junk"],
                Err("could not find a highest supported version from versions ([junk]) reported: could not parse \"junk\" as version".to_string()),
            ),
            (vec![], Err("empty array for supported versions".to_string())),
        ] {
            let got = highest_supported_version(&strings(&versions)).map(|v| v.to_string());
            assert_eq!(got, want.map(String::from), "{versions:?}");
        }
    }

    #[test]
    fn plugins_are_validated_with_the_kubelets_messages() {
        let socket = Path::new("/var/lib/kubelet/plugins_registry/d-reg.sock");
        let accepted = |name: &str, endpoint: &str, version: &str| {
            Ok(Accepted {
                name: name.into(),
                endpoint: endpoint.into(),
                highest_version: v(version),
            })
        };
        let cases = vec![
            (
                "a CSI driver",
                CSI_PLUGIN,
                "d.example.com",
                "/var/lib/kubelet/plugins/d/csi.sock",
                vec!["1.0.0"],
                None,
                accepted("d.example.com", "/var/lib/kubelet/plugins/d/csi.sock", "1.0.0"),
            ),
            (
                "no endpoint: the registration socket",
                CSI_PLUGIN,
                "d.example.com",
                "",
                vec!["1.0.0"],
                None,
                accepted("d.example.com", "/var/lib/kubelet/plugins_registry/d-reg.sock", "1.0.0"),
            ),
            (
                "a device plugin",
                "DevicePlugin",
                "gpu",
                "/e.sock",
                vec!["v1beta1"],
                None,
                Err("RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at socket /var/lib/kubelet/plugins_registry/d-reg.sock".into()),
            ),
            (
                "a DRA plugin (nodelet has no handler)",
                "DRAPlugin",
                "dra",
                "/e.sock",
                vec!["1.0.0"],
                None,
                Err("RegisterPlugin error -- no handler registered for plugin type: DRAPlugin at socket /var/lib/kubelet/plugins_registry/d-reg.sock".into()),
            ),
            (
                "CSI 0.3 only",
                CSI_PLUGIN,
                "old.example.com",
                "/e.sock",
                vec!["0.3.0"],
                None,
                Err("RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver old.example.com at endpoint /e.sock: kubernetes.io/csi: ValidatePlugin for CSI driver \"old.example.com\" failed. None of the versions specified [\"0.3.0\"] are supported. err=highest supported version reported is 0.3.0, must be v1.x".into()),
            ),
            (
                "no versions",
                CSI_PLUGIN,
                "d.example.com",
                "/e.sock",
                vec![],
                None,
                Err("RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver d.example.com at endpoint /e.sock: kubernetes.io/csi: ValidatePlugin for CSI driver \"d.example.com\" failed. Plugin returned an empty list for supported versions".into()),
            ),
            (
                "no name",
                CSI_PLUGIN,
                "",
                "/e.sock",
                vec!["1.0.0"],
                None,
                Err("RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver  at endpoint /e.sock: kubernetes.io/csi: the plugin's name is empty".into()),
            ),
            (
                "the same name registered elsewhere at the same version",
                CSI_PLUGIN,
                "d.example.com",
                "/e.sock",
                vec!["1.0.0"],
                Some(v("1.0.0")),
                Err("RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver d.example.com at endpoint /e.sock: kubernetes.io/csi: ValidatePlugin for CSI driver \"d.example.com\" failed. Another driver with the same name is already registered with a higher supported version: \"1.0.0\"".into()),
            ),
            (
                "the same name registered elsewhere at a lower version: replaces it",
                CSI_PLUGIN,
                "d.example.com",
                "/e.sock",
                vec!["1.2.0"],
                Some(v("1.0.0")),
                accepted("d.example.com", "/e.sock", "1.2.0"),
            ),
        ];
        for (what, plugin_type, name, endpoint, versions, registered, want) in cases {
            let got = validate(
                plugin_type,
                name,
                endpoint,
                &strings(&versions),
                socket,
                registered.as_ref(),
            );
            assert_eq!(got, want, "{what}");
        }
    }
}
