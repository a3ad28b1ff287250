//! The CSI Node service: what each call means for this driver is decided by pure functions
//! (argument checks, compatibility, sizes, usage), the effects are the state dir, the mounts and
//! the loop devices. Calls are serialised: each one runs to its end before the next starts, so
//! two calls for one volume never interleave.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tonic::{Request, Response, Status};

use crate::api::csi::node_server::Node;
use crate::api::csi::volume_capability::AccessType;
use crate::api::csi::{
    node_service_capability, volume_capability, volume_usage, CapacityRange,
    NodeExpandVolumeRequest, NodeExpandVolumeResponse, NodeGetCapabilitiesRequest,
    NodeGetCapabilitiesResponse, NodeGetInfoRequest, NodeGetInfoResponse,
    NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse, NodePublishVolumeRequest,
    NodePublishVolumeResponse, NodeServiceCapability, NodeStageVolumeRequest,
    NodeStageVolumeResponse, NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse,
    NodeUnstageVolumeRequest, NodeUnstageVolumeResponse, Topology, VolumeCapability,
    VolumeCondition, VolumeUsage,
};
use crate::config::{Capabilities, Config};
use crate::journal::Journal;
use crate::loopdev::{self, LoopError};
use crate::mounts::{self, MountEntry, MountError};
use crate::state::{self, escape_id, fd_path, StateDir, StateError};

/// The volume_context key the kubelet sets on an inline (ephemeral) CSI volume.
pub const EPHEMERAL_KEY: &str = "csi.storage.k8s.io/ephemeral";
/// A volume_context key that makes NodePublishVolume fail with INTERNAL (failure-path tests).
pub const FAIL_PUBLISH_KEY: &str = "nodelet.test/fail-publish";

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error(transparent)]
    Loop(#[from] LoopError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<NodeError> for Status {
    fn from(err: NodeError) -> Self {
        match err {
            NodeError::State(StateError::IdTooLong(_)) => Status::invalid_argument(err.to_string()),
            other => Status::internal(other.to_string()),
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> NodeError + '_ {
    move |source| NodeError::Io {
        path: path.display().to_string(),
        source,
    }
}

// ---- decisions -------------------------------------------------------------------------------

fn required<'a>(value: &'a str, field: &str) -> Result<&'a str, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!(
            "{field} missing in request"
        )));
    }
    Ok(value)
}

/// Whether the capability asks for a block volume; INVALID_ARGUMENT without one.
pub fn access_is_block(capability: Option<&VolumeCapability>) -> Result<bool, Status> {
    match capability.and_then(|c| c.access_type.as_ref()) {
        Some(AccessType::Block(_)) => Ok(true),
        Some(AccessType::Mount(_)) => Ok(false),
        None if capability.is_none() => Err(Status::invalid_argument(
            "volume_capability missing in request",
        )),
        None => Err(Status::invalid_argument(
            "volume_capability has neither block nor mount access type",
        )),
    }
}

/// A checked NodeStageVolume.
#[derive(Debug, PartialEq, Eq)]
pub struct Stage {
    pub volume_id: String,
    pub staging: PathBuf,
    pub block: bool,
}

pub fn decide_stage(caps: Capabilities, req: &NodeStageVolumeRequest) -> Result<Stage, Status> {
    if !caps.stage {
        return Err(Status::unimplemented(
            "NodeStageVolume: the driver has no STAGE_UNSTAGE_VOLUME capability",
        ));
    }
    let volume_id = required(&req.volume_id, "volume_id")?;
    let staging = required(&req.staging_target_path, "staging_target_path")?;
    let block = access_is_block(req.volume_capability.as_ref())?;
    Ok(Stage {
        volume_id: volume_id.to_string(),
        staging: PathBuf::from(staging),
        block,
    })
}

/// Where a published volume comes from.
#[derive(Debug, PartialEq, Eq)]
pub enum PublishSource {
    /// The staging mount (mount access with the stage capability).
    Staging(PathBuf),
    /// The backing directory, created if missing (no stage capability, or an inline volume).
    Backing,
    /// The loop device recorded at stage.
    StagedDevice,
    /// A loop device attached at publish (block access without the stage capability).
    OwnDevice,
}

/// A checked NodePublishVolume.
#[derive(Debug, PartialEq, Eq)]
pub struct Publish {
    pub volume_id: String,
    pub target: PathBuf,
    pub source: PublishSource,
    pub readonly: bool,
    pub ephemeral: bool,
    pub block: bool,
}

