//! API clients whose client certificate is renewed while nodelet runs.
//!
//! A TLS client certificate is presented once per connection, and the API server checks it
//! (and its expiry) on every request over that connection. So when the certificate manager
//! publishes a new pair, requests must go out on new connections: the kubelet closes all its
//! connections (`UpdateTransport`), which also cuts its watches. Here each pair gets its own
//! kube client (its own connection pool); the [`RotatingTransport`] sends every new request
//! through the client of the current pair. Requests under way — watch streams included — keep
//! their connection and end as they would have (the API server ends a watch after its
//! timeout; kube's watcher then resumes from its resourceVersion on the new client), and the
//! old pool is dropped with its last user. No watch is cut by a rotation.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper::{Request, Response};
use kube::client::Body;
use tokio::sync::watch;

use kube::client::ClientBuilder;

use crate::certificate::SharedPair;
use crate::cluster::{api_clients, ApiClients, ClientSettings};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// No client certificate yet: the node's CSR is not issued.
#[derive(Debug, thiserror::Error)]
#[error("no client certificate yet: waiting for the node's certificate signing request to be approved and issued")]
pub struct NoClientCertificate;

/// The kube client for the current pair, rebuilt when the pair changes.
struct Current {
    pair: Option<SharedPair>,
    client: Result<kube::Client, String>,
}

struct Shared {
    /// The cluster (URL, CA, timeouts) without credentials: each pair's identity is added.
    base: kube::Config,
    pairs: watch::Receiver<Option<SharedPair>>,
    current: Mutex<Current>,
}

/// A tower service sending each request through the kube client of the current certificate.
#[derive(Clone)]
pub struct RotatingTransport {
    shared: Arc<Shared>,
}

impl RotatingTransport {
    /// Requests go to `base`'s cluster with the certificate `pairs` holds at the time. Other
    /// credentials of `base` (tokens, exec plugins, files) are dropped, as the kubelet's
    /// rotating transport does (`AnonymousClientConfig`).
    pub fn new(mut base: kube::Config, pairs: watch::Receiver<Option<SharedPair>>) -> Self {
        base.auth_info = kube::config::AuthInfo::default();
        RotatingTransport {
            shared: Arc::new(Shared {
                base,
                pairs,
                current: Mutex::new(Current {
                    pair: None,
                    client: Err(NoClientCertificate.to_string()),
                }),
            }),
        }
    }

    /// The client of the current pair (built on first use after a change).
    fn client(&self) -> Result<kube::Client, BoxError> {
        let pair = self.shared.pairs.borrow().clone();
        let Some(pair) = pair else {
            return Err(Box::new(NoClientCertificate));
        };
        let mut current = self
            .shared
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let same = current.pair.as_ref().is_some_and(|p| Arc::ptr_eq(p, &pair));
        if !same {
            if current.pair.is_some() {
                tracing::info!(serial = %pair.info.serial, not_after = %pair.info.not_after,
                    "client certificate rotated; new API requests use it");
            }
            current.client = client_for(&self.shared.base, &pair);
            current.pair = Some(pair);
        }
        current.client.clone().map_err(|e| e.into())
    }
}

/// A kube client for `base` presenting `pair`.
pub fn client_for(base: &kube::Config, pair: &SharedPair) -> Result<kube::Client, String> {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut config = base.clone();
    // kube's AuthInfo keeps the key as a secret type; it is built from the kubeconfig form.
    config.auth_info = serde_json::from_value(serde_json::json!({
        "client-certificate-data": b64(&pair.cert_pem),
        "client-key-data": b64(&pair.key_pem),
    }))
    .map_err(|e| format!("client identity: {e}"))?;
    kube::Client::try_from(config).map_err(|e| format!("building the API client: {e}"))
}

impl tower::Service<Request<Body>> for RotatingTransport {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let client = self.client();
        Box::pin(async move {
            let client = client?;
            client
                .send(request)
                .await
                .map_err(|e| Box::new(e) as BoxError)
        })
    }
}

/// The three clients over a transport that presents the current client certificate
/// ([`RotatingTransport`]): the pods client rate-limited as [`crate::cluster::client`], the
/// heartbeat client not, as [`crate::cluster::heartbeat_client`], the reviews' client with a
/// bucket of its own. They share one connection pool per certificate.
pub fn rotating_clients(
    settings: &ClientSettings,
    transport: RotatingTransport,
    default_namespace: &str,
) -> ApiClients {
    let built: std::result::Result<ApiClients, std::convert::Infallible> =
        api_clients(settings, |limit| {
            let builder = ClientBuilder::new(transport.clone(), default_namespace);
            Ok(match limit {
                Some(layer) => builder.with_layer(layer).build(),
                None => builder.build(),
            })
        });
    match built {
        Ok(clients) => clients,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::pair::tests::issued;
    use crate::certificate::CertifiedPair;

    fn pair(cn: &str) -> SharedPair {
        let (cert, key) = issued(
            cn,
            &["system:nodes"],
            &[],
            "2030-01-01T00:00:00Z".parse().unwrap(),
            "2031-01-01T00:00:00Z".parse().unwrap(),
        );
        Arc::new(CertifiedPair::from_pem(cert.as_bytes(), key.as_bytes()).unwrap())
    }

    #[tokio::test]
    async fn one_client_per_pair_and_a_clear_error_without_one() {
        let base = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let (tx, rx) = watch::channel(None);
        let transport = RotatingTransport::new(base, rx);
        let error = transport.client().err().unwrap().to_string();
        assert!(error.starts_with("no client certificate yet"), "{error}");
        tx.send_replace(Some(pair("system:node:a")));
        transport.client().unwrap();
        let first = transport
            .shared
            .current
            .lock()
            .unwrap()
            .pair
            .clone()
            .unwrap();
        transport.client().unwrap();
        let still = transport
            .shared
            .current
            .lock()
            .unwrap()
            .pair
            .clone()
            .unwrap();
        assert!(Arc::ptr_eq(&first, &still), "same pair, same client");
        tx.send_replace(Some(pair("system:node:a")));
        transport.client().unwrap();
        let second = transport
            .shared
            .current
            .lock()
            .unwrap()
            .pair
            .clone()
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &second), "a new pair, a new client");
        // A request through kube's client reaches the transport and fails to connect (nothing
        // listens on port 1), which shows the request went out with the current client.
        let client = kube::Client::new(transport, "default");
        let error = client
            .request_text(Request::get("/version").body(Vec::new()).unwrap())
            .await
            .unwrap_err()
            .to_string();
        assert!(!error.contains("no client certificate"), "{error}");
    }
}
