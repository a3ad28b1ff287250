//! The TCP listener for TCP probes. A TCP probe only sees whether `connect` succeeds, so to make
//! it fail the port must stop listening: the listener is open exactly while the server is
//! healthy (always, when no health flag is given). Connections are echoed back.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

use crate::events::Events;

/// Binds with SO_REUSEADDR so re-opening the port after an unhealthy spell never hits
/// "address in use" from connections still in TIME_WAIT.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Serves on `listener` while healthy; closes it when health turns bad and binds `addr` again
/// when it recovers.
pub async fn serve(
    listener: TcpListener,
    addr: SocketAddr,
    mut health: watch::Receiver<bool>,
    events: Events,
) {
    let mut listener = Some(listener);
    loop {
        let healthy = *health.borrow_and_update();
        match (healthy, listener.is_some()) {
            (false, true) => {
                listener = None;
                events.emit(&format!("tcp {addr} closed (unhealthy)"));
            }
            (true, false) => match bind(addr) {
                Ok(bound) => {
                    listener = Some(bound);
                    events.emit(&format!("tcp {addr} listening again (healthy)"));
                }
                Err(err) => events.emit(&format!("tcp {addr} cannot listen again: {err}")),
            },
            _ => {}
        }
        match &listener {
            Some(open) => {
                tokio::select! {
                    accepted = open.accept() => match accepted {
                        Ok((stream, peer)) => {
                            events.emit(&format!("tcp connection from {peer}"));
                            tokio::spawn(echo(stream));
                        }
                        Err(err) => events.emit(&format!("tcp {addr} accept failed: {err}")),
                    },
                    changed = health.changed() => if changed.is_err() { return },
                }
            }
            None => {
                if health.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn echo(mut stream: TcpStream) {
    let (mut reader, mut writer) = stream.split();
    // The peer going away mid-echo is normal for probes (connect, then close): nothing to report.
    let _ = tokio::io::copy(&mut reader, &mut writer).await;
    let _ = writer.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn listens_only_while_healthy_and_echoes() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (sender, receiver) = watch::channel(true);
        tokio::spawn(serve(listener, addr, receiver, Events::stdout_only()));

        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"ping").await.unwrap();
        stream.shutdown().await.unwrap();
        let mut echoed = String::new();
        stream.read_to_string(&mut echoed).await.unwrap();
        assert_eq!(echoed, "ping");

        sender.send(false).unwrap();
        // Polled against a deadline, not a count: a stalled machine must not fail the test.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while TcpStream::connect(addr).await.is_ok() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "listener should close while unhealthy"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }

        sender.send(true).unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while TcpStream::connect(addr).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "listener should reopen when healthy again"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
