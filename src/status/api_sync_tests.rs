use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::json;

use super::*;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + secs).unwrap()
}

fn time(secs: i64) -> Time {
    Time(at(secs))
}

fn pod(uid: &str, annotations: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            annotations: (!annotations.is_empty()).then(|| {
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-1".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn match_api_pod_table() {
    let static_pod = pod(
        "hash-1",
        &[
            ("kubernetes.io/config.source", "file"),
            ("kubernetes.io/config.hash", "hash-1"),
        ],
    );
    let mirror = |hash: &str| Arc::new(pod("mirror-uid", &[("kubernetes.io/config.mirror", hash)]));
    let api_pod = pod("uid-a", &[]);
    // (name, local pod, API candidate, expected)
    let cases = [
        ("nothing in the API", api_pod.clone(), None, ApiPod::Missing),
        (
            "same UID",
            api_pod.clone(),
            Some(Arc::new(pod("uid-a", &[]))),
            ApiPod::Found(Arc::new(pod("uid-a", &[]))),
        ),
        (
            "recreated under the same name",
            api_pod.clone(),
            Some(Arc::new(pod("uid-b", &[]))),
            ApiPod::Other {
                uid: "uid-b".into(),
            },
        ),
        (
            "static pod: its mirror",
            static_pod.clone(),
            Some(mirror("hash-1")),
            ApiPod::Found(mirror("hash-1")),
        ),
        (
            "static pod: the mirror of another manifest version",
            static_pod.clone(),
            Some(mirror("hash-0")),
            ApiPod::Other {
                uid: "mirror-uid".into(),
            },
        ),
        (
            "static pod: a regular pod under its name",
            static_pod.clone(),
            Some(Arc::new(pod("uid-x", &[]))),
            ApiPod::Other {
                uid: "uid-x".into(),
            },
        ),
    ];
    for (name, local, candidate, expected) in cases {
        assert_eq!(match_api_pod(&local, candidate), expected, "{name}");
    }
}

fn status(v: serde_json::Value) -> PodStatus {
    serde_json::from_value(v).unwrap()
}

#[test]
fn merge_pod_status_table() {
    let t0 = "2026-01-01T00:00:00Z";
    let t1 = "2026-01-01T00:01:00Z";
    let now = "2026-01-01T00:02:00Z";
    // (name, API status, ours, delay_terminal, expected merged)
    let cases = [
        (
            "foreign conditions are the API's, owned ones ours",
            json!({"phase": "Running", "conditions": [
                {"type": "example.com/gate", "status": "True", "lastTransitionTime": t0},
                {"type": "Ready", "status": "False", "lastTransitionTime": t0},
                {"type": "example.com/stale-in-ours", "status": "True"}]}),
            json!({"phase": "Running", "conditions": [
                {"type": "example.com/stale-in-ours", "status": "False"},
                {"type": "Ready", "status": "True", "lastTransitionTime": t1}]}),
            false,
            json!({"phase": "Running", "conditions": [
                {"type": "example.com/gate", "status": "True", "lastTransitionTime": t0},
                {"type": "example.com/stale-in-ours", "status": "True"},
                {"type": "Ready", "status": "True", "lastTransitionTime": t1}]}),
        ),
        (
            "DisruptionTarget of others is kept while running",
            json!({"phase": "Running", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}),
            json!({"phase": "Running", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]}),
            false,
            json!({"phase": "Running", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}),
        ),
        (
            "our DisruptionTarget goes out with the terminal phase, stamped now",
            json!({"phase": "Running"}),
            json!({"phase": "Failed", "reason": "Evicted", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                 "lastTransitionTime": t0}]}),
            false,
            json!({"phase": "Failed", "reason": "Evicted", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                 "lastTransitionTime": now}]}),
        ),
        (
            "delayed terminal transition keeps the API's phase and no DisruptionTarget",
            json!({"phase": "Running", "reason": null}),
            json!({"phase": "Failed", "reason": "Evicted", "message": "m", "conditions": [
                {"type": "DisruptionTarget", "status": "True"}]}),
            true,
            json!({"phase": "Running"}),
        ),
        (
            "a terminal phase in the API is never left",
            json!({"phase": "Succeeded"}),
            json!({"phase": "Running"}),
            false,
            json!({"phase": "Succeeded"}),
        ),
        (
            "startTime never changes once the API has one",
            json!({"phase": "Running", "startTime": t0}),
            json!({"phase": "Running", "startTime": t1}),
            false,
            json!({"phase": "Running", "startTime": t0}),
        ),
        (
            "startTime is set when the API has none",
            json!({"phase": "Pending"}),
            json!({"phase": "Running", "startTime": t1}),
            false,
            json!({"phase": "Running", "startTime": t1}),
        ),
        (
            "observedGeneration never goes back",
            json!({"phase": "Running", "observedGeneration": 3}),
            json!({"phase": "Running", "observedGeneration": 2}),
            false,
            json!({"phase": "Running", "observedGeneration": 3}),
        ),
        (
            "observedGeneration moves forward",
            json!({"phase": "Running", "observedGeneration": 1}),
            json!({"phase": "Running", "observedGeneration": 2}),
            false,
            json!({"phase": "Running", "observedGeneration": 2}),
        ),
        (
            "a terminal phase never goes out ready",
            json!({"phase": "Running"}),
            json!({"phase": "Succeeded", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": t0, "observedGeneration": 1},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": t0}]}),
            false,
            json!({"phase": "Succeeded", "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodCompleted",
                 "lastTransitionTime": now, "observedGeneration": 1},
                {"type": "ContainersReady", "status": "False", "reason": "PodCompleted",
                 "lastTransitionTime": now}]}),
        ),
        (
            "a terminal phase re-sent keeps the API's transition time",
            json!({"phase": "Failed", "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": t1},
                {"type": "ContainersReady", "status": "False", "reason": "PodFailed",
                 "lastTransitionTime": t1}]}),
            json!({"phase": "Failed", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": t0},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": t0}]}),
            false,
            json!({"phase": "Failed", "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": t1},
                {"type": "ContainersReady", "status": "False", "reason": "PodFailed",
                 "lastTransitionTime": t1}]}),
        ),
    ];
    let now: Timestamp = now.parse().unwrap();
    for (name, api, ours, delay, expected) in cases {
        let got = merge_pod_status(&status(api), &status(ours), delay, now);
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            serde_json::to_value(status(expected)).unwrap(),
            "{name}"
        );
    }
}

