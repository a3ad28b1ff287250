//! The network handlers against tiny servers on 127.0.0.1 (real time, real sockets).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::HTTPHeader;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tonic_health::ServingStatus;

use super::http::{HttpProber, MAX_BODY};
use super::spec::{request_headers, HttpTarget};
use super::{grpc, Attempt};

/// What the test server saw of a request.
struct Request {
    path: String,
    /// Header lines as received, names lowercased: "name: value".
    headers: Vec<String>,
}

/// What it answers.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn new(status: u16, body: &str) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    fn redirect(location: &str) -> Self {
        Response {
            status: 302,
            headers: vec![("Location".into(), location.into())],
            body: b"moved".to_vec(),
        }
    }
}

type Route = Arc<dyn Fn(&Request, u16) -> Response + Send + Sync>;

struct Server {
    port: u16,
    requests: Arc<AtomicUsize>,
}

/// A minimal HTTP/1.1 server: one request per connection, `Connection: close`.
async fn serve(route: impl Fn(&Request, u16) -> Response + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let route: Route = Arc::new(route);
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let route = route.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let head = String::from_utf8_lossy(&buf).to_string();
                let mut lines = head.split("\r\n");
                let path = lines
                    .next()
                    .and_then(|l| l.split(' ').nth(1))
                    .unwrap_or("/")
                    .to_string();
                let headers = lines
                    .take_while(|l| !l.is_empty())
                    .map(|l| match l.split_once(':') {
                        Some((n, v)) => format!("{}: {}", n.to_ascii_lowercase(), v.trim()),
                        None => l.to_string(),
                    })
                    .collect();
                let resp = route(&Request { path, headers }, port);
                let mut out = format!(
                    "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                    resp.status,
                    resp.body.len()
                );
                for (n, v) in &resp.headers {
                    out.push_str(&format!("{n}: {v}\r\n"));
                }
                out.push_str("\r\n");
                let mut bytes = out.into_bytes();
                bytes.extend_from_slice(&resp.body);
                let _ = stream.write_all(&bytes).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Server { port, requests }
}

fn target(port: u16, path: &str, spec_headers: &[(&str, &str)]) -> HttpTarget {
    let spec: Vec<HTTPHeader> = spec_headers
        .iter()
        .map(|(n, v)| HTTPHeader {
            name: n.to_string(),
            value: v.to_string(),
        })
        .collect();
    HttpTarget {
        url: format!("http://127.0.0.1:{port}{path}"),
        headers: request_headers(&spec),
        h2c: false,
    }
}

fn routes(req: &Request, port: u16) -> Response {
    match req.path.as_str() {
        "/ok" => Response::new(200, "ok body"),
        "/fail" => Response::new(500, "fail body"),
        "/to-ok" => Response::redirect("/ok"),
        "/to-fail" => Response::redirect("/fail"),
        "/to-other-host" => Response::redirect(&format!("http://localhost:{port}/ok")),
        "/loop" => Response::redirect("/loop"),
        "/headers" => Response::new(200, &req.headers.join("\n")),
        "/big" => Response {
            status: 200,
            headers: Vec::new(),
            body: vec![b'a'; 2 * MAX_BODY],
        },
        _ => Response::new(404, "not found"),
    }
}

const SECOND: Duration = Duration::from_secs(1);
/// The limit where a probe is expected to succeed (or be refused at once): wide, so a stalled
/// machine cannot turn the answer into a timeout.
const GENEROUS: Duration = Duration::from_secs(10);

#[tokio::test]
async fn http_status_and_redirect_table() {
    let server = serve(routes).await;
    let p = server.port;
    let cases = [
        ("/ok", Attempt::Success("ok body".into())),
        (
            "/fail",
            Attempt::Failure("HTTP probe failed with statuscode: 500".into()),
        ),
        ("/to-ok", Attempt::Success("ok body".into())),
        (
            "/to-fail",
            Attempt::Failure("HTTP probe failed with statuscode: 500".into()),
        ),
        (
            "/to-other-host",
            Attempt::Warning("Probe terminated redirects, Response body: moved".into()),
        ),
        (
            "/loop",
            Attempt::Warning("Probe terminated redirects, Response body: moved".into()),
        ),
        (
            "/missing",
            Attempt::Failure("HTTP probe failed with statuscode: 404".into()),
        ),
    ];
    let prober = HttpProber::new();
    for (path, want) in cases {
        let got = prober.probe(&target(p, path, &[]), GENEROUS).await;
        assert_eq!(got, want, "{path}");
    }
}

#[tokio::test]
async fn http_redirect_loop_stops_after_ten_requests() {
    let server = serve(routes).await;
    HttpProber::new()
        .probe(&target(server.port, "/loop", &[]), GENEROUS)
        .await;
    assert_eq!(server.requests.load(Ordering::SeqCst), 10);
}

fn header_lines(attempt: Attempt) -> Vec<String> {
    match attempt {
        Attempt::Success(body) => body.lines().map(String::from).collect(),
        other => panic!("expected a success, got {other:?}"),
    }
}

