//! The kubelet API's HTTPS: the serving certificate (configured, or self-signed and kept under
//! `<rootDir>/pki` as the kubelet keeps `kubelet.crt`/`kubelet.key`), client certificates
//! checked against `authentication.x509.clientCAFile`, and the accept loop that hands each
//! request the identity of its connection's certificate.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::auth::{user_from_certificate, PeerIdentity};
use super::BindError;
use crate::config::kubelet_server::{CipherSuite, KxGroup, TlsSettings, TlsVersion};

/// How long a client may take to finish the TLS handshake (then
/// [`super::connection::HEADER_TIMEOUT`] to send a request's head).
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Problems with certificates, keys and CA files, each naming the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("generating a self-signed serving certificate: {0}")]
    Generate(String),
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// A certificate chain and its key.
pub struct ServingCert {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Certificates of a PEM file (at least one).
pub fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid {
            path: path.to_path_buf(),
            reason: format!("not a PEM certificate file: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Invalid {
            path: path.to_path_buf(),
            reason: "no certificate in the file".into(),
        });
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Invalid {
        path: path.to_path_buf(),
        reason: format!("no PEM private key: {e}"),
    })
}

/// `tlsCertFile`/`tlsPrivateKeyFile` when set; else `<pki_dir>/kubelet.crt|key`, made once
/// (self-signed, for the node name and its addresses) and reused after restarts.
pub fn serving_certificate(
    configured: Option<(&Path, &Path)>,
    pki_dir: &Path,
    node_name: &str,
    addresses: &[IpAddr],
) -> Result<ServingCert, TlsError> {
    let (cert_path, key_path) = match configured {
        Some((cert, key)) => (cert.to_path_buf(), key.to_path_buf()),
        None => {
            let cert = pki_dir.join("kubelet.crt");
            let key = pki_dir.join("kubelet.key");
            if !cert.exists() || !key.exists() {
                write_self_signed(&cert, &key, node_name, addresses)?;
            } else {
                // Kept from an earlier start: the key is made owner-only if it is not, and
                // the directory 0700.
                crate::certificate::store::ensure_private_dir(pki_dir).map_err(store_error)?;
                crate::certificate::store::restrict_private_file(&key).map_err(store_error)?;
            }
            (cert, key)
        }
    };
    Ok(ServingCert {
        chain: load_certificates(&cert_path)?,
        key: load_key(&key_path)?,
    })
}

/// A self-signed certificate for `node_name` and `addresses` (CN `<node>@<unix time>`, as the
/// kubelet names its own), key readable by root only. rcgen's default validity (to year 4096)
/// is kept: nothing renews this certificate, and clients that check it pin it anyway.
fn write_self_signed(
    cert_path: &Path,
    key_path: &Path,
    node_name: &str,
    addresses: &[IpAddr],
) -> Result<(), TlsError> {
    let mut names = vec![node_name.to_string()];
    names.extend(addresses.iter().map(|ip| ip.to_string()));
    let mut params =
        rcgen::CertificateParams::new(names).map_err(|e| TlsError::Generate(e.to_string()))?;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("{node_name}@{}", jiff::Timestamp::now().as_second()),
    );
    let key = rcgen::KeyPair::generate().map_err(|e| TlsError::Generate(e.to_string()))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| TlsError::Generate(e.to_string()))?;
    let dir = cert_path.parent().unwrap_or(Path::new("/"));
    crate::certificate::store::ensure_private_dir(dir).map_err(store_error)?;
    crate::certificate::store::write_private(key_path, key.serialize_pem().as_bytes())
        .map_err(store_error)?;
    std::fs::write(cert_path, cert.pem()).map_err(|source| TlsError::Write {
        path: cert_path.to_path_buf(),
        source,
    })
}

/// A certificate store's error as this module's (each names its path).
fn store_error(error: crate::certificate::store::StoreError) -> TlsError {
    use crate::certificate::store::StoreError;
    match error {
        StoreError::Io { path, source } => TlsError::Write { path, source },
        StoreError::Invalid { path, source } => TlsError::Invalid {
            path,
            reason: source.to_string(),
        },
    }
}

