//! Eviction in the cgroup v2 VM (tests/vm/mod.rs: qemu under software emulation, systemd as
//! PID 1, containerd and nodelet as units). The VM boots once and the cycle repeats inside it:
//! a Burstable pod allocates 10 MiB every 100 ms until `memory.available` (the root cgroup's
//! working set against `MemTotal`, as nodelet and the kubelet's cAdvisor compute it on cgroup
//! v2) crosses the hard threshold, and is evicted. The guest samples `memory.available` every
//! 10 ms itself, so the crossing is timed from outside the agent; the kill is timed by the
//! agent's log line that issues it and by the runtime's `finishedAt` of the hog's container (the
//! process dead).
//!
//! nodelet runs standalone (static pods, `evictStaticPods`). The kubelet never evicts a static
//! pod (they are critical to it), so for its column it runs in the same boot after nodelet,
//! joined to the host's control plane (scripts/k8s.sh, reached over qemu's user-mode network),
//! and the hog is an API pod bound to it; the kubelet binary, kubectl and the kubeconfigs
//! reach the guest through the shared target directory (`target/vm/kubelet-kit`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use nodelet::cri::{api, labels, Runtime};

use crate::cluster::{Cluster, Kubectl};
use crate::report::{ms_between, num, Row, Section, Summary, Verdict};
use crate::sys::{self, LoadMark};
use crate::vm::{self, Driver, Guest, Network};
use crate::Options;

/// The VM scenario's name (the guest checks it was booted for it).
pub const SCENARIO: &str = "eviction_bench";
const MI: u64 = 1 << 20;
const RESULT: &str = "BENCH-EVICTION-RESULT ";
/// How far below what is free at the start the threshold sits.
const HEADROOM_MIB: u64 = 300;
/// What the kubelet itself takes once it runs, kept out of its threshold's headroom.
const KUBELET_RSS_MIB: u64 = 150;
/// The number of cycles, for the guest (the host passes it through `scripts/vm.sh --env`).
const RUNS_VAR: &str = "NODELET_BENCH_EVICTION_RUNS";
/// The kubelet's kit in the guest (a directory of the shared target directory), its node name
/// and the namespace of its pods; unset: no kubelet column.
const KIT_VAR: &str = "NODELET_BENCH_KUBELET_KIT";
const NODE_VAR: &str = "NODELET_BENCH_KUBELET_NODE";
const NAMESPACE_VAR: &str = "NODELET_BENCH_KUBELET_NAMESPACE";
/// The guest's address of the host's loopback (qemu's user-mode network), and the guest's own.
const HOST_FROM_GUEST: &str = "10.0.2.2";
const GUEST_IP: &str = "10.0.2.15";