#[tokio::test]
async fn http_headers_table() {
    let server = serve(routes).await;
    let p = server.port;
    let host = format!("host: 127.0.0.1:{p}");
    type Spec<'a> = Vec<(&'a str, &'a str)>;
    let cases: Vec<(&str, Spec, Vec<String>, Vec<&str>)> = vec![
        (
            "defaults",
            vec![],
            vec![
                "user-agent: kube-probe/1.37".into(),
                "accept: */*".into(),
                host.clone(),
            ],
            vec![],
        ),
        (
            "custom header and user agent",
            vec![
                ("X-Muffins-Or-Cupcakes", "muffins"),
                ("User-Agent", "foo/1.0"),
            ],
            vec![
                "x-muffins-or-cupcakes: muffins".into(),
                "user-agent: foo/1.0".into(),
            ],
            vec!["user-agent: kube-probe"],
        ),
        (
            "user agent removed",
            vec![("User-Agent", "")],
            vec!["accept: */*".into()],
            vec!["user-agent"],
        ),
        (
            "host overridden",
            vec![("Host", "muffins.cupcakes.org")],
            vec!["host: muffins.cupcakes.org".into()],
            vec!["host: 127.0.0.1"],
        ),
    ];
    let prober = HttpProber::new();
    for (name, spec, present, absent) in cases {
        let lines = header_lines(prober.probe(&target(p, "/headers", &spec), GENEROUS).await);
        for want in &present {
            assert!(
                lines.contains(want),
                "{name}: {want:?} missing from {lines:?}"
            );
        }
        for not in absent {
            assert!(
                !lines.iter().any(|l| l.starts_with(not)),
                "{name}: {not:?} present in {lines:?}"
            );
        }
    }
}

#[tokio::test]
async fn http_body_is_read_up_to_ten_kib() {
    let server = serve(routes).await;
    match HttpProber::new()
        .probe(&target(server.port, "/big", &[]), GENEROUS)
        .await
    {
        Attempt::Success(body) => assert_eq!(body.len(), MAX_BODY),
        other => panic!("expected a success, got {other:?}"),
    }
}

#[tokio::test]
async fn http_timeout_and_refused_connection_are_failures() {
    // A server that accepts and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let (_closed, closed) = crate::probe::closed_port();
    let prober = HttpProber::new();
    let got = prober
        .probe(&target(silent, "/", &[]), Duration::from_millis(300))
        .await;
    assert_eq!(
        got,
        Attempt::Failure(format!(
            "Get \"http://127.0.0.1:{silent}/\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        ))
    );
    let got = prober.probe(&target(closed, "/", &[]), GENEROUS).await;
    assert_eq!(
        got,
        Attempt::Failure(format!(
            "Get \"http://127.0.0.1:{closed}/\": dial tcp 127.0.0.1:{closed}: connect: connection refused"
        ))
    );
}

/// A gRPC health server: "" serving, "liveness" not serving.
async fn health_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("liveness", ServingStatus::NotServing)
        .await;
    let incoming = futures::stream::unfold(listener, |l| async move {
        let next = l.accept().await.map(|(s, _)| s);
        Some((next, l))
    });
    tokio::spawn(async move {
        // Keep the reporter alive as long as the server.
        let _reporter = reporter;
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await;
    });
    port
}

#[tokio::test]
async fn grpc_health_table() {
    let port = health_server().await;
    let cases = [
        ("", Attempt::Success("service healthy".into())),
        (
            "liveness",
            Attempt::Failure("service unhealthy (responded with \"NOT_SERVING\")".into()),
        ),
    ];
    for (service, want) in cases {
        let got = grpc::probe("127.0.0.1", port, service, false, GENEROUS).await;
        assert_eq!(got, want, "{service:?}");
    }
    match grpc::probe("127.0.0.1", port, "unknown", false, GENEROUS).await {
        Attempt::Failure(msg) => assert!(
            msg.starts_with("error: health rpc probe failed: rpc error: code = NotFound desc = "),
            "{msg}"
        ),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn grpc_closed_port_times_out_like_a_blocking_dial() {
    let (_closed, closed) = crate::probe::closed_port();
    let got = grpc::probe("127.0.0.1", closed, "", false, SECOND).await;
    assert_eq!(
        got,
        Attempt::Failure(format!(
            "timeout: failed to connect service \"127.0.0.1:{closed}\" within 1s: context deadline exceeded"
        ))
    );
}

/// A server-side TLS stream tonic can serve (tonic implements `Connected` for rustls streams only
/// with its own TLS feature, which nodelet does not build).
struct TlsIo(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsIo {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl tokio::io::AsyncRead for TlsIo {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsIo {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A gRPC health server over TLS (a self-signed certificate, ALPN h2), "" serving.
async fn tls_health_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (reporter, service) = tonic_health::server::health_reporter();
    let incoming = futures::stream::unfold((listener, acceptor), |(l, a)| async move {
        loop {
            let Ok((tcp, _)) = l.accept().await else {
                continue;
            };
            // A client that does not speak TLS (the plaintext probe) is dropped here.
            if let Ok(tls) = a.accept(tcp).await {
                return Some((Ok::<_, std::io::Error>(TlsIo(tls)), (l, a)));
            }
        }
    });
    tokio::spawn(async move {
        let _reporter = reporter;
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await;
    });
    port
}

/// `grpc.mode: TLS` reaches a TLS server whose certificate nobody signed, as the kubelet's
/// `InsecureSkipVerify` probe; plaintext does not, and TLS to a plaintext server fails.
#[tokio::test]
async fn grpc_tls_mode_table() {
    let tls_port = tls_health_server().await;
    let plain_port = health_server().await;
    assert_eq!(
        grpc::probe("127.0.0.1", tls_port, "", true, GENEROUS).await,
        Attempt::Success("service healthy".into())
    );
    assert!(
        matches!(
            grpc::probe("127.0.0.1", tls_port, "", false, SECOND).await,
            Attempt::Failure(_)
        ),
        "plaintext to a TLS server"
    );
    assert!(
        matches!(
            grpc::probe("127.0.0.1", plain_port, "", true, SECOND).await,
            Attempt::Failure(_)
        ),
        "TLS to a plaintext server"
    );
}
