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
    let port = common::free_port();
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
    assert!(
        err.contains(nodelet::cgroup::CGROUP_V1_REFUSAL),
        "the kubelet's message: {err}"
    );
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
