//! A small, in-memory Kubernetes API server for nodelet's cluster-mode tests.
//!
//! It speaks JSON over plain HTTP on 127.0.0.1 and is good enough for the real `kubectl` and for
//! kube-rs: discovery, get/list/watch/create/update/patch/delete of pods (with the status
//! subresource and the API server's graceful deletion), nodes, events (core and events.k8s.io),
//! configmaps, secrets, services, namespaces, leases and serviceaccounts (with the TokenRequest
//! subresource and the ServiceAccount admission plugin). Every request is logged so tests can
//! assert on what a client sent. See `docs/apiserver-fixture.md` for what is faithful and what is
//! approximated.
//!
//! The fixture keeps its own DNS-1123 name checks and QoS class (`pod.rs`, `store.rs`) although
//! nodelet has both: a test oracle must not share code with what it checks, or a bug in that code
//! would pass on both sides unnoticed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), apiserver_fixture::FixtureError> {
//! let fixture = apiserver_fixture::Fixture::start(None).await?;
//! println!("kubectl --server {} get pods", fixture.url());
//! fixture.stop().await;      // the "API server" goes away; state is kept
//! fixture.resume().await?;   // same port, same objects, same resourceVersions
//! # Ok(()) }
//! ```

pub mod auth;
pub mod csr;
pub mod delete;
pub mod discovery;
pub mod error;
pub mod events;
pub mod log;
pub mod metrics;
pub mod patch;
pub mod path;
pub mod pod;
pub mod podlog;
pub mod podstream;
pub mod protobuf;
pub mod resource;
pub mod review;
pub mod selector;
pub mod server;
pub mod service;
pub mod serviceaccount;
pub mod store;
pub mod table;
pub mod tls;
pub mod typed;
pub mod version;

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use k8s_openapi::serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;
use tokio::net::{TcpListener, TcpSocket};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

pub use delete::{DeleteOptions, Preconditions};
pub use error::{ApiError, FixtureError};
pub use log::LoggedRequest;
pub use podlog::KubeletClientConfig;
pub use review::{AccessRule, Decision, UserInfo};
pub use store::{Clock, Store, WriteOptions};
pub use version::{DroppedField, Release, ServerProfile};

use resource::ResourceType;
use server::AppState;

/// Settings of a fixture; `Fixture::start(port)` uses the defaults.
#[derive(Clone)]
pub struct FixtureOptions {
    /// Port on 127.0.0.1; `None` picks a free one.
    pub port: Option<u16>,
    /// How many watch events are kept for watches that resume from a resourceVersion.
    pub history_limit: usize,
    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Source of creation/deletion timestamps.
    pub clock: Clock,
    /// Load the state from this JSON file if it exists, and save it after every write.
    pub state_file: Option<PathBuf>,
    /// How `pods/log` reaches node agents: the kubelet client certificate and key, and the CA of
    /// their serving certificates (default: no client certificate, no verification).
    pub kubelet_client: KubeletClientConfig,
    /// `--token-auth-file`: bearer token → user, for TokenReview.
    pub static_tokens: BTreeMap<String, UserInfo>,
    /// SubjectAccessReview rules, first match wins; none matching (and the default, empty) allows.
    pub access_rules: Vec<AccessRule>,
    /// The release `/version` reports and whose fields are stored (default v1.37: everything),
    /// plus fields dropped although that release has them. See `version::STATUS_FIELDS`.
    pub server: ServerProfile,
    /// Run the metrics-server stand-in (`metrics.k8s.io`, see `metrics`): scrape every Node's
    /// `/metrics/resource` through `nodes/proxy` this often. `None` (the default): no scrapes,
    /// the metrics lists are empty. Plain HTTP only (it scrapes the fixture's own address
    /// without credentials): with `tls` too, `start_with` refuses.
    pub metrics_resolution: Option<Duration>,
    /// HTTPS with a CA of the fixture's own, requests authenticated (client certificates,
    /// static and bootstrap tokens) and CertificateSigningRequests signed once approved.
    /// `None` (the default): plain HTTP, nobody authenticated.
    pub tls: Option<TlsOptions>,
}

