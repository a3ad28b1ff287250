//! Cluster mode's credentials, as the kubelet's `buildKubeletClientConfig` sets them up: the
//! kubeconfig as it is; or TLS bootstrap first (`bootstrapKubeconfig` without
//! `rotateCertificates`); or, with `rotateCertificates`, a client certificate manager whose
//! current certificate every API request presents (bootstrapping in the background when the
//! kubeconfig has none). With `serverTLSBootstrap`, a second manager keeps the kubelet API's
//! serving certificate.

use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::StartError;
use crate::certificate::bootstrap::{self, BootstrapError};
use crate::certificate::manager::{CsrClients, FixedClient, ManagerParts};
use crate::certificate::store::{FileStore, CLIENT_PREFIX, SERVER_PREFIX};
use crate::certificate::{csr, CertificateManager, CertifiedPair, Kind, SharedPair, Template};
use crate::clock::Clock;
use crate::cluster;
use crate::config::Config;
use crate::stats::machine::NodeInfo;

/// The API clients and, with `serverTLSBootstrap`, the serving certificate to serve.
pub(super) struct ClusterClients {
    /// Pods, events, objects (rate-limited).
    pub client: kube::Client,
    /// Events, with a token bucket of their own (`eventRecordQPS`/`eventBurst`).
    pub events: kube::Client,
    /// Node status and Lease.
    pub heartbeat: kube::Client,
    /// The kubelet API's TokenReviews and SubjectAccessReviews (a rate limit of their own).
    pub reviews: kube::Client,
    /// The kubelet API's serving certificate from its manager (`None`: configured or
    /// self-signed, as before).
    pub serving: Option<watch::Receiver<Option<SharedPair>>>,
}

fn bootstrap_error(error: BootstrapError) -> StartError {
    StartError::Certificates { error }
}

fn api_error(error: cluster::Error) -> StartError {
    StartError::ApiServer { error }
}

