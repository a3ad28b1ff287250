//! nodelet-test-csi: a small CSI node driver for nodelet's tests. It serves the CSI v1 Identity
//! and Node services on `--csi-socket` and the kubelet's plugin registration API on
//! `<--registration-dir>/<driver-name>-reg.sock` (the node-driver-registrar's convention), and
//! backs volumes with directories (mount access) and loop devices (block access) under
//! `--state-dir`. Every RPC is journalled to `--journal` as one JSON line. See README.md.

mod api;
mod config;
mod journal;
mod loopdev;
mod mounts;
mod node;
mod services;
mod state;

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;

use crate::api::csi::identity_server::IdentityServer;
use crate::api::csi::node_server::NodeServer;
use crate::api::registration::registration_server::RegistrationServer;
use crate::config::{parse_capabilities, parse_topology, parse_versions, Config, ConfigError};
use crate::journal::{Journal, JournalError};
use crate::node::NodeService;
use crate::services::{IdentityService, RegistrationService};
use crate::state::{StateDir, StateError};

#[derive(Parser, Debug)]
#[command(
    name = "nodelet-test-csi",
    version,
    about = "A small CSI node driver for nodelet's tests (directories and loop devices as volumes)"
)]
struct Cli {
    /// The CSI driver name (GetPluginInfo, registration).
    #[arg(long)]
    driver_name: String,
    /// The node id NodeGetInfo reports.
    #[arg(long)]
    node_id: String,
    /// Where to serve the CSI Identity and Node services (a stale socket is replaced).
    #[arg(long)]
    csi_socket: PathBuf,
    /// Serve plugin registration on DIR/<driver-name>-reg.sock; without it, no registration.
    #[arg(long)]
    registration_dir: Option<PathBuf>,
    /// Backing storage and per-volume records.
    #[arg(long)]
    state_dir: PathBuf,
    /// Append one JSON line per RPC received.
    #[arg(long)]
    journal: Option<PathBuf>,
    /// Node service capabilities: a comma list of stage, stats, expand, condition.
    #[arg(long, default_value = "stage,stats,expand")]
    capabilities: String,
    /// max_volumes_per_node in NodeGetInfo (0: no limit).
    #[arg(long, default_value_t = 0)]
    max_volumes: i64,
    /// key=value, repeatable: NodeGetInfo's accessible_topology.
    #[arg(long)]
    topology: Vec<String>,
    /// Comma list of the CSI versions the registration offers.
    #[arg(long, default_value = "1.0.0")]
    supported_versions: String,
    /// The capacity each volume has (and reports) until expanded, in bytes.
    #[arg(long, default_value_t = 1 << 30)]
    volume_capacity: u64,
    /// Journal NodePublishVolume and never answer it (a driver hung in a mount); the other
    /// calls are served as usual.
    #[arg(long)]
    hang_publish: bool,
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{path} exists and is not a socket")]
    NotASocket { path: String },
    #[error("socket {path}: {source}")]
    Socket {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("signal handler: {0}")]
    Signal(#[source] std::io::Error),
    #[error("server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// The registration socket of `driver` in `dir`, as node-driver-registrar names it.
fn registration_socket(dir: &Path, driver: &str) -> PathBuf {
    dir.join(format!("{driver}-reg.sock"))
}

/// Listens on `path`: parent directories created, a stale socket from an earlier run removed
/// (anything else there is left alone and refused).
fn listen(path: &Path) -> Result<UnixListener, StartError> {
    let socket_err = |source| StartError::Socket {
        path: path.display().to_string(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(socket_err)?;
    }
    match path.symlink_metadata() {
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(socket_err)?
        }
        Ok(_) => {
            return Err(StartError::NotASocket {
                path: path.display().to_string(),
            })
        }
        Err(_) => {}
    }
    UnixListener::bind(path).map_err(socket_err)
}

async fn run(cli: Cli) -> Result<(), StartError> {
    let config = Arc::new(Config {
        driver_name: cli.driver_name,
        node_id: cli.node_id,
        csi_socket: cli.csi_socket,
        capabilities: parse_capabilities(&cli.capabilities)?,
        max_volumes: cli.max_volumes,
        topology: parse_topology(&cli.topology)?,
        supported_versions: parse_versions(&cli.supported_versions)?,
        volume_capacity: cli.volume_capacity,
        hang_publish: cli.hang_publish,
    });
    config.check()?;
    let journal = Arc::new(Journal::open(cli.journal.as_deref())?);
    let state = StateDir::open(&cli.state_dir)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(StartError::Signal)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(StartError::Signal)?;

    let mut sockets = vec![config.csi_socket.clone()];
    let csi_listener = listen(&config.csi_socket)?;
    let csi = Server::builder()
        .add_service(IdentityServer::new(IdentityService {
            config: config.clone(),
            journal: journal.clone(),
        }))
        .add_service(NodeServer::new(NodeService::new(
            config.clone(),
            state,
            journal.clone(),
        )))
        .serve_with_incoming(UnixListenerStream::new(csi_listener));
    let registration = match &cli.registration_dir {
        Some(dir) => {
            let path = registration_socket(dir, &config.driver_name);
            let listener = listen(&path)?;
            sockets.push(path);
            let server = Server::builder()
                .add_service(RegistrationServer::new(RegistrationService {
                    config: config.clone(),
                    journal: journal.clone(),
                }))
                .serve_with_incoming(UnixListenerStream::new(listener));
            Some(server)
        }
        None => None,
    };
    eprintln!(
        "nodelet-test-csi: {} serving CSI on {}{}",
        config.driver_name,
        config.csi_socket.display(),
        sockets
            .get(1)
            .map(|p| format!(", registration on {}", p.display()))
            .unwrap_or_default()
    );
    let registration = async move {
        match registration {
            Some(server) => server.await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        result = csi => result.map_err(StartError::from),
        result = registration => result.map_err(StartError::from),
        _ = terminate.recv() => Ok(()),
        _ = interrupt.recv() => Ok(()),
    };
    // The plugin watcher sees the driver go when its socket goes.
    for socket in &sockets {
        let _ = std::fs::remove_file(socket);
    }
    result
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("nodelet-test-csi: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_socket_follows_the_registrar_convention() {
        assert_eq!(
            registration_socket(
                Path::new("/var/lib/kubelet/plugins_registry"),
                "csi.nodelet.test"
            ),
            PathBuf::from("/var/lib/kubelet/plugins_registry/csi.nodelet.test-reg.sock")
        );
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/csi.sock");
        let first = listen(&path).unwrap();
        drop(first);
        assert!(path.exists());
        let _second = listen(&path).unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "keep").unwrap();
        assert!(matches!(listen(&file), Err(StartError::NotASocket { .. })));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    }
}