/// Guest side: runs the scenario this VM was booted for.
pub fn in_guest() {
    let runs = std::env::var(RUNS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    vm::scenario_with(
        SCENARIO,
        Driver::Systemd,
        Duration::ZERO,
        &[],
        Network::None,
        |g| guest(g, runs),
    );
}

/// What the guest needs to run the kubelet joined to the host's control plane.
struct KubeletKit {
    dir: PathBuf,
    node: String,
    namespace: String,
}

/// The kit in `<target>/vm/kubelet-kit` (the VM sees the target directory): the kubelet and
/// kubectl, the cluster CA, and kubeconfigs of the node and the admin whose server is the
/// host's API server as the guest reaches it (the server's certificate names `localhost`,
/// not 10.0.2.2: `tls-server-name`); and the namespace of its pods, created.
fn kubelet_kit(cluster: &Cluster, kubelet: &str) -> KubeletKit {
    let dir = vm::vm_dir().join("kubelet-kit");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the kubelet kit's directory");
    let place = |from: &Path, name: &str| {
        let to = dir.join(name);
        if std::fs::hard_link(from, &to).is_err() {
            std::fs::copy(from, &to)
                .unwrap_or_else(|e| panic!("copy {} into the kit: {e}", from.display()));
        }
    };
    place(Path::new(kubelet), "kubelet");
    place(&cluster.admin.bin, "kubectl");
    place(Path::new(&cluster.ca), "ca.crt");
    let node = crate::agent::node_name(crate::agent::Kind::Kubelet, "eviction");
    let port = cluster
        .server
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
        .expect("the API server's port");
    let server = format!("https://{HOST_FROM_GUEST}:{port}");
    let node_config = cluster.node_kubeconfig(&node, &dir);
    for (from, name) in [
        (node_config, "node.kubeconfig"),
        (cluster.admin.kubeconfig.clone(), "admin.kubeconfig"),
    ] {
        let flat = cluster.kubectl_ok(&[
            "config",
            "view",
            "--raw",
            "--flatten",
            "--minify",
            "--kubeconfig",
            &from.display().to_string(),
        ]);
        let to = dir.join(name);
        std::fs::write(&to, flat).expect("write a guest kubeconfig");
        let to = to.display().to_string();
        let cluster_name = cluster
            .kubectl_ok(&[
                "config",
                "view",
                "--kubeconfig",
                &to,
                "-o",
                "jsonpath={.clusters[0].name}",
            ])
            .trim()
            .to_string();
        cluster.kubectl_ok(&[
            "config",
            "set-cluster",
            &cluster_name,
            "--kubeconfig",
            &to,
            &format!("--server={server}"),
            "--tls-server-name=localhost",
        ]);
    }
    let namespace = format!("bench-eviction-{}", std::process::id());
    cluster.create_namespace(&namespace);
    KubeletKit {
        dir,
        node,
        namespace,
    }
}

/// Host side: boots the VM once for `runs` cycles of nodelet and, when a kubelet and the
/// control plane are there, `runs` of the kubelet; turns the guest's results into a table.
pub async fn run(opts: &Options) -> Section {
    let runs = opts.eviction_runs;
    let cluster = Cluster::from_env();
    let kit = match (crate::agent::kubelet_binary(), &cluster) {
        (Some(kubelet), Some(cluster)) => Some(kubelet_kit(cluster, &kubelet)),
        (Some(_), None) => {
            eprintln!(
                "eviction: no control plane (scripts/k8s.sh env): the kubelet column stays empty"
            );
            None
        }
        _ => None,
    };
    let mut env = vec![(RUNS_VAR, runs.to_string())];
    if let Some(kit) = &kit {
        env.push((KIT_VAR, kit.dir.display().to_string()));
        env.push((NODE_VAR, kit.node.clone()));
        env.push((NAMESPACE_VAR, kit.namespace.clone()));
    }
    let network = if kit.is_some() {
        Network::Host
    } else {
        Network::None
    };
    let load = LoadMark::start();
    // Boot, containerd, images: about two minutes under emulation; then each cycle (the
    // kubelet's: its start and registration, then cycles of up to its 10 s pass more).
    let per_agent = 90 * runs as u64;
    let timeout = Duration::from_secs(
        600 + per_agent
            + if kit.is_some() {
                300 + per_agent * 2
            } else {
                0
            },
    );
    let lines = tokio::task::spawn_blocking(move || {
        vm::scenario_with(SCENARIO, Driver::Systemd, timeout, &env, network, |g| {
            guest(g, runs)
        })
    })
    .await
    .expect("the VM run");
    let load = load.end();
    if let (Some(kit), Some(cluster)) = (&kit, &cluster) {
        let _ = cluster.kubectl(&["delete", "namespace", &kit.namespace, "--wait=false"]);
        let _ = cluster.kubectl(&["delete", "node", &kit.node, "--ignore-not-found"]);
    }
    let results: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(&l[l.find(RESULT)? + RESULT.len()..]).ok())
        .collect();
    let field = |agent: &str, name: &str| -> Option<Summary> {
        let values: Vec<f64> = results
            .iter()
            .filter(|r| r.get("agent").and_then(|a| a.as_str()).unwrap_or("nodelet") == agent)
            .filter_map(|r| r.get(name)?.as_f64())
            .collect();
        Summary::of(&values)
    };
    let short = |s: &Option<Summary>| {
        s.as_ref().map_or("—".to_string(), |s| {
            format!("p50 {} / max {} (n={})", num(s.p50), num(s.max), s.n)
        })
    };
    let versus = |n: &Option<Summary>, k: &Option<Summary>| {
        let ratio = n.as_ref().zip(k.as_ref()).map(|(n, k)| n.p50 / k.p50);
        (
            if kit.is_some() {
                short(k)
            } else {
                String::new()
            },
            ratio,
        )
    };
    let decided = field("nodelet", "crossing_to_kill_issued_ms");
    let kubelet_decided = field("kubelet", "crossing_to_kill_issued_ms");
    let dead = field("nodelet", "crossing_to_dead_ms");
    let kubelet_dead = field("kubelet", "crossing_to_dead_ms");
    let inside = field("nodelet", "first_pass_to_kill_ms");
    let (k, ratio) = versus(&decided, &kubelet_decided);
    let mut rows = vec![Row::new(
        "memory.available crossing → kill issued (the agent's log line), ms",
        short(&decided),
    )
    .kubelet(k, ratio)
    .goal(
        "≤ 1 s",
        decided
            .as_ref()
            .map_or(Verdict::Misses, |s| Verdict::at_most(s.max, 1000.0)),
    )
    .load(&load)];
    let (k, ratio) = versus(&dead, &kubelet_dead);
    rows.push(
        Row::new(
            "memory.available crossing → hog's process dead (runtime `finishedAt`), ms",
            short(&dead),
        )
        .kubelet(k, ratio)
        .load(&load),
    );
    rows.push(
        Row::new(
            "nodelet's own view: pass that first saw the threshold → kill issued, ms",
            short(&inside),
        )
        .load(&load),
    );
    let kubelet_note = if kit.is_some() {
        format!(
            " Then, in the same boot, nodelet stopped, the kubelet v1.37.2 (a transient systemd \
             unit, `--v=3`) joined as a node to the host's control plane of scripts/k8s.sh over \
             qemu's user-mode network, with the same kind of threshold ({HEADROOM_MIB} MiB below \
             what is available before it starts, less {KUBELET_RSS_MIB} MiB for the kubelet \
             itself) and its defaults otherwise (eviction pass every 10 s; on cgroup v2 it has \
             no memory threshold notification), and {runs} cycles of the same hog as an API pod \
             bound to it: the kubelet never evicts a static pod. Its kill issued is its \
             `Evicting pod` line's journal time."
        )
    } else {
        " No kubelet column: the run had no kubelet or no control plane.".to_string()
    };
    Section {
        part: "eviction".into(),
        title: "Eviction (cgroup v2 VM)".into(),
        measured: format!("{}, nodelet {}", sys::now_utc(), sys::commit()),
        rows,
        notes: vec![format!(
            "One VM boot (qemu `-accel tcg`, 2 vCPUs, 3 GiB, systemd driver; everything runs \
             several times slower than on real hardware), {runs} cycles inside it: nodelet \
             standalone with `evictStaticPods: true` and `evictionHard: memory.available` \
             {HEADROOM_MIB} MiB below what is available when it starts; each cycle writes a \
             Burstable static pod (request 1Mi) that allocates 10 MiB every 100 ms, samples \
             `memory.available` every 10 ms from `/sys/fs/cgroup/memory.stat` and `/proc/meminfo` \
             (the formula of nodelet and of the kubelet's cAdvisor on cgroup v2) for the \
             crossing, reads the time of nodelet's `eviction manager: evicting pod` log line \
             (kill issued: hard eviction, grace 0) and the container's `finishedAt`, then removes \
             the pod and waits for the memory to come back.{kubelet_note} The load average is \
             the host's."
        )],
    }
}

