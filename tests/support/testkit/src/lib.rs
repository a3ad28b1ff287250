//! What nodelet's integration tests (`tests/common`), VM scenarios (`tests/vm`) and benchmarks
//! (`benches/node_bench`) share once a nodelet runs: its read-only HTTP API ([`api`]), one
//! Prometheus-text parser ([`prom`]), one loopback port policy ([`port`]), pod status helpers
//! ([`pod`]), a node's identity in a real cluster ([`cluster`]), `VmRSS` and CPU time ([`proc`]) and log tails ([`tail`]). How a nodelet is launched (a process,
//! a systemd unit in a VM, a release binary for a benchmark) stays with each of them.
//!
//! The kit knows nothing of nodelet's own code: it reads what a client of the node sees, so a
//! bug in nodelet cannot hide in a helper that shares it.

pub mod api;
pub mod cluster;
pub mod pod;
pub mod port;
pub mod proc;
pub mod prom;

/// The last `lines` lines of `s` (a log, a console), for failure messages.
pub fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::tail;

    #[test]
    fn tail_keeps_the_last_lines() {
        for (text, lines, want) in [
            ("a\nb\nc", 2, "b\nc"),
            ("a\nb\nc", 5, "a\nb\nc"),
            ("a\nb\nc\n", 1, "c"),
            ("", 3, ""),
            ("a", 0, ""),
        ] {
            assert_eq!(tail(text, lines), want, "{text:?} {lines}");
        }
    }
}
