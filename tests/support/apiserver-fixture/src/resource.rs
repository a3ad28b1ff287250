//! The resource types the fixture serves, with the facts discovery and the handlers need.

/// One served resource (group/version/plural) and how the API server treats it.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceType {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// Has a `/status` subresource: main-resource writes keep the old status, status writes keep the
    /// old spec.
    pub status_subresource: bool,
    /// Objects of two served versions that share storage (core/v1 events and events.k8s.io/v1
    /// events) have the same storage key.
    pub storage: &'static str,
    /// PUT of a missing object creates it (leases and events do, pods and nodes do not).
    pub allow_create_on_update: bool,
    /// Pods return the deleted object from DELETE; other resources return a `Status`.
    pub return_deleted_object: bool,
    /// Categories for `kubectl get all`.
    pub categories: &'static [&'static str],
}

impl ResourceType {
    /// `pods` or `leases.coordination.k8s.io`, as in the API server's messages.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `v1` or `coordination.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Collection path (namespace given for namespaced resources).
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let prefix = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) if self.namespaced => format!("{prefix}/namespaces/{ns}/{}", self.plural),
            _ => format!("{prefix}/{}", self.plural),
        }
    }

    pub fn is_pod(&self) -> bool {
        self.storage == "pods"
    }
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs every served resource supports.
pub fn verbs() -> &'static [&'static str] {
    VERBS
}

pub static RESOURCES: &[ResourceType] = &[
    ResourceType {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        status_subresource: true,
        storage: "namespaces",
        allow_create_on_update: false,
        return_deleted_object: true,
        categories: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        status_subresource: true,
        storage: "nodes",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        status_subresource: true,
        storage: "pods",
        allow_create_on_update: false,
        return_deleted_object: true,
        categories: &["all"],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        status_subresource: false,
        storage: "events",
        allow_create_on_update: true,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        status_subresource: false,
        storage: "configmaps",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        storage: "secrets",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        namespaced: true,
        short_names: &["sa"],
        status_subresource: false,
        storage: "serviceaccounts",
        allow_create_on_update: false,
        return_deleted_object: true,
        categories: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        status_subresource: true,
        storage: "services",
        allow_create_on_update: true,
        return_deleted_object: false,
        categories: &["all"],
    },
    ResourceType {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        storage: "leases",
        allow_create_on_update: true,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "certificates.k8s.io",
        version: "v1",
        plural: "certificatesigningrequests",
        singular: "certificatesigningrequest",
        kind: "CertificateSigningRequest",
        namespaced: false,
        short_names: &["csr"],
        status_subresource: true,
        storage: "certificatesigningrequests",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "node.k8s.io",
        version: "v1",
        plural: "runtimeclasses",
        singular: "runtimeclass",
        kind: "RuntimeClass",
        namespaced: false,
        short_names: &[],
        status_subresource: false,
        storage: "runtimeclasses",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        status_subresource: false,
        storage: "events",
        allow_create_on_update: true,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "persistentvolumes",
        singular: "persistentvolume",
        kind: "PersistentVolume",
        namespaced: false,
        short_names: &["pv"],
        status_subresource: true,
        storage: "persistentvolumes",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        short_names: &["pvc"],
        status_subresource: true,
        storage: "persistentvolumeclaims",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "storage.k8s.io",
        version: "v1",
        plural: "storageclasses",
        singular: "storageclass",
        kind: "StorageClass",
        namespaced: false,
        short_names: &["sc"],
        status_subresource: false,
        storage: "storageclasses",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "storage.k8s.io",
        version: "v1",
        plural: "csidrivers",
        singular: "csidriver",
        kind: "CSIDriver",
        namespaced: false,
        short_names: &[],
        status_subresource: false,
        storage: "csidrivers",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "storage.k8s.io",
        version: "v1",
        plural: "csinodes",
        singular: "csinode",
        kind: "CSINode",
        namespaced: false,
        short_names: &[],
        status_subresource: false,
        storage: "csinodes",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
    ResourceType {
        group: "storage.k8s.io",
        version: "v1",
        plural: "volumeattachments",
        singular: "volumeattachment",
        kind: "VolumeAttachment",
        namespaced: false,
        short_names: &[],
        status_subresource: true,
        storage: "volumeattachments",
        allow_create_on_update: false,
        return_deleted_object: false,
        categories: &[],
    },
];

/// The served groups other than the core group, in discovery order.
pub const GROUPS: &[&str] = &[
    "certificates.k8s.io",
    "coordination.k8s.io",
    "events.k8s.io",
    "node.k8s.io",
    "storage.k8s.io",
];

pub fn find_by_plural(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Resource type for an `apiVersion`/`kind` pair (typed helpers, state files).
pub fn find_by_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

pub fn in_group_version<'a>(
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static ResourceType> + use<'a> {
    RESOURCES
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        let cases: &[(&str, &str, &str, Option<&str>)] = &[
            ("", "v1", "pods", Some("Pod")),
            ("", "v1", "nodes", Some("Node")),
            ("coordination.k8s.io", "v1", "leases", Some("Lease")),
            ("events.k8s.io", "v1", "events", Some("Event")),
            ("", "v1", "serviceaccounts", Some("ServiceAccount")),
            ("node.k8s.io", "v1", "runtimeclasses", Some("RuntimeClass")),
            (
                "",
                "v1",
                "persistentvolumeclaims",
                Some("PersistentVolumeClaim"),
            ),
            ("", "v1", "persistentvolumes", Some("PersistentVolume")),
            ("storage.k8s.io", "v1", "csinodes", Some("CSINode")),
            ("storage.k8s.io", "v1", "csidrivers", Some("CSIDriver")),
            (
                "storage.k8s.io",
                "v1",
                "volumeattachments",
                Some("VolumeAttachment"),
            ),
            (
                "storage.k8s.io",
                "v1",
                "storageclasses",
                Some("StorageClass"),
            ),
            ("", "v1", "leases", None),
            ("apps", "v1", "deployments", None),
        ];
        for (group, version, plural, kind) in cases {
            assert_eq!(
                find_by_plural(group, version, plural).map(|r| r.kind),
                *kind,
                "{group}/{plural}"
            );
        }
        assert_eq!(
            find_by_kind("coordination.k8s.io/v1", "Lease").map(|r| r.plural),
            Some("leases")
        );
        assert_eq!(find_by_kind("v1", "Lease"), None);
    }

    #[test]
    fn paths_and_names() {
        let leases = find_by_plural("coordination.k8s.io", "v1", "leases").unwrap();
        assert_eq!(
            leases.collection_path(Some("kube-node-lease")),
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        );
        assert_eq!(leases.qualified_resource(), "leases.coordination.k8s.io");
        let nodes = find_by_plural("", "v1", "nodes").unwrap();
        assert_eq!(nodes.collection_path(Some("default")), "/api/v1/nodes");
        assert_eq!(nodes.api_version(), "v1");
        assert_eq!(nodes.list_kind(), "NodeList");
    }
}