/// `memory.available` as nodelet computes it: `MemTotal` less the root cgroup's working set.
fn memory_available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string("/sys/fs/cgroup/memory.stat").unwrap_or_default();
    let field = |name: &str| -> u64 {
        stat.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let working_set = (field("anon") + field("file")).saturating_sub(field("inactive_file"));
    (total_kib * 1024).saturating_sub(working_set)
}

fn hog_yaml(name: &str, mib: u64) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 5\n  \
         containers:\n  - name: main\n    image: localhost/testbox:1\n    imagePullPolicy: Never\n    \
         args: [alloc, --mib, \"{mib}\", --chunk-mib, \"10\", --interval, 100ms, --hold]\n    \
         resources: {{requests: {{memory: 1Mi}}}}\n"
    )
}

/// The time of the first line of nodelet's journal that contains every one of `needles`
/// (tracing's text lines start with an RFC 3339 timestamp).
fn journal_time(g: &Guest, needles: &[&str]) -> Option<Timestamp> {
    g.journal_lines(needles[0])
        .iter()
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
}

/// Polls `check` every `every` until it holds; after `timeout` fails with `journal()`.
async fn poll_until(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> bool,
    journal: impl Fn() -> String,
) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "no {what} after {timeout:?}\n{}",
            journal()
        );
        tokio::time::sleep(every).await;
    }
}

/// [`poll_until`] every 200 ms, failing with nodelet's journal.
async fn wait(what: &str, g: &Guest, timeout: Duration, check: impl FnMut() -> bool) {
    poll_until(what, timeout, Duration::from_millis(200), check, || {
        g.journal(40)
    })
    .await;
}

