//! The pod manager (desired pods from every source) and the pod workers (one task per pod UID).

pub mod admission;
pub mod manager;
pub mod mirror;
pub mod workers;

pub use manager::PodManager;
pub use workers::{PodWork, PodWorkers};
