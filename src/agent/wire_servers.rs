//! The servers wing: the HTTP servers — the authenticated kubelet API (`port`, HTTPS), the
//! read-only API (`readOnlyPort`, with the status page) and the health endpoint
//! (`healthzPort`) — and the node status the status page shows. A port of 0 turns its server
//! off. Each binds before `start` returns, so a taken port stops startup with the address
//! named.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{RuntimeServices, StartError};
use crate::clock::Clock;
use crate::config::kubelet_fields::{RELOAD_CLIENT_CA_FILE, RELOAD_SERVER_CERTIFICATE_FILE};
use crate::config::Config;
use crate::cri::health::RuntimeHealth;
use crate::events::EventRecorder;
use crate::node::NodeAgent;
use crate::pleg::Pleg;
use crate::server::auth::{AccessReviewer, ApiReviews, KubeletAuth, TokenReviewer};
use crate::server::{self, ApiState};
use crate::stats::machine::NodeInfo;
use crate::status::StatusManager;

/// What the servers show.
pub(super) struct Served<'a> {
    pub cfg: &'a Config,
    pub node: &'a NodeInfo,
    pub runtime: &'a RuntimeServices,
    pub status: &'a StatusManager,
    pub events: &'a EventRecorder,
    pub pleg: &'a Arc<Pleg>,
    pub runtime_health: &'a RuntimeHealth,
    /// The API server, for TokenReviews and SubjectAccessReviews (cluster mode): a client
    /// with a rate limit of its own, so reviews never wait in the pod status writers' bucket.
    pub reviews: Option<&'a kube::Client>,
    /// The serving certificate's manager (`serverTLSBootstrap`): the kubelet API serves its
    /// current certificate, renewed without a restart.
    pub serving: Option<tokio::sync::watch::Receiver<Option<crate::certificate::SharedPair>>>,
    pub clock: Clock,
    /// `/stats/summary` (with a stats-capable runtime).
    pub summary: Option<Arc<dyn crate::stats::SummarySource>>,
    /// The status page's charts (with a stats-capable runtime).
    pub history: Option<Arc<crate::server::history::History>>,
    /// The node's status now, for the status page and `/node`.
    pub node_status: NodeStatusFn,
}

/// The node's status now.
pub(super) type NodeStatusFn =
    Arc<dyn Fn() -> k8s_openapi::api::core::v1::NodeStatus + Send + Sync>;

/// The node's status as the status page shows it (in standalone mode too), from `agent`.
/// Each call builds on the previous one, so a condition keeps its transition time; with the
/// read-only API on, it is brought up to date every `nodeStatusUpdateFrequency`, so a
/// transition is dated when it happened rather than when the page was next loaded.
pub(super) fn node_status(
    cfg: &Config,
    agent: NodeAgent,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> NodeStatusFn {
    let status_fn = agent.status_fn();
    let previous = std::sync::Mutex::new(Some(status_fn(None, None)));
    let node_status = Arc::new(move || {
        let mut previous = previous.lock().unwrap_or_else(|e| e.into_inner());
        let status = status_fn(previous.as_ref(), None);
        *previous = Some(status.clone());
        status
    }) as NodeStatusFn;
    if cfg.read_only_port != 0 {
        let (node_status, cancel, period) = (
            node_status.clone(),
            cancel.clone(),
            cfg.node_status_update_frequency,
        );
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = cancel.cancelled() => return,
                }
                node_status();
            }
        });
    }
    node_status
}

/// Binds and starts every enabled server in `tasks`.
pub(super) async fn start(
    served: Served<'_>,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Result<(), StartError> {
    let cfg = served.cfg;
    let state = api_state(&served);
    // `enableServer: false` leaves `port` unbound, as the kubelet's `startKubelet`; the
    // read-only and healthz listeners below are separate and stay.
    if cfg.port != 0 && cfg.kubelet_server.enable_server {
        serve_kubelet_api(&served, &state, tasks, cancel).await?;
    }
    if cfg.read_only_port != 0 {
        let addr = SocketAddr::new(cfg.address, cfg.read_only_port);
        let app = server::router(state.clone()).merge(server::status_page::router(
            status_page_state(&served, &state),
        ));
        server::serve(addr, app, cancel.clone(), tasks).await?;
    }
    if cfg.healthz_port != 0 {
        let addr = SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
        server::serve(addr, server::healthz_router(state), cancel.clone(), tasks).await?;
    }
    Ok(())
}

/// The pods, health, events and (with a stats-capable runtime) the Summary API.
fn api_state(served: &Served<'_>) -> ApiState {
    let pods = {
        let status = served.status.clone();
        Arc::new(move || status.pods())
    };
    let pleg = served.pleg.clone();
    let runtime_health = served.runtime_health.clone();
    let events = served.events.clone();
    ApiState {
        pods: pods.clone(),
        // The kubelet's /healthz reports only the PLEG (and its sync loop); nodelet's also
        // reports a runtime that stopped answering (see `crate::cri::health`).
        health: Arc::new(move || {
            runtime_health.status()?;
            pleg.health().map_err(String::from)
        }),
        events: Arc::new(move || events.events()),
        summary: served.summary.clone(),
        configz: Some(Arc::new(crate::config::configz::configz(served.cfg))),
    }
}

