//! gRPC over unix sockets, for every client nodelet opens to a local service: the CRI runtime,
//! containerd's own APIs, CSI drivers and plugin registration sockets.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// An endpoint that is no unix socket.
#[derive(Debug, thiserror::Error)]
#[error("invalid endpoint {endpoint:?}: only unix sockets are supported (unix:///path/to.sock)")]
pub struct EndpointError {
    pub endpoint: String,
}

/// `unix:///run/containerd/containerd.sock` or a bare absolute path → the socket path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, EndpointError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if !path.starts_with('/') {
        return Err(EndpointError {
            endpoint: endpoint.to_string(),
        });
    }
    Ok(PathBuf::from(path))
}

/// A channel to a unix socket; it connects lazily (within `connect_timeout`) and reconnects
/// after the service restarts.
pub fn unix_channel(endpoint: &str, connect_timeout: Duration) -> Result<Channel, EndpointError> {
    let path = socket_path(endpoint)?;
    // The URI is required by tonic but unused: the connector always dials the socket.
    let channel = Endpoint::from_static("http://localhost")
        .connect_timeout(connect_timeout)
        .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }));
    Ok(channel)
}

/// A channel to the unix socket at `path`, connected now (within `timeout`): for a socket
/// that is asked once, where a failed dial is the answer.
pub async fn connect_unix(path: &Path, timeout: Duration) -> Result<Channel, std::io::Error> {
    let path = path.to_path_buf();
    let endpoint = Endpoint::from_static("http://localhost");
    let connect = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
    }));
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(std::io::Error::other(e)),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no connection within {timeout:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms() {
        for (endpoint, path) in [
            (
                "unix:///run/containerd/containerd.sock",
                Some("/run/containerd/containerd.sock"),
            ),
            ("/run/x.sock", Some("/run/x.sock")),
            ("tcp://127.0.0.1:1234", None),
            ("unix://relative.sock", None),
            ("", None),
        ] {
            match (socket_path(endpoint), path) {
                (Ok(got), Some(want)) => assert_eq!(got, PathBuf::from(want), "{endpoint}"),
                (Err(e), None) => assert!(e.to_string().contains(endpoint), "{e}"),
                (got, want) => panic!("{endpoint}: {got:?}, want {want:?}"),
            }
        }
    }
}
