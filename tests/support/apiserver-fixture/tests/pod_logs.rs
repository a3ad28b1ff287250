//! `pods/log` through the fixture to a stand-in node agent (HTTPS, client certificate required),
//! with kube-rs and the real kubectl; TokenReview and SubjectAccessReview with kube-rs.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver_fixture::{AccessRule, Fixture, FixtureOptions, KubeletClientConfig, UserInfo};
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::{kubectl, kubectl_ok, pki, Pki, KUBECTL};
use futures::{AsyncBufReadExt, StreamExt};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::authentication::v1::{
    TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{Api, LogParams, PostParams};
use rustls::pki_types::CertificateDer;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::broadcast;

/// The stand-in node agent: `/containerLogs/...` over HTTPS, client certificate required.
#[derive(Clone)]
struct FakeKubelet {
    port: u16,
    /// Path and query of every request, in order.
    requests: Arc<Mutex<Vec<String>>>,
    /// The client certificate of every connection.
    client_certs: Arc<Mutex<Vec<CertificateDer<'static>>>>,
    /// Lines written to followed logs after the request started.
    lines: broadcast::Sender<String>,
}

async fn container_logs(
    State(k): State<FakeKubelet>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let mut seen = format!("/containerLogs/{ns}/{pod}/{container}");
    if !query.is_empty() {
        seen = format!("{seen}?{query}");
    }
    k.requests.lock().unwrap().push(seen);
    match container.as_str() {
        "missing" => return (StatusCode::NOT_FOUND, "container \"missing\" not found").into_response(),
        "secret" => {
            return (
                StatusCode::FORBIDDEN,
                "Forbidden (user=kube-apiserver-kubelet-client, verb=get, resource=nodes, subresource=proxy)",
            )
                .into_response()
        }
        _ => {}
    }
    if query.contains("follow=true") {
        let mut rx = k.lines.subscribe();
        let stream = async_stream(move |tx| async move {
            let _ = tx.send("first line\n".to_string()).await;
            while let Ok(line) = rx.recv().await {
                if tx.send(format!("{line}\n")).await.is_err() {
                    return;
                }
            }
        });
        return Response::new(stream);
    }
    (
        StatusCode::OK,
        format!("{container} line 1\n{container} line 2\n"),
    )
        .into_response()
}

/// A body fed by a task through a channel.
fn async_stream<F, Fut>(task: F) -> Body
where
    F: FnOnce(tokio::sync::mpsc::Sender<String>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(16);
    tokio::spawn(task(tx));
    Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>),
    )
}

async fn start_kubelet(pki: &Pki) -> FakeKubelet {
    let acceptor = common::tls_acceptor(pki);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kubelet = FakeKubelet {
        port: listener.local_addr().unwrap().port(),
        requests: Arc::default(),
        client_certs: Arc::default(),
        lines: broadcast::channel(16).0,
    };
    let router = axum::Router::new()
        .route(
            "/containerLogs/{ns}/{pod}/{container}",
            axum::routing::get(container_logs),
        )
        .with_state(kubelet.clone());
    let k = kubelet.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let router = router.clone();
            let k = k.clone();
            tokio::spawn(async move {
                // Handshakes without an acceptable client certificate fail here.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Some(certs) = tls.get_ref().1.peer_certificates() {
                    k.client_certs.lock().unwrap().extend(certs.iter().cloned());
                }
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), TowerToHyperService::new(router))
                    .await;
            });
        }
    });
    kubelet
}

fn node(name: &str, addresses: Value, port: u16) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"addresses": addresses, "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}
    }))
    .unwrap()
}

fn pod(name: &str, node: &str, containers: &[&str]) -> Pod {
    let containers: Vec<Value> = containers
        .iter()
        .map(|c| json!({"name": c, "image": "busybox"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": containers}
    }))
    .unwrap()
}

struct Setup {
    fixture: Fixture,
    kubelet: FakeKubelet,
    pki: Pki,
}

