//! The `nodelet` command line, without a container runtime.

mod common;

use common::cli;

#[test]
fn validate_reports_a_wrong_type_and_an_unknown_field_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: many\nfooBar: 1\n",
    )
    .unwrap();
    let (ok, out, err) = cli(&["validate", "--config", path.to_str().unwrap()]);
    assert!(!ok, "validate must fail\n{out}\n{err}");
    let all = format!("{out}{err}");
    assert!(all.contains("maxPods"), "wrong type not reported:\n{all}");
    assert!(all.contains("\"many\""), "bad value not shown:\n{all}");
    assert!(all.contains("fooBar"), "unknown field not reported:\n{all}");
}

/// The credential provider config is checked too: a provider whose binary is missing from the
/// bin dir fails with the field and the path; a good one is counted.
#[test]
fn validate_checks_the_credential_provider_config() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("login"), "#!/bin/sh\n").unwrap();
    let providers = dir.path().join("providers.yaml");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageCredentialProviderConfig: {}\nimageCredentialProviderBinDir: {}\n",
            providers.display(),
            bin.display()
        ),
    )
    .unwrap();
    let write = |name: &str| {
        std::fs::write(
            &providers,
            format!("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: {name}\n  matchImages: [\"*.example.com\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"),
        )
        .unwrap()
    };
    write("login");
    let (ok, out, err) = cli(&["validate", "--config", config.to_str().unwrap()]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("ok (1 credential provider(s))"), "{out}");
    write("missing");
    let (ok, out, err) = cli(&["validate", "--config", config.to_str().unwrap()]);
    assert!(!ok, "validate must fail\n{out}\n{err}");
    assert!(
        out.contains("providers[0].name: error inspecting binary executable")
            && out.contains("bin/missing"),
        "{out}"
    );
}

#[test]
fn validate_accepts_the_example_config() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.yaml");
    let (ok, out, err) = cli(&["validate", "--config", example]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains(": ok"), "{out}");
}

#[test]
fn validate_checks_manifests_and_names_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &good,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: main\n    image: localhost/testbox:1\n",
    )
    .unwrap();
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web2\nspec:\n  containers:\n  - name: main\n",
    )
    .unwrap();
    let (ok, out, _) = cli(&[
        "validate",
        "--node-name",
        "n1",
        "--manifest",
        good.to_str().unwrap(),
    ]);
    assert!(ok, "{out}");
    assert!(out.contains("web-n1"), "{out}");
    let (ok, out, _) = cli(&[
        "validate",
        "--node-name",
        "n1",
        "--manifest",
        bad.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        out.contains("bad.yaml") && out.contains("spec.containers[0].image"),
        "{out}"
    );
}

#[test]
fn run_with_a_broken_config_stops_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: foo\n").unwrap();
    let (ok, _, err) = cli(&["run", "--config", path.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("cgroupDriver") && err.contains("foo"), "{err}");
}

#[test]
fn pods_reports_an_unreachable_server() {
    let port = nodelet_testkit::port::free_port();
    let (ok, _, err) = cli(&["pods", "--server", &format!("http://127.0.0.1:{port}")]);
    assert!(!ok);
    assert!(err.contains(&port.to_string()), "{err}");
}

#[test]
fn run_on_a_cgroup_v1_host_is_refused_unless_failcgroupv1_is_false() {
    assert!(
        !nodelet::cgroup::is_cgroup2_unified(std::path::Path::new("/sys/fs/cgroup")),
        "this test is about the cgroup v1 host the tests run on; /sys/fs/cgroup is cgroup2 here"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    // A configuration that would otherwise start: the refusal comes before the runtime.
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeName: v1-refusal\nrootDir: {}\ncontainerRuntimeEndpoint: unix://{}/missing.sock\nport: 0\nhealthzPort: 0\n",
            dir.path().join("root").display(),
            dir.path().display()
        ),
    )
    .unwrap();
    // Bounded: without the refusal, `run` would wait for the missing runtime forever.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(["run", "--config", path.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run nodelet");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("nodelet run did not stop on the cgroup v1 host within 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        !status.success(),
        "run must fail on a cgroup v1 host\n{err}"
    );
    // The kubelet's words (1.35+), written out here rather than taken from nodelet's constant.
    assert!(
        err.contains("kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is unsupported and will be removed in a future release"),
        "the kubelet's message: {err}"
    );
    assert!(err.contains(nodelet::cgroup::CGROUP_V1_REFUSAL), "{err}");
    assert!(err.contains("failCgroupV1"), "names the field: {err}");
    assert!(
        err.contains(path.to_str().unwrap()),
        "names the file: {err}"
    );
    assert!(
        !dir.path().join("root").exists(),
        "nothing was started or created before the refusal"
    );
}