/// Sets up the node's credentials and API clients; managers run in `tasks` until `cancel`.
pub(super) async fn connect(
    cfg: &Config,
    node: &NodeInfo,
    clock: Clock,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Result<ClusterClients, StartError> {
    let kubeconfig = cfg.kubeconfig.as_deref().ok_or(StartError::ApiServer {
        error: cluster::Error::NoKubeconfig,
    })?;
    let clients = if cfg.rotate_certificates {
        match rotating_clients(cfg, kubeconfig, clock, tasks, cancel).await? {
            Some(clients) => clients,
            None => plain_clients(cfg).await?,
        }
    } else {
        if let Some(bootstrap) = &cfg.bootstrap_kubeconfig {
            bootstrap::load_client_cert(
                kubeconfig,
                bootstrap,
                &cfg.cert_dir,
                &cfg.node_name,
                clock,
                cancel,
            )
            .await
            .map_err(|error| match error {
                BootstrapError::Csr(csr::CsrError::Cancelled { .. }) => StartError::Cancelled,
                other => bootstrap_error(other),
            })?;
        }
        plain_clients(cfg).await?
    };
    let serving = if cfg.server_tls_bootstrap {
        Some(serving_manager(
            cfg,
            node,
            &clients.pods,
            clock,
            tasks,
            cancel,
        )?)
    } else {
        None
    };
    Ok(ClusterClients {
        client: clients.pods,
        events: clients.events,
        heartbeat: clients.heartbeat,
        reviews: clients.reviews,
        serving,
    })
}

async fn plain_clients(cfg: &Config) -> Result<cluster::ApiClients, StartError> {
    cluster::plain_clients(&super::settings::clients(cfg))
        .await
        .map_err(api_error)
}

/// The CSR client of the client certificate's manager: the node's own (rotating) client while
/// its certificate is valid, else the bootstrap credentials (or the kubeconfig's own).
struct NodeCsrClients {
    node: kube::Client,
    fallback: Option<kube::Client>,
    clock: Clock,
}

impl CsrClients for NodeCsrClients {
    fn client(&self, current: Option<&SharedPair>) -> Result<kube::Client, String> {
        let valid = current.is_some_and(|p| p.valid_at(self.clock.now()));
        match (&self.fallback, valid) {
            (Some(fallback), false) => Ok(fallback.clone()),
            _ => Ok(self.node.clone()),
        }
    }
}

/// With `rotateCertificates`: the client certificate's manager and clients over the rotating
/// transport. `None` when the API server is not reached over HTTPS (no client certificate
/// applies): the kubeconfig is used as it is.
async fn rotating_clients(
    cfg: &Config,
    kubeconfig: &std::path::Path,
    clock: Clock,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Result<Option<cluster::ApiClients>, StartError> {
    let store = FileStore::new(&cfg.cert_dir, CLIENT_PREFIX, None);
    let bootstrapping = match &cfg.bootstrap_kubeconfig {
        Some(bootstrap) => {
            bootstrap::prepare_kubeconfig(kubeconfig, bootstrap, &store, clock.now())
                .map_err(bootstrap_error)?
        }
        None => false,
    };
    let base = cluster::kube_config(kubeconfig).await.map_err(api_error)?;
    if base.cluster_url.scheme_str() != Some("https") {
        tracing::warn!(server = %base.cluster_url, "rotateCertificates: the API server is not reached over https, so no client certificate applies; using the kubeconfig as it is");
        return Ok(None);
    }
    let now = clock.now();
    // The store's pair, else the kubeconfig's own (`getCurrentCertificateOrBootstrap`); an
    // expired one counts as none.
    let initial = match store.current() {
        Ok(Some(pair)) => Some(pair),
        Ok(None) => kubeconfig_pair(kubeconfig),
        Err(error) => {
            tracing::warn!(%error, "the stored client certificate does not load; requesting a new one");
            None
        }
    }
    .filter(|pair| now <= pair.info.not_after);
    // Without a certificate, the first request goes out with the bootstrap credentials, or
    // with the kubeconfig's own (a token, say).
    let fallback = match (
        &cfg.bootstrap_kubeconfig,
        bootstrapping || initial.is_none(),
    ) {
        (Some(bootstrap), _) => Some(
            cluster::kube_config(bootstrap)
                .await
                .map_err(api_error)
                .and_then(|c| {
                    kube::Client::try_from(c).map_err(|source| {
                        api_error(cluster::Error::Client {
                            path: bootstrap.clone(),
                            source,
                        })
                    })
                })?,
        ),
        (None, true) => Some(kube::Client::try_from(base.clone()).map_err(|source| {
            api_error(cluster::Error::Client {
                path: kubeconfig.to_path_buf(),
                source,
            })
        })?),
        (None, false) => None,
    };
    let (template_tx, template) = watch::channel(Some(csr::client_template(&cfg.node_name)));
    // The template never changes; the sender lives as long as the manager.
    let manager_template = template_tx;
    let (pairs_tx, pairs_rx) = watch::channel(None::<SharedPair>);
    let namespace = base.default_namespace.clone();
    let transport = crate::certificate::rotating::RotatingTransport::new(base, pairs_rx);
    let clients = crate::certificate::rotating::rotating_clients(
        &super::settings::clients(cfg),
        transport,
        &namespace,
    );
    let manager = CertificateManager::new(
        ManagerParts {
            kind: Kind::Client,
            store,
            template,
            clients: Arc::new(NodeCsrClients {
                node: clients.pods.clone(),
                fallback,
                clock,
            }),
            requested_lifetime: None,
            clock,
        },
        initial,
    );
    // The transport reads the manager's pairs through this forwarder, so the manager can be
    // built after the clients it requests with.
    let mut current = manager.subscribe();
    pairs_tx.send_replace(current.borrow().clone());
    let forward_cancel = cancel.clone();
    tasks.spawn(async move {
        let _template = manager_template;
        loop {
            tokio::select! {
                changed = current.changed() => {
                    if changed.is_err() { return }
                    pairs_tx.send_replace(current.borrow_and_update().clone());
                }
                _ = forward_cancel.cancelled() => return,
            }
        }
    });
    tasks.spawn(manager.run(cancel.clone()));
    Ok(Some(clients))
}

/// The kubeconfig's own client certificate, if it has one that loads.
fn kubeconfig_pair(kubeconfig: &std::path::Path) -> Option<CertifiedPair> {
    let view = bootstrap::read_kubeconfig(kubeconfig).ok()??;
    bootstrap::kubeconfig_pair(&view)?.ok()
}

/// What the serving certificate must say: `system:node:<name>` in `system:nodes`, the node's
/// hostname address as DNS name and its IP addresses (`newGetTemplateFn`); none until the node
/// has an IP address.
pub(super) fn serving_template(node_name: &str, ips: &[IpAddr]) -> Option<Template> {
    if ips.is_empty() {
        return None;
    }
    let mut ips = ips.to_vec();
    ips.sort_by_key(|ip| ip.to_string());
    ips.dedup();
    let mut dns_names = Vec::new();
    match node_name.parse::<IpAddr>() {
        Ok(ip) if !ips.contains(&ip) => ips.push(ip),
        Ok(_) => {}
        Err(_) => dns_names.push(node_name.to_string()),
    }
    Some(Template {
        common_name: csr::node_user(node_name),
        organizations: vec![csr::NODES_GROUP.to_string()],
        dns_names,
        ips,
    })
}

/// With `serverTLSBootstrap`: the serving certificate's manager (its CSRs go out as the node).
fn serving_manager(
    cfg: &Config,
    node: &NodeInfo,
    client: &kube::Client,
    clock: Clock,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Result<watch::Receiver<Option<SharedPair>>, StartError> {
    let fallback = cfg
        .tls_cert_file
        .clone()
        .zip(cfg.tls_private_key_file.clone());
    let store = FileStore::new(&cfg.cert_dir, SERVER_PREFIX, fallback);
    let now = clock.now();
    let initial = match store.current() {
        Ok(pair) => pair.filter(|p| now <= p.info.not_after),
        Err(error) => {
            tracing::warn!(%error, "the stored serving certificate does not load; requesting a new one");
            None
        }
    };
    let ips: Vec<IpAddr> = node
        .host_ips
        .iter()
        .filter_map(|ip| ip.parse().ok())
        .chain(cfg.node_ip)
        .collect();
    let (template_tx, template) = watch::channel(serving_template(&cfg.node_name, &ips));
    let manager = CertificateManager::new(
        ManagerParts {
            kind: Kind::Serving,
            store,
            template,
            clients: Arc::new(FixedClient(client.clone())),
            requested_lifetime: None,
            clock,
        },
        initial,
    );
    let pairs = manager.subscribe();
    let run = manager.run(cancel.clone());
    tasks.spawn(async move {
        // The node's addresses do not change while nodelet runs; the template's sender stays
        // open so the manager does not read a closed channel as "stop".
        let _template = template_tx;
        run.await
    });
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_template_table() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // (node name, IPs, wanted (DNS names, IPs))
        type Case<'a> = (&'a str, Vec<IpAddr>, Option<(Vec<&'a str>, Vec<IpAddr>)>);
        let cases: Vec<Case> = vec![
            ("n1", vec![], None),
            (
                "n1",
                vec![ip("10.0.0.7")],
                Some((vec!["n1"], vec![ip("10.0.0.7")])),
            ),
            (
                "n1",
                vec![ip("10.0.0.9"), ip("10.0.0.7"), ip("10.0.0.9")],
                Some((vec!["n1"], vec![ip("10.0.0.7"), ip("10.0.0.9")])),
            ),
            // A node named by its address puts it among the IPs.
            (
                "10.0.0.8",
                vec![ip("10.0.0.7")],
                Some((vec![], vec![ip("10.0.0.7"), ip("10.0.0.8")])),
            ),
            (
                "10.0.0.7",
                vec![ip("10.0.0.7")],
                Some((vec![], vec![ip("10.0.0.7")])),
            ),
        ];
        for (name, ips, want) in cases {
            let got = serving_template(name, &ips);
            let want = want.map(|(dns, ips)| Template {
                common_name: format!("system:node:{name}"),
                organizations: vec!["system:nodes".into()],
                dns_names: dns.into_iter().map(String::from).collect(),
                ips,
            });
            assert_eq!(got, want, "{name} {ips:?}");
        }
    }
}