fn with(mut p: Pod, f: impl FnOnce(&mut Pod)) -> Pod {
    f(&mut p);
    p
}

fn phase(p: Pod, phase: &str) -> Pod {
    with(p, |p| {
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        })
    })
}

fn deleting(p: Pod) -> Pod {
    with(p, |p| p.metadata.deletion_timestamp = Some(time(0)))
}

#[test]
fn can_be_deleted_table() {
    let base = pod("u", &[]);
    let mirror = pod("m", &[("kubernetes.io/config.mirror", "h")]);
    // (name, API pod, reclaimed, expected)
    let cases = [
        (
            "deleting, terminal, reclaimed",
            deleting(phase(base.clone(), "Succeeded")),
            true,
            true,
        ),
        (
            "failed counts as terminal",
            deleting(phase(base.clone(), "Failed")),
            true,
            true,
        ),
        (
            "not reclaimed yet",
            deleting(phase(base.clone(), "Failed")),
            false,
            false,
        ),
        (
            "API phase not terminal yet",
            deleting(phase(base.clone(), "Running")),
            true,
            false,
        ),
        (
            "no deletionTimestamp (evicted: the cleanup's job)",
            phase(base.clone(), "Failed"),
            true,
            false,
        ),
        (
            "mirror pods never",
            deleting(phase(mirror, "Succeeded")),
            true,
            false,
        ),
    ];
    for (name, p, reclaimed, expected) in cases {
        assert_eq!(can_be_deleted(&p, reclaimed), expected, "{name}");
    }
}

fn owned(p: Pod, controller: Option<bool>) -> Pod {
    with(p, |p| {
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-6d4b".into(),
            uid: "rs-uid".into(),
            controller,
            ..Default::default()
        }])
    })
}

