//! Deciding what to do with a pod (`compute_pod_actions`) and doing it (executor), plus the pure
//! builders of the CRI configs the executor sends and what a pod spec implies (`plan`).
//!
//! Inside `sync` the files import one another in one direction only (no cycle):
//! `executor` → `start` → `stop` → `hooks`/`grace`/`recorder`; `executor` → `sandbox` → `plan` →
//! the config builders; `memory`, `settings` and `error` are imported, and import nothing of
//! `sync` but `plan`; `termination` (the termination messages `executor` adds to what the
//! runtime reports) imports nothing of `sync`; `allocation` (in-place resize: what is
//! allocated and applied per pod) and `resize` (the pure order of a resize's steps) import
//! nothing of `sync`, `executor` imports both.

pub mod actions;
pub mod allocation;
pub mod container_config;
pub mod env_objects;
pub mod error;
pub mod executor;
pub mod grace;
pub mod hooks;
pub mod memory;
pub mod plan;
pub mod recorder;
pub mod resize;
pub mod sandbox;
pub mod sandbox_config;
pub mod settings;
pub mod start;
pub mod stop;
pub mod termination;