/// A configuration `nodelet run` accepts on this host that waits for a runtime that is never
/// there (so it logs a warning every ten seconds and starts nothing).
fn config_without_a_runtime(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("c.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeName: log-colours\n\
             rootDir: {root}\npodLogsDir: {logs}\ncontainerRuntimeEndpoint: unix://{dir}/missing.sock\n\
             failCgroupV1: false\nport: 0\nreadOnlyPort: 0\nhealthzPort: 0\n",
            root = dir.join("root").display(),
            logs = dir.join("logs").display(),
            dir = dir.display(),
        ),
    )
    .unwrap();
    path
}

/// Waits (30 s at most) until `read()` holds the warning nodelet logs while it waits for the
/// runtime: the positive sign that it is logging.
fn wait_for_runtime_warning(read: impl Fn() -> String) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = read();
        if text.contains("waiting for the container runtime") {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nodelet never logged that it waits for the runtime:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// stderr to a file (as under systemd, to the journal): plain text, no ANSI escape codes.
#[test]
fn logs_to_a_file_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_without_a_runtime(dir.path());
    let log = dir.path().join("nodelet.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(["run", "--config", config.to_str().unwrap()])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run nodelet");
    let text = wait_for_runtime_warning(|| std::fs::read_to_string(&log).unwrap_or_default());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(
        !text.contains("\x1b["),
        "ANSI escape codes in a log file:\n{text:?}"
    );
    assert!(
        status.success(),
        "SIGTERM while waiting for the runtime: {status}"
    );
}

/// The same run on a terminal (a pty from util-linux's `script`) gets colours: the terminal
/// check is what decides.
#[test]
fn logs_to_a_terminal_are_coloured() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let config = config_without_a_runtime(dir.path());
    let pid_file = dir.path().join("pid");
    // The shell writes its PID and becomes nodelet, so the test can stop nodelet by that PID.
    let command = format!(
        "echo $$ > {}; exec env -u NO_COLOR -u RUST_LOG {} run --config {}",
        pid_file.display(),
        env!("CARGO_BIN_EXE_nodelet"),
        config.display()
    );
    let mut script = std::process::Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("util-linux `script` (Debian's bsdutils)");
    let mut stdout = script.stdout.take().unwrap();
    let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = std::thread::spawn({
        let output = output.clone();
        move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                output.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        }
    });
    let text =
        wait_for_runtime_warning(|| String::from_utf8_lossy(&output.lock().unwrap()).into_owned());
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = script.wait().unwrap();
    drop(script.stdin.take());
    reader.join().unwrap();
    assert!(
        text.contains("\x1b["),
        "no colours on a terminal:\n{text:?}"
    );
    assert!(status.success(), "{status}");
}

