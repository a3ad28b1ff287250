//! Graceful node shutdown under a real systemd-logind (the VM test bed, see tests/vm/mod.rs):
//! nodelet with `shutdownGracePeriod: 180s`, `shutdownGracePeriodCriticalPods: 60s` (two
//! priority groups: regular 120 s, critical 60 s) and three static pods — `web` (priority 0,
//! exits on SIGTERM), `stubborn` (priority 1000, ignores SIGTERM, its own grace period 4 s) and
//! `critical` (priority 2000001000, exits 2 s after SIGTERM). A group ends as soon as its pods
//! are terminated, so the long periods do not make the run longer; they are room for
//! containerd under emulation on a loaded host, where one StopPodSandbox took 60 s (a run with
//! 90 s / 30 s saw the regular group's period run out before its pods' sandboxes stopped, so
//! their final statuses, written after the sandbox stop as the kubelet's, came too late). Checked: logind's `InhibitDelayMaxUSec` at the 30 s of nodelet's
//! package's drop-in, then raised to 180 s through the drop-in nodelet writes, nodelet's delay lock in `systemd-inhibit --list`; then `systemctl poweroff`: while
//! logind holds the shutdown for the lock, the guest reads nodelet's local API every 100 ms
//! and sees the regular pods end first (each Failed, `Terminated`, the kubelet's message,
//! `DisruptionTarget`) while `critical` still runs, and `critical` after them. The scenario
//! returns as soon as the last pod ends — the real shutdown then goes on and powers the VM
//! off. All of it within `shutdownGracePeriod`: logind goes on after its `InhibitDelayMaxSec`
//! (180 s) whatever the locks, and the scenario, stopped by the shutdown, fails. Last, nodelet's
//! `graceful_shutdown_start_time_seconds` lies between the poweroff and the first pod's end,
//! and `graceful_shutdown_end_time_seconds` is set after it.
//!
//! Standalone mode: the node's `Ready=False` is covered by unit tests only (no API server here).

mod common;
mod vm;

use std::process::Command;
use std::time::{Duration, Instant};

use common::TESTBOX;
use k8s_openapi::api::core::v1::Pod;
use nodelet_testkit::pod::phase;
use vm::{Driver, Guest};

const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";

#[test]
fn graceful_node_shutdown() {
    vm::scenario("graceful_node_shutdown", Driver::Systemd, shutdown_checks);
}

fn pod_yaml(name: &str, priority: Option<i64>, grace: u32, args: &str) -> String {
    let priority = priority.map_or_else(String::new, |p| format!("  priority: {p}\n"));
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n\
         {priority}  terminationGracePeriodSeconds: {grace}\n  containers:\n  - name: main\n    \
         image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [{args}]\n"
    )
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{cmd} {}: {}\n{text}",
        args.join(" "),
        out.status
    );
    text
}

/// The scenario's own delay lock, held until this process exits: once nodelet releases its
/// lock (right after the last pod ends) the shutdown goes on and stops the scenario's unit,
/// which lost the race with the scenario's pass report in a first run. `cat` reads this
/// process's end of a pipe: when the process exits (after the report), the pipe closes, `cat`
/// and `systemd-inhibit` end and logind goes on at once. It changes nothing of what nodelet
/// sees (one `PrepareForShutdown`, logind's `InhibitDelayMaxSec` for every delay lock).
fn hold_shutdown_until_exit() {
    let child = Command::new("systemd-inhibit")
        .args([
            "--what=shutdown",
            "--mode=delay",
            "--who=vm_shutdown",
            "--why=report the result before the shutdown stops the scenario",
            "cat",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("systemd-inhibit");
    // Kept open until the process exits: that is the point.
    std::mem::forget(child);
}

/// What a pod looked like when it was first seen Failed, and when.
#[derive(Debug, Clone)]
struct Ended {
    at: Duration,
    reason: String,
    message: String,
    disruption: Option<(String, String)>,
}

fn ended(pod: &Pod, at: Duration) -> Option<Ended> {
    if phase(pod) != "Failed" {
        return None;
    }
    let status = pod.status.as_ref()?;
    Some(Ended {
        at,
        reason: status.reason.clone().unwrap_or_default(),
        message: status.message.clone().unwrap_or_default(),
        disruption: status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "DisruptionTarget")
            .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default())),
    })
}

