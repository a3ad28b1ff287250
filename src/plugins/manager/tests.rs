//! The plugin manager against in-process gRPC servers on unix sockets: a registration server
//! per plugin (which records what `NotifyRegistrationStatus` tells it) and a CSI driver's Node
//! service; the node's record through a recording fake.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::csi::api;
use crate::csi::api::node_server::{Node, NodeServer};
use crate::csi::registration_api::registration_server::{
    Registration as RegistrationService, RegistrationServer,
};
use crate::csi::registration_api::RegistrationStatusResponse;

const T: Duration = Duration::from_secs(20);

struct RegistrationFake {
    info: PluginInfo,
    statuses: mpsc::UnboundedSender<RegistrationStatus>,
}

#[tonic::async_trait]
impl RegistrationService for RegistrationFake {
    async fn get_info(
        &self,
        _: tonic::Request<InfoRequest>,
    ) -> Result<tonic::Response<PluginInfo>, tonic::Status> {
        Ok(tonic::Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: tonic::Request<RegistrationStatus>,
    ) -> Result<tonic::Response<RegistrationStatusResponse>, tonic::Status> {
        let _ = self.statuses.send(request.into_inner());
        Ok(tonic::Response::new(RegistrationStatusResponse {}))
    }
}

struct DriverFake {
    node_id: String,
}

fn unimplemented<T>() -> Result<tonic::Response<T>, tonic::Status> {
    Err(tonic::Status::unimplemented("not in this fake"))
}

#[tonic::async_trait]
impl Node for DriverFake {
    async fn node_stage_volume(
        &self,
        _: tonic::Request<api::NodeStageVolumeRequest>,
    ) -> Result<tonic::Response<api::NodeStageVolumeResponse>, tonic::Status> {
        unimplemented()
    }
    async fn node_unstage_volume(
        &self,
        _: tonic::Request<api::NodeUnstageVolumeRequest>,
    ) -> Result<tonic::Response<api::NodeUnstageVolumeResponse>, tonic::Status> {
        unimplemented()
    }
    async fn node_publish_volume(
        &self,
        _: tonic::Request<api::NodePublishVolumeRequest>,
    ) -> Result<tonic::Response<api::NodePublishVolumeResponse>, tonic::Status> {
        unimplemented()
    }
    async fn node_unpublish_volume(
        &self,
        _: tonic::Request<api::NodeUnpublishVolumeRequest>,
    ) -> Result<tonic::Response<api::NodeUnpublishVolumeResponse>, tonic::Status> {
        unimplemented()
    }
    async fn node_get_volume_stats(
        &self,
        _: tonic::Request<api::NodeGetVolumeStatsRequest>,
    ) -> Result<tonic::Response<api::NodeGetVolumeStatsResponse>, tonic::Status> {
        unimplemented()
    }
    async fn node_expand_volume(
        &self,
        _: tonic::Request<api::NodeExpandVolumeRequest>,
    ) -> Result<tonic::Response<api::NodeExpandVolumeResponse>, tonic::Status> {
        unimplemented()
    }
    async fn node_get_capabilities(
        &self,
        _: tonic::Request<api::NodeGetCapabilitiesRequest>,
    ) -> Result<tonic::Response<api::NodeGetCapabilitiesResponse>, tonic::Status> {
        use api::node_service_capability::{rpc::Type, Rpc, Type as Cap};
        Ok(tonic::Response::new(api::NodeGetCapabilitiesResponse {
            capabilities: vec![api::NodeServiceCapability {
                r#type: Some(Cap::Rpc(Rpc {
                    r#type: Type::StageUnstageVolume as i32,
                })),
            }],
        }))
    }
    async fn node_get_info(
        &self,
        _: tonic::Request<api::NodeGetInfoRequest>,
    ) -> Result<tonic::Response<api::NodeGetInfoResponse>, tonic::Status> {
        Ok(tonic::Response::new(api::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 7,
            accessible_topology: Some(api::Topology {
                segments: HashMap::from([(
                    "topology.d.example.com/zone".to_string(),
                    "z1".to_string(),
                )]),
            }),
        }))
    }
}

