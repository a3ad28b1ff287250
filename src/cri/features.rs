//! What the runtime's CRI `Status` says it can do: its handlers with their features
//! (`RuntimeHandler.features`) and the runtime-wide `RuntimeFeatures`. One view, read when
//! nodelet connects and again every [`REFRESH_PERIOD`] (the kubelet's `updateRuntimeUp`), is
//! what the Node reports (`status.runtimeHandlers`, `status.features`) and what the checks the
//! kubelet makes before asking for something a runtime would silently drop read: recursive
//! read-only mounts per handler and `supplementalGroupsPolicy: Strict`. A runtime that says
//! nothing (containerd 1.6 fills neither field) supports neither.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{api, HousekeepingRuntime};

/// How often the runtime's `Status` is read again: a runtime restarted with another
/// configuration lists other handlers.
pub const REFRESH_PERIOD: Duration = Duration::from_secs(5);

/// The runtime's declared handlers and features, as one `Status` answer stated them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeFeatureSet {
    handlers: Vec<api::RuntimeHandler>,
    features: Option<api::RuntimeFeatures>,
}

impl RuntimeFeatureSet {
    pub fn new(
        handlers: &[api::RuntimeHandler],
        features: Option<&api::RuntimeFeatures>,
    ) -> RuntimeFeatureSet {
        RuntimeFeatureSet {
            handlers: handlers.to_vec(),
            features: features.copied(),
        }
    }

    /// The handlers the runtime listed (none from containerd 1.6).
    pub fn handlers(&self) -> &[api::RuntimeHandler] {
        &self.handlers
    }

    /// The runtime-wide features it stated (`None`: it states none).
    pub fn features(&self) -> Option<&api::RuntimeFeatures> {
        self.features.as_ref()
    }

    /// Whether runtime handler `handler` (`""`: the default) mounts read-only volumes
    /// recursively read-only when asked (`RuntimeHandlerFeatures.recursive_read_only_mounts`).
    pub fn recursive_read_only(&self, handler: &str) -> bool {
        self.handlers
            .iter()
            .find(|h| h.name == handler)
            .and_then(|h| h.features)
            .is_some_and(|f| f.recursive_read_only_mounts)
    }

    /// Whether the runtime applies `supplementalGroupsPolicy` (and reports the container's user).
    pub fn supplemental_groups_policy(&self) -> bool {
        self.features.is_some_and(|f| f.supplemental_groups_policy)
    }

    /// Whether runtime handler `handler` runs pods in user namespaces of their own, volumes
    /// included (`RuntimeHandlerFeatures.user_namespaces`; the kubelet's
    /// `HandlerSupportsUserNamespaces`: an unknown handler does not).
    pub fn user_namespaces(&self, handler: &str) -> bool {
        self.handlers
            .iter()
            .find(|h| h.name == handler)
            .and_then(|h| h.features)
            .is_some_and(|f| f.user_namespaces)
    }
}

/// The runtime's declared features as last read, shared by the node status, admission and the
/// container config builder. Cheap to clone; all clones share one set.
#[derive(Debug, Clone, Default)]
pub struct RuntimeFeaturesView(Arc<RwLock<RuntimeFeatureSet>>);

impl RuntimeFeaturesView {
    pub fn new(set: RuntimeFeatureSet) -> RuntimeFeaturesView {
        RuntimeFeaturesView(Arc::new(RwLock::new(set)))
    }

    pub fn set(&self, set: RuntimeFeatureSet) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = set;
    }

    /// The set as last read.
    pub fn get(&self) -> RuntimeFeatureSet {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// [`RuntimeFeatureSet::recursive_read_only`] of the set as last read.
    pub fn recursive_read_only(&self, handler: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .recursive_read_only(handler)
    }

    /// [`RuntimeFeatureSet::user_namespaces`] of the set as last read.
    pub fn user_namespaces(&self, handler: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .user_namespaces(handler)
    }

    /// [`RuntimeFeatureSet::supplemental_groups_policy`] of the set as last read.
    pub fn supplemental_groups_policy(&self) -> bool {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .supplemental_groups_policy()
    }
}