/// How the fixture's HTTPS and CSR signer behave.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// The signer's lifetime rules (`--cluster-signing-duration`: a year by default; tests of
    /// rotation use minutes).
    pub signing: csr::SigningPolicy,
}

impl Default for FixtureOptions {
    fn default() -> Self {
        FixtureOptions {
            port: None,
            history_limit: 1000,
            bookmark_interval: Duration::from_secs(60),
            clock: store::system_clock(),
            state_file: None,
            kubelet_client: KubeletClientConfig::default(),
            static_tokens: BTreeMap::new(),
            access_rules: Vec::new(),
            server: ServerProfile::default(),
            metrics_resolution: None,
            tls: None,
        }
    }
}

struct Serving {
    token: CancellationToken,
    task: JoinHandle<()>,
}

/// A running (or stopped) fixture API server.
pub struct Fixture {
    state: Arc<AppState>,
    log: Arc<log::RequestLog>,
    port: u16,
    serving: tokio::sync::Mutex<Option<Serving>>,
    /// Stops the metrics-server stand-in's scrapes when the fixture is dropped.
    background: CancellationToken,
}

fn bind(port: u16) -> Result<TcpListener, FixtureError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let socket = TcpSocket::new_v4().map_err(|source| FixtureError::Bind { port, source })?;
    // Resume binds the same port again right after stop closed it.
    socket
        .set_reuseaddr(true)
        .map_err(|source| FixtureError::Bind { port, source })?;
    socket
        .bind(addr)
        .map_err(|source| FixtureError::Bind { port, source })?;
    socket
        .listen(1024)
        .map_err(|source| FixtureError::Bind { port, source })
}

/// Serves one connection until it ends or the fixture stops.
async fn serve_connection<S>(stream: S, router: Router, token: CancellationToken)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(router);
    let connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        // pods/exec, attach and portforward hand the connection to a relay.
        .with_upgrades();
    tokio::select! {
        _ = connection => {}
        _ = token.cancelled() => {}
    }
}

/// Accepts connections until the token is cancelled, then closes the listener and every open
/// connection (keep-alive pools and watch streams see the server go away, as when a real API
/// server stops). With TLS, each connection's requests carry the client's certificates.
async fn serve(
    listener: TcpListener,
    router: Router,
    token: CancellationToken,
    tls: Option<Arc<tls::FixtureTls>>,
) {
    let mut connections = JoinSet::new();
    let acceptor = tls
        .as_ref()
        .map(|t| tokio_rustls::TlsAcceptor::from(t.server_config.clone()));
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                // As Go's net/http (the real API server): without it a watch event written on a
                // kept-alive connection waits for the client's delayed ACK (Nagle), real time
                // in which a paused-clock test's virtual time races ahead.
                let _ = stream.set_nodelay(true);
                let router = router.clone();
                let token = token.clone();
                let acceptor = acceptor.clone();
                connections.spawn(async move {
                    let Some(acceptor) = acceptor else {
                        return serve_connection(stream, router, token).await;
                    };
                    let handshake = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream));
                    let Ok(Ok(stream)) = handshake.await else { return };
                    let peer = tls::PeerCertificates(
                        stream.get_ref().1.peer_certificates().map(|c| c.to_vec()).unwrap_or_default(),
                    );
                    let router = router.layer(axum::Extension(peer));
                    serve_connection(stream, router, token).await
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

/// The `kubernetes` service in `default`, which a real API server creates at start-up and
/// pods find in their `KUBERNETES_SERVICE_HOST`/`_PORT`; kept as it is when a restored state
/// already has it.
fn seed_master_service(store: &Store, port: u16) {
    let Some(services) = resource::find_by_plural("", "v1", "services") else {
        return;
    };
    // Fails only with AlreadyExists (a restored state), which keeps the stored one.
    let _ = store.create(
        services,
        Some("default"),
        service::master_service(port),
        &WriteOptions::default(),
    );
}

fn resource_of<K: k8s_openapi::Resource>() -> Result<&'static ResourceType, FixtureError> {
    resource::find_by_kind(K::API_VERSION, K::KIND).ok_or_else(|| FixtureError::UnknownKind {
        kind: format!("{}/{}", K::API_VERSION, K::KIND),
    })
}

