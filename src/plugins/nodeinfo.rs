//! The node's record of its CSI drivers, as the kubelet's `nodeinfomanager` keeps it (cluster
//! mode): the `CSINode` named after the node (owned by the Node, with the migrated-plugins
//! annotation; a driver entry with its node ID, topology keys and allocatable count per
//! registered driver) and, on the Node, the `csi.volume.kubernetes.io/nodeid` annotation (a
//! JSON map driver → node ID) and the drivers' topology segments as labels.
//!
//! The edits are pure functions of the object read ([`install_driver`], [`uninstall_driver`],
//! [`node_install_patch`], [`node_uninstall_patch`], [`new_csinode`]); [`ApiNodeInfo`]
//! reads, edits and writes through the API server, retrying with backoff; [`NodeInfoWriter`]
//! is the seam the plugin manager writes through ([`NoNodeInfo`] standalone).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::PluginsError;

/// The Node annotation with the drivers' node IDs.
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";
/// The CSINode annotation naming the in-tree plugins migrated to CSI
/// (`v1.MigratedPluginsAnnotationKey`).
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// The in-tree plugins the v1.37 kubelet reports migrated (every migration is GA), sorted as
/// it joins them.
pub const MIGRATED_PLUGINS: [&str; 7] = [
    "kubernetes.io/aws-ebs",
    "kubernetes.io/azure-disk",
    "kubernetes.io/azure-file",
    "kubernetes.io/cinder",
    "kubernetes.io/gce-pd",
    "kubernetes.io/portworx-volume",
    "kubernetes.io/vsphere-volume",
];

/// What a registered driver contributes to the node's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverNodeInfo {
    pub name: String,
    pub node_id: String,
    pub max_volumes_per_node: i64,
    pub topology: BTreeMap<String, String>,
}

