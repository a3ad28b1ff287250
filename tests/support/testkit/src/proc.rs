//! A process's resident memory and CPU time as the kernel reports them.

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

/// The CPU times of `/proc/PID/stat` (or `/proc/PID/task/TID/stat`), in clock ticks: fields 14
/// to 17 (`utime`, `stime`, `cutime`, `cstime`). For a process they cover all its threads, the
/// ones that have exited too; `cutime`/`cstime` are its children it has waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatTimes {
    pub utime: u64,
    pub stime: u64,
    pub cutime: u64,
    pub cstime: u64,
}

/// The command name of a stat line: between the first `(` and the last `)` (it may hold both,
/// and spaces).
pub fn parse_stat_comm(stat: &str) -> Option<&str> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    (open < close).then(|| &stat[open + 1..close])
}

/// The CPU times of a stat line. The fields are read after the last `)`, so a command name
/// with spaces or parentheses (`(tokio) (w 1)`) cannot shift them.
pub fn parse_stat_times(stat: &str) -> Option<StatTimes> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the `)` come field 3 (`state`) onwards: field N is at index N - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(StatTimes {
        utime: field(14)?,
        stime: field(15)?,
        cutime: field(16)?,
        cstime: field(17)?,
    })
}

/// `voluntary_ctxt_switches + nonvoluntary_ctxt_switches` of `/proc/PID/task/TID/status` text:
/// how often the thread left the CPU, most of them to sleep and be woken again.
pub fn parse_ctxt_switches(status: &str) -> Option<u64> {
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .parse()
            .ok()
    };
    Some(field("voluntary_ctxt_switches:")? + field("nonvoluntary_ctxt_switches:")?)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of [`StatTimes`].
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a configuration value; it takes no pointers and has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(ticks > 0, "sysconf(_SC_CLK_TCK) = {ticks}");
    ticks as u64
}

/// One thread's share of a [`CpuSample`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSample {
    pub comm: String,
    /// `utime + stime`, clock ticks.
    pub ticks: u64,
    /// Context switches so far ([`parse_ctxt_switches`]).
    pub switches: u64,
}

/// A process's CPU times at one moment, and each of its threads'.
#[derive(Debug, Clone)]
pub struct CpuSample {
    pub at: std::time::Instant,
    pub process: StatTimes,
    pub threads: std::collections::BTreeMap<u32, ThreadSample>,
}

/// The CPU times of process `pid` now; `None` when it has gone (or is a zombie: its times no
/// longer move, which must not pass for idleness).
pub fn cpu_sample(pid: u32) -> Option<CpuSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    let process = parse_stat_times(&stat)?;
    let mut threads = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread may end between the listing and the reads: it is left out.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let (Some(times), Some(comm), Some(switches)) = (
            parse_stat_times(&stat),
            parse_stat_comm(&stat),
            parse_ctxt_switches(&status),
        ) else {
            continue;
        };
        threads.insert(
            tid,
            ThreadSample {
                comm: comm.to_string(),
                ticks: times.utime + times.stime,
                switches,
            },
        );
    }
    Some(CpuSample {
        at: std::time::Instant::now(),
        process,
        threads,
    })
}

/// One thread's CPU time and context switches between two samples.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadUsage {
    pub tid: u32,
    pub comm: String,
    pub cpu: std::time::Duration,
    pub switches: u64,
}

/// What a process spent between two [`CpuSample`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuUsage {
    pub wall: std::time::Duration,
    /// `utime + stime` of all its threads.
    pub own: std::time::Duration,
    /// `cutime + cstime`: children it ran and waited for meanwhile.
    pub children: std::time::Duration,
    /// Context switches of the threads present in both samples (a thread that came or went
    /// meanwhile is not counted): roughly, how often it was woken.
    pub switches: u64,
    /// The threads present in both samples, the busiest first.
    pub threads: Vec<ThreadUsage>,
}

impl CpuUsage {
    /// CPU time (the process's own and its children's) per wall time: 1.0 is one core.
    pub fn cores(&self) -> f64 {
        (self.own + self.children).as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }

