//! The driver as a process: started on temp sockets and driven over its unix sockets by tonic
//! clients, as a node agent would. The mount and loop device calls need root (the CI runs as
//! root); every test fails loudly without it, and without `/dev/loop-control` for block volumes.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Code;

/// The clients build.rs generates for the tests.
#[allow(clippy::all, clippy::pedantic, dead_code)]
mod csi {
    include!(concat!(env!("OUT_DIR"), "/client/csi.v1.rs"));
}

#[allow(clippy::all, clippy::pedantic, dead_code)]
mod registration {
    include!(concat!(env!("OUT_DIR"), "/client/pluginregistration.rs"));
}

use csi::identity_client::IdentityClient;
use csi::node_client::NodeClient;
use csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
use csi::*;
use registration::registration_client::RegistrationClient;

const DRIVER: &str = "csi.nodelet.test";
const CAPACITY: u64 = 64 << 20;

fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "these tests mount and attach loop devices: run them as root"
    );
}

/// Unmounts whatever a failed test left under `dir` (deepest first), so the temp dir can go.
fn unmount_all_under(dir: &Path) {
    for mount_point in mounts_under(dir).into_iter().rev() {
        let _ = nix::mount::umount2(&mount_point, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Mount points at or below `dir` in /proc/self/mountinfo (octal escapes are not decoded: the
/// test paths have none).
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(dir).unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4).map(PathBuf::from))
        .filter(|mount_point| mount_point.starts_with(&dir))
        .collect()
}

struct Driver {
    child: Option<Child>,
    dir: tempfile::TempDir,
    csi_socket: PathBuf,
    registration_socket: PathBuf,
    journal: PathBuf,
    state: PathBuf,
}

impl Driver {
    async fn start(extra: &[&str]) -> Driver {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let csi_socket = dir.path().join("plugins/csi.nodelet.test/csi.sock");
        let registry = dir.path().join("plugins_registry");
        let journal = dir.path().join("journal.jsonl");
        let state = dir.path().join("state");
        let child = Command::new(env!("CARGO_BIN_EXE_nodelet-test-csi"))
            .arg("--driver-name")
            .arg(DRIVER)
            .arg("--node-id")
            .arg("node-1")
            .arg("--csi-socket")
            .arg(&csi_socket)
            .arg("--registration-dir")
            .arg(&registry)
            .arg("--state-dir")
            .arg(&state)
            .arg("--journal")
            .arg(&journal)
            .arg("--volume-capacity")
            .arg(CAPACITY.to_string())
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let driver = Driver {
            child: Some(child),
            registration_socket: registry.join(format!("{DRIVER}-reg.sock")),
            dir,
            csi_socket,
            journal,
            state,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(driver.csi_socket.exists() && driver.registration_socket.exists()) {
            assert!(
                Instant::now() < deadline,
                "the driver made no sockets in 20 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        driver
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn journal(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.journal)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    async fn node(&self) -> NodeClient<Channel> {
        NodeClient::new(unix_channel(&self.csi_socket).await)
    }

    /// Sends `signal` and waits for the exit status.
    fn stop(&mut self, signal: nix::sys::signal::Signal) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the driver did not exit on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        unmount_all_under(self.dir.path());
    }
}

async fn unix_channel(path: &Path) -> Channel {
    let path = path.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
        .unwrap()
}

fn mount_capability(mode: i32) -> Option<VolumeCapability> {
    Some(VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: "ext4".into(),
            ..Default::default()
        })),
        access_mode: Some(AccessMode { mode }),
    })
}

fn block_capability() -> Option<VolumeCapability> {
    Some(VolumeCapability {
        access_type: Some(AccessType::Block(BlockVolume {})),
        access_mode: Some(AccessMode { mode: 1 }),
    })
}

fn stage_request(id: &str, staging: &Path) -> NodeStageVolumeRequest {
    NodeStageVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.display().to_string(),
        volume_capability: mount_capability(1),
        secrets: [("password".to_string(), "s3cret".to_string())].into(),
        volume_context: [("storage".to_string(), "fast".to_string())].into(),
        publish_context: [("attached".to_string(), "yes".to_string())].into(),
    }
}

fn publish_request(
    id: &str,
    staging: &Path,
    target: &Path,
    readonly: bool,
) -> NodePublishVolumeRequest {
    NodePublishVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.display().to_string(),
        target_path: target.display().to_string(),
        volume_capability: mount_capability(1),
        readonly,
        ..Default::default()
    }
}

