//! The cgroup v2 test VM (`scripts/vm.sh`) from Rust; see docs/testing.md, "The VM test bed".
//!
//! A VM scenario is one `#[test]` that runs twice. On the host, [`scenario`] boots a VM for the
//! scenario's cgroup driver (a current Debian node built by `scripts/vm/root.sh`: systemd as PID
//! 1, containerd as `containerd.service`, nodelet installed from its Debian package) and runs this very test binary inside it, filtered
//! to the same test (`--exact NAME`). In the guest (`NODELET_VM_GUEST=1`), the same test runs the
//! scenario's checks against the node through a [`Guest`]. The host streams the guest's console
//! to stderr as it comes and fails, with the guest's journal of nodelet and containerd, unless the
//! guest reports that the scenario ran and passed.
//!
//! Adding a check to a scenario is adding lines to its body: the [`Guest`] gives the node's
//! units, pods, cgroup files, metrics and journal.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use nodelet_testkit::api::{NodeletApi, Wait};
use nodelet_testkit::prom::metric_sum;
use nodelet_testkit::tail;

/// The guest's last line: the scenario command's exit status.
pub const RESULT_MARKER: &str = "NODELET-VM-RESULT: ";
/// Printed by the guest side of [`scenario`] once the body returned: proof that the test ran
/// (a filter that matches no test also exits 0).
pub const PASSED_MARKER: &str = "NODELET-VM-SCENARIO-PASSED: ";
const JOURNAL_BEGIN: &str = "==== NODELET-VM-JOURNAL-BEGIN";
const JOURNAL_END: &str = "==== NODELET-VM-JOURNAL-END";

/// One VM from boot to power-off. A scenario takes a few minutes under emulation; this bounds a
/// hung one. The guest gets 60 s less, so it can still print its journal. The test command runs
/// the VM scenarios beside the other tests, and a host loaded with builds as well once took the
/// eviction scenario past 720 s (its boot alone 290 s); on 2026-12-07, with only the test
/// command's three lanes on the host (load 8 on 2 cores), both `vm_node` scenarios took 1173 s
/// in one run and were cut at 1200 s in the next, still making progress (a containerd restart
/// step 143 s, the user-namespace step 322 s).
pub const VM_TIMEOUT: Duration = Duration::from_secs(1800);
/// The guest's memory (MiB). 2048 left the eviction scenario little truly free memory beside
/// the tmpfs root (containerd's images and snapshots live in RAM) and page cache of the debug
/// binaries read over 9p; its hogs then pushed the kernel to reclaim those code pages, which
/// under emulation stalls the guest (CI, 2026-12-03: the scenario made no progress for 1100 s in
/// its first step, on a host the other lanes had left idle). Thresholds are relative to what
/// the guest has free, so the scenarios do not depend on the size.
pub const VM_MEMORY_MIB: u32 = 3072;
/// Deadline for anything the guest waits for: generous, everything is slow under emulation, and
/// a guest starved by the host's other lanes makes no progress while its clock runs (CI,
/// 2026-12-03: a hog's eviction not seen within 180 s on a host twice as slow as usual).
pub const T: Duration = Duration::from_secs(300);
/// [`T`], looking every 500 ms.
const WAIT: Wait = Wait {
    timeout: T,
    poll: Duration::from_millis(500),
};

/// The guest's read-only API port (nodelet's `readOnlyPort`).
const API_PORT: u16 = 10255;
const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// The cgroup driver of a scenario: containerd's `SystemdCgroup` and nodelet's `cgroupDriver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Systemd,
    Cgroupfs,
}

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Systemd => "systemd",
            Driver::Cgroupfs => "cgroupfs",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    /// The `status.qosClass` value.
    pub fn class(self) -> &'static str {
        match self {
            Qos::Guaranteed => "Guaranteed",
            Qos::Burstable => "Burstable",
            Qos::BestEffort => "BestEffort",
        }
    }
}

