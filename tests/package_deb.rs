//! nodelet's Debian package (`scripts/package-deb.sh`), built from the binary under test and
//! read back with `dpkg-deb`: its files, modes and owners, its control fields, its conffile and
//! maintainer scripts, the unit's `ExecStart`, the logind drop-in, and the packaged binary
//! running. That it installs and its unit starts on a node is the VM scenarios' part
//! (`tests/vm_node.rs`, `nodelet_is_installed_from_its_package`: the guest installs it with
//! `dpkg -i`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (Debian packages dpkg, binutils)"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Builds the package from the test's nodelet binary into `dir`; returns its path.
fn build(dir: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = repo.join("scripts/package-deb.sh");
    let out = run(
        script.to_str().unwrap(),
        &[
            "--binary",
            env!("CARGO_BIN_EXE_nodelet"),
            "--out",
            dir.to_str().unwrap(),
            "--compression",
            "gzip",
        ],
    );
    PathBuf::from(out.trim())
}

#[test]
fn the_package_holds_the_binary_the_unit_the_config_and_the_logind_drop_in() {
    let dir = tempfile::tempdir().unwrap();
    let deb = build(dir.path());
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        deb,
        dir.path().join(format!("nodelet_{version}_amd64.deb")),
        "the package's name"
    );
    let deb = deb.to_str().unwrap();

    // `dpkg-deb -c`: mode, owner, size, date, time, path.
    let listing = run("dpkg-deb", &["-c", deb]);
    let files: BTreeMap<String, (String, String)> = listing
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let path = cols.get(5)?.trim_start_matches('.').to_string();
            Some((path, (cols[0].to_string(), cols[1].to_string())))
        })
        .collect();
    let want = [
        ("/usr/bin/nodelet", "-rwxr-xr-x"),
        ("/usr/lib/systemd/system/nodelet.service", "-rw-r--r--"),
        (
            "/usr/lib/systemd/logind.conf.d/99-nodelet.conf",
            "-rw-r--r--",
        ),
        ("/etc/nodelet/config.yaml", "-rw-r--r--"),
        ("/usr/share/doc/nodelet/README.md", "-rw-r--r--"),
    ];
    for (path, mode) in want {
        let (m, owner) = files
            .get(path)
            .unwrap_or_else(|| panic!("the package has no {path}:\n{listing}"));
        assert_eq!((m.as_str(), owner.as_str()), (mode, "root/root"), "{path}");
    }
    let regular: Vec<&String> = files
        .iter()
        .filter(|(_, (mode, _))| !mode.starts_with('d'))
        .map(|(path, _)| path)
        .collect();
    assert_eq!(
        regular.len(),
        want.len(),
        "files beyond the five: {regular:?}"
    );
    for (path, (mode, owner)) in &files {
        assert_eq!(owner, "root/root", "{path}");
        if mode.starts_with('d') {
            assert_eq!(mode, "drwxr-xr-x", "{path}");
        }
    }

    // The control fields.
    let field = |name: &str| run("dpkg-deb", &["-f", deb, name]).trim().to_string();
    assert_eq!(field("Package"), "nodelet");
    assert_eq!(field("Version"), version);
    assert_eq!(field("Architecture"), "amd64");
    let depends = field("Depends");
    let depends: Vec<&str> = depends.split(", ").collect();
    assert!(depends.contains(&"containerd"), "{depends:?}");
    assert!(
        depends.iter().any(|d| d.starts_with("libc6 (>= 2.")),
        "{depends:?}"
    );
    assert!(!field("Maintainer").is_empty());
    assert!(!field("Description").is_empty());
    let installed: u64 = field("Installed-Size")
        .parse()
        .expect("Installed-Size in KiB");
    assert!(installed > 1024, "Installed-Size {installed} KiB");

    // Control files: the conffile and the maintainer scripts.
    let control = dir.path().join("control");
    run("dpkg-deb", &["-e", deb, control.to_str().unwrap()]);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    assert_eq!(
        read(&control.join("conffiles")),
        "/etc/nodelet/config.yaml\n"
    );
    let postinst = read(&control.join("postinst"));
    assert!(postinst.contains("systemctl daemon-reload"), "{postinst}");
    assert!(
        !postinst.contains("systemctl enable") && !postinst.contains("systemctl start"),
        "the install neither enables nor starts the unit:\n{postinst}"
    );

    // The files themselves.
    let root = dir.path().join("root");
    run("dpkg-deb", &["-x", deb, root.to_str().unwrap()]);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let unit = read(&root.join("usr/lib/systemd/system/nodelet.service"));
    assert!(
        unit.lines()
            .any(|l| l == "ExecStart=/usr/bin/nodelet run --config /etc/nodelet/config.yaml"),
        "{unit}"
    );
    assert_eq!(unit, read(&repo.join("systemd/nodelet.service")));
    let drop_in = read(&root.join("usr/lib/systemd/logind.conf.d/99-nodelet.conf"));
    assert!(
        drop_in.contains("\n[Login]\nInhibitDelayMaxSec=30\n"),
        "{drop_in}"
    );
    let config = root.join("etc/nodelet/config.yaml");
    assert_eq!(read(&config), read(&repo.join("config.example.yaml")));
    // The packaged (stripped) binary runs, and accepts the packaged configuration.
    let nodelet = root.join("usr/bin/nodelet");
    let nodelet = nodelet.to_str().unwrap();
    assert!(
        run(nodelet, &["version"]).contains(version),
        "nodelet version"
    );
    run(nodelet, &["validate", "--config", config.to_str().unwrap()]);
    let sections = run("objdump", &["-h", nodelet]);
    assert!(
        !sections.contains(".debug_info"),
        "debug info left in the packaged binary"
    );
}

/// A second build gives the same file list and fields (the script is idempotent and leaves no
/// staging directory behind).
#[test]
fn building_twice_leaves_one_package_and_no_staging() {
    let dir = tempfile::tempdir().unwrap();
    let first = build(dir.path());
    let listing = |deb: &Path| -> Vec<String> {
        run("dpkg-deb", &["-c", deb.to_str().unwrap()])
            .lines()
            .map(|l| l.split_whitespace().nth(5).unwrap_or("").to_string())
            .collect()
    };
    let before = listing(&first);
    let second = build(dir.path());
    assert_eq!(first, second);
    assert_eq!(listing(&second), before);
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        [first.file_name().unwrap().to_string_lossy()],
        "{left:?}"
    );
}