/// Guest side: nodelet with the threshold, then `runs` eviction cycles; one result line each.
async fn guest(g: Guest, runs: usize) {
    let available = memory_available();
    let threshold = available / MI - HEADROOM_MIB;
    println!(
        "bench: memory.available {} MiB, threshold {threshold} MiB",
        available / MI
    );
    std::fs::create_dir_all(&g.manifests).expect("manifests");
    let config = g
        .config(&format!(
            "evictionHard: {{memory.available: \"{threshold}Mi\"}}\nevictStaticPods: true\n\
             evictionPressureTransitionPeriod: 5s\n"
        ))
        // Operator-level logging, as a node runs; the eviction lines are warnings.
        .replace("  verbosity: 4\n", "  verbosity: 0\n");
    std::fs::write("/etc/nodelet/config.yaml", config).expect("config");
    g.systemctl(&["start", "nodelet.service"]);
    g.wait_metric("nodelet_eviction_passes_total", "an eviction pass", |v| {
        v >= 1.0
    })
    .await;
    let rt = crate::agent::runtime();
    for i in 0..runs {
        let name = format!("hog{i}");
        // Memory back above the threshold with room to spare.
        wait("memory back", &g, Duration::from_secs(180), || {
            memory_available() / MI > threshold + 200
        })
        .await;
        let sum_before = g
            .metric("nodelet_eviction_crossing_to_kill_seconds_sum")
            .await
            .unwrap_or(0.0);
        // Enough to cross and go 200 MiB past, well short of an OOM.
        let mib = (memory_available() / MI).saturating_sub(threshold) + 200;
        g.write_manifest(&format!("{name}.yaml"), &hog_yaml(&name, mib));
        let crossed: Arc<Mutex<Option<Timestamp>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = crossing_sampler(threshold, crossed.clone(), stop.clone());
        let evicted = g
            .wait_pod(&name, "evicted", |p| {
                p.status
                    .as_ref()
                    .is_some_and(|s| s.reason.as_deref() == Some("Evicted"))
            })
            .await;
        stop.store(true, Ordering::Relaxed);
        let _ = sampler.join();
        let crossed = *crossed.lock().unwrap_or_else(|e| e.into_inner());
        let uid = evicted.metadata.uid.clone().unwrap_or_default();
        let issued = journal_time(&g, &["eviction manager: evicting pod", &uid]);
        let dead = finished_at_of_pod(&rt, &uid).await;
        let sum_after = g
            .metric("nodelet_eviction_crossing_to_kill_seconds_sum")
            .await
            .unwrap_or(0.0);
        let result = serde_json::json!({
            "agent": "nodelet",
            "run": i,
            "crossing_to_kill_issued_ms": crossed.zip(issued).map(|(c, k)| ms_between(c, k)),
            "crossing_to_dead_ms": crossed.zip(dead).map(|(c, d)| ms_between(c, d)),
            "first_pass_to_kill_ms": (sum_after - sum_before) * 1000.0,
        });
        println!("{RESULT}{result}");
        g.remove_manifest(&format!("{name}.yaml"));
        g.wait_gone(&name).await;
    }
    if let Some(kubelet) = KubeletGuest::from_env() {
        g.systemctl(&["stop", "nodelet.service"]);
        kubelet.cycles(&g, runs).await;
    }
}

/// The kubelet's side of the guest: the kit from the host, its node and namespace.
struct KubeletGuest {
    kit: PathBuf,
    node: String,
    namespace: String,
    /// kubectl as the admin of the host's control plane.
    admin: Kubectl,
}

