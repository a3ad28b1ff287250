//! Mirror pods (cluster mode): for every static pod, a read-only copy in the API server so the
//! cluster can see it — annotation `kubernetes.io/config.mirror` (the static pod's config hash)
//! and an ownerReference to this Node with `controller: true`, as the kubelet creates them.
//! Deleting a mirror pod through the API does not stop its static pod: nodelet deletes the
//! marked copy at once and creates a fresh one. Removing the manifest deletes the mirror pod.
//!
//! A write the API server refuses (NodeRestriction forbids a mirror pod that names a
//! ServiceAccount, a Secret or a ConfigMap: 403) is tried again after a backoff per pod — 10 s,
//! doubling to 5 minutes — never on every pass; the static pod runs meanwhile, as with the
//! kubelet, which logs the failure and tries again on a later sync. A pass that has nothing due
//! makes no request at all (the Node is read only when a mirror pod is to be created, for the
//! ownerReference's UID).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::clock::Clock;
use crate::podspec::{annotation, is_mirror_pod, MIRROR_ANNOTATION};
use crate::source::CONFIG_HASH_ANNOTATION;

/// How often mirror pods are reconciled even when nothing was noticed.
const RECONCILE: Duration = Duration::from_secs(2);
/// The first wait before a refused or failed mirror write is tried again, and the longest.
const RETRY_INITIAL: Duration = Duration::from_secs(10);
const RETRY_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, PartialEq)]
pub enum MirrorAction {
    Create(Box<Pod>),
    /// Delete the mirror pod (namespace, name, uid) with grace 0.
    Delete {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// The hash of a static pod's manifest, which its current mirror pod carries in
/// `kubernetes.io/config.mirror` (its UID is that hash when the annotation is missing).
fn manifest_hash(static_pod: &Pod) -> Option<&str> {
    annotation(static_pod, CONFIG_HASH_ANNOTATION).or(static_pod.metadata.uid.as_deref())
}

fn key(p: &Pod) -> (String, String) {
    (
        p.metadata.namespace.clone().unwrap_or_default(),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

fn delete_of(p: &Pod) -> MirrorAction {
    let (namespace, name) = key(p);
    MirrorAction::Delete {
        namespace,
        name,
        uid: p.metadata.uid.clone().unwrap_or_default(),
    }
}

/// The mirror pod of a static pod on `node`.
pub fn mirror_pod(static_pod: &Pod, node: &Node) -> Pod {
    let mut annotations = static_pod.metadata.annotations.clone().unwrap_or_default();
    let hash = annotation(static_pod, CONFIG_HASH_ANNOTATION)
        .map(str::to_string)
        .or_else(|| static_pod.metadata.uid.clone())
        .unwrap_or_default();
    annotations.insert(MIRROR_ANNOTATION.to_string(), hash);
    Pod {
        metadata: ObjectMeta {
            name: static_pod.metadata.name.clone(),
            namespace: static_pod.metadata.namespace.clone(),
            labels: static_pod.metadata.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.metadata.name.clone().unwrap_or_default(),
                uid: node.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: static_pod.spec.clone(),
        status: None,
    }
}

/// What to do so every static pod has exactly one current mirror pod and nothing else does.
/// Mirror pods being deleted, or made from an older manifest, are deleted (a new one is
/// created on a later pass, once the old one is gone).
pub fn mirror_actions(
    static_pods: &[Pod],
    mirrors: &[Pod],
    node: &Node,
    still_running: &dyn Fn(&str) -> bool,
) -> Vec<MirrorAction> {
    let by_key: BTreeMap<(String, String), &Pod> = mirrors.iter().map(|m| (key(m), m)).collect();
    // The static pod a mirror pod was made for (its UID is the config hash the mirror carries)
    // is still on the node, terminating: the mirror pod stays until it is gone, as the kubelet
    // deletes an orphaned or outdated mirror pod only once its static pod stopped terminating.
    let terminating = |m: &Pod| annotation(m, MIRROR_ANNOTATION).is_some_and(still_running);
    let mut actions = Vec::new();
    let mut wanted = std::collections::BTreeSet::new();
    for s in static_pods {
        let k = key(s);
        wanted.insert(k.clone());
        let hash = manifest_hash(s);
        match by_key.get(&k) {
            None => actions.push(MirrorAction::Create(Box::new(mirror_pod(s, node)))),
            Some(m) if m.metadata.deletion_timestamp.is_some() => actions.push(delete_of(m)),
            Some(m) if annotation(m, MIRROR_ANNOTATION) != hash && !terminating(m) => {
                actions.push(delete_of(m))
            }
            Some(_) => {}
        }
    }
    for m in mirrors {
        if !wanted.contains(&key(m)) && !terminating(m) {
            actions.push(delete_of(m));
        }
    }
    actions
}

/// The key of an action in the retry backoff: its kind and the pod's namespace/name.
fn retry_key(action: &MirrorAction) -> String {
    match action {
        MirrorAction::Create(pod) => {
            let (ns, name) = key(pod);
            format!("create {ns}/{name}")
        }
        MirrorAction::Delete {
            namespace, name, ..
        } => format!("delete {namespace}/{name}"),
    }
}

/// The actions whose last failure (if any) is far enough behind: the others wait for their
/// backoff.
pub fn due_actions(
    actions: Vec<MirrorAction>,
    retry: &Backoff,
    now: jiff::Timestamp,
) -> Vec<MirrorAction> {
    actions
        .into_iter()
        .filter(|a| retry.remaining_since_update(&retry_key(a), now).is_none())
        .collect()
}

pub struct MirrorPods {
    client: Client,
    node_name: String,
    store: Store<Pod>,
    clock: Clock,
    /// Writes that failed, per [`retry_key`].
    retry: Backoff,
    /// Whether the pod of this UID still has a worker on the node (running or terminating).
    still_running: StillRunning,
}

/// Whether the pod of a UID still has a worker on the node: the pod workers' registry.
pub type StillRunning = std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>;

impl MirrorPods {
    pub fn new(
        client: Client,
        node_name: String,
        store: Store<Pod>,
        clock: Clock,
        still_running: StillRunning,
    ) -> Self {
        MirrorPods {
            client,
            node_name,
            store,
            clock,
            retry: Backoff::new(RETRY_INITIAL, RETRY_MAX),
            still_running,
        }
    }

    async fn reconcile(&mut self, static_pods: &[Pod]) {
        let mirrors: Vec<Pod> = self
            .store
            .state()
            .iter()
            .filter(|p| is_mirror_pod(p))
            .map(|p| (**p).clone())
            .collect();
        let now = self.clock.now();
        self.retry.gc(now);
        // Planned against this node's name alone: what is due decides whether the Node (its
        // UID, for the ownerReference) must be read at all.
        let unread = Node {
            metadata: ObjectMeta {
                name: Some(self.node_name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let due = due_actions(
            mirror_actions(static_pods, &mirrors, &unread, &*self.still_running),
            &self.retry,
            now,
        );
        if due.is_empty() {
            return;
        }
        let due = if due.iter().any(|a| matches!(a, MirrorAction::Create(_))) {
            let nodes: Api<Node> = Api::all(self.client.clone());
            let node = match nodes.get_opt(&self.node_name).await {
                Ok(Some(n)) => n,
                // Not registered yet: try again on the next pass.
                Ok(None) => return,
                // Refused or away: the creates wait for their backoff as if they had failed.
                Err(e) => {
                    for action in due.iter().filter(|a| matches!(a, MirrorAction::Create(_))) {
                        self.retry.next(&retry_key(action), now);
                    }
                    tracing::warn!(error = %e, "reading the Node for mirror pods; trying again after the backoff");
                    return;
                }
            };
            due_actions(
                mirror_actions(static_pods, &mirrors, &node, &*self.still_running),
                &self.retry,
                now,
            )
        } else {
            due
        };
        for action in due {
            let retry_key = retry_key(&action);
            match self.write(action).await {
                Ok(()) => self.retry.reset(&retry_key),
                Err(e) => {
                    self.retry.next(&retry_key, now);
                    let retry_in = self.retry.get(&retry_key);
                    tracing::warn!(action = %retry_key, error = %e, ?retry_in, "mirror pod write failed; trying again after the backoff");
                }
            }
        }
    }

    /// Sends one action. A conflict or a pod already gone is success: what the action wanted
    /// holds (or the next pass sees the new state).
    async fn write(&self, action: MirrorAction) -> Result<(), kube::Error> {
        match action {
            MirrorAction::Create(pod) => {
                let (ns, name) = key(&pod);
                let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
                match api.create(&PostParams::default(), &pod).await {
                    Ok(_) => {
                        tracing::info!(pod.namespace = %ns, pod.name = %name, "created mirror pod");
                        Ok(())
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
            MirrorAction::Delete {
                namespace,
                name,
                uid,
            } => {
                let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(kube::api::Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match api.delete(&name, &params).await {
                    Ok(_) => {
                        tracing::info!(pod.namespace = %namespace, pod.name = %name, "deleted mirror pod");
                        Ok(())
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Reconciles whenever the static pods change and every couple of seconds (which catches a
    /// mirror pod deleted through the API) until cancelled.
    pub async fn run(
        mut self,
        mut static_pods: watch::Receiver<Vec<Pod>>,
        cancel: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(RECONCILE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = static_pods.changed() => if changed.is_err() { return },
                _ = tick.tick() => {}
            }
            let current = static_pods.borrow_and_update().clone();
            self.reconcile(&current).await;
        }
    }
}

/// The status of `static_pod`'s mirror among `pods` (the API server's pods of this node): the
/// pod of the same namespace and name marked as the mirror of this very manifest (its
/// `kubernetes.io/config.mirror` is the static pod's config hash, the kubelet's
/// `IsMirrorPodOf`); a mirror of an older manifest says nothing of today's containers.
pub fn mirror_status<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    static_pod: &Pod,
) -> Option<k8s_openapi::api::core::v1::PodStatus> {
    let hash = manifest_hash(static_pod)?;
    let wanted = key(static_pod);
    pods.into_iter()
        .find(|p| key(p) == wanted && annotation(p, MIRROR_ANNOTATION) == Some(hash))?
        .status
        .clone()
}

/// How long the first sync of an adopted static pod waits for the API server's pods to be
/// listed: a start lists them within moments; a server that is away holds nothing back longer.
pub const REPORTED_STATUS_WAIT: Duration = Duration::from_secs(5);

/// The mirror pods in the API source's reflector, as the status a static pod last had.
pub struct MirrorStatuses {
    store: Store<Pod>,
}

impl MirrorStatuses {
    pub fn new(store: Store<Pod>) -> Self {
        MirrorStatuses { store }
    }
}

#[async_trait::async_trait]
impl crate::sync::executor::ReportedStatuses for MirrorStatuses {
    async fn reported_status(
        &self,
        static_pod: &Pod,
    ) -> Option<k8s_openapi::api::core::v1::PodStatus> {
        if tokio::time::timeout(REPORTED_STATUS_WAIT, self.store.wait_until_ready())
            .await
            .is_err()
        {
            tracing::debug!("the API server's pods are not listed yet: no reported status");
        }
        let pods = self.store.state();
        mirror_status(pods.iter().map(|p| &**p), static_pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_of_this_manifest_gives_the_status() {
        use k8s_openapi::api::core::v1::PodStatus;
        let with_status = |mut p: Pod, phase: &str| {
            p.status = Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            p
        };
        let pod = static_pod("web-n1", "abc");
        let current = with_status(mirror("web-n1", "abc", "m1", false), "Running");
        let older = with_status(mirror("web-n1", "old", "m0", false), "Pending");
        let other = with_status(mirror("db-n1", "abc", "m2", false), "Failed");
        let plain = with_status(static_pod("web-n1", "abc"), "Succeeded");
        let phase = |pods: Vec<&Pod>| mirror_status(pods, &pod).and_then(|s| s.phase);
        assert_eq!(
            phase(vec![&older, &other, &current, &plain]),
            Some("Running".into())
        );
        assert_eq!(
            phase(vec![&older, &other, &plain]),
            None,
            "no mirror of this manifest"
        );
        assert_eq!(phase(vec![]), None);
    }

    fn static_pod(name: &str, hash: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(hash.into()),
                labels: Some([("app".to_string(), name.to_string())].into()),
                annotations: Some(
                    [
                        (CONFIG_HASH_ANNOTATION.to_string(), hash.to_string()),
                        (
                            "kubernetes.io/config.source".to_string(),
                            "file".to_string(),
                        ),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(Default::default()),
            ..Default::default()
        }
    }

    fn node() -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                uid: Some("node-uid".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn mirror(name: &str, hash: &str, uid: &str, deleting: bool) -> Pod {
        let mut m = mirror_pod(&static_pod(name, hash), &node());
        m.metadata.uid = Some(uid.into());
        if deleting {
            m.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        m
    }

    #[test]
    fn mirror_pod_shape() {
        let m = mirror_pod(&static_pod("web-n1", "abc"), &node());
        let ann = m.metadata.annotations.clone().unwrap();
        assert_eq!(ann.get(MIRROR_ANNOTATION).map(String::as_str), Some("abc"));
        let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str(),
                owner.controller
            ),
            ("Node", "n1", "node-uid", Some(true))
        );
        assert_eq!(
            m.metadata.labels.unwrap().get("app").map(String::as_str),
            Some("web-n1")
        );
        assert!(m.metadata.uid.is_none());
    }

    #[test]
    fn actions_table() {
        let del = |name: &str, uid: &str| MirrorAction::Delete {
            namespace: "default".into(),
            name: name.into(),
            uid: uid.into(),
        };
        type Case = (&'static str, Vec<Pod>, Vec<Pod>, Vec<MirrorAction>);
        let cases: Vec<Case> = vec![
            (
                "missing mirror is created",
                vec![static_pod("a", "h1")],
                vec![],
                vec![MirrorAction::Create(Box::new(mirror_pod(
                    &static_pod("a", "h1"),
                    &node(),
                )))],
            ),
            (
                "current mirror is kept",
                vec![static_pod("a", "h1")],
                vec![mirror("a", "h1", "m1", false)],
                vec![],
            ),
            (
                "mirror being deleted is deleted now",
                vec![static_pod("a", "h1")],
                vec![mirror("a", "h1", "m1", true)],
                vec![del("a", "m1")],
            ),
            (
                "stale mirror (edited manifest) is deleted",
                vec![static_pod("a", "h2")],
                vec![mirror("a", "h1", "m1", false)],
                vec![del("a", "m1")],
            ),
            (
                "orphan mirror is deleted",
                vec![],
                vec![mirror("b", "h1", "m2", false)],
                vec![del("b", "m2")],
            ),
            (
                "orphan mirror of a static pod still terminating is kept",
                vec![],
                vec![mirror("b", "old", "m2", false)],
                vec![],
            ),
            (
                "stale mirror of a static pod still terminating is kept",
                vec![static_pod("a", "h2")],
                vec![mirror("a", "old", "m1", false)],
                vec![],
            ),
            (
                "a mirror deleted through the API goes even while its pod terminates",
                vec![static_pod("a", "old")],
                vec![mirror("a", "old", "m1", true)],
                vec![del("a", "m1")],
            ),
        ];
        // The static pod of hash `old` is still terminating on the node.
        let still_running = |uid: &str| uid == "old";
        for (name, statics, mirrors, want) in cases {
            assert_eq!(
                mirror_actions(&statics, &mirrors, &node(), &still_running),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn refused_writes_wait_for_their_backoff() {
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let at = |secs: i64| t0 + jiff::SignedDuration::from_secs(secs);
        let create = MirrorAction::Create(Box::new(mirror_pod(&static_pod("a", "h1"), &node())));
        let delete = MirrorAction::Delete {
            namespace: "default".into(),
            name: "b".into(),
            uid: "m2".into(),
        };
        let both = || vec![create.clone(), delete.clone()];
        let mut retry = Backoff::new(RETRY_INITIAL, RETRY_MAX);
        // (what happened before, when it is asked, what is due)
        assert_eq!(
            due_actions(both(), &retry, at(0)),
            both(),
            "nothing failed yet"
        );
        retry.next(&retry_key(&create), at(0));
        let cases = [
            (
                at(1),
                vec![delete.clone()],
                "refused 1 s ago: the create waits, not the delete",
            ),
            (at(9), vec![delete.clone()], "still within the first 10 s"),
            (at(10), both(), "10 s later: tried again"),
        ];
        for (now, want, why) in cases {
            assert_eq!(due_actions(both(), &retry, now), want, "{why}");
        }
        // Refused again at 10 s: the wait doubles to 20 s.
        retry.next(&retry_key(&create), at(10));
        assert_eq!(retry.get(&retry_key(&create)), Duration::from_secs(20));
        assert_eq!(due_actions(both(), &retry, at(29)), vec![delete.clone()]);
        assert_eq!(due_actions(both(), &retry, at(30)), both());
        // Refused for ever: the wait stops at 5 minutes.
        for k in 0..20 {
            retry.next(&retry_key(&create), at(30 + k * 300));
        }
        assert_eq!(retry.get(&retry_key(&create)), RETRY_MAX);
        // Created at last: forgotten.
        retry.reset(&retry_key(&create));
        assert_eq!(due_actions(both(), &retry, at(6031)), both());
    }
}
