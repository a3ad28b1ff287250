//! TLS bootstrap (the kubelet's `pkg/kubelet/certificate/bootstrap`): a node that starts with
//! only a bootstrap kubeconfig (a bootstrap token allowed to create CSRs) obtains its own
//! client certificate and writes the `kubeconfig` it runs with, pointing at
//! `<certDir>/kubelet-client-current.pem`.
//!
//! Two ways, as the kubelet:
//! - with `rotateCertificates`, [`prepare_kubeconfig`] writes the kubeconfig at once (if the
//!   existing one holds no valid certificate) and the client certificate's manager requests
//!   the first certificate in the background, with the bootstrap credentials;
//! - without, [`load_client_cert`] requests it before nodelet goes on (`LoadClientCert`), with a
//!   stable CSR name derived from the key, so a restart while waiting finds the same request.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::json;
use serde_yaml::Value;
use tokio_util::sync::CancellationToken;

use super::csr::{self, CsrError};
use super::pair::{CertifiedPair, PairError};
use super::schedule;
use super::store::{
    ensure_private_dir, restrict_private_file, write_private, FileStore, StoreError, CLIENT_PREFIX,
};
use crate::clock::Clock;

/// Where the bootstrap key waits for its certificate (`tmpPrivateKeyFile`): kept across
/// restarts until the certificate is issued.
pub const TMP_KEY_FILE: &str = "kubelet-client.key.tmp";
/// How long the blocking bootstrap waits for its certificate.
pub const BOOTSTRAP_WAIT: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("kubeconfig {}: {message}", path.display())]
    Kubeconfig { path: PathBuf, message: String },
    #[error("bootstrap kubeconfig {}: {message}", path.display())]
    BootstrapKubeconfig { path: PathBuf, message: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Csr(#[from] CsrError),
    #[error("{}: {source}", path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: rcgen::Error,
    },
}

/// The parts of a kubeconfig's current context nodelet needs, relative paths resolved against
/// the file's directory.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct KubeconfigView {
    pub server: String,
    pub certificate_authority: Option<String>,
    pub certificate_authority_data: Option<String>,
    pub insecure_skip_tls_verify: bool,
    /// The user's client certificate and key (files or inline data, read).
    pub client_cert_pem: Option<Vec<u8>>,
    pub client_key_pem: Option<Vec<u8>>,
}

/// Everything but the client key, which shows only whether it is there.
impl std::fmt::Debug for KubeconfigView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeconfigView")
            .field("server", &self.server)
            .field("certificate_authority", &self.certificate_authority)
            .field(
                "certificate_authority_data",
                &self.certificate_authority_data,
            )
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field(
                "client_cert_pem",
                &self.client_cert_pem.as_ref().map(|c| c.len()),
            )
            .field(
                "client_key_pem",
                &crate::redact::optional(self.client_key_pem.as_ref()),
            )
            .finish()
    }
}

