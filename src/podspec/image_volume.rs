//! Image volumes (`spec.volumes[].image`, KEP-4639): an OCI image, pulled with the pod's
//! credentials as a container image is, mounted read-only into the containers that mount the
//! volume, by the runtime (the CRI `Mount.image`). What the spec says of them: which volumes
//! are image volumes, which of them a container mounts, and the effective pull policy (the
//! API's default from the reference's tag: `Always` for `:latest` or no tag, `IfNotPresent`
//! otherwise). Pure.

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
