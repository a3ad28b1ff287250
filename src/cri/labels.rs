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