impl KubeletGuest {
    fn from_env() -> Option<KubeletGuest> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let kit = PathBuf::from(var(KIT_VAR)?);
        Some(KubeletGuest {
            node: var(NODE_VAR)?,
            namespace: var(NAMESPACE_VAR)?,
            admin: Kubectl {
                bin: kit.join("kubectl"),
                kubeconfig: kit.join("admin.kubeconfig"),
            },
            kit,
        })
    }

    /// kubectl as the admin, each request bounded: (success, stdout, stderr).
    fn kubectl(&self, args: &[&str], input: Option<&str>) -> (bool, String, String) {
        self.admin
            .run(&[&["--request-timeout", "30s"], args].concat(), input)
    }

    /// One field of an object (`kubectl get OBJECT -o jsonpath=...`), trimmed; empty when it
    /// cannot be read.
    fn field(&self, object: &[&str], jsonpath: &str) -> String {
        let jsonpath = format!("jsonpath={jsonpath}");
        let args = [&["get"], object, &["-o", &jsonpath]].concat();
        self.kubectl(&args, None).1.trim().to_string()
    }

    /// The kubelet's journal lines (this boot), each as (journal time, message).
    fn journal(&self) -> Vec<(Timestamp, String)> {
        let out = Command::new("journalctl")
            .args(["--no-pager", "-o", "json", "-u", "kubelet"])
            .output()
            .expect("journalctl");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let entry: serde_json::Value = serde_json::from_str(l).ok()?;
                let micros: i64 = entry.get("__REALTIME_TIMESTAMP")?.as_str()?.parse().ok()?;
                let message = entry.get("MESSAGE")?.as_str()?.to_string();
                Some((Timestamp::from_microsecond(micros).ok()?, message))
            })
            .collect()
    }

    fn journal_tail(&self, lines: usize) -> String {
        let all = self.journal();
        all[all.len().saturating_sub(lines)..]
            .iter()
            .map(|(_, m)| m.chars().take(300).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Polls `check` (every `every`) until it holds; fails with the kubelet's journal.
    async fn wait(
        &self,
        what: &str,
        timeout: Duration,
        every: Duration,
        check: impl FnMut() -> bool,
    ) {
        poll_until(what, timeout, every, check, || {
            format!("--- the kubelet's journal ---\n{}", self.journal_tail(60))
        })
        .await;
    }

    /// Starts the kubelet joined to the host's control plane with a threshold below what is
    /// available now, waits for its node to be Ready, then runs `runs` eviction cycles.
    async fn cycles(&self, g: &Guest, runs: usize) {
        let available = memory_available() / MI;
        let threshold = available - HEADROOM_MIB - KUBELET_RSS_MIB;
        println!("bench: kubelet: memory.available {available} MiB, threshold {threshold} MiB");
        let root = g.state.join("kubelet");
        std::fs::create_dir_all(&root).expect("the kubelet's root directory");
        let config = root.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 cgroupDriver: systemd\ncontainerRuntimeEndpoint: unix://{sock}\n\
                 podLogsDir: {state}/kubelet-logs\naddress: 127.0.0.1\nreadOnlyPort: 0\n\
                 authentication: {{anonymous: {{enabled: false}}, webhook: {{enabled: true}}, \
                 x509: {{clientCAFile: {kit}/ca.crt}}}}\nauthorization: {{mode: Webhook}}\n\
                 failSwapOn: false\nimageGCHighThresholdPercent: 100\n\
                 imageGCLowThresholdPercent: 99\n\
                 evictionHard: {{memory.available: \"{threshold}Mi\"}}\n\
                 evictionPressureTransitionPeriod: 5s\n",
                sock = g.containerd_sock,
                state = g.state.display(),
                kit = self.kit.display(),
            ),
        )
        .expect("the kubelet's configuration");
        let kubelet = self.kit.join("kubelet").display().to_string();
        let args = [
            "--unit=kubelet".to_string(),
            "--collect".to_string(),
            "--".to_string(),
            kubelet,
            format!("--config={}", config.display()),
            format!(
                "--kubeconfig={}",
                self.kit.join("node.kubeconfig").display()
            ),
            format!("--hostname-override={}", self.node),
            format!("--root-dir={}", root.display()),
            format!("--node-ip={GUEST_IP}"),
            "--v=3".to_string(),
        ];
        let out = Command::new("systemd-run")
            .args(&args)
            .output()
            .expect("systemd-run");
        assert!(
            out.status.success(),
            "systemd-run {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Registration, the runtime's network, the first stats: minutes under emulation.
        self.wait(
            "Ready node",
            Duration::from_secs(600),
            Duration::from_secs(2),
            || {
                self.field(
                    &["node", &self.node],
                    "{.status.conditions[?(@.type==\"Ready\")].status}",
                ) == "True"
            },
        )
        .await;
        println!("bench: kubelet: node {} Ready", self.node);
        let rt = crate::agent::runtime();
        for i in 0..runs {
            let name = format!("hog{i}");
            wait("memory back", g, Duration::from_secs(180), || {
                memory_available() / MI > threshold + 200
            })
            .await;
            let mib = (memory_available() / MI).saturating_sub(threshold) + 200;
            let pod = format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
                 spec:\n  nodeName: {node}\n  automountServiceAccountToken: false\n  \
                 tolerations: [{{operator: Exists}}]\n  {rest}",
                ns = self.namespace,
                node = self.node,
                rest = hog_yaml(&name, mib)
                    .split_once("spec:\n  ")
                    .expect("the hog's spec")
                    .1,
            );
            // The kubelet's container GC removes an evicted pod's containers soon after (they
            // are its pod workers' "content to remove"): their end is read while they exist.
            let stop_watch = Arc::new(AtomicBool::new(false));
            let finished = tokio::spawn(first_finish(
                rt.clone(),
                [
                    (labels::POD_NAME.to_string(), name.clone()),
                    (labels::POD_NAMESPACE.to_string(), self.namespace.clone()),
                ]
                .into(),
                stop_watch.clone(),
            ));
            let (ok, _, err) = self.kubectl(&["create", "-f", "-"], Some(&pod));
            assert!(ok, "kubectl create {name}: {err}");
            let crossed: Arc<Mutex<Option<Timestamp>>> = Arc::default();
            let stop = Arc::new(AtomicBool::new(false));
            let sampler = crossing_sampler(threshold, crossed.clone(), stop.clone());
            let ns = self.namespace.clone();
            self.wait(
                "eviction",
                Duration::from_secs(300),
                Duration::from_secs(1),
                || self.field(&["-n", &ns, "pod", &name], "{.status.reason}") == "Evicted",
            )
            .await;
            stop.store(true, Ordering::Relaxed);
            let _ = sampler.join();
            let crossed = *crossed.lock().unwrap_or_else(|e| e.into_inner());
            let needle = format!("pod=\"{ns}/{name}\"");
            let issued = self
                .journal()
                .into_iter()
                .find(|(_, m)| m.contains("\"Evicting pod\"") && m.contains(&needle))
                .map(|(at, _)| at);
            stop_watch.store(true, Ordering::Relaxed);
            let dead = finished.await.ok().flatten();
            let result = serde_json::json!({
                "agent": "kubelet",
                "run": i,
                "crossing_to_kill_issued_ms": crossed.zip(issued).map(|(c, k)| ms_between(c, k)),
                "crossing_to_dead_ms": crossed.zip(dead).map(|(c, d)| ms_between(c, d)),
            });
            println!("{RESULT}{result}");
            let (ok, _, err) = self.kubectl(
                &[
                    "-n",
                    &ns,
                    "delete",
                    "pod",
                    &name,
                    "--grace-period=0",
                    "--force",
                    "--wait=false",
                ],
                None,
            );
            assert!(ok, "kubectl delete {name}: {err}");
        }
        g.systemctl(&["stop", "kubelet.service"]);
    }
}

/// A thread that records when `memory.available` first falls below `threshold_mib`, sampled
/// every 10 ms, until `stop`.
fn crossing_sampler(
    threshold_mib: u64,
    crossed: Arc<Mutex<Option<Timestamp>>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let limit = threshold_mib * MI;
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if memory_available() < limit {
                let mut c = crossed.lock().unwrap_or_else(|e| e.into_inner());
                if c.is_none() {
                    *c = Some(Timestamp::now());
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

/// Polls the runtime every 500 ms for a finished container labelled `selector`: its
/// `finishedAt`, or `None` once `stop` is set (after a last look).
async fn first_finish(
    rt: Arc<nodelet::cri::remote::RemoteRuntime>,
    selector: std::collections::HashMap<String, String>,
    stop: Arc<AtomicBool>,
) -> Option<Timestamp> {
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if let Some(at) = finished_at(&rt, selector.clone()).await {
            return Some(at);
        }
        if stopping {
            return None;
        }
        // Often enough to see a container before its removal, seldom enough to add no load
        // that the kubelet's cycles alone would carry.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// When the runtime saw the last container of pod `uid` finish.
async fn finished_at_of_pod(
    rt: &nodelet::cri::remote::RemoteRuntime,
    uid: &str,
) -> Option<Timestamp> {
    finished_at(rt, [(labels::POD_UID.to_string(), uid.to_string())].into()).await
}

/// When the runtime saw the last of the containers labelled `selector` finish.
async fn finished_at(
    rt: &nodelet::cri::remote::RemoteRuntime,
    selector: std::collections::HashMap<String, String>,
) -> Option<Timestamp> {
    let mut dead = None;
    for c in rt
        .list_containers(Some(api::ContainerFilter {
            label_selector: selector,
            ..Default::default()
        }))
        .await
        .unwrap_or_default()
    {
        if let Ok(s) = rt.container_status(&c.id).await {
            if s.finished_at > 0 {
                dead = Timestamp::from_nanosecond(i128::from(s.finished_at)).ok();
            }
        }
    }
    dead
}
