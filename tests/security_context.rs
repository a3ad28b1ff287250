//! securityContext on the real containerd: each field is checked from inside a container, by
//! what the process really gets (`id`, `/proc/self/status`, a write to its root filesystem, the
//! devices it sees, what its `/proc` masks), not by the CRI request nodelet sends.
//!
//! One static pod, one container per setting under test, all started side by side with
//! `restartPolicy: Never`. Each container runs the same probe script and prints its findings as
//! `key=value` lines; the test reads them from the container's CRI log file, which containerd
//! writes under nodelet's `podLogsDir`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use nodelet_testkit::pod::container_status;

const T: Duration = Duration::from_secs(180);

/// What each container reports about itself. `/proc/self` is the reporting command's own
/// process, which has the container's credentials.
const PROBE: &str = r#"{
echo "uid=$(id -u)"
echo "gid=$(id -g)"
echo "groups=$(id -G)"
grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status | tr -d ' \t' | sed 's/:/=/'
out=$(touch /probe 2>&1); echo "root_write=$?:$out"
for d in kmsg loop-control; do if [ -e /dev/$d ]; then echo "dev_$d=yes"; else echo "dev_$d=no"; fi; done
ftype() { if [ -c "$1" ]; then echo char; elif [ -f "$1" ]; then echo file; else echo absent; fi; }
echo "kcore=$(ftype /proc/kcore)"
echo "keys=$(ftype /proc/keys)"
echo "timer_list=$(ftype /proc/timer_list)"
echo "keys_bytes=$(cat /proc/keys 2>/dev/null | wc -c)"
echo "firmware_entries=$(ls -A /sys/firmware 2>/dev/null | wc -l)"
echo "proc_sys=$(awk '$5 == "/proc/sys" {print $6}' /proc/self/mountinfo)"
EXTRA
} 2>&1"#;

/// A write to `/proc/sys` (the UTS namespace's own hostname, so that even a success would stay
/// inside the pod); only for containers that must be refused it.
const WRITE_PROC_SYS: &str =
    r#"out=$(sh -c 'echo probe > /proc/sys/kernel/hostname' 2>&1); echo "proc_sys_write=$?:$out""#;

fn container(name: &str, extra: &str, security_context: &str) -> String {
    let script = PROBE.replace("EXTRA", extra);
    let mut s = format!(
        "  - name: {name}\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {script:?}]\n"
    );
    if !security_context.is_empty() {
        s.push_str("    securityContext:\n");
        for line in security_context.lines() {
            s.push_str(&format!("      {line}\n"));
        }
    }
    s
}

/// `key=value` lines a container printed, from its CRI log file
/// (`<podLogsDir>/<namespace>_<pod>_<uid>/<container>/0.log`, lines `<time> <stream> <F|P> <text>`).
fn report(
    n: &Nodelet,
    p: &k8s_openapi::api::core::v1::Pod,
    name: &str,
) -> BTreeMap<String, String> {
    let state = container_status(p, name)
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .unwrap_or_else(|| panic!("{name} has not terminated"));
    assert_eq!(state.exit_code, 0, "{name}: {state:?}");
    let m = &p.metadata;
    let file = n
        .dir
        .path()
        .join("logs")
        .join(format!(
            "{}_{}_{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            m.uid.as_deref().unwrap_or_default()
        ))
        .join(name)
        .join("0.log");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{name}: reading {}: {e}", file.display()));
    let mut out = String::new();
    for line in text.lines() {
        let mut parts = line.splitn(4, ' ');
        let (_time, stream, tag) = (parts.next(), parts.next(), parts.next());
        assert_eq!(stream, Some("stdout"), "{name}: {line:?}");
        out.push_str(parts.next().unwrap_or_default());
        if tag == Some("F") {
            out.push('\n');
        }
    }
    let report = out
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    eprintln!("{name}: {report:?}");
    report
}

fn all_terminated(p: &k8s_openapi::api::core::v1::Pod, n: usize) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.len() == n
                && cs
                    .iter()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
        })
}

/// The capability set this process holds (`CapBnd` of `/proc/self/status`): the runtime runs
/// with the same set on this host, and a privileged container gets all of it.
fn own_bounding_set() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .expect("CapBnd in /proc/self/status")
        .trim()
        .to_string()
}

fn get<'a>(r: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    r.get(key)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("{key} missing from report {r:?}"))
}

fn group_set(s: &str) -> BTreeSet<u32> {
    s.split_whitespace()
        .map(|g| g.parse().unwrap_or_else(|_| panic!("group {g:?}")))
        .collect()
}

