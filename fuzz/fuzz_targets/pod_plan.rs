//! A pod spec (YAML or JSON) through what nodelet derives from it to run and stop it, with its
//! integers at their extremes: the static pod path (decode, defaults, validation) and the API
//! pod path (what the API server accepted: any int64 grace period, any int32 probe timing, no
//! validation by nodelet), then the pod's plan (`PodPlan::derive`, the sandbox config),
//! `compute_pod_actions` against an empty and a full runtime, every kill's grace period and
//! deadline (`termination_grace_period`, `pod_grace_period`, `GraceDeadline`, `kill_at`), the
//! probes' timings, the preStop sleep, `activeDeadlineSeconds` and a node shutdown's grace. None
//! of it may panic, and the StopContainer timeout nodelet would send always fits containerd's
//! int64 nanoseconds.
//!
//! The last byte of the input picks extreme values that overwrite every duration field of the
//! decoded pod for a second round, so the extremes are reached from any seed.
#![no_main]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod, Probe};
use libfuzzer_sys::fuzz_target;
use nodelet::clock::{saturating_deadline, seconds_from_api, FAR_FUTURE};
use nodelet::cri::model::{ContainerState, PodRuntime, RuntimeContainer, RuntimeSandbox};
use nodelet::podspec::{init_containers, regular_containers};
use nodelet::probe::spec::{probe_kill_grace_period, ProbeSettings};
use nodelet::probe::{adoption_spread, first_probe_at, ProbeKind};
use nodelet::source::defaults::apply_defaults;
use nodelet::source::manifest::decode_manifest;
use nodelet::sync::actions::{compute_pod_actions, ActionInputs, KillReason};
use nodelet::sync::executor::active_deadline_remaining;
use nodelet::sync::grace::{
    pod_grace_period, stop_timeout_after_hook, termination_grace_period, GraceDeadline, StopReason,
    MINIMUM_GRACE_PERIOD,
};
use nodelet::sync::hooks::sleep_duration;
use nodelet::sync::plan::PodPlan;
use nodelet::sync::settings::SyncSettings;
use tokio::time::Instant;

const INT64: [i64; 7] = [i64::MIN, -1, 0, 1, 2_147_483_647, 3_153_600_001, i64::MAX];
const INT32: [i32; 5] = [i32::MIN, -1, 0, 1, i32::MAX];

fuzz_target!(|data: &[u8]| {
    let pick = data.last().copied().unwrap_or(0);
    let file = Path::new("/etc/kubernetes/manifests/fuzz.yaml");
    if let Ok(parsed) = decode_manifest(data, file, "node-1") {
        exercise(&parsed.pod, pick);
        let mut pod = parsed.pod;
        overwrite_durations(&mut pod, pick);
        exercise(&pod, pick);
    }
    // An API pod: the API server validated it, nodelet defaults it and runs it as it is.
    if let Ok(mut pod) = serde_yaml::from_slice::<Pod>(data) {
        apply_defaults(&mut pod);
        exercise(&pod, pick);
        overwrite_durations(&mut pod, pick);
        exercise(&pod, pick);
    }
});

/// Every duration field of the pod set to one of the extremes, chosen by `pick` (each field
/// from a different rotation of it, so fields differ).
fn overwrite_durations(pod: &mut Pod, pick: u8) {
    let mut n = usize::from(pick);
    let mut int64 = || {
        n = n.wrapping_add(3);
        INT64[n % INT64.len()]
    };
    pod.metadata.deletion_grace_period_seconds = Some(int64());
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.termination_grace_period_seconds = Some(int64());
    spec.active_deadline_seconds = Some(int64());
    let mut m = usize::from(pick);
    let mut int32 = || {
        m = m.wrapping_add(2);
        INT32[m % INT32.len()]
    };
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in containers {
        for probe in [
            &mut c.liveness_probe,
            &mut c.readiness_probe,
            &mut c.startup_probe,
        ] {
            let p = probe.get_or_insert_with(Probe::default);
            p.initial_delay_seconds = Some(int32());
            p.period_seconds = Some(int32());
            p.timeout_seconds = Some(int32());
            p.success_threshold = Some(int32());
            p.failure_threshold = Some(int32());
            p.termination_grace_period_seconds = Some(int64());
        }
        let lifecycle = c.lifecycle.get_or_insert_with(Default::default);
        for hook in [&mut lifecycle.pre_stop, &mut lifecycle.post_start] {
            let h = hook.get_or_insert_with(LifecycleHandler::default);
            h.sleep.get_or_insert_with(Default::default).seconds = int64();
        }
    }
}

