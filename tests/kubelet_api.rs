//! The kubelet API's HTTPS server: client certificates, bearer tokens, anonymous requests and
//! authorization, end to end over TLS with a real HTTP client (no containerd needed: the logs
//! come from a stand-in source).

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::StatusCode;
use common::TestCa;
use nodelet::config::kubelet_server::{CipherSuite, TlsSettings, TlsVersion};
use nodelet::config::{Authentication, Authorization, AuthorizationMode};
use nodelet::server::auth::{
    AccessReviewer, KubeletAuth, RequestAttributes, ReviewError, UserInfo,
};
use nodelet::server::tls::{serve_tls, server_config, serving_certificate};
use nodelet::server::{kubelet_api_router, ApiState, ContainerLogSource, LogRefusal};
use nodelet::stats::{Scope, Summary, SummarySource};
use tokio_util::sync::CancellationToken;

/// Logs of `ns/web/app` only.
struct OneContainer;

#[async_trait]
impl ContainerLogSource for OneContainer {
    async fn container_logs(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        query: &str,
    ) -> Result<Body, LogRefusal> {
        if (namespace, pod, container) == ("ns", "slow", "app") {
            // The first chunk only after a while, as `follow` with nothing new to say.
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            return Ok(Body::from("late\n"));
        }
        if (namespace, pod, container) == ("ns", "web", "app") {
            Ok(Body::from(format!("hello\nquery={query}\n")))
        } else {
            Err(LogRefusal {
                code: StatusCode::NOT_FOUND,
                message: format!("pod \"{pod}\" does not exist"),
            })
        }
    }
}

/// A summary naming the node, so a test sees the provider answered.
struct FixedSummary;

#[async_trait]
impl SummarySource for FixedSummary {
    async fn summary(&self, scope: Scope) -> nodelet::stats::Result<Summary> {
        Ok(serde_json::from_value(serde_json::json!({
            "node": {"nodeName": format!("node-a {scope:?}"), "startTime": "2026-01-01T00:00:00Z"},
            "pods": []
        }))
        .unwrap())
    }
}

/// Allows `alice` everything, nobody else anything.
struct OnlyAlice;

#[async_trait]
impl AccessReviewer for OnlyAlice {
    async fn review_access(
        &self,
        user: &UserInfo,
        _: &RequestAttributes,
    ) -> Result<bool, ReviewError> {
        Ok(user.name == "alice")
    }
}

/// A client identity for user `cn` in group `o`, signed by `ca`.
fn client_identity(ca: &TestCa, cn: &str, o: &str) -> reqwest::Identity {
    reqwest::Identity::from_pem(ca.client_pem(cn, o).as_bytes()).unwrap()
}

fn client(identity: Option<reqwest::Identity>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder().danger_accept_invalid_certs(true);
    if let Some(identity) = identity {
        builder = builder.identity(identity);
    }
    builder.build().unwrap()
}

struct Server {
    url: String,
    cancel: CancellationToken,
    _dir: tempfile::TempDir,
}

async fn start(mode: AuthorizationMode, anonymous: bool, ca: &TestCa) -> Server {
    start_tls(mode, anonymous, ca, &TlsSettings::default()).await
}

async fn start_tls(
    mode: AuthorizationMode,
    anonymous: bool,
    ca: &TestCa,
    tls_settings: &TlsSettings,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert.pem()).unwrap();
    let cert = serving_certificate(None, &dir.path().join("pki"), "node-a", &[]).unwrap();
    let tls = server_config(cert, Some(&ca_file), tls_settings).unwrap();
    let auth = KubeletAuth::new(
        "node-a",
        &Authentication {
            client_ca_file: Some(ca_file.clone()),
            anonymous_enabled: anonymous,
            ..Default::default()
        },
        &Authorization {
            mode,
            ..Default::default()
        },
        None,
        Some(Arc::new(OnlyAlice)),
    );
    let state = ApiState {
        pods: Arc::new(Vec::new),
        health: Arc::new(|| Ok(())),
        events: Arc::new(Vec::new),
        summary: Some(Arc::new(FixedSummary)),
        configz: Some(Arc::new(
            serde_json::json!({"kubeletconfig": {"maxPods": 7}}),
        )),
    };
    let router = kubelet_api_router(state, Arc::new(OneContainer), None, Arc::new(auth));
    let cancel = CancellationToken::new();
    let addr = serve_tls(
        "127.0.0.1:0".parse().unwrap(),
        tokio::sync::watch::channel(tls).1,
        router,
        cancel.clone(),
        &tokio_util::task::TaskTracker::new(),
    )
    .await
    .unwrap();
    Server {
        url: format!("https://{addr}"),
        cancel,
        _dir: dir,
    }
}