/// Reads a kubeconfig's current context. `Ok(None)` when the file does not exist.
pub fn read_kubeconfig(path: &Path) -> Result<Option<KubeconfigView>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let doc: Value = serde_yaml::from_str(&text).map_err(|e| format!("not valid YAML: {e}"))?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let current = doc
        .get("current-context")
        .and_then(Value::as_str)
        .ok_or("no current-context")?;
    let named = |list: &str, name: &str, inner: &str| -> Option<Value> {
        doc.get(list)?
            .as_sequence()?
            .iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(name))?
            .get(inner)
            .cloned()
    };
    let context = named("contexts", current, "context")
        .ok_or_else(|| format!("context {current:?} not found"))?;
    let cluster_name = context
        .get("cluster")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("context {current:?} names no cluster"))?;
    let cluster = named("clusters", cluster_name, "cluster")
        .ok_or_else(|| format!("cluster {cluster_name:?} not found"))?;
    let user = context
        .get("user")
        .and_then(Value::as_str)
        .and_then(|u| named("users", u, "user"))
        .unwrap_or(Value::Null);
    let text_of = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(String::from);
    let resolve = |p: String| {
        if Path::new(&p).is_absolute() {
            p
        } else {
            dir.join(p).display().to_string()
        }
    };
    let load = |data_key: &str, file_key: &str| -> Result<Option<Vec<u8>>, String> {
        if let Some(data) = text_of(&user, data_key) {
            use base64::Engine;
            return base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map(Some)
                .map_err(|e| format!("users[].user.{data_key}: not base64: {e}"));
        }
        match text_of(&user, file_key).map(resolve) {
            Some(file) => match std::fs::read(&file) {
                Ok(bytes) => Ok(Some(bytes)),
                // A kubeconfig written before its certificate exists (the bootstrap writes it
                // first) holds no certificate yet.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("{file}: {e}")),
            },
            None => Ok(None),
        }
    };
    Ok(Some(KubeconfigView {
        server: text_of(&cluster, "server")
            .ok_or_else(|| format!("cluster {cluster_name:?} has no server"))?,
        certificate_authority: text_of(&cluster, "certificate-authority").map(resolve),
        certificate_authority_data: text_of(&cluster, "certificate-authority-data"),
        insecure_skip_tls_verify: cluster
            .get("insecure-skip-tls-verify")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        client_cert_pem: load("client-certificate-data", "client-certificate")?,
        client_key_pem: load("client-key-data", "client-key")?,
    }))
}

/// The kubeconfig's client certificate and key, if it has both.
pub fn kubeconfig_pair(view: &KubeconfigView) -> Option<Result<CertifiedPair, PairError>> {
    match (&view.client_cert_pem, &view.client_key_pem) {
        (Some(cert), Some(key)) => Some(CertifiedPair::from_pem(cert, key)),
        _ => None,
    }
}

/// `isClientConfigStillValid`: the kubeconfig exists, reads, and carries a client certificate
/// (with its key) that has not expired. Anything else means: bootstrap.
pub fn is_still_valid(path: &Path, now: Timestamp) -> bool {
    let view = match read_kubeconfig(path) {
        Ok(Some(view)) => view,
        Ok(None) => return false,
        Err(error) => {
            tracing::warn!(kubeconfig = %path.display(), %error, "unable to read the existing kubeconfig; bootstrapping");
            return false;
        }
    };
    match kubeconfig_pair(&view) {
        Some(Ok(pair)) if now <= pair.info.not_after => true,
        Some(Ok(pair)) => {
            tracing::warn!(kubeconfig = %path.display(), not_after = %pair.info.not_after, "the kubeconfig's client certificate expired; bootstrapping");
            false
        }
        Some(Err(error)) => {
            tracing::warn!(kubeconfig = %path.display(), %error, "the kubeconfig's client certificate does not load; bootstrapping");
            false
        }
        None => false,
    }
}

/// The kubeconfig the kubelet writes after bootstrapping (`writeKubeconfigFromBootstrapping`):
/// the bootstrap kubeconfig's cluster (server, CA file or data, insecure flag) and the pair
/// file as client certificate and key.
pub fn kubeconfig_text(bootstrap: &KubeconfigView, pem_path: &Path) -> String {
    let mut cluster = serde_json::Map::new();
    cluster.insert("server".into(), json!(bootstrap.server));
    if bootstrap.insecure_skip_tls_verify {
        cluster.insert("insecure-skip-tls-verify".into(), json!(true));
    }
    match (
        &bootstrap.certificate_authority,
        &bootstrap.certificate_authority_data,
    ) {
        (Some(file), _) => {
            cluster.insert("certificate-authority".into(), json!(file));
        }
        (None, Some(data)) => {
            cluster.insert("certificate-authority-data".into(), json!(data));
        }
        (None, None) => {}
    }
    let pem = pem_path.display().to_string();
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "contexts": [{"name": "default-context", "context": {
            "cluster": "default-cluster", "namespace": "default", "user": "default-auth"}}],
        "current-context": "default-context",
        "preferences": {},
        "users": [{"name": "default-auth", "user": {
            "client-certificate": pem, "client-key": pem}}],
    });
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// Writes `kubeconfig` from the bootstrap kubeconfig, pointing at the store's current pair
/// (written whole, then renamed into place).
pub fn write_kubeconfig(
    kubeconfig: &Path,
    bootstrap: &KubeconfigView,
    pem_path: &Path,
) -> Result<(), BootstrapError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BootstrapError::Io { path, source }
    };
    if let Some(dir) = kubeconfig.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let tmp = kubeconfig.with_extension("tmp");
    write_private(&tmp, kubeconfig_text(bootstrap, pem_path).as_bytes())?;
    std::fs::rename(&tmp, kubeconfig).map_err(io(kubeconfig))
}

