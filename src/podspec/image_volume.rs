//! Image volumes (`spec.volumes[].image`, KEP-4639): an OCI image, pulled with the pod's
//! credentials as a container image is, mounted read-only into the containers that mount the
//! volume, by the runtime (the CRI `Mount.image`). What the spec says of them: which volumes
//! are image volumes, which of them a container mounts, and the effective pull policy (the
//! API's default from the reference's tag: `Always` for `:latest` or no tag, `IfNotPresent`
//! otherwise); and what a runtime does with them, judged from its CRI `Version` answer (the
//! `Status` declares nothing about it): [`image_volume_support`], [`check_container`]. Pure.

use k8s_openapi::api::core::v1::{Container, ImageVolumeSource, Pod};

/// The source of the image volume `name` of `pod` (`None`: no such volume, or another kind).
pub fn image_volume<'a>(pod: &'a Pod, name: &str) -> Option<&'a ImageVolumeSource> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .find(|v| v.name == name)
        .and_then(|v| v.image.as_ref())
}

/// The pod's image volumes with their index in `spec.volumes`, in order.
pub fn image_volumes(pod: &Pod) -> Vec<(usize, &str, &ImageVolumeSource)> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .enumerate()
        .filter_map(|(i, v)| v.image.as_ref().map(|img| (i, v.name.as_str(), img)))
        .collect()
}

/// The image volumes `container` mounts, each once, in the order of its volumeMounts.
pub fn mounted_by<'a>(
    pod: &'a Pod,
    container: &Container,
) -> Vec<(&'a str, &'a ImageVolumeSource)> {
    let mut out: Vec<(&str, &ImageVolumeSource)> = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        if out.iter().any(|(n, _)| *n == m.name) {
            continue;
        }
        let found = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .find(|v| v.name == m.name)
            .and_then(|v| v.image.as_ref().map(|img| (v.name.as_str(), img)));
        if let Some(found) = found {
            out.push(found);
        }
    }
    out
}

/// The image reference of `source` (`""` when unset; the API server requires one).
pub fn reference(source: &ImageVolumeSource) -> &str {
    source.reference.as_deref().unwrap_or_default()
}

/// The pull policy for `image` when none is given (`SetDefaults_Container`,
/// `SetDefaults_ImageVolumeSource`): `IfNotPresent` for a digest or a tag other than
/// `latest`, `Always` otherwise.
pub fn default_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || (last.contains(':') && !last.ends_with(":latest")) {
        "IfNotPresent"
    } else {
        "Always"
    }
}

/// The effective pull policy of an image volume: its `pullPolicy`, else the default from its
/// reference's tag.
pub fn pull_policy(source: &ImageVolumeSource) -> &str {
    match source.pull_policy.as_deref() {
        Some(p) if !p.is_empty() => p,
        _ => default_pull_policy(reference(source)),
    }
}

/// What a runtime does with image volumes, from its `Version` answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageVolumeSupport {
    /// `<runtime_name> <runtime_version>`, for messages.
    pub runtime: String,
    /// It mounts `Mount.image` (containerd 2.1 and newer, CRI-O 1.31 and newer).
    pub volumes: bool,
    /// It mounts `Mount.image_sub_path` (containerd 2.2 and newer, CRI-O 1.33 and newer).
    pub sub_path: bool,
}

/// `major.minor` of a runtime's version (`v2.1.9`, `2.1.9~ds1-1`, `1.6.20`).
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let v = version.trim().trim_start_matches('v');
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// What the runtime `runtime_name` at `runtime_version` (the CRI `Version` answer) does
/// with image volumes. An unknown runtime or version mounts none.
pub fn image_volume_support(runtime_name: &str, runtime_version: &str) -> ImageVolumeSupport {
    let (volumes_from, sub_path_from) = match runtime_name {
        "containerd" => ((2, 1), (2, 2)),
        "cri-o" => ((1, 31), (1, 33)),
        _ => ((u32::MAX, 0), (u32::MAX, 0)),
    };
    let v = major_minor(runtime_version);
    ImageVolumeSupport {
        runtime: format!("{runtime_name} {runtime_version}"),
        volumes: v.is_some_and(|v| v >= volumes_from),
        sub_path: v.is_some_and(|v| v >= sub_path_from),
    }
}

/// The reason for a pod with an image volume while the `ImageVolume` gate is off.
pub const GATE_OFF: &str = "the feature gate \"ImageVolume\" is disabled on this node";

