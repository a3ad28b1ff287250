//! Joining a cluster the way `kubeadm join` sets a kubelet up, against the real v1.37.2 control
//! plane (`scripts/k8s.sh`: its bootstrap token, its controller-manager approving and signing
//! the node's client certificates, its audit log), on the real containerd, with the real
//! `kubectl`:
//!
//! - nodelet started through kubeadm's systemd drop-in (`10-kubeadm.conf`, the real text; the
//!   test plays systemd's part: its `Environment=`, `EnvironmentFile=` and `$VAR` expansion)
//!   as `/usr/bin/kubelet`, with only a bootstrap-token kubeconfig: the CSR approved by the
//!   controller-manager (kubeadm's RBAC for node client certificates), the node registered as
//!   `system:node:<name>` and Ready, the flags of `kubeadm-flags.env` in effect;
//! - nodelet with kubelet flags (`--rotate-certificates --rotate-server-certificates`) against a
//!   signer issuing certificates of 150 s (`NODELET_TEST_K8S_SIGNING_DURATION`), the serving
//!   ones approved by the test as an administrator would: both renewed before they expire, the
//!   node Ready and its lease renewed throughout, the pod watch opened with the first
//!   certificate still delivering after that certificate expired, the kubelet API serving the
//!   renewed serving certificate, all without a restart.
//!
//! The two run at the same time (the second takes a little over two minutes).

mod common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver_fixture::LoggedRequest;
use common::real::{k8s_env, token_kubeconfig};
use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodelet_testkit::port::free_port;
use nodelet_testkit::tail;

/// kubeadm's drop-in for the kubelet unit (`/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf`
/// from the kubeadm package, kubernetes/release), verbatim.
const KUBEADM_DROP_IN: &str = r#"# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"#;

const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// A value of a systemd assignment: surrounding double or single quotes removed.
fn unquote(value: &str) -> String {
    let v = value.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

/// What systemd runs for the unit's `ExecStart`: the `Environment=` assignments, then each
/// `EnvironmentFile=` (a leading `-`: may be missing; `KEY=VALUE` lines, `#` comments), then
/// the last `ExecStart=` with each word `$NAME` replaced by the variable's value split at
/// whitespace (an unset or empty one gives no word) — systemd.service(5), "Command lines".
fn exec_start_argv(unit: &str) -> Vec<String> {
    let mut env = std::collections::BTreeMap::new();
    let mut exec = String::new();
    for line in unit.lines().map(str::trim) {
        if let Some(assignment) = line.strip_prefix("Environment=") {
            let (k, v) = unquote(assignment)
                .split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .expect("Environment=KEY=VALUE");
            env.insert(k, v);
        } else if let Some(file) = line.strip_prefix("EnvironmentFile=") {
            let (optional, path) = match file.strip_prefix('-') {
                Some(p) => (true, p),
                None => (false, file),
            };
            let text = match std::fs::read_to_string(path) {
                Ok(text) => text,
                Err(_) if optional => continue,
                Err(e) => panic!("EnvironmentFile {path}: {e}"),
            };
            for l in text.lines().map(str::trim) {
                if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
                    continue;
                }
                if let Some((k, v)) = l.split_once('=') {
                    env.insert(k.trim().to_string(), unquote(v));
                }
            }
        } else if let Some(command) = line.strip_prefix("ExecStart=") {
            exec = command.to_string();
        }
    }
    let mut argv = Vec::new();
    for word in exec.split_whitespace() {
        match word.strip_prefix('$') {
            Some(name) => argv.extend(
                env.get(name)
                    .map(|v| v.split_whitespace().map(String::from).collect::<Vec<_>>())
                    .unwrap_or_default(),
            ),
            None => argv.push(word.to_string()),
        }
    }
    argv
}

#[test]
fn exec_start_expansion_follows_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let flags = dir.path().join("kubeadm-flags.env");
    std::fs::write(
        &flags,
        "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-ip=10.0.0.7\"\n",
    )
    .unwrap();
    let unit = KUBEADM_DROP_IN
        .replace(
            "/var/lib/kubelet/kubeadm-flags.env",
            &flags.display().to_string(),
        )
        .replace("/etc/default/kubelet", "/nonexistent/default-kubelet");
    assert_eq!(
        exec_start_argv(&unit),
        vec![
            "/usr/bin/kubelet",
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--config=/var/lib/kubelet/config.yaml",
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
            "--node-ip=10.0.0.7",
        ]
    );
}