fn unpublish_request(id: &str, target: &Path) -> NodeUnpublishVolumeRequest {
    NodeUnpublishVolumeRequest {
        volume_id: id.into(),
        target_path: target.display().to_string(),
    }
}

fn bytes_usage(stats: &NodeGetVolumeStatsResponse) -> &VolumeUsage {
    stats
        .usage
        .iter()
        .find(|u| u.unit == volume_usage::Unit::Bytes as i32)
        .expect("a BYTES usage")
}

#[tokio::test]
async fn registration_identity_info_and_sigterm() {
    let mut driver = Driver::start(&[
        "--supported-versions",
        "1.0.0,1.2.0",
        "--max-volumes",
        "7",
        "--topology",
        "topology.nodelet.test/zone=a",
        "--capabilities",
        "stage,stats,expand,condition",
    ])
    .await;

    let mut reg = RegistrationClient::new(unix_channel(&driver.registration_socket).await);
    let info = reg
        .get_info(registration::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.r#type, "CSIPlugin");
    assert_eq!(info.name, DRIVER);
    assert_eq!(info.endpoint, driver.csi_socket.display().to_string());
    assert_eq!(info.supported_versions, ["1.0.0", "1.2.0"]);
    reg.notify_registration_status(registration::RegistrationStatus {
        plugin_registered: false,
        error: "version refused".into(),
    })
    .await
    .unwrap();

    let mut identity = IdentityClient::new(unix_channel(&driver.csi_socket).await);
    let plugin = identity
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(plugin.name, DRIVER);
    assert_eq!(plugin.vendor_version, env!("CARGO_PKG_VERSION"));
    let probe = identity.probe(ProbeRequest {}).await.unwrap().into_inner();
    assert_eq!(probe.ready, Some(true));

    let mut node = driver.node().await;
    let node_info = node
        .node_get_info(NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(node_info.node_id, "node-1");
    assert_eq!(node_info.max_volumes_per_node, 7);
    let segments = node_info.accessible_topology.unwrap().segments;
    assert_eq!(segments["topology.nodelet.test/zone"], "a");
    let caps = node
        .node_get_capabilities(NodeGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    let kinds: Vec<i32> = caps
        .capabilities
        .iter()
        .map(|c| match c.r#type {
            Some(node_service_capability::Type::Rpc(rpc)) => rpc.r#type,
            None => -1,
        })
        .collect();
    assert_eq!(kinds, [1, 2, 3, 4]);

    let journal = driver.journal();
    let methods: Vec<&str> = journal
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "GetInfo",
            "NotifyRegistrationStatus",
            "GetPluginInfo",
            "Probe",
            "NodeGetInfo",
            "NodeGetCapabilities"
        ]
    );
    assert_eq!(journal[1]["plugin_registered"], false);
    assert_eq!(journal[1]["registration_error"], "version refused");

    let status = driver.stop(nix::sys::signal::Signal::SIGTERM);
    assert!(status.success(), "exit on SIGTERM: {status}");
    assert!(
        !driver.csi_socket.exists(),
        "the CSI socket outlived the driver"
    );
    assert!(
        !driver.registration_socket.exists(),
        "the registration socket outlived the driver"
    );
}