async fn setup(ca: bool) -> Setup {
    let pki = pki();
    let kubelet = start_kubelet(&pki).await;
    let fixture = Fixture::start_with(FixtureOptions {
        kubelet_client: KubeletClientConfig {
            identity_pem: Some(pki.client_pem.clone().into_bytes()),
            ca_pem: ca.then(|| pki.ca_pem.clone().into_bytes()),
        },
        ..FixtureOptions::default()
    })
    .await
    .unwrap();
    let addresses = json!([{"type": "Hostname", "address": "node-1.invalid"}, {"type": "InternalIP", "address": "127.0.0.1"}]);
    fixture
        .create(&node("node-1", addresses, kubelet.port))
        .unwrap();
    fixture
        .create(&node(
            "bare",
            json!([{"type": "ExternalIP", "address": "1.2.3.4"}]),
            kubelet.port,
        ))
        .unwrap();
    fixture.create(&pod("web", "node-1", &["app"])).unwrap();
    fixture.create(&pod("two", "node-1", &["a", "b"])).unwrap();
    fixture.create(&pod("pending", "", &["app"])).unwrap();
    fixture.create(&pod("lost", "bare", &["app"])).unwrap();
    fixture
        .create(&pod("odd", "node-1", &["missing", "secret"]))
        .unwrap();
    Setup {
        fixture,
        kubelet,
        pki,
    }
}

fn client(fixture: &Fixture) -> kube::Client {
    kube::Client::try_from(kube::Config::new(fixture.url().parse().unwrap())).unwrap()
}

async fn raw_get(fixture: &Fixture, path_and_query: &str) -> (u16, String) {
    let response = common::http()
        .get(format!("{}{path_and_query}", fixture.url()))
        .send()
        .await
        .unwrap();
    let code = response.status().as_u16();
    (code, response.text().await.unwrap())
}

#[tokio::test]
async fn kube_rs_reads_logs_with_the_query_passed_on() {
    let s = setup(true).await;
    let pods: Api<Pod> = Api::namespaced(client(&s.fixture), "default");
    let text = pods
        .logs(
            "web",
            &LogParams {
                container: Some("app".into()),
                tail_lines: Some(2),
                timestamps: true,
                previous: true,
                since_seconds: Some(30),
                limit_bytes: Some(100),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(text, "app line 1\napp line 2\n");
    assert_eq!(
        s.kubelet.requests.lock().unwrap().as_slice(),
        ["/containerLogs/default/web/app?limitBytes=100&previous=true&sinceSeconds=30&tailLines=2&timestamps=true"]
    );
    // The fixture presented its kubelet client certificate.
    assert_eq!(
        s.kubelet.client_certs.lock().unwrap().first(),
        Some(&s.pki.client_der)
    );
    let logged: Vec<_> = s
        .fixture
        .request_log()
        .into_iter()
        .filter(|r| r.path == "/api/v1/namespaces/default/pods/web/log")
        .collect();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].status, 200);
    assert_eq!(logged[0].query_param("tailLines").as_deref(), Some("2"));
}

#[tokio::test]
async fn kube_rs_follow_sees_lines_as_they_are_written() {
    let s = setup(true).await;
    let pods: Api<Pod> = Api::namespaced(client(&s.fixture), "default");
    let stream = pods
        .log_stream(
            "web",
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    let mut lines = stream.lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first, "first line");
    s.kubelet.lines.send("written later".into()).unwrap();
    let later = tokio::time::timeout(Duration::from_secs(10), lines.next())
        .await
        .expect("the line arrives while the stream is open")
        .unwrap()
        .unwrap();
    assert_eq!(later, "written later");
    assert_eq!(
        s.kubelet.requests.lock().unwrap().as_slice(),
        ["/containerLogs/default/web/app?follow=true"]
    );
}

