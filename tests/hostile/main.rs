//! Hostile workloads on the real containerd: a pod that tries, for real, to reach the host or to
//! starve the node through nodelet. Every attack here must fail; `docs/security.md` names each
//! defence and the test below that proves it.
//!
//! One module per attack surface, so each can be read (and run with a filter) on its own:
//! `cargo test --test hostile api_volumes::`.

#[path = "../common/mod.rs"]
mod common;

mod api_volumes;
mod logs;
mod mass_deletion;
mod review_flood;
mod run_as_non_root;
mod spec_values;
mod stream_caps;
mod subpath;
