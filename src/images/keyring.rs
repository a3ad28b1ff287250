//! Registry credentials matched to an image as the kubelet's keyring does
//! (`pkg/credentialprovider/keyring.go`): entries keyed by `host[:port][/path]` (a scheme and a
//! trailing `/v1/` or `/v2/` are dropped), host labels may be globs (`*.example.com`), the
//! port must be equal, the entry's path a prefix of the image's; more specific keys first.
//! Also the parsing of `kubernetes.io/dockerconfigjson` and `kubernetes.io/dockercfg` secrets.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;

use crate::cri::api;

pub const SECRET_TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
pub const SECRET_TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
const DOCKERCFG_KEY: &str = ".dockercfg";
/// Docker Hub's key in docker config files (`https://index.docker.io/v1/` after trimming).
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// One credential of a docker config file (`username`/`password`, or `auth` = base64 of
/// `user:password`, which wins as in the kubelet's `DockerConfigEntry`).
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DockerConfigEntry {
    pub username: String,
    pub password: String,
    pub email: String,
    pub auth: String,
}

/// The password and `auth` (base64 of `user:password`) show only whether they are set.
impl std::fmt::Debug for DockerConfigEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerConfigEntry")
            .field("username", &self.username)
            .field("password", &crate::redact::secret(&self.password))
            .field("email", &self.email)
            .field("auth", &crate::redact::secret(&self.auth))
            .finish()
    }
}

/// `registry key → credential`, the content of `.dockercfg` (or `auths` of `.dockerconfigjson`).
pub type DockerConfig = BTreeMap<String, DockerConfigEntry>;

#[derive(Debug, Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: DockerConfig,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyringError {
    #[error("secret {namespace}/{name}: key {key} is not valid JSON: {message}")]
    Json {
        namespace: String,
        name: String,
        key: &'static str,
        message: String,
    },
    #[error("secret {namespace}/{name}: credential for {registry:?}: auth is not base64 of user:password")]
    Auth {
        namespace: String,
        name: String,
        registry: String,
    },
}

/// A credential ready for the CRI, with the key it was found under.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub registry: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("registry", &self.registry)
            .field("username", &self.username)
            .field("password", &crate::redact::secret(&self.password))
            .finish()
    }
}

impl Credential {
    /// The CRI's AuthConfig. Like the kubelet, no `server_address`: containerd would parse it
    /// as a URL (`127.0.0.1:5000` is not one), and the credential is for this pull anyway.
    pub fn auth_config(&self) -> api::AuthConfig {
        api::AuthConfig {
            username: self.username.clone(),
            password: self.password.clone(),
            ..Default::default()
        }
    }
}

/// Username and password of an entry; `auth` (base64 `user:password`) overrides them.
fn decode_entry(entry: &DockerConfigEntry) -> Option<(String, String)> {
    if entry.auth.is_empty() {
        return Some((entry.username.clone(), entry.password.clone()));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(entry.auth.trim())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.trim_matches('\0').to_string()))
}

/// The docker config a pull secret holds, or `None` when the secret is of another type or
/// lacks its key (the kubelet skips those). Bad JSON is an error naming the secret.
pub fn docker_config_of_secret(secret: &Secret) -> Result<Option<DockerConfig>, KeyringError> {
    let namespace = secret.metadata.namespace.clone().unwrap_or_default();
    let name = secret.metadata.name.clone().unwrap_or_default();
    let data = secret.data.as_ref();
    let get = |key: &str| data.and_then(|d| d.get(key)).map(|b| b.0.as_slice());
    let json_err = |key: &'static str, e: serde_json::Error| KeyringError::Json {
        namespace: namespace.clone(),
        name: name.clone(),
        key,
        message: e.to_string(),
    };
    match secret.type_.as_deref() {
        Some(SECRET_TYPE_DOCKER_CONFIG_JSON) => match get(DOCKER_CONFIG_JSON_KEY) {
            Some(bytes) if !bytes.is_empty() => serde_json::from_slice::<DockerConfigJson>(bytes)
                .map(|c| Some(c.auths))
                .map_err(|e| json_err(DOCKER_CONFIG_JSON_KEY, e)),
            _ => Ok(None),
        },
        Some(SECRET_TYPE_DOCKERCFG) => match get(DOCKERCFG_KEY) {
            Some(bytes) if !bytes.is_empty() => serde_json::from_slice::<DockerConfig>(bytes)
                .map(Some)
                .map_err(|e| json_err(DOCKERCFG_KEY, e)),
            _ => Ok(None),
        },
        _ => Ok(None),
    }
}

