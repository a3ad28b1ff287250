//! nodelet: a node agent that does the kubelet's job on one Linux node.
//!
//! Data flows one way (see `../shared/DESIGN.md` and `docs/architecture.md`):
//! pod sources → pod manager → one pod worker per UID → CRI runtime,
//! PLEG and probes wake workers, workers publish status to the status manager,
//! which the local API (and later the API server sync) reads.

pub mod agent;
pub mod allocator;
pub mod backoff;
pub mod certificate;
pub mod cgroup;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod cri;
pub mod csi;
pub mod events;
pub mod eviction;
pub mod gc;
pub mod images;
pub mod lifecycle;
pub mod logs;
pub mod metrics;
pub mod node;
pub mod nodeshutdown;
pub mod objects;
pub mod places;
pub mod pleg;
pub mod plugins;
pub mod pod;
pub mod podspec;
pub mod probe;
pub mod quantity;
pub mod query;
pub mod redact;
pub mod server;
pub mod source;
pub mod stats;
pub mod status;
pub mod sync;
pub mod unix_grpc;
pub mod userns;
pub mod volume;
pub mod watchdog;