/// Reads the runtime's `Status` into `view` every [`REFRESH_PERIOD`] until cancelled; a failed
/// read keeps the last set (the kubelet keeps its runtime state on an error).
pub async fn refresh(
    runtime: Arc<dyn HousekeepingRuntime>,
    view: RuntimeFeaturesView,
    cancel: CancellationToken,
) {
    let mut ticker = tokio::time::interval(REFRESH_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        match runtime.runtime_feature_set().await {
            Ok(set) => view.set(set),
            Err(e) => tracing::debug!(error = %e, "reading the runtime's Status"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(name: &str, rro: Option<bool>) -> api::RuntimeHandler {
        api::RuntimeHandler {
            name: name.into(),
            features: rro.map(|r| api::RuntimeHandlerFeatures {
                recursive_read_only_mounts: r,
                user_namespaces: false,
            }),
        }
    }

    #[test]
    fn declared_features_table() {
        let set = RuntimeFeatureSet::new(
            &[
                handler("", Some(true)),
                handler("kata", Some(false)),
                handler("old", None),
                api::RuntimeHandler {
                    name: "userns".into(),
                    features: Some(api::RuntimeHandlerFeatures {
                        recursive_read_only_mounts: false,
                        user_namespaces: true,
                    }),
                },
            ],
            Some(&api::RuntimeFeatures {
                supplemental_groups_policy: true,
            }),
        );
        let cases = [
            ("", true),
            ("kata", false),
            ("old", false),
            ("missing", false),
        ];
        for (name, want) in cases {
            assert_eq!(set.recursive_read_only(name), want, "{name:?}");
        }
        assert!(set.supplemental_groups_policy());
        let userns = [
            ("", false),
            ("kata", false),
            ("old", false),
            ("userns", true),
            ("missing", false),
        ];
        for (name, want) in userns {
            assert_eq!(set.user_namespaces(name), want, "user namespaces {name:?}");
        }
        // containerd 1.6: no handlers, no features.
        let silent = RuntimeFeatureSet::new(&[], None);
        assert!(!silent.recursive_read_only(""));
        assert!(!silent.supplemental_groups_policy());
    }

    /// A runtime whose `Status` lists what the test put there last, or fails.
    struct Listing(std::sync::Mutex<Option<Vec<api::RuntimeHandler>>>);

    #[async_trait::async_trait]
    impl HousekeepingRuntime for Listing {
        async fn runtime_info(
            &self,
        ) -> crate::cri::Result<std::collections::HashMap<String, String>> {
            Ok(Default::default())
        }
        async fn reopen_container_log(&self, _: &str) -> crate::cri::Result<()> {
            Ok(())
        }
        async fn runtime_feature_set(&self) -> crate::cri::Result<RuntimeFeatureSet> {
            let handlers = self.0.lock().unwrap().clone();
            handlers
                .map(|h| {
                    RuntimeFeatureSet::new(
                        &h,
                        Some(&api::RuntimeFeatures {
                            supplemental_groups_policy: h.len() > 1,
                        }),
                    )
                })
                .ok_or_else(|| crate::cri::Error::Call {
                    op: "status",
                    target: String::new(),
                    status: tonic::Status::unavailable("down"),
                })
        }
    }

    fn names(view: &RuntimeFeaturesView) -> Vec<String> {
        view.get()
            .handlers()
            .iter()
            .map(|h| h.name.clone())
            .collect()
    }

    /// The set follows the runtime every 5 s; a failed read keeps the last one.
    #[tokio::test(start_paused = true)]
    async fn the_set_is_read_again_and_kept_through_a_failure() {
        let runtime = Arc::new(Listing(std::sync::Mutex::new(Some(vec![handler(
            "runc", None,
        )]))));
        let view = RuntimeFeaturesView::default();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(refresh(runtime.clone(), view.clone(), cancel.clone()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(names(&view), ["runc"]);
        assert!(!view.supplemental_groups_policy());
        *runtime.0.lock().unwrap() = Some(vec![handler("", Some(true)), handler("runc-alt", None)]);
        tokio::time::sleep(Duration::from_millis(4_000)).await;
        assert_eq!(names(&view), ["runc"], "not before the period");
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(names(&view), ["", "runc-alt"]);
        assert!(view.supplemental_groups_policy());
        assert!(view.recursive_read_only(""));
        *runtime.0.lock().unwrap() = None;
        tokio::time::sleep(REFRESH_PERIOD).await;
        assert_eq!(names(&view), ["", "runc-alt"], "kept through a failed read");
        cancel.cancel();
        task.await.unwrap();
    }
}