fn settings() -> SyncSettings {
    SyncSettings {
        root_dir: "/var/lib/nodelet".into(),
        pod_logs_dir: "/var/log/pods".into(),
        container_log_links_dir: "/var/log/containers".into(),
        cgroup_driver: nodelet::cgroup::Driver::Cgroupfs,
        cgroup_root: "/".into(),
        cgroups_per_qos: true,
        cluster_dns: vec![],
        cluster_domain: "cluster.local".into(),
        resolv_conf: None,
        runtime_name: "containerd".into(),
        crash_loop_backoff: (Duration::from_secs(10), Duration::from_secs(300)),
        cgroup_v2: true,
        single_process_oom_kill: false,
        swap_behavior: nodelet::config::swap::SwapBehavior::NoSwap,
        swap_controller: false,
        seccomp_default: false,
        user_namespaces_gate: true,
        userns: None,
        runtime_features: Default::default(),
        ready_to_start_condition: true,
        cgroups: None,
        pod_cgroup: Default::default(),
        node_allocatable: nodelet::podspec::resources::NodeAllocatable {
            cpu_milli: 4000,
            memory: 8 << 30,
            ephemeral_storage: None,
        },
        image_volumes: Default::default(),
        csi_volumes: None,
        // Never discarded into: the plan decides, it removes nothing.
        trash: std::sync::Arc::new(
            nodelet::volume::trash::Trash::new(std::path::Path::new("/var/lib/nodelet")).0,
        ),
    }
}

/// Every container of the spec running in one ready sandbox, with the largest counters; the
/// hash of each is the plan's unless `changed`.
fn full_runtime(pod: &Pod, hashes: &BTreeMap<String, String>, changed: bool) -> PodRuntime {
    let t = Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
    let containers = init_containers(pod)
        .iter()
        .chain(regular_containers(pod))
        .enumerate()
        .map(|(i, c)| RuntimeContainer {
            id: format!("c{i}"),
            name: c.name.clone(),
            sandbox_id: "s0".into(),
            state: if i % 2 == 0 {
                ContainerState::Running
            } else {
                ContainerState::Exited
            },
            attempt: u32::MAX,
            created_at: t,
            started_at: Some(Timestamp::MAX),
            finished_at: Some(Timestamp::MIN),
            exit_code: i32::MIN,
            hash: if changed {
                "other".into()
            } else {
                hashes.get(&c.name).cloned().unwrap_or_default()
            },
            restart_count: i32::MAX,
            ..Default::default()
        })
        .collect();
    PodRuntime {
        uid: "u".into(),
        sandboxes: vec![RuntimeSandbox {
            id: "s0".into(),
            attempt: u32::MAX,
            ready: true,
            created_at: t,
            ips: vec!["10.0.0.1".into()],
            host_network: false,
        }],
        containers,
        ..Default::default()
    }
}

