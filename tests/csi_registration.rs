//! CSI plugin registration in cluster mode, on a real containerd, against the real v1.37.2
//! control plane (the node's own identity: the Node authorizer and NodeRestriction judge its
//! CSINode and Node writes) and the real `kubectl`: a driver's registration socket appears in
//! `<rootDir>/plugins_registry` (served here, in the test, with the driver's Node service; the
//! project's own driver process takes its place once it exists), nodelet registers it and
//! records it on the `CSINode` and the Node, and takes it off both when the socket goes.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use nodelet::csi::api;
use nodelet::csi::api::node_server::{Node, NodeServer};
use nodelet::csi::registration_api::registration_server::{Registration, RegistrationServer};
use nodelet::csi::registration_api::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use tokio::sync::{mpsc, oneshot};

const DRIVER: &str = "csi.nodelet.example.com";
const ZONE_KEY: &str = "topology.csi.nodelet.example.com/zone";

struct RegistrationFake {
    info: PluginInfo,
    statuses: mpsc::UnboundedSender<RegistrationStatus>,
}

#[tonic::async_trait]
impl Registration for RegistrationFake {
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

/// A driver's Node service that answers what registration asks.
struct DriverFake;

fn unimplemented<T>() -> Result<tonic::Response<T>, tonic::Status> {
    Err(tonic::Status::unimplemented("registration only"))
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
        Ok(tonic::Response::new(
            api::NodeGetCapabilitiesResponse::default(),
        ))
    }
    async fn node_get_info(
        &self,
        _: tonic::Request<api::NodeGetInfoRequest>,
    ) -> Result<tonic::Response<api::NodeGetInfoResponse>, tonic::Status> {
        Ok(tonic::Response::new(api::NodeGetInfoResponse {
            node_id: "csi-node-7".into(),
            max_volumes_per_node: 5,
            accessible_topology: Some(api::Topology {
                segments: HashMap::from([(ZONE_KEY.to_string(), "zone-a".to_string())]),
            }),
        }))
    }
}

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

fn get_json(api: &str, args: &[&str]) -> Option<serde_json::Value> {
    let (ok, out, _) = kubectl(api, args);
    if !ok {
        return None;
    }
    serde_json::from_str(&out).ok()
}

/// A CSINode without drivers: `spec.drivers` empty or absent (`null` from the real server).
fn no_drivers(csinode: &serde_json::Value) -> bool {
    let drivers = &csinode["spec"]["drivers"];
    drivers.is_null() || drivers.as_array().is_some_and(|d| d.is_empty())
}

/// A driver's Node service at `<dir>/csi.sock` and its registration socket naming that
/// endpoint, with what nodelet tells it back.
struct Registering {
    _driver: oneshot::Sender<()>,
    registration: oneshot::Sender<()>,
    reg_socket: PathBuf,
    statuses: mpsc::UnboundedReceiver<RegistrationStatus>,
}

impl Registering {
    fn start(dir: &Path, reg_socket: &Path) -> Registering {
        let csi_socket = dir.join("csi.sock");
        let driver = serve(
            &csi_socket,
            tonic::transport::Server::builder().add_service(NodeServer::new(DriverFake)),
        );
        let (tx, statuses) = mpsc::unbounded_channel();
        let registration = serve(
            reg_socket,
            tonic::transport::Server::builder().add_service(RegistrationServer::new(
                RegistrationFake {
                    info: PluginInfo {
                        r#type: "CSIPlugin".into(),
                        name: DRIVER.into(),
                        endpoint: csi_socket.display().to_string(),
                        supported_versions: vec!["1.0.0".into()],
                    },
                    statuses: tx,
                },
            )),
        );
        Registering {
            _driver: driver,
            registration,
            reg_socket: reg_socket.to_path_buf(),
            statuses,
        }
    }