/// containerd's default capability set for a container (`oci.WithDefaultCapabilities` in its
/// CRI plugin, the one Docker has): CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID,
/// SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, MKNOD, AUDIT_WRITE, SETFCAP.
const DEFAULT_CAPS: &str = "00000000a80425fb";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_context_fields_hold_inside_the_container() {
    let n = Nodelet::start("security-context");
    let containers = [
        container("plain", WRITE_PROC_SYS, ""),
        container("ids", "", ""),
        container(
            "caps",
            "",
            "capabilities:\n  drop: [ALL]\n  add: [NET_BIND_SERVICE]",
        ),
        container("nnp", "", "allowPrivilegeEscalation: false"),
        container("rofs", "", "readOnlyRootFilesystem: true"),
        container("privileged", "", "privileged: true"),
        container("procmount", WRITE_PROC_SYS, "procMount: Default"),
    ];
    // `ids` takes the pod's user, group and groups; every other container overrides them with
    // root, so that the other checks see a root process (whose writes only the setting under
    // test can stop).
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sc\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 5\n\
         \x20 securityContext:\n    runAsUser: 1000\n    runAsGroup: 3000\n    supplementalGroups: [4000, 5000]\n    fsGroup: 2000\n\
         \x20 containers:\n{}",
        containers
            .iter()
            .map(|c| {
                if c.contains("name: ids\n") {
                    c.clone()
                } else if c.contains("    securityContext:\n") {
                    c.replace(
                        "    securityContext:\n",
                        "    securityContext:\n      runAsUser: 0\n      runAsGroup: 0\n",
                    )
                } else {
                    format!("{c}    securityContext:\n      runAsUser: 0\n      runAsGroup: 0\n")
                }
            })
            .collect::<String>()
    );
    n.write_manifest("sc.yaml", &manifest);
    let pod = n
        .wait_pod("sc", T, "every container terminated", |p| {
            all_terminated(p, containers.len())
        })
        .await;
    let plain = report(&n, &pod, "plain");
    let ids = report(&n, &pod, "ids");
    let caps = report(&n, &pod, "caps");
    let nnp = report(&n, &pod, "nnp");
    let rofs = report(&n, &pod, "rofs");
    let privileged = report(&n, &pod, "privileged");
    let procmount = report(&n, &pod, "procmount");

    // runAsUser, runAsGroup, supplementalGroups and fsGroup.
    assert_eq!(get(&ids, "uid"), "1000", "{ids:?}");
    assert_eq!(get(&ids, "gid"), "3000", "{ids:?}");
    assert_eq!(
        group_set(get(&ids, "groups")),
        BTreeSet::from([2000, 3000, 4000, 5000]),
        "{ids:?}"
    );
    // The override to root in the other containers (and still the pod's groups).
    assert_eq!(get(&plain, "uid"), "0", "{plain:?}");
    assert_eq!(get(&plain, "gid"), "0", "{plain:?}");
    assert_eq!(
        group_set(get(&plain, "groups")),
        BTreeSet::from([0, 2000, 4000, 5000]),
        "{plain:?}"
    );

    // Capabilities: drop ALL, add one, and nothing else, in the effective and bounding sets.
    assert_eq!(get(&caps, "CapEff"), "0000000000000400", "{caps:?}");
    assert_eq!(get(&caps, "CapBnd"), "0000000000000400", "{caps:?}");
    assert_eq!(get(&plain, "CapEff"), DEFAULT_CAPS, "{plain:?}");
    assert_eq!(get(&plain, "CapBnd"), DEFAULT_CAPS, "{plain:?}");

    // allowPrivilegeEscalation: false is no_new_privs; the default is without.
    assert_eq!(get(&nnp, "NoNewPrivs"), "1", "{nnp:?}");
    assert_eq!(get(&plain, "NoNewPrivs"), "0", "{plain:?}");
    assert_eq!(get(&privileged, "NoNewPrivs"), "0", "{privileged:?}");

    // readOnlyRootFilesystem: root cannot write to /; without it root can.
    assert_eq!(
        get(&rofs, "root_write"),
        "1:touch: /probe: Read-only file system",
        "{rofs:?}"
    );
    assert_eq!(get(&plain, "root_write"), "0:", "{plain:?}");

    // privileged: the host's devices and every capability the runtime holds.
    assert_eq!(get(&privileged, "dev_kmsg"), "yes", "{privileged:?}");
    assert_eq!(
        get(&privileged, "dev_loop-control"),
        "yes",
        "{privileged:?}"
    );
    assert_eq!(get(&plain, "dev_kmsg"), "no", "{plain:?}");
    assert_eq!(get(&plain, "dev_loop-control"), "no", "{plain:?}");
    let full = own_bounding_set();
    assert_eq!(get(&privileged, "CapEff"), full, "{privileged:?}");
    assert_eq!(get(&privileged, "CapBnd"), full, "{privileged:?}");
    // ... and an unmasked /proc and /sys, /proc/sys not read-only.
    let kcore = if std::path::Path::new("/proc/kcore").exists() {
        ("file", "char")
    } else {
        // This kernel has no /proc/kcore (CONFIG_PROC_KCORE off); runc masks only what exists.
        ("absent", "absent")
    };
    assert_eq!(get(&privileged, "kcore"), kcore.0, "{privileged:?}");
    assert_eq!(get(&privileged, "keys"), "file", "{privileged:?}");
    assert_eq!(get(&privileged, "timer_list"), "file", "{privileged:?}");
    let host_firmware = std::fs::read_dir("/sys/firmware")
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(host_firmware > 0, "the host has an empty /sys/firmware");
    assert_eq!(
        get(&privileged, "firmware_entries"),
        host_firmware.to_string(),
        "{privileged:?}"
    );
    assert_eq!(get(&privileged, "proc_sys"), "", "{privileged:?}");

    // procMount: Default (and the default without the field): /proc/kcore, /proc/keys and
    // /proc/timer_list are /dev/null (empty to read), /sys/firmware an empty read-only tmpfs,
    // /proc/sys is mounted read-only and a write to it fails.
    for (name, r) in [("procmount", &procmount), ("plain", &plain)] {
        assert_eq!(get(r, "kcore"), kcore.1, "{name}: {r:?}");
        assert_eq!(get(r, "keys"), "char", "{name}: {r:?}");
        assert_eq!(get(r, "timer_list"), "char", "{name}: {r:?}");
        assert_eq!(get(r, "keys_bytes"), "0", "{name}: {r:?}");
        assert_eq!(get(r, "firmware_entries"), "0", "{name}: {r:?}");
        assert!(
            get(r, "proc_sys").split(',').any(|o| o == "ro"),
            "{name}: {r:?}"
        );
        let write = get(r, "proc_sys_write");
        assert!(
            write.starts_with("1:") && write.ends_with(": Read-only file system"),
            "{name}: {r:?}"
        );
    }
}
