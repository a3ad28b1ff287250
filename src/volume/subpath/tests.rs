//! The pure decisions by tables; the syscalls on temporary directories (as root: bind mounts).

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

use super::*;

fn ino(p: &Path) -> (u64, u64) {
    let m = fs::metadata(p).unwrap();
    (m.dev(), m.ino())
}

fn fd_ino(fd: &OwnedFd) -> (u64, u64) {
    let st = fstat(fd).unwrap();
    (st.st_dev, st.st_ino)
}

fn mounted(path: &Path) -> bool {
    let table = fs::read_to_string(MOUNTINFO).unwrap();
    crate::volume::mounts::is_mount_point(&table, path)
}

fn root_fd(p: &Path) -> OwnedFd {
    nix::fcntl::open(
        p,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// A canonical temporary directory (mountinfo names mount points canonically).
fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let p = fs::canonicalize(t.path()).unwrap();
    (t, p)
}

#[test]
fn bind_target_table() {
    let pod = Path::new("/var/lib/nodelet/pods/u1");
    let cases: [(&str, &str, usize, Option<&str>); 6] = [
        (
            "data",
            "app",
            0,
            Some("/var/lib/nodelet/pods/u1/volume-subpaths/data/app/0"),
        ),
        (
            "cfg",
            "side-car",
            12,
            Some("/var/lib/nodelet/pods/u1/volume-subpaths/cfg/side-car/12"),
        ),
        ("..", "app", 0, None),
        ("data", "a/b", 0, None),
        ("", "app", 0, None),
        ("data", ".", 0, None),
    ];
    for (volume, container, index, want) in cases {
        let got = bind_target(pod, volume, container, index).ok();
        assert_eq!(got.as_deref(), want.map(Path::new), "{volume} {container}");
    }
}

#[test]
fn sub_path_components_table() {
    let cases: [(&str, Option<&[&str]>); 7] = [
        ("a", Some(&["a"])),
        ("a/b/c", Some(&["a", "b", "c"])),
        ("./a//b/", Some(&["a", "b"])),
        (".", Some(&[])),
        ("../a", None),
        ("a/../../b", None),
        ("/etc", None),
    ];
    for (sub, want) in cases {
        let got = sub_path_components(sub);
        let want: Option<Vec<OsString>> = want.map(|w| w.iter().map(OsString::from).collect());
        assert_eq!(got, want, "{sub}");
    }
}

#[test]
fn sub_path_mounts_are_those_under_volume_subpaths_deepest_first() {
    let table = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
90 22 8:1 /x /p/u1/volume-subpaths/data/app/0 rw - ext4 /dev/sda1 rw
91 22 8:1 /x /p/u1/volume-subpaths/data/app/0 rw - ext4 /dev/sda1 rw
92 22 8:1 /y /p/u1/volumes/kubernetes.io~empty-dir/data rw - tmpfs tmpfs rw
93 22 8:1 /z /p/u10/volume-subpaths/data/app/0 rw - ext4 /dev/sda1 rw
94 22 8:1 /z /p/u1/volume-subpaths/cfg/side/3/inner rw - ext4 /dev/sda1 rw
";
    assert_eq!(
        sub_path_mounts(table, Path::new("/p/u1")),
        [
            PathBuf::from("/p/u1/volume-subpaths/cfg/side/3/inner"),
            PathBuf::from("/p/u1/volume-subpaths/data/app/0"),
        ]
    );
}

/// What a subPath resolves to, the same with `openat2` and with the component walk: symlinks
/// that stay inside the volume are followed (a configMap key is one), anything that leads out
/// is refused, and missing directories are created with the volume's mode.
#[test]
fn open_sub_path_table() {
    for resolver in [Resolver::Openat2, Resolver::Walk] {
        let (_t, base) = tempdir();
        let vol = base.join("vol");
        let outside = base.join("outside");
        fs::create_dir_all(vol.join("real/deep")).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::set_permissions(&vol, fs::Permissions::from_mode(0o2775)).unwrap();
        // a configMap volume's layout
        fs::create_dir(vol.join("..2026_01_01")).unwrap();
        fs::write(vol.join("..2026_01_01/key"), "v").unwrap();
        symlink("..2026_01_01", vol.join("..data")).unwrap();
        symlink("..data/key", vol.join("key")).unwrap();
        symlink("real", vol.join("in")).unwrap();
        symlink("real/../real/deep", vol.join("in-dots")).unwrap();
        symlink("/", vol.join("root")).unwrap();
        symlink(&outside, vol.join("abs-out")).unwrap();
        symlink("../outside", vol.join("rel-out")).unwrap();
        symlink("../../outside", vol.join("real/up")).unwrap();
        symlink("loop", vol.join("loop")).unwrap();
        symlink("missing", vol.join("dangling")).unwrap();
        fs::write(vol.join("file"), "f").unwrap();

        enum Want {
            Is(&'static str),
            Outside,
            Fails,
        }
        use Want::*;
        let cases = [
            ("real", Is("real")),
            ("real/deep", Is("real/deep")),
            ("in", Is("real")),
            ("in/deep", Is("real/deep")),
            ("in-dots", Is("real/deep")),
            ("key", Is("..2026_01_01/key")),
            (".", Is("")),
            ("file", Is("file")),
            ("new/a/b", Is("new/a/b")),
            ("in/made", Is("real/made")),
            ("root", Outside),
            ("root/etc", Outside),
            ("abs-out", Outside),
            ("rel-out", Outside),
            ("real/up", Outside),
            ("in/up/x", Outside),
            ("loop", Fails),
            ("file/x", Fails),
            ("dangling", Fails),
        ];
        let root = root_fd(&vol);
        for (sub, want) in cases {
            let got = open_sub_path(
                root.as_fd(),
                &vol,
                sub,
                Mode::from_bits_truncate(0o2775),
                resolver,
            );
            match (got, want) {
                (Ok(fd), Is(rel)) => {
                    assert_eq!(fd_ino(&fd), ino(&vol.join(rel)), "{resolver:?} {sub}")
                }
                (Err(SubPathError::NotWithinVolume { path, volume }), Outside) => {
                    assert_eq!((path, volume), (vol.join(sub), vol.clone()))
                }
                (Err(e), Fails) => assert!(
                    !matches!(e, SubPathError::NotWithinVolume { .. }),
                    "{resolver:?} {sub}: {e}"
                ),
                (got, _) => panic!("{resolver:?} {sub}: {:?}", got.map(|f| fd_ino(&f))),
            }
        }
        let mode = |p: &str| fs::metadata(vol.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("new/a/b"), 0o2775, "{resolver:?}");
        assert_eq!(mode("real/made"), 0o2775, "{resolver:?}");
        // nothing was created outside the volume or where a link pointed
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
        assert!(!vol.join("missing").exists(), "{resolver:?}");
        assert!(!Path::new("/etc/x").exists());
    }
}

fn sub(vol: &Path, volume: &str, container: &str, index: usize, path: &str) -> SubPathMount {
    SubPathMount {
        mount: 0,
        index,
        field: "spec.containers[0].volumeMounts[0]".into(),
        volume: volume.into(),
        container: container.into(),
        volume_path: vol.to_path_buf(),
        sub_path: path.into(),
    }
}

fn one_mount(host: &Path) -> Vec<api::Mount> {
    vec![api::Mount {
        container_path: "/data".into(),
        host_path: host.to_string_lossy().into_owned(),
        ..Default::default()
    }]
}

/// The check-then-use race, replayed deterministically: once nodelet has prepared the subPath,
/// the attacker swaps the directory for a symlink to the host's root. The runtime resolves the
/// host path it was given only now, so that path must be the pinned bind mount, which still
/// shows the directory that was opened; a string `<volume>/<subPath>` would now lead to `/`.
#[test]
fn the_runtime_gets_the_pinned_mount_which_a_swap_cannot_redirect() {
    let (_t, base) = tempdir();
    let pod = base.join("pod");
    let vol = pod.join("volumes/kubernetes.io~empty-dir/shared");
    fs::create_dir_all(vol.join("d")).unwrap();
    fs::write(vol.join("d/inside"), "mine").unwrap();
    let opened = ino(&vol.join("d"));
    for resolver in [Resolver::Openat2, Resolver::Walk] {
        let mut mounts = one_mount(&vol.join("d"));
        let pinned = prepare_sub_paths_with(
            &pod,
            &mut mounts,
            &[sub(&vol, "shared", "victim", 0, "d")],
            resolver,
            Path::new(MOUNTINFO),
        )
        .unwrap();
        let target = pod.join("volume-subpaths/shared/victim/0");
        assert_eq!(mounts[0].host_path, target.to_string_lossy());
        assert_eq!(pinned.targets(), std::slice::from_ref(&target));
        assert!(mounted(&target), "{resolver:?}");

        // the attack: d becomes a symlink to /
        fs::rename(vol.join("d"), vol.join("d.away")).unwrap();
        symlink("/", vol.join("d")).unwrap();
        let host = Path::new(&mounts[0].host_path);
        assert_eq!(
            ino(host),
            opened,
            "{resolver:?}: the runtime's path left the volume"
        );
        assert_eq!(fs::read_to_string(host.join("inside")).unwrap(), "mine");
        assert!(!host.join("etc").exists());

        // the next start opens afresh: now the symlink is refused
        let mut again = one_mount(&vol.join("d"));
        let err = prepare_sub_paths_with(
            &pod,
            &mut again,
            &[sub(&vol, "shared", "victim", 0, "d")],
            resolver,
            Path::new(MOUNTINFO),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to prepare subPath for volumeMount \"shared\" of container \"victim\""
        );
        let ConfigError::SubPath { reason, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(
            reason,
            &format!(
                "subpath {:?} not within volume path {:?}",
                vol.join("d"),
                vol
            )
        );
        // the old mount stays until released; releasing detaches it and removes the target
        pinned.release().unwrap();
        assert!(!mounted(&target));
        assert!(!target.exists());
        assert!(!pod.join("volume-subpaths/shared/victim").exists());
        // restore for the next resolver
        fs::remove_file(vol.join("d")).unwrap();
        fs::rename(vol.join("d.away"), vol.join("d")).unwrap();
    }
}

/// A subPath naming a file gets a file as its bind target; a mount left at the target (a
/// start cut short) is reused when it shows the same inode and replaced when it does not.
#[test]
fn file_targets_and_leftover_mounts() {
    let (_t, base) = tempdir();
    let pod = base.join("pod");
    let vol = base.join("vol");
    fs::create_dir(&pod).unwrap();
    fs::create_dir_all(vol.join("conf")).unwrap();
    fs::write(vol.join("conf/app.ini"), "x=1").unwrap();
    fs::create_dir(vol.join("other")).unwrap();
    let mounts_of = |m: &mut Vec<api::Mount>, s: &[SubPathMount]| {
        prepare_sub_paths_with(&pod, m, s, Resolver::Openat2, Path::new(MOUNTINFO)).unwrap()
    };
    let mut m = one_mount(&vol);
    let file = sub(&vol, "v", "app", 3, "conf/app.ini");
    let pinned = mounts_of(&mut m, std::slice::from_ref(&file));
    let target = pod.join("volume-subpaths/v/app/3");
    assert!(fs::symlink_metadata(&target).unwrap().is_file());
    assert_eq!(fs::read_to_string(&target).unwrap(), "x=1");
    // a crash: the guard never runs, the mount stays
    std::mem::forget(pinned);
    assert!(mounted(&target));
    // the same subPath again: the mount is kept (not stacked)
    let pinned = mounts_of(&mut m, std::slice::from_ref(&file));
    let table = fs::read_to_string(MOUNTINFO).unwrap();
    let stacked = crate::volume::mounts::mount_points(&table)
        .into_iter()
        .filter(|p| p == &target)
        .count();
    assert_eq!(stacked, 1);
    std::mem::forget(pinned);
    // a different subPath at the same index (a directory now): replaced
    let pinned = mounts_of(&mut m, &[sub(&vol, "v", "app", 3, "other")]);
    assert!(fs::symlink_metadata(&target).unwrap().is_dir());
    assert_eq!(ino(&target), ino(&vol.join("other")));
    drop(pinned);
    assert!(!mounted(&target));
    assert!(!target.exists());
}

/// The pod-directory cleanup unmounts subPath bind mounts left behind (nodelet died between
/// mount and start) and removes the pod directory; the volume's files that the mount showed
/// are removed only through the volume's own directory, and a host directory bind-mounted
/// into the tree stops the removal instead of being emptied.
#[test]
fn pod_cleanup_unmounts_leftover_sub_paths_and_never_crosses_a_mount() {
    let (_t, base) = tempdir();
    let root = base.join("root");
    let pod = crate::volume::make_pod_dirs(&root, "uid-1").unwrap();
    let vol = pod.join("volumes/kubernetes.io~empty-dir/shared");
    fs::create_dir_all(vol.join("d")).unwrap();
    let mut m = one_mount(&vol);
    let pinned = prepare_sub_paths_with(
        &pod,
        &mut m,
        &[sub(&vol, "shared", "app", 0, "d")],
        Resolver::Openat2,
        Path::new(MOUNTINFO),
    )
    .unwrap();
    let target = pod.join("volume-subpaths/shared/app/0");
    std::mem::forget(pinned);
    assert!(mounted(&target));
    crate::volume::cleanup_pod_dir(&root, "uid-1", &crate::volume::trash::Trash::new(&root).0)
        .unwrap();
    assert!(!mounted(&target));
    assert!(!pod.exists());

    // remove_tree refuses to descend into a mount: the host's files survive
    let host = base.join("host");
    fs::create_dir(&host).unwrap();
    fs::write(host.join("precious"), "keep").unwrap();
    let tree = base.join("tree");
    fs::create_dir_all(tree.join("a/bind")).unwrap();
    fs::write(tree.join("a/file"), "x").unwrap();
    mount(
        Some(&host),
        &tree.join("a/bind"),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .unwrap();
    let err = crate::volume::mounts::remove_tree(&tree).unwrap_err();
    assert!(err.to_string().contains("is a mount point"), "{err}");
    assert_eq!(fs::read_to_string(host.join("precious")).unwrap(), "keep");
    umount2(&tree.join("a/bind"), MntFlags::MNT_DETACH).unwrap();
    crate::volume::mounts::remove_tree(&tree).unwrap();
    assert!(!tree.exists());
    assert!(host.join("precious").exists());
}