/// Where the kubelet puts a pod's cgroup, relative to the cgroup mount, written out literally
/// (not computed by nodelet's own code, which is what is under test):
/// systemd `kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid with _>.slice`
/// (Guaranteed: `kubepods.slice/kubepods-pod<uid>.slice`), cgroupfs `kubepods/<qos>/pod<uid>`
/// (Guaranteed: `kubepods/pod<uid>`).
pub fn pod_cgroup_path(driver: Driver, qos: Qos, uid: &str) -> String {
    let tier = match qos {
        Qos::Guaranteed => None,
        Qos::Burstable => Some("burstable"),
        Qos::BestEffort => Some("besteffort"),
    };
    match (driver, tier) {
        (Driver::Systemd, None) => {
            format!("kubepods.slice/kubepods-pod{}.slice", uid.replace('-', "_"))
        }
        (Driver::Systemd, Some(t)) => format!(
            "kubepods.slice/kubepods-{t}.slice/kubepods-{t}-pod{}.slice",
            uid.replace('-', "_")
        ),
        (Driver::Cgroupfs, None) => format!("kubepods/pod{uid}"),
        (Driver::Cgroupfs, Some(t)) => format!("kubepods/{t}/pod{uid}"),
    }
}

/// Where the kubelet puts `kubepods` (`None`) and the Burstable and BestEffort tiers, written
/// out literally: systemd `kubepods.slice[/kubepods-<qos>.slice]`, cgroupfs `kubepods[/<qos>]`.
/// Guaranteed pods have no tier of their own: `kubepods` is theirs.
pub fn tier_cgroup_path(driver: Driver, qos: Option<Qos>) -> String {
    let tier = match qos {
        None | Some(Qos::Guaranteed) => None,
        Some(Qos::Burstable) => Some("burstable"),
        Some(Qos::BestEffort) => Some("besteffort"),
    };
    match (driver, tier) {
        (Driver::Systemd, None) => "kubepods.slice".into(),
        (Driver::Systemd, Some(t)) => format!("kubepods.slice/kubepods-{t}.slice"),
        (Driver::Cgroupfs, None) => "kubepods".into(),
        (Driver::Cgroupfs, Some(t)) => format!("kubepods/{t}"),
    }
}

/// Runs `body` as the VM scenario `name`, which must be the name of the calling test function
/// (the guest runs the test binary with `--exact name`). On the host: boots the VM and checks
/// the guest's report. In the guest: runs `body` against the node.
pub fn scenario<F, Fut>(name: &str, driver: Driver, body: F)
where
    F: FnOnce(Guest) -> Fut,
    Fut: Future<Output = ()>,
{
    scenario_with(name, driver, VM_TIMEOUT, &[], Network::None, body);
}

/// The guest's network (`scripts/vm.sh --network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// No network device, as every test scenario runs.
    None,
    /// qemu's user-mode network: the guest reaches the host's loopback at 10.0.2.2 (a control
    /// plane on the host).
    Host,
}

impl Network {
    fn name(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Host => "host",
        }
    }
}

/// [`scenario`] with its own limit for the VM's run (a benchmark repeating a cycle many times
/// needs longer), environment variables for the guest's command and its network; on the host
/// it returns the guest's console lines, so a caller can read what the guest printed.
pub fn scenario_with<F, Fut>(
    name: &str,
    driver: Driver,
    timeout: Duration,
    guest_env: &[(&str, String)],
    network: Network,
    body: F,
) -> Vec<String>
where
    F: FnOnce(Guest) -> Fut,
    Fut: Future<Output = ()>,
{
    if std::env::var("NODELET_VM_GUEST").as_deref() != Ok("1") {
        return boot(name, driver, timeout, guest_env, network);
    }
    let booted_for = std::env::var("NODELET_VM_SCENARIO").unwrap_or_default();
    assert_eq!(
        booted_for, name,
        "this guest was booted for scenario {booted_for:?}; run only that test in it"
    );
    let guest = Guest::from_env(driver);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(body(guest));
    println!("{PASSED_MARKER}{name}");
    Vec::new()
}

