//! (in progress)
//! Deciding what to do with a pod (`compute_pod_actions`) and doing it (executor).

pub mod container_config;
pub mod env;
pub mod restart;
pub mod sandbox_config;
