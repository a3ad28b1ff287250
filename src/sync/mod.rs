//! Deciding what to do with a pod (`compute_pod_actions`) and doing it (executor).

pub mod actions;
pub mod restart;