/// Reads the bootstrap kubeconfig (which must exist).
pub fn read_bootstrap(path: &Path) -> Result<KubeconfigView, BootstrapError> {
    let wrap = |message: String| BootstrapError::BootstrapKubeconfig {
        path: path.to_path_buf(),
        message,
    };
    read_kubeconfig(path)
        .map_err(wrap)?
        .ok_or_else(|| wrap("no such file".into()))
}

/// With rotation (`LoadClientConfig`): when `kubeconfig` holds no valid client certificate,
/// write it from the bootstrap kubeconfig, pointing at the store's current pair, and return
/// `true` (the bootstrap credentials then ask for the first certificate).
pub fn prepare_kubeconfig(
    kubeconfig: &Path,
    bootstrap: &Path,
    store: &FileStore,
    now: Timestamp,
) -> Result<bool, BootstrapError> {
    if is_still_valid(kubeconfig, now) {
        tracing::info!(kubeconfig = %kubeconfig.display(), "the kubeconfig's client certificate is still valid; no bootstrap necessary");
        return Ok(false);
    }
    let view = read_bootstrap(bootstrap)?;
    write_kubeconfig(kubeconfig, &view, &store.current_path())?;
    tracing::info!(kubeconfig = %kubeconfig.display(), pem = %store.current_path().display(),
        "wrote the kubeconfig from the bootstrap kubeconfig; requesting a client certificate with the bootstrap credentials");
    Ok(true)
}

/// Without rotation (`LoadClientCert`): when `kubeconfig` holds no valid client certificate,
/// request one with the bootstrap credentials and wait for it (up to an hour), then store it
/// and write the kubeconfig. The key waits in `<certDir>/kubelet-client.key.tmp` and the CSR
/// is named after it, so a restart while waiting asks for the same request.
pub async fn load_client_cert(
    kubeconfig: &Path,
    bootstrap: &Path,
    cert_dir: &Path,
    node_name: &str,
    clock: Clock,
    cancel: &CancellationToken,
) -> Result<(), BootstrapError> {
    if is_still_valid(kubeconfig, clock.now()) {
        tracing::info!(kubeconfig = %kubeconfig.display(), "kubeconfig exists and is valid; skipping bootstrap");
        return Ok(());
    }
    let view = read_bootstrap(bootstrap)?;
    let client = crate::cluster::kube_config(bootstrap)
        .await
        .ok()
        .and_then(|config| kube::Client::try_from(config).ok())
        .ok_or_else(|| BootstrapError::BootstrapKubeconfig {
            path: bootstrap.to_path_buf(),
            message: "cannot build an API client from it".into(),
        })?;
    ensure_private_dir(cert_dir)?;
    let key_path = cert_dir.join(TMP_KEY_FILE);
    let key = load_or_generate_key(&key_path)?;
    let template = csr::client_template(node_name);
    let request = csr::request_pem(&key, &template)?;
    let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
    let name = csr::digested_name(&spki, &template, csr::CLIENT_USAGES);
    let object = csr::csr_object(
        Some(&name),
        &request,
        csr::CLIENT_SIGNER,
        csr::CLIENT_USAGES,
        None,
    );
    let key_file = key_path.display().to_string();
    let mut attempt = 0;
    let (name, uid) = loop {
        match csr::create(&client, &object, &spki, &key_file).await {
            Ok(created) => break created,
            Err(error @ CsrError::Incompatible { .. }) => return Err(error.into()),
            Err(error) => {
                let delay = schedule::retry_delay(attempt, crate::backoff::random_unit());
                tracing::warn!(%error, ?delay, "requesting the node's client certificate; retrying");
                attempt += 1;
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = cancel.cancelled() => return Err(CsrError::Cancelled { name }.into()),
                }
            }
        }
    };
    tracing::info!(csr = %name, "waiting for the client certificate to be issued");
    let cert = csr::wait_for_certificate(&client, &name, &uid, BOOTSTRAP_WAIT, cancel).await?;
    let store = FileStore::new(cert_dir, CLIENT_PREFIX, None);
    store.update(&cert, key.serialize_pem().as_bytes(), clock.now())?;
    if let Err(error) = std::fs::remove_file(&key_path) {
        tracing::debug!(path = %key_path.display(), %error, "removing the bootstrap key");
    }
    write_kubeconfig(kubeconfig, &view, &store.current_path())
}

