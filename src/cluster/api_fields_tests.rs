use serde_json::json;

use super::*;

#[test]
fn the_table_is_ordered_and_within_the_supported_releases() {
    let mut previous = Release::OLDEST_SUPPORTED;
    for f in SENT_FIELDS {
        assert!(f.since > Release::OLDEST_SUPPORTED, "{}", f.display_path());
        assert!(f.since <= Release::NODELET, "{}", f.display_path());
        assert!(f.since >= previous, "{} is out of order", f.display_path());
        previous = f.since;
        assert!(!f.why.is_empty());
    }
    assert_eq!(unsupported(Release::NODELET).count(), 0);
    assert_eq!(unsupported(Release::new(1, 40)).count(), 0, "newer servers");
    assert_eq!(
        unsupported(Release::OLDEST_SUPPORTED).count(),
        SENT_FIELDS.len()
    );
}

fn pod_status() -> PodStatus {
    serde_json::from_value(json!({
        "phase": "Running",
        "observedGeneration": 2,
        "hostIP": "10.0.0.5", "hostIPs": [{"ip": "10.0.0.5"}],
        "podIP": "10.88.0.7", "podIPs": [{"ip": "10.88.0.7"}],
        "conditions": [
            {"type": "Ready", "status": "True", "observedGeneration": 2},
            {"type": "PodScheduled", "status": "True", "observedGeneration": 2}
        ],
        "initContainerStatuses": [{
            "name": "init", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "resources": {}, "volumeMounts": [{"name": "v", "mountPath": "/v"}]
        }],
        "containerStatuses": [{
            "name": "app", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "resources": {"requests": {"cpu": "1"}}, "allocatedResources": {"cpu": "1"},
            "volumeMounts": [{"name": "v", "mountPath": "/v"}]
        }]
    }))
    .unwrap()
}

#[test]
fn strip_pod_status_table() {
    let all = serde_json::to_value(pod_status()).unwrap();
    let without = |paths: &[&str]| {
        let mut v = all.clone();
        for p in paths {
            remove_path(&mut v, p);
        }
        v
    };
    // (server release, what is sent)
    let cases = [
        (Release::new(1, 38), all.clone()),
        (Release::NODELET, all.clone()),
        (Release::new(1, 34), all.clone()),
        (
            Release::new(1, 33),
            without(&["observedGeneration", "conditions[].observedGeneration"]),
        ),
        (
            Release::new(1, 32),
            without(&[
                "observedGeneration",
                "conditions[].observedGeneration",
                "initContainerStatuses[].resources",
                "containerStatuses[].resources",
                "containerStatuses[].allocatedResources",
            ]),
        ),
        (
            Release::new(1, 28),
            without(&[
                "observedGeneration",
                "conditions[].observedGeneration",
                "initContainerStatuses[].resources",
                "initContainerStatuses[].volumeMounts",
                "containerStatuses[].resources",
                "containerStatuses[].allocatedResources",
                "containerStatuses[].volumeMounts",
                "hostIPs",
            ]),
        ),
    ];
    for (release, want) in cases {
        let got = serde_json::to_value(strip_pod_status(pod_status(), release)).unwrap();
        assert_eq!(got, want, "{release}");
    }
    // The v1.33 answer written out, so the table above is not only checked against itself.
    assert_eq!(
        serde_json::to_value(strip_pod_status(pod_status(), Release::new(1, 33))).unwrap()
            ["conditions"],
        json!([{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
    );
}

#[test]
fn strip_node_status_table() {
    let status: NodeStatus = serde_json::from_value(json!({
        "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "k",
                     "osImage": "o", "containerRuntimeVersion": "c", "kubeletVersion": "v",
                     "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
                     "swap": {"capacity": 0}},
    }))
    .unwrap();
    let swap = |s: &NodeStatus| s.node_info.as_ref().unwrap().swap.clone();
    assert!(swap(&strip_node_status(status.clone(), Release::new(1, 33))).is_some());
    assert!(swap(&strip_node_status(status.clone(), Release::new(1, 32))).is_none());
    assert_eq!(
        strip_node_status(status.clone(), Release::new(1, 32))
            .node_info
            .unwrap()
            .boot_id,
        "b"
    );
}

#[test]
fn remove_path_steps_into_lists_and_ignores_what_is_not_there() {
    let mut v = json!({"a": [{"b": 1, "c": 2}, {"b": 3}], "d": {"e": 4}, "s": "x"});
    remove_path(&mut v, "a[].b");
    remove_path(&mut v, "d.e");
    remove_path(&mut v, "missing.x");
    remove_path(&mut v, "s.inner");
    remove_path(&mut v, "d[].e");
    assert_eq!(v, json!({"a": [{"c": 2}, {}], "d": {}, "s": "x"}));
}
