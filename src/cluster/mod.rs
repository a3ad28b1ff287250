//! Cluster mode: the API server client.
//!
//! The kubelet builds its clients from `--kubeconfig`; nodelet reads the file named by the
//! `kubeconfig` field of its configuration. Authentication (client certificates, bearer tokens,
//! token files, exec plugins) is whatever kube supports for that file, so nodelet never parses
//! credentials itself. Like the kubelet, there are two clients:
//!
//! - [`client`]: everything nodelet does (pod watch, pod status, events), limited to
//!   `kubeAPIQPS`/`kubeAPIBurst` by a client-side token bucket ([`rate_limit`]).
//! - [`heartbeat_client`]: node status and Lease renewals only. The kubelet gives its heartbeat
//!   client no rate limit (`QPS = -1`) so a burst of pod traffic can never delay the heartbeat
//!   that keeps the node Ready.
//!
//! nodelet adds a third, for the kubelet API's TokenReviews and SubjectAccessReviews
//! ([`ApiClients::reviews`]): its own token bucket of the same size. The kubelet sends its
//! reviews through its main client, so anyone who can reach its port with made-up bearer
//! tokens draws from the bucket pod status writes wait on; here a review flood can only empty
//! the reviews' bucket (and the kubelet API caps reviews in flight, `server::auth`).
//!
//! Both clients write for the API server's release: [`api_version`] reads it from `/version`,
//! [`api_fields`] knows which status fields nodelet sends that older releases do not store.

pub mod api_fields;
pub mod api_version;
pub mod convergence;
pub mod rate_limit;

use std::path::{Path, PathBuf};

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};

pub use api_version::{ApiServerVersion, Release};
pub use rate_limit::{RateLimitLayer, TokenBucket};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cluster mode needs `kubeconfig` in the configuration")]
    NoKubeconfig,
    #[error("kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {}: building the API client: {source}", path.display())]
    Client {
        path: PathBuf,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the node's API clients are built: the kubeconfig (`None`: standalone, no client) and the
/// client-side rate limit (`kubeAPIQPS`/`kubeAPIBurst`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    pub kubeconfig: Option<PathBuf>,
    pub qps: u32,
    pub burst: u32,
    /// `eventRecordQPS`/`eventBurst`: the events client's bucket (0 is client-go's default, as
    /// for `qps`).
    pub event_qps: u32,
    pub event_burst: u32,
}

