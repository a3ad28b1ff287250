//! The kubelet's credential provider plugins (`pkg/credentialprovider/plugin`): a
//! `CredentialProviderConfig` (`kubelet.config.k8s.io/v1`) names executables in
//! `imageCredentialProviderBinDir`; for an image one of them matches (`matchImages`), nodelet
//! writes a `CredentialProviderRequest` (`credentialprovider.kubelet.k8s.io/v1`) to its stdin
//! and reads a `CredentialProviderResponse` from its stdout. Responses are cached for their
//! `cacheDuration` (else the provider's `defaultCacheDuration`; 0 = not cached) under the key
//! their `cacheKeyType` says: the image, its registry, or one global entry.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::keyring::{registry_of, urls_match, DockerConfig, DockerConfigEntry, Keyring};
use crate::config::parse_duration;

pub const CONFIG_API_VERSION: &str = "kubelet.config.k8s.io/v1";
pub const CONFIG_KIND: &str = "CredentialProviderConfig";
pub const PROVIDER_API_VERSION: &str = "credentialprovider.kubelet.k8s.io/v1";
/// How long a plugin may run (the kubelet's exec timeout).
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("reading credential provider config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("credential provider config {}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("credential provider plugin {name:?}: {message}")]
    Plugin { name: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConfig {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    providers: Vec<RawProvider>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawProvider {
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    api_version: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvVar>,
    token_attributes: Option<serde_yaml::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// One validated provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    pub name: String,
    pub match_images: Vec<String>,
    pub default_cache_duration: Duration,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    /// `imageCredentialProviderBinDir/<name>`.
    pub binary: PathBuf,
}

impl Provider {
    pub fn matches(&self, image: &str) -> bool {
        self.match_images.iter().any(|glob| urls_match(glob, image))
    }
}

/// Parses and validates a provider config as the kubelet's `validateCredentialProviderConfig`;
/// every error names the field (`providers[0].matchImages`) and the value.
pub fn parse_config(
    path: &Path,
    text: &str,
    bin_dir: &Path,
) -> Result<Vec<Provider>, ProviderError> {
    let invalid = |message: String| ProviderError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let raw: RawConfig = serde_yaml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    if raw.api_version.as_deref() != Some(CONFIG_API_VERSION) {
        return Err(invalid(format!(
            "apiVersion: Unsupported value: {:?}: supported values: {CONFIG_API_VERSION:?}",
            raw.api_version.unwrap_or_default()
        )));
    }
    if raw.kind.as_deref() != Some(CONFIG_KIND) {
        return Err(invalid(format!(
            "kind: Unsupported value: {:?}: supported values: {CONFIG_KIND:?}",
            raw.kind.unwrap_or_default()
        )));
    }
    if raw.providers.is_empty() {
        return Err(invalid(
            "providers: Required value: at least 1 item in plugins is required".into(),
        ));
    }
    let mut out: Vec<Provider> = Vec::new();
    for (i, p) in raw.providers.into_iter().enumerate() {
        let field = |f: &str| format!("providers[{i}].{f}");
        if p.name.is_empty() {
            return Err(invalid(format!("{}: Required value", field("name"))));
        }
        if p.name.contains('/') || p.name.contains(' ') || p.name == "." || p.name == ".." {
            return Err(invalid(format!(
                "{}: Invalid value: {:?}: must be a file name in imageCredentialProviderBinDir",
                field("name"),
                p.name
            )));
        }
        if out.iter().any(|o| o.name == p.name) {
            return Err(invalid(format!(
                "{}: Duplicate value: {:?}",
                field("name"),
                p.name
            )));
        }
        if p.match_images.is_empty() {
            return Err(invalid(format!(
                "{}: Required value: at least 1 item in matchImages is required",
                field("matchImages")
            )));
        }
        for m in &p.match_images {
            if m.is_empty() || m.contains("://") {
                return Err(invalid(format!(
                    "{}: Invalid value: {m:?}: must be a registry host, port and path (globs in the host), no scheme",
                    field("matchImages")
                )));
            }
        }
        let default_cache_duration = match &p.default_cache_duration {
            None => {
                return Err(invalid(format!(
                    "{}: Required value",
                    field("defaultCacheDuration")
                )))
            }
            Some(d) => parse_duration(d).map_err(|e| {
                invalid(format!(
                    "{}: Invalid value: {d:?}: {e}",
                    field("defaultCacheDuration")
                ))
            })?,
        };
        match p.api_version.as_deref() {
            Some(PROVIDER_API_VERSION) => {}
            other => {
                return Err(invalid(format!(
                    "{}: Unsupported value: {:?}: supported values: {PROVIDER_API_VERSION:?}",
                    field("apiVersion"),
                    other.unwrap_or_default()
                )))
            }
        }
        if p.token_attributes.is_some() {
            return Err(invalid(format!(
                "{}: Forbidden: service account tokens for credential providers are not implemented by nodelet",
                field("tokenAttributes")
            )));
        }
        let binary = bin_dir.join(&p.name);
        if let Err(e) = std::fs::metadata(&binary) {
            return Err(invalid(format!(
                "{}: error inspecting binary executable {}: {e}",
                field("name"),
                binary.display()
            )));
        }
        out.push(Provider {
            name: p.name,
            match_images: p.match_images,
            default_cache_duration,
            args: p.args,
            env: p.env,
            binary,
        });
    }
    Ok(out)
}

/// Reads and validates the file named by `imageCredentialProviderConfig`.
pub fn load_config(path: &Path, bin_dir: &Path) -> Result<Vec<Provider>, ProviderError> {
    let text = std::fs::read_to_string(path).map_err(|source| ProviderError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if !bin_dir.is_dir() {
        return Err(ProviderError::Invalid {
            path: path.to_path_buf(),
            message: format!(
                "imageCredentialProviderBinDir: plugin binary directory {} did not exist",
                bin_dir.display()
            ),
        });
    }
    parse_config(path, &text, bin_dir)
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    api_version: &'static str,
    kind: &'static str,
    image: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum CacheKeyType {
    Image,
    Registry,
    Global,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawResponse {
    api_version: Option<String>,
    kind: Option<String>,
    cache_key_type: Option<String>,
    cache_duration: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, RawAuth>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawAuth {
    username: String,
    password: String,
}

impl std::fmt::Debug for RawAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawAuth")
            .field("username", &self.username)
            .field("password", &crate::redact::secret(&self.password))
            .finish()
    }
}

/// A decoded, validated `CredentialProviderResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub cache_key_type: CacheKeyType,
    /// `None`: the provider's default.
    pub cache_duration: Option<Duration>,
    pub auth: DockerConfig,
}

/// Decodes a plugin's stdout as the kubelet does: the apiVersion must be the provider's and
/// the kind `CredentialProviderResponse`; `cacheKeyType` is required.
pub fn parse_response(name: &str, stdout: &[u8]) -> Result<Response, ProviderError> {
    let err = |message: String| ProviderError::Plugin {
        name: name.to_string(),
        message,
    };
    let raw: RawResponse = serde_json::from_slice(stdout).map_err(|e| {
        err(format!(
            "error decoding credential provider plugin response from stdout: {e}"
        ))
    })?;
    if raw.api_version.as_deref() != Some(PROVIDER_API_VERSION) {
        return Err(err(format!(
            "unsupported credential provider response apiVersion {:?}, expected {PROVIDER_API_VERSION:?}",
            raw.api_version.unwrap_or_default()
        )));
    }
    if raw.kind.as_deref() != Some("CredentialProviderResponse") {
        return Err(err(format!(
            "unexpected kind {:?} in the plugin response, expected \"CredentialProviderResponse\"",
            raw.kind.unwrap_or_default()
        )));
    }
    let cache_key_type = match raw.cache_key_type.as_deref() {
        Some("Image") => CacheKeyType::Image,
        Some("Registry") => CacheKeyType::Registry,
        Some("Global") => CacheKeyType::Global,
        other => {
            return Err(err(format!(
                "invalid cache key type {:?} in the plugin response, expected Image, Registry or Global",
                other.unwrap_or_default()
            )))
        }
    };
    let cache_duration = raw
        .cache_duration
        .as_deref()
        .map(|d| parse_duration(d).map_err(|e| err(format!("cacheDuration {d:?}: {e}"))))
        .transpose()?;
    let auth = raw
        .auth
        .into_iter()
        .map(|(registry, a)| {
            (
                registry,
                DockerConfigEntry {
                    username: a.username,
                    password: a.password,
                    ..Default::default()
                },
            )
        })
        .collect();
    Ok(Response {
        cache_key_type,
        cache_duration,
        auth,
    })
}

/// Runs one plugin for one image; returns its stdout.
#[async_trait]
pub trait PluginExec: Send + Sync {
    async fn exec(&self, provider: &Provider, request: &[u8]) -> Result<Vec<u8>, String>;
}

/// The real thing: the binary with the provider's args and env (on top of nodelet's),
/// the request on stdin, stdout read, killed after [`PLUGIN_TIMEOUT`].
#[derive(Debug, Default)]
pub struct ProcessExec;

#[async_trait]
impl PluginExec for ProcessExec {
    async fn exec(&self, provider: &Provider, request: &[u8]) -> Result<Vec<u8>, String> {
        let mut cmd = tokio::process::Command::new(&provider.binary);
        cmd.args(&provider.args)
            .envs(provider.env.iter().map(|e| (&e.name, &e.value)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("running {}: {e}", provider.binary.display()))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(request)
                .await
                .map_err(|e| format!("writing the request to the plugin: {e}"))?;
        }
        let output = tokio::time::timeout(PLUGIN_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| format!("plugin did not finish within {PLUGIN_TIMEOUT:?}"))?
            .map_err(|e| format!("waiting for the plugin: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "{}, stderr: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(output.stdout)
    }
}

/// The key a response is cached under.
pub fn cache_key(kind: CacheKeyType, image: &str) -> String {
    match kind {
        CacheKeyType::Image => image.to_string(),
        CacheKeyType::Registry => registry_of(image),
        CacheKeyType::Global => "global".to_string(),
    }
}

#[derive(Debug, Clone)]
struct Cached {
    auth: DockerConfig,
    expires: Instant,
}

/// A provider's response cache: looked up by image, then registry, then global (the
/// kubelet's `getCachedCredentials`); expired entries are dropped when looked at.
#[derive(Debug, Default)]
pub struct ResponseCache {
    entries: HashMap<(CacheKeyType, String), Cached>,
}

impl ResponseCache {
    pub fn get(&mut self, image: &str, now: Instant) -> Option<DockerConfig> {
        for kind in [
            CacheKeyType::Image,
            CacheKeyType::Registry,
            CacheKeyType::Global,
        ] {
            let key = (kind, cache_key(kind, image));
            match self.entries.get(&key) {
                Some(c) if c.expires > now => return Some(c.auth.clone()),
                Some(_) => {
                    self.entries.remove(&key);
                }
                None => {}
            }
        }
        None
    }

    /// Stores a response; a duration of zero is not cached.
    pub fn put(&mut self, image: &str, response: &Response, default: Duration, now: Instant) {
        let duration = response.cache_duration.unwrap_or(default);
        if duration.is_zero() {
            return;
        }
        let key = (
            response.cache_key_type,
            cache_key(response.cache_key_type, image),
        );
        self.entries.insert(
            key,
            Cached {
                auth: response.auth.clone(),
                expires: crate::clock::saturating_deadline(now, duration),
            },
        );
    }
}

/// Every configured provider, with its cache.
pub struct CredentialProviders {
    providers: Vec<(Provider, Mutex<ResponseCache>)>,
    exec: Arc<dyn PluginExec>,
}

impl CredentialProviders {
    pub fn new(providers: Vec<Provider>, exec: Arc<dyn PluginExec>) -> CredentialProviders {
        CredentialProviders {
            providers: providers
                .into_iter()
                .map(|p| (p, Mutex::new(ResponseCache::default())))
                .collect(),
            exec,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }

    /// The credentials every matching provider gives for `image` (the repository, without
    /// tag), as a keyring. A failing plugin is logged and gives nothing, as in the kubelet:
    /// the pull goes on with what else there is.
    pub async fn keyring(&self, image: &str) -> Keyring {
        let mut keyring = Keyring::default();
        for (provider, cache) in &self.providers {
            if !provider.matches(image) {
                continue;
            }
            // The cache lock is held across the exec: concurrent pulls of one image run the
            // plugin once (the kubelet's singleflight).
            let mut cache = cache.lock().await;
            if let Some(auth) = cache.get(image, Instant::now()) {
                keyring.add(&auth);
                continue;
            }
            let request = serde_json::to_vec(&Request {
                api_version: PROVIDER_API_VERSION,
                kind: "CredentialProviderRequest",
                image,
            })
            .unwrap_or_default();
            let response = self
                .exec
                .exec(provider, &request)
                .await
                .map_err(|message| ProviderError::Plugin {
                    name: provider.name.clone(),
                    message,
                })
                .and_then(|stdout| parse_response(&provider.name, &stdout));
            match response {
                Ok(response) => {
                    cache.put(
                        image,
                        &response,
                        provider.default_cache_duration,
                        Instant::now(),
                    );
                    keyring.add(&response.auth);
                }
                Err(e) => {
                    tracing::error!(image, error = %e, "Failed getting credential from external registry credential provider");
                }
            }
        }
        keyring
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn provider_yaml(extra: &str) -> String {
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: sh\n  matchImages: [\"127.0.0.1:5000\", \"*.example.com\"]\n  defaultCacheDuration: 10m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n{extra}"
        )
    }

    #[test]
    fn raw_auth_debug_hides_the_password() {
        let raw = RawAuth {
            username: "robot".into(),
            password: "hunter2".into(),
        };
        let text = format!("{raw:?}");
        assert!(
            !text.contains("hunter2") && text.contains("robot"),
            "{text}"
        );
        assert!(text.contains("password: <redacted>"), "{text}");
    }

    #[test]
    fn config_parses_and_validates_with_field_names() {
        let bin = Path::new("/bin");
        let p = parse_config(
            Path::new("/c.yaml"),
            &provider_yaml("  args: [a]\n  env: [{name: K, value: V}]\n"),
            bin,
        )
        .unwrap();
        assert_eq!(p[0].binary, Path::new("/bin/sh"));
        assert_eq!(p[0].default_cache_duration, Duration::from_secs(600));
        assert_eq!(
            p[0].env,
            [EnvVar {
                name: "K".into(),
                value: "V".into()
            }]
        );
        assert!(p[0].matches("reg.example.com/app"));
        assert!(!p[0].matches("example.com/app"));
        assert!(p[0].matches("127.0.0.1:5000/private/app"));
        assert!(!p[0].matches("127.0.0.1:5001/private/app"));

        let bad = |text: String, want: &str| {
            let err = parse_config(Path::new("/c.yaml"), &text, bin)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err} does not contain {want}");
        };
        bad(
            provider_yaml("").replace("10m", "ten"),
            "providers[0].defaultCacheDuration: Invalid value: \"ten\"",
        );
        bad(
            provider_yaml("").replace("credentialprovider.kubelet.k8s.io/v1", "v0"),
            "providers[0].apiVersion: Unsupported value: \"v0\"",
        );
        bad(
            provider_yaml("").replace("name: sh", "name: ../sh"),
            "providers[0].name: Invalid value: \"../sh\"",
        );
        bad(
            provider_yaml("").replace("name: sh", "name: no-such-plugin"),
            "providers[0].name: error inspecting binary executable /bin/no-such-plugin",
        );
        bad(
            provider_yaml("").replace("[\"127.0.0.1:5000\", \"*.example.com\"]", "[]"),
            "providers[0].matchImages: Required value",
        );
        bad(
            provider_yaml("").replace("kind: CredentialProviderConfig", "kind: Other"),
            "kind: Unsupported value: \"Other\"",
        );
        bad(
            provider_yaml("  tokenAttributes: {}\n"),
            "providers[0].tokenAttributes: Forbidden",
        );
        bad(provider_yaml("  colour: red\n"), "unknown field `colour`");
    }

    #[test]
    fn responses_decode_and_validate() {
        let ok = br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"5m","auth":{"reg.io":{"username":"u","password":"p"}}}"#;
        let r = parse_response("p", ok).unwrap();
        assert_eq!(r.cache_key_type, CacheKeyType::Registry);
        assert_eq!(r.cache_duration, Some(Duration::from_secs(300)));
        assert_eq!(r.auth["reg.io"].username, "u");
        let cases: &[(&[u8], &str)] = &[
            (b"not json", "error decoding credential provider plugin response"),
            (br#"{"apiVersion":"v1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#, "unsupported credential provider response apiVersion \"v1\""),
            (br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"X","cacheKeyType":"Image"}"#, "unexpected kind \"X\""),
            (br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Pod"}"#, "invalid cache key type \"Pod\""),
            (br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse"}"#, "invalid cache key type \"\""),
        ];
        for (stdout, want) in cases {
            let err = parse_response("p", stdout).unwrap_err().to_string();
            assert!(err.contains(want), "{err} does not contain {want}");
        }
    }

    fn response(kind: CacheKeyType, duration: Option<u64>, user: &str) -> Response {
        Response {
            cache_key_type: kind,
            cache_duration: duration.map(Duration::from_secs),
            auth: DockerConfig::from([(
                "reg.io".to_string(),
                DockerConfigEntry {
                    username: user.into(),
                    ..Default::default()
                },
            )]),
        }
    }

    #[test]
    fn cache_is_keyed_by_image_registry_or_global_and_expires() {
        let t0 = Instant::now();
        let default = Duration::from_secs(60);
        let user = |c: &mut ResponseCache, image: &str, at: u64| {
            c.get(image, t0 + Duration::from_secs(at))
                .map(|a| a["reg.io"].username.clone())
        };
        // (kind, response duration, image looked up, seconds later, hit)
        type Case<'a> = (CacheKeyType, Option<u64>, &'a str, u64, Option<&'a str>);
        let cases: &[Case] = &[
            (CacheKeyType::Image, None, "reg.io/a", 59, Some("x")),
            (CacheKeyType::Image, None, "reg.io/a", 60, None),
            (CacheKeyType::Image, None, "reg.io/b", 1, None),
            (CacheKeyType::Registry, None, "reg.io/b", 1, Some("x")),
            (CacheKeyType::Registry, None, "other.io/a", 1, None),
            (CacheKeyType::Global, None, "other.io/a", 1, Some("x")),
            (CacheKeyType::Image, Some(300), "reg.io/a", 299, Some("x")),
            (CacheKeyType::Image, Some(300), "reg.io/a", 300, None),
            // A duration of 0 is not cached.
            (CacheKeyType::Global, Some(0), "reg.io/a", 0, None),
        ];
        for (kind, duration, image, at, want) in cases {
            let mut c = ResponseCache::default();
            c.put("reg.io/a", &response(*kind, *duration, "x"), default, t0);
            assert_eq!(
                user(&mut c, image, *at).as_deref(),
                *want,
                "{kind:?} {duration:?} {image} +{at}s"
            );
        }
        // The most specific key wins: image, then registry, then global.
        let mut c = ResponseCache::default();
        c.put(
            "reg.io/a",
            &response(CacheKeyType::Global, None, "global"),
            default,
            t0,
        );
        c.put(
            "reg.io/a",
            &response(CacheKeyType::Registry, None, "registry"),
            default,
            t0,
        );
        c.put(
            "reg.io/a",
            &response(CacheKeyType::Image, None, "image"),
            default,
            t0,
        );
        assert_eq!(user(&mut c, "reg.io/a", 1).as_deref(), Some("image"));
        assert_eq!(user(&mut c, "reg.io/b", 1).as_deref(), Some("registry"));
        assert_eq!(user(&mut c, "x.io/b", 1).as_deref(), Some("global"));
    }

    struct CountingExec(AtomicUsize, &'static str);

    #[async_trait]
    impl PluginExec for CountingExec {
        async fn exec(&self, _: &Provider, request: &[u8]) -> Result<Vec<u8>, String> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let req: serde_json::Value = serde_json::from_slice(request).unwrap();
            assert_eq!(req["kind"], "CredentialProviderRequest");
            assert_eq!(req["apiVersion"], PROVIDER_API_VERSION);
            Ok(self.1.as_bytes().to_vec())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn providers_run_once_per_cache_period_and_only_when_matching() {
        let provider =
            parse_config(Path::new("/c"), &provider_yaml(""), Path::new("/bin")).unwrap();
        let exec = Arc::new(CountingExec(
            AtomicUsize::new(0),
            r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{"*.example.com":{"username":"u","password":"p"}}}"#,
        ));
        let providers = CredentialProviders::new(provider, exec.clone());
        let k = providers.keyring("reg.example.com/app").await;
        assert_eq!(k.lookup("reg.example.com/app")[0].username, "u");
        providers.keyring("reg.example.com/other").await;
        assert_eq!(
            exec.0.load(Ordering::SeqCst),
            1,
            "the registry-keyed response is reused"
        );
        assert!(providers.keyring("quay.io/app").await.is_empty());
        assert_eq!(
            exec.0.load(Ordering::SeqCst),
            1,
            "a provider that does not match is not run"
        );
        tokio::time::advance(Duration::from_secs(601)).await;
        providers.keyring("reg.example.com/app").await;
        assert_eq!(
            exec.0.load(Ordering::SeqCst),
            2,
            "after defaultCacheDuration it runs again"
        );
    }
}
