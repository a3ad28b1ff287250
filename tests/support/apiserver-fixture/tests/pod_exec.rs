//! `pods/exec`, `pods/attach` and `pods/portforward` through the fixture to a stand-in node agent
//! (HTTPS, client certificate required) that answers SPDY upgrades with 101 and then echoes;
//! raw HTTP/1.1 clients and the real kubectl (WebSocket first, then the SPDY fallback).

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver_fixture::{Fixture, FixtureOptions, KubeletClientConfig};
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use common::{kubectl, pki, tls_acceptor, KUBECTL};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request the stand-in node agent received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header_values(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }
}

#[derive(Clone, Default)]
struct FakeKubelet {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    client_cert_count: Arc<Mutex<usize>>,
}

/// The node agent: containers named `denied`/`gone` get 403/404, exec/attach without a stream
/// get the kubelet's 400; everything else is upgraded, greeted and echoed.
async fn agent(k: FakeKubelet, mut req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    k.seen.lock().unwrap().push(Seen {
        method: req.method().to_string(),
        target: target.clone(),
        headers: req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
    });
    let answer = |code: StatusCode, body: &str| {
        let mut r = Response::new(Body::from(body.to_string()));
        *r.status_mut() = code;
        r.headers_mut()
            .insert("content-type", "text/plain; charset=utf-8".parse().unwrap());
        Ok(r)
    };
    if target.contains("/denied") {
        return answer(
            StatusCode::FORBIDDEN,
            "Forbidden (user=kube-apiserver-kubelet-client, verb=create, resource=nodes, subresource=proxy)",
        );
    }
    if target.contains("/gone") {
        return answer(StatusCode::NOT_FOUND, "404 page not found");
    }
    let streams = ["stdin=1", "stdout=1", "stderr=1"];
    if !target.starts_with("/portForward") && !streams.iter().any(|s| target.contains(s)) {
        return answer(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr",
        );
    }
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut io = TokioIo::new(upgraded);
        if io.write_all(b"hello from the agent\n").await.is_err() {
            return;
        }
        let mut buf = [0u8; 1024];
        loop {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if io.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert("connection", "Upgrade".parse().unwrap());
    h.insert("upgrade", "SPDY/3.1".parse().unwrap());
    h.insert(
        "x-stream-protocol-version",
        "v4.channel.k8s.io".parse().unwrap(),
    );
    Ok(r)
}

async fn start_kubelet(pki: &common::Pki) -> FakeKubelet {
    let acceptor = tls_acceptor(pki);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kubelet = FakeKubelet {
        port: listener.local_addr().unwrap().port(),
        ..Default::default()
    };
    let k = kubelet.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let k = k.clone();
            tokio::spawn(async move {
                // Handshakes without an acceptable client certificate fail here.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Some(certs) = tls.get_ref().1.peer_certificates() {
                    *k.client_cert_count.lock().unwrap() += certs.len();
                }
                let service = hyper::service::service_fn(move |req| agent(k.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    kubelet
}

async fn setup() -> (Fixture, FakeKubelet) {
    let pki = pki();
    let kubelet = start_kubelet(&pki).await;
    let fixture = Fixture::start_with(FixtureOptions {
        kubelet_client: KubeletClientConfig {
            identity_pem: Some(pki.client_pem.clone().into_bytes()),
            ca_pem: Some(pki.ca_pem.clone().into_bytes()),
        },
        ..Default::default()
    })
    .await
    .unwrap();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-1"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.port}}
        }
    }))
    .unwrap();
    fixture.create(&node).unwrap();
    let pod = |name: &str, node: &str, containers: &[&str]| -> Pod {
        let cs: Vec<Value> = containers
            .iter()
            .map(|c| json!({"name": c, "image": "busybox"}))
            .collect();
        let mut spec = json!({"containers": cs});
        if !node.is_empty() {
            spec["nodeName"] = json!(node);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec
        }))
        .unwrap()
    };
    fixture.create(&pod("web", "node-1", &["app"])).unwrap();
    fixture
        .create(&pod("two", "node-1", &["app", "side"]))
        .unwrap();
    fixture
        .create(&pod("locked", "node-1", &["denied", "gone"]))
        .unwrap();
    fixture.create(&pod("pending", "", &["app"])).unwrap();
    fixture.create(&pod("lost", "node-9", &["app"])).unwrap();
    (fixture, kubelet)
}