/// A typed object as the JSON the store keeps (with `apiVersion` and `kind`), and the
/// namespace its metadata names.
fn encode_typed<K>(obj: &K) -> Result<(Value, Option<String>), FixtureError>
where
    K: k8s_openapi::Resource + Serialize,
{
    let mut value = serde_json::to_value(obj).map_err(|source| FixtureError::Encode {
        kind: K::KIND.to_string(),
        name: String::new(),
        source,
    })?;
    value["apiVersion"] = Value::from(K::API_VERSION);
    value["kind"] = Value::from(K::KIND);
    let namespace = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(String::from);
    Ok((value, namespace))
}

fn decode<K: DeserializeOwned>(kind: &str, value: Value) -> Result<K, FixtureError> {
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    serde_json::from_value(value).map_err(|source| FixtureError::Decode {
        kind: kind.to_string(),
        name,
        source,
    })
}

impl Fixture {
    /// Binds 127.0.0.1:`port` (or a free port) and serves in the background.
    pub async fn start(port: Option<u16>) -> Result<Fixture, FixtureError> {
        Fixture::start_with(FixtureOptions {
            port,
            ..FixtureOptions::default()
        })
        .await
    }

    pub async fn start_with(options: FixtureOptions) -> Result<Fixture, FixtureError> {
        if options.tls.is_some() && options.metrics_resolution.is_some() {
            return Err(FixtureError::Tls(
                "the metrics-server stand-in (metrics_resolution) scrapes over plain HTTP; \
                 it cannot run with tls"
                    .into(),
            ));
        }
        let store = Arc::new(Store::new(options.clock.clone(), options.history_limit));
        store.set_profile(options.server.clone());
        if let Some(path) = options.state_file.clone() {
            store.set_state_file(path)?;
        }
        let listener = bind(options.port.unwrap_or(0))?;
        let port = listener
            .local_addr()
            .map_err(|source| FixtureError::Bind {
                port: options.port.unwrap_or(0),
                source,
            })?
            .port();
        seed_master_service(&store, port);
        let token = CancellationToken::new();
        let tls = match &options.tls {
            Some(_) => Some(Arc::new(tls::FixtureTls::new()?)),
            None => None,
        };
        let state = Arc::new(AppState {
            store,
            shutdown: Mutex::new(token.clone()),
            bookmark_interval: options.bookmark_interval,
            server_address: Mutex::new(format!("127.0.0.1:{port}")),
            kubelet_client: options.kubelet_client.clone(),
            static_tokens: options.static_tokens.clone(),
            access_rules: options.access_rules.clone(),
            issued_tokens: Mutex::new(HashSet::new()),
            forbidden_reads: Mutex::new(Default::default()),
            metrics: Arc::new(metrics::MetricsStore::default()),
            tls: tls.clone(),
            signing: options.tls.clone().unwrap_or_default().signing,
        });
        let log = Arc::new(log::RequestLog::default());
        let router = server::router(state.clone(), log.clone());
        let task = tokio::spawn(serve(listener, router, token.clone(), tls));
        let background = CancellationToken::new();
        if let Some(resolution) = options.metrics_resolution {
            tokio::spawn(metrics::scrape_loop(
                format!("http://127.0.0.1:{port}"),
                state.store.clone(),
                state.metrics.clone(),
                resolution,
                background.clone(),
            ));
        }
        Ok(Fixture {
            state,
            log,
            port,
            serving: tokio::sync::Mutex::new(Some(Serving { token, task })),
            background,
        })
    }

