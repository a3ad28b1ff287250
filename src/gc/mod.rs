//! Node garbage collection: unused images ([`images`]) and dead containers, dead sandboxes and
//! the directories of pods that are gone ([`containers`]), as the kubelet's image GC manager and
//! container GC do it. Each has pure selection functions (table-tested) and a small trait over
//! the runtime; [`CriGc`] implements both traits over the CRI. The composition root (`agent`)
//! runs both loops; the eviction manager's node-level reclaim calls
//! [`images::ImageGc::free_space`].

pub mod containers;
pub mod images;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;

use containers::ContainerGcRuntime;
use images::{FsSpace, ImageGcRuntime};

use crate::cri::{
    self, api, labels, ContainerState, HousekeepingRuntime, ImageService, PodRuntime, Runtime,
    RuntimeContainer, RuntimeSandbox, StatsRuntime,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Runtime {
        what: &'static str,
        #[source]
        source: cri::Error,
    },
    #[error("the runtime reported no image filesystem")]
    NoImageFs,
    #[error("statfs {path}: {source}")]
    Statfs {
        path: String,
        #[source]
        source: nix::Error,
    },
    /// The kubelet's message (`FreeDiskSpaceFailed`).
    #[error("Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {freed} bytes eligible to free.")]
    FreeDiskSpaceFailed {
        wanted: u64,
        freed: u64,
        /// Images removed on the way.
        removed: usize,
    },
}

fn runtime_error(what: &'static str) -> impl FnOnce(cri::Error) -> Error {
    move |source| Error::Runtime { what, source }
}

/// Both GC traits over the CRI.
pub struct CriGc {
    pub runtime: Arc<dyn Runtime>,
    pub images: Arc<dyn ImageService>,
    pub stats: Option<Arc<dyn StatsRuntime>>,
    pub housekeeping: Option<Arc<dyn HousekeepingRuntime>>,
    /// Only this node's pods are collected (`io.nodelet.node-name`).
    pub node_name: String,
}

/// The `sandboxImage` of containerd's CRI configuration (verbose `Status`, key `config`).
pub fn sandbox_image_from_info(info: &std::collections::HashMap<String, String>) -> Option<String> {
    let config: serde_json::Value = serde_json::from_str(info.get("config")?).ok()?;
    config
        .get("sandboxImage")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(String::from)
}

#[async_trait]
impl ImageGcRuntime for CriGc {
    async fn list_images(&self) -> Result<Vec<api::Image>, Error> {
        self.images
            .list_images()
            .await
            .map_err(runtime_error("listing images"))
    }

    async fn images_in_use(&self) -> Result<HashSet<String>, Error> {
        // Every container of the runtime, not only this node's: an image another CRI client
        // runs is in use too.
        let containers = self
            .runtime
            .list_containers(None)
            .await
            .map_err(runtime_error("listing containers"))?;
        let mut in_use: HashSet<String> = containers
            .into_iter()
            .flat_map(|c| {
                // The images its image volumes mount are in use as long as it exists, as
                // its own image is.
                let volumes: Vec<String> = c
                    .labels
                    .get(labels::IMAGE_VOLUMES)
                    .map(|v| labels::image_volumes_of(v).map(String::from).collect())
                    .unwrap_or_default();
                [c.image.map(|i| i.image).unwrap_or_default(), c.image_ref]
                    .into_iter()
                    .chain(volumes)
            })
            .filter(|s| !s.is_empty())
            .collect();
        if let Some(h) = &self.housekeeping {
            match h.runtime_info().await {
                Ok(info) => in_use.extend(sandbox_image_from_info(&info)),
                Err(e) => {
                    return Err(Error::Runtime {
                        what: "reading the runtime's sandbox image",
                        source: e,
                    })
                }
            }
        }
        Ok(in_use)
    }

    async fn remove_image(&self, id: &str) -> Result<(), Error> {
        self.images
            .remove_image(id)
            .await
            .map_err(runtime_error("removing an image"))
    }

