//! The node's certificates, as the kubelet keeps them: TLS bootstrap of the client certificate
//! from a bootstrap kubeconfig (`bootstrap`), CertificateSigningRequests (`csr`), the files in
//! `--cert-dir` (`store`), and the managers that renew the client and serving certificates at
//! 70–90 % of their lifetime (`manager`, with the schedule as pure functions in `schedule`).
//! Readers get each new pair through a `tokio::sync::watch` channel: the API client builds new
//! connections with it ([`rotating`]), the kubelet API serves it
//! (`crate::server::tls`), neither restarts.

pub mod bootstrap;
pub mod csr;
pub mod manager;
pub mod pair;
pub mod rotating;
pub mod schedule;
pub mod store;

pub use manager::{CertificateManager, Kind};
pub use pair::{CertifiedPair, SharedPair};
pub use schedule::Template;
