//! Static pods on a real containerd, driven through the real `nodelet` binary.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use nodelet_testkit::pod::{
    all_running, container_status, phase, restart_count, running_ids, terminated, waiting_reason,
};
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_containers_run_and_answer_on_the_pod_ip() {
    let n = Nodelet::start("two-containers");
    n.write_manifest(
        "web.yaml",
        &testbox_pod(
            "web",
            "Always",
            &[
                ("one", &["serve", "--http", "8080"]),
                ("two", &["serve", "--http", "8081"]),
            ],
        ),
    );
    let pod = n
        .wait_pod("web", T, "Running with both containers running", |p| {
            phase(p) == "Running" && all_running(p)
        })
        .await;
    let status = pod.status.as_ref().unwrap();
    let ip = status.pod_ip.clone().expect("pod IP");
    assert_eq!(status.container_statuses.as_ref().unwrap().len(), 2);
    // Running means the process started; its listener may come a moment later.
    for port in [8080, 8081] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let body = loop {
            match reqwest::Client::new()
                .get(format!("http://{ip}:{port}/healthz"))
                .timeout(Duration::from_secs(5))
                .send()
                .await
            {
                Ok(body) => break body,
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(e) => panic!("GET {ip}:{port}: {e}"),
            }
        };
        assert_eq!(body.status(), 200, "port {port}");
    }
    let conditions: Vec<(String, String)> = status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect();
    for want in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ] {
        assert!(
            conditions.contains(&(want.to_string(), "True".to_string())),
            "condition {want} not True in {conditions:?}"
        );
    }
    // Both containers are in the runtime with the kubelet's labels.
    let (sandboxes, containers) = n.runtime_objects().await;
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(containers.len(), 2);
    for c in &containers {
        assert_eq!(
            c.labels.get("io.kubernetes.pod.name").map(String::as_str),
            Some(n.pod_name("web").as_str())
        );
        assert_eq!(
            c.labels
                .get("io.kubernetes.pod.namespace")
                .map(String::as_str),
            Some("default")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_policy_succeeds_on_exit_0_and_fails_on_exit_3() {
    let n = Nodelet::start("never");
    n.write_manifest(
        "ok.yaml",
        &testbox_pod("ok", "Never", &[("main", &["exit", "--code", "0"])]),
    );
    n.write_manifest(
        "bad.yaml",
        &testbox_pod("bad", "Never", &[("main", &["exit", "--code", "3"])]),
    );
    let ok = n
        .wait_pod("ok", T, "Succeeded", |p| phase(p) == "Succeeded")
        .await;
    assert_eq!(terminated(&ok, "main"), Some((0, "Completed".into())));
    let bad = n
        .wait_pod("bad", T, "Failed", |p| phase(p) == "Failed")
        .await;
    assert_eq!(terminated(&bad, "main"), Some((3, "Error".into())));
    assert_eq!(restart_count(&bad, "main"), 0);
    // The table shows them as kubectl would.
    let (ok_cli, out, err) = n.cli(&["pods", "--server", &n.base_url()]);
    assert!(ok_cli, "{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&n.pod_name(name)))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("ok").contains("Completed"), "{out}");
    assert!(line("bad").contains("Error"), "{out}");
    assert!(out.starts_with("NAME"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_restarts_only_failed_containers() {
    let n = Nodelet::start("on-failure");
    n.write_manifest(
        "p.yaml",
        &testbox_pod(
            "p",
            "OnFailure",
            &[
                ("fails", &["exit", "--code", "1", "--after", "1s"]),
                ("succeeds", &["exit", "--code", "0"]),
            ],
        ),
    );
    let pod = n
        .wait_pod("p", T, "the failing container restarted", |p| {
            restart_count(p, "fails") >= 1
        })
        .await;
    assert_eq!(
        restart_count(&pod, "succeeds"),
        0,
        "a container that exited 0 is not restarted under OnFailure"
    );
    assert_ne!(phase(&pod), "Succeeded");
    assert_ne!(phase(&pod), "Failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_policy_restarts_exited_containers() {
    let n = Nodelet::start("always");
    n.write_manifest(
        "a.yaml",
        &testbox_pod(
            "a",
            "Always",
            &[("main", &["exit", "--code", "0", "--after", "1s"])],
        ),
    );
    let pod = n
        .wait_pod("a", T, "restarted twice", |p| restart_count(p, "main") >= 2)
        .await;
    assert_eq!(phase(&pod), "Running");
    let last = container_status(&pod, "main")
        .and_then(|c| c.last_state.clone())
        .and_then(|s| s.terminated);
    assert!(
        last.is_some(),
        "lastState.terminated is kept after a restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_image_with_never_pull_is_err_image_never_pull() {
    let n = Nodelet::start("never-pull");
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: missing\nspec:\n  containers:\n  - name: main\n    image: localhost/does-not-exist:1\n    imagePullPolicy: Never\n";
    n.write_manifest("missing.yaml", manifest);
    let pod = n
        .wait_pod("missing", T, "ErrImageNeverPull", |p| {
            waiting_reason(p, "main").as_deref() == Some("ErrImageNeverPull")
        })
        .await;
    let msg = container_status(&pod, "main")
        .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.message.clone())
        .unwrap_or_default();
    assert!(msg.contains("localhost/does-not-exist:1"), "{msg}");
    assert_eq!(phase(&pod), "Pending");
    let (_, out, _) = n.cli(&["pods", "--server", &n.base_url()]);
    assert!(out.contains("ErrImageNeverPull"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_manifest_leaves_nothing_behind() {
    let n = Nodelet::start("remove");
    n.write_manifest(
        "r.yaml",
        &testbox_pod("r", "Always", &[("main", &["serve"])]),
    );
    n.wait_pod("r", T, "running", all_running).await;
    let (sandboxes, containers) = n.runtime_objects().await;
    assert_eq!((sandboxes.len(), containers.len()), (1, 1));
    n.remove_manifest("r.yaml");
    n.wait_gone("r", T).await;
    let (sandboxes, containers) = n.runtime_objects().await;
    assert!(sandboxes.is_empty(), "sandboxes left: {sandboxes:?}");
    assert!(containers.is_empty(), "containers left: {containers:?}");
}

/// As the kubelet (and Kubernetes' MirrorPod test "should successfully recreate when file is
/// removed and recreated"): a manifest removed and written again at once stops the pod and
/// starts it again under the same UID, its container's restart count going on (1), where a
/// coalesced scan would have left it running with 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_removed_and_written_again_restarts_the_pod() {
    let n = Nodelet::start("recreate");
    let manifest = testbox_pod("again", "Always", &[("main", &["serve"])]);
    n.write_manifest("again.yaml", &manifest);
    let before = n.wait_pod("again", T, "running", all_running).await;
    assert_eq!(restart_count(&before, "main"), 0);
    let ids_before = running_ids(&before);

    n.remove_manifest("again.yaml");
    n.write_manifest("again.yaml", &manifest);
    let after = n
        .wait_pod("again", T, "running again with restart count 1", |p| {
            all_running(p) && restart_count(p, "main") == 1
        })
        .await;
    assert_eq!(
        after.metadata.uid, before.metadata.uid,
        "the same static pod"
    );
    assert_ne!(running_ids(&after), ids_before, "a new container");
    assert!(
        n.logs().contains("pod returned after its removal"),
        "{}",
        tail(&n.logs(), 40)
    );
    let (sandboxes, containers) = n.runtime_objects().await;
    assert_eq!(
        (sandboxes.len(), containers.len()),
        (1, 1),
        "the stopped pod's objects are removed: {sandboxes:?} {containers:?}"
    );
}

/// `env[].valueFrom.fileKeyRef` (EnvFiles, as Kubernetes' MirrorPod test "should be able to
/// consume variables from a file"): an init container writes an env file into an emptyDir, the
/// next container gets its values; a key that is not there fails that container with the
/// kubelet's message, unless the reference is optional.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_variables_from_a_file_an_init_container_wrote() {
    let n = Nodelet::start("env-files");
    let pod = |name: &str, missing_key_optional: bool| {
        format!(
            r##"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  volumes:
  - name: config
    emptyDir: {{}}
  initContainers:
  - name: write
    image: {TESTBOX}
    imagePullPolicy: Never
    volumeMounts: [{{name: config, mountPath: /data}}]
    command:
    - /bin/sh
    - -c
    - |
      printf '%s\n' "CONFIG_1='value 1'" "# a comment" "  CONFIG_2='two" "lines' # and another" > /data/config.env
  containers:
  - name: read
    image: {TESTBOX}
    imagePullPolicy: Never
    env:
    - name: CONFIG_1
      valueFrom: {{fileKeyRef: {{volumeName: config, path: config.env, key: CONFIG_1}}}}
    - name: CONFIG_2
      valueFrom: {{fileKeyRef: {{volumeName: config, path: config.env, key: CONFIG_2}}}}
    - name: ABSENT
      valueFrom: {{fileKeyRef: {{volumeName: config, path: config.env, key: ABSENT, optional: {missing_key_optional}}}}}
    command:
    - /bin/sh
    - -c
    - |
      test "$CONFIG_1" = "value 1" && test "$CONFIG_2" = "$(printf 'two\nlines')" && test -z "${{ABSENT+set}}"
"##
        )
    };
    n.write_manifest("reads.yaml", &pod("reads", true));
    n.write_manifest("lacks.yaml", &pod("lacks", false));
    let reads = n
        .wait_pod("reads", T, "a terminal phase", |p| {
            matches!(phase(p), "Succeeded" | "Failed")
        })
        .await;
    assert_eq!(
        phase(&reads),
        "Succeeded",
        "the container saw the file's values: {:?}\n{}",
        reads.status,
        tail(&n.logs(), 40)
    );
    let lacks = n
        .wait_pod("lacks", T, "CreateContainerConfigError", |p| {
            waiting_reason(p, "read").as_deref() == Some("CreateContainerConfigError")
        })
        .await;
    let message = container_status(&lacks, "read")
        .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.message.clone())
        .unwrap_or_default();
    assert!(
        message.starts_with("environment variable key \"ABSENT\" not found in file \"")
            && message.ends_with("/volumes/kubernetes.io~empty-dir/config/config.env\""),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_and_restart_adopts_running_containers() {
    let mut n = Nodelet::start("adopt");
    n.write_manifest(
        "keep.yaml",
        &testbox_pod("keep", "Always", &[("a", &["serve"]), ("b", &["serve"])]),
    );
    n.write_manifest(
        "gone.yaml",
        &testbox_pod("gone", "Always", &[("main", &["serve"])]),
    );
    let before = n.wait_pod("keep", T, "running", all_running).await;
    n.wait_pod("gone", T, "running", all_running).await;
    let ids_before = running_ids(&before);
    assert_eq!(ids_before.len(), 2);

    n.kill9();
    // While nodelet is down, one manifest disappears.
    n.remove_manifest("gone.yaml");
    n.restart();

    n.wait_pod("keep", T, "running after restart", all_running)
        .await;
    // The positive sign first: two syncs of the kept pod (the only one left to sync) since it
    // showed running, the first of which decides to adopt its containers or start new ones.
    n.wait_more_syncs(2, T).await;
    let after = n.pod("keep").await.expect("keep listed");
    assert_eq!(
        running_ids(&after),
        ids_before,
        "containers were restarted instead of adopted"
    );
    assert_eq!(restart_count(&after, "a") + restart_count(&after, "b"), 0);
    n.wait_gone("gone", T).await;
    // The pod whose manifest vanished is terminated and removed from the runtime.
    let deadline = std::time::Instant::now() + T;
    loop {
        let (sandboxes, _) = n.runtime_objects().await;
        let gone_left = sandboxes.iter().any(|s| {
            s.labels.get("io.kubernetes.pod.name").map(String::as_str)
                == Some(n.pod_name("gone").as_str())
        });
        if !gone_left {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "orphaned sandbox not removed\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (sandboxes, _) = n.runtime_objects().await;
    assert_eq!(sandboxes.len(), 1, "only the kept pod's sandbox remains");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_manifest_is_reported_and_the_good_pod_runs() {
    let n = Nodelet::start("broken");
    n.write_manifest(
        "good.yaml",
        &testbox_pod("good", "Always", &[("main", &["serve"])]),
    );
    n.write_manifest(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: broken\nspec:\n  containers:\n  - name: main\n",
    );
    n.wait_pod("good", T, "running", all_running).await;
    let deadline = std::time::Instant::now() + T;
    loop {
        let logs = n.logs();
        if logs.contains("broken.yaml") && logs.contains("spec.containers[0].image") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the error does not name the file and field:\n{}",
            tail(&logs, 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(n.pod("broken").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_manifest_replaces_the_pod() {
    let n = Nodelet::start("edit");
    n.write_manifest(
        "e.yaml",
        &testbox_pod("e", "Always", &[("main", &["serve"])]),
    );
    let first = n.wait_pod("e", T, "running", all_running).await;
    let uid1 = first.metadata.uid.clone().unwrap();
    n.write_manifest(
        "e.yaml",
        &testbox_pod("e", "Always", &[("main", &["serve", "--http", "8080"])]),
    );
    let second = n
        .wait_pod("e", T, "a new pod UID running", |p| {
            p.metadata.uid.as_deref() != Some(uid1.as_str()) && all_running(p)
        })
        .await;
    assert_ne!(running_ids(&first), running_ids(&second));
    let deadline = std::time::Instant::now() + T;
    loop {
        let (sandboxes, _) = n.runtime_objects().await;
        if sandboxes.len() == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "old sandbox not removed: {sandboxes:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_env_and_downward_api_reach_the_container() {
    use nodelet::cri::Runtime;
    let n = Nodelet::start("volumes");
    let host_dir = n.dir.path().join("host-data");
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::write(host_dir.join("greeting"), "hello from the host").unwrap();
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: vol
  labels:
    tier: backend
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - name: scratch
    emptyDir: {{}}
  - name: host
    hostPath:
      path: {host}
      type: Directory
  containers:
  - name: writer
    image: {TESTBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo written > /data/file && exec /testbox sleep infinity"]
    volumeMounts:
    - name: scratch
      mountPath: /data
  - name: reader
    image: {TESTBOX}
    imagePullPolicy: Never
    args: ["serve"]
    env:
    - name: GREETING
      value: hi
    - name: MESSAGE
      value: "$(GREETING) there"
    - name: MY_POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: MY_TIER
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['tier']
    - name: MEM_LIMIT_MI
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
          divisor: 1Mi
    resources:
      limits:
        memory: 64Mi
    volumeMounts:
    - name: scratch
      mountPath: /data
      readOnly: true
    - name: host
      mountPath: /host
      readOnly: true
"#,
        host = host_dir.display()
    );
    n.write_manifest("vol.yaml", &manifest);
    let pod = n.wait_pod("vol", T, "running", all_running).await;
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let reader = container_status(&pod, "reader")
        .and_then(|c| c.container_id.clone())
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let rt = runtime();
    let exec = |cmd: &str| {
        let rt = rt.clone();
        let reader = reader.clone();
        let cmd = cmd.to_string();
        async move {
            let r = rt
                .exec_sync(
                    &reader,
                    vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
                    Duration::from_secs(10),
                )
                .await
                .unwrap_or_else(|e| panic!("exec {cmd}: {e}"));
            (
                r.exit_code,
                String::from_utf8_lossy(&r.stdout).trim().to_string(),
            )
        }
    };
    // The emptyDir is shared; the writer may need a moment after it started.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if exec("cat /data/file").await == (0, "written".to_string()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "emptyDir content not visible to the reader"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        exec("cat /host/greeting").await,
        (0, "hello from the host".into())
    );
    assert_ne!(
        exec("touch /data/x").await.0,
        0,
        "a readOnly mount is read-only"
    );
    assert_eq!(exec("echo $MESSAGE").await.1, "hi there");
    assert_eq!(exec("echo $MY_POD_IP").await.1, ip);
    assert_eq!(exec("echo $MY_TIER").await.1, "backend");
    assert_eq!(exec("echo $MEM_LIMIT_MI").await.1, "64");
    assert!(
        exec("cat /etc/hosts").await.1.contains(&ip),
        "managed /etc/hosts names the pod IP"
    );
}

/// Static pods go through the node's predicates too, as the kubelet admits them: one whose
/// node selector the node does not match is Failed with `NodeAffinity` and never runs, while
/// one that matches runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_that_does_not_match_the_node_is_rejected() {
    let n = Nodelet::start("static-affinity");
    let manifest = |name: &str, selector: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeSelector:\n    {selector}\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
        )
    };
    n.write_manifest("fits.yaml", &manifest("fits", "kubernetes.io/os: linux"));
    n.write_manifest("elsewhere.yaml", &manifest("elsewhere", "disktype: ssd"));
    let rejected = n
        .wait_pod("elsewhere", T, "Failed with NodeAffinity", |p| {
            phase(p) == "Failed"
        })
        .await;
    let status = rejected.status.unwrap();
    assert_eq!(status.reason.as_deref(), Some("NodeAffinity"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
    );
    n.wait_pod("fits", T, "Running", |p| phase(p) == "Running")
        .await;
    let elsewhere = n.pod("elsewhere").await.unwrap();
    assert!(
        elsewhere
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .iter()
            .all(|c| c.state.as_ref().and_then(|s| s.running.as_ref()).is_none()),
        "never ran"
    );
}

/// A host-network pod's `status.podIP` in the Downward API is the node's address, as its
/// status says and as the kubelet gives it (its sandbox has no address of its own). Kubernetes'
/// `should provide host IP and pod IP as an env var if pod uses host network` [NodeConformance]
/// test found the variable empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_network_pods_pod_ip_is_the_nodes() {
    let n = Nodelet::start("hostnet-env");
    n.write_manifest(
        "hostnet.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: hostnet
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {TESTBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo \"pod=$POD_IP host=$HOST_IP\" > /dev/termination-log"]
    env:
    - name: POD_IP
      valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
    - name: HOST_IP
      valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}
"#
        ),
    );
    let pod = n
        .wait_pod("hostnet", T, "Succeeded", |p| phase(p) == "Succeeded")
        .await;
    let status = pod.status.as_ref().unwrap();
    let host_ip = status.host_ip.clone().expect("the status' hostIP");
    assert_eq!(
        status.pod_ip.as_deref(),
        Some(host_ip.as_str()),
        "{status:?}"
    );
    let message = status.container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.message.clone())
        .unwrap_or_default();
    assert_eq!(message.trim(), format!("pod={host_ip} host={host_ip}"));
}

/// Kubernetes' `[Serial]` KubletTLS and ReloadKubeletClientCAFileTest "certificate reload":
/// new `tlsCertFile`/`tlsPrivateKeyFile` and a new `authentication.x509.clientCAFile`
/// written over the old ones are served by the running nodelet within a minute (the
/// kubelet's `ReloadKubeletServerCertificateFile` and `ReloadKubeletClientCAFile`, on by
/// default): a client that trusts only the new CA and presents a certificate it signed is
/// refused before and served after, with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_written_over_on_disk_are_served_without_a_restart() {
    use std::net::{IpAddr, Ipv4Addr};
    let certs = tempfile::tempdir().unwrap();
    let (ca_file, cert_file, key_file) = (
        certs.path().join("client-ca.crt"),
        certs.path().join("kubelet.crt"),
        certs.path().join("kubelet.key"),
    );
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    // One CA signs both the serving certificate and the client's, as the spec's files.
    let install = |ca: &TestCa| {
        let (cert, key) = ca.server_pem(loopback);
        for (path, text) in [
            (&ca_file, ca.cert.pem()),
            (&cert_file, cert),
            (&key_file, key),
        ] {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
    };
    let (old_ca, new_ca) = (TestCa::new("old-ca"), TestCa::new("new-ca"));
    install(&old_ca);
    let port = nodelet_testkit::port::free_port();
    let n = Nodelet::start_with(
        "tls-reload",
        &format!(
            "port: {port}\ntlsCertFile: {}\ntlsPrivateKeyFile: {}\nauthentication:\n  x509:\n    clientCAFile: {}\n",
            cert_file.display(),
            key_file.display(),
            ca_file.display()
        ),
    );
    // A TLS handshake trusting only `ca`'s serving certificates, presenting a client
    // certificate `ca` signed.
    let handshake = |ca: &TestCa| {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert.der().clone()).unwrap();
        let client = ca.client_pem("system:node:tls-reload", "system:nodes");
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(client.as_bytes())
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_slice(client.as_bytes()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
        async move {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(ServerName::IpAddress(Ipv4Addr::LOCALHOST.into()), tcp)
                .await?;
            // The server checks the client's certificate after the client's Finished: a
            // request and its answer prove it was accepted.
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .await?;
            let mut answer = Vec::new();
            tls.read_to_end(&mut answer).await?;
            Ok::<String, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
        }
    };
    let answer = first_answer(|| handshake(&old_ca), "the first certificates", &n).await;
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    assert!(
        handshake(&new_ca).await.is_err(),
        "the new CA is not trusted (nor trusting) before it is written"
    );
    install(&new_ca);
    let answer = first_answer(|| handshake(&new_ca), "the new certificates", &n).await;
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    assert!(
        handshake(&old_ca).await.is_err(),
        "the old pair is no longer served"
    );
    assert!(
        n.logs()
            .contains("kubelet API certificates changed on disk; serving them"),
        "{}",
        tail(&n.logs(), 30)
    );
}

/// The first answer `attempt` gets within a minute (Kubernetes' certificate reload specs allow a
/// minute), trying again every 200 ms.
async fn first_answer<F, A>(mut attempt: F, what: &str, n: &Nodelet) -> String
where
    F: FnMut() -> A,
    A: std::future::Future<Output = std::io::Result<String>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(answer) = attempt().await {
            return answer;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} not served within a minute\n{}",
            tail(&n.logs(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
