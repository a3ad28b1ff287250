//! The node's own numbers from `/proc` (the root is a parameter: `/proc` in production, a temp
//! dir in tests) and the statfs of a directory.
//!
//! `meminfo`, `loadavg` and `uptime` are parsed by the `procfs` crate (`FromRead::from_file`
//! on `<root>/…`). `sys/kernel/pid_max` and `sys/kernel/threads-max` are one number each;
//! `procfs` reads them only from the fixed `/proc` path, so they are read here. Pressure files
//! use [`super::psi`].

use std::path::Path;
use std::time::Duration;

use procfs::{FromRead, LoadAverage, Meminfo, Uptime};

use super::cgroup::{parse_u64, Resource};
use super::psi::{parse_psi, Psi};
use super::{Error, Result};

fn proc_error(path: &Path, source: procfs::ProcError) -> Error {
    Error::Proc {
        path: path.to_path_buf(),
        source,
    }
}

/// `<proc_root>/meminfo`, every size in bytes.
pub fn read_meminfo(proc_root: &Path) -> Result<Meminfo> {
    let path = proc_root.join("meminfo");
    Meminfo::from_file(&path).map_err(|e| proc_error(&path, e))
}

/// `<proc_root>/loadavg`: the load averages and the number of tasks (`max`: every kernel
/// scheduling entity, i.e. threads, that exists — what `sysinfo(2)` calls `procs`).
pub fn read_loadavg(proc_root: &Path) -> Result<LoadAverage> {
    let path = proc_root.join("loadavg");
    LoadAverage::from_file(&path).map_err(|e| proc_error(&path, e))
}

/// Time since boot.
pub fn read_uptime(proc_root: &Path) -> Result<Duration> {
    let path = proc_root.join("uptime");
    Uptime::from_file(&path)
        .map(|u| u.uptime_duration())
        .map_err(|e| proc_error(&path, e))
}

/// The node's ceiling on tasks: the smaller of `kernel.pid_max` and `kernel.threads-max`, as
/// the kubelet's `RlimitStats` computes `maxpid` (either may be missing; `None` if both are).
pub fn read_task_limit(proc_root: &Path) -> Result<Option<u64>> {
    let mut limit: Option<u64> = None;
    for file in ["sys/kernel/pid_max", "sys/kernel/threads-max"] {
        let path = proc_root.join(file);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(Error::Read { path, source }),
        };
        let value = parse_u64(&text).map_err(|reason| Error::Parse {
            path: path.clone(),
            reason,
        })?;
        limit = Some(limit.map_or(value, |l| l.min(value)));
    }
    Ok(limit)
}

/// `<proc_root>/pressure/<resource>`; `None` on kernels without PSI (or booted with `psi=0`).
pub fn read_pressure(proc_root: &Path, resource: Resource) -> Result<Option<Psi>> {
    let path = proc_root.join("pressure").join(resource.name());
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_psi(&text).map(Some).map_err(|e| Error::Parse {
            path,
            reason: e.to_string(),
        }),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::EOPNOTSUPP) =>
        {
            Ok(None)
        }
        Err(source) => Err(Error::Read { path, source }),
    }
}

/// A filesystem's size and use, as cAdvisor reports it: capacity = blocks × fragment size,
/// available = blocks available to unprivileged users, used = capacity − free blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsUsage {
    pub capacity: u64,
    pub available: u64,
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

impl FsUsage {
    pub fn inodes_used(&self) -> u64 {
        self.inodes.saturating_sub(self.inodes_free)
    }
}

/// `statvfs(2)` of the filesystem holding `path`.
pub fn filesystem_usage(path: &Path) -> Result<FsUsage> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(|errno| Error::Read {
        path: path.to_path_buf(),
        source: std::io::Error::from(errno),
    })?;
    // The field types are u32 on some 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let (blocks, free, available, fragment, inodes, inodes_free) = (
        u64::from(stat.blocks()),
        u64::from(stat.blocks_free()),
        u64::from(stat.blocks_available()),
        u64::from(stat.fragment_size()),
        u64::from(stat.files()),
        u64::from(stat.files_free()),
    );
    Ok(FsUsage {
        capacity: blocks.saturating_mul(fragment),
        available: available.saturating_mul(fragment),
        used: blocks.saturating_sub(free).saturating_mul(fragment),
        inodes,
        inodes_free,
    })
}

