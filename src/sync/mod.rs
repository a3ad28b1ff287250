//! Deciding what to do with a pod (`compute_pod_actions`) and doing it (executor), plus the pure
//! builders of the CRI configs the executor sends.

pub mod actions;
pub mod container_config;
pub mod executor;
pub mod hooks;
pub mod kill;
pub mod sandbox_config;
pub mod start;
pub mod stop;