async fn shutdown_checks(node: Guest) {
    {
        let _step = node.step("logind");
        run(
            "systemctl",
            &["start", "dbus.service", "systemd-logind.service"],
        );
        let before = run(
            "busctl",
            &[
                "get-property",
                "org.freedesktop.login1",
                "/org/freedesktop/login1",
                "org.freedesktop.login1.Manager",
                "InhibitDelayMaxUSec",
            ],
        );
        println!("vm shutdown: logind before nodelet: {}", before.trim());
        // nodelet's package (installed by guest.sh) ships a logind drop-in of 30 s in
        // /usr/lib/systemd/logind.conf.d; logind's own default is 5 s.
        assert_eq!(
            before.trim(),
            "t 30000000",
            "logind's delay from the package's drop-in"
        );
    }
    {
        let _step = node.step("nodelet and pods");
        node.start_nodelet("shutdownGracePeriod: 180s\nshutdownGracePeriodCriticalPods: 60s\n");
        node.write_manifest("web.yaml", &pod_yaml("web", None, 30, "sleep"));
        node.write_manifest(
            "stubborn.yaml",
            &pod_yaml("stubborn", Some(1000), 4, "sleep, --on-sigterm, ignore"),
        );
        node.write_manifest(
            "critical.yaml",
            &pod_yaml(
                "critical",
                Some(2_000_001_000),
                30,
                "sleep, --sigterm-delay, 2s",
            ),
        );
        for name in ["web", "stubborn", "critical"] {
            node.wait_pod(name, "Running", |p| phase(p) == "Running")
                .await;
        }
    }
    {
        let _step = node.step("the lock");
        let drop_in = std::fs::read_to_string("/etc/systemd/logind.conf.d/99-nodelet.conf")
            .expect("nodelet's logind drop-in (logind's default delay is 5 s)");
        assert!(
            drop_in.contains("[Login]\nInhibitDelayMaxSec=180\n"),
            "{drop_in}"
        );
        let delay = run(
            "busctl",
            &[
                "get-property",
                "org.freedesktop.login1",
                "/org/freedesktop/login1",
                "org.freedesktop.login1.Manager",
                "InhibitDelayMaxUSec",
            ],
        );
        assert_eq!(delay.trim(), "t 180000000", "logind re-read the drop-in");
        node.wait_for("nodelet's lock in systemd-inhibit --list", || {
            let list = run("systemd-inhibit", &["--list", "--no-pager"]);
            list.lines()
                .any(|l| l.contains("nodelet") && l.contains("shutdown") && l.contains("delay"))
        })
        .await;
        println!(
            "vm shutdown: {}",
            run("systemd-inhibit", &["--list", "--no-pager"])
        );
    }
    {
        let _step = node.step("the scenario's own lock");
        hold_shutdown_until_exit();
        node.wait_for("the scenario's lock in systemd-inhibit --list", || {
            run("systemd-inhibit", &["--list", "--no-pager"]).contains("vm_shutdown")
        })
        .await;
    }
    let _step = node.step("systemctl poweroff");
    let t0 = Instant::now();
    let poweroff_at = epoch_seconds();
    // Spawned, not waited for here: the guest polls the pods while logind holds the shutdown.
    let mut poweroff = Command::new("systemctl")
        .arg("poweroff")
        .spawn()
        .expect("systemctl poweroff");
    let names = ["web", "stubborn", "critical"];
    let mut seen: std::collections::BTreeMap<&str, Ended> = Default::default();
    while seen.len() < names.len() {
        assert!(
            t0.elapsed() < Duration::from_secs(200),
            "pods not all ended after 200 s: {seen:?}\n{}",
            node.journal(60)
        );
        if let Some(pods) = node.pods().await {
            for name in names {
                let full = node.pod_name(name);
                if seen.contains_key(name) {
                    continue;
                }
                if let Some(e) = pods
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(full.as_str()))
                    .and_then(|p| ended(p, t0.elapsed()))
                {
                    println!(
                        "vm shutdown: {name} Failed at {:.1} s: {e:?}",
                        e.at.as_secs_f64()
                    );
                    seen.insert(name, e);
                    if name != "critical"
                        && seen.contains_key("web")
                        && seen.contains_key("stubborn")
                    {
                        // The regular group is over: the critical pod must not have ended yet.
                        let full = node.pod_name("critical");
                        let critical = pods
                            .iter()
                            .find(|p| p.metadata.name.as_deref() == Some(full.as_str()))
                            .map(|p| phase(p).to_string());
                        println!(
                            "vm shutdown: the regular group is over; critical is {critical:?}"
                        );
                        assert_ne!(
                            critical.as_deref(),
                            Some("Failed"),
                            "critical ended with the regular group"
                        );
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // systemctl returned long ago (logind answers PowerOff once the delay starts).
    let status = poweroff.wait().expect("systemctl poweroff");
    assert!(status.success(), "systemctl poweroff: {status}");
    for (name, e) in &seen {
        assert_eq!(e.reason, "Terminated", "{name}: {e:?}");
        assert_eq!(e.message, MESSAGE, "{name}: {e:?}");
        assert_eq!(
            e.disruption,
            Some(("True".to_string(), "TerminationByKubelet".to_string())),
            "{name}: {e:?}"
        );
    }
    // Order, not timing (timings are asserted in the paused-clock tests): the regular group
    // ends before the critical one; stubborn lasts its group's period.
    assert!(seen["web"].at < seen["critical"].at, "{seen:?}");
    assert!(seen["stubborn"].at < seen["critical"].at, "{seen:?}");
    println!(
        "vm shutdown: timings after systemctl poweroff: web {:.1} s, stubborn {:.1} s (own grace 4 s), critical {:.1} s (periods 120 s + 60 s)",
        seen["web"].at.as_secs_f64(),
        seen["stubborn"].at.as_secs_f64(),
        seen["critical"].at.as_secs_f64()
    );
    // The kubelet's shutdown metrics: the start when logind announced the shutdown (after the
    // poweroff began, before the first pod ended), the end once the last group is done.
    let start = node
        .wait_metric(
            "nodelet_graceful_shutdown_start_time_seconds",
            "shutdown start",
            |v| v > 0.0,
        )
        .await;
    let first_end = poweroff_at
        + seen["web"]
            .at
            .as_secs_f64()
            .min(seen["stubborn"].at.as_secs_f64());
    assert!(
        start >= poweroff_at - 1.0 && start <= first_end + 1.0,
        "graceful_shutdown_start_time_seconds {start}: poweroff at {poweroff_at}, first pod ended at {first_end}"
    );
    let end = node
        .wait_metric(
            "nodelet_graceful_shutdown_end_time_seconds",
            "shutdown end",
            |v| v >= start,
        )
        .await;
    println!(
        "vm shutdown: graceful_shutdown_start_time_seconds {start:.3} ({:+.1} s from the poweroff), end_time_seconds {end:.3} ({:+.1} s)",
        start - poweroff_at,
        end - poweroff_at
    );
}

/// The guest's wall clock, seconds since the epoch (nodelet's metrics use the same clock).
fn epoch_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}