/// Serves `router` on a new socket at `path` until the returned sender is dropped or fired.
fn serve(path: &Path, router: tonic::transport::server::Router) -> oneshot::Sender<()> {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    let incoming = futures::stream::unfold(listener, |l| async move {
        Some((l.accept().await.map(|(s, _)| s), l))
    });
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
        let _ = stopped.await;
    }));
    stop
}

fn plugin(
    path: &Path,
    plugin_type: &str,
    name: &str,
    endpoint: &str,
    versions: &[&str],
) -> (
    oneshot::Sender<()>,
    mpsc::UnboundedReceiver<RegistrationStatus>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let fake = RegistrationFake {
        info: PluginInfo {
            r#type: plugin_type.into(),
            name: name.into(),
            endpoint: endpoint.into(),
            supported_versions: versions.iter().map(|v| v.to_string()).collect(),
        },
        statuses: tx,
    };
    let stop = serve(
        path,
        tonic::transport::Server::builder().add_service(RegistrationServer::new(fake)),
    );
    (stop, rx)
}

#[derive(Default)]
struct RecordingNodeInfo {
    log: Mutex<Vec<String>>,
}

#[async_trait]
impl NodeInfoWriter for RecordingNodeInfo {
    async fn install(&self, driver: &DriverNodeInfo) -> Result<(), PluginsError> {
        self.log.lock().unwrap().push(format!(
            "install {} {} {} {:?}",
            driver.name, driver.node_id, driver.max_volumes_per_node, driver.topology
        ));
        Ok(())
    }
    async fn uninstall(
        &self,
        driver: &DriverNodeInfo,
        kept: &BTreeSet<String>,
    ) -> Result<(), PluginsError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("uninstall {} kept {kept:?}", driver.name));
        Ok(())
    }
}