pub fn decide_publish(
    caps: Capabilities,
    req: &NodePublishVolumeRequest,
) -> Result<Publish, Status> {
    let volume_id = required(&req.volume_id, "volume_id")?;
    let target = required(&req.target_path, "target_path")?;
    let block = access_is_block(req.volume_capability.as_ref())?;
    let ephemeral = req.volume_context.get(EPHEMERAL_KEY).map(String::as_str) == Some("true");
    if let Some(value) = req.volume_context.get(FAIL_PUBLISH_KEY) {
        return Err(Status::internal(format!(
            "publish fails as volume_context {FAIL_PUBLISH_KEY}={value:?} asks"
        )));
    }
    if ephemeral && block {
        return Err(Status::invalid_argument(
            "an inline (ephemeral) volume cannot have block access",
        ));
    }
    let staged = caps.stage && !ephemeral;
    if staged && req.staging_target_path.is_empty() {
        return Err(Status::invalid_argument(
            "staging_target_path missing in request (the driver has STAGE_UNSTAGE_VOLUME)",
        ));
    }
    let source = match (block, staged) {
        (false, true) => PublishSource::Staging(PathBuf::from(&req.staging_target_path)),
        (false, false) => PublishSource::Backing,
        (true, true) => PublishSource::StagedDevice,
        (true, false) => PublishSource::OwnDevice,
    };
    Ok(Publish {
        volume_id: volume_id.to_string(),
        target: PathBuf::from(target),
        source,
        readonly: req.readonly,
        ephemeral,
        block,
    })
}

/// A target that is already mounted: the same publish again is OK, a different one (read-only
/// against read-write) is ALREADY_EXISTS, as the specification says.
pub fn republish(existing: &MountEntry, readonly: bool) -> Result<(), Status> {
    if existing.read_only == readonly {
        Ok(())
    } else {
        Err(Status::already_exists(format!(
            "{} is already published with readonly={}",
            existing.mount_point.display(),
            existing.read_only
        )))
    }
}

/// The size NodeExpandVolume asks for: `required_bytes`, else `limit_bytes`, else the current
/// size; negative is INVALID_ARGUMENT, smaller than now OUT_OF_RANGE (no shrinking).
pub fn expanded_size(range: Option<&CapacityRange>, current: u64) -> Result<u64, Status> {
    let range = range.copied().unwrap_or_default();
    if range.required_bytes < 0 || range.limit_bytes < 0 {
        return Err(Status::invalid_argument("capacity_range is negative"));
    }
    let wanted = if range.required_bytes > 0 {
        range.required_bytes
    } else if range.limit_bytes > 0 {
        range.limit_bytes
    } else {
        return Ok(current);
    };
    let wanted = u64::try_from(wanted).unwrap_or(0);
    if wanted < current {
        return Err(Status::out_of_range(format!(
            "the volume has {current} bytes; it cannot shrink to {wanted}"
        )));
    }
    Ok(wanted)
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The usage a stats call reports: bytes against the volume's capacity (only the total for a
/// block volume), inodes as the filesystem under the path counts them.
pub fn usage(
    capacity: u64,
    used: Option<u64>,
    inodes: Option<(u64, u64, u64)>,
) -> Vec<VolumeUsage> {
    let mut out = vec![match used {
        Some(used) => VolumeUsage {
            total: to_i64(capacity),
            used: to_i64(used),
            available: to_i64(capacity.saturating_sub(used)),
            unit: volume_usage::Unit::Bytes as i32,
        },
        None => VolumeUsage {
            total: to_i64(capacity),
            used: 0,
            available: 0,
            unit: volume_usage::Unit::Bytes as i32,
        },
    }];
    if let Some((total, free, available)) = inodes {
        out.push(VolumeUsage {
            total: to_i64(total),
            used: to_i64(total.saturating_sub(free)),
            available: to_i64(available),
            unit: volume_usage::Unit::Inodes as i32,
        });
    }
    out
}

pub fn capabilities(caps: Capabilities) -> Vec<NodeServiceCapability> {
    use node_service_capability::rpc::Type;
    [
        (caps.stage, Type::StageUnstageVolume),
        (caps.stats, Type::GetVolumeStats),
        (caps.expand, Type::ExpandVolume),
        (caps.condition, Type::VolumeCondition),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, kind)| NodeServiceCapability {
        r#type: Some(node_service_capability::Type::Rpc(
            node_service_capability::Rpc {
                r#type: kind as i32,
            },
        )),
    })
    .collect()
}

