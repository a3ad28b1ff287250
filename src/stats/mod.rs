//! Resource usage of the node, its pods and their containers: the readers the eviction manager
//! uses for its signals, and the Summary API (`/stats/summary`) built from them.
//!
//! - [`cgroup`]: one cgroup's CPU time, memory (usage, working set, RSS, faults), tasks and
//!   pressure, from cgroup v2 files (a small v1 reader for hybrid hosts); pure parsers beside
//!   a reader that takes the mount point.
//! - [`psi`]: the kernel's pressure-stall format (`/proc/pressure/*`, `*.pressure`).
//! - [`node`]: `/proc` (meminfo, loadavg, uptime, task limits, pressure; the root is a
//!   parameter) and statfs.
//! - [`container_cgroup`]: a container's cgroup from the runtime's OCI spec (both drivers).
//! - [`cpu_rate`]: `usageNanoCores` from the previous sample of each cgroup.
//! - [`volumes`]: `du` of a pod's volumes, at most once a minute per pod.
//! - [`cadvisor`]: `/metrics/cadvisor` (cAdvisor's container series) from the same gathering.
//! - [`resource_metrics`]: `/metrics/resource` (the kubelet's resource metrics) from a
//!   Summary; [`top`]: the `kubectl top` tables `nodelet top` prints from one.
//! - [`summary`]: the Summary API types (`stats/v1alpha1`), [`convert`]: readings → those
//!   types, [`provider`]: one request, from the CRI lists to the JSON.

pub mod cadvisor;
pub mod cgroup;
pub mod container_cgroup;
pub mod convert;
pub mod cpu_rate;
pub mod csi_volumes;
pub mod machine;
pub mod node;
pub mod provider;
#[cfg(test)]
mod provider_tests;
pub mod psi;
pub mod resource_metrics;
pub mod summary;
pub mod top;
pub mod volumes;

use std::path::PathBuf;

pub use provider::{Scope, StatsSettings, SummaryProvider};
pub use summary::Summary;

/// Errors reading stats. Each names the file (or the runtime call) that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("reading {path}: {source}")]
    Proc {
        path: PathBuf,
        #[source]
        source: procfs::ProcError,
    },
    /// The cgroup's directory does not exist (its container exited, or it was never made).
    #[error("cgroup {path} does not exist")]
    NoCgroup { path: PathBuf },
    #[error("cgroup path {path:?} leaves the cgroup hierarchy")]
    BadCgroupPath { path: String },
    #[error(transparent)]
    Runtime(#[from] crate::cri::Error),
    #[error("stats reader task: {0}")]
    Task(String),
    /// The source serves Summaries only (a fixed Summary in tests): no cgroup readings.
    #[error("{0} has no cgroup readings for /metrics/cadvisor")]
    NoCgroupReadings(&'static str),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What `/stats/summary` serves from (the [`SummaryProvider`]; a fixed value in API tests).
#[async_trait::async_trait]
pub trait SummarySource: Send + Sync {
    async fn summary(&self, scope: Scope) -> Result<Summary>;

    /// The cgroups' readings `/metrics/cadvisor` renders, from the same gathering as a
    /// Summary. A source that holds only Summaries (a test's fixed one) has none.
    async fn cadvisor(&self) -> Result<cadvisor::CadvisorInput> {
        Err(Error::NoCgroupReadings("this Summary source"))
    }
}

#[async_trait::async_trait]
impl SummarySource for SummaryProvider {
    async fn summary(&self, scope: Scope) -> Result<Summary> {
        SummaryProvider::summary(self, scope).await
    }

    async fn cadvisor(&self) -> Result<cadvisor::CadvisorInput> {
        SummaryProvider::cadvisor(self).await
    }
}
