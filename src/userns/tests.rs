use super::*;

type SubIdCase = (&'static str, Result<Option<(u32, u32)>, &'static str>);
type RangeCase = (
    Option<&'static str>,
    Option<&'static str>,
    Result<(u32, u32), UsernsError>,
);
type LayoutCase = ((u32, u32, u32, u32), Result<Layout, UsernsError>);
type DecideCase = (
    Option<bool>,
    bool,
    &'static str,
    bool,
    Result<Decision, &'static str>,
);

#[test]
fn subid_entries_table() {
    let cases: &[SubIdCase] = &[
        ("", Ok(None)),
        ("root:100000:65536\n", Ok(None)),
        ("kubelet:65536:2147483648\n", Ok(Some((65536, 2147483648)))),
        ("kubelet:65536:4294967296\n", Err("line 1")),
        ("kubelet:65536:65536\n", Ok(Some((65536, 65536)))),
        (
            "# c\nroot:1:2\nkubelet:131072:655360\n",
            Ok(Some((131072, 655360))),
        ),
        ("kubeletx:65536:65536\n", Ok(None)),
        ("kubelet:65536\n", Err("line 1")),
        ("kubelet:a:65536\n", Err("line 1")),
        ("kubelet:65536:65536:1\n", Err("line 1")),
        (
            "kubelet:65536:65536\nkubelet:131072:65536\n",
            Err("more than one entry"),
        ),
    ];
    for (contents, want) in cases {
        let got = parse_subid("/etc/subuid", contents, "kubelet");
        match (want, &got) {
            (Ok(w), Ok(g)) => assert_eq!(w, g, "{contents:?}"),
            (Err(w), Err(e)) => assert!(e.to_string().contains(w), "{contents:?}: {e}"),
            _ => panic!("{contents:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn kubelet_range_table() {
    let entry = "kubelet:65536:6553600\n";
    let other = "kubelet:131072:6553600\n";
    let cases: &[RangeCase] = &[
        (None, None, Ok((DEFAULT_FIRST_ID, DEFAULT_LENGTH))),
        (Some(""), Some("root:1:1\n"), Ok((65536, 4294901760))),
        (Some(entry), Some(entry), Ok((65536, 6553600))),
        (
            Some(entry),
            None,
            Err(UsernsError::Mismatch("kubelet".into())),
        ),
        (
            None,
            Some(entry),
            Err(UsernsError::Mismatch("kubelet".into())),
        ),
        (
            Some(entry),
            Some(other),
            Err(UsernsError::Mismatch("kubelet".into())),
        ),
    ];
    for (uid, gid, want) in cases {
        assert_eq!(
            &kubelet_range(("/etc/subuid", *uid), ("/etc/subgid", *gid)),
            want,
            "{uid:?} {gid:?}"
        );
    }
    assert_eq!(
        kubelet_range(("u", None), ("g", None)).map(|(f, l)| u64::from(f) + u64::from(l)),
        Ok(1u64 << 32),
        "the default range runs to the last ID"
    );
}

#[test]
fn layout_rules_table() {
    let l = |first, count, ids| Layout {
        first,
        count,
        ids_per_pod: ids,
    };
    let cases: &[LayoutCase] = &[
        ((65536, 65536 * 110, 65536, 110), Ok(l(65536, 110, 65536))),
        (
            (65536, DEFAULT_LENGTH, 65536, 110),
            Ok(l(65536, 65535, 65536)),
        ),
        (
            (131072, 131072 * 200, 131072, 110),
            Ok(l(131072, 200, 131072)),
        ),
        (
            (65536, 65536 * 110, 1000, 110),
            Err(UsernsError::LengthNotUnit(1000)),
        ),
        (
            (65536, 65536 * 110, 0, 110),
            Err(UsernsError::LengthNotUnit(0)),
        ),
        (
            (100000, 65536 * 110, 65536, 110),
            Err(UsernsError::FirstNotMultiple(100000, 65536)),
        ),
        (
            (0, 65536 * 110, 65536, 110),
            Err(UsernsError::FirstTooLow(0, 65536)),
        ),
        (
            (65536, 65536 * 110 + 1, 65536, 110),
            Err(UsernsError::LengthNotMultiple(65536 * 110 + 1, 65536)),
        ),
        (
            (65536, 65536 * 109, 65536, 110),
            Err(UsernsError::TooFewIds(110)),
        ),
        (
            (65536, 65536 * 110, 131072, 55),
            Err(UsernsError::FirstNotMultiple(65536, 131072)),
        ),
    ];
    for ((first, length, ids, max), want) in cases {
        assert_eq!(
            &Layout::new(*first, *length, *ids, *max),
            want,
            "{first} {length} {ids} {max}"
        );
    }
}

fn m(host_id: u32) -> Mapping {
    Mapping {
        host_id,
        length: 65536,
    }
}

#[test]
fn allocator_gives_the_lowest_free_slot_and_takes_recorded_ones() {
    let mut a = Allocator::new(Layout::new(65536, 65536 * 3, 65536, 3).unwrap());
    assert_eq!(a.allocate("a"), Ok(m(65536)));
    assert_eq!(a.allocate("b"), Ok(m(131072)));
    assert_eq!(a.allocate("a"), Ok(m(65536)), "a pod keeps its range");
    assert!(a.release("a"));
    assert!(!a.release("a"));
    assert_eq!(a.allocate("c"), Ok(m(65536)), "the lowest free slot again");
    assert_eq!(a.allocate("d"), Ok(m(196608)));
    assert_eq!(a.allocate("e"), Err(UsernsError::Full));
    assert_eq!(a.pods(), vec!["b", "c", "d"]);

    let mut a = Allocator::new(Layout::new(65536, 65536 * 3, 65536, 3).unwrap());
    let cases: &[(&str, Mapping, Result<(), UsernsError>)] = &[
        ("x", m(131072), Ok(())),
        ("x", m(131072), Ok(())),
        ("x", m(65536), Err(UsernsError::Different("x".into()))),
        ("y", m(131072), Err(UsernsError::Taken("y".into()))),
        ("y", m(0), Err(UsernsError::OutOfRange(0))),
        ("y", m(65536 * 4), Err(UsernsError::OutOfRange(65536 * 4))),
        ("y", m(65537), Err(UsernsError::WrongOffset(65537))),
        (
            "y",
            Mapping {
                host_id: 65536,
                length: 1,
            },
            Err(UsernsError::WrongLength(1)),
        ),
    ];
    for (pod, mapping, want) in cases {
        assert_eq!(&a.record(pod, *mapping), want, "{pod} {mapping:?}");
    }
    assert_eq!(a.allocate("z"), Ok(m(65536)), "recorded slots are skipped");
    assert_eq!(a.allocate("w"), Ok(m(196608)));
}

#[test]
fn mapping_file_round_trips_in_the_kubelets_shape() {
    let text = mapping_file(m(131072));
    assert_eq!(
        text,
        r#"{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}"#
    );
    assert_eq!(parse_mapping_file(text.as_bytes()), Ok(m(131072)));
    let one = r#"{"hostId":65536,"containerId":0,"length":65536}"#;
    let cases: &[(String, &str)] = &[
        ("nonsense".into(), "invalid user namespace mappings file"),
        (r#"{"uidMappings":[],"gidMappings":[]}"#.into(), "no more than one"),
        (format!(r#"{{"uidMappings":[{one},{one}],"gidMappings":[{one}]}}"#), "no more than one"),
        (format!(r#"{{"uidMappings":[{one}],"gidMappings":[]}}"#), "should be identical"),
        (
            format!(r#"{{"uidMappings":[{one}],"gidMappings":[{{"hostId":131072,"containerId":0,"length":65536}}]}}"#),
            "should be identical",
        ),
        (
            r#"{"uidMappings":[{"hostId":65536,"containerId":1,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":1,"length":65536}]}"#.into(),
            "UID 0 must be mapped",
        ),
    ];
    for (text, want) in cases {
        let e = parse_mapping_file(text.as_bytes()).expect_err(text);
        assert!(e.to_string().contains(want), "{text}: {e}");
    }
}

#[test]
fn decide_table() {
    let gate_off =
        "the feature gate \"UserNamespacesSupport\" is disabled: can't set spec.HostUsers";
    let cases: &[DecideCase] = &[
        (None, true, "", false, Ok(Decision::Node)),
        (None, false, "", false, Ok(Decision::Node)),
        (Some(true), true, "", false, Ok(Decision::Node)),
        (Some(true), false, "", true, Err(gate_off)),
        (Some(false), false, "", true, Err(gate_off)),
        (Some(false), true, "", true, Ok(Decision::Pod)),
        (Some(false), true, "", false, Err("can't set `spec.hostUsers: false`, runtime does not support user namespaces")),
        (Some(false), true, "kata", false, Err("can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces")),
        (Some(false), true, "kata", true, Ok(Decision::Pod)),
    ];
    for (host_users, gate, handler, supports, want) in cases {
        assert_eq!(
            decide(*host_users, *gate, handler, *supports),
            want.map_err(str::to_string),
            "{host_users:?} gate={gate} {handler:?} supports={supports}"
        );
    }
}

fn paths(dir: &Path, subuid: Option<&str>) -> UsernsPaths {
    let p = UsernsPaths {
        subuid: dir.join("subuid"),
        subgid: dir.join("subgid"),
        pods_dir: dir.join("pods"),
    };
    if let Some(s) = subuid {
        std::fs::write(&p.subuid, s).unwrap();
        std::fs::write(&p.subgid, s).unwrap();
    }
    p
}

#[test]
fn manager_persists_ranges_and_takes_them_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let p = paths(dir.path(), Some("kubelet:131072:655360\n"));
    let mgr = UsernsManager::load(&p, 65536, 10).unwrap();
    assert_eq!(mgr.layout().first, 131072);
    let a = mgr.get_or_create("pod-a").unwrap();
    let b = mgr.get_or_create("pod-b").unwrap();
    assert_eq!((a.host_id, b.host_id), (131072, 196608));
    let file = p.pods_dir.join("pod-a").join(MAPPING_FILE);
    assert_eq!(
        parse_mapping_file(&std::fs::read(&file).unwrap()),
        Ok(a),
        "the kubelet's file in the pod directory"
    );
    drop(mgr);

    // A restart: the ranges come back from the files; a new pod gets the next free slot.
    let mgr = UsernsManager::load(&p, 65536, 10).unwrap();
    assert_eq!(mgr.pods(), vec!["pod-a", "pod-b"]);
    assert_eq!(mgr.get_or_create("pod-b").unwrap(), b);
    assert_eq!(mgr.get_or_create("pod-c").unwrap().host_id, 262144);

    // The pod removed: its range is free again and its file gone.
    mgr.release("pod-a");
    assert!(!file.exists());
    assert_eq!(mgr.get_or_create("pod-d").unwrap().host_id, 131072);

    // Orphans: a range whose pod is neither kept nor has a directory goes; a kept pod's stays
    // (even without a directory), and so does one whose directory is still there.
    assert_eq!(mgr.pods(), vec!["pod-b", "pod-c", "pod-d"]);
    std::fs::remove_dir_all(p.pods_dir.join("pod-c")).unwrap();
    std::fs::remove_dir_all(p.pods_dir.join("pod-d")).unwrap();
    let keep: std::collections::HashSet<String> = ["pod-d".to_string()].into();
    assert_eq!(mgr.release_orphans(&keep), 1);
    assert_eq!(mgr.pods(), vec!["pod-b", "pod-d"]);
}

#[test]
fn manager_refuses_what_the_kubelet_refuses() {
    let dir = tempfile::tempdir().unwrap();
    // No entry: the default range.
    let p = paths(dir.path(), None);
    let mgr = UsernsManager::load(&p, 65536, 110).unwrap();
    assert_eq!(mgr.layout().first, 65536);
    // A file the kubelet would not take stops the start.
    std::fs::create_dir_all(p.pods_dir.join("bad")).unwrap();
    std::fs::write(p.pods_dir.join("bad").join(MAPPING_FILE), "{}").unwrap();
    assert!(matches!(
        UsernsManager::load(&p, 65536, 110),
        Err(UsernsError::InvalidFile(_))
    ));
    std::fs::remove_file(p.pods_dir.join("bad").join(MAPPING_FILE)).unwrap();
    // A symlink in place of the file is not followed.
    std::fs::write(dir.path().join("elsewhere"), mapping_file(m(65536))).unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("elsewhere"),
        p.pods_dir.join("bad").join(MAPPING_FILE),
    )
    .unwrap();
    assert!(matches!(
        UsernsManager::load(&p, 65536, 110),
        Err(UsernsError::Io {
            source: Errno::ELOOP,
            ..
        })
    ));
    std::fs::remove_file(p.pods_dir.join("bad").join(MAPPING_FILE)).unwrap();
    // Too few IDs for maxPods.
    let p = paths(dir.path(), Some("kubelet:65536:655360\n"));
    assert_eq!(
        UsernsManager::load(&p, 65536, 11).unwrap_err(),
        UsernsError::TooFewIds(11)
    );
    assert!(matches!(
        UsernsManager::get_or_create(&UsernsManager::load(&p, 65536, 10).unwrap(), "../x"),
        Err(UsernsError::BadUid(_))
    ));
}