    async fn image_fs_space(&self) -> Result<Option<FsSpace>, Error> {
        let Some(stats) = self.stats.as_ref() else {
            return Ok(None);
        };
        let info = stats
            .image_fs_info()
            .await
            .map_err(runtime_error("ImageFsInfo"))?;
        let mountpoint = info
            .image_filesystems
            .iter()
            .filter_map(|f| f.fs_id.as_ref())
            .map(|id| id.mountpoint.clone())
            .find(|m| !m.is_empty())
            .ok_or(Error::NoImageFs)?;
        let st =
            nix::sys::statvfs::statvfs(mountpoint.as_str()).map_err(|source| Error::Statfs {
                path: mountpoint.clone(),
                source,
            })?;
        let frag = st.fragment_size() as u64;
        Ok(Some(FsSpace {
            capacity: (st.blocks() as u64).saturating_mul(frag),
            available: (st.blocks_available() as u64).saturating_mul(frag),
        }))
    }
}

fn container_state(state: i32) -> ContainerState {
    match api::ContainerState::try_from(state) {
        Ok(api::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(api::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(api::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

/// This node's sandboxes and containers grouped by pod UID, from the two list calls alone.
pub fn group_pods(
    sandboxes: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
) -> Vec<PodRuntime> {
    let mut pods: BTreeMap<String, PodRuntime> = BTreeMap::new();
    let created =
        |nanos| cri::model::timestamp_from_nanos(nanos).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    for s in sandboxes {
        let Some(uid) = s.labels.get(labels::POD_UID).cloned() else {
            continue;
        };
        let pod = pods
            .entry(uid.clone())
            .or_insert_with(|| PodRuntime::empty(&uid));
        pod.sandboxes.push(RuntimeSandbox {
            id: s.id,
            attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
            ready: s.state == api::PodSandboxState::SandboxReady as i32,
            created_at: created(s.created_at),
            ips: Vec::new(),
            host_network: false,
        });
    }
    for c in containers {
        let Some(uid) = c.labels.get(labels::POD_UID).cloned() else {
            continue;
        };
        let pod = pods
            .entry(uid.clone())
            .or_insert_with(|| PodRuntime::empty(&uid));
        let name = c
            .labels
            .get(labels::CONTAINER_NAME)
            .cloned()
            .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
            .unwrap_or_default();
        pod.containers.push(RuntimeContainer {
            id: c.id,
            name,
            sandbox_id: c.pod_sandbox_id,
            state: container_state(c.state),
            attempt: c.metadata.as_ref().map_or(0, |m| m.attempt),
            created_at: created(c.created_at),
            restart_count: c
                .annotations
                .get(labels::CONTAINER_RESTART_COUNT)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            ..Default::default()
        });
    }
    pods.into_values()
        .map(|mut p| {
            p.sort();
            p
        })
        .collect()
}

#[async_trait]
impl ContainerGcRuntime for CriGc {
    async fn pods(&self) -> Result<Vec<PodRuntime>, Error> {
        let selector = cri::model::node_selector(&self.node_name);
        let sandboxes = self
            .runtime
            .list_pod_sandbox(Some(api::PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await
            .map_err(runtime_error("listing sandboxes"))?;
        let containers = self
            .runtime
            .list_containers(Some(api::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await
            .map_err(runtime_error("listing containers"))?;
        Ok(group_pods(sandboxes, containers))
    }

    async fn remove_container(&self, id: &str) -> Result<(), Error> {
        // The runtime leaves the log file behind; it goes with the container (and its rotated
        // files with it), as the kubelet's `removeContainerLog`.
        let log_path = match self.runtime.container_status(id).await {
            Ok(status) => Some(status.log_path).filter(|p| !p.is_empty()),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                return Err(Error::Runtime {
                    what: "reading a container's log path",
                    source: e,
                })
            }
        };
        match self.runtime.remove_container(id).await {
            Err(e) if !e.is_not_found() => {
                return Err(Error::Runtime {
                    what: "removing a container",
                    source: e,
                })
            }
            _ => {}
        }
        if let Some(log) = log_path {
            remove_log_files(std::path::Path::new(&log));
        }
        Ok(())
    }

    async fn remove_sandbox(&self, id: &str) -> Result<(), Error> {
        // StopPodSandbox first, as the CRI asks (it releases the network); both are idempotent.
        let _ = self.runtime.stop_pod_sandbox(id).await;
        match self.runtime.remove_pod_sandbox(id).await {
            Err(e) if !e.is_not_found() => Err(Error::Runtime {
                what: "removing a sandbox",
                source: e,
            }),
            _ => Ok(()),
        }
    }
}

/// Removes `log` and its rotated files (`log.*`).
fn remove_log_files(log: &std::path::Path) {
    let (Some(dir), Some(base)) = (log.parent(), log.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let prefix = format!("{base}.");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let names = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n == base || n.starts_with(&prefix));
    for name in names {
        let path = dir.join(name);
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), error = %e, "removing a container log");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_image_from_containerd_status() {
        let info = std::collections::HashMap::from([(
            "config".to_string(),
            r#"{"containerd":{},"sandboxImage":"localhost/pause:1","cni":{}}"#.to_string(),
        )]);
        assert_eq!(
            sandbox_image_from_info(&info).as_deref(),
            Some("localhost/pause:1")
        );
        assert_eq!(sandbox_image_from_info(&Default::default()), None);
        let broken = std::collections::HashMap::from([("config".to_string(), "{".to_string())]);
        assert_eq!(sandbox_image_from_info(&broken), None);
    }

    /// An image an image volume mounts is in use while a container that mounts it exists (the
    /// container's label), beside the container's own image; an image nothing names is not.
    #[tokio::test]
    async fn image_volume_images_are_in_use() {
        let fake = Arc::new(cri::fake::FakeRuntime::default());
        fake.add_image("localhost/testbox:1");
        let sandbox = fake
            .run_pod_sandbox(api::PodSandboxConfig::default(), "")
            .await
            .unwrap();
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: "localhost/testbox:1".into(),
                ..Default::default()
            }),
            labels: std::collections::HashMap::from([(
                labels::IMAGE_VOLUMES.to_string(),
                "sha256:vol1,sha256:vol2".to_string(),
            )]),
            ..Default::default()
        };
        fake.create_container(&sandbox, config, api::PodSandboxConfig::default())
            .await
            .unwrap();
        let gc = CriGc {
            runtime: fake.clone(),
            images: fake.clone(),
            stats: None,
            housekeeping: None,
            node_name: "n".into(),
        };
        let in_use = gc.images_in_use().await.unwrap();
        for image in ["localhost/testbox:1", "sha256:vol1", "sha256:vol2"] {
            assert!(in_use.contains(image), "{image} not in use: {in_use:?}");
        }
        let unused = api::Image {
            id: "sha256:other".into(),
            ..Default::default()
        };
        assert!(!images::image_in_use(&unused, &in_use));
        let volume = api::Image {
            id: "sha256:vol2".into(),
            ..Default::default()
        };
        assert!(images::image_in_use(&volume, &in_use));
    }

    #[test]
    fn group_pods_by_uid_label() {
        let labels = |uid: &str, name: &str| {
            std::collections::HashMap::from([
                (labels::POD_UID.to_string(), uid.to_string()),
                (labels::CONTAINER_NAME.to_string(), name.to_string()),
            ])
        };
        let sandboxes = vec![api::PodSandbox {
            id: "s1".into(),
            state: api::PodSandboxState::SandboxReady as i32,
            created_at: 5,
            labels: labels("u1", "POD"),
            ..Default::default()
        }];
        let containers = vec![
            api::Container {
                id: "c1".into(),
                pod_sandbox_id: "s1".into(),
                state: api::ContainerState::ContainerExited as i32,
                created_at: 10,
                labels: labels("u1", "app"),
                ..Default::default()
            },
            api::Container {
                id: "c2".into(),
                state: api::ContainerState::ContainerRunning as i32,
                created_at: 20,
                labels: labels("u2", "app"),
                ..Default::default()
            },
            api::Container {
                id: "foreign".into(),
                ..Default::default()
            },
        ];
        let pods = group_pods(sandboxes, containers);
        assert_eq!(pods.len(), 2);
        assert_eq!(pods[0].uid, "u1");
        assert!(pods[0].sandboxes[0].ready);
        assert_eq!(pods[0].containers[0].name, "app");
        assert_eq!(pods[0].containers[0].state, ContainerState::Exited);
        assert_eq!(pods[1].containers[0].state, ContainerState::Running);
    }
}