/// What a raw HTTP/1.1 client gets: the response head, and the connection for what follows.
async fn raw_request(
    fixture: &Fixture,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (String, TcpStream) {
    let mut tcp = TcpStream::connect(("127.0.0.1", fixture.port()))
        .await
        .unwrap();
    let mut text = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    tcp.write_all(text.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut byte))
            .await
            .expect("response head in time")
            .unwrap();
        assert!(
            n > 0,
            "connection closed after {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    (String::from_utf8(head).unwrap(), tcp)
}

/// Reads until `want` bytes arrived.
async fn read_exact_text(tcp: &mut TcpStream, len: usize) -> String {
    let mut buf = vec![0u8; len];
    tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut buf))
        .await
        .expect("bytes in time")
        .unwrap();
    String::from_utf8(buf).unwrap()
}

/// A complete non-upgrade answer: (status line, body as JSON).
async fn raw_error(
    fixture: &Fixture,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (u16, String, Value) {
    let mut h: Vec<(&str, &str)> = headers.to_vec();
    h.push(("Connection", "close"));
    let spdy = [("Connection", "Upgrade, close"), ("Upgrade", "SPDY/3.1")];
    let headers = if headers.is_empty() {
        &spdy[..]
    } else {
        &h[..]
    };
    let (head, mut tcp) = raw_request(fixture, method, target, headers).await;
    let code: u16 = head[9..12].parse().unwrap();
    let mut body = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut body)).await;
    let body = String::from_utf8_lossy(&body).into_owned();
    // Bodies may be chunked; the JSON object is between the first `{` and the last `}`.
    let json = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) => serde_json::from_str(&body[a..=b]).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    (code, head, json)
}

const SPDY: &[(&str, &str)] = &[
    ("Connection", "Upgrade"),
    ("Upgrade", "SPDY/3.1"),
    ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
    ("X-Stream-Protocol-Version", "channel.k8s.io"),
    ("Authorization", "Bearer secret"),
];

#[tokio::test]
async fn exec_is_relayed_after_the_upgrade() {
    let (fixture, kubelet) = setup().await;
    let (head, mut tcp) = raw_request(
        &fixture,
        "POST",
        "/api/v1/namespaces/default/pods/web/exec?command=sh&command=-c&command=echo%20hi&stdin=true&stdout=true&stderr=true&tty=false",
        SPDY,
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("upgrade: spdy/3.1"), "{head}");
    assert!(
        lower.contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );
    assert_eq!(
        read_exact_text(&mut tcp, 21).await,
        "hello from the agent\n"
    );
    tcp.write_all(b"ping").await.unwrap();
    assert_eq!(read_exact_text(&mut tcp, 4).await, "ping");
    tcp.write_all(b" and pong").await.unwrap();
    assert_eq!(read_exact_text(&mut tcp, 9).await, " and pong");

    let seen = kubelet.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let s = &seen[0];
    assert_eq!(s.method, "POST");
    assert_eq!(
        s.target,
        "/exec/default/web/app?command=sh&command=-c&command=echo+hi&stderr=1&stdin=1&stdout=1"
    );
    assert_eq!(s.header_values("connection"), ["Upgrade"]);
    assert_eq!(s.header_values("upgrade"), ["SPDY/3.1"]);
    assert_eq!(
        s.header_values("x-stream-protocol-version"),
        ["v4.channel.k8s.io", "channel.k8s.io"]
    );
    assert!(s.header_values("authorization").is_empty(), "{s:?}");
    assert_eq!(
        s.header_values("host"),
        [format!("127.0.0.1:{}", kubelet.port)]
    );
    assert!(*kubelet.client_cert_count.lock().unwrap() >= 1);
    let logged = fixture
        .request_log()
        .into_iter()
        .find(|r| r.path.ends_with("/exec"))
        .unwrap();
    assert_eq!((logged.method.as_str(), logged.status), ("POST", 101));
}

