//! The one loopback port policy of tests and benchmarks.

use std::sync::atomic::{AtomicU32, Ordering};

/// Ports handed out by [`free_port`]: below Linux's ephemeral range (32768–60999), so that no
/// `bind(0)` or outgoing connection of a parallel test can take one between the check here and
/// the process that binds it; distinct within this process (a counter) and across the test
/// binaries cargo runs one after another (an offset from the process id).
pub const PORT_RANGE: std::ops::Range<u32> = 20_000..32_000;
static NEXT_PORT: AtomicU32 = AtomicU32::new(0);

/// A loopback port that is free now and that no other caller in this process is given.
pub fn free_port() -> u16 {
    let span = PORT_RANGE.end - PORT_RANGE.start;
    let offset = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let n = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        let port = (PORT_RANGE.start + (offset + n) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {PORT_RANGE:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
        for p in ports {
            assert!(PORT_RANGE.contains(&u32::from(p)), "{p}");
            assert!(p < 32_768, "{p} is in the ephemeral range");
        }
    }

    #[test]
    fn a_port_in_use_is_skipped() {
        // Hold the next port the policy would try, and see that it is not handed out.
        let span = PORT_RANGE.end - PORT_RANGE.start;
        let offset = std::process::id().wrapping_mul(7919) % span;
        let next = NEXT_PORT.load(Ordering::Relaxed);
        let held_port = (PORT_RANGE.start + (offset + next) % span) as u16;
        let Ok(_held) = std::net::TcpListener::bind(("127.0.0.1", held_port)) else {
            return; // someone else holds it already: skipped all the same
        };
        // Parallel tests of this binary may take ports meanwhile; none may be the held one.
        for _ in 0..5 {
            assert_ne!(free_port(), held_port);
        }
    }
}