/// A URL without its scheme, split as Go's `url.Parse("https://" + s)` would:
/// host (with port) and path.
fn split_schemeless(s: &str) -> (&str, &str) {
    let end = s.find(['/', '?', '#']).unwrap_or(s.len());
    let host = &s[..end];
    let rest = &s[end..];
    let path_end = rest.find(['?', '#']).unwrap_or(rest.len());
    (host, &rest[..path_end])
}

/// Host labels and port, as the kubelet's `SplitURL`.
fn split_host(host: &str) -> (Vec<&str>, &str) {
    // Go's net.SplitHostPort takes any port string; a port glob (`reg:*`) so compares
    // literally and never matches, as in the kubelet ("no wildcards in ports").
    let (name, port) = host.rsplit_once(':').unwrap_or((host, ""));
    (name.split('.').collect(), port)
}

/// One host label against a glob label (`*`, `?`, `[...]` as Go's `filepath.Match`, which
/// never crosses a `.` here since labels are split on it).
fn label_matches(glob: &str, label: &str) -> bool {
    glob::Pattern::new(glob).is_ok_and(|p| p.matches(label))
}

/// The kubelet's `URLsMatchStr(glob, target)`: both schemeless; same port, same number of host
/// labels each matching its glob, and the glob's path a prefix of the target's.
pub fn urls_match(glob: &str, target: &str) -> bool {
    let (glob_host, glob_path) = split_schemeless(glob);
    let (target_host, target_path) = split_schemeless(target);
    let (glob_labels, glob_port) = split_host(glob_host);
    let (target_labels, target_port) = split_host(target_host);
    glob_port == target_port
        && glob_labels.len() == target_labels.len()
        && target_path.starts_with(glob_path)
        && glob_labels
            .iter()
            .zip(&target_labels)
            .all(|(g, t)| label_matches(g, t))
}

/// The key a docker config location is indexed under: scheme dropped, `/v1/` or `/v2/`
/// dropped, a bare `/` path dropped (`https://reg:5000/v2/` → `reg:5000`).
pub fn keyring_key(location: &str) -> String {
    let rest = location
        .strip_prefix("https://")
        .or_else(|| location.strip_prefix("http://"))
        .unwrap_or(location);
    let (host, path) = split_schemeless(rest);
    let path = path
        .strip_prefix("/v2/")
        .or_else(|| path.strip_prefix("/v1/"))
        .map_or(path.to_string(), |p| format!("/{p}"));
    if path.is_empty() || path == "/" {
        host.to_string()
    } else {
        format!("{host}{path}")
    }
}

/// Credentials indexed by registry key, looked up by image repository.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    creds: BTreeMap<String, Vec<Credential>>,
}

impl Keyring {
    pub fn add(&mut self, config: &DockerConfig) {
        for (location, entry) in config {
            let Some((username, password)) = decode_entry(entry) else {
                tracing::warn!(registry = %location, "ignoring a credential whose auth is not base64 of user:password");
                continue;
            };
            let key = keyring_key(location);
            self.creds.entry(key.clone()).or_default().push(Credential {
                registry: key,
                username,
                password,
            });
        }
    }

    pub fn is_empty(&self) -> bool {
        self.creds.is_empty()
    }

    /// Every credential whose key matches `repository` (an image name without tag or
    /// digest, with its registry: `127.0.0.1:5000/private/app`), most specific key first
    /// (reverse lexical order, as the kubelet's index). Docker Hub images also get the
    /// `index.docker.io` credentials when nothing else matched.
    pub fn lookup(&self, repository: &str) -> Vec<Credential> {
        let mut found: Vec<Credential> = self
            .creds
            .iter()
            .rev()
            .filter(|(key, _)| urls_match(key, repository))
            .flat_map(|(_, c)| c.iter().cloned())
            .collect();
        if found.is_empty() && is_docker_hub(repository) {
            if let Some(c) = self.creds.get(DEFAULT_REGISTRY_HOST) {
                found.extend(c.iter().cloned());
            }
        }
        found
    }
}

fn is_docker_hub(repository: &str) -> bool {
    match repository.split_once('/') {
        None => true,
        Some((first, _)) => {
            first == "docker.io" || first == "index.docker.io" || !first.contains(['.', ':'])
        }
    }
}