/// The reason for an image volume on a runtime that does not mount them.
pub fn no_volumes_reason(support: &ImageVolumeSupport) -> String {
    format!(
        "the container runtime ({}) does not mount image volumes (the CRI's Mount.image: containerd 2.1 or CRI-O 1.31 and newer), it would start the containers without the volume",
        support.runtime
    )
}

/// The reason for a subPath of an image volume on a runtime that does not mount one.
pub fn no_sub_path_reason(support: &ImageVolumeSupport) -> String {
    format!(
        "the container runtime ({}) does not mount a subPath of an image volume (the CRI's Mount.image_sub_path: containerd 2.2 or CRI-O 1.33 and newer), it would mount the whole image",
        support.runtime
    )
}

/// A value of an image volume nodelet will not hand the runtime, worded as
/// `field_support`'s refusals: `<field>: Unsupported value: <value>: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: Unsupported value: {value}: {reason}")]
pub struct Refusal {
    pub field: String,
    pub value: String,
    pub reason: String,
}

/// Whether the runtime that does what `support` says can mount `container`'s image volumes
/// as its volumeMounts ask: every image volume it mounts (`spec.volumes[i].image` named), and
/// a subPath or subPathExpr of one only where the runtime knows `Mount.image_sub_path`.
pub fn check_container(
    pod: &Pod,
    container: &Container,
    support: &ImageVolumeSupport,
) -> Result<(), Refusal> {
    let base = crate::podspec::container_field_path(pod, &container.name);
    for (m, mount) in container.volume_mounts.iter().flatten().enumerate() {
        let Some(source) = image_volume(pod, &mount.name) else {
            continue;
        };
        if !support.volumes {
            let index = pod
                .spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .position(|v| v.name == mount.name)
                .unwrap_or_default();
            return Err(Refusal {
                field: format!("spec.volumes[{index}].image"),
                value: reference(source).to_string(),
                reason: no_volumes_reason(support),
            });
        }
        if support.sub_path {
            continue;
        }
        for (name, value) in [
            ("subPath", mount.sub_path.as_deref()),
            ("subPathExpr", mount.sub_path_expr.as_deref()),
        ] {
            if let Some(value) = value.filter(|v| !v.is_empty()) {
                return Err(Refusal {
                    field: format!("{base}.volumeMounts[{m}].{name}"),
                    value: value.to_string(),
                    reason: no_sub_path_reason(support),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_yaml::from_str(
            "metadata: {name: p}\nspec:\n  volumes:\n  - {name: a, image: {reference: 'reg.io/a:1'}}\n  - {name: e, emptyDir: {}}\n  - {name: b, image: {reference: 'reg.io/b', pullPolicy: Never}}\n  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: b, mountPath: /b}\n    - {name: e, mountPath: /e}\n    - {name: b, mountPath: /b2}\n    - {name: a, mountPath: /a}\n  - name: d\n    image: i\n",
        )
        .expect("pod")
    }

    #[test]
    fn image_volumes_and_what_a_container_mounts() {
        let p = pod();
        let spec = p.spec.as_ref().expect("spec");
        let all: Vec<(usize, &str)> = image_volumes(&p).iter().map(|(i, n, _)| (*i, *n)).collect();
        assert_eq!(all, vec![(0, "a"), (2, "b")]);
        let names = |c: &Container| -> Vec<&str> {
            mounted_by(&p, c)
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&spec.containers[0]), vec!["b", "a"]);
        assert!(names(&spec.containers[1]).is_empty());
        assert_eq!(image_volume(&p, "a").map(reference), Some("reg.io/a:1"));
        assert!(image_volume(&p, "e").is_none());
        assert!(image_volume(&p, "zz").is_none());
    }

    #[test]
    fn image_volume_support_from_the_runtime_version() {
        let cases = [
            ("containerd", "v2.1.9", true, false),
            ("containerd", "2.1.9~ds1-1", true, false),
            ("containerd", "v2.2.0", true, true),
            ("containerd", "v3.0.1", true, true),
            ("containerd", "v2.0.5", false, false),
            ("containerd", "1.6.20~ds1-1+deb12u1", false, false),
            ("containerd", "1.7.27", false, false),
            ("containerd", "", false, false),
            ("containerd", "devel", false, false),
            ("cri-o", "1.31.0", true, false),
            ("cri-o", "1.33.2", true, true),
            ("cri-o", "1.30.4", false, false),
            ("other", "9.9.9", false, false),
        ];
        for (name, version, volumes, sub_path) in cases {
            let got = image_volume_support(name, version);
            assert_eq!(
                (got.volumes, got.sub_path),
                (volumes, sub_path),
                "{name} {version}"
            );
            assert_eq!(got.runtime, format!("{name} {version}"));
        }
    }

    /// Every kind of container, ephemeral ones included (checked when they start): an image
    /// volume needs a runtime that mounts them, a subPath of one a runtime that knows
    /// `image_sub_path`; other volumes' subPaths are not this check's.
    #[test]
    fn check_container_table() {
        let p: Pod = serde_yaml::from_str(
            "metadata: {name: p}\nspec:\n  volumes:\n  - {name: e, emptyDir: {}}\n  - {name: data, image: {reference: 'reg.io/data:1'}}\n  containers:\n  - name: plain\n    image: i\n    volumeMounts: [{name: e, mountPath: /e, subPath: x}]\n  - name: whole\n    image: i\n    volumeMounts: [{name: data, mountPath: /d}]\n  initContainers:\n  - name: sub\n    image: i\n    volumeMounts: [{name: e, mountPath: /e}, {name: data, mountPath: /d, subPath: bin}]\n  ephemeralContainers:\n  - name: debug\n    image: i\n    volumeMounts: [{name: data, mountPath: /d, subPathExpr: $(X)}]\n",
        )
        .expect("pod");
        let spec = p.spec.as_ref().expect("spec");
        let debug = spec.ephemeral_containers.as_ref().expect("ephemeral")[0].clone();
        let debug: Container =
            serde_json::from_value(serde_json::to_value(debug).unwrap()).unwrap();
        let containers = [
            spec.containers[0].clone(),
            spec.containers[1].clone(),
            spec.init_containers.as_ref().expect("init")[0].clone(),
            debug,
        ];
        let v16 = image_volume_support("containerd", "1.6.20");
        let v21 = image_volume_support("containerd", "v2.1.9");
        let v22 = image_volume_support("containerd", "v2.2.0");
        let refused = |field: &str, value: &str, reason: String| {
            Err(Refusal {
                field: field.into(),
                value: value.into(),
                reason,
            })
        };
        let cases = [
            (0, &v16, Ok(())),
            (
                1,
                &v16,
                refused(
                    "spec.volumes[1].image",
                    "reg.io/data:1",
                    no_volumes_reason(&v16),
                ),
            ),
            (1, &v21, Ok(())),
            (
                2,
                &v21,
                refused(
                    "spec.initContainers[0].volumeMounts[1].subPath",
                    "bin",
                    no_sub_path_reason(&v21),
                ),
            ),
            (2, &v22, Ok(())),
            (
                3,
                &v21,
                refused(
                    "spec.ephemeralContainers[0].volumeMounts[0].subPathExpr",
                    "$(X)",
                    no_sub_path_reason(&v21),
                ),
            ),
            (
                3,
                &v16,
                refused(
                    "spec.volumes[1].image",
                    "reg.io/data:1",
                    no_volumes_reason(&v16),
                ),
            ),
            (3, &v22, Ok(())),
        ];
        for (i, support, want) in cases {
            assert_eq!(
                check_container(&p, &containers[i], support),
                want,
                "{} on {}",
                containers[i].name,
                support.runtime
            );
        }
    }

    #[test]
    fn pull_policy_table() {
        let cases = [
            ("reg.io/a:1", None, "IfNotPresent"),
            ("reg.io/a:latest", None, "Always"),
            ("reg.io/a", None, "Always"),
            ("localhost:5000/a", None, "Always"),
            ("localhost:5000/a:2", None, "IfNotPresent"),
            ("reg.io/a@sha256:0123", None, "IfNotPresent"),
            ("reg.io/a", Some(""), "Always"),
            ("reg.io/a", Some("Never"), "Never"),
            ("reg.io/a:1", Some("Always"), "Always"),
        ];
        for (reference, policy, want) in cases {
            let source = ImageVolumeSource {
                reference: Some(reference.into()),
                pull_policy: policy.map(str::to_string),
            };
            assert_eq!(pull_policy(&source), want, "{reference} {policy:?}");
        }
    }
}
