//! The `tcpSocket` handler (`pkg/probe/tcp`): a connection opened within the timeout is a
//! success, even if the container closes it at once.

use std::io;
use std::time::Duration;

use tokio::net::TcpStream;

use super::spec::join_host_port;
use super::Attempt;

/// Connects from the node to `host:port` and closes the connection.
pub async fn probe(host: &str, port: u16, timeout: Duration) -> Attempt {
    let addr = join_host_port(host, port);
    match tokio::time::timeout(timeout, TcpStream::connect((host, port))).await {
        Ok(Ok(stream)) => {
            drop(stream);
            Attempt::Success(String::new())
        }
        Ok(Err(e)) => Attempt::Failure(format!("dial tcp {addr}: {}", connect_error_text(&e))),
        Err(_) => Attempt::Failure(format!("dial tcp {addr}: i/o timeout")),
    }
}

/// A connect error worded as Go's net package words it (`connect: connection refused`).
pub fn connect_error_text(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(code) => format!("connect: {}", errno_text(code)),
        None => err.to_string(),
    }
}

/// Go prints the C library's description with a lowercase first letter.
fn errno_text(code: i32) -> String {
    let desc = nix::errno::Errno::from_raw(code).desc();
    let mut chars = desc.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => desc.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_text_table() {
        let cases = [
            (libc::ECONNREFUSED, "connection refused"),
            (libc::EHOSTUNREACH, "no route to host"),
            (libc::ENETUNREACH, "network is unreachable"),
        ];
        for (code, want) in cases {
            assert_eq!(errno_text(code), want, "{code}");
        }
    }

    #[tokio::test]
    async fn open_port_is_a_success() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Accept and close at once: still healthy.
        let server = tokio::spawn(async move {
            let _ = listener.accept().await;
        });
        let got = probe("127.0.0.1", port, Duration::from_secs(10)).await;
        assert_eq!(got, Attempt::Success(String::new()));
        server.await.unwrap();
    }

    #[tokio::test]
    async fn closed_port_is_a_failure() {
        let (_closed, port) = crate::probe::closed_port();
        let got = probe("127.0.0.1", port, Duration::from_secs(10)).await;
        assert_eq!(
            got,
            Attempt::Failure(format!(
                "dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
    }
}