/// The key in `path`, or a new one written there (owner-only).
fn load_or_generate_key(path: &Path) -> Result<rcgen::KeyPair, BootstrapError> {
    // A kept key readable by others is made owner-only before it is used.
    restrict_private_file(path)?;
    if let Ok(pem) = std::fs::read_to_string(path) {
        match rcgen::KeyPair::from_pem(&pem) {
            Ok(key) => return Ok(key),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "the kept bootstrap key does not load; making a new one")
            }
        }
    }
    let key = csr::generate_key()?;
    write_private(path, key.serialize_pem().as_bytes())?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::super::pair::tests::issued;
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    /// The bootstrap key kept between attempts is made owner-only before it is used, and a
    /// new one is written 0600 over a wider file.
    #[test]
    fn kept_bootstrap_key_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TMP_KEY_FILE);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let first = load_or_generate_key(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let kept = load_or_generate_key(&path).unwrap();
        assert_eq!(
            kept.serialize_pem(),
            first.serialize_pem(),
            "the kept key is reused"
        );
        assert_eq!(mode(&path), 0o600);
        // A file that holds no key is replaced, and ends 0600 as well.
        std::fs::write(&path, "garbage").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        load_or_generate_key(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn kubeconfig_validity() {
        let dir = tempfile::tempdir().unwrap();
        let now: Timestamp = "2030-01-01T00:10:00Z".parse().unwrap();
        let (fresh_cert, fresh_key) = issued(
            "system:node:n1",
            &["system:nodes"],
            &[],
            "2030-01-01T00:00:00Z".parse().unwrap(),
            "2030-01-02T00:00:00Z".parse().unwrap(),
        );
        let (old_cert, old_key) = issued(
            "system:node:n1",
            &["system:nodes"],
            &[],
            "2029-01-01T00:00:00Z".parse().unwrap(),
            "2030-01-01T00:00:00Z".parse().unwrap(),
        );
        write(
            &dir.path().join("fresh.pem"),
            &format!("{fresh_cert}{fresh_key}"),
        );
        write(&dir.path().join("old.pem"), &format!("{old_cert}{old_key}"));
        let kubeconfig = |user: &str| {
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\n\
                 clusters:\n- name: k\n  cluster: {{server: 'https://127.0.0.1:6443'}}\nusers:\n- name: u\n  user: {user}\n"
            )
        };
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let cases: Vec<(&str, Option<String>, bool)> = vec![
            ("missing", None, false),
            ("garbage", Some("clusters: 7".into()), false),
            ("token", Some(kubeconfig("{token: abc}")), false),
            (
                "file pair",
                Some(kubeconfig(
                    "{client-certificate: fresh.pem, client-key: fresh.pem}",
                )),
                true,
            ),
            (
                "expired",
                Some(kubeconfig(
                    "{client-certificate: old.pem, client-key: old.pem}",
                )),
                false,
            ),
            (
                "not there yet",
                Some(kubeconfig(
                    "{client-certificate: none.pem, client-key: none.pem}",
                )),
                false,
            ),
            (
                "inline",
                Some(kubeconfig(&format!(
                    "{{client-certificate-data: {}, client-key-data: {}}}",
                    b64(&fresh_cert),
                    b64(&fresh_key)
                ))),
                true,
            ),
            (
                "no key",
                Some(kubeconfig(&format!(
                    "{{client-certificate-data: {}}}",
                    b64(&fresh_cert)
                ))),
                false,
            ),
        ];
        for (name, text, want) in cases {
            let path = dir.path().join(format!("{}.conf", name.replace(' ', "-")));
            if let Some(text) = text {
                write(&path, &text);
            }
            assert_eq!(is_still_valid(&path, now), want, "{name}");
        }
    }

    #[test]
    fn written_kubeconfig_points_at_the_pair_file() {
        let dir = tempfile::tempdir().unwrap();
        let bootstrap = dir.path().join("bootstrap-kubelet.conf");
        write(
            &bootstrap,
            "apiVersion: v1\nkind: Config\ncurrent-context: tls-bootstrap-token-user@kubernetes\n\
             contexts:\n- name: tls-bootstrap-token-user@kubernetes\n  context: {cluster: kubernetes, user: tls-bootstrap-token-user}\n\
             clusters:\n- name: kubernetes\n  cluster: {server: 'https://10.0.0.1:6443', certificate-authority-data: Q0E=}\n\
             users:\n- name: tls-bootstrap-token-user\n  user: {token: abcdef.0123456789abcdef}\n",
        );
        let store = FileStore::new(&dir.path().join("pki"), CLIENT_PREFIX, None);
        let kubeconfig = dir.path().join("etc/kubelet.conf");
        let now: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        assert!(prepare_kubeconfig(&kubeconfig, &bootstrap, &store, now).unwrap());
        let view = read_kubeconfig(&kubeconfig).unwrap().unwrap();
        assert_eq!(view.server, "https://10.0.0.1:6443");
        assert_eq!(view.certificate_authority_data.as_deref(), Some("Q0E="));
        // The pair file does not exist yet: no certificate, so still not valid.
        assert_eq!(view.client_cert_pem, None);
        assert!(!is_still_valid(&kubeconfig, now));
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        let pem = store.current_path().display().to_string();
        assert!(
            text.contains(&format!("client-certificate: {pem}"))
                && text.contains(&format!("client-key: {pem}")),
            "{text}"
        );
        // Once the pair is there, the same kubeconfig is valid and is kept.
        let (cert, key) = issued(
            "system:node:n1",
            &["system:nodes"],
            &[],
            "2029-12-31T00:00:00Z".parse().unwrap(),
            "2030-01-02T00:00:00Z".parse().unwrap(),
        );
        store.update(cert.as_bytes(), key.as_bytes(), now).unwrap();
        assert!(!prepare_kubeconfig(&kubeconfig, &bootstrap, &store, now).unwrap());
        // A missing bootstrap kubeconfig is named.
        let error = prepare_kubeconfig(
            &dir.path().join("other.conf"),
            &dir.path().join("no-bootstrap.conf"),
            &store,
            now,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("bootstrap kubeconfig ")
                && error.contains("no-bootstrap.conf: no such file"),
            "{error}"
        );
    }

    /// `{:?}` of every credential-bearing type of this module holds no secret (and still says
    /// what it is); `crate::redact` is how they do it.
    #[test]
    fn credential_types_debug_without_secrets() {
        use crate::certificate::CertifiedPair;

        let nb: jiff::Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let (cert, key) = issued("system:node:a", &[], &[], nb, nb);
        let key_body = key.lines().nth(1).unwrap().to_string();
        let pair = CertifiedPair::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
        crate::redact::assert_debug_redacted(vec![
            (
                "CertifiedPair",
                format!("{pair:?}"),
                vec![key_body.clone(), "PRIVATE KEY".into()],
                vec!["system:node:a", "key_pem: <redacted>"],
            ),
            (
                "KubeconfigView",
                format!(
                    "{:?}",
                    KubeconfigView {
                        server: "https://10.0.0.1:6443".into(),
                        client_key_pem: Some(key.clone().into_bytes()),
                        ..Default::default()
                    }
                ),
                vec![key_body.clone(), "PRIVATE KEY".into(), "45, 45".into()],
                vec!["https://10.0.0.1:6443", "client_key_pem: Some(<redacted>)"],
            ),
        ]);
    }
}