    /// `http://127.0.0.1:PORT`, or `https://` when the fixture serves TLS.
    pub fn url(&self) -> String {
        let scheme = if self.state.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The cluster CA certificate (PEM) of a fixture serving TLS.
    pub fn ca_pem(&self) -> Option<String> {
        self.state
            .tls
            .as_ref()
            .map(|t| t.authority.ca_pem().to_string())
    }

    /// A kubeconfig for this fixture with `user` (the `user:` mapping of a kubeconfig, YAML
    /// flow style): the CA embedded when the fixture serves TLS.
    pub fn kubeconfig(&self, user: &str) -> String {
        use base64::Engine;
        let ca = self
            .ca_pem()
            .map(|pem| {
                format!(
                    "\n    certificate-authority-data: {}",
                    base64::engine::general_purpose::STANDARD.encode(pem)
                )
            })
            .unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fixture\n  cluster:\n    server: {}{ca}\n\
             users:\n- name: user\n  user: {user}\ncontexts:\n- name: fixture\n  context:\n    cluster: fixture\n    user: user\n\
             current-context: fixture\n",
            self.url()
        )
    }

    /// A kubeconfig with a client certificate the fixture's CA signed for `cn` in `groups`
    /// (an administrator: `kubernetes-admin` in `system:masters`, as kubeadm's `admin.conf`).
    pub fn client_kubeconfig(&self, cn: &str, groups: &[&str]) -> Result<String, FixtureError> {
        use base64::Engine;
        let tls = self
            .state
            .tls
            .as_ref()
            .ok_or_else(|| FixtureError::Tls("the fixture does not serve TLS".into()))?;
        let (cert, key) = tls.authority.client_pem(cn, groups)?;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        Ok(self.kubeconfig(&format!(
            "{{client-certificate-data: {}, client-key-data: {}}}",
            b64(&cert),
            b64(&key)
        )))
    }