/// What the guest reported on its console.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GuestReport {
    /// The scenario command's exit status (`None`: the guest never got to say: it crashed, hung
    /// or did not boot).
    pub result: Option<i32>,
    /// Scenarios whose body returned.
    pub passed: Vec<String>,
    /// `journalctl -u nodelet -u containerd`, printed by the guest on failure.
    pub journal: Vec<String>,
    /// The guest test's panic messages (`thread '...' panicked at ...` and what follows, up
    /// to the backtrace).
    pub panics: Vec<String>,
}

impl GuestReport {
    pub fn parse<S: AsRef<str>>(lines: &[S]) -> GuestReport {
        let mut report = GuestReport::default();
        let mut in_journal = false;
        let mut in_panic = false;
        for line in lines.iter().map(AsRef::as_ref) {
            if in_panic {
                if line.starts_with("stack backtrace:") || line.starts_with("note: ") {
                    in_panic = false;
                } else {
                    report.panics.push(line.to_string());
                    continue;
                }
            }
            if line.starts_with("thread '") && line.contains(" panicked at ") {
                in_panic = true;
                report.panics.push(line.to_string());
            } else if line.starts_with(JOURNAL_BEGIN) {
                in_journal = true;
            } else if line.starts_with(JOURNAL_END) {
                in_journal = false;
            } else if in_journal {
                report.journal.push(line.to_string());
            } else if let Some(code) = line.strip_prefix(RESULT_MARKER) {
                report.result = code.trim().parse().ok();
            } else if let Some(name) = line.strip_prefix(PASSED_MARKER) {
                report.passed.push(name.trim().to_string());
            }
        }
        report
    }

    /// Why this report is not a pass of `name`, if it is not.
    pub fn failure(&self, name: &str) -> Option<String> {
        match self.result {
            None => Some("the guest reported no result (boot failure, crash or timeout)".into()),
            Some(0) if self.passed.iter().any(|p| p == name) => None,
            Some(0) => Some(format!(
                "the guest ran no scenario {name:?} (is it the name of the test function?)"
            )),
            Some(code) => Some(format!("the scenario exited {code}")),
        }
    }
}

/// How many times a scenario's VM is booted when the guest's kernel dies. Under software
/// emulation on a loaded host the guest kernel once panicked 1.6 s into its boot
/// (`Kernel panic - not syncing: Fatal exception in interrupt`, in the timer code), before
/// systemd, containerd or nodelet ran; and once 140 s in, mid-scenario (`Oops: int3` at a patched jump label in
/// `hash_conntrack_raw`, while a TCP handshake went through conntrack: the emulator's
/// cross-modifying code, CI 2026-12-06). A kernel that dies that way says nothing about nodelet,
/// which runs in user space, so the boot is tried again, whatever the scenario had reached. A
/// panic for lack of memory is not: the eviction scenarios exist to show the node never gets
/// there. Any other failure fails the test at once.
const BOOT_ATTEMPTS: u32 = 2;

/// Why one boot of a scenario's VM failed.
struct BootFailure {
    message: String,
    /// The guest kernel panicked, not for lack of memory.
    guest_kernel_died: bool,
}

/// Host side: boots the VM for `name` and fails unless the guest reports a pass; returns the
/// console's lines.
fn boot(
    name: &str,
    driver: Driver,
    timeout: Duration,
    guest_env: &[(&str, String)],
    network: Network,
) -> Vec<String> {
    let mut attempt = 1;
    loop {
        match boot_once(name, driver, timeout, guest_env, network) {
            Ok(lines) => return lines,
            Err(f) if f.guest_kernel_died && attempt < BOOT_ATTEMPTS => {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "[vm {name}] the guest kernel died; booting again\n{}",
                    f.message
                );
                attempt += 1;
            }
            Err(f) => panic!("{}", f.message),
        }
    }
}