#[test]
fn should_clean_up_table() {
    let hour = Duration::from_secs(3600);
    let on = PodCleanup {
        enabled: true,
        retention: hour,
        bare_pods: false,
    };
    let bare_too = PodCleanup {
        bare_pods: true,
        ..on.clone()
    };
    let off = PodCleanup {
        enabled: false,
        ..on.clone()
    };
    // Every pod of the first table was failed by the node (evicted).
    let evicted = |p: Pod| {
        with(p, |p| {
            p.status.as_mut().unwrap().reason = Some("Evicted".into())
        })
    };
    let failed_rs = evicted(phase(owned(pod("u", &[]), Some(true)), "Failed"));
    let other_node = with(failed_rs.clone(), |p| {
        p.spec.as_mut().unwrap().node_name = Some("node-2".into())
    });
    let mirror = evicted(phase(
        owned(
            pod("m", &[("kubernetes.io/config.mirror", "h")]),
            Some(true),
        ),
        "Failed",
    ));
    // (name, pod, terminal since, now, cfg, expected)
    let cases = [
        (
            "controller-owned, retention over",
            failed_rs.clone(),
            Some(0),
            3600,
            &on,
            true,
        ),
        (
            "retention not over",
            failed_rs.clone(),
            Some(0),
            3599,
            &on,
            false,
        ),
        (
            "no terminal phase published by nodelet",
            failed_rs.clone(),
            None,
            99_999,
            &on,
            false,
        ),
        (
            "cleanup disabled",
            failed_rs.clone(),
            Some(0),
            99_999,
            &off,
            false,
        ),
        (
            "Succeeded pods are not cleaned up",
            phase(owned(pod("u", &[]), Some(true)), "Succeeded"),
            Some(0),
            99_999,
            &on,
            false,
        ),
        (
            "deletion already requested: the final delete's job",
            deleting(failed_rs.clone()),
            Some(0),
            99_999,
            &on,
            false,
        ),
        (
            "bare pod kept",
            evicted(phase(pod("u", &[]), "Failed")),
            Some(0),
            99_999,
            &on,
            false,
        ),
        (
            "bare pod with barePods",
            evicted(phase(pod("u", &[]), "Failed")),
            Some(0),
            3600,
            &bare_too,
            true,
        ),
        (
            "an owner that is not the controller makes it bare",
            evicted(phase(owned(pod("u", &[]), None), "Failed")),
            Some(0),
            99_999,
            &on,
            false,
        ),
        (
            "mirror pods never",
            mirror,
            Some(0),
            99_999,
            &bare_too,
            false,
        ),
        (
            "pods of other nodes never",
            other_node,
            Some(0),
            99_999,
            &bare_too,
            false,
        ),
    ];
    for (name, p, since, now, cfg, expected) in cases {
        assert_eq!(
            should_clean_up(&p, "node-1", since.map(at), at(now), cfg),
            expected,
            "{name}"
        );
    }
    assert_eq!(
        cleanup_deadline(&failed_rs, "node-1", Some(at(10)), &on),
        Some(at(3610))
    );
    // A pod that failed on its own keeps its record, owned or not, however long ago.
    let on_its_own = phase(owned(pod("u", &[]), Some(true)), "Failed");
    let deadline = with(on_its_own.clone(), |p| {
        let s = p.status.as_mut().unwrap();
        s.reason = Some("DeadlineExceeded".into());
        s.message = Some("Pod was active on the node longer than the specified deadline".into());
    });
    for (name, p) in [("containers failed", on_its_own), ("deadline", deadline)] {
        for cfg in [&on, &bare_too] {
            assert!(
                !should_clean_up(&p, "node-1", Some(at(0)), at(999_999), cfg),
                "{name}"
            );
        }
    }
}

#[test]
fn failed_by_node_table() {
    let condition = |reason: &str, status: &str| PodCondition {
        type_: "DisruptionTarget".into(),
        status: status.into(),
        reason: Some(reason.into()),
        ..Default::default()
    };
    let status =
        |reason: Option<&str>, message: Option<&str>, conditions: Vec<PodCondition>| PodStatus {
            phase: Some("Failed".into()),
            reason: reason.map(Into::into),
            message: message.map(Into::into),
            conditions: Some(conditions),
            ..Default::default()
        };
    // (case, status, failed by the node)
    let cases = [
        (
            "evicted",
            status(
                Some("Evicted"),
                Some("The node was low on resource: memory."),
                vec![],
            ),
            true,
        ),
        (
            "rejected at admission",
            status(
                Some("OutOfcpu"),
                Some("Pod was rejected: Node didn't have enough resource: cpu"),
                vec![],
            ),
            true,
        ),
        (
            "rejected under pressure",
            status(
                Some("Evicted"),
                Some("Pod was rejected: The node had condition: [MemoryPressure]. "),
                vec![],
            ),
            true,
        ),
        (
            "node shutdown",
            status(
                Some("Terminated"),
                Some("Pod was terminated in response to imminent node shutdown."),
                vec![condition("TerminationByKubelet", "True")],
            ),
            true,
        ),
        (
            "DeadlineExceeded",
            status(
                Some("DeadlineExceeded"),
                Some("Pod was active on the node longer than the specified deadline"),
                vec![],
            ),
            false,
        ),
        ("containers failed", status(None, None, vec![]), false),
        (
            "disrupted by someone else",
            status(None, None, vec![condition("PreemptionByScheduler", "True")]),
            false,
        ),
        (
            "a condition that is not True",
            status(None, None, vec![condition("TerminationByKubelet", "False")]),
            false,
        ),
        (
            "the prefix must lead the message",
            status(Some("Error"), Some("Job says: Pod was rejected: "), vec![]),
            false,
        ),
    ];
    for (name, s, want) in cases {
        assert_eq!(failed_by_node(Some(&s)), want, "{name}");
    }
    assert!(!failed_by_node(None), "no status");
}