async fn next_status(rx: &mut mpsc::UnboundedReceiver<RegistrationStatus>) -> RegistrationStatus {
    tokio::time::timeout(T, rx.recv())
        .await
        .expect("a NotifyRegistrationStatus in time")
        .expect("the plugin's server runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drivers_register_are_refused_and_deregister_over_their_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join(PLUGINS_REGISTRY);
    ensure_dir(&registry).unwrap();
    assert_eq!(
        std::fs::metadata(&registry).unwrap().permissions().mode() & 0o777,
        0o750
    );
    let drivers_dir = dir.path().join("plugins/d.example.com");
    std::fs::create_dir_all(&drivers_dir).unwrap();
    let csi_socket = drivers_dir.join("csi.sock");
    let _driver = serve(
        &csi_socket,
        tonic::transport::Server::builder().add_service(NodeServer::new(DriverFake {
            node_id: "node-a".into(),
        })),
    );

    let store = CsiDrivers::new();
    let node_info = Arc::new(RecordingNodeInfo::default());
    let cancel = CancellationToken::new();
    let manager = PluginManager::new(registry.clone(), store.clone(), node_info.clone())
        .with_rescan(Duration::from_millis(300));
    let running = tokio::spawn(manager.run(cancel.clone()));

    // A CSI driver registers: in the store, recorded on the node, told so.
    let reg_socket = registry.join("d.example.com-reg.sock");
    let (stop_d, mut d_status) = plugin(
        &reg_socket,
        validate::CSI_PLUGIN,
        "d.example.com",
        &format!("unix://{}", csi_socket.display()),
        &["1.0.0"],
    );
    let status = next_status(&mut d_status).await;
    assert!(status.plugin_registered, "{status:?}");
    assert_eq!(status.error, "");
    let driver = store.get("d.example.com").expect("registered");
    assert_eq!(driver.node_id, "node-a");
    assert_eq!(driver.max_volumes_per_node, 7);
    assert_eq!(
        driver.topology,
        BTreeMap::from([("topology.d.example.com/zone".to_string(), "z1".to_string())])
    );
    assert!(driver.capabilities.stage_unstage);
    assert_eq!(driver.versions, vec!["1.0.0".to_string()]);
    // The store's client reaches the driver's socket.
    assert_eq!(
        driver.client.node_get_info().await.unwrap().node_id,
        "node-a"
    );
    assert_eq!(
        node_info.log.lock().unwrap().clone(),
        vec![r#"install d.example.com node-a 7 {"topology.d.example.com/zone": "z1"}"#.to_string()]
    );

    // A device plugin is refused with the kubelet's message, and not registered.
    let gpu_socket = registry.join("gpu.sock");
    let (_stop_gpu, mut gpu_status) = plugin(&gpu_socket, "DevicePlugin", "gpu", "", &["v1beta1"]);
    let status = next_status(&mut gpu_status).await;
    assert!(!status.plugin_registered);
    assert_eq!(
        status.error,
        format!(
            "RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at socket {}",
            gpu_socket.display()
        )
    );

    // A driver that speaks CSI 0.3 only is refused with the kubelet's message.
    let old_socket = registry.join("old-reg.sock");
    let (_stop_old, mut old_status) = plugin(
        &old_socket,
        validate::CSI_PLUGIN,
        "old.example.com",
        "/var/lib/old/csi.sock",
        &["0.3.0"],
    );
    let status = next_status(&mut old_status).await;
    assert!(!status.plugin_registered);
    assert_eq!(
        status.error,
        "RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver old.example.com at endpoint /var/lib/old/csi.sock: kubernetes.io/csi: ValidatePlugin for CSI driver \"old.example.com\" failed. None of the versions specified [\"0.3.0\"] are supported. err=highest supported version reported is 0.3.0, must be v1.x"
    );
    assert_eq!(store.names(), vec!["d.example.com".to_string()]);

    // A dot-file socket is no plugin: never asked.
    let (_stop_hidden, mut hidden_status) = plugin(
        &registry.join(".hidden.sock"),
        validate::CSI_PLUGIN,
        "hidden.example.com",
        "",
        &["1.0.0"],
    );

    // The driver's registration socket goes: deregistered, off the node.
    drop(stop_d);
    std::fs::remove_file(&reg_socket).unwrap();
    let deadline = Instant::now() + T;
    while store.get("d.example.com").is_ok() {
        assert!(Instant::now() < deadline, "the driver is still registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = node_info.log.lock().unwrap().clone();
    assert_eq!(log.last().unwrap(), "uninstall d.example.com kept {}");
    assert!(store.names().is_empty());
    assert!(
        hidden_status.try_recv().is_err(),
        "a dot-file socket was asked to register"
    );

    cancel.cancel();
    tokio::time::timeout(T, running).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_whose_node_record_fails_is_told_and_retried() {
    struct Failing;
    #[async_trait]
    impl NodeInfoWriter for Failing {
        async fn install(&self, _: &DriverNodeInfo) -> Result<(), PluginsError> {
            Err(PluginsError::Refused("the API server is away".into()))
        }
        async fn uninstall(
            &self,
            _: &DriverNodeInfo,
            _: &BTreeSet<String>,
        ) -> Result<(), PluginsError> {
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join(PLUGINS_REGISTRY);
    ensure_dir(&registry).unwrap();
    let csi_socket = dir.path().join("csi.sock");
    let _driver = serve(
        &csi_socket,
        tonic::transport::Server::builder().add_service(NodeServer::new(DriverFake {
            node_id: "node-a".into(),
        })),
    );
    let store = CsiDrivers::new();
    let cancel = CancellationToken::new();
    let manager = PluginManager::new(registry.clone(), store.clone(), Arc::new(Failing))
        .with_rescan(Duration::from_millis(200));
    let running = tokio::spawn(manager.run(cancel.clone()));
    let (_stop, mut status) = plugin(
        &registry.join("d-reg.sock"),
        validate::CSI_PLUGIN,
        "d.example.com",
        &csi_socket.display().to_string(),
        &["1.0.0"],
    );
    for _ in 0..2 {
        let s = next_status(&mut status).await;
        assert!(!s.plugin_registered);
        assert_eq!(
            s.error,
            "RegisterPlugin error -- plugin registration failed with err: the API server is away"
        );
        assert!(
            store.names().is_empty(),
            "a failed registration is not in the store"
        );
    }
    cancel.cancel();
    tokio::time::timeout(T, running).await.unwrap().unwrap();
}

#[test]
fn failed_registrations_back_off_as_the_kubelets() {
    for (attempts, want) in [
        (1, Duration::from_millis(500)),
        (2, Duration::from_secs(1)),
        (3, Duration::from_secs(2)),
        (9, Duration::from_secs(122)),
        (u32::MAX, Duration::from_secs(122)),
    ] {
        assert_eq!(retry_delay(attempts), want, "{attempts}");
    }
}

/// Which watcher events start a rescan: only what can add, remove or replace a socket, and lost
/// events; never what reading the directory raises.
#[test]
fn only_changes_to_entries_wake_the_rescan() {
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, Flag, MetadataKind, ModifyKind, RemoveKind,
        RenameMode,
    };
    use notify::{Event, EventKind};
    let ev = |kind| Ok(Event::new(kind).add_path("/r/plugins_registry/csi.sock".into()));
    let cases: Vec<(&str, notify::Result<Event>, bool)> = vec![
        (
            "socket created",
            ev(EventKind::Create(CreateKind::File)),
            true,
        ),
        (
            "subdirectory created",
            ev(EventKind::Create(CreateKind::Folder)),
            true,
        ),
        (
            "socket removed",
            ev(EventKind::Remove(RemoveKind::Any)),
            true,
        ),
        (
            "renamed into place",
            ev(EventKind::Modify(ModifyKind::Name(RenameMode::To))),
            true,
        ),
        (
            "renamed away",
            ev(EventKind::Modify(ModifyKind::Name(RenameMode::From))),
            true,
        ),
        (
            "mode changed",
            ev(EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any))),
            true,
        ),
        (
            "events lost",
            Ok(Event::new(EventKind::Other).set_flag(Flag::Rescan)),
            true,
        ),
        (
            "watcher error",
            Err(notify::Error::generic("queue overflow")),
            true,
        ),
        // What the rescan itself raises: it opens, reads and closes the directory.
        (
            "directory opened",
            ev(EventKind::Access(AccessKind::Open(AccessMode::Any))),
            false,
        ),
        (
            "directory closed",
            ev(EventKind::Access(AccessKind::Close(AccessMode::Read))),
            false,
        ),
        ("read", ev(EventKind::Access(AccessKind::Read)), false),
        (
            "access time",
            ev(EventKind::Modify(ModifyKind::Metadata(
                MetadataKind::AccessTime,
            ))),
            false,
        ),
        (
            "a regular file written",
            ev(EventKind::Modify(ModifyKind::Data(DataChange::Any))),
            false,
        ),
        (
            "written file closed",
            ev(EventKind::Access(AccessKind::Close(AccessMode::Write))),
            false,
        ),
        ("other", ev(EventKind::Other), false),
    ];
    for (name, event, want) in cases {
        assert_eq!(wakes_rescan(&event), want, "{name}");
    }
}

/// The real watcher on a real directory: an entry created wakes it (the positive sign that it
/// watches), then reading the directory as a rescan does — many times over — wakes nothing.
/// Before the filter, every read woke the next rescan: ~10,000 rescans a second on an idle node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_the_directory_does_not_wake_the_watcher() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(1);
    let _watcher = watch(dir.path(), tx).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    tokio::time::timeout(T, rx.recv())
        .await
        .expect("no wake-up for a created entry")
        .expect("watcher gone");
    // Let the creation's events settle, then forget them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    while rx.try_recv().is_ok() {}
    for _ in 0..50 {
        let _ = sockets::scan(dir.path());
    }
    let woke = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await;
    assert!(woke.is_err(), "a directory read woke the rescan");
    // And it still sees changes afterwards.
    std::fs::remove_dir(dir.path().join("sub")).unwrap();
    tokio::time::timeout(T, rx.recv())
        .await
        .expect("no wake-up for a removed entry")
        .expect("watcher gone");
}