// ---- journal entries ------------------------------------------------------------------------

fn map_value(map: &HashMap<String, String>) -> Value {
    let sorted: std::collections::BTreeMap<&String, &String> = map.iter().collect();
    json!(sorted)
}

fn capability_fields(entry: &mut Map<String, Value>, capability: Option<&VolumeCapability>) {
    let Some(capability) = capability else { return };
    let fs_type = match &capability.access_type {
        Some(AccessType::Mount(mount)) => mount.fs_type.clone(),
        _ => String::new(),
    };
    let mode = capability
        .access_mode
        .and_then(|m| volume_capability::access_mode::Mode::try_from(m.mode).ok())
        .map_or("UNKNOWN", |m| m.as_str_name());
    entry.insert("fs_type".into(), json!(fs_type));
    entry.insert("access_mode".into(), json!(mode));
    entry.insert(
        "block".into(),
        json!(matches!(capability.access_type, Some(AccessType::Block(_)))),
    );
}

fn entry(method: &str) -> Map<String, Value> {
    let mut entry = Map::new();
    entry.insert("method".into(), json!(method));
    entry
}

/// The journal line of a call about a volume: every field of the journal's schema, `null`
/// where the request has no such field, so every volume line has the same keys.
fn volume_entry(method: &str) -> Map<String, Value> {
    let mut entry = entry(method);
    for key in [
        "volume_id",
        "staging_target_path",
        "target_path",
        "readonly",
        "volume_context",
        "publish_context",
        "secrets",
        "fs_type",
        "access_mode",
        "block",
    ] {
        entry.insert(key.into(), Value::Null);
    }
    entry
}

// ---- the service ----------------------------------------------------------------------------

pub struct NodeService {
    config: Arc<Config>,
    state: StateDir,
    journal: Arc<Journal>,
    serial: tokio::sync::Mutex<()>,
}

impl NodeService {
    pub fn new(config: Arc<Config>, state: StateDir, journal: Arc<Journal>) -> Self {
        Self {
            config,
            state,
            journal,
            serial: tokio::sync::Mutex::new(()),
        }
    }

    fn finish<T>(
        &self,
        mut entry: Map<String, Value>,
        result: Result<T, Status>,
    ) -> Result<Response<T>, Status> {
        entry.insert("ok".into(), json!(result.is_ok()));
        entry.insert(
            "error".into(),
            match &result {
                Ok(_) => Value::Null,
                Err(status) => json!(format!("{:?}: {}", status.code(), status.message())),
            },
        );
        self.journal.record(entry);
        result.map(Response::new)
    }

    /// The volume's size now: the expanded size if recorded, else `--volume-capacity`.
    fn capacity(&self, id: &str) -> Result<u64, NodeError> {
        let name = escape_id(id)?;
        Ok(self
            .state
            .read_record(state::CAPACITY, &name)?
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(self.config.volume_capacity))
    }

    fn device_record(&self, id: &str) -> Result<String, NodeError> {
        Ok(format!("{}.dev", escape_id(id)?))
    }

    /// The loop device recorded for `id`, if it is still attached to the volume's image.
    fn attached_device(&self, id: &str) -> Result<Option<PathBuf>, NodeError> {
        let record = self.device_record(id)?;
        let Some(text) = self.state.read_record(state::BLOCK, &record)? else {
            return Ok(None);
        };
        let Some(device) = loopdev::parse_loop_device(&text) else {
            return Ok(None);
        };
        let image = self
            .state
            .path()
            .join(state::BLOCK)
            .join(format!("{}.img", escape_id(id)?));
        let backing = loopdev::backing_file(&device);
        Ok((backing.as_deref() == Some(mounts::canonical(&image).as_path())).then_some(device))
    }

    /// Attaches the block volume's image (created at its capacity) unless it already is.
    fn ensure_device(&self, id: &str) -> Result<PathBuf, NodeError> {
        if let Some(device) = self.attached_device(id)? {
            return Ok(device);
        }
        let image = self.state.ensure_block_image(id, self.capacity(id)?)?;
        let device = loopdev::attach(&image)?;
        self.state.write_record(
            state::BLOCK,
            &self.device_record(id)?,
            &device.display().to_string(),
        )?;
        Ok(device)
    }