/// Runs `nodelet run` with `extra` fields on top of [`config_without_a_runtime`]; returns the
/// child once it waits for the runtime (past every start check), or its failure output.
fn run_with(dir: &std::path::Path, extra: &str) -> Result<std::process::Child, String> {
    let config = config_without_a_runtime(dir);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(extra);
    std::fs::write(&config, text).unwrap();
    let log = dir.join("nodelet.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(["run", "--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run nodelet");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(status) = child.try_wait().unwrap() {
            return Err(format!("{status}: {text}"));
        }
        if text.contains("waiting for the container runtime") {
            return Ok(child);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nodelet neither failed nor waited for the runtime:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn stop(mut child: std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    child.wait().unwrap();
}

const ROOT_MAXKEYS: &str = "/proc/sys/kernel/keys/root_maxkeys";

/// `maxOpenFiles`, `oomScoreAdj` and `protectKernelDefaults` act on the process and the kernel
/// as the kubelet's start does: the limit and the score are nodelet's own, a kernel tunable
/// that differs from the kubelet's value is written (`false`) or stops the start (`true`).
#[test]
fn run_sets_its_limits_and_the_kernel_tunables_as_the_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    // A tunable off the kubelet's value: `protectKernelDefaults: true` refuses to start. The
    // tunable is the host's: a nodelet another test lane starts at the same moment writes the
    // kubelet's value back between this write and the check (seen in CI), so a start is tried
    // again; one that never refuses fails.
    let mut refused = None;
    for _ in 0..5 {
        std::fs::write(ROOT_MAXKEYS, "999999").unwrap();
        match run_with(dir.path(), "protectKernelDefaults: true\n").map(stop) {
            Err(text) => {
                refused = Some(text);
                break;
            }
            Ok(()) => std::thread::sleep(std::time::Duration::from_secs(1)),
        }
    }
    let refused = refused.expect("protectKernelDefaults: true must refuse differing tunables");
    assert!(
        refused.contains("invalid kernel flag: kernel/keys/root_maxkeys, expected value: 1000000, actual value: 999999"),
        "{refused}"
    );
    assert_eq!(
        std::fs::read_to_string(ROOT_MAXKEYS).unwrap().trim(),
        "999999",
        "left as it was"
    );
    // `false` (the default) writes it; the process gets its limit and score.
    let child = run_with(dir.path(), "maxOpenFiles: 4242\noomScoreAdj: 321\n").unwrap();
    let pid = child.id();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_default()
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect::<Vec<_>>();
    let score = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
    stop(child);
    assert_eq!(open_files, ["4242", "4242"], "{limits}");
    // A raise: this host (a container) lets no process lower its score below where it started.
    assert_eq!(score.trim(), "321");
    for (path, want) in nodelet::config::kernel_tunables::KERNEL_TUNABLES {
        let got = std::fs::read_to_string(format!("/proc/sys/{path}")).unwrap();
        assert_eq!(got.trim(), want.to_string(), "{path}");
    }
    // With every tunable as the kubelet wants it, `true` starts.
    stop(run_with(dir.path(), "protectKernelDefaults: true\n").unwrap());
}

/// `nodelet validate` never says a field is ignored: a kubelet configuration of the fields
/// nodelet fixes, at the values it behaves as, passes silently; another value fails, naming
/// field, value and why.
#[test]
fn validate_prints_no_ignored_line_and_refuses_what_it_cannot_honour() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubelet.yaml");
    let header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    std::fs::write(
        &path,
        format!(
            "{header}cpuManagerPolicy: none\nmemoryManagerPolicy: None\ntopologyManagerPolicy: none\n\
             topologyManagerScope: pod\nhairpinMode: hairpin-veth\niptablesMasqueradeBit: 14\n\
             makeIPTablesUtilChains: false\nrunOnce: false\nenableControllerAttachDetach: true\n\
             cpuCFSQuotaPeriod: 100ms\ncpuManagerReconcilePeriod: 0s\nvolumeStatsAggPeriod: 0s\n\
             podsPerCore: 4\nregistryPullQPS: 2\neventRecordQPS: 10\nprotectKernelDefaults: false\n\
             logging:\n  flushFrequency: 0\n  options:\n    json:\n      infoBufferSize: \"0\"\n"
        ),
    )
    .unwrap();
    let (ok, out, err) = cli(&["validate", "--config", path.to_str().unwrap()]);
    assert!(ok, "validate must pass\n{out}\n{err}");
    let all = format!("{out}{err}");
    assert!(!all.to_lowercase().contains("ignor"), "{all}");
    assert!(!all.contains("warning"), "{all}");
    std::fs::write(&path, format!("{header}cpuManagerPolicy: static\n")).unwrap();
    let (ok, out, err) = cli(&["validate", "--config", path.to_str().unwrap()]);
    assert!(!ok, "validate must fail\n{out}\n{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("cpuManagerPolicy: Invalid value: \"static\": nodelet accepts only \"none\": nodelet has no CPU manager"),
        "{all}"
    );
}

fn iptables(args: &[&str]) -> bool {
    std::process::Command::new("iptables")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("iptables is installed (scripts/install-deps.sh)")
        .success()
}

fn hint_chain_present() -> bool {
    iptables(&["-w", "-t", "mangle", "-S", "KUBE-IPTABLES-HINT"])
}

/// `makeIPTablesUtilChains` on the host's iptables: `false` leaves iptables alone (the run's own
/// log says nothing of it: other nodelets on this host may make the chains meanwhile), the
/// default puts the kubelet's hint chain and the localnet rule of `KUBE-FIREWALL` in place.
#[test]
fn run_keeps_the_kubelets_iptables_chains_unless_told_not_to() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nodelet.log");
    let off = run_with(dir.path(), "makeIPTablesUtilChains: false\n").unwrap();
    // Well past the start (it waits for the runtime).
    std::thread::sleep(std::time::Duration::from_secs(2));
    stop(off);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("iptables"),
        "makeIPTablesUtilChains: false touched iptables:\n{text}"
    );
    // Start from a node without the hint chain (another nodelet run may have made it).
    iptables(&["-w", "-t", "mangle", "-X", "KUBE-IPTABLES-HINT"]);
    let on = run_with(dir.path(), "").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let initialized = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("initialized iptables rules")
    };
    while !initialized() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let localnet_rule = iptables(&[
        "-w",
        "-t",
        "filter",
        "-C",
        "KUBE-FIREWALL",
        "-m",
        "comment",
        "--comment",
        "block incoming localnet connections",
        "--dst",
        "127.0.0.0/8",
        "!",
        "--src",
        "127.0.0.0/8",
        "-m",
        "conntrack",
        "!",
        "--ctstate",
        "RELATED,ESTABLISHED,DNAT",
        "-j",
        "DROP",
    ]);
    let input_jump = iptables(&["-w", "-t", "filter", "-C", "INPUT", "-j", "KUBE-FIREWALL"]);
    stop(on);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("initialized iptables rules"), "{text}");
    assert!(hint_chain_present(), "no KUBE-IPTABLES-HINT after 30 s");
    assert!(
        localnet_rule && input_jump,
        "KUBE-FIREWALL: rule {localnet_rule}, INPUT jump {input_jump}"
    );
}