/// The binary as `kubelet` and with kubelet flags: refusals name the flag, `--help` and
/// `--version` answer as the kubelet's; `nodelet --version` stays nodelet's.
#[test]
fn kubelet_command_line_answers_and_refuses_by_flag() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = dir.path().join("kubelet");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_nodelet"), &kubelet).unwrap();
    let run = |program: &Path, args: &[&str]| {
        let out = Command::new(program).args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let nodelet = Path::new(env!("CARGO_BIN_EXE_nodelet"));
    let (ok, out, _) = run(&kubelet, &["--version"]);
    assert!(ok && out.starts_with("Kubernetes v1.37."), "{out}");
    let (ok, out, _) = run(nodelet, &["--version"]);
    assert!(ok && out.starts_with("nodelet "), "{out}");
    let (ok, out, _) = run(&kubelet, &["--help"]);
    assert!(
        ok && out.contains("--rotate-certificates") && out.contains("sets rotateCertificates"),
        "{out}"
    );
    let (ok, _, err) = run(&kubelet, &["--network-plugin=cni"]);
    assert!(
        !ok && err.contains("unknown flag: --network-plugin"),
        "{err}"
    );
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 50\n",
    )
    .unwrap();
    let config_flag = format!("--config={}", config.display());
    // Kubelet flags after `nodelet` work the same way.
    let (ok, _, err) = run(
        nodelet,
        &[&config_flag, "--node-ip=127.0.0.1", "--max-pods=x"],
    );
    assert!(!ok, "{err}");
    assert!(
        err.contains("invalid argument \"x\" for \"--max-pods\" flag"),
        "{err}"
    );
    let (ok, _, err) = run(nodelet, &[&config_flag, "--node-ip=127.0.0.1"]);
    assert!(!ok, "{err}");
    assert!(
        err.contains(
            "--node-ip (nodeIP): Invalid value: \"127.0.0.1\": must not be a loopback address"
        ),
        "{err}"
    );
}

/// This machine's address on its default route (no packet is sent): a node IP nodelet
/// accepts (not loopback).
fn host_ip() -> IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("udp socket");
    socket.connect("10.255.255.255:9").expect("a default route");
    socket.local_addr().expect("local address").ip()
}

/// [`wait_within`] with nodelet's log alone.
async fn wait_for<T>(
    what: &str,
    n: &Nodelet,
    timeout: Duration,
    check: impl FnMut() -> Option<T>,
) -> T {
    wait_within(what, n, timeout, check, String::new).await
}

/// The real kubectl with a kubeconfig (the test's admin).
fn kubectl_as(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    kubectl(kubeconfig.to_str().unwrap(), args)
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The CSRs of `node` (the CN of the request: the cluster's CSRs are every test's).
fn csrs(server: &RealServer, node: &str) -> Vec<CertificateSigningRequest> {
    let cn = format!("system:node:{node}");
    let mut list: Vec<CertificateSigningRequest> = server
        .objects::<CertificateSigningRequest>(None)
        .into_iter()
        .filter(|c| subject_of_request(&c.spec.request.0).0 == cn)
        .collect();
    // Creation times have whole seconds, and a renewal due at once (the signer backdates, so a
    // short certificate can be past 70 % of its life when issued) can share the second of the
    // bootstrap token's request; the listing's order is by name, which is random. Within one
    // second the bootstrap request came first: the node's identity is the certificate it got.
    list.sort_by_key(|c| {
        (
            c.metadata.creation_timestamp.clone().map(|t| t.0),
            !c.spec
                .username
                .as_deref()
                .is_some_and(|u| u.starts_with("system:bootstrap:")),
        )
    });
    list
}

fn issued(csr: &CertificateSigningRequest) -> Option<Vec<u8>> {
    csr.status
        .as_ref()?
        .certificate
        .as_ref()
        .map(|c| c.0.clone())
        .filter(|c| !c.is_empty())
}

fn has_condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == kind))
}

