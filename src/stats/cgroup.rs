//! Usage of one cgroup: CPU time, memory, tasks and pressure, read from its files.
//!
//! cgroup v2 is what nodelet targets: `cpu.stat`, `memory.current`, `memory.max`,
//! `memory.stat`, `pids.current`, `pids.max`, `{cpu,memory,io}.pressure`. The numbers mean what
//! cAdvisor and the kubelet make of them (working set = usage − `inactive_file`, RSS = `anon`);
//! the root cgroup, which has no `memory.current`, is given runc's emulation (usage =
//! `anon` + `file` of the root `memory.stat`).
//!
//! A small cgroup v1 reader (`cpuacct.usage`, `memory.usage_in_bytes`, `memory.limit_in_bytes`,
//! `memory.stat`'s `total_*` keys, `pids.current`) is kept beside it so that the development
//! host, whose memory controller is on v1, gives real numbers too; v1 has no pressure files.
//!
//! Parsing is pure (`parse_*`, tested on text); the reader takes the mount point as a parameter
//! (`/sys/fs/cgroup` in production, a temp dir in tests). A file that does not exist — a
//! controller not enabled for the cgroup, PSI on a kernel without it — is `None`, not an error;
//! a file that exists and does not parse is an error naming the path and the bad text.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use super::psi::{parse_psi, Psi};
use super::{Error, Result};

/// Values above this are "no limit" (`memory.limit_in_bytes` prints 9223372036854771712 when
/// unlimited on v1); the kubelet's `isMemoryUnlimited` uses the same bound.
pub const UNLIMITED_ABOVE: u64 = 1 << 62;

/// `cpu.stat` (v2), the fields nodelet uses. Microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuStat {
    pub usage_usec: u64,
    pub user_usec: Option<u64>,
    pub system_usec: Option<u64>,
    /// Only where the cpu controller is enabled (not in the root cgroup).
    pub nr_periods: Option<u64>,
    pub nr_throttled: Option<u64>,
    pub throttled_usec: Option<u64>,
}

/// The `memory.stat` keys nodelet uses, named as on v2 (on v1 they come from the hierarchical
/// `total_*` keys). Bytes, except the fault counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStat {
    /// Anonymous memory (v1 `total_rss`): what the Summary API reports as `rssBytes`.
    pub anon: Option<u64>,
    /// Page cache (v1 `total_cache`).
    pub file: Option<u64>,
    pub active_file: Option<u64>,
    /// Subtracted from usage for the working set.
    pub inactive_file: Option<u64>,
    /// Minor + major page faults (v2 `pgfault`; v1 `pgfault`, this cgroup only, as cAdvisor reads it).
    pub pgfault: Option<u64>,
    pub pgmajfault: Option<u64>,
}

/// CPU time used by a cgroup and its descendants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuUsage {
    /// Total CPU time, nanoseconds (the Summary API's `usageCoreNanoSeconds`).
    pub usage_nanos: u64,
    /// Periods in which the cgroup was throttled by its `cpu.max` (v2 only).
    pub nr_throttled: Option<u64>,
    /// User and system CPU time, nanoseconds (v2 `user_usec`, `system_usec`).
    pub user_nanos: Option<u64>,
    pub system_nanos: Option<u64>,
    /// Enforcement periods elapsed under `cpu.max` and the time throttled, nanoseconds (v2,
    /// where the cpu controller is enabled).
    pub nr_periods: Option<u64>,
    pub throttled_nanos: Option<u64>,
}

/// Memory of a cgroup and its descendants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryUsage {
    /// `memory.current` (v1 `memory.usage_in_bytes`); `anon + file` for the v2 root cgroup.
    pub usage: u64,
    /// `memory.max` (v1 `memory.limit_in_bytes`); `None` when unlimited.
    pub limit: Option<u64>,
    pub stat: MemoryStat,
}

impl MemoryUsage {
    /// Usage less the inactive page cache, which the kernel reclaims first (cAdvisor's
    /// `WorkingSet`); equal to usage when `memory.stat` lacks `inactive_file`.
    pub fn working_set(&self) -> u64 {
        self.usage
            .saturating_sub(self.stat.inactive_file.unwrap_or(0))
    }

    /// Limit less working set, where there is a limit (the Summary API's `availableBytes`).
    pub fn available(&self) -> Option<u64> {
        self.limit.map(|l| l.saturating_sub(self.working_set()))
    }
}

/// A cgroup's CPU settings as cAdvisor reports them (`container_spec_cpu_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuSpec {
    /// v1 `cpu.shares`; on v2 `cpu.weight` turned back into shares (cAdvisor's
    /// `convertCPUWeightToCPULimit`, the inverse of runc's shares → weight).
    pub shares: Option<u64>,
    /// The CFS quota in microseconds per period; `None` without a quota.
    pub quota_us: Option<u64>,
    pub period_us: Option<u64>,
}

