//! The largest values the API accepts, on the real containerd. Any int64 is a valid
//! `terminationGracePeriodSeconds` (pod and probe), `deletionGracePeriodSeconds` and preStop
//! `sleep.seconds`; any positive int32 a probe timing; `activeDeadlineSeconds` up to 2^31 − 1.
//! Durations from the API saturate in nodelet (`clock::seconds_from_api`,
//! `clock::saturating_deadline`) instead of overflowing `Instant + Duration`, which panicked
//! the pod worker at its first sync, so such a pod never ran and could never be stopped.

use std::time::Duration;

use crate::common::*;
use nodelet_testkit::pod::{is_ready, phase, running_ids};
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(90);

/// 2^63 − 1.
const INT64_MAX: i64 = i64::MAX;

/// The container and probes of both tests: testbox serving HTTP on 8080; a startup probe every
/// second that may fail 2^31 − 1 times (its window, 2^31 − 1 s, saturates); a readiness probe
/// that runs when startup succeeds and then every 2^31 − 1 s; a liveness probe that starts
/// 2^31 − 1 s from now; probe-level grace periods of 2^63 − 1 s and a preStop hook sleeping
/// 2^63 − 1 s. The startup probe repeats every second because its first run can come before
/// testbox listens (a loaded host); a second try then finds the server.
fn container(args: &str) -> String {
    let probe = |delay: i32, period: i32, grace: bool| {
        let grace = if grace {
            format!("\n        terminationGracePeriodSeconds: {INT64_MAX}")
        } else {
            String::new()
        };
        format!(
            "\n        httpGet:\n          path: /healthz\n          port: 8080\n        initialDelaySeconds: {delay}\n        periodSeconds: {period}\n        timeoutSeconds: {max}\n        failureThreshold: {max}{grace}",
            max = i32::MAX
        )
    };
    format!(
        "  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [{args}]\n\
         \x20   startupProbe:{startup}\n    readinessProbe:{readiness}\n    livenessProbe:{liveness}\n\
         \x20   lifecycle:\n      preStop:\n        sleep:\n          seconds: {INT64_MAX}\n",
        startup = probe(0, 1, true),
        readiness = probe(0, i32::MAX, false),
        liveness = probe(i32::MAX, i32::MAX, true),
    )
}

fn assert_no_panic(n: &Nodelet) {
    let logs = n.logs();
    assert!(
        !logs.contains("panicked"),
        "nodelet panicked:\n{}",
        tail(&logs, 80)
    );
}

/// A static pod with every duration at the API's largest: it reaches Running and Ready (its
/// startup and readiness probes ran), and nodelet's log shows no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_of_the_largest_durations_runs() {
    let n = Nodelet::start("spec-values-static");
    n.write_manifest(
        "huge.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: huge\nspec:\n  terminationGracePeriodSeconds: {INT64_MAX}\n  activeDeadlineSeconds: {}\n{}",
            i32::MAX,
            container("serve, --http, \"8080\"")
        ),
    );
    let p = n
        .wait_pod("huge", T, "Running and Ready", |p| {
            phase(p) == "Running" && is_ready(p)
        })
        .await;
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.termination_grace_period_seconds, Some(INT64_MAX));
    assert_eq!(spec.active_deadline_seconds, Some(i64::from(i32::MAX)));
    assert_eq!(running_ids(&p).len(), 1, "{:?}", p.status);
    assert_no_panic(&n);
    assert_no_runtime_stalls(&n).await;
}

/// Cluster mode through the real v1.37 API server and kubectl: a pod with grace
/// 2^63 − 1 s whose container ignores SIGTERM runs; `kubectl delete --wait=false` starts a
/// termination that does not end (10 s later the container still runs, the pod is still in the
/// API); `kubectl delete --force --grace-period=0` then ends it: the containers and the sandbox
/// are gone from the runtime and the pod from the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_delete_ends_a_pod_of_grace_int64_max() {
    let server = RealServer::start("spec-values-force");
    let api = server.api();
    let n = Nodelet::start_in_real_cluster("spec-values-force", &server, "");
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: endless\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: {INT64_MAX}\n{}",
        container("serve, --http, \"8080\", --on-sigterm, ignore"),
        node = n.node
    );
    kubectl_apply(&api, n.dir.path(), "endless", &yaml);
    wait_api("endless Running and Ready in the API", &n, || {
        api_pod(&server, "endless").filter(|p| phase(p) == "Running" && is_ready(p))
    })
    .await;

    let (ok, out, err) = kubectl(&api, &["delete", "pod", "endless", "--wait=false"]);
    assert!(ok, "graceful delete: {out}{err}");
    let deleting = api_pod(&server, "endless").expect("still in the API while it terminates");
    assert_eq!(
        deleting.metadata.deletion_grace_period_seconds,
        Some(INT64_MAX),
        "the API server copied the pod's grace period"
    );
    // The positive sign: nodelet started the termination (Killing; the preStop sleep runs).
    wait_api("the Killing log line", &n, || {
        n.logs()
            .lines()
            .any(|l| l.contains("Killing") && l.contains("endless"))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (_, containers) = n.runtime_objects().await;
    assert!(
        containers
            .iter()
            .any(|c| c.state == nodelet::cri::api::ContainerState::ContainerRunning as i32),
        "10 s into a grace period of 2^63 - 1 s the container still runs: {containers:#?}\n{}",
        tail(&n.logs(), 40)
    );
    assert!(
        api_pod(&server, "endless").is_some(),
        "no final DELETE while the grace period runs"
    );
    assert_no_panic(&n);

    let took = force_delete_until_gone(&server, &n, "endless", T).await;
    println!("force delete to containers gone: {took:?}");
    assert!(api_pod(&server, "endless").is_none());
    assert_no_panic(&n);
    assert_no_runtime_stalls(&n).await;
}