/// The status page (`/`, `/node`) on the read-only API.
fn status_page_state(
    served: &Served<'_>,
    state: &ApiState,
) -> server::status_page::StatusPageState {
    server::status_page::StatusPageState {
        node_name: served.cfg.node_name.clone(),
        pods: state.pods.clone(),
        events: state.events.clone(),
        node: served.node_status.clone(),
        history: served.history.clone(),
        clock: served.clock,
    }
}

/// The authenticated kubelet API on `port`: HTTPS with the configured or a self-signed
/// certificate; TokenReviews and SubjectAccessReviews go to the API server in cluster mode.
async fn serve_kubelet_api(
    served: &Served<'_>,
    state: &ApiState,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Result<(), StartError> {
    let cfg = served.cfg;
    let mut addresses: Vec<IpAddr> = served
        .node
        .host_ips
        .iter()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    addresses.extend(cfg.node_ip);
    addresses.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
    addresses.dedup();
    let configured = cfg
        .tls_cert_file
        .as_deref()
        .zip(cfg.tls_private_key_file.as_deref());
    let client_ca = cfg.authentication.client_ca_file.clone();
    let tls_settings = cfg.kubelet_server.tls.clone();
    // The serving pair: the certificate manager's (serverTLSBootstrap), the configured files,
    // or the self-signed pair made once; each build reads the files again.
    let build: server::tls::BuildConfig = match &served.serving {
        Some(pairs) => {
            let pairs = pairs.clone();
            Arc::new(move || {
                server::tls::server_config_rotating(
                    pairs.clone(),
                    client_ca.as_deref(),
                    &tls_settings,
                )
            })
        }
        None => {
            let configured: Option<(PathBuf, PathBuf)> =
                configured.map(|(cert, key)| (cert.to_path_buf(), key.to_path_buf()));
            let (cert_dir, node_name) = (cfg.cert_dir.clone(), cfg.node_name.clone());
            Arc::new(move || {
                let pair = configured.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
                let cert =
                    server::tls::serving_certificate(pair, &cert_dir, &node_name, &addresses)?;
                server::tls::server_config(cert, client_ca.as_deref(), &tls_settings)
            })
        }
    };
    let tls = build().map_err(|error| StartError::Tls {
        what: "kubelet API TLS",
        error,
    })?;
    let (tls_configs, serving_configs) = tokio::sync::watch::channel(tls);
    // The files the kubelet watches with its reload gates on: the configured serving pair,
    // and the client CA.
    let mut watched: Vec<PathBuf> = Vec::new();
    if served.serving.is_none() && cfg.feature_enabled(RELOAD_SERVER_CERTIFICATE_FILE) {
        if let Some((cert, key)) = configured {
            watched.extend([cert.to_path_buf(), key.to_path_buf()]);
        }
    }
    if cfg.feature_enabled(RELOAD_CLIENT_CA_FILE) {
        watched.extend(cfg.authentication.client_ca_file.clone());
    }
    if !watched.is_empty() {
        tasks.spawn(server::tls::reload_on_change(
            watched,
            build,
            tls_configs,
            server::tls::RELOAD_CHECK,
            cancel.clone(),
        ));
    }
    let reviews = served
        .reviews
        .map(|client| Arc::new(ApiReviews::new(client.clone())));
    let auth = KubeletAuth::new(
        &cfg.node_name,
        &cfg.authentication,
        &cfg.authorization,
        reviews.clone().map(|r| r as Arc<dyn TokenReviewer>),
        reviews.map(|r| r as Arc<dyn AccessReviewer>),
    );
    let pods: server::container_logs::PodsFn = {
        let status = served.status.clone();
        Arc::new(move || status.pods())
    };
    let logs = server::container_logs::PodContainerLogs {
        runtime: served.runtime.runtime.clone(),
        pods: pods.clone(),
        clock: served.clock,
        followers: crate::logs::LogFollowers::global(),
    };
    let streams =
        served
            .runtime
            .streaming
            .clone()
            .map(|streaming| server::streaming::StreamingState {
                runtime: served.runtime.runtime.clone(),
                streaming,
                pods,
                idle_timeout: cfg.kubelet_server.streaming_idle_timeout,
                sessions: server::streaming::session_places(),
            });
    let router = server::kubelet_api_router_with(
        state.clone(),
        Arc::new(logs),
        streams,
        Arc::new(auth),
        &cfg.kubelet_server,
    );
    let addr = SocketAddr::new(cfg.address, cfg.port);
    server::tls::serve_tls(addr, serving_configs, router, cancel.clone(), tasks).await?;
    Ok(())
}