#[cfg(test)]
pub(crate) mod test_support {
    /// A complete `/proc/meminfo` of a 4 GiB machine (procfs requires the fields every kernel
    /// prints).
    pub const MEMINFO: &str = "MemTotal:        4028580 kB\nMemFree:         1000000 kB\n\
        MemAvailable:    3000000 kB\nBuffers:           50000 kB\nCached:          1500000 kB\n\
        SwapCached:            0 kB\nActive:           800000 kB\nInactive:        1200000 kB\n\
        Active(anon):     300000 kB\nInactive(anon):    10000 kB\nActive(file):     500000 kB\n\
        Inactive(file):  1190000 kB\nUnevictable:           0 kB\nMlocked:               0 kB\n\
        SwapTotal:       2097148 kB\nSwapFree:        2097148 kB\nDirty:               100 kB\n\
        Writeback:             0 kB\nAnonPages:        310000 kB\nMapped:           200000 kB\n\
        Shmem:             10000 kB\nKReclaimable:      80000 kB\nSlab:             120000 kB\n\
        SReclaimable:      80000 kB\nSUnreclaim:        40000 kB\nKernelStack:        4000 kB\n\
        PageTables:         6000 kB\nNFS_Unstable:          0 kB\nBounce:                0 kB\n\
        WritebackTmp:          0 kB\nCommitLimit:     4111436 kB\nCommitted_AS:    1500000 kB\n\
        VmallocTotal:   34359738367 kB\nVmallocUsed:       20000 kB\nVmallocChunk:          0 kB\n\
        Percpu:             1000 kB\nHardwareCorrupted:     0 kB\nAnonHugePages:         0 kB\n\
        ShmemHugePages:        0 kB\nShmemPmdMapped:        0 kB\nFileHugePages:         0 kB\n\
        FilePmdMapped:         0 kB\nHugePages_Total:       0\nHugePages_Free:        0\n\
        HugePages_Rsvd:        0\nHugePages_Surp:        0\nHugepagesize:       2048 kB\n\
        Hugetlb:               0 kB\nDirectMap4k:      100000 kB\nDirectMap2M:     4000000 kB\n";

    pub fn write(root: &std::path::Path, rel: &str, content: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{write, MEMINFO};
    use super::*;

    #[test]
    fn reads_a_fake_proc() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        write(proc, "meminfo", MEMINFO);
        write(proc, "loadavg", "0.52 0.48 0.40 3/412 12345\n");
        write(proc, "uptime", "3600.25 7000.00\n");
        write(proc, "sys/kernel/pid_max", "4194304\n");
        write(proc, "sys/kernel/threads-max", "63452\n");
        write(
            proc,
            "pressure/memory",
            "some avg10=0.10 avg60=0.00 avg300=0.00 total=42\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        );
        let meminfo = read_meminfo(proc).unwrap();
        assert_eq!(meminfo.mem_total, 4_028_580 * 1024);
        assert_eq!(meminfo.swap_total, 2_097_148 * 1024);
        assert_eq!(meminfo.mem_available, Some(3_000_000 * 1024));
        let load = read_loadavg(proc).unwrap();
        assert_eq!((load.cur, load.max), (3, 412));
        assert_eq!(read_uptime(proc).unwrap(), Duration::from_millis(3_600_250));
        assert_eq!(read_task_limit(proc).unwrap(), Some(63_452));
        let memory = read_pressure(proc, Resource::Memory).unwrap().unwrap();
        assert_eq!(
            (memory.some.total, memory.full.map(|f| f.total)),
            (42, Some(7))
        );
        // no PSI on this "kernel" for cpu and io
        assert_eq!(read_pressure(proc, Resource::Cpu).unwrap(), None);
        assert_eq!(read_pressure(proc, Resource::Io).unwrap(), None);
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        let missing = read_meminfo(proc).unwrap_err().to_string();
        assert!(
            missing.contains(&proc.join("meminfo").display().to_string()),
            "{missing}"
        );
        write(proc, "meminfo", "MemTotal: 1024 kB\n");
        let partial = read_meminfo(proc).unwrap_err().to_string();
        assert!(partial.contains("meminfo"), "{partial}");
        write(proc, "loadavg", "0.52\n");
        assert!(read_loadavg(proc).is_err());
        // one of the two limits is enough; a bad one is an error naming it
        assert_eq!(read_task_limit(proc).unwrap(), None);
        write(proc, "sys/kernel/pid_max", "32768\n");
        assert_eq!(read_task_limit(proc).unwrap(), Some(32_768));
        write(proc, "sys/kernel/threads-max", "x\n");
        let bad = read_task_limit(proc).unwrap_err().to_string();
        assert!(
            bad.contains("threads-max") && bad.contains("\"x\""),
            "{bad}"
        );
        write(proc, "pressure/cpu", "some avg10=1\n");
        let bad = read_pressure(proc, Resource::Cpu).unwrap_err().to_string();
        assert!(
            bad.contains("pressure/cpu") && bad.contains("no avg60"),
            "{bad}"
        );
    }

    #[test]
    fn this_host_answers() {
        let proc = Path::new("/proc");
        assert!(read_meminfo(proc).unwrap().mem_total > 0);
        assert!(read_loadavg(proc).unwrap().max > 0);
        assert!(read_task_limit(proc).unwrap().unwrap() > 0);
        let fs = filesystem_usage(Path::new("/")).unwrap();
        assert!(fs.capacity > 0 && fs.used <= fs.capacity && fs.available <= fs.capacity);
        assert!(filesystem_usage(Path::new("/no/such/dir")).is_err());
    }
}