/// The guest reported no result and its kernel panicked, not for lack of memory (`Out of
/// memory`, `System is deadlocked on memory`).
fn guest_kernel_died(result: Option<i32>, console: &[String]) -> bool {
    let panic = console
        .iter()
        .find(|l| l.contains("Kernel panic - not syncing"));
    result.is_none()
        && panic.is_some_and(|l| !l.contains("Out of memory") && !l.contains("on memory"))
}

#[test]
fn a_boot_is_tried_again_only_when_the_guest_kernel_died_not_for_memory() {
    let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let panic = "[    1.616542] Kernel panic - not syncing: Fatal exception in interrupt";
    // (case, result, console, boot again)
    let cases = [
        (
            "early kernel panic",
            None,
            lines(&["[ 0.1] Linux version", panic]),
            true,
        ),
        (
            "kernel panic once the scenario ran",
            None,
            lines(&["running 1 test", panic]),
            true,
        ),
        (
            "out of memory",
            None,
            lines(&[
                "running 1 test",
                "[  9.1] Kernel panic - not syncing: System is deadlocked on memory",
            ]),
            false,
        ),
        (
            "no killable process",
            None,
            lines(&[
                "[  9.1] Kernel panic - not syncing: Out of memory and no killable processes...",
            ]),
            false,
        ),
        (
            "no result without a panic",
            None,
            lines(&["[ 0.1] Linux version"]),
            false,
        ),
        ("a result", Some(101), lines(&[panic]), false),
    ];
    for (case, result, console, again) in cases {
        assert_eq!(guest_kernel_died(result, &console), again, "{case}");
    }
}

/// One boot of the scenario's VM: its console lines, or why it failed.
fn boot_once(
    name: &str,
    driver: Driver,
    timeout: Duration,
    guest_env: &[(&str, String)],
    network: Network,
) -> Result<Vec<String>, BootFailure> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = repo.join("scripts/vm.sh");
    let exe = std::env::current_exe().expect("path of this test binary");
    let started = Instant::now();
    let mut child = Command::new(&script)
        .args(["run", "--name", name, "--driver", driver.name()])
        .args(["--nodelet", env!("CARGO_BIN_EXE_nodelet")])
        .args(
            guest_env
                .iter()
                .flat_map(|(k, v)| ["--env".to_string(), format!("{k}={v}")]),
        )
        .args(["--memory", &VM_MEMORY_MIB.to_string()])
        .args(["--network", network.name()])
        .args(["--timeout", &timeout.as_secs().to_string(), "--"])
        .arg(&exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .current_dir(repo)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a hung run can be stopped as a whole (vm.sh, qemu).
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let pgid = child.id();
    let (tx, rx) = mpsc::channel::<String>();
    let pipes: [Box<dyn Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("stdout")),
        Box::new(child.stderr.take().expect("stderr")),
    ];
    for pipe in pipes {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut buf = Vec::new();
            while matches!(reader.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
                let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                if tx.send(line).is_err() {
                    return;
                }
                buf.clear();
            }
        });
    }
    drop(tx);
    // Straight to the process's stderr, not through the test harness's capture: the console
    // streams while the VM runs.
    let stream = |line: &str| {
        let _ = writeln!(std::io::stderr().lock(), "[vm {name}] {line}");
    };
    let deadline = started + timeout + Duration::from_secs(60);
    let mut lines = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                stream(&line);
                lines.push(line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // The process group this test started: vm.sh, qemu and their pipeline.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pgid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.wait();
                panic!(
                    "VM scenario {name}: no end after {:?}; killed\n{}",
                    started.elapsed(),
                    tail(&lines.join("\n"), 40)
                );
            }
        }
    }
    let status = child.wait().expect("wait for vm.sh");
    let wall = started.elapsed();
    stream(&format!(
        "wall time {:.0} s (boot to power-off, driver {})",
        wall.as_secs_f64(),
        driver.name()
    ));
    let report = GuestReport::parse(&lines);
    let failure = report
        .failure(name)
        .or_else(|| (!status.success()).then(|| format!("scripts/vm.sh exited with {status}")));
    if let Some(why) = failure {
        let journal = if report.journal.is_empty() {
            "(the guest printed no journal)".to_string()
        } else {
            tail(&report.journal.join("\n"), 200)
        };
        let guest_kernel_died = guest_kernel_died(report.result, &lines);
        let message = format!(
            "VM scenario {name} (driver {}) failed after {:.0} s: {why}\n\
             --- guest journal: nodelet, containerd (last 200 lines) ---\n{journal}\n\
             --- console: last 20 lines (all of it in {}) ---\n{}\n\
             --- in the guest ---\n{}",
            driver.name(),
            wall.as_secs_f64(),
            run_dir(name).join("console.log").display(),
            tail(&lines.join("\n"), 20),
            if report.panics.is_empty() {
                "(no panic message)".to_string()
            } else {
                report.panics.join("\n")
            }
        );
        return Err(BootFailure {
            message,
            guest_kernel_died,
        });
    }
    Ok(lines)
}

