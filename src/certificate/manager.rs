//! The certificate manager (client-go's `certificate.Manager`, as the kubelet runs one for its
//! client certificate and one for its serving certificate): keeps the current pair, renews it
//! through a CSR at 70–90 % of its lifetime or as soon as it no longer matches what is wanted,
//! stores each new pair and publishes it to the readers (the API client, the kubelet API's TLS)
//! without a restart.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::csr::{self, CsrError};
use super::pair::{CertifiedPair, SharedPair};
use super::schedule::{self, Next, Template};
use super::store::{FileStore, StoreError};
use crate::clock::Clock;

/// How long one request waits for approval and issue before a new one is made
/// (`certificateWaitTimeout`).
pub const CERTIFICATE_WAIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Which certificate a manager keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The node's client certificate (`kubernetes.io/kube-apiserver-client-kubelet`).
    Client,
    /// The kubelet API's serving certificate (`kubernetes.io/kubelet-serving`).
    Serving,
}

impl Kind {
    pub fn signer(self) -> &'static str {
        match self {
            Kind::Client => csr::CLIENT_SIGNER,
            Kind::Serving => csr::SERVING_SIGNER,
        }
    }

    pub fn usages(self) -> &'static [&'static str] {
        match self {
            Kind::Client => csr::CLIENT_USAGES,
            Kind::Serving => csr::SERVING_USAGES,
        }
    }

    /// The name in logs, as the kubelet's managers call themselves.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Client => "kubernetes.io/kube-apiserver-client-kubelet",
            Kind::Serving => "kubernetes.io/kubelet-serving",
        }
    }
}

/// Where a manager sends its CSRs: given the current certificate (if any), the client to use.
/// The client certificate's manager asks with the bootstrap credentials until it has a
/// certificate of its own, then with that certificate (a node renews as itself, which is what
/// the API server's approver checks).
pub trait CsrClients: Send + Sync {
    fn client(&self, current: Option<&SharedPair>) -> Result<kube::Client, String>;
}

/// A fixed client for every request (the serving certificate's manager uses the node's client).
pub struct FixedClient(pub kube::Client);

