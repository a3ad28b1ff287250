//! The API server's defaulting for a Pod (`pkg/apis/core/v1/defaults.go` plus the declarative
//! `+default` markers of `k8s.io/api/core/v1`), applied to a manifest before it is hashed into a
//! UID and validated, exactly as the kubelet's decoder does for static pods.
//!
//! Go treats an empty string as "unset", so every string default here also replaces `Some("")`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, HTTPGetAction, LifecycleHandler, ObjectFieldSelector, Pod,
    PodSecurityContext, Probe, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// 0644, the default file mode of secret, configMap, downwardAPI and projected volumes.
pub const DEFAULT_VOLUME_MODE: i32 = 0o644;

/// Fill every field the API server would default. Idempotent.
pub fn apply_defaults(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(Default::default);

    // SetDefaults_PodSpec
    set_if_empty(&mut spec.dns_policy, "ClusterFirst");
    set_if_empty(&mut spec.restart_policy, "Always");
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.termination_grace_period_seconds
        .get_or_insert(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS);
    set_if_empty(&mut spec.scheduler_name, DEFAULT_SCHEDULER_NAME);

    // SetDefaults_Pod
    spec.enable_service_links.get_or_insert(true);
    let host_network = spec.host_network == Some(true);

    for c in spec.containers.iter_mut() {
        default_container(c, host_network);
    }
    for c in spec.init_containers.iter_mut().flatten() {
        default_container(c, host_network);
    }
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
}

fn set_if_empty(field: &mut Option<String>, value: &str) {
    if field.as_deref().is_none_or(str::is_empty) {
        *field = Some(value.to_string());
    }
}