/// The repository of an image reference: tag and digest removed, Docker Hub's implied
/// registry and `library/` made explicit (the kubelet's `parsers.ParseImageName`).
pub fn repository_of(image: &str) -> String {
    let without_digest = image.split_once('@').map_or(image, |(r, _)| r);
    let last_slash = without_digest.rfind('/').map_or(0, |i| i + 1);
    let repo = match without_digest[last_slash..].find(':') {
        Some(i) => &without_digest[..last_slash + i],
        None => without_digest,
    };
    match repo.split_once('/') {
        None => format!("docker.io/library/{repo}"),
        Some((first, _)) if !first.contains(['.', ':']) && first != "localhost" => {
            format!("docker.io/{repo}")
        }
        _ => repo.to_string(),
    }
}

/// The registry host (with port) of an image.
pub fn registry_of(image: &str) -> String {
    let repo = repository_of(image);
    repo.split_once('/')
        .map_or(repo.clone(), |(h, _)| h.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn entry(user: &str, password: &str) -> DockerConfigEntry {
        DockerConfigEntry {
            username: user.into(),
            password: password.into(),
            ..Default::default()
        }
    }

    #[test]
    fn urls_match_as_the_kubelet() {
        let cases: &[(&str, &str, bool)] = &[
            ("registry.example.com", "registry.example.com/app", true),
            ("registry.example.com", "other.example.com/app", false),
            // host:port: the port must be equal, and present on both or neither.
            ("127.0.0.1:5000", "127.0.0.1:5000/private/app", true),
            ("127.0.0.1:5000", "127.0.0.1:5001/private/app", false),
            ("127.0.0.1", "127.0.0.1:5000/private/app", false),
            ("127.0.0.1:5000", "127.0.0.1/private/app", false),
            // path prefix (a string prefix, as the kubelet's strings.HasPrefix).
            ("reg.io/team", "reg.io/team/app", true),
            ("reg.io/team", "reg.io/other/app", false),
            ("reg.io/team/app", "reg.io/team", false),
            ("reg.io/team", "reg.io/teamster/app", true),
            // wildcards match one label each, never across dots.
            ("*.example.com", "registry.example.com/app", true),
            ("*.example.com", "example.com/app", false),
            ("*.example.com", "a.b.example.com/app", false),
            ("*.*.example.com", "a.b.example.com/app", true),
            ("*.example.com:443", "registry.example.com:443/app", true),
            ("*.example.com", "registry.example.com:443/app", false),
            ("reg-[0-9].example.com", "reg-1.example.com/app", true),
            // `?` starts a URL query, as in the kubelet's url.Parse: no match.
            ("reg-?.example.com", "reg-1.example.com/app", false),
            ("*.example.com/team", "r.example.com/team/app", true),
            ("*.example.com/team", "r.example.com/app", false),
            ("*", "localhost/app", true),
            ("*", "reg.io/app", false),
            ("127.0.0.1:*", "127.0.0.1:5000/app", false),
        ];
        for (glob, target, want) in cases {
            assert_eq!(urls_match(glob, target), *want, "{glob} vs {target}");
        }
    }

    #[test]
    fn keys_drop_scheme_and_api_version() {
        let cases = [
            ("https://reg.io/v2/", "reg.io"),
            ("http://reg.io:5000/v1/", "reg.io:5000"),
            ("reg.io", "reg.io"),
            ("reg.io/", "reg.io"),
            ("https://reg.io/team/app", "reg.io/team/app"),
            ("https://index.docker.io/v1/", "index.docker.io"),
            ("reg.io/v2/team", "reg.io/team"),
        ];
        for (location, want) in cases {
            assert_eq!(keyring_key(location), want, "{location}");
        }
    }

    #[test]
    fn lookup_orders_specific_first_and_matches_ports_paths_and_globs() {
        let mut k = Keyring::default();
        k.add(&DockerConfig::from([
            ("https://127.0.0.1:5000/v2/".into(), entry("host", "p1")),
            ("127.0.0.1:5000/private".into(), entry("path", "p2")),
            ("127.0.0.1:5001".into(), entry("otherport", "p3")),
            ("*.example.com".into(), entry("glob", "p4")),
            ("https://index.docker.io/v1/".into(), entry("hub", "p5")),
        ]));
        let users = |repo: &str| -> Vec<String> {
            k.lookup(repo).into_iter().map(|c| c.username).collect()
        };
        assert_eq!(users("127.0.0.1:5000/private/app"), ["path", "host"]);
        assert_eq!(users("127.0.0.1:5000/public/app"), ["host"]);
        assert_eq!(users("127.0.0.1:5001/app"), ["otherport"]);
        assert_eq!(users("127.0.0.1:5002/app"), Vec::<String>::new());
        assert_eq!(users("registry.example.com/app"), ["glob"]);
        assert_eq!(users("example.com/app"), Vec::<String>::new());
        assert_eq!(users("docker.io/library/busybox"), ["hub"]);
        assert_eq!(users("quay.io/app"), Vec::<String>::new());
    }

    #[test]
    fn auth_field_overrides_username_and_password() {
        let mut k = Keyring::default();
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        k.add(&DockerConfig::from([(
            "reg.io".into(),
            DockerConfigEntry {
                username: "ignored".into(),
                auth,
                ..Default::default()
            },
        )]));
        let c = &k.lookup("reg.io/app")[0];
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("alice", "s3cr:et")
        );
        assert_eq!(c.auth_config().server_address, "");
        assert_eq!(c.auth_config().username, "alice");
    }

    fn secret(type_: &str, key: &str, value: &str) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("pull".into()),
                namespace: Some("team".into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            data: Some(BTreeMap::from([(
                key.to_string(),
                ByteString(value.as_bytes().to_vec()),
            )])),
            ..Default::default()
        }
    }

    #[test]
    fn pull_secrets_of_both_types_parse() {
        let json = secret(
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            ".dockerconfigjson",
            r#"{"auths":{"reg.io":{"username":"u","password":"p"}}}"#,
        );
        let cfg = docker_config_of_secret(&json).unwrap().unwrap();
        assert_eq!(cfg["reg.io"], entry("u", "p"));
        let legacy = secret(
            SECRET_TYPE_DOCKERCFG,
            ".dockercfg",
            r#"{"reg.io":{"username":"u","password":"p","email":"e@x"}}"#,
        );
        let cfg = docker_config_of_secret(&legacy).unwrap().unwrap();
        assert_eq!(cfg["reg.io"].username, "u");
        // Another type, or the key of the other type: not a pull secret (skipped).
        let opaque = secret("Opaque", ".dockerconfigjson", "{}");
        assert_eq!(docker_config_of_secret(&opaque), Ok(None));
        let wrong_key = secret(SECRET_TYPE_DOCKERCFG, ".dockerconfigjson", "{}");
        assert_eq!(docker_config_of_secret(&wrong_key), Ok(None));
        let bad = secret(SECRET_TYPE_DOCKER_CONFIG_JSON, ".dockerconfigjson", "{");
        let err = docker_config_of_secret(&bad).unwrap_err().to_string();
        assert!(
            err.starts_with("secret team/pull: key .dockerconfigjson is not valid JSON"),
            "{err}"
        );
    }

    #[test]
    fn repositories_and_registries_of_images() {
        let cases = [
            ("busybox", "docker.io/library/busybox", "docker.io"),
            ("busybox:1.36", "docker.io/library/busybox", "docker.io"),
            ("team/app:1", "docker.io/team/app", "docker.io"),
            (
                "127.0.0.1:5000/private/app:1",
                "127.0.0.1:5000/private/app",
                "127.0.0.1:5000",
            ),
            ("reg.io/a/b@sha256:abcd", "reg.io/a/b", "reg.io"),
            ("localhost/testbox:1", "localhost/testbox", "localhost"),
            ("reg.io:443/app", "reg.io:443/app", "reg.io:443"),
        ];
        for (image, repo, registry) in cases {
            assert_eq!(repository_of(image), repo, "{image}");
            assert_eq!(registry_of(image), registry, "{image}");
        }
    }

    /// `{:?}` of every credential-bearing type of this module holds no secret (and still says
    /// what it is); `crate::redact` is how they do it.
    #[test]
    fn credential_types_debug_without_secrets() {
        crate::redact::assert_debug_redacted(vec![
            (
                "DockerConfigEntry",
                format!(
                    "{:?}",
                    DockerConfigEntry {
                        username: "robot".into(),
                        password: "hunter2".into(),
                        email: String::new(),
                        auth: "cm9ib3Q6aHVudGVyMg==".into(),
                    }
                ),
                vec!["hunter2".into(), "cm9ib3Q6aHVudGVyMg==".into()],
                vec!["robot", "password: <redacted>"],
            ),
            (
                "Credential",
                format!(
                    "{:?}",
                    Credential {
                        registry: "registry.example".into(),
                        username: "robot".into(),
                        password: "hunter2".into(),
                    }
                ),
                vec!["hunter2".into()],
                vec!["registry.example", "robot"],
            ),
        ]);
    }
}