#[tokio::test]
async fn mount_volume_staged_once_published_twice_readonly_stats_expand_and_torn_down() {
    let driver = Driver::start(&[]).await;
    let mut node = driver.node().await;
    let staging = driver.path("pods-staging/v1");
    std::fs::create_dir_all(&staging).unwrap();
    let pods = driver.path("pods");
    std::fs::create_dir_all(&pods).unwrap();
    let (t1, t2, t3) = (pods.join("a"), pods.join("b"), pods.join("ro"));
    let mut calls = 0;

    node.node_stage_volume(stage_request("v1", &staging))
        .await
        .unwrap();
    node.node_stage_volume(stage_request("v1", &staging))
        .await
        .unwrap(); // idempotent
    calls += 2;
    node.node_publish_volume(publish_request("v1", &staging, &t1, false))
        .await
        .unwrap();
    node.node_publish_volume(publish_request("v1", &staging, &t2, false))
        .await
        .unwrap();
    node.node_publish_volume(publish_request("v1", &staging, &t3, true))
        .await
        .unwrap();
    node.node_publish_volume(publish_request("v1", &staging, &t1, false))
        .await
        .unwrap(); // again
    calls += 4;
    let clash = node
        .node_publish_volume(publish_request("v1", &staging, &t1, true))
        .await
        .unwrap_err();
    assert_eq!(clash.code(), Code::AlreadyExists, "{clash:?}");
    calls += 1;

    std::fs::write(t1.join("hello"), vec![b'x'; 3000]).unwrap();
    assert_eq!(
        std::fs::read(driver.state.join("volumes/v1/hello"))
            .unwrap()
            .len(),
        3000,
        "written in the target, not in the backing dir"
    );
    assert_eq!(std::fs::read(t2.join("hello")).unwrap().len(), 3000);
    assert_eq!(std::fs::read(t3.join("hello")).unwrap().len(), 3000);
    let refused = std::fs::write(t3.join("nope"), b"x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(nix::libc::EROFS), "{refused}");

    let stats = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "v1".into(),
            volume_path: t1.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    calls += 1;
    let bytes = bytes_usage(&stats);
    assert_eq!(bytes.total, CAPACITY as i64);
    assert_eq!(bytes.used, 3000);
    assert_eq!(bytes.available, CAPACITY as i64 - 3000);
    assert!(stats
        .usage
        .iter()
        .any(|u| u.unit == volume_usage::Unit::Inodes as i32 && u.total > 0));
    assert!(stats.volume_condition.is_none(), "no condition capability");

    let not_mounted = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "v1".into(),
            volume_path: pods.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(not_mounted.code(), Code::NotFound);
    calls += 1;

    let expanded = node
        .node_expand_volume(NodeExpandVolumeRequest {
            volume_id: "v1".into(),
            volume_path: t1.display().to_string(),
            capacity_range: Some(CapacityRange {
                required_bytes: 2 * CAPACITY as i64,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(expanded.capacity_bytes, 2 * CAPACITY as i64);
    let stats = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "v1".into(),
            volume_path: t2.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(bytes_usage(&stats).total, 2 * CAPACITY as i64);
    calls += 2;

    for target in [&t1, &t2, &t3, &t1] {
        node.node_unpublish_volume(unpublish_request("v1", target))
            .await
            .unwrap();
        calls += 1;
    }
    assert!(
        !t1.exists() && !t2.exists() && !t3.exists(),
        "targets removed"
    );
    for _ in 0..2 {
        node.node_unstage_volume(NodeUnstageVolumeRequest {
            volume_id: "v1".into(),
            staging_target_path: staging.display().to_string(),
        })
        .await
        .unwrap();
        calls += 1;
    }
    assert_eq!(mounts_under(driver.dir.path()), Vec::<PathBuf>::new());
    assert!(
        driver.state.join("volumes/v1/hello").exists(),
        "the volume's data outlives its staging"
    );

    let journal = driver.journal();
    assert_eq!(
        journal.len(),
        calls,
        "one journal line per call: {journal:#?}"
    );
    let stages: Vec<&Value> = journal
        .iter()
        .filter(|e| e["method"] == "NodeStageVolume")
        .collect();
    assert_eq!(stages.len(), 2);
    assert_eq!(stages[0]["volume_id"], "v1");
    assert_eq!(stages[0]["secrets"]["password"], "s3cret");
    assert_eq!(stages[0]["volume_context"]["storage"], "fast");
    assert_eq!(stages[0]["publish_context"]["attached"], "yes");
    assert_eq!(stages[0]["fs_type"], "ext4");
    assert_eq!(stages[0]["access_mode"], "SINGLE_NODE_WRITER");
    assert_eq!(stages[0]["block"], false);
    assert_eq!(stages[0]["ok"], true);
    assert!(stages[0]["error"].is_null());
    let keys = stages[0].as_object().unwrap();
    assert!(keys.contains_key("target_path") && stages[0]["target_path"].is_null());
    let publishes: Vec<&Value> = journal
        .iter()
        .filter(|e| e["method"] == "NodePublishVolume")
        .collect();
    assert_eq!(publishes.len(), 5);
    assert_eq!(publishes[2]["readonly"], true);
    assert_eq!(publishes[4]["ok"], false);
    assert!(publishes[4]["error"]
        .as_str()
        .unwrap()
        .contains("AlreadyExists"));
}

#[tokio::test]
async fn block_volume_is_a_loop_device_at_the_target() {
    assert!(
        Path::new("/dev/loop-control").exists(),
        "block volumes need loop devices: /dev/loop-control is missing"
    );
    let driver = Driver::start(&[]).await;
    let mut node = driver.node().await;
    let staging = driver.path("staging/b1");
    std::fs::create_dir_all(&staging).unwrap();
    let pod = driver.path("pod");
    std::fs::create_dir_all(&pod).unwrap();
    let target = pod.join("dev");

    let mut stage = stage_request("b1", &staging);
    stage.volume_capability = block_capability();
    node.node_stage_volume(stage.clone()).await.unwrap();
    node.node_stage_volume(stage).await.unwrap();
    let record = std::fs::read_to_string(driver.state.join("block/b1.dev")).unwrap();
    let device = PathBuf::from(record.trim());
    let loop_name = device.file_name().unwrap().to_str().unwrap().to_string();
    let sys_size: u64 = std::fs::read_to_string(format!("/sys/block/{loop_name}/size"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(sys_size * 512, CAPACITY);

    let mut publish = publish_request("b1", &staging, &target, false);
    publish.volume_capability = block_capability();
    node.node_publish_volume(publish.clone()).await.unwrap();
    node.node_publish_volume(publish).await.unwrap();
    let meta = std::fs::metadata(&target).unwrap();
    assert!(
        meta.file_type().is_block_device(),
        "{target:?} is not a block device"
    );
    {
        use std::io::{Read, Seek, SeekFrom, Write};
        let mut dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&target)
            .unwrap();
        dev.write_all(&[7u8; 512]).unwrap();
        dev.sync_all().unwrap();
        dev.seek(SeekFrom::Start(0)).unwrap();
        let mut back = [0u8; 512];
        dev.read_exact(&mut back).unwrap();
        assert_eq!(back, [7u8; 512]);
    }

    let stats = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "b1".into(),
            volume_path: target.display().to_string(),
            staging_target_path: staging.display().to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(bytes_usage(&stats).total, CAPACITY as i64);

    let expanded = node
        .node_expand_volume(NodeExpandVolumeRequest {
            volume_id: "b1".into(),
            volume_path: target.display().to_string(),
            capacity_range: Some(CapacityRange {
                required_bytes: 2 * CAPACITY as i64,
                limit_bytes: 0,
            }),
            volume_capability: block_capability(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(expanded.capacity_bytes, 2 * CAPACITY as i64);
    let sys_size: u64 = std::fs::read_to_string(format!("/sys/block/{loop_name}/size"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(sys_size * 512, 2 * CAPACITY, "the loop device grew");

    node.node_unpublish_volume(unpublish_request("b1", &target))
        .await
        .unwrap();
    assert!(!target.exists());
    node.node_unstage_volume(NodeUnstageVolumeRequest {
        volume_id: "b1".into(),
        staging_target_path: staging.display().to_string(),
    })
    .await
    .unwrap();
    assert_eq!(mounts_under(driver.dir.path()), Vec::<PathBuf>::new());
    let image = driver.state.join("block/b1.img");
    let backing = std::fs::read_to_string(format!("/sys/block/{loop_name}/loop/backing_file"))
        .unwrap_or_default();
    assert!(
        !backing.contains(image.to_str().unwrap()),
        "{loop_name} still backs {image:?}"
    );
    assert!(!driver.state.join("block/b1.dev").exists());

    let journal = driver.journal();
    assert_eq!(journal.len(), 8, "{journal:#?}");
    assert!(journal.iter().all(|e| e["ok"] == true));
    assert!(journal
        .iter()
        .filter(|e| e["method"] == "NodeStageVolume")
        .all(|e| e["block"] == true));

    let mut driver = driver;
    let status = driver.stop(nix::sys::signal::Signal::SIGINT);
    assert!(status.success(), "exit on SIGINT: {status}");
    assert!(!driver.csi_socket.exists() && !driver.registration_socket.exists());
}

#[tokio::test]
async fn inline_volumes_failures_and_unknown_volumes() {
    let driver = Driver::start(&["--capabilities", "stage,stats,condition"]).await;
    let mut node = driver.node().await;
    let pod = driver.path("pod");
    std::fs::create_dir_all(&pod).unwrap();
    let target = pod.join("inline");

    let inline = NodePublishVolumeRequest {
        volume_id: "csi-abc/../x".into(),
        target_path: target.display().to_string(),
        volume_capability: mount_capability(1),
        volume_context: [(
            "csi.storage.k8s.io/ephemeral".to_string(),
            "true".to_string(),
        )]
        .into(),
        ..Default::default()
    };
    node.node_publish_volume(inline).await.unwrap();
    let backing = driver.state.join("volumes/csi-abc%2F%2E%2E%2Fx");
    assert!(
        backing.is_dir(),
        "the inline volume's backing dir is created at publish"
    );
    std::fs::write(target.join("data"), b"inline").unwrap();
    std::os::unix::fs::symlink(driver.dir.path(), target.join("escape")).unwrap();
    assert_eq!(std::fs::read(backing.join("data")).unwrap(), b"inline");

    std::fs::create_dir_all(driver.state.join("abnormal")).unwrap();
    std::fs::write(
        driver.state.join("abnormal/csi-abc%2F%2E%2E%2Fx"),
        "disk on fire\n",
    )
    .unwrap();
    let stats = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "csi-abc/../x".into(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let condition = stats.volume_condition.clone().unwrap();
    assert!(condition.abnormal);
    assert_eq!(condition.message, "disk on fire");
    assert_eq!(bytes_usage(&stats).used, 6, "the symlink is not followed");

    let expand = node
        .node_expand_volume(NodeExpandVolumeRequest {
            volume_id: "csi-abc/../x".into(),
            volume_path: target.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(expand.code(), Code::Unimplemented, "no expand capability");

    node.node_unpublish_volume(unpublish_request("csi-abc/../x", &target))
        .await
        .unwrap();
    assert!(!target.exists());
    assert!(
        !backing.exists(),
        "the inline volume's backing dir is removed at unpublish"
    );
    assert!(
        driver.dir.path().join("journal.jsonl").exists(),
        "the symlink's target survives"
    );
    node.node_unpublish_volume(unpublish_request("csi-abc/../x", &target))
        .await
        .unwrap();

    let failing = NodePublishVolumeRequest {
        volume_id: "v2".into(),
        staging_target_path: driver.path("staging").display().to_string(),
        target_path: pod.join("failing").display().to_string(),
        volume_capability: mount_capability(1),
        volume_context: [("nodelet.test/fail-publish".to_string(), "yes".to_string())].into(),
        ..Default::default()
    };
    let failed = node.node_publish_volume(failing).await.unwrap_err();
    assert_eq!(failed.code(), Code::Internal);
    assert!(!pod.join("failing").exists());

    let staging = driver.path("staging/v3");
    std::fs::create_dir_all(&staging).unwrap();
    let unstaged = node
        .node_publish_volume(publish_request("v3", &staging, &pod.join("v3"), false))
        .await
        .unwrap_err();
    assert_eq!(unstaged.code(), Code::FailedPrecondition, "{unstaged:?}");
    let missing = node
        .node_stage_volume(NodeStageVolumeRequest {
            volume_capability: None,
            ..stage_request("v3", &staging)
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument);

    // A mount the driver did not make, under a volume id it does not know.
    let foreign = driver.path("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    nix::mount::mount(
        Some(driver.path("pod").as_path()),
        &foreign,
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .unwrap();
    let unknown = node
        .node_unpublish_volume(unpublish_request("nobody", &foreign))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    nix::mount::umount2(&foreign, nix::mount::MntFlags::empty()).unwrap();
    // Not mounted at all: nothing to do, OK (the specification's idempotence).
    node.node_unpublish_volume(unpublish_request("nobody", &pod.join("never")))
        .await
        .unwrap();
    node.node_unstage_volume(NodeUnstageVolumeRequest {
        volume_id: "nobody".into(),
        staging_target_path: staging.display().to_string(),
    })
    .await
    .unwrap();
    assert_eq!(mounts_under(driver.dir.path()), Vec::<PathBuf>::new());

    let journal = driver.journal();
    assert_eq!(journal.len(), 11, "{journal:#?}");
    let failed_line = journal
        .iter()
        .find(|e| e["method"] == "NodePublishVolume" && e["volume_id"] == "v2")
        .unwrap();
    assert_eq!(failed_line["ok"], false);
    assert!(failed_line["error"]
        .as_str()
        .unwrap()
        .contains("fail-publish"));
}
