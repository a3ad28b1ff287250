//! A process's resident memory as the kernel reports it.

/// `VmRSS` of `/proc/PID/status` text, in KiB.
pub fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// `VmRSS` of process `pid`, in KiB; `None` when it has gone (or is a kernel thread).
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    parse_vm_rss_kib(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_table() {
        for (status, want) in [
            (
                "Name:\tnodelet\nVmHWM:\t  40000 kB\nVmRSS:\t   36412 kB\n",
                Some(36412),
            ),
            ("VmRSS:\t0 kB", Some(0)),
            ("Name:\tkthreadd\nState:\tS (sleeping)\n", None),
            ("VmRSS:\tlots kB\n", None),
        ] {
            assert_eq!(parse_vm_rss_kib(status), want, "{status:?}");
        }
    }

    #[test]
    fn this_process_has_resident_memory() {
        assert!(vm_rss_kib(std::process::id()).is_some_and(|kib| kib > 0));
    }
}
