//! The seams between the node loops, as the kubelet's `pkg/kubelet/lifecycle`: the traits and
//! small views through which one loop acts on, or reads, another without importing it. The
//! loops that implement them (`pod`, `eviction`, `nodeshutdown`) and the ones that use them sit
//! above; the composition root (`agent`) hands each user its implementer.
//!
//! * [`kill`]: [`kill::PodKiller`], the one way to end a pod, and its [`kill::KillHandle`].
//! * [`admission`]: [`admission::PodAdmitHandler`], one admission check (node pressure, node
//!   shutdown, the node's predicates); the pod manager asks a list of them in order.
//! * [`pods`]: which pods are running here ([`pods::ActivePods`] for eviction and node
//!   shutdown, [`pods::LivePods`] for garbage collection).
//! * [`pressure`]: [`pressure::Pressure`], the resource pressures eviction reports to the node
//!   status.
//! * [`shutdown`]: [`shutdown::ShutdownView`], whether the node is shutting down, with the
//!   reason and messages admission and the node status give for it.

pub mod admission;
pub mod kill;
pub mod pods;
pub mod pressure;
pub mod shutdown;