#[tokio::test]
async fn kubectl_logs_with_flags_and_follow() {
    let s = setup(false).await;
    let out = kubectl_ok(
        &s.fixture,
        &[
            "logs",
            "two",
            "-c",
            "b",
            "--tail=1",
            "--timestamps",
            "--previous",
        ],
    )
    .await;
    assert_eq!(out, "b line 1\nb line 2\n");
    assert_eq!(
        s.kubelet
            .requests
            .lock()
            .unwrap()
            .last()
            .map(String::as_str),
        Some("/containerLogs/default/two/b?previous=true&tailLines=1&timestamps=true")
    );

    // kubectl 1.32 picks the first container itself (the server would answer 400, see
    // errors_look_like_the_api_servers).
    let out = kubectl(&s.fixture, &["logs", "two"]).await;
    assert!(out.success, "{}", out.stderr);
    assert_eq!(out.stdout, "a line 1\na line 2\n");
    assert!(
        out.stderr
            .contains("Defaulted container \"a\" out of: a, b"),
        "{}",
        out.stderr
    );

    // The default-container annotation is read by kubectl, not by the server.
    let mut annotated = pod("annotated", "node-1", &["a", "b"]);
    annotated.metadata.annotations = Some(
        [(
            "kubectl.kubernetes.io/default-container".to_string(),
            "b".to_string(),
        )]
        .into(),
    );
    s.fixture.create(&annotated).unwrap();
    let out = kubectl_ok(&s.fixture, &["logs", "annotated"]).await;
    assert_eq!(out, "b line 1\nb line 2\n");
    let (code, _) = raw_get(&s.fixture, "/api/v1/namespaces/default/pods/annotated/log").await;
    assert_eq!(code, 400);

    let mut child = tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .args(["--server", &s.fixture.url(), "logs", "-f", "web"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(common::KUBECTL_LIMIT, stdout.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.as_deref(), Some("first line"));
    s.kubelet
        .lines
        .send("after kubectl started".into())
        .unwrap();
    let later = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
        .await
        .expect("kubectl -f prints the line while following")
        .unwrap();
    assert_eq!(later.as_deref(), Some("after kubectl started"));
    child.kill().await.unwrap();
}

#[tokio::test]
async fn errors_look_like_the_api_servers() {
    let s = setup(true).await;
    let status = |body: &str| serde_json::from_str::<Value>(body).unwrap();
    // (path and query, code, reason or null, message)
    let cases: &[(&str, u16, Value, &str)] = &[
        (
            "/api/v1/namespaces/default/pods/two/log",
            400,
            json!("BadRequest"),
            "a container name must be specified for pod two, choose one of: [a b]",
        ),
        (
            "/api/v1/namespaces/default/pods/web/log?container=nope",
            400,
            json!("BadRequest"),
            "container nope is not valid for pod web",
        ),
        (
            "/api/v1/namespaces/default/pods/ghost/log",
            404,
            json!("NotFound"),
            "pods \"ghost\" not found",
        ),
        (
            "/api/v1/namespaces/default/pods/lost/log",
            500,
            Value::Null,
            "no preferred addresses found; known addresses: [{ExternalIP 1.2.3.4}]",
        ),
        (
            "/api/v1/namespaces/default/pods/odd/log?container=missing",
            404,
            json!("NotFound"),
            "the server could not find the requested resource ( pods/log odd)",
        ),
        (
            "/api/v1/namespaces/default/pods/odd/log?container=secret",
            403,
            json!("Forbidden"),
            "Forbidden (user=kube-apiserver-kubelet-client, verb=get, resource=nodes, subresource=proxy) ( pods/log odd)",
        ),
        (
            "/api/v1/namespaces/default/pods/web/log?tailLines=-1",
            422,
            json!("Invalid"),
            "PodLogOptions \"web\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            "/api/v1/namespaces/default/pods/web/log?sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z",
            422,
            json!("Invalid"),
            "PodLogOptions \"web\" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
    ];
    for (path, code, reason, message) in cases {
        let (got_code, body) = raw_get(&s.fixture, path).await;
        let st = status(&body);
        assert_eq!(got_code, *code, "{path}: {body}");
        assert_eq!(st["kind"], "Status", "{path}");
        assert_eq!(st["reason"], *reason, "{path}");
        assert_eq!(st["message"], *message, "{path}");
    }
    // The node agent's body is passed on as the cause.
    let (_, body) = raw_get(
        &s.fixture,
        "/api/v1/namespaces/default/pods/odd/log?container=missing",
    )
    .await;
    assert_eq!(
        status(&body)["details"]["causes"][0]["message"],
        "container \"missing\" not found"
    );
    // An unbound pod has no location: an empty answer.
    assert_eq!(
        raw_get(&s.fixture, "/api/v1/namespaces/default/pods/pending/log").await,
        (200, String::new())
    );
    // kubectl shows the server's message.
    let out = kubectl(&s.fixture, &["logs", "odd", "-c", "missing"]).await;
    assert!(
        out.stderr
            .contains("the server could not find the requested resource ( pods/log odd)"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn serving_certificate_is_verified_only_with_a_ca() {
    let s = setup(true).await;
    // A fixture whose CA did not sign the node agent's certificate.
    let other = pki();
    let strict = Fixture::start_with(FixtureOptions {
        kubelet_client: KubeletClientConfig {
            identity_pem: Some(s.pki.client_pem.clone().into_bytes()),
            ca_pem: Some(other.ca_pem.into_bytes()),
        },
        ..FixtureOptions::default()
    })
    .await
    .unwrap();
    let addresses = json!([{"type": "InternalIP", "address": "127.0.0.1"}]);
    strict
        .create(&node("node-1", addresses, s.kubelet.port))
        .unwrap();
    strict.create(&pod("web", "node-1", &["app"])).unwrap();
    let (code, body) = raw_get(&strict, "/api/v1/namespaces/default/pods/web/log").await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("Get \\\"https://127.0.0.1:"), "{body}");
    assert!(s.kubelet.requests.lock().unwrap().is_empty());
    // insecureSkipTLSVerifyBackend skips the check.
    let (code, body) = raw_get(
        &strict,
        "/api/v1/namespaces/default/pods/web/log?insecureSkipTLSVerifyBackend=true",
    )
    .await;
    assert_eq!((code, body.as_str()), (200, "app line 1\napp line 2\n"));
}

#[tokio::test]
async fn token_and_access_reviews_round_trip() {
    let mut static_tokens = std::collections::BTreeMap::new();
    static_tokens.insert(
        "admin-token".to_string(),
        UserInfo::new("admin", "1", &["system:masters"]),
    );
    let fixture = Fixture::start_with(FixtureOptions {
        static_tokens,
        access_rules: vec![AccessRule::deny(
            "system:serviceaccount:default:default",
            "get",
            "nodes",
            "proxy",
            "not for service accounts",
        )],
        ..FixtureOptions::default()
    })
    .await
    .unwrap();
    let c = client(&fixture);
    let accounts: Api<ServiceAccount> = Api::namespaced(c.clone(), "default");
    let issued = accounts
        .create_token_request(
            "default",
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec::default()),
                ..TokenRequest::default()
            },
        )
        .await
        .unwrap();
    let token = issued.status.unwrap().token.unwrap();
    let reviews: Api<TokenReview> = Api::all(c.clone());
    let review = |token: &str| TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let answered = reviews
        .create(&PostParams::default(), &review(&token))
        .await
        .unwrap();
    let status = answered.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    let user = status.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:default")
    );
    assert_eq!(
        user.groups.unwrap(),
        [
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ]
    );
    let answered = reviews
        .create(&PostParams::default(), &review("admin-token"))
        .await
        .unwrap();
    assert_eq!(
        answered.status.unwrap().user.unwrap().username.as_deref(),
        Some("admin")
    );
    let answered = reviews
        .create(&PostParams::default(), &review("made-up"))
        .await
        .unwrap();
    let status = answered.status.unwrap();
    assert_eq!(status.authenticated, None);
    assert_eq!(status.error, None);

    let sars: Api<SubjectAccessReview> = Api::all(c);
    let ask = |user: &str| SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some("get".into()),
                resource: Some("nodes".into()),
                subresource: Some("proxy".into()),
                name: Some("node-1".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let denied = sars
        .create(
            &PostParams::default(),
            &ask("system:serviceaccount:default:default"),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.denied, Some(true));
    assert_eq!(denied.reason.as_deref(), Some("not for service accounts"));
    let allowed = sars
        .create(&PostParams::default(), &ask("admin"))
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(allowed.allowed);
    assert_eq!(allowed.denied, None);

    // Both appear in the request log and store nothing.
    let log = fixture.request_log();
    assert_eq!(
        log.iter()
            .filter(|r| r.path == "/apis/authentication.k8s.io/v1/tokenreviews" && r.status == 201)
            .count(),
        3
    );
    let sar_bodies: Vec<_> = log
        .iter()
        .filter(|r| r.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews")
        .collect();
    assert_eq!(sar_bodies.len(), 2);
    assert_eq!(
        sar_bodies[0].body.as_ref().unwrap()["spec"]["resourceAttributes"]["subresource"],
        "proxy"
    );
    let (code, _) = raw_get(&fixture, "/apis/authentication.k8s.io/v1/tokenreviews").await;
    assert_eq!(code, 405);
}
