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
