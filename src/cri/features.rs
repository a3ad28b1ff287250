//! What the runtime's CRI `Status` says it can do (`RuntimeHandler.features`,
//! `RuntimeFeatures`), read once when nodelet connects, for the checks the kubelet makes before
//! it asks for something a runtime would silently drop: recursive read-only mounts per handler
//! and `supplementalGroupsPolicy: Strict`. A runtime that says nothing (containerd 1.6 fills
//! neither field) supports neither.

use super::api;

/// The runtime's declared features.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeFeatureSet {
    handlers: Vec<api::RuntimeHandler>,
    supplemental_groups_policy: bool,
}

impl RuntimeFeatureSet {
    pub fn new(
        handlers: &[api::RuntimeHandler],
        features: Option<&api::RuntimeFeatures>,
    ) -> RuntimeFeatureSet {
        RuntimeFeatureSet {
            handlers: handlers.to_vec(),
            supplemental_groups_policy: features.is_some_and(|f| f.supplemental_groups_policy),
        }
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
        self.supplemental_groups_policy
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
        // containerd 1.6: no handlers, no features.
        let silent = RuntimeFeatureSet::new(&[], None);
        assert!(!silent.recursive_read_only(""));
        assert!(!silent.supplemental_groups_policy());
    }
}
