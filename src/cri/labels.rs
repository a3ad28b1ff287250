//! Labels and annotations nodelet puts on sandboxes and containers. They are the kubelet's own
//! keys, so runtime tools (crictl, ctr) show nodelet's pods the way they show the kubelet's, and a
//! restarted nodelet can adopt what is already running.

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// nodelet's own label: the node that owns the sandbox or container. A nodelet only adopts and
/// cleans up objects carrying its node name, so several nodelets (or test instances) can share one
/// containerd without touching each other's pods, and sandboxes created by other CRI clients
/// (crictl) are left alone.
pub const NODE_NAME: &str = "io.nodelet.node-name";

pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const CONTAINER_TERMINATION_MESSAGE_PATH: &str =
    "io.kubernetes.container.terminationMessagePath";
pub const CONTAINER_TERMINATION_MESSAGE_POLICY: &str =
    "io.kubernetes.container.terminationMessagePolicy";
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Which list of the pod spec the container belongs to (`init` or `regular`); nodelet's own.
pub const CONTAINER_TYPE: &str = "io.nodelet.container.type";

/// The pseudo container name the kubelet uses for the sandbox.
pub const POD_INFRA_CONTAINER_NAME: &str = "POD";

/// The pod's `metadata.deletionGracePeriodSeconds` when the container was created (kubelet).
pub const POD_DELETION_GRACE_PERIOD: &str = "io.kubernetes.pod.deletionGracePeriod";
/// The container's preStop handler as JSON, so it can run after a restart without the spec
/// (kubelet).
pub const CONTAINER_PRESTOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";

/// nodelet's own container label: the images (IDs) the container's image volumes mount,
/// comma-separated, so image GC counts them in use as long as the container exists, across
/// restarts of nodelet.
pub const IMAGE_VOLUMES: &str = "io.nodelet.image-volumes";

/// The [`IMAGE_VOLUMES`] value for `images` (`None`: no image volumes, no label).
pub fn image_volumes_label<'a>(images: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut list: Vec<&str> = images.into_iter().filter(|i| !i.is_empty()).collect();
    list.sort_unstable();
    list.dedup();
    (!list.is_empty()).then(|| list.join(","))
}

/// The images an [`IMAGE_VOLUMES`] label value names.
pub fn image_volumes_of(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|i| !i.is_empty())
}

#[cfg(test)]
mod image_volume_label_tests {
    use super::*;

    #[test]
    fn image_volumes_label_round_trip() {
        let cases: &[(&[&str], Option<&str>)] = &[
            (&[], None),
            (&[""], None),
            (
                &["sha256:b", "sha256:a", "sha256:b"],
                Some("sha256:a,sha256:b"),
            ),
        ];
        for (images, want) in cases {
            let got = image_volumes_label(images.iter().copied());
            assert_eq!(got.as_deref(), *want, "{images:?}");
            if let Some(v) = got {
                let mut back: Vec<&str> = image_volumes_of(&v).collect();
                let mut sorted: Vec<&str> =
                    images.iter().copied().filter(|i| !i.is_empty()).collect();
                sorted.sort_unstable();
                sorted.dedup();
                back.sort_unstable();
                assert_eq!(back, sorted);
            }
        }
        assert_eq!(
            image_volumes_of(" a, ,b").collect::<Vec<_>>(),
            vec!["a", "b"]
        );
    }
}