fn exercise(pod: &Pod, pick: u8) {
    let now = Instant::now();
    let plan = PodPlan::derive(pod, &settings(), "node-1", None);
    let _ = plan.sandbox_config(0);
    let _ = plan.sandbox_config(u32::MAX);

    let start = Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
    let mut deadlines = vec![None, Some(Duration::ZERO), Some(Duration::MAX)];
    for at in [Timestamp::MIN, start, Timestamp::MAX] {
        deadlines.push(active_deadline_remaining(pod, Some(start), at));
        deadlines.push(active_deadline_remaining(pod, None, at));
    }

    let empty = PodRuntime::empty("u");
    let full = full_runtime(pod, &plan.spec_hashes, pick & 1 == 1);
    let mut failures = BTreeMap::new();
    let mut startup = BTreeMap::new();
    for c in &full.containers {
        let reason = if pick & 2 == 0 {
            KillReason::LivenessProbe
        } else {
            KillReason::StartupProbe
        };
        failures.insert(c.id.clone(), reason);
        startup.insert(c.id.clone(), pick & 4 == 0);
    }
    for runtime in [&empty, &full] {
        for deadline in &deadlines {
            for phase_terminal in [false, true] {
                let actions = compute_pod_actions(&ActionInputs {
                    pod,
                    runtime,
                    spec_hashes: &plan.spec_hashes,
                    probe_failures: &failures,
                    startup: &startup,
                    deadline_remaining: *deadline,
                    phase_terminal,
                    resize_restarts: &Default::default(),
                });
                // What the executor does with them: each kill with its own grace period, the
                // pod's stop with the pod's.
                for k in &actions.containers_to_kill {
                    let spec = spec_of(pod, &k.name);
                    let grace = termination_grace_period(pod, spec, k.reason.stop_reason(), None);
                    deadline_math(grace, now);
                }
                if actions.kill_pod {
                    deadline_math(pod_grace_period(pod, None), now);
                }
            }
        }
    }

    let overrides = [
        None,
        Some(Duration::ZERO),
        Some(Duration::from_secs(1)),
        Some(FAR_FUTURE),
        Some(Duration::MAX),
    ];
    for o in overrides {
        deadline_math(pod_grace_period(pod, o), now);
    }
    for c in init_containers(pod).iter().chain(regular_containers(pod)) {
        for reason in [
            StopReason::PodTermination,
            StopReason::LivenessProbe,
            StopReason::StartupProbe,
            StopReason::Other,
        ] {
            for o in overrides {
                deadline_math(termination_grace_period(pod, Some(c), reason, o), now);
            }
        }
        for kind in ProbeKind::ALL {
            if let Some(p) = kind.spec(c) {
                let s = ProbeSettings::from_probe(p);
                assert!(!s.period.is_zero(), "a zero period would spin the worker");
                let spread = adoption_spread("container-id", s.period);
                let _ = first_probe_at(now, s.initial_delay, now, spread);
                let _ = saturating_deadline(now, s.timeout);
            }
            if let Some(g) = probe_kill_grace_period(pod, c, kind) {
                deadline_math(seconds_from_api(g), now);
            }
        }
        let hooks = c.lifecycle.as_ref();
        for hook in [
            hooks.and_then(|l| l.pre_stop.as_ref()),
            hooks.and_then(|l| l.post_start.as_ref()),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(sleep) = &hook.sleep {
                let grace = pod_grace_period(pod, None);
                assert!(sleep_duration(sleep.seconds, Some(grace)) <= grace);
                assert!(sleep_duration(sleep.seconds, None) <= FAR_FUTURE);
            }
        }
    }
    for group in [i64::MIN, 0, 30, i64::MAX] {
        let grace = nodelet::nodeshutdown::groups::pod_grace_period(group, pod);
        deadline_math(grace, now);
    }
}

fn spec_of<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    init_containers(pod)
        .iter()
        .chain(regular_containers(pod))
        .find(|c| c.name == name)
}

/// A termination of `grace` from `now`, as the pod worker and the stopper compute it.
fn deadline_math(grace: Duration, now: Instant) {
    let d = GraceDeadline::new(now, grace);
    assert!(d.period() <= FAR_FUTURE);
    let later = saturating_deadline(now, FAR_FUTURE);
    for asked in [Duration::ZERO, Duration::from_secs(1), Duration::MAX] {
        for at in [now, later] {
            let shorter = d.shortened(asked, at);
            assert!(shorter.ends <= d.ends, "a shorter grace never ends later");
            let _ = shorter.kill_at(at);
        }
    }
    let _ = stop_timeout_after_hook(grace, Duration::MAX);
    // The StopContainer timeout nodelet sends at the stop signal: whole seconds that containerd
    // multiplies into int64 nanoseconds, which must not wrap to a negative (SIGKILL at once).
    let timeout = d.kill_at(now).saturating_duration_since(now);
    assert!(timeout <= FAR_FUTURE.max(MINIMUM_GRACE_PERIOD));
    assert!(i64::try_from(u128::from(timeout.as_secs()) * 1_000_000_000).is_ok());
    let _ = d.kill_at(later);
}