/// The API client nodelet uses for pods and events: the kubeconfig's cluster and credentials,
/// with `kubeAPIQPS`/`kubeAPIBurst` as a client-side rate limit (requests wait for a token,
/// they never fail for lack of one; a watch takes one token).
pub async fn client(settings: &ClientSettings) -> Result<kube::Client> {
    let path = kubeconfig_path(settings)?;
    let kube_config = kube_config(path).await?;
    let builder = ClientBuilder::try_from(kube_config).map_err(|source| Error::Client {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(builder
        .with_layer(&RateLimitLayer::new(settings.qps, settings.burst))
        .build())
}

/// The client for node status and Lease heartbeats: same cluster and credentials, no rate
/// limit (the kubelet's `heartbeatClient`).
pub async fn heartbeat_client(settings: &ClientSettings) -> Result<kube::Client> {
    let path = kubeconfig_path(settings)?;
    let kube_config = kube_config(path).await?;
    kube::Client::try_from(kube_config).map_err(|source| Error::Client {
        path: path.to_path_buf(),
        source,
    })
}

/// The API clients of a node: pods, events and objects (rate-limited), heartbeats (not), and
/// the kubelet API's reviews (rate-limited by a bucket of their own).
#[derive(Clone)]
pub struct ApiClients {
    pub pods: kube::Client,
    /// Events: the kubelet's separate event client, its bucket `eventRecordQPS`/`eventBurst`.
    pub events: kube::Client,
    pub heartbeat: kube::Client,
    pub reviews: kube::Client,
}

/// Builds the three clients with `make`, which builds one client over the node's transport
/// and credentials, wrapped in the given rate limit (`None`: no limit). Each rate-limited
/// client gets a bucket of its own of `kubeAPIQPS`/`kubeAPIBurst`.
pub fn api_clients<E>(
    settings: &ClientSettings,
    mut make: impl FnMut(Option<&RateLimitLayer>) -> Result<kube::Client, E>,
) -> Result<ApiClients, E> {
    let bucket = || RateLimitLayer::new(settings.qps, settings.burst);
    Ok(ApiClients {
        pods: make(Some(&bucket()))?,
        events: make(Some(&RateLimitLayer::new(
            settings.event_qps,
            settings.event_burst,
        )))?,
        heartbeat: make(None)?,
        reviews: make(Some(&bucket()))?,
    })
}

/// The three clients from the kubeconfig as it is ([`client`], [`heartbeat_client`], and the
/// reviews' client).
pub async fn plain_clients(settings: &ClientSettings) -> Result<ApiClients> {
    let path = kubeconfig_path(settings)?;
    let kube_config = kube_config(path).await?;
    api_clients(settings, |limit| {
        let builder =
            ClientBuilder::try_from(kube_config.clone()).map_err(|source| Error::Client {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(match limit {
            Some(layer) => builder.with_layer(layer).build(),
            None => builder.build(),
        })
    })
}

fn kubeconfig_path(settings: &ClientSettings) -> Result<&Path> {
    settings.kubeconfig.as_deref().ok_or(Error::NoKubeconfig)
}

/// Reads the kubeconfig file (relative certificate paths resolve against its directory) and
/// resolves its current context into a kube `Config`.
pub async fn kube_config(path: &Path) -> Result<kube::Config> {
    let wrap = |source| Error::Kubeconfig {
        path: path.to_path_buf(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(wrap)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(wrap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(kubeconfig: Option<PathBuf>) -> ClientSettings {
        ClientSettings {
            kubeconfig,
            qps: 50,
            burst: 100,
            event_qps: 50,
            event_burst: 100,
        }
    }

    /// Each rate-limited client has a bucket of its own: pods and reviews `kubeAPIQPS`,
    /// events `eventRecordQPS` (0: client-go's default); heartbeats none.
    #[tokio::test]
    async fn each_client_gets_its_own_rate() {
        let settings = ClientSettings {
            kubeconfig: None,
            qps: 20,
            burst: 40,
            event_qps: 0,
            event_burst: 7,
        };
        let mut rates = Vec::new();
        let built: Result<ApiClients, std::convert::Infallible> = api_clients(&settings, |limit| {
            rates.push(limit.map(RateLimitLayer::rate));
            Ok(
                kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                    .unwrap(),
            )
        });
        assert!(built.is_ok());
        assert_eq!(
            rates,
            vec![Some((20, 40)), Some((5, 7)), None, Some((20, 40))],
            "pods, events, heartbeat, reviews"
        );
    }

    #[tokio::test]
    async fn errors_name_the_kubeconfig_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.yaml");
        let garbage = dir.path().join("garbage.yaml");
        std::fs::write(&garbage, "apiVersion: v1\nclusters: 7\n").unwrap();
        let no_server = dir.path().join("no-server.yaml");
        std::fs::write(
            &no_server,
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster: {}\nusers:\n- name: u\n  user: {}\n",
        )
        .unwrap();
        for path in [missing, garbage, no_server] {
            let err = client(&config_with(Some(path.clone())))
                .await
                .err()
                .unwrap_or_else(|| panic!("{} should fail", path.display()));
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("kubeconfig {}: ", path.display())),
                "{message}"
            );
        }
        let err = client(&config_with(None)).await.err().unwrap();
        assert!(matches!(err, Error::NoKubeconfig), "{err}");
    }

    #[tokio::test]
    async fn reads_server_token_and_namespace_from_the_current_context() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: node\ncontexts:\n- name: node\n  context: {cluster: k, user: u, namespace: kube-system}\n- name: other\n  context: {cluster: x, user: u}\nclusters:\n- name: k\n  cluster: {server: 'http://127.0.0.1:6443'}\n- name: x\n  cluster: {server: 'http://10.0.0.1:6443'}\nusers:\n- name: u\n  user: {token: abc}\n",
        )
        .unwrap();
        let kube_config = kube_config(&path).await.unwrap();
        assert_eq!(
            kube_config.cluster_url.to_string(),
            "http://127.0.0.1:6443/"
        );
        assert_eq!(kube_config.default_namespace, "kube-system");
        assert!(kube_config.auth_info.token.is_some());
        // Both clients build from it.
        client(&config_with(Some(path.clone()))).await.unwrap();
        heartbeat_client(&config_with(Some(path))).await.unwrap();
    }
}