/// (CN, O, subjectAltNames as `DNS:<name>`/`IP:<address>`) of a PEM certificate request.
fn subject_of_request(pem: &[u8]) -> (String, Vec<String>, Vec<String>) {
    use x509_parser::prelude::FromDer;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).expect("PEM");
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .expect("PKCS#10");
    let subject = &req.certification_request_info.subject;
    let cn = subject
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let orgs = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    let sans = req
        .requested_extensions()
        .into_iter()
        .flatten()
        .filter_map(|e| match e {
            x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) => Some(
                san.general_names
                    .iter()
                    .map(|n| match n {
                        x509_parser::extensions::GeneralName::DNSName(d) => format!("DNS:{d}"),
                        x509_parser::extensions::GeneralName::IPAddress(b) => {
                            match <[u8; 4]>::try_from(*b) {
                                Ok(v4) => format!("IP:{}", IpAddr::from(v4)),
                                Err(_) => format!("IP:{b:?}"),
                            }
                        }
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    (cn, orgs, sans)
}

/// (serial, notBefore, notAfter) of the first certificate of a PEM text.
fn cert_facts(pem: &[u8]) -> (String, i64, i64) {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).expect("PEM certificate");
    let cert = block.parse_x509().expect("X.509");
    (
        cert.raw_serial_as_string(),
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    )
}

fn now_unix() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn node_ready(kubeconfig: &Path, node: &str) -> bool {
    let (ok, out, _) = kubectl_as(kubeconfig, &["get", "nodes", "--no-headers"]);
    ok && out.lines().any(|l| {
        l.split_whitespace().next() == Some(node) && l.split_whitespace().nth(1) == Some("Ready")
    })
}

fn bound_pod(name: &str, node: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
    )
}

/// Applies a pod bound to `node` with kubectl and waits until the API shows it Running.
async fn run_pod(n: &Nodelet, server: &RealServer, name: &str, timeout: Duration) {
    let admin = server.kubeconfig();
    let file = n.dir.path().join(format!("{name}.yaml"));
    write(&file, &bound_pod(name, &n.node));
    let (ok, out, err) = kubectl_as(admin, &["apply", "-f", file.to_str().unwrap()]);
    assert!(ok, "kubectl apply: {out}{err}");
    wait_for(&format!("pod {name} Running"), n, timeout, || {
        let pod = server.object::<Pod>(Some(&server.namespace()), name)?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
}

fn user_of(r: &LoggedRequest) -> &str {
    r.user.as_deref().unwrap_or("")
}

/// The bootstrap token `scripts/k8s.sh` made (kubeadm's groups) and its user name.
fn bootstrap_token() -> (String, String) {
    let token = k8s_env("NODELET_TEST_K8S_BOOTSTRAP_TOKEN");
    let id = token.split('.').next().unwrap_or_default().to_string();
    (token, format!("system:bootstrap:{id}"))
}

/// The reason of the CSR's `Approved` condition.
fn approval_reason(csr: &CertificateSigningRequest) -> Option<String> {
    csr.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Approved")
        .and_then(|c| c.reason.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadm_drop_in_joins_with_a_bootstrap_token() {
    let started = Instant::now();
    let server = RealServer::start("kubeadm-join");
    let mut n = Nodelet::prepare_with("kubeadm-join", "");
    let node = n.node.clone();
    server.adopt_node(&node);
    // The host's paths, under the test's directory.
    let host = n.dir.path().join("host");
    let etc = host.join("etc/kubernetes");
    let var = host.join("var/lib/kubelet");
    let (token, bootstrap_user) = bootstrap_token();
    write(
        &etc.join("bootstrap-kubelet.conf"),
        &token_kubeconfig(&token),
    );
    write(
        &etc.join("pki/ca.crt"),
        &std::fs::read_to_string(k8s_env("NODELET_TEST_K8S_CA")).unwrap(),
    );
    let admin = server.kubeconfig().to_path_buf();
    std::fs::create_dir_all(etc.join("manifests")).unwrap();
    let node_ip = host_ip();
    // kubeadm's config.yaml, with what differs on this test machine (cgroupfs, cgroup v1, the
    // test's directories, no fixed ports: other tests run beside this one).
    write(
        &var.join("config.yaml"),
        &format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: {etc}/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: cgroupfs
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: \"\"
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 0
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  verbosity: 0
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 2s
nodeLeaseDurationSeconds: 8
port: 0
rotateCertificates: true
runtimeRequestTimeout: 0s
staticPodPath: {etc}/manifests
syncFrequency: 0s
# nodelet's own fields for this machine
rootDir: {var}
podLogsDir: {logs}
containerLogLinksDir: {links}
failCgroupV1: false
plegRelistPeriod: 2s
evictionHard: {{memory.available: \"1Mi\"}}
",
            etc = etc.display(),
            var = var.display(),
            logs = n.dir.path().join("logs").display(),
            links = n.dir.path().join("containers").display(),
        ),
    );
    write(
        &var.join("kubeadm-flags.env"),
        &format!(
            "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint={} --pod-infra-container-image=localhost/pause:1 --hostname-override={node} --node-ip={node_ip} --node-labels=nodelet.dev/joined-by=kubeadm\"\n",
            cri_endpoint()
        ),
    );
    write(
        &host.join("etc/default/kubelet"),
        "KUBELET_EXTRA_ARGS=--v=2\n",
    );
    let kubelet = host.join("usr/bin/kubelet");
    std::fs::create_dir_all(kubelet.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_nodelet"), &kubelet).unwrap();
    // kubeadm's preflight reads the version.
    let version = Command::new(&kubelet).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).to_string();
    assert!(version.starts_with("Kubernetes v1."), "{version}");

    let rehome = |text: &str| {
        text.replace("/etc/kubernetes", &etc.display().to_string())
            .replace("/var/lib/kubelet", &var.display().to_string())
            .replace(
                "/etc/default/kubelet",
                &host.join("etc/default/kubelet").display().to_string(),
            )
            .replace("/usr/bin/kubelet", &kubelet.display().to_string())
    };
    let argv = exec_start_argv(&rehome(KUBEADM_DROP_IN));
    assert_eq!(argv[0], kubelet.display().to_string());
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    n.launch_command(command);

    // The bootstrap token asks for the node's client certificate.
    let csr = wait_for("the node's CSR", &n, Duration::from_secs(60), || {
        csrs(&server, &node).into_iter().next()
    })
    .await;
    let name = csr.metadata.name.clone().unwrap();
    let spec = &csr.spec;
    assert_eq!(spec.signer_name, CLIENT_SIGNER);
    assert_eq!(spec.username.as_deref(), Some(bootstrap_user.as_str()));
    let groups = spec.groups.clone().unwrap_or_default();
    for g in [
        "system:bootstrappers",
        "system:bootstrappers:kubeadm:default-node-token",
    ] {
        assert!(groups.iter().any(|x| x == g), "{g} in {groups:?}");
    }
    assert_eq!(
        spec.usages.as_deref(),
        Some(&["digital signature".to_string(), "client auth".to_string()][..])
    );
    let (cn, orgs, sans) = subject_of_request(&spec.request.0);
    assert_eq!(cn, format!("system:node:{node}"));
    assert_eq!(orgs, vec!["system:nodes"]);
    assert!(sans.is_empty(), "{sans:?}");
    // With rotateCertificates (kubeadm's config) the kubeconfig is written at once, pointing at
    // the certificate to come.
    let kubelet_conf = etc.join("kubelet.conf");
    let current = var.join("pki/kubelet-client-current.pem");
    let conf = std::fs::read_to_string(&kubelet_conf).expect("kubelet.conf written");
    assert!(
        conf.contains(&format!("client-certificate: {}", current.display())),
        "{conf}"
    );

    // kube-controller-manager's approver approves it (kubeadm's RBAC lets the token's group ask
    // for node client certificates), its signer issues it.
    wait_for(
        "the CSR approved and issued",
        &n,
        Duration::from_secs(60),
        || {
            let (ok, out, _) = kubectl_as(&admin, &["get", "csr", &name, "--no-headers"]);
            (ok && out.contains("Approved,Issued")).then_some(())
        },
    )
    .await;
    let approved = server
        .object::<CertificateSigningRequest>(None, &name)
        .unwrap();
    assert_eq!(
        approval_reason(&approved).as_deref(),
        Some("AutoApproved"),
        "{:?}",
        approved.status
    );

    wait_for(
        "the node Ready in kubectl get nodes",
        &n,
        Duration::from_secs(60),
        || node_ready(&admin, &node).then_some(()),
    )
    .await;
    // The pair file and its dated original, holding the issued certificate.
    let link = std::fs::read_link(&current).expect("kubelet-client-current.pem is a symlink");
    let file_name = link.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        file_name.starts_with("kubelet-client-20") && file_name.ends_with(".pem"),
        "{file_name}"
    );
    let issued_pem = issued(&approved).unwrap();
    let stored = std::fs::read(&current).unwrap();
    assert_eq!(
        cert_facts(&stored).0,
        cert_facts(&issued_pem).0,
        "the issued certificate is stored"
    );

    // Who did what (the API server's audit log): the node registered itself as
    // system:node:<name>; the bootstrap token touched CSRs only; nothing was refused.
    let node_user = format!("system:node:{node}");
    let log = server.audited(
        &[node_user.clone(), bootstrap_user.clone()],
        "ResponseComplete",
    );
    let registration = log
        .iter()
        .find(|r| r.method == "POST" && r.path == "/api/v1/nodes")
        .expect("the node registration");
    assert_eq!(user_of(registration), node_user);
    assert_eq!(registration.status, 201);
    for r in log.iter().filter(|r| user_of(r) == bootstrap_user) {
        assert!(
            r.path
                .starts_with("/apis/certificates.k8s.io/v1/certificatesigningrequests")
                || !r.path.contains("/namespaces/") && !r.path.contains("/nodes"),
            "bootstrap token used for {} {}",
            r.method,
            r.path
        );
    }
    let refused: Vec<_> = log
        .iter()
        .filter(|r| r.status == 401 || r.status == 403)
        .map(|r| format!("{} {} {} {:?}", r.status, r.method, r.path, r.user))
        .collect();
    assert!(refused.is_empty(), "{refused:?}");

    // kubeadm-flags.env's flags took effect: the name, the address, the label.
    let node_obj = server.object::<Node>(None, &node).unwrap();
    let labels = node_obj.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("nodelet.dev/joined-by").map(String::as_str),
        Some("kubeadm")
    );
    let addresses = node_obj
        .status
        .and_then(|s| s.addresses)
        .unwrap_or_default();
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == node_ip.to_string()),
        "{addresses:?}"
    );
    // ... and the runtime endpoint: a pod runs.
    run_pod(&n, &server, "joined", Duration::from_secs(60)).await;
    assert!(n.exited().is_none(), "still the first process");
    eprintln!("kubeadm join test: {:?}", started.elapsed());
}

/// Approves every serving CSR of `node` that has no condition yet, with kubectl, until aborted,
/// as an administrator does (kube-controller-manager approves only client certificates).
fn spawn_approver(
    server: Arc<RealServer>,
    node: String,
    admin: PathBuf,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let list = {
                let (server, node) = (server.clone(), node.clone());
                tokio::task::spawn_blocking(move || csrs(&server, &node))
                    .await
                    .unwrap_or_default()
            };
            for csr in list {
                let pending = csr.spec.signer_name == SERVING_SIGNER
                    && !has_condition(&csr, "Approved")
                    && !has_condition(&csr, "Denied");
                if pending {
                    let name = csr.metadata.name.clone().unwrap_or_default();
                    let admin = admin.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        kubectl_as(&admin, &["certificate", "approve", &name])
                    })
                    .await;
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// The serial of the certificate the kubelet API serves at `addr`, verified against the
/// cluster CA for the IP address.
async fn served_serial(addr: std::net::SocketAddr, ca_pem: &str) -> Result<String, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let tls = connector
        .connect(name, stream)
        .await
        .map_err(|e| e.to_string())?;
    let der = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or("no certificate")?
        .to_vec();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
    Ok(cert.raw_serial_as_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_serving_certificates_rotate_without_a_restart() {
    let started = Instant::now();
    let server = Arc::new(RealServer::start("cert-rotation"));
    let node_ip = host_ip();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let ca = PathBuf::from(k8s_env("NODELET_TEST_K8S_CA"));
    // The controller-manager's `--cluster-signing-duration`, in seconds.
    let signing: i64 = k8s_env("NODELET_TEST_K8S_SIGNING_DURATION")
        .trim_end_matches('s')
        .parse()
        .expect("NODELET_TEST_K8S_SIGNING_DURATION in seconds");
    let mut n = Nodelet::prepare_with(
        "cert-rotation",
        &format!(
            "port: {port}\naddress: {node_ip}\nnodeStatusUpdateFrequency: 2s\nnodeLeaseDurationSeconds: 8\n\
             authentication: {{x509: {{clientCAFile: {}}}}}\n",
            ca.display()
        ),
    );
    let node = n.node.clone();
    server.adopt_node(&node);
    let node_user = format!("system:node:{node}");
    let (token, bootstrap_user) = bootstrap_token();
    let bootstrap = dir.path().join("bootstrap-kubelet.conf");
    write(&bootstrap, &token_kubeconfig(&token));
    let admin = server.kubeconfig().to_path_buf();
    let kubeconfig = dir.path().join("kubelet.conf");
    // Kubelet flags after the program name: nodelet takes them as the kubelet would.
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodelet"));
    command.args([
        format!("--config={}", n.config.display()),
        format!("--bootstrap-kubeconfig={}", bootstrap.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--rotate-certificates".into(),
        "--rotate-server-certificates".into(),
        format!("--node-ip={node_ip}"),
    ]);
    n.launch_command(command);
    let approver = spawn_approver(server.clone(), node.clone(), admin.clone());

    let client_csrs = |s: &RealServer| -> Vec<CertificateSigningRequest> {
        csrs(s, &node)
            .into_iter()
            .filter(|c| c.spec.signer_name == CLIENT_SIGNER)
            .collect()
    };
    let serving_csrs = |s: &RealServer| -> Vec<CertificateSigningRequest> {
        csrs(s, &node)
            .into_iter()
            .filter(|c| c.spec.signer_name == SERVING_SIGNER)
            .collect()
    };
    // The first client certificate, issued to the bootstrap token's request.
    let first = wait_for(
        "the first client certificate",
        &n,
        Duration::from_secs(60),
        || {
            let first = client_csrs(&server).into_iter().next()?;
            issued(&first).map(|pem| (first, pem))
        },
    )
    .await;
    assert_eq!(
        first.0.spec.username.as_deref(),
        Some(bootstrap_user.as_str())
    );
    assert_eq!(
        approval_reason(&first.0).as_deref(),
        Some("AutoApproved"),
        "the controller-manager approved it"
    );
    let (first_serial, first_not_before, first_not_after) = cert_facts(&first.1);
    // The signer backdates 5 minutes and gives the signing duration from signing.
    assert_eq!(first_not_after - first_not_before, 5 * 60 + signing);
    wait_for("the node Ready", &n, Duration::from_secs(60), || {
        node_ready(&admin, &node).then_some(())
    })
    .await;
    // The kubelet API serves a certificate from the kubelet-serving signer, for the node's IP.
    let addr = std::net::SocketAddr::new(node_ip, port);
    let ca_pem = std::fs::read_to_string(&ca).unwrap();
    let mut first_served = None;
    for _ in 0..240 {
        if let Ok(serial) = served_serial(addr, &ca_pem).await {
            first_served = Some(serial);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let first_served = first_served.unwrap_or_else(|| {
        panic!(
            "no serving certificate verified by the cluster CA\n{}",
            tail(&n.logs(), 60)
        )
    });
    let serving = serving_csrs(&server);
    let serving_first = serving.first().expect("a serving CSR");
    assert_eq!(
        serving_first.spec.username.as_deref(),
        Some(node_user.as_str())
    );
    let (cn, orgs, sans) = subject_of_request(&serving_first.spec.request.0);
    assert_eq!(
        (cn.as_str(), orgs),
        (node_user.as_str(), vec!["system:nodes".to_string()])
    );
    assert!(
        sans.contains(&format!("IP:{node_ip}")) && sans.contains(&format!("DNS:{node}")),
        "{sans:?}"
    );

    // Past the first client certificate's end (its renewal came at 70–90 % of its life).
    let end = first_not_after + 10;
    let wait = Duration::from_secs((end - now_unix()).max(0) as u64 + 1);
    assert!(
        wait < Duration::from_secs(180),
        "first certificate ends in {wait:?}"
    );
    wait_for(
        "the first client certificate's end",
        &n,
        wait + Duration::from_secs(5),
        || (now_unix() > end).then_some(()),
    )
    .await;

    // Renewed: more client CSRs, after the first made by the node itself, all issued.
    let clients = client_csrs(&server);
    assert!(clients.len() >= 2, "{} client CSRs", clients.len());
    for csr in &clients[1..] {
        assert_eq!(
            csr.spec.username.as_deref(),
            Some(node_user.as_str()),
            "renewals as the node"
        );
    }
    let current = n.dir.path().join("root/pki/kubelet-client-current.pem");
    let current_serial = cert_facts(&std::fs::read(&current).unwrap()).0;
    assert_ne!(
        current_serial, first_serial,
        "the client certificate was renewed"
    );
    // The node stayed Ready and its lease was renewed after the first certificate ended,
    // by the node, accepted.
    assert!(node_ready(&admin, &node), "node Ready");
    let renewed = server
        .object::<Lease>(Some("kube-node-lease"), &node)
        .and_then(|l| l.spec?.renew_time)
        .map(|t| t.0.as_second())
        .unwrap_or_default();
    assert!(
        renewed > first_not_after,
        "lease renewed at {renewed}, first certificate ended at {first_not_after}"
    );
    // What the node asked, from the API server's audit log.
    let log = server.requests();
    let late_lease_updates: Vec<_> = log
        .iter()
        .filter(|r| {
            r.method == "PUT" && r.path.contains("/leases/") && r.at.as_second() > first_not_after
        })
        .collect();
    assert!(
        !late_lease_updates.is_empty(),
        "lease updates after the first certificate ended"
    );
    for r in late_lease_updates {
        assert_eq!((user_of(r), r.status), (node_user.as_str(), 200));
    }
    let refused: Vec<_> = log
        .iter()
        .filter(|r| r.status == 401 || r.status == 403)
        .map(|r| format!("{} {} {} {:?}", r.status, r.method, r.path, r.user))
        .collect();
    assert!(refused.is_empty(), "requests refused: {refused:?}");
    // No watch lost: the node's pod watch is the one opened with the first certificate (a watch
    // still open is in the audit log at its `ResponseStarted` stage), and a pod created now
    // reaches the node through it.
    let pod_watches = |log: &[LoggedRequest]| -> Vec<LoggedRequest> {
        log.iter()
            .filter(|r| {
                r.method == "GET"
                    && r.path == "/api/v1/pods"
                    && r.is_watch()
                    && r.query_param("fieldSelector")
                        .is_some_and(|f| f.contains(&node))
            })
            .cloned()
            .collect()
    };
    let open_watches = || server.audited(std::slice::from_ref(&node_user), "ResponseStarted");
    let watches = pod_watches(&open_watches());
    assert_eq!(watches.len(), 1, "one pod watch: {watches:?}");
    assert!(watches[0].at.as_second() < first_not_after);
    run_pod(&n, &server, "after-rotation", Duration::from_secs(60)).await;
    assert_eq!(
        pod_watches(&open_watches()).len(),
        1,
        "still the same pod watch"
    );

    // The serving certificate was renewed and is served without a restart.
    let serving = serving_csrs(&server);
    assert!(serving.len() >= 2, "{} serving CSRs", serving.len());
    let now_served = served_serial(addr, &ca_pem).await.unwrap();
    assert_ne!(now_served, first_served, "a renewed serving certificate");
    let pem_files = std::fs::read_dir(n.dir.path().join("root/pki"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect::<Vec<_>>();
    assert!(
        pem_files
            .iter()
            .filter(|f| f.starts_with("kubelet-client-20"))
            .count()
            >= 2
            && pem_files.iter().any(|f| f == "kubelet-server-current.pem"),
        "{pem_files:?}"
    );
    assert!(n.exited().is_none(), "the same nodelet process throughout");
    approver.abort();
    eprintln!(
        "rotation test: {:?}; {} client and {} serving CSRs, all issued",
        started.elapsed(),
        client_csrs(&server).len(),
        serving_csrs(&server).len()
    );
}