#[test]
fn api_view_prefers_our_write_until_the_store_catches_up() {
    let rv = |p: Pod, rv: &str| with(p, |p| p.metadata.resource_version = Some(rv.into()));
    let base = Arc::new(rv(pod("u", &[]), "10"));
    let mut sync = PodSync::default();
    assert_eq!(sync.api_view(base.clone()), base, "nothing written");

    let first = sync.record_write(&base, rv(phase(pod("u", &[]), "Running"), "11"));
    assert_eq!(sync.api_view(base.clone()), first, "store still at 10");
    // A second write on top of the first, before the store saw either.
    let second = sync.record_write(&first, rv(phase(pod("u", &[]), "Failed"), "12"));
    assert_eq!(sync.api_view(base.clone()), second, "store still at 10");
    let caught_up = Arc::new(rv(phase(pod("u", &[]), "Running"), "11"));
    assert_eq!(
        sync.api_view(caught_up),
        second,
        "store at 11, still behind"
    );
    let newer = Arc::new(rv(phase(pod("u", &[]), "Failed"), "13"));
    assert_eq!(sync.api_view(newer.clone()), newer, "store caught up");
    assert_eq!(sync.api_view(base.clone()), base, "record dropped");
}

#[test]
fn errors_name_the_pod_and_request() {
    let err = Error::Timeout {
        pod: "default/web".into(),
        uid: "u1".into(),
        request: "PATCH pods/web/status".into(),
        timeout: Duration::from_secs(10),
    };
    assert_eq!(
        err.to_string(),
        "pod default/web (uid u1): PATCH pods/web/status: no answer within 10s"
    );
    assert!(err.is_unreachable());
}

#[test]
fn same_as_written_ignores_foreign_conditions_and_sub_seconds() {
    let written = status(
        json!({"phase": "Running", "startTime": "2026-01-01T00:00:10Z",
        "conditions": [{"type": "Ready", "status": "True"}]}),
    );
    // (name, desired, same)
    let cases = [
        (
            "identical",
            json!({"phase": "Running", "startTime": "2026-01-01T00:00:10Z",
                   "conditions": [{"type": "Ready", "status": "True"}]}),
            true,
        ),
        (
            "below a second",
            json!({"phase": "Running", "startTime": "2026-01-01T00:00:10.500Z",
                   "conditions": [{"type": "Ready", "status": "True"}]}),
            true,
        ),
        (
            "a readiness gate another controller set",
            json!({"phase": "Running", "startTime": "2026-01-01T00:00:10Z",
                   "conditions": [{"type": "Ready", "status": "True"},
                                  {"type": "example.com/gate", "status": "True"}]}),
            true,
        ),
        (
            "an owned condition changed",
            json!({"phase": "Running", "startTime": "2026-01-01T00:00:10Z",
                   "conditions": [{"type": "Ready", "status": "False"}]}),
            false,
        ),
        (
            "the phase changed",
            json!({"phase": "Failed", "startTime": "2026-01-01T00:00:10Z",
                   "conditions": [{"type": "Ready", "status": "True"}]}),
            false,
        ),
    ];
    for (name, desired, want) in cases {
        assert_eq!(same_as_written(&written, &status(desired)), want, "{name}");
    }
}

#[test]
fn the_write_rate_warning_fires_once_a_minute_above_the_bound() {
    let t0 = Instant::now();
    let mut sync = PodSync::default();
    let mut warnings = Vec::new();
    // A write every second for three minutes, bound 30 a minute.
    for i in 0..180u64 {
        if let Some(count) = sync.count_write(t0 + Duration::from_secs(i), 30) {
            warnings.push((i, count));
        }
    }
    assert_eq!(warnings, vec![(30, 31), (90, 60), (150, 60)]);
    // A pod written every 10 s never warns.
    let mut quiet = PodSync::default();
    assert!((0..60u64).all(|i| quiet
        .count_write(t0 + Duration::from_secs(10 * i), 30)
        .is_none()));
}