#[tokio::test]
async fn attach_and_portforward_targets() {
    let (fixture, kubelet) = setup().await;
    let (head, mut tcp) = raw_request(
        &fixture,
        "GET",
        "/api/v1/namespaces/default/pods/two/attach?container=side&stdin=1&stdout=1&tty=1",
        SPDY,
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(
        read_exact_text(&mut tcp, 21).await,
        "hello from the agent\n"
    );
    let (head, mut tcp2) = raw_request(
        &fixture,
        "POST",
        "/api/v1/namespaces/default/pods/two/portforward?ports=8080&ports=9090",
        SPDY,
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    tcp2.write_all(b"x").await.unwrap();
    assert_eq!(
        read_exact_text(&mut tcp2, 22).await,
        "hello from the agent\nx"
    );
    let targets: Vec<String> = kubelet
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s.method, s.target))
        .collect();
    assert_eq!(
        targets,
        [
            "GET /attach/default/two/side?stdin=1&stdout=1&tty=1",
            "POST /portForward/default/two?port=8080%2C9090",
        ]
    );
}

#[tokio::test]
async fn errors_look_like_the_api_servers() {
    let (fixture, kubelet) = setup().await;
    let exec = "/api/v1/namespaces/default/pods";
    // (method, target, extra headers, code, reason, message); empty headers = an SPDY upgrade.
    let websocket: &[(&str, &str)] = &[
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
    ];
    let plain: &[(&str, &str)] = &[("Accept", "*/*")];
    type Case<'a> = (
        &'a str,
        String,
        &'a [(&'a str, &'a str)],
        u16,
        &'a str,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "POST",
            format!("{exec}/nope/exec?command=ls&stdout=1"),
            &[],
            404,
            "NotFound",
            "pods \"nope\" not found",
        ),
        (
            "POST",
            format!("{exec}/two/exec?command=ls&stdout=1"),
            &[],
            400,
            "BadRequest",
            "a container name must be specified for pod two, choose one of: [app side]",
        ),
        (
            "POST",
            format!("{exec}/web/exec?command=ls&stdout=1&container=db"),
            &[],
            400,
            "BadRequest",
            "container db is not valid for pod web",
        ),
        (
            "POST",
            format!("{exec}/pending/exec?command=ls&stdout=1"),
            &[],
            400,
            "BadRequest",
            "pod pending does not have a host assigned",
        ),
        (
            "POST",
            format!("{exec}/pending/portforward?ports=80"),
            &[],
            400,
            "BadRequest",
            "pod pending does not have a host assigned",
        ),
        (
            "POST",
            format!("{exec}/lost/exec?command=ls&stdout=1"),
            &[],
            404,
            "NotFound",
            "nodes \"node-9\" not found",
        ),
        (
            "POST",
            format!("{exec}/web/portforward?ports=http"),
            &[],
            400,
            "BadRequest",
            "ports: strconv.ParseInt: parsing \"http\": invalid syntax",
        ),
        (
            "POST",
            format!("{exec}/web/exec?command=ls&stdout=1"),
            plain,
            400,
            "BadRequest",
            "Upgrade request required",
        ),
        (
            "GET",
            format!("{exec}/web/exec?command=ls&stdout=1"),
            websocket,
            400,
            "BadRequest",
            "the fixture does not translate WebSocket streams to SPDY: use an SPDY/3.1 upgrade",
        ),
        (
            "PUT",
            format!("{exec}/web/exec?command=ls&stdout=1"),
            &[],
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    ];
    for (method, target, headers, code, reason, message) in &cases {
        let (got, head, body) = raw_error(&fixture, method, target, headers).await;
        assert_eq!(got, *code, "{target}: {head}");
        assert_eq!(body["kind"], "Status", "{target}: {body}");
        assert_eq!(body["reason"], *reason, "{target}: {body}");
        assert_eq!(body["message"], *message, "{target}: {body}");
    }
    // None of these reached the node agent.
    assert!(kubelet.seen.lock().unwrap().is_empty());

    // The node agent's non-101 answers are echoed: status, content type and body.
    let agent_cases: &[(String, u16, &str)] = &[
        (format!("{exec}/locked/exec?container=denied&command=ls&stdout=1"), 403, "Forbidden (user=kube-apiserver-kubelet-client, verb=create, resource=nodes, subresource=proxy)"),
        (format!("{exec}/locked/attach?container=gone&stdout=1"), 404, "404 page not found"),
        // No command and no stream: the API server does not check; the node agent does.
        (format!("{exec}/web/exec"), 400, "you must specify at least 1 of stdin, stdout, stderr"),
    ];
    for (target, code, text) in agent_cases {
        let (head, mut tcp) = raw_request(&fixture, "POST", target, SPDY).await;
        assert!(
            head.starts_with(&format!("HTTP/1.1 {code}")),
            "{target}: {head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain"),
            "{head}"
        );
        let mut body = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut body)).await;
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(text), "{target}: {body}");
    }
    assert_eq!(kubelet.seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn an_unreachable_agent_is_a_500() {
    let (fixture, _kubelet) = setup().await;
    // Bound but not listening: connections are refused, and no other test can take the port.
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = reserved.local_addr().unwrap().port();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-2"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}
        }
    }))
    .unwrap();
    fixture.create(&node).unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "far", "namespace": "default"},
        "spec": {"nodeName": "node-2", "containers": [{"name": "app", "image": "busybox"}]}
    }))
    .unwrap();
    fixture.create(&pod).unwrap();
    let (code, _, body) = raw_error(
        &fixture,
        "POST",
        "/api/v1/namespaces/default/pods/far/exec?command=ls&stdout=1",
        &[],
    )
    .await;
    assert_eq!(code, 500);
    assert!(body.get("reason").is_none(), "no reason: {body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "error dialing backend: dial tcp 127.0.0.1:{port}: "
        )),
        "{message}"
    );
}