/// The run directory scripts/vm.sh uses for `name` (console.log is there).
fn run_dir(name: &str) -> PathBuf {
    vm_dir().join("runs").join(name)
}

/// scripts/vm.sh's output directory, which the guest sees at the same path: `NODELET_VM_DIR`,
/// else `vm` in the target directory.
pub fn vm_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    std::env::var_os("NODELET_VM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("vm"))
}

/// The node inside the VM, as the guest side of a scenario sees it.
pub struct Guest {
    pub driver: Driver,
    /// nodelet's node name.
    pub node: String,
    /// A tmpfs for everything of this run (scripts/vm/guest.sh mounts it).
    pub state: PathBuf,
    pub manifests: PathBuf,
    /// containerd's socket (a path).
    pub containerd_sock: String,
    cri: String,
}

impl Guest {
    fn from_env(driver: Driver) -> Guest {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: is this scripts/vm/guest.sh's environment?")
            })
        };
        assert_eq!(
            var("NODELET_VM_DRIVER"),
            driver.name(),
            "the VM was booted with another containerd cgroup driver"
        );
        let state = PathBuf::from(var("NODELET_VM_STATE"));
        Guest {
            driver,
            node: "nodelet-vm".into(),
            manifests: state.join("manifests"),
            state,
            containerd_sock: var("NODELET_TEST_CONTAINERD_SOCK"),
            cri: var("NODELET_TEST_CRI"),
        }
    }

    /// nodelet's configuration for this node; `extra` (YAML lines) is appended.
    pub fn config(&self, extra: &str) -> String {
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\n\
             kind: KubeletConfiguration\n\
             cgroupDriver: {driver}\n\
             containerRuntimeEndpoint: {cri}\n\
             containerdEndpoint: {cri}\n\
             staticPodPath: {manifests}\n\
             fileCheckFrequency: 5s\n\
             syncFrequency: 10s\n\
             rootDir: {state}/nodelet\n\
             podLogsDir: {state}/pods\n\
             nodeName: {node}\n\
             address: 127.0.0.1\n\
             readOnlyPort: {API_PORT}\n\
             port: 0\n\
             logging:\n  verbosity: 4\n{extra}",
            driver = self.driver.name(),
            cri = self.cri,
            manifests = self.manifests.display(),
            state = self.state.display(),
            node = self.node,
        )
    }

    /// Writes /etc/nodelet/config.yaml (the unit's `--config`) and starts nodelet with
    /// `systemctl start`, which returns once nodelet reported ready (`Type=notify`).
    pub fn start_nodelet(&self, extra: &str) {
        std::fs::create_dir_all(&self.manifests).expect("manifest directory");
        self.write_config(extra);
        self.systemctl(&["start", "nodelet.service"]);
        assert_eq!(self.unit("nodelet.service", "ActiveState"), "active");
    }

    /// Writes /etc/nodelet/config.yaml with [`Guest::config`]`(extra)`; the next start or
    /// restart of nodelet's unit reads it.
    pub fn write_config(&self, extra: &str) {
        std::fs::write("/etc/nodelet/config.yaml", self.config(extra)).expect("write config");
    }

    /// `systemctl ARGS`; fails the scenario with its output and nodelet's journal when it fails.
    pub fn systemctl(&self, args: &[&str]) -> String {
        let out = Command::new("systemctl")
            .args(args)
            .output()
            .expect("run systemctl");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "systemctl {}: {}\n{text}\n--- nodelet journal ---\n{}",
            args.join(" "),
            out.status,
            self.journal(40)
        );
        text
    }

    /// A unit's property (`systemctl show -p NAME --value`).
    pub fn unit(&self, unit: &str, property: &str) -> String {
        self.systemctl(&["show", "-p", property, "--value", unit])
            .trim()
            .to_string()
    }

    /// Several properties of a unit at once (`systemctl show -p A,B,...`), by name.
    pub fn unit_properties(&self, unit: &str, properties: &[&str]) -> BTreeMap<String, String> {
        self.systemctl(&["show", "-p", &properties.join(","), unit])
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub fn main_pid(&self, unit: &str) -> u32 {
        let pid = self.unit(unit, "MainPID");
        pid.parse()
            .unwrap_or_else(|_| panic!("{unit}: MainPID {pid:?}"))
    }

    /// The last `lines` of nodelet's journal.
    ///
    /// Only nodelet's INFO, WARN and ERROR lines, each cut to 300 characters: a failure
    /// message reaches CI's summary only in part, and DEBUG lines (a pod's full actions, a status
    /// patch) crowded out what happened (CI, 2026-12-03: 80 lines spanned 3 minutes and the
    /// summary showed none of the middle).
    pub fn journal(&self, lines: usize) -> String {
        let out = Command::new("journalctl")
            .args([
                "--no-pager",
                "-o",
                "short-monotonic",
                "-u",
                "nodelet",
                "-n",
                "5000",
            ])
            .output();
        let text = match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => return format!("(journalctl: {e})"),
        };
        let kept: Vec<String> = text
            .lines()
            .filter(|l| !l.contains(" DEBUG ") && !l.contains(" TRACE "))
            .map(|l| match l.char_indices().nth(300) {
                Some((cut, _)) => format!("{}…", &l[..cut]),
                None => l.to_string(),
            })
            .collect();
        kept[kept.len().saturating_sub(lines)..].join("\n")
    }

    /// How many lines of nodelet's journal (this boot) contain `text`.
    pub fn journal_count(&self, text: &str) -> usize {
        self.journal_lines(text).len()
    }

    /// The lines of nodelet's journal (this boot) that contain `text`, oldest first.
    pub fn journal_lines(&self, text: &str) -> Vec<String> {
        let out = Command::new("journalctl")
            .args(["--no-pager", "-o", "cat", "-u", "nodelet"])
            .output()
            .expect("journalctl");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(text))
            .map(str::to_string)
            .collect()
    }

    pub fn write_manifest(&self, file: &str, body: &str) {
        let tmp = self.state.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, body).expect("write manifest");
        std::fs::rename(&tmp, self.manifests.join(file)).expect("rename manifest");
    }

    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.manifests.join(file)).expect("remove manifest");
    }

    /// Static pods are named `<name>-<node>`.
    pub fn pod_name(&self, name: &str) -> String {
        format!("{name}-{}", self.node)
    }

    /// nodelet's read-only API (a client of its own, as every call here had).
    fn api(&self) -> NodeletApi {
        NodeletApi::new(
            format!("http://127.0.0.1:{API_PORT}"),
            Duration::from_secs(10),
        )
    }

    async fn get(&self, path: &str) -> Option<String> {
        self.api().get(path).await
    }

    /// The pods of the local API, or `None` while nodelet does not answer.
    pub async fn pods(&self) -> Option<Vec<Pod>> {
        self.api().pods().await
    }

    pub async fn pod(&self, name: &str) -> Option<Pod> {
        self.api().pod(&self.pod_name(name)).await
    }

    /// Polls the local API until pod `name` satisfies `check`; fails with its last state and
    /// nodelet's journal after [`T`].
    pub async fn wait_pod(&self, name: &str, what: &str, check: impl Fn(&Pod) -> bool) -> Pod {
        self.api()
            .wait_pod(&self.pod_name(name), WAIT, what, check, || {
                format!("--- nodelet journal ---\n{}", self.journal(60))
            })
            .await
    }

    /// Polls the local API until pod `name` is no longer listed.
    pub async fn wait_gone(&self, name: &str) {
        self.api()
            .wait_gone(&self.pod_name(name), WAIT, || {
                format!("--- nodelet journal ---\n{}", self.journal(60))
            })
            .await
    }

    /// nodelet's events for pod `uid` (`/events?pod=`), one `type reason: message` line each:
    /// what it did to the pod and why, for failure messages.
    pub async fn events(&self, uid: &str) -> String {
        let Some(text) = self.get(&format!("/events?pod={uid}")).await else {
            return "(nodelet does not answer /events)".into();
        };
        let list: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let field = |e: &serde_json::Value, name: &str| {
            e.get(name)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        list.get("items")
            .and_then(|items| items.as_array())
            .map(|items| {
                items
                    .iter()
                    .map(|e| {
                        format!(
                            "{} {}: {}",
                            field(e, "type"),
                            field(e, "reason"),
                            field(e, "message")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_else(|| format!("(unexpected /events answer: {text})"))
    }

    /// `/stats/summary` as JSON; fails when nodelet has not answered it within [`T`]. The first
    /// answer reads every container's status from the runtime, which in an emulated guest on a
    /// loaded host can take longer than the 10 s other reads are given, so this read gets a
    /// minute per attempt and is tried again until [`T`]; how long it took is printed.
    pub async fn stats_summary(&self) -> serde_json::Value {
        let api = NodeletApi::new(
            format!("http://127.0.0.1:{API_PORT}"),
            Duration::from_secs(60),
        );
        let started = Instant::now();
        let text = loop {
            if let Some(text) = api.get("/stats/summary").await {
                break text;
            }
            assert!(
                started.elapsed() < T,
                "nodelet has not answered /stats/summary in {T:?}\n--- nodelet journal ---\n{}",
                self.journal(40)
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        println!(
            "vm scenario: /stats/summary answered after {:.1} s",
            started.elapsed().as_secs_f64()
        );
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("/stats/summary is not JSON ({e}): {text}"))
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> Option<String> {
        self.api().metrics().await
    }

    /// The sum of the samples of `series` (see [`metric_sum`]), or `None` while nodelet does not
    /// answer or does not expose it.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        self.api().metric(series).await
    }

    /// The value of `series` now; fails when nodelet does not expose it (a misspelt name must
    /// not read as 0).
    pub async fn metric_now(&self, series: &str) -> f64 {
        let text = self.metrics().await.expect("nodelet answers /metrics");
        metric_sum(&text, series)
            .unwrap_or_else(|| panic!("nodelet exposes no {series}; /metrics:\n{text}"))
    }

    /// Polls until `check` holds for the value of `series`; returns that value.
    pub async fn wait_metric(&self, series: &str, what: &str, check: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + T;
        let mut last = None;
        loop {
            if let Some(v) = self.metric(series).await {
                if check(v) {
                    return v;
                }
                last = Some(v);
            }
            assert!(
                Instant::now() < deadline,
                "metric {series}: no {what} after {T:?} (last {last:?})\n--- nodelet journal ---\n{}",
                self.journal(40)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Polls `check` (a blocking probe of the node) until it holds; fails with `what`.
    pub async fn wait_for(&self, what: &str, check: impl Fn() -> bool) {
        let deadline = Instant::now() + T;
        while !check() {
            assert!(
                Instant::now() < deadline,
                "no {what} after {T:?}\n--- nodelet journal ---\n{}",
                self.journal(40)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The version the running containerd reports (`ctr version`, the server's), e.g. `2.1.9`
    /// (a distribution suffix such as `+unknown` cut off).
    pub fn containerd_version(&self) -> String {
        let out = Command::new("ctr")
            .args(["--address", &self.containerd_sock, "version"])
            .output()
            .expect("run ctr version");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "ctr version: {text}");
        server_version(&text)
            .unwrap_or_else(|| panic!("no server version in `ctr version`: {text}"))
    }

    /// Whether the guest's containerd is of the 1.6 line (whose known losses some checks
    /// allow for, each saying which); the current node runs 2.x.
    pub fn containerd_1_6(&self) -> bool {
        self.containerd_version().starts_with("1.6.")
    }

    /// containerd's tasks in the CRI namespace (`ctr tasks ls`): container id → (pid, status).
    pub fn tasks(&self) -> BTreeMap<String, (u32, String)> {
        let out = Command::new("ctr")
            .args(["--address", &self.containerd_sock, "--namespace", "k8s.io"])
            .args(["tasks", "ls"])
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr tasks ls: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        parse_tasks(&String::from_utf8_lossy(&out.stdout))
    }

    /// The absolute directory of a QoS tier's cgroup (`None`: `kubepods` itself).
    pub fn tier_cgroup(&self, qos: Option<Qos>) -> PathBuf {
        Path::new(CGROUP_MOUNT).join(tier_cgroup_path(self.driver, qos))
    }

    /// The absolute directory of a pod's cgroup, by the kubelet's naming for this driver.
    pub fn pod_cgroup(&self, qos: Qos, uid: &str) -> PathBuf {
        Path::new(CGROUP_MOUNT).join(pod_cgroup_path(self.driver, qos, uid))
    }

    /// A cgroup file's content, trimmed.
    pub fn cgroup_file(&self, dir: &Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
            .trim()
            .to_string()
    }

    /// A process's cgroup v2 path (`/proc/PID/cgroup`, the `0::` line), relative to the mount.
    pub fn cgroup_of(&self, pid: u32) -> String {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/cgroup: {e}"));
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or_else(|| panic!("/proc/{pid}/cgroup has no cgroup v2 line: {text}"))
            .trim_start_matches('/')
            .to_string()
    }

    /// Prints how long a step of the scenario took when the returned guard is dropped.
    pub fn step(&self, name: &str) -> Step {
        println!("vm scenario: step {name}: started");
        Step {
            name: name.to_string(),
            started: Instant::now(),
        }
    }
}

/// Reports the wall time of a scenario step (see [`Guest::step`]).
pub struct Step {
    name: String,
    started: Instant,
}

impl Drop for Step {
    fn drop(&mut self) {
        let outcome = if std::thread::panicking() {
            "FAILED"
        } else {
            "done"
        };
        println!(
            "vm scenario: step {}: {outcome} in {:.1} s",
            self.name,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// The server's version in `ctr version` output, without a `+...` or `~...` suffix.
pub fn server_version(text: &str) -> Option<String> {
    let server = text.split("Server:").nth(1)?;
    let line = server
        .lines()
        .find(|l| l.trim_start().starts_with("Version:"))?;
    let version = line.trim_start().strip_prefix("Version:")?.trim();
    let version = version.split(['+', '~']).next()?.trim_start_matches('v');
    (!version.is_empty()).then(|| version.to_string())
}

/// `ctr tasks ls` output (`TASK PID STATUS` columns) as id → (pid, status).
pub fn parse_tasks(text: &str) -> BTreeMap<String, (u32, String)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut cols = line.split_whitespace();
            let id = cols.next()?.to_string();
            let pid = cols.next()?.parse().ok()?;
            let status = cols.next()?.to_string();
            Some((id, (pid, status)))
        })
        .collect()
}