impl CsrClients for FixedClient {
    fn client(&self, _current: Option<&SharedPair>) -> Result<kube::Client, String> {
        Ok(self.0.clone())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error(transparent)]
    Csr(#[from] CsrError),
    #[error("storing the issued certificate: {0}")]
    Store(#[from] StoreError),
    #[error("no client to request certificates with: {0}")]
    Client(String),
}

/// The manager's settings.
pub struct ManagerParts {
    pub kind: Kind,
    pub store: FileStore,
    /// What the certificate must say; `None` until it is known (a serving certificate waits
    /// for the node's addresses).
    pub template: watch::Receiver<Option<Template>>,
    pub clients: Arc<dyn CsrClients>,
    /// `spec.expirationSeconds` to ask for; `None` leaves the lifetime to the signer.
    pub requested_lifetime: Option<Duration>,
    pub clock: Clock,
}

/// Keeps one certificate current. Readers [`CertificateManager::subscribe`] to the pair.
pub struct CertificateManager {
    parts: ManagerParts,
    current: watch::Sender<Option<SharedPair>>,
    /// Requests made (each CSR created), for logs and tests.
    requests: watch::Sender<u64>,
}

impl CertificateManager {
    /// A manager starting from `initial` (read from the store, the configured files or the
    /// kubeconfig; `None` when there is no certificate yet).
    pub fn new(parts: ManagerParts, initial: Option<CertifiedPair>) -> Self {
        let (current, _) = watch::channel(initial.map(Arc::new));
        let (requests, _) = watch::channel(0);
        CertificateManager {
            parts,
            current,
            requests,
        }
    }

    /// The current pair and every later one.
    pub fn subscribe(&self) -> watch::Receiver<Option<SharedPair>> {
        self.current.subscribe()
    }

    /// How many CSRs this manager has created.
    pub fn requests(&self) -> watch::Receiver<u64> {
        self.requests.subscribe()
    }

    /// Renews the certificate whenever the schedule says, until `cancel`. A failed renewal is
    /// retried with the manager's backoff; the current certificate stays in use meanwhile.
    pub async fn run(mut self, cancel: CancellationToken) {
        let name = self.parts.kind.name();
        // Rotations in a row that left the new certificate due at once; `None` until the
        // first rotation and after a look that found it not due.
        let mut due_at_once: Option<u32> = None;
        loop {
            let jitter = crate::backoff::random_unit();
            let next = {
                let current = self.current.borrow().clone();
                let template = self.parts.template.borrow().clone();
                schedule::next_rotation(
                    current.as_deref().map(|p| &p.info),
                    template.as_ref(),
                    jitter,
                    self.parts.clock.now(),
                )
            };
            if let Some(delay) = schedule::wait_after_rotation(next, due_at_once, jitter) {
                tracing::warn!(manager = name, ?delay, "the certificate just issued is due for rotation already (it does not satisfy the template, or its rotation deadline passed by this node's clock); waiting before the next request");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = cancel.cancelled() => return,
                }
            }
            due_at_once = match (next, due_at_once) {
                (Next::Now, Some(n)) => Some(n.saturating_add(1)),
                _ => None,
            };
            match next {
                Next::Now => {}
                Next::WaitForTemplate => {
                    tracing::info!(manager = name, "waiting for what the certificate must say");
                    tokio::select! {
                        changed = self.parts.template.changed() => if changed.is_err() { return },
                        _ = cancel.cancelled() => return,
                    }
                    continue;
                }
                Next::At(deadline) => {
                    let wait = deadline.duration_since(self.parts.clock.now());
                    let wait = Duration::try_from(wait).unwrap_or_default();
                    tracing::info!(manager = name, %deadline, ?wait, "waiting for the next certificate rotation");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        changed = self.parts.template.changed() => {
                            if changed.is_err() { return }
                            // Back to the schedule: a template the certificate still
                            // satisfies changes nothing.
                            continue;
                        }
                        _ = cancel.cancelled() => return,
                    }
                }
            }
            let mut attempt = 0;
            loop {
                match self.rotate(&cancel).await {
                    Ok(pair) => {
                        tracing::info!(
                            manager = name,
                            serial = %pair.info.serial,
                            not_after = %pair.info.not_after,
                            "certificate rotated"
                        );
                        due_at_once.get_or_insert(0);
                        break;
                    }
                    Err(RotateError::Csr(CsrError::Cancelled { .. })) => return,
                    Err(error) => {
                        let delay = schedule::retry_delay(attempt, crate::backoff::random_unit());
                        tracing::warn!(manager = name, %error, ?delay, "certificate rotation failed; retrying");
                        attempt += 1;
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = cancel.cancelled() => return,
                        }
                    }
                }
            }
        }
    }

    /// One renewal (`rotateCerts`): a new key, a CSR for the current template, the wait for its
    /// certificate, then the store and the readers get the new pair.
    pub async fn rotate(&mut self, cancel: &CancellationToken) -> Result<SharedPair, RotateError> {
        let template = self
            .parts
            .template
            .borrow()
            .clone()
            .ok_or_else(|| RotateError::Client("no certificate template yet".into()))?;
        let key = csr::generate_key()?;
        let request = csr::request_pem(&key, &template)?;
        let current = self.current.borrow().clone();
        let client = self
            .parts
            .clients
            .client(current.as_ref())
            .map_err(RotateError::Client)?;
        let object = csr::csr_object(
            None,
            &request,
            self.parts.kind.signer(),
            self.parts.kind.usages(),
            self.parts.requested_lifetime,
        );
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
        let (name, uid) = csr::create(&client, &object, &spki, "").await?;
        self.requests.send_modify(|n| *n += 1);
        tracing::info!(manager = self.parts.kind.name(), csr = %name, "certificate signing request created; waiting for approval");
        let cert_pem =
            csr::wait_for_certificate(&client, &name, &uid, CERTIFICATE_WAIT_TIMEOUT, cancel)
                .await?;
        let pair = self.parts.store.update(
            &cert_pem,
            key.serialize_pem().as_bytes(),
            self.parts.clock.now(),
        )?;
        let pair = Arc::new(pair);
        self.current.send_replace(Some(pair.clone()));
        Ok(pair)
    }
}