/// kubectl 1.32 tries a WebSocket first; the fixture's 400 makes it fall back to SPDY, which is
/// relayed to the node agent (here answering 403, whose body kubectl prints).
#[tokio::test]
async fn kubectl_exec_falls_back_to_spdy() {
    assert!(
        std::path::Path::new(KUBECTL).exists(),
        "{KUBECTL} is needed"
    );
    let (fixture, kubelet) = setup().await;
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        kubectl(
            &fixture,
            &["exec", "locked", "-c", "denied", "--", "ls", "-l"],
        ),
    )
    .await
    .expect("kubectl exec ends");
    assert!(!out.success);
    assert!(
        out.stderr
            .contains("Forbidden (user=kube-apiserver-kubelet-client"),
        "{}",
        out.stderr
    );
    let exec_requests: Vec<(String, u16)> = fixture
        .request_log()
        .into_iter()
        .filter(|r| r.path.ends_with("/exec"))
        .map(|r| (r.method, r.status))
        .collect();
    assert_eq!(
        exec_requests,
        [("GET".to_string(), 400), ("POST".to_string(), 403)],
        "WebSocket (GET) refused, then SPDY (POST) relayed"
    );
    let seen = kubelet.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].target,
        "/exec/default/locked/denied?command=ls&command=-l&stderr=1&stdout=1"
    );
    assert_eq!(seen[0].header_values("upgrade"), ["SPDY/3.1"]);
    assert!(
        seen[0]
            .header_values("x-stream-protocol-version")
            .iter()
            .any(|v| v.contains("v4.channel.k8s.io")),
        "{:?}",
        seen[0]
    );
}