/// The server configuration: `cert`, and when `client_ca` is set, client certificates chaining
/// to it are verified (and requests without one may still authenticate otherwise).
pub fn server_config(
    cert: ServingCert,
    client_ca: Option<&Path>,
    tls: &TlsSettings,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = config_builder(client_ca, tls)?;
    let mut config = builder
        .with_single_cert(cert.chain, cert.key)
        .map_err(|e| TlsError::Config(format!("serving certificate and key: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The server configuration serving the current pair of a certificate manager
/// (`serverTLSBootstrap`): each handshake takes the pair current at that moment, so a renewed
/// certificate is served without a restart. Before the first one is issued, handshakes fail
/// ("no serving certificate available for the kubelet", as the kubelet's).
pub fn server_config_rotating(
    pairs: tokio::sync::watch::Receiver<Option<crate::certificate::SharedPair>>,
    client_ca: Option<&Path>,
    tls: &TlsSettings,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = config_builder(client_ca, tls)?;
    let mut config = builder.with_cert_resolver(Arc::new(ManagedCert {
        pairs,
        cached: std::sync::Mutex::new(None),
    }));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Resolves the serving certificate to a manager's current pair (converted once per pair).
#[derive(Debug)]
struct ManagedCert {
    pairs: tokio::sync::watch::Receiver<Option<crate::certificate::SharedPair>>,
    cached: std::sync::Mutex<
        Option<(
            crate::certificate::SharedPair,
            Arc<rustls::sign::CertifiedKey>,
        )>,
    >,
}

impl rustls::server::ResolvesServerCert for ManagedCert {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        let Some(pair) = self.pairs.borrow().clone() else {
            tracing::debug!("no serving certificate available for the kubelet");
            return None;
        };
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((for_pair, key)) = cached.as_ref() {
            if Arc::ptr_eq(for_pair, &pair) {
                return Some(key.clone());
            }
        }
        let signing = match rustls::crypto::ring::sign::any_supported_type(&pair.key_clone()) {
            Ok(signing) => signing,
            Err(error) => {
                tracing::warn!(%error, "the serving certificate's key is not usable");
                return None;
            }
        };
        let key = Arc::new(rustls::sign::CertifiedKey::new(pair.chain.clone(), signing));
        *cached = Some((pair, key.clone()));
        Some(key)
    }
}

/// The ring provider narrowed to `tls` (`tlsCipherSuites`, `tlsCurvePreferences`): TLS 1.3's
/// suites always stay, as in Go, where they are not configurable; TLS 1.2's are the listed
/// ones, in the listed order, when the field is set.
pub fn crypto_provider(tls: &TlsSettings) -> rustls::crypto::CryptoProvider {
    use rustls::crypto::ring::{cipher_suite as cs, kx_group};
    let defaults = rustls::crypto::ring::default_provider();
    let cipher_suites = if tls.cipher_suites_set {
        let tls13 = defaults
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13)
            .copied();
        let tls12 = tls.cipher_suites_tls12.iter().map(|s| match s {
            CipherSuite::EcdheEcdsaAes128GcmSha256 => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::EcdheEcdsaAes256GcmSha384 => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            CipherSuite::EcdheEcdsaChacha20Poly1305 => {
                cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            }
            CipherSuite::EcdheRsaAes128GcmSha256 => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::EcdheRsaAes256GcmSha384 => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            CipherSuite::EcdheRsaChacha20Poly1305 => {
                cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
            }
        });
        tls13.chain(tls12).collect()
    } else {
        defaults.cipher_suites.clone()
    };
    let kx_groups = if tls.curve_preferences.is_empty() {
        defaults.kx_groups.clone()
    } else {
        tls.curve_preferences
            .iter()
            .map(|g| match g {
                KxGroup::Secp256r1 => kx_group::SECP256R1,
                KxGroup::Secp384r1 => kx_group::SECP384R1,
                KxGroup::X25519 => kx_group::X25519,
            })
            .collect()
    };
    rustls::crypto::CryptoProvider {
        cipher_suites,
        kx_groups,
        ..defaults
    }
}

/// The protocol versions from `tlsMinVersion` (rustls has nothing older than TLS 1.2).
pub fn protocol_versions(
    tls: &TlsSettings,
) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static TLS12_AND_UP: &[&rustls::SupportedProtocolVersion] =
        &[&rustls::version::TLS13, &rustls::version::TLS12];
    static TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
    match tls.min_version {
        TlsVersion::Tls12 => TLS12_AND_UP,
        TlsVersion::Tls13 => TLS13_ONLY,
    }
}

fn config_builder(
    client_ca: Option<&Path>,
    tls: &TlsSettings,
) -> Result<rustls::ConfigBuilder<ServerConfig, rustls::server::WantsServerCert>, TlsError> {
    let provider = Arc::new(crypto_provider(tls));
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(protocol_versions(tls))
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_ca {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in load_certificates(path)? {
                roots.add(cert).map_err(|e| TlsError::Invalid {
                    path: path.to_path_buf(),
                    reason: format!("not a usable CA certificate: {e}"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Invalid {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    Ok(builder)
}

/// How often the files a reloadable configuration was built from are checked for a change.
/// The kubelet's file watches resync every minute; Kubernetes' reload tests allow a minute.
pub const RELOAD_CHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// Builds the server configuration again from its files.
pub type BuildConfig = Arc<dyn Fn() -> Result<Arc<ServerConfig>, TlsError> + Send + Sync>;

/// What tells one version of a file from the next: device, inode, size and modification time
/// of what the path names now (symlinks followed, so a swapped link counts), `None` when it
/// cannot be read.
pub type FileSignature = Option<(u64, u64, u64, i64, i64)>;

/// The signatures of `files`, read now.
pub fn file_signatures(files: &[PathBuf]) -> Vec<FileSignature> {
    use std::os::unix::fs::MetadataExt;
    files
        .iter()
        .map(|f| {
            std::fs::metadata(f)
                .ok()
                .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
        })
        .collect()
}

/// Serves the configuration `build` makes on `configs` again whenever one of `files` changes
/// (`tlsCertFile` and `tlsPrivateKeyFile` with `ReloadKubeletServerCertificateFile`,
/// `authentication.x509.clientCAFile` with `ReloadKubeletClientCAFile`, as the kubelet's
/// dynamic certificate files), checked every `every`. A configuration that does not build (a
/// pair written half-way, a key that does not match) keeps the one served and is tried again
/// at the next check. New connections take the new configuration; open ones keep theirs.
pub async fn reload_on_change(
    files: Vec<PathBuf>,
    build: BuildConfig,
    configs: tokio::sync::watch::Sender<Arc<ServerConfig>>,
    every: std::time::Duration,
    cancel: CancellationToken,
) {
    let signatures = |files: Vec<PathBuf>| async move {
        tokio::task::spawn_blocking(move || file_signatures(&files))
            .await
            .unwrap_or_default()
    };
    let mut served = signatures(files.clone()).await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let now = signatures(files.clone()).await;
        if now == served {
            continue;
        }
        let build = build.clone();
        match tokio::task::spawn_blocking(move || build()).await {
            Ok(Ok(config)) => {
                tracing::info!(files = ?files, "kubelet API certificates changed on disk; serving them");
                configs.send_replace(config);
                served = now;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "kubelet API certificates changed on disk but do not load; serving the previous ones");
            }
            Err(error) => tracing::warn!(%error, "reloading the kubelet API certificates"),
        }
    }
}

/// Serves `router` over TLS on `addr` until `cancel`, each new connection with the
/// configuration `configs` holds at that moment. Each request carries the [`PeerIdentity`]
/// of its connection. The accept loop and every connection run as tasks of `tasks`; on
/// `cancel` the connections shut down gracefully.
pub async fn serve_tls(
    addr: SocketAddr,
    configs: tokio::sync::watch::Receiver<Arc<ServerConfig>>,
    router: Router,
    cancel: CancellationToken,
    tasks: &TaskTracker,
) -> Result<SocketAddr, BindError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| BindError { addr, source })?;
    let router = super::connection::limited(router);
    tracing::info!(%local, "kubelet API listening (HTTPS)");
    let connections = tasks.clone();
    tasks.spawn(async move {
        while let Some((stream, remote)) =
            super::connection::accept(&listener, &cancel, "kubelet API").await
        {
            let acceptor = tokio_rustls::TlsAcceptor::from(configs.borrow().clone());
            let router = router.clone();
            let cancel = cancel.clone();
            connections.spawn(async move {
                // A client that opens a connection and says nothing must not hold a task
                // forever.
                let tls =
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(error)) => {
                            tracing::debug!(%error, %remote, "kubelet API TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%remote, "kubelet API TLS handshake timed out");
                            return;
                        }
                    };
                let peer = PeerIdentity(
                    tls.get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|certs| certs.first())
                        .and_then(|cert| user_from_certificate(cert)),
                );
                let router = router
                    .layer(axum::Extension(peer))
                    .layer(axum::Extension(super::auth::ClientAddr(remote.ip())));
                if let Err(error) = super::connection::serve_connection(tls, router, cancel).await {
                    tracing::debug!(%error, %remote, "kubelet API connection");
                }
            });
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_certificate_is_made_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let ips = ["10.0.0.7".parse().unwrap()];
        let first = serving_certificate(None, &pki, "node-a", &ips).unwrap();
        let second = serving_certificate(None, &pki, "node-a", &ips).unwrap();
        assert_eq!(first.chain, second.chain, "reused after a restart");
        let user = user_from_certificate(&first.chain[0]).unwrap();
        assert!(user.name.starts_with("node-a@"), "{}", user.name);
        let mode = std::fs::metadata(pki.join("kubelet.key")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
        server_config(first, None, &TlsSettings::default()).unwrap();
    }

    /// A kept serving key left readable by others (and its directory) is narrowed at the next
    /// start, before it is served.
    #[test]
    fn a_kept_serving_key_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        serving_certificate(None, &pki, "node-a", &[]).unwrap();
        let key = pki.join("kubelet.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&pki, std::fs::Permissions::from_mode(0o755)).unwrap();
        serving_certificate(None, &pki, "node-a", &[]).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&pki), 0o700);
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("c.pem");
        let key = dir.path().join("k.pem");
        std::fs::write(&cert, "not pem").unwrap();
        std::fs::write(&key, "not pem").unwrap();
        let error = serving_certificate(Some((&cert, &key)), dir.path(), "n", &[])
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("c.pem") && error.contains("no certificate"),
            "{error}"
        );
        let missing = dir.path().join("missing.pem");
        let error = serving_certificate(Some((&missing, &key)), dir.path(), "n", &[])
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.starts_with("reading ") && error.contains("missing.pem"),
            "{error}"
        );
    }

    #[test]
    fn the_provider_follows_the_tls_settings() {
        use rustls::CipherSuite as Id;
        let suites = |tls: &TlsSettings| -> Vec<Id> {
            crypto_provider(tls)
                .cipher_suites
                .iter()
                .map(|s| s.suite())
                .collect()
        };
        let defaults = suites(&TlsSettings::default());
        assert_eq!(defaults.len(), 9, "ring's 3 TLS 1.3 + 6 TLS 1.2 suites");
        let listed = TlsSettings {
            cipher_suites_tls12: vec![
                CipherSuite::EcdheRsaAes256GcmSha384,
                CipherSuite::EcdheEcdsaChacha20Poly1305,
            ],
            cipher_suites_set: true,
            ..Default::default()
        };
        let got = suites(&listed);
        assert_eq!(
            got[3..],
            [
                Id::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
                Id::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            ],
            "TLS 1.2: the listed suites in order"
        );
        assert!(
            got[..3]
                .iter()
                .all(|s| format!("{s:?}").starts_with("TLS13_")),
            "{got:?}"
        );
        // Only TLS 1.3 names listed: no TLS 1.2 suite is left, as with Go's CipherSuites.
        let tls13_only = TlsSettings {
            cipher_suites_set: true,
            ..Default::default()
        };
        assert_eq!(suites(&tls13_only).len(), 3);

        let curves = TlsSettings {
            curve_preferences: vec![KxGroup::Secp384r1, KxGroup::X25519],
            ..Default::default()
        };
        let groups: Vec<_> = crypto_provider(&curves)
            .kx_groups
            .iter()
            .map(|g| g.name())
            .collect();
        assert_eq!(
            groups,
            [rustls::NamedGroup::secp384r1, rustls::NamedGroup::X25519]
        );
        assert_eq!(protocol_versions(&TlsSettings::default()).len(), 2);
        let tls13 = TlsSettings {
            min_version: TlsVersion::Tls13,
            ..Default::default()
        };
        assert_eq!(
            protocol_versions(&tls13)
                .iter()
                .map(|v| v.version)
                .collect::<Vec<_>>(),
            [rustls::ProtocolVersion::TLSv1_3]
        );
    }
}