/// cgroup v2 `cpu.max`: `<quota|max> <period>` → (quota, period), microseconds.
pub fn parse_cpu_max(text: &str) -> std::result::Result<(Option<u64>, u64), String> {
    let mut fields = text.split_whitespace();
    let (Some(quota), Some(period), None) = (fields.next(), fields.next(), fields.next()) else {
        return Err(format!("{:?} is not `<quota> <period>`", text.trim()));
    };
    let number = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("{s:?} is not a number"))
    };
    let quota = if quota == "max" {
        None
    } else {
        Some(number(quota)?)
    };
    Ok((quota, number(period)?))
}

/// cAdvisor's `convertCPUWeightToCPULimit`: `cpu.weight` (1–10000) back to shares.
pub fn weight_to_shares(weight: u64) -> std::result::Result<u64, String> {
    if !(1..=10_000).contains(&weight) {
        return Err(format!("cpu.weight {weight} is outside 1..=10000"));
    }
    Ok(2 + ((weight - 1) * 262_142) / 9_999)
}

/// Tasks (processes and threads) in a cgroup and its descendants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PidsUsage {
    pub current: u64,
    /// `pids.max`; `None` when unlimited or not readable (the root cgroup has none).
    pub max: Option<u64>,
}

/// The three PSI files of a cgroup; each `None` where the kernel has no PSI.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pressure {
    pub cpu: Option<Psi>,
    pub memory: Option<Psi>,
    pub io: Option<Psi>,
}

/// What one cgroup reports. Each part is `None` when its files are absent.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CgroupSample {
    pub cpu: Option<CpuUsage>,
    pub memory: Option<MemoryUsage>,
    pub pids: Option<PidsUsage>,
    pub pressure: Pressure,
}

/// A sample and the files that could not be read or parsed: one broken file does not hide
/// the others.
#[derive(Debug, Default)]
pub struct CgroupReadout {
    pub sample: CgroupSample,
    pub errors: Vec<Error>,
}

/// Which resource a pressure file is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Cpu,
    Memory,
    Io,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::Io => "io",
        }
    }
}

/// The node's cgroup layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// One hierarchy per controller under the mount point (`<mount>/memory/<path>`).
    V1,
    /// The unified hierarchy (`<mount>/<path>`).
    V2,
}

/// `key value` lines (`cpu.stat`, `memory.stat`, `memory.events`). Every line must have a key
/// and an unsigned number.
pub fn parse_key_values(text: &str) -> std::result::Result<Vec<(&str, u64)>, String> {
    let mut pairs = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(format!("line {line:?} is not `key value`"));
        };
        let value = value
            .parse::<u64>()
            .map_err(|_| format!("{key} {value:?} is not a number"))?;
        pairs.push((key, value));
    }
    Ok(pairs)
}

/// `cpu.stat`; `usage_usec` must be there.
pub fn parse_cpu_stat(text: &str) -> std::result::Result<CpuStat, String> {
    let mut stat = CpuStat::default();
    let mut usage = None;
    for (key, value) in parse_key_values(text)? {
        match key {
            "usage_usec" => usage = Some(value),
            "user_usec" => stat.user_usec = Some(value),
            "system_usec" => stat.system_usec = Some(value),
            "nr_periods" => stat.nr_periods = Some(value),
            "nr_throttled" => stat.nr_throttled = Some(value),
            "throttled_usec" => stat.throttled_usec = Some(value),
            _ => {}
        }
    }
    stat.usage_usec = usage.ok_or("no usage_usec")?;
    Ok(stat)
}

/// v2 `memory.stat`.
pub fn parse_memory_stat(text: &str) -> std::result::Result<MemoryStat, String> {
    let mut stat = MemoryStat::default();
    for (key, value) in parse_key_values(text)? {
        let slot = match key {
            "anon" => &mut stat.anon,
            "file" => &mut stat.file,
            "active_file" => &mut stat.active_file,
            "inactive_file" => &mut stat.inactive_file,
            "pgfault" => &mut stat.pgfault,
            "pgmajfault" => &mut stat.pgmajfault,
            _ => continue,
        };
        *slot = Some(value);
    }
    Ok(stat)
}

/// v1 `memory.stat`: the hierarchical `total_*` sizes (this cgroup and its descendants, as v2
/// counts), the fault counters of this cgroup (what cAdvisor reports for a container).
pub fn parse_memory_stat_v1(text: &str) -> std::result::Result<MemoryStat, String> {
    let mut stat = MemoryStat::default();
    for (key, value) in parse_key_values(text)? {
        let slot = match key {
            "total_rss" => &mut stat.anon,
            "total_cache" => &mut stat.file,
            "total_active_file" => &mut stat.active_file,
            "total_inactive_file" => &mut stat.inactive_file,
            "pgfault" => &mut stat.pgfault,
            "pgmajfault" => &mut stat.pgmajfault,
            _ => continue,
        };
        *slot = Some(value);
    }
    Ok(stat)
}