    /// A bootstrap token as `kubeadm token create` makes it: the Secret
    /// `kube-system/bootstrap-token-<id>` (authentication usage, the `system:bootstrappers:kubeadm:default-node-token`
    /// group); returns `<id>.<secret>`.
    pub fn create_bootstrap_token(&self, id: &str, secret: &str) -> Result<String, FixtureError> {
        let body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
            "type": "bootstrap.kubernetes.io/token",
            "stringData": {
                "token-id": id,
                "token-secret": secret,
                "usage-bootstrap-authentication": "true",
                "usage-bootstrap-signing": "true",
                "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
            },
        });
        let secrets = resource::find_by_plural("", "v1", "secrets").ok_or_else(|| {
            FixtureError::UnknownKind {
                kind: "v1/Secret".into(),
            }
        })?;
        self.state
            .store
            .create(secrets, Some("kube-system"), body, &WriteOptions::default())?;
        Ok(format!("{id}.{secret}"))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops listening and closes every connection (watches end). Objects, resourceVersions and
    /// the request log are kept.
    pub async fn stop(&self) {
        let serving = self.serving.lock().await.take();
        if let Some(s) = serving {
            s.token.cancel();
            // The task only ends by cancellation; a join error means it panicked, which the
            // next resume replaces anyway.
            let _ = s.task.await;
        }
    }

    /// Listens again on the same port, with the same state. A no-op while serving.
    pub async fn resume(&self) -> Result<(), FixtureError> {
        let mut serving = self.serving.lock().await;
        if serving.is_some() {
            return Ok(());
        }
        let listener = bind(self.port)?;
        let token = CancellationToken::new();
        *self
            .state
            .shutdown
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = token.clone();
        let router = server::router(self.state.clone(), self.log.clone());
        let task = tokio::spawn(serve(
            listener,
            router,
            token.clone(),
            self.state.tls.clone(),
        ));
        *serving = Some(Serving { token, task });
        Ok(())
    }

    /// Becomes another kind of server (an upgrade, a downgrade, a gate turned off): `/version`
    /// answers the new release at once and later writes are pruned by it. Tests stop the
    /// fixture, change this and resume, as a real server is restarted to change.
    pub fn set_server(&self, profile: ServerProfile) {
        self.state.store.set_profile(profile);
    }

    /// From now on, GET, list and watch of `plural` (`"services"`) answer 403 Forbidden, as
    /// for a client without the RBAC rule; watches already open go on.
    pub fn forbid_reads(&self, plural: &'static str) {
        self.forbidden_reads().insert(plural);
    }

    /// Undoes [`Fixture::forbid_reads`].
    pub fn allow_reads(&self, plural: &'static str) {
        self.forbidden_reads().remove(plural);
    }

    fn forbidden_reads(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<&'static str>> {
        self.state
            .forbidden_reads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub async fn is_serving(&self) -> bool {
        self.serving.lock().await.is_some()
    }

    /// Every request so far, in order.
    pub fn request_log(&self) -> Vec<LoggedRequest> {
        self.log.entries()
    }

    pub fn clear_log(&self) {
        self.log.clear();
    }

    /// The object store, for untyped access.
    pub fn store(&self) -> &Store {
        &self.state.store
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.state.store.resource_version()
    }

    /// Creates an object directly (as a POST would, without the request log); the namespace comes
    /// from the object's metadata (default: `default`).
    pub fn create<K>(&self, obj: &K) -> Result<K, FixtureError>
    where
        K: k8s_openapi::Resource + Serialize + DeserializeOwned,
    {
        let rt = resource_of::<K>()?;
        let (value, namespace) = encode_typed(obj)?;
        let written =
            self.state
                .store
                .create(rt, namespace.as_deref(), value, &WriteOptions::default())?;
        decode(K::KIND, written.object)
    }

    /// Replaces an object (PUT semantics: `status` is ignored for pods and nodes); with
    /// `status = true`, replaces the status subresource instead.
    pub fn replace<K>(&self, obj: &K, status: bool) -> Result<K, FixtureError>
    where
        K: k8s_openapi::Resource + Serialize + DeserializeOwned,
    {
        let rt = resource_of::<K>()?;
        let (value, namespace) = encode_typed(obj)?;
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let written = self.state.store.update(
            rt,
            namespace.as_deref(),
            &name,
            value,
            status,
            &WriteOptions::default(),
        )?;
        decode(K::KIND, written.object)
    }

    /// The object, or `None` if it does not exist.
    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, FixtureError>
    where
        K: k8s_openapi::Resource + DeserializeOwned,
    {
        let rt = resource_of::<K>()?;
        match self.state.store.get(rt, namespace, name) {
            Ok(v) => decode(K::KIND, v).map(Some),
            Err(e) if e.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// All objects of a type (in one namespace, or all).
    pub fn list<K>(&self, namespace: Option<&str>) -> Result<Vec<K>, FixtureError>
    where
        K: k8s_openapi::Resource + DeserializeOwned,
    {
        let rt = resource_of::<K>()?;
        let (items, _) = self.state.store.list(
            rt,
            namespace,
            &selector::LabelSelector::default(),
            &selector::FieldSelector::default(),
        );
        items.into_iter().map(|v| decode(K::KIND, v)).collect()
    }

    /// Binds a pod to a node as the scheduler does (`pods/binding`): watchers with
    /// `fieldSelector=spec.nodeName=NODE` see it ADDED.
    pub fn bind_pod(&self, namespace: &str, name: &str, node: &str) -> Result<(), FixtureError> {
        self.state.store.bind_pod(namespace, name, node)?;
        Ok(())
    }

    /// Deletes with the API server's semantics (grace periods, finalizers, preconditions); returns
    /// the response body (the object for pods, a Status otherwise).
    pub fn delete<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, FixtureError>
    where
        K: k8s_openapi::Resource,
    {
        let rt = resource_of::<K>()?;
        Ok(self.state.store.delete(rt, namespace, name, options)?)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.background.cancel();
        if let Ok(mut serving) = self.serving.try_lock() {
            if let Some(s) = serving.take() {
                s.token.cancel();
                s.task.abort();
            }
        }
    }
}
