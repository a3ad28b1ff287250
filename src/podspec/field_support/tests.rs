use super::*;
use crate::podspec::field_walk::pod_field_paths;

#[test]
fn every_walked_field_is_marked_once_and_every_entry_is_a_field() {
    let paths = pod_field_paths();
    assert!(
        paths.len() > 500,
        "the walk found only {} paths: the schema walk is broken",
        paths.len()
    );
    assert!(paths.contains("spec.containers[].securityContext.seLinuxOptions.level"));
    let found = coverage(paths.iter().map(String::as_str), &fields());
    assert!(
        found.is_clean(),
        "mark each unmarked field in src/podspec/field_support.rs (honoured with its tests, or refused with a sample), and drop stale entries:\n{found:#?}"
    );
}

#[test]
fn a_planted_unmarked_field_and_a_planted_stale_entry_are_reported() {
    let mut paths = pod_field_paths();
    paths.insert("spec.plantedField".to_string());
    paths.insert("spec.containers[].plantedField".to_string());
    let mut entries = fields();
    entries.push(honoured("spec.volumes[].plantedVolume", &[]));
    entries.push(honoured("spec.hostPID", &[]));
    let found = coverage(paths.iter().map(String::as_str), &entries);
    assert_eq!(
        found,
        Coverage {
            unmarked: vec![
                "spec.containers[].plantedField".to_string(),
                "spec.plantedField".to_string()
            ],
            stale: vec!["spec.volumes[].plantedVolume"],
            duplicates: vec!["spec.hostPID"],
        }
    );
}

#[test]
fn the_most_specific_entry_wins() {
    let entries = fields();
    let support_of = |path: &str| entry_for(&entries, path).map(|e| e.path);
    let cases = [
        ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchFields[].key", Some("spec.affinity")),
        ("spec.initContainers[].securityContext.windowsOptions.hostProcess", Some("spec.{containers,initContainers,ephemeralContainers}[].securityContext.windowsOptions")),
        ("spec.containers[].securityContext.privileged", Some("spec.{containers,initContainers}[].securityContext")),
        ("spec.volumes[].projected.sources[].podCertificate.keyType", Some("spec.volumes[].projected.sources[].podCertificate")),
        ("spec.volumes[].projected.sources[].secret.name", Some("spec.volumes[].projected")),
        ("spec.hostNetworkish", None),
        ("spec.ephemeralContainers[].image", Some("spec.ephemeralContainers")),
        ("spec.ephemeralContainers[].livenessProbe.exec.command", Some("spec.ephemeralContainers[].livenessProbe")),
        ("spec.ephemeralContainers[].volumeMounts[].bindMountOptions", Some("spec.{containers,initContainers,ephemeralContainers}[].volumeMounts[].bindMountOptions")),
    ];
    for (path, want) in cases {
        assert_eq!(support_of(path), want, "{path}");
    }
}

/// `file::name` test references: the file exists and has `fn name(`.
#[test]
fn every_honoured_field_names_tests_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    for e in fields() {
        let tests = match e.support {
            Support::Honoured { tests } | Support::Partly { tests, .. } => tests,
            _ => continue,
        };
        if tests.is_empty() {
            missing.push(format!("{}: no test named", e.path));
        }
        for t in tests {
            let Some((file, name)) = t.split_once("::") else {
                missing.push(format!("{}: {t} is not file::name", e.path));
                continue;
            };
            let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            let found = text.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with(&format!("fn {name}("))
                    || l.starts_with(&format!("async fn {name}("))
                    || l.starts_with(&format!("pub fn {name}("))
            });
            if !found {
                missing.push(format!("{}: no fn {name} in {file}", e.path));
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

fn pod(spec_yaml: &str) -> Pod {
    let src = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: default}}\nspec:\n{spec_yaml}"
    );
    serde_yaml::from_str(&src).unwrap_or_else(|e| panic!("bad yaml {e}:\n{src}"))
}

const PLAIN: &str = "  containers:\n  - name: c\n    image: busybox\n";

/// Every refused entry's sample is refused by the decision, naming a field under the entry.
/// (`pod::field_admission` runs the same samples, defaulted, through the admit handler.)
#[test]
fn every_refused_sample_is_refused_naming_its_field() {
    for e in fields() {
        let sample = match e.support {
            Support::Refused { sample, .. } | Support::Partly { sample, .. } => sample,
            _ => continue,
        };
        let spec = if sample.contains("  containers:") {
            sample.to_string()
        } else {
            format!("{PLAIN}{sample}")
        };
        let got = refusals(&pod(&spec));
        assert!(
            got.iter().any(|r| expand(e.path)
                .iter()
                .any(|p| covers(p, &generic_path(&r.field)))
                && r.to_string().starts_with(&r.field)),
            "{}: the sample\n{spec}\nwas not refused naming the field: {got:?}",
            e.path
        );
    }
}

