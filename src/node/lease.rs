//! The node Lease heartbeat (`k8s.io/component-helpers/apimachinery/lease` as the kubelet
//! runs it, `pkg/kubelet/nodelease`).
//!
//! A Lease named after the node in `kube-node-lease`, held by the node, renewed every quarter
//! of its duration (the kubelet's `renewIntervalFraction` 0.25: every 10 s for 40 s). Renewals
//! PUT the Lease last written, without a GET; a conflict re-reads it and retries. When the API
//! server is away, the controller backs off (200 ms doubling to 7 s) until it can read the
//! Lease again. The Lease is owned by the Node (so it goes when the Node is deleted); it is not
//! created before the Node exists, because the owner reference needs the Node's UID.
//!
//! Unlike the kubelet, renewals are not jittered (it adds up to 4%): the interval is exact.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;

use super::{api_call, Error, NodeCounters};
use crate::clock::Clock;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The namespace of node Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// Immediate retries of a renewal before waiting for the next interval (`maxUpdateRetries`).
pub const MAX_UPDATE_RETRIES: usize = 5;
/// The longest wait between attempts to read or create the Lease (`maxBackoff`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(7);

/// How often the Lease is renewed: a quarter of its duration (`nodeLeaseRenewIntervalFraction`).
pub fn renew_interval(lease_duration_seconds: u32) -> Duration {
    Duration::from_millis(u64::from(lease_duration_seconds) * 250)
}

/// The owner reference a node Lease carries (`SetNodeOwnerFunc`).
pub fn node_owner_reference(node: &Node) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone()?,
        uid: node.metadata.uid.clone()?,
        ..Default::default()
    })
}

/// The Lease to write (`newLease`): a fresh one, or `base` with the duration and renew time
/// asserted; an owner reference is added when the Lease has none and the Node is known.
pub fn desired_lease(
    base: Option<&Lease>,
    node_name: &str,
    lease_duration_seconds: u32,
    renew_time: jiff::Timestamp,
    owner: Option<OwnerReference>,
) -> Lease {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(node_name.to_string()),
            namespace: Some(NODE_LEASE_NAMESPACE.to_string()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node_name.to_string()),
            ..Default::default()
        }),
    });
    let spec = lease.spec.get_or_insert_with(Default::default);
    // The configuration may have changed since the Lease was created.
    spec.lease_duration_seconds = Some(i32::try_from(lease_duration_seconds).unwrap_or(i32::MAX));
    spec.renew_time = Some(MicroTime(renew_time));
    let has_owner = lease
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty());
    if !has_owner {
        if let Some(owner) = owner {
            lease.metadata.owner_references = Some(vec![owner]);
        }
    }
    lease
}

/// Backoff before the next attempt to read or create the Lease: 200 ms, doubling, at most 7 s.
pub fn ensure_backoff(attempt: u32) -> Duration {
    crate::backoff::exponential(Duration::from_millis(200), attempt, MAX_BACKOFF)
}

/// Keeps the node's Lease alive until cancelled.
pub struct LeaseController {
    leases: Api<Lease>,
    nodes: Api<Node>,
    node_name: String,
    duration_seconds: u32,
    renew_interval: Duration,
    timeout: Duration,
    clock: Clock,
    counters: Arc<NodeCounters>,
    /// The Lease as last written: the base of the next renewal (no GET needed).
    latest: Option<Lease>,
}

