use super::*;

const MI2: u64 = 2 << 20;
const GI1: u64 = 1 << 30;

fn container(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
    let list = |l: &[(&str, &str)]| {
        (!l.is_empty()).then(|| {
            l.iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.to_string()),
                    )
                })
                .collect()
        })
    };
    Container {
        name: "c".into(),
        resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
            limits: list(limits),
            requests: list(requests),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
    Pod {
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            containers,
            init_containers: (!init.is_empty()).then_some(init),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn named(v: &[(&str, u64)]) -> Vec<(String, u64)> {
    v.iter().map(|(s, l)| (s.to_string(), *l)).collect()
}

#[test]
fn page_size_strings_are_the_kubelets() {
    let cases: &[(u64, Option<&str>)] = &[
        (MI2, Some("2MB")),
        (GI1, Some("1GB")),
        (64 << 10, Some("64KB")),
        (32 << 20, Some("32MB")),
        (16 << 30, Some("16GB")),
        (512, Some("512B")),
        (1024, Some("1KB")),
        // 1025 bytes reduces no further and is above 1024: the kubelet's error.
        (1025, None),
        (0, None),
    ];
    for (bytes, want) in cases {
        assert_eq!(page_size_string(*bytes).as_deref(), *want, "{bytes}");
    }
}

#[test]
fn resource_names_give_page_sizes() {
    assert_eq!(page_size_of_resource("hugepages-2Mi"), Some(MI2));
    assert_eq!(page_size_of_resource("hugepages-1Gi"), Some(GI1));
    assert_eq!(page_size_of_resource("memory"), None);
    assert_eq!(page_size_of_resource("hugepages-x"), None);
    assert_eq!(page_size_of_resource("hugepages-0"), None);
}

#[test]
fn container_limits_table() {
    let node = [MI2, GI1];
    // (limits, requests, node sizes, want)
    type List<'a> = &'a [(&'a str, &'a str)];
    type Case<'a> = (List<'a>, List<'a>, &'a [u64], Vec<(String, u64)>);
    let cases: Vec<Case> = vec![
        // Nothing asked: every node size limited to 0.
        (&[], &[], &node, named(&[("2MB", 0), ("1GB", 0)])),
        (
            &[("hugepages-2Mi", "4Mi"), ("memory", "64Mi")],
            &[("hugepages-2Mi", "4Mi")],
            &node,
            named(&[("2MB", 4 << 20), ("1GB", 0)]),
        ),
        // A request without a limit is the limit.
        (
            &[],
            &[("hugepages-1Gi", "2Gi")],
            &node,
            named(&[("2MB", 0), ("1GB", 2 << 30)]),
        ),
        // The limit wins over a (invalid, different) request.
        (
            &[("hugepages-2Mi", "8Mi")],
            &[("hugepages-2Mi", "4Mi")],
            &node,
            named(&[("2MB", 8 << 20), ("1GB", 0)]),
        ),
        // A size the node lacks is dropped.
        (
            &[("hugepages-1Gi", "1Gi")],
            &[],
            &[MI2],
            named(&[("2MB", 0)]),
        ),
        // A node without hugepages: no entries at all.
        (&[("hugepages-2Mi", "4Mi")], &[], &[], vec![]),
    ];
    for (limits, requests, sizes, want) in cases {
        let c = container(limits, requests);
        assert_eq!(
            container_hugepage_limits(&c, sizes),
            want,
            "{limits:?} {requests:?}"
        );
    }
}

#[test]
fn pod_sums_table() {
    let two = |v: &str| container(&[("hugepages-2Mi", v)], &[]);
    let sidecar = |v: &str| Container {
        restart_policy: Some("Always".into()),
        ..two(v)
    };
    let cases: Vec<(Pod, BTreeMap<u64, i64>)> = vec![
        (pod(vec![], vec![]), BTreeMap::new()),
        (
            pod(vec![two("4Mi"), two("2Mi")], vec![]),
            [(MI2, 6 << 20)].into(),
        ),
        // An init container alone above the regular sum.
        (
            pod(vec![two("4Mi")], vec![two("10Mi")]),
            [(MI2, 10 << 20)].into(),
        ),
        // Below it.
        (
            pod(vec![two("4Mi"), two("4Mi")], vec![two("2Mi")]),
            [(MI2, 8 << 20)].into(),
        ),
        // A sidecar adds to the regular containers and to later init containers.
        (
            pod(vec![two("4Mi")], vec![sidecar("2Mi"), two("6Mi")]),
            [(MI2, 8 << 20)].into(),
        ),
        (
            pod(
                vec![container(&[("hugepages-1Gi", "1Gi")], &[]), two("2Mi")],
                vec![],
            ),
            [(MI2, 2 << 20), (GI1, 1 << 30)].into(),
        ),
    ];
    for (p, want) in cases {
        assert_eq!(pod_hugepages(&p), want);
    }
    let p = pod(vec![two("4Mi")], vec![]);
    assert_eq!(
        pod_hugetlb_limits(&p, &[MI2, GI1]),
        named(&[("2MB", 4 << 20), ("1GB", 0)])
    );
    // A requested size the node does not list still gets its limit on the pod cgroup.
    assert_eq!(pod_hugetlb_limits(&p, &[]), named(&[("2MB", 4 << 20)]));
}

#[test]
fn mount_option_table() {
    let two = container(&[("hugepages-2Mi", "4Mi")], &[]);
    let one_gi = container(&[("hugepages-1Gi", "1Gi")], &[]);
    let plain = container(&[("memory", "1Gi")], &[]);
    let cases: Vec<(&str, Pod, Result<&str, HugepagesError>)> = vec![
        (
            "HugePages",
            pod(vec![two.clone()], vec![]),
            Ok("pagesize=2Mi"),
        ),
        (
            "HugePages",
            pod(vec![two.clone(), two.clone()], vec![]),
            Ok("pagesize=2Mi"),
        ),
        // The init containers count too.
        (
            "HugePages",
            pod(vec![plain.clone()], vec![one_gi.clone()]),
            Ok("pagesize=1Gi"),
        ),
        (
            "HugePages",
            pod(vec![two.clone(), one_gi.clone()], vec![]),
            Err(HugepagesError::MultipleSizes("HugePages".into())),
        ),
        (
            "HugePages",
            pod(vec![plain.clone()], vec![]),
            Err(HugepagesError::NoRequest("HugePages".into())),
        ),
        (
            "HugePages-1Gi",
            pod(vec![two.clone(), one_gi.clone()], vec![]),
            Ok("pagesize=1Gi"),
        ),
        (
            "HugePages-2Mi",
            pod(vec![one_gi.clone()], vec![]),
            Err(HugepagesError::NoRequest("HugePages-2Mi".into())),
        ),
        (
            "HugePages-x",
            pod(vec![two.clone()], vec![]),
            Err(HugepagesError::InvalidMediumSize("x".into())),
        ),
    ];
    for (medium, p, want) in cases {
        assert_eq!(
            page_size_mount_option(medium, &p),
            want.map(str::to_string),
            "{medium}"
        );
    }
    assert!(is_hugepages_medium("HugePages"));
    assert!(is_hugepages_medium("HugePages-2Mi"));
    assert!(!is_hugepages_medium("Memory"));
    assert!(!is_hugepages_medium(""));
}