    /// What nodelet's `NotifyRegistrationStatus` said.
    async fn status(&mut self) -> RegistrationStatus {
        tokio::time::timeout(Duration::from_secs(60), self.statuses.recv())
            .await
            .expect("NotifyRegistrationStatus within a minute")
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csi_driver_registers_on_the_csinode_and_the_node_and_leaves_with_its_socket() {
    let server = RealServer::start("csi-registration");
    let api = server.api();
    let n = Nodelet::start_in_real_cluster("csi-registration", &server, "");
    let node = n.node.clone();

    // At start: the CSINode, owned by the Node, with the migrated-plugins annotation.
    let csinode = wait_api("the CSINode created at start", &n, || {
        get_json(&api, &["get", "csinode", &node, "-o", "json"])
    })
    .await;
    let node_json = get_json(&api, &["get", "node", &node, "-o", "json"]).expect("the Node");
    let owner = &csinode["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node", "{csinode}");
    assert_eq!(owner["apiVersion"], "v1");
    assert_eq!(owner["name"], node.as_str());
    assert_eq!(owner["uid"], node_json["metadata"]["uid"]);
    assert!(
        csinode["metadata"]["annotations"]["storage.alpha.kubernetes.io/migrated-plugins"]
            .as_str()
            .is_some_and(|v| v.contains("kubernetes.io/gce-pd")),
        "{csinode}"
    );
    // No driver yet: the real API server stores the empty list the kubelet sends as none.
    assert!(no_drivers(&csinode), "{csinode}");

    // The driver's sockets: its Node service, and its registration socket in the registry.
    let registry = n.dir.path().join("root/plugins_registry");
    assert!(registry.is_dir(), "nodelet created {}", registry.display());

    // An endpoint in a directory anyone may write to is refused, saying why: another user
    // could have put their own socket there and receive the volumes' mounts and secrets.
    {
        use std::os::unix::fs::PermissionsExt;
        let open_dir = n.dir.path().join("root/plugins/open");
        std::fs::create_dir_all(&open_dir).unwrap();
        std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let mut open = Registering::start(&open_dir, &registry.join("open-reg.sock"));
        let status = open.status().await;
        assert!(!status.plugin_registered, "{status:?}");
        assert!(
            status
                .error
                .contains("the endpoint's directory has mode 1777: others may write to it"),
            "{status:?}"
        );
        drop(open.registration);
        std::fs::remove_file(&open.reg_socket).unwrap();
    }
    let driver_dir = n.dir.path().join("root/plugins").join(DRIVER);
    std::fs::create_dir_all(&driver_dir).unwrap();
    let mut registering =
        Registering::start(&driver_dir, &registry.join(format!("{DRIVER}-reg.sock")));
    let status = registering.status().await;
    assert!(status.plugin_registered, "{status:?}\n{}", n.logs());
    assert_eq!(status.error, "");

    // kubectl shows the driver on the CSINode, and the Node's annotation and topology label.
    let drivers = wait_api("the driver on the CSINode", &n, || {
        let c = get_json(&api, &["get", "csinode", &node, "-o", "json"])?;
        let drivers = c["spec"]["drivers"].as_array()?.clone();
        (!drivers.is_empty()).then_some(drivers)
    })
    .await;
    assert_eq!(
        drivers,
        vec![serde_json::json!({
            "name": DRIVER,
            "nodeID": "csi-node-7",
            "topologyKeys": [ZONE_KEY],
            "allocatable": {"count": 5}
        })]
    );
    let node_json = get_json(&api, &["get", "node", &node, "-o", "json"]).expect("the Node");
    assert_eq!(
        node_json["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"],
        format!("{{\"{DRIVER}\":\"csi-node-7\"}}"),
        "{node_json}"
    );
    assert_eq!(node_json["metadata"]["labels"][ZONE_KEY], "zone-a");
    // The node's own labels are still there.
    assert_eq!(
        node_json["metadata"]["labels"]["kubernetes.io/hostname"],
        node.as_str()
    );

    // The registration socket goes: the driver leaves the CSINode and the Node.
    drop(std::mem::replace(
        &mut registering.registration,
        oneshot::channel().0,
    ));
    std::fs::remove_file(&registering.reg_socket).unwrap();
    wait_api("the driver off the CSINode and the Node", &n, || {
        let c = get_json(&api, &["get", "csinode", &node, "-o", "json"])?;
        let nj = get_json(&api, &["get", "node", &node, "-o", "json"])?;
        let gone = no_drivers(&c)
            && nj["metadata"]["annotations"]
                .get("csi.volume.kubernetes.io/nodeid")
                .is_none()
            && nj["metadata"]["labels"].get(ZONE_KEY).is_none();
        gone.then_some(())
    })
    .await;
    // The CSINode itself stays (the kubelet's does), still owned by the Node.
    let csinode = get_json(&api, &["get", "csinode", &node, "-o", "json"]).expect("CSINode");
    assert_eq!(csinode["metadata"]["ownerReferences"][0]["kind"], "Node");
}