fn set_if_zero(field: &mut Option<i32>, value: i32) {
    if field.is_none_or(|v| v == 0) {
        *field = Some(value);
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    // SetDefaults_Container
    if c.image_pull_policy.as_deref().is_none_or(str::is_empty) {
        let policy = if image_tag(c.image.as_deref().unwrap_or("")) == Some("latest") {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.image_pull_policy = Some(policy.to_string());
    }
    set_if_empty(
        &mut c.termination_message_path,
        DEFAULT_TERMINATION_MESSAGE_PATH,
    );
    set_if_empty(&mut c.termination_message_policy, "File");

    for p in c.ports.iter_mut().flatten() {
        set_if_empty(&mut p.protocol, "TCP");
        // defaultHostNetworkPorts: with host networking a container port is a host port.
        if host_network && p.host_port.is_none_or(|hp| hp == 0) {
            p.host_port = Some(p.container_port);
        }
    }
    for e in c.env.iter_mut().flatten() {
        default_env(e);
    }

    // Requests default to limits for every resource that has a limit but no request.
    if let Some(resources) = c.resources.as_mut() {
        if let Some(limits) = resources.limits.as_ref() {
            let requests = resources.requests.get_or_insert_with(BTreeMap::new);
            for (name, value) in limits {
                requests
                    .entry(name.clone())
                    .or_insert_with(|| K8sQuantity(value.0.clone()));
            }
        }
    }

    for probe in [
        c.liveness_probe.as_mut(),
        c.readiness_probe.as_mut(),
        c.startup_probe.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lifecycle) = c.lifecycle.as_mut() {
        for handler in [lifecycle.post_start.as_mut(), lifecycle.pre_stop.as_mut()]
            .into_iter()
            .flatten()
        {
            default_lifecycle_handler(handler);
        }
    }
}

fn default_env(e: &mut EnvVar) {
    if let Some(field_ref) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
        default_field_selector(field_ref);
    }
}

fn default_field_selector(s: &mut ObjectFieldSelector) {
    set_if_empty(&mut s.api_version, "v1");
}

fn default_probe(p: &mut Probe) {
    set_if_zero(&mut p.timeout_seconds, 1);
    set_if_zero(&mut p.period_seconds, 10);
    set_if_zero(&mut p.success_threshold, 1);
    set_if_zero(&mut p.failure_threshold, 3);
    if let Some(http) = p.http_get.as_mut() {
        default_http_get(http);
    }
    if let Some(grpc) = p.grpc.as_mut() {
        grpc.service.get_or_insert_with(String::new);
    }
}

fn default_lifecycle_handler(h: &mut LifecycleHandler) {
    if let Some(http) = h.http_get.as_mut() {
        default_http_get(http);
    }
}

fn default_http_get(h: &mut HTTPGetAction) {
    set_if_empty(&mut h.path, "/");
    set_if_empty(&mut h.scheme, "HTTP");
}

fn default_volume(v: &mut Volume) {
    // SetDefaults_Volume: a volume with no source is an emptyDir.
    if volume_source_count(v) == 0 {
        v.empty_dir = Some(Default::default());
    }
    if let Some(hp) = v.host_path.as_mut() {
        hp.type_.get_or_insert_with(String::new);
    }
    // SetDefaults_ImageVolumeSource: the pull policy from the reference's tag.
    if let Some(img) = v.image.as_mut() {
        if img.pull_policy.as_deref().is_none_or(str::is_empty) {
            let reference = img.reference.as_deref().unwrap_or("");
            let policy = if image_tag(reference) == Some("latest") {
                "Always"
            } else {
                "IfNotPresent"
            };
            img.pull_policy = Some(policy.to_string());
        }
    }
    if let Some(s) = v.secret.as_mut() {
        s.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
    }
    if let Some(cm) = v.config_map.as_mut() {
        cm.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
    }
    if let Some(d) = v.downward_api.as_mut() {
        d.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
        for item in d.items.iter_mut().flatten() {
            if let Some(f) = item.field_ref.as_mut() {
                default_field_selector(f);
            }
        }
    }
    if let Some(p) = v.projected.as_mut() {
        p.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
        for source in p.sources.iter_mut().flatten() {
            if let Some(d) = source.downward_api.as_mut() {
                for item in d.items.iter_mut().flatten() {
                    if let Some(f) = item.field_ref.as_mut() {
                        default_field_selector(f);
                    }
                }
            }
            if let Some(t) = source.service_account_token.as_mut() {
                t.expiration_seconds.get_or_insert(3600);
            }
        }
    }
}

/// How many volume sources a volume names (validation wants exactly one).
pub(crate) fn volume_source_count(v: &Volume) -> usize {
    volume_sources(v).len()
}

/// The JSON names of the sources a volume sets, in the order Go's validation checks them.
pub(crate) fn volume_sources(v: &Volume) -> Vec<&'static str> {
    let present = [
        ("emptyDir", v.empty_dir.is_some()),
        ("hostPath", v.host_path.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some()),
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some()),
        ("secret", v.secret.is_some()),
        ("nfs", v.nfs.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("glusterfs", v.glusterfs.is_some()),
        ("flocker", v.flocker.is_some()),
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("rbd", v.rbd.is_some()),
        ("cinder", v.cinder.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("quobyte", v.quobyte.is_some()),
        ("downwardAPI", v.downward_api.is_some()),
        ("fc", v.fc.is_some()),
        ("flexVolume", v.flex_volume.is_some()),
        ("configMap", v.config_map.is_some()),
        ("azureFile", v.azure_file.is_some()),
        ("vsphereVolume", v.vsphere_volume.is_some()),
        ("photonPersistentDisk", v.photon_persistent_disk.is_some()),
        ("portworxVolume", v.portworx_volume.is_some()),
        ("azureDisk", v.azure_disk.is_some()),
        ("storageos", v.storageos.is_some()),
        ("projected", v.projected.is_some()),
        ("scaleIO", v.scale_io.is_some()),
        ("csi", v.csi.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("image", v.image.is_some()),
    ];
    present
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name)
        .collect()
}

/// The tag the API server's `parsers.ParseImageName` reports: `latest` when the reference has
/// neither tag nor digest, `None` for a digest-only reference or one that does not parse.
pub fn image_tag(image: &str) -> Option<&str> {
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return None;
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    // Like the docker reference grammar: the first component is a registry host when it looks
    // like one; the repository path after it must be lowercase.
    let path = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            rest
        }
        _ => name,
    };
    let last = path.rsplit('/').next().unwrap_or(path);
    let (repo_last, tag) = match last.split_once(':') {
        Some((repo, tag)) => (repo, Some(tag)),
        None => (last, None),
    };
    let repo_prefix = &path[..path.len() - last.len()];
    if repo_last.is_empty()
        || repo_prefix.chars().any(|c| c.is_ascii_uppercase())
        || repo_last.chars().any(|c| c.is_ascii_uppercase())
        || tag == Some("")
    {
        return None;
    }
    match (tag, digest) {
        (Some(tag), _) => Some(tag),
        (None, Some(_)) => None,
        (None, None) => Some("latest"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerPort, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EnvVarSource, GRPCAction,
        HostPathVolumeSource, Lifecycle, PodSpec, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn pod_with(container: Container) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![container],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container(image: &str) -> Container {
        Container {
            name: "app".into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    fn defaulted(mut pod: Pod) -> Pod {
        apply_defaults(&mut pod);
        pod
    }

    #[test]
    fn pod_level_defaults() {
        let pod = defaulted(pod_with(container("nginx:1.27")));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.security_context, Some(PodSecurityContext::default()));
        assert_eq!(spec.enable_service_links, Some(true));
        // The kubelet does not default priority for static pods (admission does that for API pods).
        assert_eq!(spec.priority, None);
    }

    #[test]
    fn explicit_pod_values_are_kept() {
        let mut pod = pod_with(container("nginx:1.27"));
        let spec = pod.spec.as_mut().unwrap();
        spec.restart_policy = Some("Never".into());
        spec.termination_grace_period_seconds = Some(5);
        spec.dns_policy = Some("Default".into());
        spec.enable_service_links = Some(false);
        let spec = defaulted(pod).spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(5));
        assert_eq!(spec.dns_policy.as_deref(), Some("Default"));
        assert_eq!(spec.enable_service_links, Some(false));
    }

    #[test]
    fn image_pull_policy_follows_the_tag() {
        // (image, explicit policy, expected policy)
        let cases: &[(&str, Option<&str>, &str)] = &[
            ("nginx", None, "Always"),
            ("nginx:latest", None, "Always"),
            ("nginx:1.27", None, "IfNotPresent"),
            ("registry.local:5000/team/app", None, "Always"),
            ("registry.local:5000/team/app:v2", None, "IfNotPresent"),
            ("localhost/app", None, "Always"),
            ("nginx@sha256:0123456789abcdef", None, "IfNotPresent"),
            ("nginx:latest@sha256:0123456789abcdef", None, "Always"),
            ("nginx:1.27@sha256:0123456789abcdef", None, "IfNotPresent"),
            ("Nginx", None, "IfNotPresent"), // not a valid reference: no tag
            ("", None, "IfNotPresent"),
            ("nginx", Some(""), "Always"),
            ("nginx", Some("Never"), "Never"),
            ("nginx:1.27", Some("Always"), "Always"),
        ];
        for (image, policy, want) in cases {
            let mut c = container(image);
            c.image_pull_policy = policy.map(str::to_string);
            let pod = defaulted(pod_with(c));
            assert_eq!(
                pod.spec.unwrap().containers[0].image_pull_policy.as_deref(),
                Some(*want),
                "image {image:?} policy {policy:?}"
            );
        }
    }

    #[test]
    fn container_defaults_apply_to_init_containers_too() {
        let mut pod = pod_with(container("nginx:1.27"));
        pod.spec.as_mut().unwrap().init_containers = Some(vec![container("busybox")]);
        let spec = defaulted(pod).spec.unwrap();
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            assert_eq!(
                c.termination_message_path.as_deref(),
                Some("/dev/termination-log")
            );
            assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
        }
        assert_eq!(
            spec.init_containers.unwrap()[0]
                .image_pull_policy
                .as_deref(),
            Some("Always")
        );
    }

    #[test]
    fn ports_default_to_tcp_and_host_network_sets_host_port() {
        // (hostNetwork, protocol, hostPort) -> (protocol, hostPort)
        type Case = (
            bool,
            Option<&'static str>,
            Option<i32>,
            &'static str,
            Option<i32>,
        );
        let cases: &[Case] = &[
            (false, None, None, "TCP", None),
            (false, Some(""), None, "TCP", None),
            (false, Some("UDP"), Some(53), "UDP", Some(53)),
            (true, None, None, "TCP", Some(8080)),
            (true, None, Some(0), "TCP", Some(8080)),
            (true, None, Some(9090), "TCP", Some(9090)),
        ];
        for (host_network, protocol, host_port, want_proto, want_host_port) in cases {
            let mut c = container("nginx:1.27");
            c.ports = Some(vec![ContainerPort {
                container_port: 8080,
                protocol: protocol.map(str::to_string),
                host_port: *host_port,
                ..Default::default()
            }]);
            let mut pod = pod_with(c);
            pod.spec.as_mut().unwrap().host_network = Some(*host_network);
            let spec = defaulted(pod).spec.unwrap();
            let port = &spec.containers[0].ports.as_ref().unwrap()[0];
            assert_eq!(port.protocol.as_deref(), Some(*want_proto));
            assert_eq!(port.host_port, *want_host_port);
        }
    }

    #[test]
    fn probe_defaults() {
        let mut c = container("nginx:1.27");
        c.liveness_probe = Some(Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::Int(80),
                ..Default::default()
            }),
            ..Default::default()
        });
        c.readiness_probe = Some(Probe {
            period_seconds: Some(3),
            failure_threshold: Some(0),
            grpc: Some(GRPCAction {
                port: 9000,
                ..Default::default()
            }),
            ..Default::default()
        });
        let spec = defaulted(pod_with(c)).spec.unwrap();
        let c = &spec.containers[0];
        let live = c.liveness_probe.as_ref().unwrap();
        assert_eq!(live.timeout_seconds, Some(1));
        assert_eq!(live.period_seconds, Some(10));
        assert_eq!(live.success_threshold, Some(1));
        assert_eq!(live.failure_threshold, Some(3));
        assert_eq!(live.initial_delay_seconds, None);
        let http = live.http_get.as_ref().unwrap();
        assert_eq!(http.path.as_deref(), Some("/"));
        assert_eq!(http.scheme.as_deref(), Some("HTTP"));
        let ready = c.readiness_probe.as_ref().unwrap();
        assert_eq!(ready.period_seconds, Some(3));
        assert_eq!(ready.failure_threshold, Some(3));
        assert_eq!(ready.grpc.as_ref().unwrap().service.as_deref(), Some(""));
    }

    #[test]
    fn lifecycle_http_get_defaults() {
        let mut c = container("nginx:1.27");
        c.lifecycle = Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                http_get: Some(HTTPGetAction {
                    port: IntOrString::String("http".into()),
                    path: Some("/quit".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let spec = defaulted(pod_with(c)).spec.unwrap();
        let http = spec.containers[0]
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| h.http_get.as_ref())
            .unwrap();
        assert_eq!(http.path.as_deref(), Some("/quit"));
        assert_eq!(http.scheme.as_deref(), Some("HTTP"));
    }

    #[test]
    fn requests_default_from_limits_per_resource() {
        let q = |s: &str| K8sQuantity(s.into());
        // (limits, requests) -> expected requests
        type Rl = &'static [(&'static str, &'static str)];
        let cases: &[(Option<Rl>, Option<Rl>, Option<Rl>)] = &[
            (None, None, None),
            (None, Some(&[("cpu", "100m")]), Some(&[("cpu", "100m")])),
            (
                Some(&[("cpu", "1"), ("memory", "1Gi")]),
                None,
                Some(&[("cpu", "1"), ("memory", "1Gi")]),
            ),
            (
                Some(&[("cpu", "1"), ("memory", "1Gi")]),
                Some(&[("cpu", "250m")]),
                Some(&[("cpu", "250m"), ("memory", "1Gi")]),
            ),
        ];
        let to_map = |rl: Rl| -> BTreeMap<String, K8sQuantity> {
            rl.iter().map(|(k, v)| (k.to_string(), q(v))).collect()
        };
        for (limits, requests, want) in cases {
            let mut c = container("nginx:1.27");
            c.resources = Some(ResourceRequirements {
                limits: limits.map(to_map),
                requests: requests.map(to_map),
                ..Default::default()
            });
            let spec = defaulted(pod_with(c)).spec.unwrap();
            let got = spec.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .requests
                .clone();
            assert_eq!(
                got,
                want.map(to_map),
                "limits {limits:?} requests {requests:?}"
            );
        }
    }

    #[test]
    fn env_field_ref_api_version_defaults_to_v1() {
        let mut c = container("nginx:1.27");
        c.env = Some(vec![EnvVar {
            name: "POD".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: "metadata.name".into(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        let spec = defaulted(pod_with(c)).spec.unwrap();
        let f = spec.containers[0].env.as_ref().unwrap()[0]
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .unwrap();
        assert_eq!(f.api_version.as_deref(), Some("v1"));
    }

    #[test]
    fn volume_defaults() {
        let mut pod = pod_with(container("nginx:1.27"));
        pod.spec.as_mut().unwrap().volumes = Some(vec![
            Volume {
                name: "scratch".into(),
                ..Default::default()
            },
            Volume {
                name: "host".into(),
                host_path: Some(HostPathVolumeSource {
                    path: "/var/log".into(),
                    type_: None,
                }),
                ..Default::default()
            },
            Volume {
                name: "info".into(),
                downward_api: Some(DownwardAPIVolumeSource {
                    items: Some(vec![DownwardAPIVolumeFile {
                        path: "labels".into(),
                        field_ref: Some(ObjectFieldSelector {
                            api_version: None,
                            field_path: "metadata.labels".into(),
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]);
        let vols = defaulted(pod).spec.unwrap().volumes.unwrap();
        assert!(
            vols[0].empty_dir.is_some(),
            "a volume without a source is an emptyDir"
        );
        assert_eq!(
            vols[1].host_path.as_ref().unwrap().type_.as_deref(),
            Some("")
        );
        assert!(vols[1].empty_dir.is_none());
        let d = vols[2].downward_api.as_ref().unwrap();
        assert_eq!(d.default_mode, Some(0o644));
        assert_eq!(
            d.items.as_ref().unwrap()[0]
                .field_ref
                .as_ref()
                .unwrap()
                .api_version
                .as_deref(),
            Some("v1")
        );
    }

    /// `SetDefaults_ImageVolumeSource`: `Always` for `:latest` or no tag, `IfNotPresent`
    /// otherwise; a given policy stays.
    #[test]
    fn image_volume_pull_policy_follows_the_tag() {
        let cases = [
            ("reg.io/data:1", None, "IfNotPresent"),
            ("reg.io/data", None, "Always"),
            ("reg.io/data:latest", None, "Always"),
            ("reg.io/data@sha256:0000000000000000000000000000000000000000000000000000000000000000", None, "IfNotPresent"),
            ("reg.io/data", Some("Never"), "Never"),
        ];
        for (reference, policy, want) in cases {
            let mut pod = pod_with(container("nginx:1.27"));
            pod.spec.as_mut().unwrap().volumes = Some(vec![Volume {
                name: "data".into(),
                image: Some(k8s_openapi::api::core::v1::ImageVolumeSource {
                    reference: Some(reference.into()),
                    pull_policy: policy.map(str::to_string),
                }),
                ..Default::default()
            }]);
            let vols = defaulted(pod).spec.unwrap().volumes.unwrap();
            assert_eq!(
                vols[0].image.as_ref().unwrap().pull_policy.as_deref(),
                Some(want),
                "{reference} {policy:?}"
            );
            assert!(vols[0].empty_dir.is_none());
        }
    }

    #[test]
    fn defaulting_is_idempotent_and_creates_missing_spec() {
        let once = defaulted(Pod::default());
        assert!(once.spec.is_some());
        let twice = defaulted(once.clone());
        assert_eq!(once, twice);
    }
}
