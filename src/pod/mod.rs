//! The pod manager (desired pods from every source), the pod workers (one task per pod UID,
//! each running the state machine of [`worker_state`]) and [`kill`], the seam that ends a pod.

pub mod admission;
pub mod kill;
pub mod manager;
pub mod mirror;
pub mod worker_state;
pub mod workers;

pub use kill::{KillHandle, PodKiller, StatusMutation};
pub use manager::PodManager;
pub use workers::{PodWork, PodWorkers};
