//! Node-pressure eviction (issue 13), decisions first: the thresholds and their pure pass
//! ([`threshold`]), and the ranking, the critical-pod rule and the kubelet's message
//! ([`rank`]). The manager that reads the signals and ends pods through `kill_pod` builds on
//! these; it is not wired in yet.

pub mod manager;
pub mod rank;
pub mod signals;
pub mod threshold;