    fn detach_device(&self, id: &str) -> Result<(), NodeError> {
        if let Some(device) = self.attached_device(id)? {
            loopdev::detach(&device)?;
        }
        self.state
            .remove_record(state::BLOCK, &self.device_record(id)?)?;
        Ok(())
    }

    /// Whether the driver knows volume `id` (a backing directory or a block image).
    fn known(&self, id: &str) -> Result<bool, NodeError> {
        if self.state.volume_dir(id)?.is_some() {
            return Ok(true);
        }
        let image = self
            .state
            .path()
            .join(state::BLOCK)
            .join(format!("{}.img", escape_id(id)?));
        Ok(image.symlink_metadata().is_ok())
    }

    fn stage(&self, req: &NodeStageVolumeRequest) -> Result<(), Status> {
        let stage = decide_stage(self.config.capabilities, req)?;
        if stage.block {
            self.ensure_device(&stage.volume_id)?;
            return Ok(());
        }
        if !stage.staging.is_dir() {
            return Err(Status::invalid_argument(format!(
                "staging_target_path {} is not a directory (the CO creates it)",
                stage.staging.display()
            )));
        }
        if mounts::current_mount(&stage.staging)
            .map_err(NodeError::from)?
            .is_some()
        {
            return Ok(());
        }
        let backing = self
            .state
            .ensure_volume_dir(&stage.volume_id)
            .map_err(NodeError::from)?;
        mounts::bind(
            &fd_path(std::os::fd::AsFd::as_fd(&backing)),
            &stage.staging,
            false,
        )
        .map_err(NodeError::from)?;
        Ok(())
    }

    fn unstage(&self, req: &NodeUnstageVolumeRequest) -> Result<(), Status> {
        if !self.config.capabilities.stage {
            return Err(Status::unimplemented(
                "NodeUnstageVolume: the driver has no STAGE_UNSTAGE_VOLUME capability",
            ));
        }
        let id = required(&req.volume_id, "volume_id")?;
        let staging = PathBuf::from(required(&req.staging_target_path, "staging_target_path")?);
        let known = self.known(id)?;
        if mounts::current_mount(&staging)
            .map_err(NodeError::from)?
            .is_some()
        {
            if !known {
                return Err(Status::not_found(format!(
                    "volume {id:?} does not exist (yet {} is mounted)",
                    staging.display()
                )));
            }
            mounts::unmount(&staging).map_err(NodeError::from)?;
        }
        self.detach_device(id)?;
        Ok(())
    }