    /// Context switches per second of wall time.
    pub fn switches_per_second(&self) -> f64 {
        self.switches as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// One line for a log or a failure message, then the busiest `threads` threads.
    pub fn report(&self, threads: usize) -> String {
        let mut s = format!(
            "{:.3} s CPU ({:.3} s own, {:.3} s children) in {:.1} s wall = {:.2}% of a core; \
             {} context switches ({:.0}/s)",
            (self.own + self.children).as_secs_f64(),
            self.own.as_secs_f64(),
            self.children.as_secs_f64(),
            self.wall.as_secs_f64(),
            self.cores() * 100.0,
            self.switches,
            self.switches_per_second(),
        );
        for t in self.threads.iter().take(threads) {
            s.push_str(&format!(
                "\n  thread {} {:?}: {:.3} s CPU, {} context switches",
                t.tid,
                t.comm,
                t.cpu.as_secs_f64(),
                t.switches
            ));
        }
        s
    }
}

/// What the process spent from `before` to `after`, with `ticks_per_second` clock ticks a
/// second ([`clock_ticks_per_second`]).
pub fn cpu_usage(before: &CpuSample, after: &CpuSample, ticks_per_second: u64) -> CpuUsage {
    let time = |ticks: u64| {
        std::time::Duration::from_nanos(
            (u128::from(ticks) * 1_000_000_000 / u128::from(ticks_per_second.max(1))) as u64,
        )
    };
    let (b, a) = (before.process, after.process);
    let own = (a.utime + a.stime).saturating_sub(b.utime + b.stime);
    let children = (a.cutime + a.cstime).saturating_sub(b.cutime + b.cstime);
    let mut threads: Vec<ThreadUsage> = after
        .threads
        .iter()
        .filter_map(|(tid, t)| {
            let was = before.threads.get(tid)?;
            Some(ThreadUsage {
                tid: *tid,
                comm: t.comm.clone(),
                cpu: time(t.ticks.saturating_sub(was.ticks)),
                switches: t.switches.saturating_sub(was.switches),
            })
        })
        .collect();
    threads.sort_by(|x, y| (y.cpu, y.switches, x.tid).cmp(&(x.cpu, x.switches, y.tid)));
    CpuUsage {
        wall: after.at.saturating_duration_since(before.at),
        own: time(own),
        children: time(children),
        switches: threads.iter().map(|t| t.switches).sum(),
        threads,
    }
}

/// Samples process `pid`, waits `window`, samples again: what it spent meanwhile. Fails (the
/// test) when the process is gone at either end: a dead process spends nothing.
pub async fn measure_cpu(pid: u32, window: std::time::Duration) -> CpuUsage {
    let ticks = clock_ticks_per_second();
    let before = cpu_sample(pid).unwrap_or_else(|| panic!("process {pid} is not running"));
    tokio::time::sleep(window).await;
    let after = cpu_sample(pid)
        .unwrap_or_else(|| panic!("process {pid} ended during the {window:?} CPU measurement"));
    cpu_usage(&before, &after, ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real line of a tokio worker, and the same with a command name that holds what a naive
    // split would take for fields: spaces, parentheses and a `)` followed by numbers.
    const STAT: &str = "4242 (tokio-runtime-w) S 1 4242 4242 0 -1 4194624 2500 0 0 0 \
                        731 219 5 7 20 0 9 0 12345 1000000 3000 18446744073709551615 \
                        1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn stat_times_are_fields_14_to_17() {
        assert_eq!(
            parse_stat_times(STAT),
            Some(StatTimes {
                utime: 731,
                stime: 219,
                cutime: 5,
                cstime: 7
            })
        );
        assert_eq!(parse_stat_comm(STAT), Some("tokio-runtime-w"));
    }

    #[test]
    fn stat_comm_with_spaces_and_parentheses_is_read_to_the_last_paren() {
        for comm in [
            "my prog",
            "a) R 1 2 3 4 5 6 7 8 9 10 11 12 13",
            "(x) (y)",
            ") )",
            "",
        ] {
            let line = STAT.replace("(tokio-runtime-w)", &format!("({comm})"));
            assert_eq!(parse_stat_comm(&line), Some(comm), "{line}");
            assert_eq!(parse_stat_times(&line), parse_stat_times(STAT), "{line}");
        }
    }

    #[test]
    fn stat_lines_that_are_not_stat_lines() {
        for line in [
            "",
            "4242 tokio S 1",
            "4242 (tokio) S 1 2 3",
            "4242 (tokio) S 1 4242 4242 0 -1 4194624 2500 0 0 0 x 219 5 7",
        ] {
            assert_eq!(parse_stat_times(line), None, "{line:?}");
        }
        assert_eq!(parse_stat_comm(")("), None);
    }

    #[test]
    fn context_switches_are_voluntary_and_not() {
        for (status, want) in [
            (
                "Name:\tnodelet\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n",
                Some(127),
            ),
            ("voluntary_ctxt_switches:\t120\n", None),
            ("Name:\tx\n", None),
        ] {
            assert_eq!(parse_ctxt_switches(status), want, "{status:?}");
        }
    }

    fn sample(
        at: std::time::Instant,
        times: StatTimes,
        threads: &[(u32, &str, u64, u64)],
    ) -> CpuSample {
        CpuSample {
            at,
            process: times,
            threads: threads
                .iter()
                .map(|(tid, comm, ticks, switches)| {
                    (
                        *tid,
                        ThreadSample {
                            comm: comm.to_string(),
                            ticks: *ticks,
                            switches: *switches,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn usage_between_two_samples() {
        let t0 = std::time::Instant::now();
        let before = sample(
            t0,
            StatTimes {
                utime: 100,
                stime: 50,
                cutime: 3,
                cstime: 1,
            },
            &[
                (1, "nodelet", 40, 10),
                (2, "tokio-runtime-w", 60, 500),
                (3, "gone", 5, 5),
            ],
        );
        let after = sample(
            t0 + std::time::Duration::from_secs(30),
            StatTimes {
                utime: 2_700,
                stime: 240,
                cutime: 3,
                cstime: 1,
            },
            &[
                (1, "nodelet", 41, 12),
                (2, "tokio-runtime-w", 2_800, 300_500),
                (4, "new", 9, 9),
            ],
        );
        let u = cpu_usage(&before, &after, 100);
        assert_eq!(u.wall, std::time::Duration::from_secs(30));
        assert_eq!(u.own, std::time::Duration::from_millis(27_900));
        assert_eq!(u.children, std::time::Duration::ZERO);
        assert!((u.cores() - 0.93).abs() < 1e-9, "{}", u.cores());
        assert_eq!(u.switches, 300_002);
        let names: Vec<_> = u.threads.iter().map(|t| (t.tid, t.comm.as_str())).collect();
        assert_eq!(names, [(2, "tokio-runtime-w"), (1, "nodelet")]);
        assert_eq!(u.threads[0].cpu, std::time::Duration::from_millis(27_400));
        let report = u.report(1);
        assert!(report.contains("93.00% of a core"), "{report}");
        assert!(report.contains("\"tokio-runtime-w\""), "{report}");
        assert!(!report.contains("\"nodelet\""), "{report}");

        // Children the process waited for count as its CPU.
        let mut later = after.clone();
        later.process.cutime += 300;
        let u = cpu_usage(&before, &later, 100);
        assert_eq!(u.children, std::time::Duration::from_secs(3));
        assert!((u.cores() - 1.03).abs() < 1e-9, "{}", u.cores());
    }

    #[test]
    fn this_process_spends_cpu_time() {
        let ticks = clock_ticks_per_second();
        let pid = std::process::id();
        let before = cpu_sample(pid).expect("this process");
        assert!(!before.threads.is_empty(), "{before:?}");
        // Burn CPU until the kernel has counted a few ticks of it (at most 10 s).
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let after = loop {
            for i in 0..1_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            let now = cpu_sample(pid).expect("this process");
            let spent = cpu_usage(&before, &now, ticks);
            if spent.own >= std::time::Duration::from_millis(50) {
                break spent;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "{spent:?}"
            );
        };
        std::hint::black_box(x);
        assert!(
            after.own <= after.wall + std::time::Duration::from_millis(50),
            "{after:?}"
        );
        assert!(
            after
                .threads
                .iter()
                .any(|t| t.cpu > std::time::Duration::ZERO),
            "{after:?}"
        );
    }

    #[test]
    fn a_process_that_is_gone_has_no_sample() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(cpu_sample(pid).is_none());
    }

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