/// The CSINode the kubelet creates (`CreateCSINode`): named after the node, owned by it, no
/// drivers, the migrated-plugins annotation.
pub fn new_csinode(node_name: &str, node_uid: &str) -> CSINode {
    let mut csinode = CSINode {
        metadata: ObjectMeta {
            name: Some(node_name.to_string()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node_name.to_string(),
                uid: node_uid.to_string(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: CSINodeSpec { drivers: vec![] },
        ..CSINode::default()
    };
    set_migration_annotation(&mut csinode);
    csinode
}

/// Sets the migrated-plugins annotation to [`MIGRATED_PLUGINS`] (compared as a set, as the
/// kubelet's `setMigrationAnnotation`); true if it changed.
pub fn set_migration_annotation(csinode: &mut CSINode) -> bool {
    let annotations = csinode
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    let old: BTreeSet<&str> = annotations
        .get(MIGRATED_PLUGINS_ANNOTATION)
        .map(|v| v.split(',').filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let new: BTreeSet<&str> = MIGRATED_PLUGINS.iter().copied().collect();
    if old == new {
        return false;
    }
    annotations.insert(
        MIGRATED_PLUGINS_ANNOTATION.into(),
        MIGRATED_PLUGINS.join(","),
    );
    true
}

/// The driver entry of `driver` (`allocatable.count` only for a positive limit, at most
/// `i32::MAX`, as the kubelet's).
pub fn driver_entry(driver: &DriverNodeInfo) -> CSINodeDriver {
    let count = (driver.max_volumes_per_node > 0)
        .then(|| i32::try_from(driver.max_volumes_per_node).unwrap_or(i32::MAX));
    CSINodeDriver {
        name: driver.name.clone(),
        node_id: driver.node_id.clone(),
        topology_keys: Some(driver.topology.keys().cloned().collect()),
        allocatable: count.map(|c| VolumeNodeResources { count: Some(c) }),
    }
}

/// `csinode` with `driver`'s entry added or replaced (other drivers kept, in order; the new
/// entry last) and the migration annotation set; `None` when nothing changes
/// (`installDriverToCSINode`).
pub fn install_driver(csinode: &CSINode, driver: &DriverNodeInfo) -> Option<CSINode> {
    let entry = driver_entry(driver);
    let same = |d: &CSINodeDriver| {
        d.node_id == entry.node_id
            && d.topology_keys.iter().flatten().collect::<BTreeSet<_>>()
                == entry
                    .topology_keys
                    .iter()
                    .flatten()
                    .collect::<BTreeSet<_>>()
            && d.allocatable.as_ref().and_then(|a| a.count)
                == entry.allocatable.as_ref().and_then(|a| a.count)
    };
    let spec_unchanged = csinode
        .spec
        .drivers
        .iter()
        .any(|d| d.name == driver.name && same(d));
    let mut out = csinode.clone();
    let annotation_changed = set_migration_annotation(&mut out);
    if spec_unchanged && !annotation_changed {
        return None;
    }
    out.spec.drivers.retain(|d| d.name != driver.name);
    out.spec.drivers.push(entry);
    Some(out)
}

/// `csinode` without the entry of `name`; `None` when it has none.
pub fn uninstall_driver(csinode: &CSINode, name: &str) -> Option<CSINode> {
    if !csinode.spec.drivers.iter().any(|d| d.name == name) {
        return None;
    }
    let mut out = csinode.clone();
    out.spec.drivers.retain(|d| d.name != name);
    Some(out)
}

fn node_id_map(node: &Node) -> Result<BTreeMap<String, String>, String> {
    let Some(value) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_ID_ANNOTATION))
        .filter(|v| !v.is_empty())
    else {
        return Ok(BTreeMap::new());
    };
    serde_json::from_str(value).map_err(|e| {
        format!(
            "failed to parse node's {NODE_ID_ANNOTATION:?} annotation value ({value:?}) err={e}"
        )
    })
}

fn metadata_patch(
    node: &Node,
    annotations: Map<String, Value>,
    labels: Map<String, Value>,
) -> Value {
    let mut metadata = Map::new();
    // The resource version makes the patch fail with a conflict if the Node changed since it
    // was read (the node ID map was computed from what was read).
    if let Some(rv) = &node.metadata.resource_version {
        metadata.insert("resourceVersion".into(), json!(rv));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    json!({ "metadata": metadata })
}

/// The JSON merge patch that records `driver` on `node`: its node ID in the annotation and
/// its topology as labels. `None` when the Node already says so; `Err` (the kubelet's
/// messages) when the annotation cannot be read or a topology label has another value.
pub fn node_install_patch(node: &Node, driver: &DriverNodeInfo) -> Result<Option<Value>, String> {
    let mut ids = node_id_map(node)?;
    let mut annotations = Map::new();
    if ids.get(&driver.name) != Some(&driver.node_id) {
        ids.insert(driver.name.clone(), driver.node_id.clone());
        let text = serde_json::to_string(&ids).map_err(|e| e.to_string())?;
        annotations.insert(NODE_ID_ANNOTATION.into(), json!(text));
    }
    let existing = node.metadata.labels.clone().unwrap_or_default();
    let mut labels = Map::new();
    for (k, v) in &driver.topology {
        match existing.get(k) {
            Some(cur) if cur != v => {
                return Err(format!(
                    "detected topology value collision: driver reported {k:?}:{v:?} but existing label is {k:?}:{cur:?}"
                ));
            }
            Some(_) => {}
            None => {
                labels.insert(k.clone(), json!(v));
            }
        }
    }
    if annotations.is_empty() && labels.is_empty() {
        return Ok(None);
    }
    Ok(Some(metadata_patch(node, annotations, labels)))
}

/// The JSON merge patch that takes `driver` off `node`: its entry of the node ID annotation
/// (the annotation removed with its last entry) and each topology label it reported that still
/// has its value and that no driver still registered (`kept`: their topology keys) reports.
pub fn node_uninstall_patch(
    node: &Node,
    driver: &DriverNodeInfo,
    kept: &BTreeSet<String>,
) -> Result<Option<Value>, String> {
    let mut ids = node_id_map(node)?;
    let mut annotations = Map::new();
    if ids.remove(&driver.name).is_some() {
        let value = if ids.is_empty() {
            Value::Null
        } else {
            json!(serde_json::to_string(&ids).map_err(|e| e.to_string())?)
        };
        annotations.insert(NODE_ID_ANNOTATION.into(), value);
    }
    let existing = node.metadata.labels.clone().unwrap_or_default();
    let mut labels = Map::new();
    for (k, v) in &driver.topology {
        if existing.get(k) == Some(v) && !kept.contains(k) {
            labels.insert(k.clone(), Value::Null);
        }
    }
    if annotations.is_empty() && labels.is_empty() {
        return Ok(None);
    }
    Ok(Some(metadata_patch(node, annotations, labels)))
}

/// Where the plugin manager records what drivers registered.
#[async_trait]
pub trait NodeInfoWriter: Send + Sync {
    /// Records `driver` on the node (Node first, then CSINode, as the kubelet).
    async fn install(&self, driver: &DriverNodeInfo) -> Result<(), PluginsError>;
    /// Takes `driver` off the node; `kept`: the topology keys of the drivers still registered.
    async fn uninstall(
        &self,
        driver: &DriverNodeInfo,
        kept: &BTreeSet<String>,
    ) -> Result<(), PluginsError>;
}

/// Standalone: the drivers live in the store only; nothing is written.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoNodeInfo;

#[async_trait]
impl NodeInfoWriter for NoNodeInfo {
    async fn install(&self, _: &DriverNodeInfo) -> Result<(), PluginsError> {
        Ok(())
    }
    async fn uninstall(
        &self,
        _: &DriverNodeInfo,
        _: &BTreeSet<String>,
    ) -> Result<(), PluginsError> {
        Ok(())
    }
}

/// Attempts of one write before the registration is reported failed (and retried whole).
const WRITE_ATTEMPTS: u32 = 5;

fn write_backoff(attempt: u32) -> Duration {
    crate::backoff::exponential(Duration::from_millis(100), attempt, Duration::from_secs(5))
}

/// The node's record through the API server.
#[derive(Clone)]
pub struct ApiNodeInfo {
    nodes: Api<Node>,
    csinodes: Api<CSINode>,
    node_name: String,
    timeout: Duration,
}

impl ApiNodeInfo {
    pub fn new(client: kube::Client, node_name: &str, timeout: Duration) -> ApiNodeInfo {
        ApiNodeInfo {
            nodes: Api::all(client.clone()),
            csinodes: Api::all(client),
            node_name: node_name.to_string(),
            timeout,
        }
    }

    async fn call<T>(
        &self,
        context: impl Fn() -> String,
        request: impl std::future::Future<Output = kube::Result<T>>,
    ) -> Result<T, PluginsError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(kube::Error::Api(status))) => Err(PluginsError::Api {
                context: context(),
                code: Some(status.code),
                message: status.message.clone(),
            }),
            Ok(Err(e)) => Err(PluginsError::Api {
                context: context(),
                code: None,
                message: e.to_string(),
            }),
            Err(_) => Err(PluginsError::Api {
                context: context(),
                code: None,
                message: format!("no answer within {:?}", self.timeout),
            }),
        }
    }

    async fn get_node(&self) -> Result<Node, PluginsError> {
        self.call(
            || format!("getting node {:?}", self.node_name),
            self.nodes.get(&self.node_name),
        )
        .await
    }

    /// The CSINode, `None` when there is none.
    async fn get_csinode(&self) -> Result<Option<CSINode>, PluginsError> {
        match self
            .call(
                || format!("getting CSINode {:?}", self.node_name),
                self.csinodes.get(&self.node_name),
            )
            .await
        {
            Ok(c) => Ok(Some(c)),
            Err(e) if e.code() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `CreateCSINode`: owned by the Node, so the Node must exist.
    async fn create_csinode(&self) -> Result<CSINode, PluginsError> {
        let node = self.get_node().await?;
        let uid = node.metadata.uid.clone().unwrap_or_default();
        self.call(
            || format!("creating CSINode {:?}", self.node_name),
            self.csinodes
                .create(&PostParams::default(), &new_csinode(&self.node_name, &uid)),
        )
        .await
    }

    async fn patch_node(&self, patch: Value) -> Result<(), PluginsError> {
        self.call(
            || format!("patching node {:?}", self.node_name),
            self.nodes.patch(
                &self.node_name,
                &PatchParams::default(),
                &Patch::Merge(patch),
            ),
        )
        .await
        .map(|_| ())
    }

    async fn replace_csinode(&self, csinode: &CSINode) -> Result<(), PluginsError> {
        self.call(
            || format!("updating CSINode {:?}", self.node_name),
            self.csinodes
                .replace(&self.node_name, &PostParams::default(), csinode),
        )
        .await
        .map(|_| ())
    }

    /// `InitializeCSINodeWithAnnotation`: the CSINode created when missing, its annotation
    /// set when not. Retried until it works (the Node may not be registered yet) or `cancel`.
    pub async fn initialize(&self, cancel: &CancellationToken) {
        let mut attempt = 0;
        loop {
            let result = async {
                match self.get_csinode().await? {
                    None => self.create_csinode().await.map(|_| ()),
                    Some(mut csinode) => {
                        if set_migration_annotation(&mut csinode) {
                            self.replace_csinode(&csinode).await?;
                        }
                        Ok(())
                    }
                }
            };
            let result = tokio::select! {
                r = result => r,
                _ = cancel.cancelled() => return,
            };
            match result {
                Ok(()) => {
                    tracing::info!(node = %self.node_name, "CSINode initialized");
                    return;
                }
                Err(error) => {
                    tracing::info!(node = %self.node_name, %error, "failed to initialize CSINode; retrying");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(crate::backoff::exponential(Duration::from_millis(200), attempt, Duration::from_secs(7))) => {}
                _ = cancel.cancelled() => return,
            }
            attempt += 1;
        }
    }

    async fn try_install_node(&self, driver: &DriverNodeInfo) -> Result<(), PluginsError> {
        let node = self.get_node().await?;
        match node_install_patch(&node, driver).map_err(PluginsError::Refused)? {
            Some(patch) => self.patch_node(patch).await,
            None => Ok(()),
        }
    }

    async fn try_install_csinode(&self, driver: &DriverNodeInfo) -> Result<(), PluginsError> {
        let csinode = match self.get_csinode().await? {
            Some(c) => c,
            None => self.create_csinode().await?,
        };
        match install_driver(&csinode, driver) {
            Some(updated) => self.replace_csinode(&updated).await,
            None => Ok(()),
        }
    }

    async fn try_uninstall_csinode(&self, name: &str) -> Result<(), PluginsError> {
        let Some(csinode) = self.get_csinode().await? else {
            return Ok(());
        };
        match uninstall_driver(&csinode, name) {
            Some(updated) => self.replace_csinode(&updated).await,
            None => Ok(()),
        }
    }

    async fn try_uninstall_node(
        &self,
        driver: &DriverNodeInfo,
        kept: &BTreeSet<String>,
    ) -> Result<(), PluginsError> {
        let node = self.get_node().await?;
        match node_uninstall_patch(&node, driver, kept).map_err(PluginsError::Refused)? {
            Some(patch) => self.patch_node(patch).await,
            None => Ok(()),
        }
    }
}

/// Runs `attempt` until it works, at most [`WRITE_ATTEMPTS`] times with backoff between;
/// a refusal (a topology collision, an unreadable annotation) is not retried.
async fn retried<F, Fut>(what: &str, mut attempt: F) -> Result<(), PluginsError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), PluginsError>>,
{
    let mut last = None;
    for n in 0..WRITE_ATTEMPTS {
        match attempt().await {
            Ok(()) => return Ok(()),
            Err(e @ PluginsError::Refused(_)) => return Err(e),
            Err(e) => {
                tracing::debug!(what, error = %e, attempt = n, "node info write failed");
                last = Some(e);
            }
        }
        if n + 1 < WRITE_ATTEMPTS {
            tokio::time::sleep(write_backoff(n)).await;
        }
    }
    Err(last.unwrap_or_else(|| PluginsError::Refused(format!("{what}: no attempt made"))))
}

#[async_trait]
impl NodeInfoWriter for ApiNodeInfo {
    async fn install(&self, driver: &DriverNodeInfo) -> Result<(), PluginsError> {
        if driver.node_id.is_empty() {
            return Err(PluginsError::Refused(
                "error adding CSI driver node info: driverNodeID must not be empty".into(),
            ));
        }
        retried("node", || self.try_install_node(driver))
            .await
            .map_err(|e| e.context("error updating Node object with CSI driver node info"))?;
        retried("CSINode", || self.try_install_csinode(driver))
            .await
            .map_err(|e| e.context("error updating CSINode object with CSI driver node info"))
    }

    async fn uninstall(
        &self,
        driver: &DriverNodeInfo,
        kept: &BTreeSet<String>,
    ) -> Result<(), PluginsError> {
        retried("CSINode", || self.try_uninstall_csinode(&driver.name))
            .await
            .map_err(|e| e.context("error uninstalling CSI driver from CSINode object"))?;
        retried("node", || self.try_uninstall_node(driver, kept))
            .await
            .map_err(|e| e.context("error removing CSI driver node info from Node object"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(name: &str, id: &str, max: i64, topology: &[(&str, &str)]) -> DriverNodeInfo {
        DriverNodeInfo {
            name: name.into(),
            node_id: id.into(),
            max_volumes_per_node: max,
            topology: topology
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn csinode(drivers: Vec<CSINodeDriver>) -> CSINode {
        let mut c = new_csinode("n1", "uid-1");
        c.spec.drivers = drivers;
        c
    }

    fn node(annotation: Option<&str>, labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                resource_version: Some("7".into()),
                annotations: annotation
                    .map(|a| BTreeMap::from([(NODE_ID_ANNOTATION.to_string(), a.to_string())])),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    #[test]
    fn a_new_csinode_is_owned_by_the_node_and_names_the_migrated_plugins() {
        let c = new_csinode("n1", "uid-1");
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {
                    "name": "n1",
                    "annotations": {
                        "storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"
                    },
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}]
                },
                "spec": {"drivers": []}
            })
        );
    }

    #[test]
    fn the_migration_annotation_compares_as_a_set() {
        for (what, value, changed) in [
            ("missing", None, true),
            ("the same, other order", Some("kubernetes.io/gce-pd,kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"), false),
            ("one missing", Some("kubernetes.io/aws-ebs"), true),
            ("empty", Some(""), true),
        ] {
            let mut c = CSINode::default();
            if let Some(v) = value {
                c.metadata.annotations = Some(BTreeMap::from([(MIGRATED_PLUGINS_ANNOTATION.to_string(), v.to_string())]));
            }
            assert_eq!(set_migration_annotation(&mut c), changed, "{what}");
            assert!(!set_migration_annotation(&mut c), "{what}: settled");
        }
    }

    #[test]
    fn driver_entries_are_installed_and_uninstalled_as_the_kubelets() {
        let d = driver(
            "d.example.com",
            "node-a",
            12,
            &[("topology.d.example.com/zone", "z1")],
        );
        let entry = driver_entry(&d);
        assert_eq!(
            serde_json::to_value(&entry).unwrap(),
            json!({"name": "d.example.com", "nodeID": "node-a", "topologyKeys": ["topology.d.example.com/zone"], "allocatable": {"count": 12}})
        );
        let other = driver_entry(&driver("o.example.com", "o", 0, &[]));
        assert_eq!(
            serde_json::to_value(&other).unwrap(),
            json!({"name": "o.example.com", "nodeID": "o", "topologyKeys": []}),
            "no limit: no allocatable"
        );
        let huge = driver_entry(&driver("h", "h", i64::MAX, &[]));
        assert_eq!(huge.allocatable.and_then(|a| a.count), Some(i32::MAX));
        let negative = driver_entry(&driver("h", "h", -3, &[]));
        assert_eq!(negative.allocatable, None);

        let cases = [
            (
                "added",
                csinode(vec![other.clone()]),
                Some(vec![other.clone(), entry.clone()]),
            ),
            (
                "already there",
                csinode(vec![entry.clone(), other.clone()]),
                None,
            ),
            (
                "another node ID: replaced, last",
                csinode(vec![
                    driver_entry(&driver(
                        "d.example.com",
                        "old",
                        12,
                        &[("topology.d.example.com/zone", "z1")],
                    )),
                    other.clone(),
                ]),
                Some(vec![other.clone(), entry.clone()]),
            ),
            (
                "another count",
                csinode(vec![driver_entry(&driver(
                    "d.example.com",
                    "node-a",
                    3,
                    &[("topology.d.example.com/zone", "z1")],
                ))]),
                Some(vec![entry.clone()]),
            ),
            (
                "other topology keys",
                csinode(vec![driver_entry(&driver(
                    "d.example.com",
                    "node-a",
                    12,
                    &[],
                ))]),
                Some(vec![entry.clone()]),
            ),
        ];
        for (what, before, want) in cases {
            let got = install_driver(&before, &d).map(|c| c.spec.drivers);
            assert_eq!(got, want, "{what}");
        }
        let mut without_annotation = csinode(vec![entry.clone()]);
        without_annotation.metadata.annotations = None;
        let fixed = install_driver(&without_annotation, &d).expect("the annotation is set");
        assert_eq!(fixed.spec.drivers, vec![entry.clone()]);

        assert_eq!(
            uninstall_driver(
                &csinode(vec![entry.clone(), other.clone()]),
                "d.example.com"
            )
            .map(|c| c.spec.drivers),
            Some(vec![other.clone()])
        );
        assert_eq!(
            uninstall_driver(&csinode(vec![other.clone()]), "d.example.com"),
            None
        );
    }

    #[test]
    fn the_node_gets_the_node_id_annotation_and_topology_labels() {
        let d = driver(
            "d.example.com",
            "node-a",
            0,
            &[("topology.d.example.com/zone", "z1")],
        );
        let cases = [
            (
                "a first driver",
                node(None, &[]),
                Ok(Some(json!({"metadata": {"resourceVersion": "7",
                    "annotations": {NODE_ID_ANNOTATION: "{\"d.example.com\":\"node-a\"}"},
                    "labels": {"topology.d.example.com/zone": "z1"}}}))),
            ),
            (
                "beside another driver (keys sorted, as Go's json.Marshal)",
                node(Some("{\"z.example.com\":\"z\"}"), &[("topology.d.example.com/zone", "z1")]),
                Ok(Some(json!({"metadata": {"resourceVersion": "7",
                    "annotations": {NODE_ID_ANNOTATION: "{\"d.example.com\":\"node-a\",\"z.example.com\":\"z\"}"}}}))),
            ),
            (
                "already recorded",
                node(Some("{\"d.example.com\":\"node-a\"}"), &[("topology.d.example.com/zone", "z1")]),
                Ok(None),
            ),
            (
                "a topology collision",
                node(None, &[("topology.d.example.com/zone", "z2")]),
                Err("detected topology value collision: driver reported \"topology.d.example.com/zone\":\"z1\" but existing label is \"topology.d.example.com/zone\":\"z2\"".to_string()),
            ),
            (
                "an unreadable annotation",
                node(Some("not json"), &[]),
                Err("failed to parse node's \"csi.volume.kubernetes.io/nodeid\" annotation value (\"not json\") err=expected ident at line 1 column 2".to_string()),
            ),
        ];
        for (what, before, want) in cases {
            assert_eq!(node_install_patch(&before, &d), want, "{what}");
        }
    }

    #[test]
    fn the_node_loses_the_drivers_entry_and_the_labels_no_other_driver_reports() {
        let d = driver(
            "d.example.com",
            "node-a",
            0,
            &[("topology.d.example.com/zone", "z1"), ("shared/rack", "r1")],
        );
        let kept_shared = BTreeSet::from(["shared/rack".to_string()]);
        let none = BTreeSet::new();
        let cases = [
            (
                "the last driver: the annotation goes",
                node(
                    Some("{\"d.example.com\":\"node-a\"}"),
                    &[("topology.d.example.com/zone", "z1"), ("shared/rack", "r1")],
                ),
                &none,
                Ok(Some(json!({"metadata": {"resourceVersion": "7",
                    "annotations": {NODE_ID_ANNOTATION: null},
                    "labels": {"topology.d.example.com/zone": null, "shared/rack": null}}}))),
            ),
            (
                "another driver stays, and still reports a key",
                node(
                    Some("{\"d.example.com\":\"node-a\",\"z.example.com\":\"z\"}"),
                    &[("topology.d.example.com/zone", "z1"), ("shared/rack", "r1")],
                ),
                &kept_shared,
                Ok(Some(json!({"metadata": {"resourceVersion": "7",
                    "annotations": {NODE_ID_ANNOTATION: "{\"z.example.com\":\"z\"}"},
                    "labels": {"topology.d.example.com/zone": null}}}))),
            ),
            (
                "a label changed since: left alone",
                node(
                    Some("{\"d.example.com\":\"node-a\"}"),
                    &[
                        ("topology.d.example.com/zone", "other"),
                        ("shared/rack", "r1"),
                    ],
                ),
                &none,
                Ok(Some(json!({"metadata": {"resourceVersion": "7",
                    "annotations": {NODE_ID_ANNOTATION: null},
                    "labels": {"shared/rack": null}}}))),
            ),
            ("nothing recorded", node(None, &[]), &none, Ok(None)),
        ];
        for (what, before, kept, want) in cases {
            assert_eq!(node_uninstall_patch(&before, &d, kept), want, "{what}");
        }
    }
}
