//! The pod manager (desired pods from every source, admitted through the
//! `crate::lifecycle::admission` handlers) and the pod workers (one task per pod UID, each
//! running the state machine of [`worker_state`]), which implement `crate::lifecycle`'s
//! `PodKiller` (the seam that ends a pod) and `LivePods`.

pub mod admission;
pub mod apparmor;
pub mod field_admission;
pub mod manager;
pub mod mirror;
pub mod runtime_features;
pub mod sysctls;
pub mod worker_state;
pub mod workers;