    fn publish(&self, req: &NodePublishVolumeRequest) -> Result<(), Status> {
        let publish = decide_publish(self.config.capabilities, req)?;
        let target = &publish.target;
        match target.parent() {
            Some(parent) if parent.is_dir() => {}
            _ => {
                return Err(Status::invalid_argument(format!(
                    "the parent of target_path {} does not exist (the CO creates it)",
                    target.display()
                )))
            }
        }
        if let Some(existing) = mounts::current_mount(target).map_err(NodeError::from)? {
            return republish(&existing, publish.readonly);
        }
        let id = &publish.volume_id;
        let backing;
        let source: PathBuf = match &publish.source {
            PublishSource::Staging(staging) => {
                if mounts::current_mount(staging)
                    .map_err(NodeError::from)?
                    .is_none()
                {
                    return Err(Status::failed_precondition(format!(
                        "volume {id:?} is not staged at {}",
                        staging.display()
                    )));
                }
                staging.clone()
            }
            PublishSource::Backing => {
                backing = self.state.ensure_volume_dir(id).map_err(NodeError::from)?;
                if publish.ephemeral {
                    self.state
                        .write_record(
                            state::EPHEMERAL,
                            &escape_id(id).map_err(NodeError::from)?,
                            "",
                        )
                        .map_err(NodeError::from)?;
                }
                fd_path(std::os::fd::AsFd::as_fd(&backing))
            }
            PublishSource::StagedDevice => self.attached_device(id)?.ok_or_else(|| {
                Status::failed_precondition(format!("block volume {id:?} is not staged"))
            })?,
            PublishSource::OwnDevice => self.ensure_device(id)?,
        };
        if publish.block {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(target)
                .map_err(io_err(target))?;
        } else {
            match std::fs::create_dir(target) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(io_err(target)(err).into()),
            }
        }
        mounts::bind(&source, target, publish.readonly).map_err(NodeError::from)?;
        Ok(())
    }

    fn unpublish(&self, req: &NodeUnpublishVolumeRequest) -> Result<(), Status> {
        let id = required(&req.volume_id, "volume_id")?;
        let target = PathBuf::from(required(&req.target_path, "target_path")?);
        let name = escape_id(id).map_err(NodeError::from)?;
        if mounts::current_mount(&target)
            .map_err(NodeError::from)?
            .is_some()
        {
            if !self.known(id)? {
                return Err(Status::not_found(format!(
                    "volume {id:?} does not exist (yet {} is mounted)",
                    target.display()
                )));
            }
            mounts::unmount(&target).map_err(NodeError::from)?;
        }
        match target.symlink_metadata() {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir(&target).map_err(io_err(&target))?,
            Ok(_) => std::fs::remove_file(&target).map_err(io_err(&target))?,
            Err(_) => {}
        }
        if self
            .state
            .read_record(state::EPHEMERAL, &name)
            .map_err(NodeError::from)?
            .is_some()
        {
            self.state.remove_volume_dir(id).map_err(NodeError::from)?;
            self.state
                .remove_record(state::CAPACITY, &name)
                .map_err(NodeError::from)?;
            self.state
                .remove_record(state::EPHEMERAL, &name)
                .map_err(NodeError::from)?;
        }
        if !self.config.capabilities.stage {
            // A block volume's device is the publish's own without staging.
            self.detach_device(id)?;
        }
        Ok(())
    }

    fn stats(&self, req: &NodeGetVolumeStatsRequest) -> Result<NodeGetVolumeStatsResponse, Status> {
        if !self.config.capabilities.stats {
            return Err(Status::unimplemented(
                "NodeGetVolumeStats: the driver has no GET_VOLUME_STATS capability",
            ));
        }
        let id = required(&req.volume_id, "volume_id")?;
        let path = PathBuf::from(required(&req.volume_path, "volume_path")?);
        if mounts::current_mount(&path)
            .map_err(NodeError::from)?
            .is_none()
        {
            return Err(Status::not_found(format!(
                "volume_path {} is not a mount point",
                path.display()
            )));
        }
        if !self.known(id)? {
            return Err(Status::not_found(format!("volume {id:?} does not exist")));
        }
        let capacity = self.capacity(id)?;
        let used = self.state.used_bytes(id).map_err(NodeError::from)?;
        let inodes = if used.is_some() {
            nix::sys::statvfs::statvfs(&path)
                .ok()
                .map(|vfs| (vfs.files(), vfs.files_free(), vfs.files_available()))
        } else {
            None
        };
        let condition = if self.config.capabilities.condition {
            let name = escape_id(id).map_err(NodeError::from)?;
            Some(
                match self
                    .state
                    .read_record(state::ABNORMAL, &name)
                    .map_err(NodeError::from)?
                {
                    Some(message) => VolumeCondition {
                        abnormal: true,
                        message: message.trim().to_string(),
                    },
                    None => VolumeCondition {
                        abnormal: false,
                        message: "volume is healthy".into(),
                    },
                },
            )
        } else {
            None
        };
        Ok(NodeGetVolumeStatsResponse {
            usage: usage(capacity, used, inodes),
            volume_condition: condition,
        })
    }

    fn expand(&self, req: &NodeExpandVolumeRequest) -> Result<NodeExpandVolumeResponse, Status> {
        if !self.config.capabilities.expand {
            return Err(Status::unimplemented(
                "NodeExpandVolume: the driver has no EXPAND_VOLUME capability",
            ));
        }
        let id = required(&req.volume_id, "volume_id")?;
        required(&req.volume_path, "volume_path")?;
        if !self.known(id)? {
            return Err(Status::not_found(format!("volume {id:?} does not exist")));
        }
        let current = self.capacity(id)?;
        let size = expanded_size(req.capacity_range.as_ref(), current)?;
        let name = escape_id(id).map_err(NodeError::from)?;
        if self
            .state
            .volume_dir(id)
            .map_err(NodeError::from)?
            .is_none()
        {
            self.state
                .ensure_block_image(id, size)
                .map_err(NodeError::from)?;
            if let Some(device) = self.attached_device(id)? {
                loopdev::refresh_capacity(&device).map_err(NodeError::from)?;
            }
        }
        self.state
            .write_record(state::CAPACITY, &name, &size.to_string())
            .map_err(NodeError::from)?;
        Ok(NodeExpandVolumeResponse {
            capacity_bytes: to_i64(size),
        })
    }
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let req = request.into_inner();
        let mut e = volume_entry("NodeStageVolume");
        e.insert("volume_id".into(), json!(req.volume_id));
        e.insert("staging_target_path".into(), json!(req.staging_target_path));
        e.insert("volume_context".into(), map_value(&req.volume_context));
        e.insert("publish_context".into(), map_value(&req.publish_context));
        e.insert("secrets".into(), map_value(&req.secrets));
        capability_fields(&mut e, req.volume_capability.as_ref());
        let _serial = self.serial.lock().await;
        let result = self.stage(&req).map(|()| NodeStageVolumeResponse {});
        self.finish(e, result)
    }

    async fn node_unstage_volume(
        &self,
        request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        let req = request.into_inner();
        let mut e = volume_entry("NodeUnstageVolume");
        e.insert("volume_id".into(), json!(req.volume_id));
        e.insert("staging_target_path".into(), json!(req.staging_target_path));
        let _serial = self.serial.lock().await;
        let result = self.unstage(&req).map(|()| NodeUnstageVolumeResponse {});
        self.finish(e, result)
    }

    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        let mut e = volume_entry("NodePublishVolume");
        e.insert("volume_id".into(), json!(req.volume_id));
        e.insert("staging_target_path".into(), json!(req.staging_target_path));
        e.insert("target_path".into(), json!(req.target_path));
        e.insert("readonly".into(), json!(req.readonly));
        e.insert("volume_context".into(), map_value(&req.volume_context));
        e.insert("publish_context".into(), map_value(&req.publish_context));
        e.insert("secrets".into(), map_value(&req.secrets));
        capability_fields(&mut e, req.volume_capability.as_ref());
        if self.config.hang_publish {
            // Journaled as received, then never answered; the serial lock is not taken, so
            // the driver's other calls go on.
            e.insert("hung".into(), json!(true));
            self.journal.record(e);
            return std::future::pending().await;
        }
        let _serial = self.serial.lock().await;
        let result = self.publish(&req).map(|()| NodePublishVolumeResponse {});
        self.finish(e, result)
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        let mut e = volume_entry("NodeUnpublishVolume");
        e.insert("volume_id".into(), json!(req.volume_id));
        e.insert("target_path".into(), json!(req.target_path));
        let _serial = self.serial.lock().await;
        let result = self
            .unpublish(&req)
            .map(|()| NodeUnpublishVolumeResponse {});
        self.finish(e, result)
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let req = request.into_inner();
        let mut e = volume_entry("NodeGetVolumeStats");
        e.insert("volume_id".into(), json!(req.volume_id));
        e.insert("volume_path".into(), json!(req.volume_path));
        e.insert("staging_target_path".into(), json!(req.staging_target_path));
        let _serial = self.serial.lock().await;
        let result = self.stats(&req);
        self.finish(e, result)
    }

    async fn node_expand_volume(
        &self,
        request: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        let req = request.into_inner();
        let mut e = volume_entry("NodeExpandVolume");
        e.insert("volume_id".into(), json!(req.volume_id));
        e.insert("volume_path".into(), json!(req.volume_path));
        e.insert("staging_target_path".into(), json!(req.staging_target_path));
        e.insert(
            "required_bytes".into(),
            json!(req.capacity_range.map(|r| r.required_bytes)),
        );
        e.insert("secrets".into(), map_value(&req.secrets));
        capability_fields(&mut e, req.volume_capability.as_ref());
        let _serial = self.serial.lock().await;
        let result = self.expand(&req);
        if let Ok(answer) = &result {
            e.insert("capacity_bytes".into(), json!(answer.capacity_bytes));
        }
        self.finish(e, result)
    }

    async fn node_get_capabilities(
        &self,
        _request: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let result = Ok(NodeGetCapabilitiesResponse {
            capabilities: capabilities(self.config.capabilities),
        });
        self.finish(entry("NodeGetCapabilities"), result)
    }

    async fn node_get_info(
        &self,
        _request: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        let topology = (!self.config.topology.is_empty()).then(|| Topology {
            segments: self.config.topology.clone().into_iter().collect(),
        });
        let result = Ok(NodeGetInfoResponse {
            node_id: self.config.node_id.clone(),
            max_volumes_per_node: self.config.max_volumes,
            accessible_topology: topology,
        });
        self.finish(entry("NodeGetInfo"), result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::csi::volume_capability::{AccessMode, BlockVolume, MountVolume};
    use tonic::Code;

    fn code_of<T>(result: &Result<T, Status>) -> Option<Code> {
        result.as_ref().err().map(Status::code)
    }

    fn mount_cap() -> Option<VolumeCapability> {
        Some(VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume::default())),
            access_mode: Some(AccessMode { mode: 1 }),
        })
    }

    fn block_cap() -> Option<VolumeCapability> {
        Some(VolumeCapability {
            access_type: Some(AccessType::Block(BlockVolume {})),
            access_mode: Some(AccessMode { mode: 1 }),
        })
    }

    const STAGE: Capabilities = Capabilities {
        stage: true,
        stats: true,
        expand: true,
        condition: false,
    };
    const NO_STAGE: Capabilities = Capabilities {
        stage: false,
        ..STAGE
    };

    #[test]
    fn stage_arguments() {
        let good = NodeStageVolumeRequest {
            volume_id: "v".into(),
            staging_target_path: "/s".into(),
            volume_capability: mount_cap(),
            ..Default::default()
        };
        assert_eq!(
            decide_stage(STAGE, &good).unwrap(),
            Stage {
                volume_id: "v".into(),
                staging: "/s".into(),
                block: false
            }
        );
        let cases: Vec<(Capabilities, NodeStageVolumeRequest, Code)> = vec![
            (NO_STAGE, good.clone(), Code::Unimplemented),
            (
                STAGE,
                NodeStageVolumeRequest {
                    volume_id: String::new(),
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                STAGE,
                NodeStageVolumeRequest {
                    staging_target_path: String::new(),
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                STAGE,
                NodeStageVolumeRequest {
                    volume_capability: None,
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                STAGE,
                NodeStageVolumeRequest {
                    volume_capability: Some(VolumeCapability {
                        access_type: None,
                        access_mode: None,
                    }),
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
        ];
        for (caps, req, code) in cases {
            assert_eq!(code_of(&decide_stage(caps, &req)), Some(code), "{req:?}");
        }
        let block = NodeStageVolumeRequest {
            volume_capability: block_cap(),
            ..good
        };
        assert!(decide_stage(STAGE, &block).unwrap().block);
    }

    #[test]
    fn publish_sources_and_refusals() {
        let base = NodePublishVolumeRequest {
            volume_id: "v".into(),
            staging_target_path: "/s".into(),
            target_path: "/t".into(),
            volume_capability: mount_cap(),
            ..Default::default()
        };
        let ephemeral = NodePublishVolumeRequest {
            staging_target_path: String::new(),
            volume_context: [(EPHEMERAL_KEY.to_string(), "true".to_string())].into(),
            ..base.clone()
        };
        let block = NodePublishVolumeRequest {
            volume_capability: block_cap(),
            ..base.clone()
        };
        let sources: Vec<(Capabilities, &NodePublishVolumeRequest, PublishSource)> = vec![
            (STAGE, &base, PublishSource::Staging("/s".into())),
            (NO_STAGE, &base, PublishSource::Backing),
            (STAGE, &ephemeral, PublishSource::Backing),
            (STAGE, &block, PublishSource::StagedDevice),
            (NO_STAGE, &block, PublishSource::OwnDevice),
        ];
        for (caps, req, want) in sources {
            assert_eq!(decide_publish(caps, req).unwrap().source, want, "{req:?}");
        }
        assert!(decide_publish(STAGE, &ephemeral).unwrap().ephemeral);

        let failing = NodePublishVolumeRequest {
            volume_context: [(FAIL_PUBLISH_KEY.to_string(), "yes".to_string())].into(),
            ..base.clone()
        };
        let refusals: Vec<(Capabilities, NodePublishVolumeRequest, Code)> = vec![
            (STAGE, failing, Code::Internal),
            (
                STAGE,
                NodePublishVolumeRequest {
                    staging_target_path: String::new(),
                    ..base.clone()
                },
                Code::InvalidArgument,
            ),
            (
                STAGE,
                NodePublishVolumeRequest {
                    target_path: String::new(),
                    ..base.clone()
                },
                Code::InvalidArgument,
            ),
            (
                STAGE,
                NodePublishVolumeRequest {
                    volume_id: String::new(),
                    ..base.clone()
                },
                Code::InvalidArgument,
            ),
            (
                STAGE,
                NodePublishVolumeRequest {
                    volume_capability: None,
                    ..base.clone()
                },
                Code::InvalidArgument,
            ),
            (
                STAGE,
                NodePublishVolumeRequest {
                    volume_capability: block_cap(),
                    ..ephemeral.clone()
                },
                Code::InvalidArgument,
            ),
        ];
        for (caps, req, code) in refusals {
            assert_eq!(code_of(&decide_publish(caps, &req)), Some(code), "{req:?}");
        }
        // Without the stage capability the staging path may be empty.
        let unstaged = NodePublishVolumeRequest {
            staging_target_path: String::new(),
            ..base
        };
        assert!(decide_publish(NO_STAGE, &unstaged).is_ok());
    }

    #[test]
    fn a_second_publish_must_match_the_first() {
        let rw = MountEntry {
            root: "/v".into(),
            mount_point: "/t".into(),
            read_only: false,
        };
        let ro = MountEntry {
            read_only: true,
            ..rw.clone()
        };
        assert!(republish(&rw, false).is_ok());
        assert!(republish(&ro, true).is_ok());
        assert_eq!(code_of(&republish(&rw, true)), Some(Code::AlreadyExists));
        assert_eq!(code_of(&republish(&ro, false)), Some(Code::AlreadyExists));
    }

    #[test]
    fn expansion_sizes() {
        let range = |required_bytes, limit_bytes| CapacityRange {
            required_bytes,
            limit_bytes,
        };
        let cases: Vec<(Option<CapacityRange>, u64, Result<u64, Code>)> = vec![
            (None, 100, Ok(100)),
            (Some(range(0, 0)), 100, Ok(100)),
            (Some(range(200, 0)), 100, Ok(200)),
            (Some(range(0, 300)), 100, Ok(300)),
            (Some(range(200, 300)), 100, Ok(200)),
            (Some(range(100, 0)), 100, Ok(100)),
            (Some(range(50, 0)), 100, Err(Code::OutOfRange)),
            (Some(range(-1, 0)), 100, Err(Code::InvalidArgument)),
        ];
        for (range, current, want) in cases {
            let got = expanded_size(range.as_ref(), current).map_err(|s| s.code());
            assert_eq!(got, want, "{range:?} from {current}");
        }
    }

    #[test]
    fn usage_reports_capacity_not_the_host_filesystem() {
        let got = usage(1000, Some(300), Some((50, 20, 18)));
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].total, got[0].used, got[0].available),
            (1000, 300, 700)
        );
        assert_eq!(got[0].unit, volume_usage::Unit::Bytes as i32);
        assert_eq!((got[1].total, got[1].used, got[1].available), (50, 30, 18));
        assert_eq!(got[1].unit, volume_usage::Unit::Inodes as i32);
        // More used than the capacity (the backing dir is not a quota): nothing available.
        let over = usage(100, Some(300), None);
        assert_eq!(
            (over[0].total, over[0].used, over[0].available),
            (100, 300, 0)
        );
        // A block volume: the size only.
        let block = usage(4096, None, None);
        assert_eq!(
            (block[0].total, block[0].used, block[0].available),
            (4096, 0, 0)
        );
    }

    #[test]
    fn capabilities_follow_the_flags() {
        use node_service_capability::rpc::Type;
        let kinds = |caps| -> Vec<i32> {
            capabilities(caps)
                .into_iter()
                .map(|c| match c.r#type {
                    Some(node_service_capability::Type::Rpc(rpc)) => rpc.r#type,
                    None => -1,
                })
                .collect()
        };
        assert_eq!(
            kinds(STAGE),
            [
                Type::StageUnstageVolume as i32,
                Type::GetVolumeStats as i32,
                Type::ExpandVolume as i32
            ]
        );
        assert_eq!(kinds(Capabilities::default()), Vec::<i32>::new());
        let condition = Capabilities {
            condition: true,
            ..Capabilities::default()
        };
        assert_eq!(kinds(condition), [Type::VolumeCondition as i32]);
    }
}
