//! Node-pressure eviction (issue 13), decisions first: the thresholds and their pure pass
//! ([`threshold`]), the signal readings from the stats summary ([`signals`]), and the
//! ranking, the critical-pod rule and the kubelet's message ([`rank`]). The [`manager`] runs
//! the passes and ends pods through `kill_pod`; [`notify`] wakes it between its passes (a
//! cheap memory check, PSI triggers, `memory.events` changes).

pub mod local_storage;
pub mod manager;
pub mod notify;
pub mod rank;
pub mod signals;
pub mod threshold;