/// A single unsigned number (`memory.current`, `pids.current`, `cpuacct.usage`).
pub fn parse_u64(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    t.parse().map_err(|_| format!("{t:?} is not a number"))
}

/// A limit file (`memory.max`, `pids.max`, v1 `memory.limit_in_bytes`): `max` or a number above
/// [`UNLIMITED_ABOVE`] is no limit.
pub fn parse_limit(text: &str) -> std::result::Result<Option<u64>, String> {
    if text.trim() == "max" {
        return Ok(None);
    }
    parse_u64(text).map(|v| (v <= UNLIMITED_ABOVE).then_some(v))
}

/// A cgroup path as the runtime or the cgroup manager names it (`/kubepods/pod<uid>/<id>`,
/// `kubepods.slice/...`), relative to the mount point. `..` would leave the hierarchy and is
/// refused.
pub fn relative_cgroup_path(path: &str) -> Result<PathBuf> {
    let mut relative = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(c) => relative.push(c),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(Error::BadCgroupPath {
                    path: path.to_string(),
                })
            }
        }
    }
    Ok(relative)
}

/// Reads a file; `None` when it does not exist, or when the kernel refuses to show it (a
/// pressure file with PSI disabled answers `EOPNOTSUPP`).
fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e)
            if e.kind() == ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::EOPNOTSUPP)
                || e.raw_os_error() == Some(libc::ENODEV) =>
        {
            Ok(None)
        }
        Err(source) => Err(Error::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Reads and parses a file; `None` when it does not exist.
fn read_parsed<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> std::result::Result<T, String>,
) -> Result<Option<T>> {
    match read_optional(path)? {
        None => Ok(None),
        Some(text) => parse(&text).map(Some).map_err(|reason| Error::Parse {
            path: path.to_path_buf(),
            reason,
        }),
    }
}

/// Reads cgroups under one mount point. Cheap to clone and to call often: every call reads a few
/// small files and keeps nothing.
#[derive(Debug, Clone)]
pub struct CgroupReader {
    mount: PathBuf,
    version: CgroupVersion,
}

impl CgroupReader {
    pub fn new(mount: impl Into<PathBuf>, version: CgroupVersion) -> Self {
        CgroupReader {
            mount: mount.into(),
            version,
        }
    }