async fn get(client: &reqwest::Client, url: &str) -> (u16, String) {
    let response = client.get(url).send().await.unwrap();
    let code = response.status().as_u16();
    (code, response.text().await.unwrap())
}

#[tokio::test]
async fn client_certificates_authenticate_and_webhook_authorizes() {
    let ca = TestCa::new("test-ca");
    let server = start(AuthorizationMode::Webhook, false, &ca).await;
    let alice = client(Some(client_identity(&ca, "alice", "devs")));
    let bob = client(Some(client_identity(&ca, "bob", "devs")));

    let (code, body) = get(
        &alice,
        &format!("{}/containerLogs/ns/web/app?tailLines=1", server.url),
    )
    .await;
    assert_eq!((code, body.as_str()), (200, "hello\nquery=tailLines=1\n"));
    let (code, body) = get(&alice, &format!("{}/containerLogs/ns/slow/app", server.url)).await;
    assert_eq!((code, body.as_str()), (200, "late\n"));
    let (code, body) = get(&alice, &format!("{}/containerLogs/ns/nope/app", server.url)).await;
    assert_eq!((code, body.as_str()), (404, "pod \"nope\" does not exist"));
    let (code, body) = get(&alice, &format!("{}/pods", server.url)).await;
    assert_eq!(code, 200);
    assert!(body.contains("\"PodList\""), "{body}");
    let (code, body) = get(&alice, &format!("{}/healthz", server.url)).await;
    assert_eq!((code, body.as_str()), (200, "ok"));

    let (code, body) = get(&alice, &format!("{}/stats/summary", server.url)).await;
    assert_eq!(code, 200, "{body}");
    let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(summary["node"]["nodeName"], "node-a Full");
    assert_eq!(summary["pods"], serde_json::json!([]));
    let (_, body) = get(
        &alice,
        &format!("{}/stats/summary?only_cpu_and_memory=true", server.url),
    )
    .await;
    assert!(body.contains("node-a CpuAndMemory"), "{body}");
    // The Summary API is authorized as nodes/stats, as the kubelet asks.
    let (code, body) = get(&bob, &format!("{}/stats/summary", server.url)).await;
    assert_eq!(
        (code, body.as_str()),
        (
            403,
            "Forbidden (user=bob, verb=get, resource=nodes, subresource=stats)"
        )
    );

    // The resource metrics: the CPU-and-memory Summary, authorized as nodes/metrics.
    let (code, body) = get(&alice, &format!("{}/metrics/resource", server.url)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\nresource_scrape_error 0\n"), "{body}");
    let (code, body) = get(&bob, &format!("{}/metrics/resource", server.url)).await;
    assert_eq!(
        (code, body.as_str()),
        (
            403,
            "Forbidden (user=bob, verb=get, resource=nodes, subresource=metrics)"
        )
    );

    // What cluster tooling scrapes: cAdvisor's and the prober's series as nodes/metrics,
    // /configz as nodes/proxy (the kubelet's mapping).
    let (code, body) = get(&alice, &format!("{}/metrics/cadvisor", server.url)).await;
    // A fixed Summary has no cgroup readings: cAdvisor's error gauge, still a 200.
    assert_eq!(code, 200, "{body}");
    assert!(body.ends_with("\ncontainer_scrape_error 1\n"), "{body}");
    let (code, body) = get(&alice, &format!("{}/metrics/probes", server.url)).await;
    assert_eq!(code, 200, "{body}");
    // No probe ran in this process: no family, as Go's registry leaves out an empty one.
    assert_eq!(body, "# EOF\n");
    for path in ["/metrics/cadvisor", "/metrics/probes"] {
        let (code, body) = get(&bob, &format!("{}{path}", server.url)).await;
        assert_eq!(
            (code, body.as_str()),
            (
                403,
                "Forbidden (user=bob, verb=get, resource=nodes, subresource=metrics)"
            ),
            "{path}"
        );
    }
    let (code, body) = get(&alice, &format!("{}/configz", server.url)).await;
    assert_eq!(
        (code, body.as_str()),
        (200, r#"{"kubeletconfig":{"maxPods":7}}"#)
    );
    let (code, body) = get(&bob, &format!("{}/configz", server.url)).await;
    assert_eq!(
        (code, body.as_str()),
        (
            403,
            "Forbidden (user=bob, verb=get, resource=nodes, subresource=proxy)"
        )
    );

    let (code, body) = get(&bob, &format!("{}/containerLogs/ns/web/app", server.url)).await;
    assert_eq!(
        (code, body.as_str()),
        (
            403,
            "Forbidden (user=bob, verb=get, resource=nodes, subresource=proxy)"
        )
    );
    // No certificate, no token, anonymous off.
    let (code, body) = get(&client(None), &format!("{}/pods", server.url)).await;
    assert_eq!((code, body.as_str()), (401, "Unauthorized"));
    // The read-only API's event log is not on this port.
    let (code, _) = get(&alice, &format!("{}/events", server.url)).await;
    assert_eq!(code, 404);
    server.cancel.cancel();
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused() {
    let ca_ok = TestCa::new("test-ca");
    let other = TestCa::new("other-ca");
    let server = start(AuthorizationMode::AlwaysAllow, true, &ca_ok).await;
    let stranger = client(Some(client_identity(&other, "alice", "devs")));
    assert!(
        stranger
            .get(format!("{}/pods", server.url))
            .send()
            .await
            .is_err(),
        "the TLS handshake fails"
    );
    // Anonymous is on and authorization is AlwaysAllow: without a certificate it works.
    let (code, _) = get(&client(None), &format!("{}/pods", server.url)).await;
    assert_eq!(code, 200);
    server.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_silent_client_is_disconnected_after_the_handshake_timeout() {
    use tokio::io::AsyncReadExt;
    let ca = TestCa::new("test-ca");
    let server = start(AuthorizationMode::AlwaysAllow, false, &ca).await;
    let addr = server.url.trim_start_matches("https://").to_string();
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let started = tokio::time::Instant::now();
    let mut buf = [0u8; 16];
    // The server closes the connection: end of stream, after the (virtual) timeout.
    let read = silent.read(&mut buf).await.unwrap_or(0);
    assert_eq!(read, 0);
    assert!(started.elapsed() >= nodelet::server::tls::HANDSHAKE_TIMEOUT);
    server.cancel.cancel();
}

#[tokio::test]
async fn oversized_requests_are_refused_before_authentication() {
    use nodelet::server::connection::{MAX_BODY_BYTES, MAX_HEADERS, MAX_HEADER_BYTES};
    let ca = TestCa::new("test-ca");
    let server = start(AuthorizationMode::Webhook, false, &ca).await;
    let alice = client(Some(client_identity(&ca, "alice", "")));
    let url = format!("{}/pods", server.url);
    // A request within the limits reaches the handler.
    let ok = alice
        .get(&url)
        .header("x-padding", "p".repeat(8192))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    // A head over the byte limit, and more header fields than allowed: 431, from a client
    // the server would otherwise authorize.
    let big = alice
        .get(&url)
        .header("x-padding", "p".repeat(MAX_HEADER_BYTES))
        .send()
        .await
        .unwrap();
    assert_eq!(big.status().as_u16(), 431);
    let mut many = alice.get(&url);
    for i in 0..MAX_HEADERS {
        many = many.header(format!("x-h{i}"), "v");
    }
    assert_eq!(many.send().await.unwrap().status().as_u16(), 431);
    // A declared body over the limit: 413, before authentication (an anonymous client).
    let anonymous = client(None);
    let body = anonymous
        .post(format!("{}/exec/ns/web/app", server.url))
        .body(vec![b'b'; MAX_BODY_BYTES as usize + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(body.status().as_u16(), 413);
    server.cancel.cancel();
}

/// A client speaking only the TLS versions in `min..=max`.
fn client_tls(min: reqwest::tls::Version, max: reqwest::tls::Version) -> reqwest::Client {
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .min_tls_version(min)
        .max_tls_version(max)
        .build()
        .unwrap()
}

/// `tlsMinVersion` and `tlsCipherSuites` on the served TLS: a TLS 1.2-only client is served by
/// default and refused at the handshake with `VersionTLS13`; TLS 1.2 suites are the listed
/// ones (the self-signed certificate is ECDSA, so a list of RSA suites leaves TLS 1.2 nothing
/// to agree on), while TLS 1.3's are always on, as in Go.
#[tokio::test]
async fn tls_min_version_and_cipher_suites_shape_the_handshake() {
    use reqwest::tls::Version;
    let ca = TestCa::new("kubernetes");
    let tls12 = client_tls(Version::TLS_1_2, Version::TLS_1_2);
    let tls13 = client_tls(Version::TLS_1_3, Version::TLS_1_3);
    let cases = [
        ("defaults", TlsSettings::default(), true, true),
        (
            "VersionTLS13",
            TlsSettings {
                min_version: TlsVersion::Tls13,
                ..Default::default()
            },
            false,
            true,
        ),
        (
            "ECDSA suite",
            TlsSettings {
                cipher_suites_tls12: vec![CipherSuite::EcdheEcdsaAes128GcmSha256],
                cipher_suites_set: true,
                ..Default::default()
            },
            true,
            true,
        ),
        (
            "RSA suites only",
            TlsSettings {
                cipher_suites_tls12: vec![
                    CipherSuite::EcdheRsaAes128GcmSha256,
                    CipherSuite::EcdheRsaAes256GcmSha384,
                ],
                cipher_suites_set: true,
                ..Default::default()
            },
            false,
            true,
        ),
    ];
    for (name, settings, tls12_served, tls13_served) in cases {
        let server = start_tls(AuthorizationMode::AlwaysAllow, true, &ca, &settings).await;
        let url = format!("{}/healthz", server.url);
        let got12 = tls12.get(&url).send().await;
        let got13 = tls13.get(&url).send().await;
        assert_eq!(
            got12.as_ref().map(|r| r.status().as_u16()).ok(),
            tls12_served.then_some(200),
            "{name}: TLS 1.2 client: {got12:?}"
        );
        if let Err(error) = &got12 {
            assert!(error.is_connect(), "{name}: a handshake failure: {error:?}");
        }
        assert_eq!(
            got13.as_ref().map(|r| r.status().as_u16()).ok(),
            tls13_served.then_some(200),
            "{name}: TLS 1.3 client: {got13:?}"
        );
        server.cancel.cancel();
    }
}

/// The handlers `enableDebuggingHandlers` and its companions leave out answer as the kubelet's
/// disabled handlers: 405 with the kubelet's message, after authentication (an anonymous
/// request to a disabled endpoint is still 401).
#[tokio::test]
async fn disabled_handlers_answer_405_after_authentication() {
    use nodelet::config::kubelet_server::KubeletServer;
    use nodelet::server::kubelet_api_router_with;
    let ca = TestCa::new("kubernetes");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert.pem()).unwrap();
    let cert = serving_certificate(None, &dir.path().join("pki"), "node-a", &[]).unwrap();
    let tls = server_config(cert, Some(&ca_file), &TlsSettings::default()).unwrap();
    let serve = |handlers: KubeletServer| {
        let auth = KubeletAuth::new(
            "node-a",
            &Authentication {
                client_ca_file: Some(ca_file.clone()),
                anonymous_enabled: false,
                ..Default::default()
            },
            &Authorization {
                mode: AuthorizationMode::AlwaysAllow,
                ..Default::default()
            },
            None,
            None,
        );
        let state = ApiState {
            pods: Arc::new(Vec::new),
            health: Arc::new(|| Ok(())),
            events: Arc::new(Vec::new),
            summary: None,
            configz: Some(Arc::new(serde_json::json!({"kubeletconfig": {}}))),
        };
        let router = kubelet_api_router_with(
            state,
            Arc::new(OneContainer),
            None,
            Arc::new(auth),
            &handlers,
        );
        let cancel = CancellationToken::new();
        let tls = tls.clone();
        async move {
            let addr = serve_tls(
                "127.0.0.1:0".parse().unwrap(),
                tokio::sync::watch::channel(tls).1,
                router,
                cancel.clone(),
                &tokio_util::task::TaskTracker::new(),
            )
            .await
            .unwrap();
            (format!("https://{addr}"), cancel)
        }
    };
    let alice = client(Some(client_identity(&ca, "alice", "devs")));
    let anonymous = client(None);

    let (url, cancel) = serve(KubeletServer {
        enable_debugging_handlers: false,
        ..Default::default()
    })
    .await;
    for path in [
        "/containerLogs/ns/p/c",
        "/exec/ns/p/c?command=ls&output=1",
        "/attach/ns/p/c",
        "/portForward/ns/p",
        "/run/ns/p/c",
        "/runningpods/",
        "/logs/",
        "/logs/messages",
        "/debug/pprof/",
        "/debug/pprof/heap",
    ] {
        assert_eq!(
            get(&alice, &format!("{url}{path}")).await,
            (405, "Debug endpoints are disabled.\n".into()),
            "{path}"
        );
    }
    assert_eq!(get(&alice, &format!("{url}/configz")).await.0, 404);
    assert_eq!(get(&alice, &format!("{url}/debug/flags/v")).await.0, 404);
    assert_eq!(get(&alice, &format!("{url}/healthz")).await.0, 200);
    assert_eq!(get(&anonymous, &format!("{url}/exec/ns/p/c")).await.0, 401);
    cancel.cancel();

    let (url, cancel) = serve(KubeletServer {
        enable_system_log_handler: false,
        enable_profiling_handler: false,
        enable_debug_flags_handler: false,
        ..Default::default()
    })
    .await;
    for (path, want) in [
        ("/logs/", "logs endpoint is disabled.\n"),
        ("/logs/messages", "logs endpoint is disabled.\n"),
        ("/debug/pprof/profile", "profiling endpoint is disabled.\n"),
        ("/debug/flags/v", "flags endpoint is disabled.\n"),
    ] {
        assert_eq!(
            get(&alice, &format!("{url}{path}")).await,
            (405, want.to_string()),
            "{path}"
        );
    }
    assert_eq!(get(&alice, &format!("{url}/configz")).await.0, 200);
    let (code, body) = get(&alice, &format!("{url}/containerLogs/ns/p/c")).await;
    assert_ne!(code, 405, "{body}");
    cancel.cancel();
}