impl LeaseController {
    pub fn new(
        client: kube::Client,
        node_name: &str,
        duration_seconds: u32,
        timeout: Duration,
        clock: Clock,
        counters: Arc<NodeCounters>,
    ) -> LeaseController {
        LeaseController {
            leases: Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE),
            nodes: Api::all(client),
            node_name: node_name.to_string(),
            duration_seconds,
            renew_interval: renew_interval(duration_seconds),
            timeout,
            clock,
            counters,
            latest: None,
        }
    }

    /// Syncs now and then every renew interval (measured from the end of a sync, like the
    /// kubelet's sliding `wait.Until`), until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = self.sync(&cancel) => {}
                _ = cancel.cancelled() => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(self.renew_interval) => {}
                _ = cancel.cancelled() => return,
            }
        }
    }

    /// One renewal (`controller.sync`).
    pub async fn sync(&mut self, cancel: &CancellationToken) {
        if let Some(latest) = self.latest.clone() {
            match self.retry_update(latest, cancel).await {
                Ok(()) => return,
                Err(error) => tracing::info!(%error,
                    "failed to update lease using latest lease, fallback to ensure lease"),
            }
        }
        let (lease, created) = match self.backoff_ensure(cancel).await {
            Some((lease, created)) => (Some(lease), created),
            None => (None, false),
        };
        self.latest = lease.clone();
        if let (Some(lease), false) = (lease, created) {
            if let Err(error) = self.retry_update(lease, cancel).await {
                tracing::warn!(%error, interval = ?self.renew_interval, "will retry updating lease");
            }
        }
    }

    /// The Node as an owner, when it can be read.
    async fn owner(&self) -> Result<OwnerReference, Error> {
        let node = api_call(self.timeout, self.nodes.get(&self.node_name))
            .await
            .map_err(|e| {
                e.context(format!(
                    "getting node {:?} to own its lease",
                    self.node_name
                ))
            })?;
        node_owner_reference(&node).ok_or_else(|| Error::Other {
            context: format!("node {:?} has no uid", self.node_name),
        })
    }

    /// Reads the Lease, creating it if missing (`ensureLease`). `Ok(None)`: not created this
    /// time because the Node (its owner) cannot be read yet.
    async fn ensure(&self) -> Result<Option<(Lease, bool)>, Error> {
        match api_call(self.timeout, self.leases.get(&self.node_name)).await {
            Ok(lease) => Ok(Some((lease, false))),
            Err(e) if e.code() == Some(404) => {
                let owner = match self.owner().await {
                    Ok(owner) => owner,
                    Err(error) => {
                        tracing::debug!(%error, "not creating the node lease before the node exists");
                        return Ok(None);
                    }
                };
                let lease = desired_lease(
                    None,
                    &self.node_name,
                    self.duration_seconds,
                    self.clock.now(),
                    Some(owner),
                );
                let created = api_call(
                    self.timeout,
                    self.leases.create(&PostParams::default(), &lease),
                )
                .await
                .map_err(|e| e.context(format!("creating lease {:?}", self.node_name)))?;
                self.counters.lease_writes.fetch_add(1, Ordering::Relaxed);
                crate::metrics::metrics().node_lease_writes_total.inc();
                Ok(Some((created, true)))
            }
            Err(e) => Err(e.context(format!("getting lease {:?}", self.node_name))),
        }
    }

    /// [`Self::ensure`] until it answers (`backoffEnsureLease`); `None` when cancelled or when
    /// the Lease cannot be created yet.
    async fn backoff_ensure(&self, cancel: &CancellationToken) -> Option<(Lease, bool)> {
        let mut attempt = 0;
        loop {
            match self.ensure().await {
                Ok(found) => return found,
                Err(error) => {
                    let wait = ensure_backoff(attempt);
                    tracing::warn!(%error, interval = ?wait, "failed to ensure lease exists, will retry");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = cancel.cancelled() => return None,
                    }
                    attempt = attempt.saturating_add(1);
                }
            }
        }
    }

    /// Renews from `base`, retrying at once up to [`MAX_UPDATE_RETRIES`] times; a conflict
    /// re-reads the Lease first (`retryUpdateLease`).
    async fn retry_update(
        &mut self,
        mut base: Lease,
        cancel: &CancellationToken,
    ) -> Result<(), Error> {
        let mut last_error = None;
        for _ in 0..MAX_UPDATE_RETRIES {
            let has_owner = base
                .metadata
                .owner_references
                .as_ref()
                .is_some_and(|o| !o.is_empty());
            // A missing owner does not block a renewal, only creation.
            let owner = if has_owner {
                None
            } else {
                self.owner().await.ok()
            };
            let lease = desired_lease(
                Some(&base),
                &self.node_name,
                self.duration_seconds,
                self.clock.now(),
                owner,
            );
            match api_call(
                self.timeout,
                self.leases
                    .replace(&self.node_name, &PostParams::default(), &lease),
            )
            .await
            {
                Ok(written) => {
                    self.counters.lease_writes.fetch_add(1, Ordering::Relaxed);
                    crate::metrics::metrics().node_lease_writes_total.inc();
                    self.latest = Some(written);
                    return Ok(());
                }
                Err(error) => {
                    tracing::warn!(%error, "failed to update lease");
                    if error.code() == Some(409) {
                        // Someone else wrote it: continue from what the API server has.
                        if let Some((fresh, _)) = self.backoff_ensure(cancel).await {
                            base = fresh;
                        }
                    }
                    last_error = Some(error);
                }
            }
        }
        Err(last_error
            .unwrap_or(Error::Other {
                context: String::new(),
            })
            .context(format!(
                "failed {MAX_UPDATE_RETRIES} attempts to update lease {:?}",
                self.node_name
            )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renew_interval_table() {
        let cases = [(40, 10_000), (10, 2_500), (1, 250), (60, 15_000)];
        for (seconds, millis) in cases {
            assert_eq!(
                renew_interval(seconds),
                Duration::from_millis(millis),
                "{seconds}s"
            );
        }
    }

    #[test]
    fn ensure_backoff_table() {
        let cases = [
            (0, 200),
            (1, 400),
            (4, 3200),
            (5, 6400),
            (6, 7000),
            (30, 7000),
        ];
        for (attempt, millis) in cases {
            assert_eq!(ensure_backoff(attempt), Duration::from_millis(millis));
        }
    }

    #[test]
    fn desired_lease_table() {
        let now: jiff::Timestamp = "2026-01-01T00:00:10.5Z".parse().unwrap();
        let owner = |uid: &str| OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: "node-1".into(),
            uid: uid.into(),
            ..Default::default()
        };
        let existing = Lease {
            metadata: ObjectMeta {
                name: Some("node-1".into()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                resource_version: Some("42".into()),
                owner_references: Some(vec![owner("old-uid")]),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("node-1".into()),
                lease_duration_seconds: Some(10),
                ..Default::default()
            }),
        };
        // (base, owner offered, want: resourceVersion, owner uid, duration)
        type Case = (
            Option<Lease>,
            Option<OwnerReference>,
            Option<&'static str>,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (None, Some(owner("u1")), None, Some("u1")),
            (None, None, None, None),
            // An existing owner is kept; the base's resourceVersion makes the PUT conditional.
            (
                Some(existing.clone()),
                Some(owner("u2")),
                Some("42"),
                Some("old-uid"),
            ),
        ];
        for (base, offered, want_rv, want_owner) in cases {
            let lease = desired_lease(base.as_ref(), "node-1", 40, now, offered);
            let spec = lease.spec.as_ref().unwrap();
            assert_eq!(spec.holder_identity.as_deref(), Some("node-1"));
            assert_eq!(spec.lease_duration_seconds, Some(40));
            assert_eq!(spec.renew_time.as_ref().unwrap().0, now);
            assert_eq!(lease.metadata.name.as_deref(), Some("node-1"));
            assert_eq!(
                lease.metadata.namespace.as_deref(),
                Some(NODE_LEASE_NAMESPACE)
            );
            assert_eq!(lease.metadata.resource_version.as_deref(), want_rv);
            assert_eq!(
                lease
                    .metadata
                    .owner_references
                    .as_ref()
                    .and_then(|o| o.first())
                    .map(|o| o.uid.as_str()),
                want_owner
            );
        }
    }

    #[test]
    fn owner_reference_needs_name_and_uid() {
        let node = |uid: Option<&str>| Node {
            metadata: ObjectMeta {
                name: Some("node-1".into()),
                uid: uid.map(String::from),
                ..Default::default()
            },
            ..Default::default()
        };
        let reference = node_owner_reference(&node(Some("abc"))).unwrap();
        assert_eq!(
            (
                reference.api_version.as_str(),
                reference.kind.as_str(),
                reference.name.as_str(),
                reference.uid.as_str()
            ),
            ("v1", "Node", "node-1", "abc")
        );
        assert_eq!(node_owner_reference(&node(None)), None);
    }
}