    /// The node's layout at `mount` (normally `/sys/fs/cgroup`): v2 when it is the unified
    /// hierarchy, else v1 (hybrid hosts keep their controllers on v1).
    pub fn detect(mount: &Path) -> Self {
        let version = if crate::cgroup::is_cgroup2_unified(mount) {
            CgroupVersion::V2
        } else {
            CgroupVersion::V1
        };
        CgroupReader::new(mount, version)
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The directory of `relative` for `controller` (v1: the controller's hierarchy).
    fn dir(&self, controller: &str, relative: &Path) -> PathBuf {
        match self.version {
            CgroupVersion::V2 => self.mount.join(relative),
            CgroupVersion::V1 => {
                let mut hierarchy = self.mount.join(controller);
                if controller == "cpuacct" && !hierarchy.is_dir() {
                    // Co-mounted as `cpu,cpuacct` where there is no `cpuacct` link.
                    hierarchy = self.mount.join("cpu,cpuacct");
                }
                hierarchy.join(relative)
            }
        }
    }

    /// True when the cgroup exists (on v1: in the memory hierarchy).
    pub fn exists(&self, path: &str) -> bool {
        relative_cgroup_path(path).is_ok_and(|r| self.dir("memory", &r).is_dir())
    }

    pub fn cpu(&self, path: &str) -> Result<Option<CpuUsage>> {
        let relative = relative_cgroup_path(path)?;
        match self.version {
            CgroupVersion::V2 => {
                let stat = read_parsed(&self.dir("cpu", &relative).join("cpu.stat"), |t| {
                    parse_cpu_stat(t)
                })?;
                let nanos = |usec: Option<u64>| usec.map(|u| u.saturating_mul(1000));
                Ok(stat.map(|s| CpuUsage {
                    usage_nanos: s.usage_usec.saturating_mul(1000),
                    nr_throttled: s.nr_throttled,
                    user_nanos: nanos(s.user_usec),
                    system_nanos: nanos(s.system_usec),
                    nr_periods: s.nr_periods,
                    throttled_nanos: nanos(s.throttled_usec),
                }))
            }
            CgroupVersion::V1 => {
                let usage =
                    read_parsed(&self.dir("cpuacct", &relative).join("cpuacct.usage"), |t| {
                        parse_u64(t)
                    })?;
                Ok(usage.map(|usage_nanos| CpuUsage {
                    usage_nanos,
                    ..CpuUsage::default()
                }))
            }
        }
    }

    /// Memory usage, limit and `memory.stat`. `None` when the cgroup has no memory accounting.
    pub fn memory(&self, path: &str) -> Result<Option<MemoryUsage>> {
        let relative = relative_cgroup_path(path)?;
        let dir = self.dir("memory", &relative);
        match self.version {
            CgroupVersion::V2 => {
                let stat = read_parsed(&dir.join("memory.stat"), parse_memory_stat)?;
                let current = read_parsed(&dir.join("memory.current"), parse_u64)?;
                match (current, stat) {
                    (Some(usage), stat) => Ok(Some(MemoryUsage {
                        usage,
                        limit: read_parsed(&dir.join("memory.max"), parse_limit)?.flatten(),
                        stat: stat.unwrap_or_default(),
                    })),
                    // The root cgroup has memory.stat but no memory.current: runc (and so
                    // cAdvisor and the kubelet) counts anon + file as its usage.
                    (None, Some(stat)) if relative.as_os_str().is_empty() => {
                        Ok(Some(MemoryUsage {
                            usage: stat
                                .anon
                                .unwrap_or(0)
                                .saturating_add(stat.file.unwrap_or(0)),
                            limit: None,
                            stat,
                        }))
                    }
                    (None, _) => Ok(None),
                }
            }
            CgroupVersion::V1 => {
                let Some(usage) = read_parsed(&dir.join("memory.usage_in_bytes"), parse_u64)?
                else {
                    return Ok(None);
                };
                Ok(Some(MemoryUsage {
                    usage,
                    limit: read_parsed(&dir.join("memory.limit_in_bytes"), parse_limit)?.flatten(),
                    stat: read_parsed(&dir.join("memory.stat"), parse_memory_stat_v1)?
                        .unwrap_or_default(),
                }))
            }
        }
    }

    pub fn pids(&self, path: &str) -> Result<Option<PidsUsage>> {
        let relative = relative_cgroup_path(path)?;
        let dir = self.dir("pids", &relative);
        let Some(current) = read_parsed(&dir.join("pids.current"), parse_u64)? else {
            return Ok(None);
        };
        Ok(Some(PidsUsage {
            current,
            max: read_parsed(&dir.join("pids.max"), parse_limit)?.flatten(),
        }))
    }

    /// The cgroup's CPU settings; `None` where the cpu controller has no files for it (the
    /// root cgroup, a controller not enabled).
    pub fn cpu_spec(&self, path: &str) -> Result<Option<CpuSpec>> {
        let relative = relative_cgroup_path(path)?;
        let dir = self.dir("cpu", &relative);
        let spec = match self.version {
            CgroupVersion::V2 => {
                let max = read_parsed(&dir.join("cpu.max"), parse_cpu_max)?;
                let shares =
                    read_parsed(&dir.join("cpu.weight"), |t| weight_to_shares(parse_u64(t)?))?;
                CpuSpec {
                    shares,
                    quota_us: max.and_then(|(quota, _)| quota),
                    period_us: max.map(|(_, period)| period),
                }
            }
            CgroupVersion::V1 => {
                let quota = read_parsed(&dir.join("cpu.cfs_quota_us"), |t| {
                    t.trim()
                        .parse::<i64>()
                        .map_err(|_| format!("{:?} is not a number", t.trim()))
                })?;
                CpuSpec {
                    shares: read_parsed(&dir.join("cpu.shares"), parse_u64)?,
                    // -1: no quota.
                    quota_us: quota.and_then(|q| u64::try_from(q).ok()),
                    period_us: read_parsed(&dir.join("cpu.cfs_period_us"), parse_u64)?,
                }
            }
        };
        Ok((spec != CpuSpec::default()).then_some(spec))
    }

    /// The first process of the cgroup itself (`cgroup.procs`; on v1 the memory hierarchy's),
    /// `None` when it has none: a process in a container's cgroup gives its network namespace.
    pub fn first_pid(&self, path: &str) -> Result<Option<u32>> {
        let relative = relative_cgroup_path(path)?;
        let file = self.dir("memory", &relative).join("cgroup.procs");
        let text = read_optional(&file)?;
        let first = text.as_deref().and_then(|t| t.lines().next());
        first
            .map(|line| {
                line.trim().parse::<u32>().map_err(|_| Error::Parse {
                    path: file.clone(),
                    reason: format!("{line:?} is not a process ID"),
                })
            })
            .transpose()
    }

    /// How many processes of the cgroup (and its descendants) the kernel OOM-killed: the
    /// `oom_kill` count of `memory.events` (v2) or `memory.oom_control` (v1, kernel 4.13 on);
    /// `None` when the cgroup or the count is not there. The kernel counts the kill before it
    /// sends the signal, so the count is final when the process's exit is seen.
    pub fn oom_kills(&self, path: &str) -> Result<Option<u64>> {
        let relative = relative_cgroup_path(path)?;
        let file = self.dir("memory", &relative).join(match self.version {
            CgroupVersion::V2 => "memory.events",
            CgroupVersion::V1 => "memory.oom_control",
        });
        let pairs = read_parsed(&file, |text| {
            // v1's file has `oom_kill_disable`, `under_oom` and `oom_kill`, all numbers.
            Ok(parse_key_values(text)?
                .into_iter()
                .find(|(key, _)| *key == "oom_kill")
                .map(|(_, count)| count))
        })?;
        Ok(pairs.flatten())
    }

    /// `<resource>.pressure`; `None` on v1 and where the kernel has no PSI.
    pub fn pressure(&self, path: &str, resource: Resource) -> Result<Option<Psi>> {
        if self.version == CgroupVersion::V1 {
            return Ok(None);
        }
        let relative = relative_cgroup_path(path)?;
        let file = self
            .dir(resource.name(), &relative)
            .join(format!("{}.pressure", resource.name()));
        read_parsed(&file, |t| parse_psi(t).map_err(|e| e.to_string()))
    }

    /// Everything about one cgroup. `Err` only when the cgroup does not exist (a container
    /// that exited meanwhile); files that fail are listed in the readout's `errors`.
    pub fn sample(&self, path: &str) -> Result<CgroupReadout> {
        let relative = relative_cgroup_path(path)?;
        let dir = self.dir("memory", &relative);
        if !dir.is_dir() {
            return Err(Error::NoCgroup { path: dir });
        }
        let mut errors = Vec::new();
        fn keep<T>(errors: &mut Vec<Error>, result: Result<Option<T>>) -> Option<T> {
            result.unwrap_or_else(|e| {
                errors.push(e);
                None
            })
        }
        let sample = CgroupSample {
            cpu: keep(&mut errors, self.cpu(path)),
            memory: keep(&mut errors, self.memory(path)),
            pids: keep(&mut errors, self.pids(path)),
            pressure: Pressure {
                cpu: keep(&mut errors, self.pressure(path, Resource::Cpu)),
                memory: keep(&mut errors, self.pressure(path, Resource::Memory)),
                io: keep(&mut errors, self.pressure(path, Resource::Io)),
            },
        };
        Ok(CgroupReadout { sample, errors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::psi::PsiLine;

    pub(crate) fn write(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    const CPU_STAT: &str = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n\
        core_sched.force_idle_usec 0\nnr_periods 40\nnr_throttled 3\nthrottled_usec 12000\n\
        nr_bursts 0\nburst_usec 0\n";

    const MEMORY_STAT: &str = "anon 10485760\nfile 4194304\nkernel 1048576\nkernel_stack 65536\n\
        pagetables 131072\nsock 0\nshmem 0\nfile_mapped 1048576\nfile_dirty 0\nfile_writeback 0\n\
        anon_thp 0\ninactive_anon 10485760\nactive_anon 0\ninactive_file 3145728\n\
        active_file 1048576\nunevictable 0\nslab 524288\npgfault 4321\npgmajfault 12\n\
        workingset_refault_anon 0\n";

    #[test]
    fn cpu_stat_table() {
        assert_eq!(
            parse_cpu_stat(CPU_STAT),
            Ok(CpuStat {
                usage_usec: 2_500_000,
                user_usec: Some(2_000_000),
                system_usec: Some(500_000),
                nr_periods: Some(40),
                nr_throttled: Some(3),
                throttled_usec: Some(12_000),
            })
        );
        // the root cgroup: only the three time fields
        assert_eq!(
            parse_cpu_stat("usage_usec 9\nuser_usec 5\nsystem_usec 4\n").map(|s| s.nr_periods),
            Ok(None)
        );
        let errors = [
            ("user_usec 5\n", "no usage_usec"),
            ("usage_usec\n", "line \"usage_usec\" is not `key value`"),
            (
                "usage_usec 1 2\n",
                "line \"usage_usec 1 2\" is not `key value`",
            ),
            ("usage_usec -1\n", "usage_usec \"-1\" is not a number"),
        ];
        for (text, want) in errors {
            assert_eq!(parse_cpu_stat(text), Err(want.to_string()), "{text:?}");
        }
    }

    #[test]
    fn memory_stat_table() {
        assert_eq!(
            parse_memory_stat(MEMORY_STAT),
            Ok(MemoryStat {
                anon: Some(10 << 20),
                file: Some(4 << 20),
                active_file: Some(1 << 20),
                inactive_file: Some(3 << 20),
                pgfault: Some(4321),
                pgmajfault: Some(12),
            })
        );
        assert_eq!(parse_memory_stat(""), Ok(MemoryStat::default()));
        let v1 = "cache 100\nrss 200\npgfault 7\npgmajfault 1\ninactive_file 50\n\
                  total_cache 1000\ntotal_rss 2000\ntotal_inactive_file 500\ntotal_active_file 400\n\
                  total_pgfault 70\ntotal_pgmajfault 10\n";
        assert_eq!(
            parse_memory_stat_v1(v1),
            Ok(MemoryStat {
                anon: Some(2000),
                file: Some(1000),
                active_file: Some(400),
                inactive_file: Some(500),
                pgfault: Some(7),
                pgmajfault: Some(1),
            })
        );
    }

    #[test]
    fn limit_table() {
        let cases = [
            ("max\n", Ok(None)),
            ("67108864\n", Ok(Some(64 << 20))),
            ("9223372036854771712\n", Ok(None)),
            ("0\n", Ok(Some(0))),
            ("lots\n", Err("\"lots\" is not a number".to_string())),
        ];
        for (text, want) in cases {
            assert_eq!(parse_limit(text), want, "{text:?}");
        }
    }

    #[test]
    fn working_set_and_available() {
        let m = |usage, limit, inactive_file| MemoryUsage {
            usage,
            limit,
            stat: MemoryStat {
                inactive_file,
                ..Default::default()
            },
        };
        // (usage, limit, inactive_file) → (working set, available)
        let cases = [
            (m(100, None, Some(30)), (70, None)),
            (m(100, Some(200), Some(30)), (70, Some(130))),
            (m(100, Some(200), None), (100, Some(100))),
            // more inactive file than usage (racy reads): zero, never a wrap-around
            (m(10, Some(5), Some(30)), (0, Some(5))),
            // over the limit (a limit lowered below usage): nothing available
            (m(300, Some(200), Some(0)), (300, Some(0))),
        ];
        for (usage, (ws, available)) in cases {
            assert_eq!(
                (usage.working_set(), usage.available()),
                (ws, available),
                "{usage:?}"
            );
        }
    }

    #[test]
    fn relative_path_table() {
        let cases = [
            (
                "/kubepods/burstable/pod1/abc",
                Some("kubepods/burstable/pod1/abc"),
            ),
            ("kubepods.slice/x.scope", Some("kubepods.slice/x.scope")),
            ("/", Some("")),
            ("", Some("")),
            ("/kubepods/../../etc", None),
        ];
        for (path, want) in cases {
            let got = relative_cgroup_path(path).ok();
            assert_eq!(got.as_deref(), want.map(Path::new), "{path:?}");
        }
    }

    fn v2_container(root: &Path, rel: &str) {
        write(root, &format!("{rel}/cpu.stat"), CPU_STAT);
        write(root, &format!("{rel}/memory.current"), "16777216\n");
        write(root, &format!("{rel}/memory.max"), "67108864\n");
        write(root, &format!("{rel}/memory.stat"), MEMORY_STAT);
        write(root, &format!("{rel}/pids.current"), "7\n");
        write(root, &format!("{rel}/pids.max"), "max\n");
        write(
            root,
            &format!("{rel}/cpu.pressure"),
            "some avg10=1.50 avg60=0.50 avg300=0.10 total=1000\nfull avg10=0.50 avg60=0.20 avg300=0.00 total=400\n",
        );
        write(
            root,
            &format!("{rel}/memory.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
        );
        write(
            root,
            &format!("{rel}/io.pressure"),
            "some avg10=0.25 avg60=0.00 avg300=0.00 total=77\nfull avg10=0.25 avg60=0.00 avg300=0.00 total=66\n",
        );
    }

    #[test]
    fn cpu_max_and_weight_tables() {
        let cases = [
            ("max 100000\n", Ok((None, 100_000))),
            ("50000 100000\n", Ok((Some(50_000), 100_000))),
            ("50000\n", Err(())),
            ("x 100000\n", Err(())),
        ];
        for (text, want) in cases {
            assert_eq!(parse_cpu_max(text).map_err(|_| ()), want, "{text:?}");
        }
        // runc writes weight = 1 + ((shares - 2) * 9999) / 262142; back: 1024 shares → 39 →
        // 998 (the integer round trip loses some, as cAdvisor's does).
        let weights = [
            (1, Ok(2)),
            (39, Ok(998)),
            (100, Ok(2597)),
            (10_000, Ok(262_144)),
        ];
        for (weight, want) in weights {
            assert_eq!(weight_to_shares(weight).map_err(|_| ()), want, "{weight}");
        }
        assert!(weight_to_shares(0).is_err() && weight_to_shares(10_001).is_err());
    }

    #[test]
    fn cpu_spec_of_both_layouts() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "v2/c/cpu.max", "20000 100000\n");
        write(dir.path(), "v2/c/cpu.weight", "39\n");
        let v2 = CgroupReader::new(dir.path().join("v2"), CgroupVersion::V2);
        assert_eq!(
            v2.cpu_spec("/c").unwrap(),
            Some(CpuSpec {
                shares: Some(998),
                quota_us: Some(20_000),
                period_us: Some(100_000)
            })
        );
        std::fs::create_dir_all(dir.path().join("v2/root")).unwrap();
        assert_eq!(v2.cpu_spec("/root").unwrap(), None, "no cpu files");
        write(dir.path(), "v1/cpu/c/cpu.cfs_quota_us", "-1\n");
        write(dir.path(), "v1/cpu/c/cpu.cfs_period_us", "100000\n");
        write(dir.path(), "v1/cpu/c/cpu.shares", "512\n");
        let v1 = CgroupReader::new(dir.path().join("v1"), CgroupVersion::V1);
        assert_eq!(
            v1.cpu_spec("/c").unwrap(),
            Some(CpuSpec {
                shares: Some(512),
                quota_us: None,
                period_us: Some(100_000)
            })
        );
    }

    #[test]
    fn first_pid_table() {
        let dir = tempfile::tempdir().unwrap();
        // (cgroup.procs, what first_pid says; Err for text that is no process ID)
        let cases = [
            (Some("4242\n77\n"), Ok(Some(4242))),
            (Some(""), Ok(None)),
            (None, Ok(None)),
            (Some("x\n"), Err(())),
        ];
        for (i, (procs, want)) in cases.into_iter().enumerate() {
            let rel = format!("c{i}");
            std::fs::create_dir_all(dir.path().join(&rel)).unwrap();
            if let Some(text) = procs {
                write(dir.path(), &format!("{rel}/cgroup.procs"), text);
            }
            let got = CgroupReader::new(dir.path(), CgroupVersion::V2)
                .first_pid(&rel)
                .map_err(|_| ());
            assert_eq!(got, want, "{procs:?}");
        }
    }

    #[test]
    fn reads_every_file_of_a_v2_cgroup() {
        let dir = tempfile::tempdir().unwrap();
        let rel = "kubepods/burstable/pod1/c1";
        v2_container(dir.path(), rel);
        let reader = CgroupReader::new(dir.path(), CgroupVersion::V2);
        let readout = reader.sample(&format!("/{rel}")).unwrap();
        assert!(readout.errors.is_empty(), "{:?}", readout.errors);
        let s = readout.sample;
        assert_eq!(
            s.cpu,
            Some(CpuUsage {
                usage_nanos: 2_500_000_000,
                nr_throttled: Some(3),
                user_nanos: Some(2_000_000_000),
                system_nanos: Some(500_000_000),
                nr_periods: Some(40),
                throttled_nanos: Some(12_000_000),
            })
        );
        let memory = s.memory.unwrap();
        assert_eq!((memory.usage, memory.limit), (16 << 20, Some(64 << 20)));
        assert_eq!(memory.working_set(), (16 << 20) - (3 << 20));
        assert_eq!(memory.stat.anon, Some(10 << 20));
        assert_eq!(
            s.pids,
            Some(PidsUsage {
                current: 7,
                max: None
            })
        );
        let cpu = s.pressure.cpu.unwrap();
        assert_eq!(cpu.some.avg10, 1.5);
        assert_eq!(cpu.full.map(|f| f.total), Some(400));
        assert_eq!(s.pressure.memory.unwrap().some.total, 10);
        assert_eq!(
            s.pressure.io.unwrap().full,
            Some(PsiLine {
                avg10: 0.25,
                avg60: 0.0,
                avg300: 0.0,
                total: 66
            })
        );
    }

    #[test]
    fn missing_files_are_none_and_a_broken_file_hides_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // An old kernel: no PSI; the memory controller is not enabled for this cgroup; and
        // pids.current is garbage.
        write(root, "pod/c/cpu.stat", "usage_usec 1000\n");
        write(root, "pod/c/pids.current", "many\n");
        let reader = CgroupReader::new(root, CgroupVersion::V2);
        let readout = reader.sample("/pod/c").unwrap();
        assert_eq!(readout.sample.cpu.map(|c| c.usage_nanos), Some(1_000_000));
        assert_eq!(readout.sample.memory, None);
        assert_eq!(readout.sample.pids, None);
        assert_eq!(readout.sample.pressure, Pressure::default());
        let errors: Vec<String> = readout.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            vec![format!(
                "{}: \"many\" is not a number",
                root.join("pod/c/pids.current").display()
            )]
        );
        // memory.current without memory.stat or memory.max: usage only
        write(root, "pod/c/memory.current", "4096\n");
        let memory = reader.memory("/pod/c").unwrap().unwrap();
        assert_eq!(
            (memory.usage, memory.limit, memory.working_set()),
            (4096, None, 4096)
        );
        // a cgroup that is gone is an error naming it
        let gone = reader.sample("/pod/gone").unwrap_err().to_string();
        assert!(gone.contains("pod/gone"), "{gone}");
    }

    #[test]
    fn the_v2_root_counts_anon_plus_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "memory.stat", MEMORY_STAT);
        write(
            dir.path(),
            "cpu.stat",
            "usage_usec 5\nuser_usec 3\nsystem_usec 2\n",
        );
        let reader = CgroupReader::new(dir.path(), CgroupVersion::V2);
        let memory = reader.memory("/").unwrap().unwrap();
        assert_eq!(memory.usage, (10 << 20) + (4 << 20));
        assert_eq!(memory.working_set(), (14 << 20) - (3 << 20));
        assert_eq!(memory.limit, None);
        // a non-root cgroup without memory.current has no memory stats
        write(dir.path(), "x/memory.stat", MEMORY_STAT);
        assert_eq!(reader.memory("/x").unwrap(), None);
    }

    #[test]
    fn oom_kills_from_either_version() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            root,
            "v2/c/memory.events",
            "low 0\nhigh 3\nmax 9\noom 2\noom_kill 1\noom_group_kill 0\n",
        );
        write(
            root,
            "v2/quiet/memory.events",
            "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
        );
        let v2 = CgroupReader::new(root.join("v2"), CgroupVersion::V2);
        assert_eq!(v2.oom_kills("/c").unwrap(), Some(1));
        assert_eq!(v2.oom_kills("/quiet").unwrap(), Some(0));
        assert_eq!(v2.oom_kills("/gone").unwrap(), None);
        write(
            root,
            "v1/memory/kubepods/pod1/c/memory.oom_control",
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        );
        // a kernel before 4.13 has no count
        write(
            root,
            "v1/memory/old/memory.oom_control",
            "oom_kill_disable 0\nunder_oom 0\n",
        );
        let v1 = CgroupReader::new(root.join("v1"), CgroupVersion::V1);
        assert_eq!(v1.oom_kills("/kubepods/pod1/c").unwrap(), Some(2));
        assert_eq!(v1.oom_kills("/old").unwrap(), None);
        write(root, "v1/memory/bad/memory.oom_control", "oom_kill many\n");
        assert!(v1.oom_kills("/bad").is_err());
    }

    #[test]
    fn reads_a_v1_cgroup_from_its_hierarchies() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let rel = "kubepods/besteffort/pod1/c1";
        write(root, &format!("cpuacct/{rel}/cpuacct.usage"), "123456789\n");
        write(
            root,
            &format!("memory/{rel}/memory.usage_in_bytes"),
            "8192000\n",
        );
        write(
            root,
            &format!("memory/{rel}/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        write(
            root,
            &format!("memory/{rel}/memory.stat"),
            "pgfault 9\npgmajfault 0\ntotal_rss 4096000\ntotal_cache 4096000\ntotal_inactive_file 1000000\n",
        );
        write(root, &format!("pids/{rel}/pids.current"), "3\n");
        write(root, &format!("pids/{rel}/pids.max"), "1024\n");
        let reader = CgroupReader::new(root, CgroupVersion::V1);
        let readout = reader.sample(rel).unwrap();
        assert!(readout.errors.is_empty(), "{:?}", readout.errors);
        let s = readout.sample;
        assert_eq!(s.cpu.map(|c| c.usage_nanos), Some(123_456_789));
        let memory = s.memory.unwrap();
        assert_eq!(memory.limit, None);
        assert_eq!(memory.working_set(), 8_192_000 - 1_000_000);
        assert_eq!(memory.stat.anon, Some(4_096_000));
        assert_eq!(memory.stat.pgfault, Some(9));
        assert_eq!(
            s.pids,
            Some(PidsUsage {
                current: 3,
                max: Some(1024)
            })
        );
        assert_eq!(s.pressure, Pressure::default());
        // co-mounted cpu,cpuacct
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "cpu,cpuacct/a/cpuacct.usage", "5\n");
        let reader = CgroupReader::new(dir.path(), CgroupVersion::V1);
        assert_eq!(reader.cpu("/a").unwrap().map(|c| c.usage_nanos), Some(5));
    }
}