#[test]
fn refusals_name_the_field_the_value_and_the_reason() {
    let cases: &[(&str, &[&str])] = &[
        (PLAIN, &[]),
        (
            "  containers:\n  - name: c\n    image: busybox\n    resizePolicy:\n    - {resourceName: cpu, restartPolicy: NotRequired}\n    resources:\n      limits: {cpu: \"1\", memory: 1Gi, ephemeral-storage: 1Gi, hugepages-2Mi: 4Mi}\n  volumes:\n  - name: e\n    emptyDir: {medium: Memory}\n  - name: huge\n    emptyDir: {medium: HugePages-2Mi}\n  - name: h\n    hostPath: {path: /tmp}\n  hostUsers: true\n  securityContext:\n    seLinuxChangePolicy: Recursive\n",
            &[],
        ),
        (
            "  hostUsers: false\n  containers:\n  - name: c\n    image: busybox\n",
            &[],
        ),
        // Image volumes are mounted (what the runtime does with them: `pod::runtime_features`).
        (
            "  containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - {name: data, mountPath: /d, subPath: x}\n  volumes:\n  - name: data\n    image: {reference: 'reg.io/data:1', pullPolicy: IfNotPresent}\n",
            &[],
        ),
        (
            "  containers:\n  - name: c\n    image: busybox\n  initContainers:\n  - name: i\n    image: busybox\n    resources:\n      requests: {example.com/gpu: \"1\"}\n  volumes:\n  - name: data\n    nfs: {server: s, path: /x}\n  - name: claim\n    persistentVolumeClaim: {claimName: data}\n",
            &[
                "spec.initContainers[0].resources.requests[example.com/gpu]: Unsupported value: example.com/gpu: 1: only cpu, memory, ephemeral-storage and hugepages-<size> are managed on this node (no device plugins, no extended resources)",
                "spec.volumes[0].nfs: Unsupported value: data: nodelet has no volume plugin for this volume type yet (it mounts emptyDir, hostPath, configMap, secret, downwardAPI, projected, image, and through CSI drivers persistentVolumeClaim, ephemeral and csi volumes)",
            ],
        ),
    ];
    for (spec, want) in cases {
        let got: Vec<String> = refusals(&pod(spec))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(&got, want, "{spec}");
    }
}

#[test]
fn generic_paths_drop_indices_and_keys() {
    assert_eq!(
        generic_path("spec.containers[0].resources.limits[example.com/gpu]"),
        "spec.containers[].resources.limits[]"
    );
    assert_eq!(expand("spec.{a,b}[].c"), vec!["spec.a[].c", "spec.b[].c"]);
    assert_eq!(expand("spec.a"), vec!["spec.a"]);
}

/// docs/features.md lists what is refused, as the table says it.
#[test]
fn the_features_doc_lists_the_refused_fields_of_the_table() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/features.md"),
    )
    .expect("docs/features.md");
    let begin = "<!-- refused:begin -->\n";
    let start = doc.find(begin).expect("refused:begin marker") + begin.len();
    let end = doc
        .find("<!-- refused:end -->")
        .expect("refused:end marker");
    assert_eq!(
        &doc[start..end],
        refused_list_markdown(),
        "regenerate the list in docs/features.md from podspec::field_support::refused_list_markdown"
    );
}

/// An ephemeral container's refused fields are named by the checks containers get, with its
/// own index; the pod itself is never rejected for them (it runs on, the ephemeral container
/// waits), and one that refuses nothing has no refusal.
#[test]
fn ephemeral_refusals_name_the_ephemeral_containers_field() {
    let debugged = pod(&format!(
        "{PLAIN}  ephemeralContainers:\n  - name: debug-1\n    image: busybox\n    targetContainerName: c\n  - name: debug-2\n    image: busybox\n    volumeMounts:\n    - name: v\n      mountPath: /v\n      bindMountOptions: [noexec]\n    env:\n    - name: A\n      valueFrom:\n        fileKeyRef: {{volumeName: v, path: a.env, key: A}}\n    securityContext:\n      seLinuxOptions: {{type: spc_t}}\n"
    ));
    assert!(ephemeral_refusals(&debugged, 0).is_empty());
    assert!(
        ephemeral_refusals(&debugged, 7).is_empty(),
        "no such container"
    );
    let got: Vec<String> = ephemeral_refusals(&debugged, 1)
        .iter()
        .map(|r| format!("{}: {}", r.field, r.value))
        .collect();
    assert_eq!(
        got,
        ["spec.ephemeralContainers[1].volumeMounts[0].bindMountOptions: noexec",]
    );
    for r in ephemeral_refusals(&debugged, 1) {
        assert_ne!(
            r.reason, "not supported by nodelet",
            "{r}: the table's reason"
        );
    }
    assert!(refusals(&debugged).is_empty(), "never rejected for them");
    // Its seLinuxOptions are not among them: accepted with or without SELinux on the node.
}

/// `seLinuxOptions` are accepted on every node, pod and container level alike.
#[test]
fn selinux_labels_are_accepted_with_or_without_selinux_on_the_node() {
    // The kubelet admits them either way and hands them to the runtime, which applies them only
    // where SELinux is enabled (Kubernetes' EmptyDir conformance tests set `level: s0`).
    let spec = "  securityContext:\n    seLinuxOptions: {level: \"s0:c1,c2\"}\n  containers:\n  - name: c\n    image: busybox\n    securityContext:\n      seLinuxOptions: {type: spc_t, user: system_u}\n  - name: d\n    image: busybox\n    securityContext:\n      seLinuxOptions: {}\n";
    assert_eq!(refusals(&pod(spec)), vec![]);
    let debugged = pod(&format!(
        "{PLAIN}  ephemeralContainers:\n  - name: debug\n    image: busybox\n    securityContext:\n      seLinuxOptions: {{type: spc_t}}\n"
    ));
    assert_eq!(ephemeral_refusals(&debugged, 0), vec![]);
}
