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
use nodelet::cri::{HousekeepingRuntime, StatsRuntime};
use nodelet_testkit::pod::container_status;
use nodelet_testkit::tail;

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

/// A static pod of one testbox container that prints what it finds and exits.
fn one_shot_pod(name: &str, pod_security_context: &str, script: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 5\n\
         \x20 securityContext: {pod_security_context}\n  containers:\n{}",
        container("main", script, "")
    )
}

/// The status of a pod that admission refused: `Failed` with `reason`, and the message.
async fn wait_rejected(n: &Nodelet, name: &str) -> (String, String) {
    let pod = n
        .wait_pod(name, T, "rejected at admission", |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.phase.as_deref() == Some("Failed"))
        })
        .await;
    let status = pod.status.unwrap_or_default();
    assert!(
        status
            .container_statuses
            .iter()
            .flatten()
            .all(|c| c.state.as_ref().is_none_or(|s| s.running.is_none())),
        "{name}: a container of a rejected pod ran: {:?}",
        status.container_statuses
    );
    (
        status.reason.unwrap_or_default(),
        status.message.unwrap_or_default(),
    )
}

/// `seccompDefault: true` puts a container without a profile under the runtime's default
/// seccomp filter (`Seccomp: 2` in its `/proc/self/status`; an explicit `Unconfined` stays 0);
/// a pod that sets an unsafe sysctl the node does not allow is rejected with `SysctlForbidden`
/// before anything of it runs, while a safe one is set inside the pod's namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seccomp_default_and_sysctl_admission_without_unsafe_sysctls() {
    let n = Nodelet::start_with("seccomp-default", "seccompDefault: true\n");
    let seccomp = r#"echo "seccomp=$(awk '/^Seccomp:/ {print $2}' /proc/self/status)""#;
    n.write_manifest(
        "defaulted.yaml",
        &one_shot_pod(
            "defaulted",
            "{sysctls: [{name: net.ipv4.tcp_syncookies, value: '0'}]}",
            &format!("{seccomp}\necho \"syncookies=$(cat /proc/sys/net/ipv4/tcp_syncookies)\""),
        ),
    );
    n.write_manifest(
        "unconfined.yaml",
        &one_shot_pod(
            "unconfined",
            "{seccompProfile: {type: Unconfined}}",
            seccomp,
        ),
    );
    n.write_manifest(
        "shm.yaml",
        &one_shot_pod(
            "shm",
            "{sysctls: [{name: kernel.shmmax, value: '65536'}]}",
            "echo ran",
        ),
    );
    let defaulted = n
        .wait_pod("defaulted", T, "its container terminated", |p| {
            all_terminated(p, 1)
        })
        .await;
    let defaulted = report(&n, &defaulted, "main");
    assert_eq!(get(&defaulted, "seccomp"), "2", "{defaulted:?}");
    // The host's value is 1; the pod's network namespace has its own.
    assert_eq!(get(&defaulted, "syncookies"), "0", "{defaulted:?}");
    let unconfined = n
        .wait_pod("unconfined", T, "its container terminated", |p| {
            all_terminated(p, 1)
        })
        .await;
    let unconfined = report(&n, &unconfined, "main");
    assert_eq!(get(&unconfined, "seccomp"), "0", "{unconfined:?}");

    let (reason, message) = wait_rejected(&n, "shm").await;
    assert_eq!(reason, "SysctlForbidden");
    // The status message as the kubelet's `rejectPod`; the event has the bare message.
    assert_eq!(
        message,
        "Pod was rejected: forbidden sysctl: \"kernel.shmmax\" not allowlisted"
    );
    let events = n
        .api()
        .get("/events")
        .await
        .expect("nodelet answers /events");
    let list: serde_json::Value = serde_json::from_str(&events).expect("/events is JSON");
    assert!(
        list["items"].as_array().into_iter().flatten().any(|e| {
            e["reason"] == "SysctlForbidden"
                && e["type"] == "Warning"
                && e["message"] == "forbidden sysctl: \"kernel.shmmax\" not allowlisted"
        }),
        "no SysctlForbidden event:\n{events}"
    );
}

/// With `allowedUnsafeSysctls: ["kernel.shm*"]` (and no `seccompDefault`) the same pod runs
/// with the value inside its IPC namespace; one outside the pattern is still refused, and an
/// allowed IPC sysctl in a pod that shares the host's IPC namespace is an invalid manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_unsafe_sysctls_let_a_pod_set_them() {
    let n = Nodelet::start_with(
        "unsafe-sysctls",
        "allowedUnsafeSysctls: [\"kernel.shm*\"]\n",
    );
    n.write_manifest(
        "shm.yaml",
        &one_shot_pod(
            "shm",
            "{sysctls: [{name: kernel.shmmax, value: '65536'}]}",
            r#"echo "shmmax=$(cat /proc/sys/kernel/shmmax)"
echo "seccomp=$(awk '/^Seccomp:/ {print $2}' /proc/self/status)""#,
        ),
    );
    n.write_manifest(
        "msg.yaml",
        &one_shot_pod(
            "msg",
            "{sysctls: [{name: kernel.msgmax, value: '65536'}]}",
            "echo ran",
        ),
    );
    let host_ipc = one_shot_pod(
        "hostipc",
        "{sysctls: [{name: kernel.shmmax, value: '65536'}]}",
        "echo ran",
    )
    .replace(
        "  restartPolicy: Never\n",
        "  restartPolicy: Never\n  hostIPC: true\n",
    );
    n.write_manifest("hostipc.yaml", &host_ipc);
    let shm = n
        .wait_pod("shm", T, "its container terminated", |p| {
            all_terminated(p, 1)
        })
        .await;
    let shm = report(&n, &shm, "main");
    assert_eq!(get(&shm, "shmmax"), "65536", "{shm:?}");
    // Without seccompDefault a container without a profile is unconfined, as in the kubelet.
    assert_eq!(get(&shm, "seccomp"), "0", "{shm:?}");
    assert_ne!(
        std::fs::read_to_string("/proc/sys/kernel/shmmax")
            .expect("host shmmax")
            .trim(),
        "65536",
        "the pod's sysctl reached the host"
    );
    let (reason, message) = wait_rejected(&n, "msg").await;
    assert_eq!(
        (reason.as_str(), message.as_str()),
        (
            "SysctlForbidden",
            "Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted"
        )
    );
    // An IPC sysctl with hostIPC is not a valid pod at all, as the kubelet's file source
    // validates a static pod (`ValidatePodCreate`, which the API server applies to an API pod):
    // the manifest is refused with the field error and no pod of it ever exists.
    let refusal = "spec.securityContext.sysctls[0].name: Invalid value: \"kernel.shmmax\": \
                   may not be specified when 'hostIPC' is true";
    let deadline = std::time::Instant::now() + T;
    while !n.logs().contains(refusal) {
        assert!(
            std::time::Instant::now() < deadline,
            "the hostIPC manifest was not refused:\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        n.pod("hostipc").await.is_none(),
        "a pod of the refused manifest"
    );
}

/// `fsGroup` on emptyDir volumes, as the kubelet's `SetVolumeOwnership`: the volume's root has
/// group 2000, group rwx and setgid on disk and on tmpfs, so a file a container creates there
/// belongs to group 2000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_group_owns_empty_dir_volumes() {
    let n = Nodelet::start("fsgroup-emptydir");
    let script = r#"stat -c 'data=%g:%a' /data
stat -c 'mem=%g:%a' /mem
touch /data/f /mem/f
stat -c 'data_file=%g' /data/f
stat -c 'mem_file=%g' /mem/f"#;
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fsg\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 5\n\
         \x20 securityContext: {{runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000, fsGroupChangePolicy: OnRootMismatch}}\n\
         \x20 volumes:\n  - name: data\n    emptyDir: {{}}\n  - name: mem\n    emptyDir: {{medium: Memory}}\n\
         \x20 containers:\n{}    volumeMounts:\n    - {{name: data, mountPath: /data}}\n    - {{name: mem, mountPath: /mem}}\n",
        container("main", script, "")
    );
    n.write_manifest("fsg.yaml", &manifest);
    let pod = n
        .wait_pod("fsg", T, "its container terminated", |p| {
            all_terminated(p, 1)
        })
        .await;
    let r = report(&n, &pod, "main");
    assert_eq!(get(&r, "uid"), "1000", "{r:?}");
    assert_eq!(get(&r, "data"), "2000:2777", "{r:?}");
    // A tmpfs root keeps its own sticky bit, as the kubelet leaves it (`dgtrwxrwxrwx`).
    assert_eq!(get(&r, "mem"), "2000:3777", "{r:?}");
    assert_eq!(get(&r, "data_file"), "2000", "{r:?}");
    assert_eq!(get(&r, "mem_file"), "2000", "{r:?}");
}

/// The runtime's CRI `Status` decides, as for the kubelet. containerd 1.6 declares nothing (no
/// runtime features, no handler features): what it would silently drop is refused —
/// `supplementalGroupsPolicy: Strict` at admission with the kubelet's reason,
/// `recursiveReadOnly: Enabled` at container creation with the kubelet's message. containerd 2.x
/// declares both (its runc handlers' recursive read-only mounts because runc, 1.1.5 here, lists
/// `rro`): the Strict pod runs with the groups it names, the Enabled container gets an `rro`
/// mount in its OCI spec. `IfPossible` runs on both (plain read-only where not declared), and
/// the status says `recursiveReadOnly: Enabled` or `Disabled` accordingly, as the kubelet does. The
/// declaration itself is checked against the instance's containerd version, so neither branch
/// passes on the wrong runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn features_are_used_where_the_runtime_declares_them_and_refused_where_not() {
    let rt = runtime();
    let declared = rt.runtime_feature_set().await.expect("CRI Status");
    let sgp = declared.supplemental_groups_policy();
    let handlers = declared.handlers();
    let rro = handlers
        .iter()
        .find(|h| h.name.is_empty())
        .and_then(|h| h.features)
        .is_some_and(|f| f.recursive_read_only_mounts);
    let version = std::env::var("NODELET_TEST_CONTAINERD_VERSION")
        .expect("NODELET_TEST_CONTAINERD_VERSION (scripts/containerd.sh env)");
    let current = !version.starts_with("1.");
    assert_eq!(
        (sgp, rro),
        (current, current),
        "containerd {version} declares supplementalGroupsPolicy {sgp}, recursive read-only {rro} (handlers {handlers:?})"
    );

    let n = Nodelet::start("runtime-features");
    n.write_manifest(
        "strict.yaml",
        &one_shot_pod(
            "strict",
            "{runAsUser: 1000, supplementalGroups: [2000], supplementalGroupsPolicy: Strict}",
            "",
        ),
    );
    if sgp {
        let pod = n
            .wait_pod("strict", T, "its container terminated", |p| {
                all_terminated(p, 1)
            })
            .await;
        let r = report(&n, &pod, "main");
        assert_eq!(get(&r, "uid"), "1000", "{r:?}");
        assert!(group_set(get(&r, "groups")).contains(&2000), "{r:?}");
    } else {
        let (reason, message) = wait_rejected(&n, "strict").await;
        assert_eq!(
            (reason.as_str(), message.as_str()),
            (
                "SupplementalGroupsPolicyNotSupported",
                "Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node"
            )
        );
    }
    let rro_pod = |name: &str, mode: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 5\n\
             \x20 volumes:\n  - name: data\n    emptyDir: {{}}\n  containers:\n{}    volumeMounts:\n    - {{name: data, mountPath: /data, readOnly: true, recursiveReadOnly: {mode}}}\n",
            container("main", "", "")
        )
    };
    n.write_manifest("enabled.yaml", &rro_pod("enabled", "Enabled"));
    n.write_manifest("ifpossible.yaml", &rro_pod("ifpossible", "IfPossible"));
    if rro {
        let pod = n
            .wait_pod("enabled", T, "its container terminated", |p| {
                all_terminated(p, 1)
            })
            .await;
        let id = container_status(&pod, "main")
            .and_then(|c| c.container_id.as_deref())
            .and_then(|id| id.strip_prefix("containerd://"))
            .expect("container id")
            .to_string();
        let info = rt.container_info(&id).await.expect("verbose status");
        let info: serde_json::Value =
            serde_json::from_str(info.get("info").expect("containerd's info")).unwrap();
        let options = info["runtimeSpec"]["mounts"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["destination"] == "/data"))
            .map(|m| m["options"].clone())
            .unwrap_or_else(|| panic!("no /data mount in the OCI spec: {info}"));
        assert!(
            options
                .as_array()
                .is_some_and(|o| o.iter().any(|o| o == "rro")),
            "/data options {options}"
        );
    } else {
        let enabled = n
            .wait_pod("enabled", T, "CreateContainerConfigError", |p| {
                container_status(p, "main")
                    .and_then(|c| c.state.as_ref())
                    .and_then(|s| s.waiting.as_ref())
                    .is_some_and(|w| w.reason.as_deref() == Some("CreateContainerConfigError"))
            })
            .await;
        let waiting = container_status(&enabled, "main")
            .and_then(|c| c.state.clone())
            .and_then(|s| s.waiting)
            .expect("waiting");
        assert_eq!(
            waiting.message.as_deref(),
            Some("failed to resolve recursive read-only mode: volume \"data\" requested recursive read-only mode, but it is not supported by the runtime")
        );
    }
    let ifpossible = n
        .wait_pod("ifpossible", T, "its container terminated", |p| {
            all_terminated(p, 1)
        })
        .await;
    // The status says what the mount is, as the kubelet resolves it: recursive where the
    // handler declares it.
    let mode = |p: &k8s_openapi::api::core::v1::Pod| {
        container_status(p, "main")
            .and_then(|c| c.volume_mounts.as_ref())
            .and_then(|ms| ms.iter().find(|m| m.mount_path == "/data"))
            .and_then(|m| m.recursive_read_only.clone())
    };
    let expected = if rro { "Enabled" } else { "Disabled" };
    assert_eq!(mode(&ifpossible).as_deref(), Some(expected), "IfPossible");
    if rro {
        let enabled = n.pod("enabled").await.expect("the Enabled pod");
        assert_eq!(mode(&enabled).as_deref(), Some("Enabled"), "Enabled");
    }
}

/// A pod asking for an AppArmor profile on a node whose kernel does not enforce AppArmor is
/// rejected at admission with reason `AppArmor`, as the kubelet does, instead of failing in the
/// runtime container after container (containerd: `apparmor is not supported`); `Unconfined`
/// runs. Where the kernel enforces AppArmor, the runtime's default profile confines the
/// container. Kubernetes' `should reject a pod with an AppArmor profile` [NodeConformance] test
/// found nodelet leaving such a pod Pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apparmor_profile_is_enforced_or_the_pod_rejected() {
    let n = Nodelet::start_with("apparmor", "");
    let host_error = nodelet::pod::apparmor::host_support(std::path::Path::new("/sys"));
    n.write_manifest(
        "confined.yaml",
        &one_shot_pod(
            "confined",
            "{appArmorProfile: {type: RuntimeDefault}}",
            "echo \"profile=$(cat /proc/self/attr/current)\"",
        ),
    );
    n.write_manifest(
        "unconfined.yaml",
        &one_shot_pod(
            "unconfined",
            "{appArmorProfile: {type: Unconfined}}",
            "echo ran=yes",
        ),
    );
    let unconfined = n
        .wait_pod("unconfined", T, "its container terminated", |p| {
            all_terminated(p, 1)
        })
        .await;
    assert_eq!(get(&report(&n, &unconfined, "main"), "ran"), "yes");
    match host_error {
        Some(why) => {
            let (reason, message) = wait_rejected(&n, "confined").await;
            assert_eq!(reason, "AppArmor");
            assert_eq!(
                message,
                format!("Pod was rejected: Cannot enforce AppArmor: {why}")
            );
        }
        None => {
            let confined = n
                .wait_pod("confined", T, "its container terminated", |p| {
                    all_terminated(p, 1)
                })
                .await;
            let confined = report(&n, &confined, "main");
            let profile = get(&confined, "profile");
            assert!(profile.contains("(enforce)"), "{profile}");
        }
    }
}

/// A privileged container's `mountPropagation: Bidirectional` mount of an emptyDir (as
/// Kubernetes' e2e test "Mount recursive read-only" sets one up): a tmpfs it mounts there
/// reaches the host and the pod's next container. containerd refuses such a mount on a private
/// mount, so nodelet puts its rootDir on a shared one when it starts, as the kubelet does
/// (this machine's `/` is private: nodelet bind-mounts the directory onto itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidirectional_mount_propagation_reaches_the_next_container() {
    let n = Nodelet::start("bidirectional");
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: prop\nspec:\n  restartPolicy: Never\n\
         \x20 volumes:\n  - {{name: mnt, emptyDir: {{}}}}\n  initContainers:\n\
         \x20 - name: mount\n    image: {TESTBOX}\n    imagePullPolicy: Never\n\
         \x20   command: [/bin/sh, -euc, \"mkdir -p /mnt/tmpfs && mount -t tmpfs none /mnt/tmpfs && echo propagated > /mnt/tmpfs/file\"]\n\
         \x20   securityContext: {{privileged: true}}\n\
         \x20   volumeMounts: [{{name: mnt, mountPath: /mnt, mountPropagation: Bidirectional}}]\n\
         \x20 containers:\n  - name: read\n    image: {TESTBOX}\n    imagePullPolicy: Never\n\
         \x20   command: [/bin/sh, -euc, \"test \\\"$(cat /mnt/tmpfs/file)\\\" = propagated\"]\n\
         \x20   volumeMounts: [{{name: mnt, mountPath: /mnt}}]\n"
    );
    n.write_manifest("prop.yaml", &manifest);
    let pod = n
        .wait_pod("prop", Duration::from_secs(120), "a terminal phase", |p| {
            matches!(nodelet_testkit::pod::phase(p), "Succeeded" | "Failed")
        })
        .await;
    assert_eq!(
        nodelet_testkit::pod::phase(&pod),
        "Succeeded",
        "the next container read the tmpfs the first one mounted: {:?}\n{}",
        pod.status,
        n.logs()
    );
    let root = std::fs::canonicalize(n.dir.path().join("root")).expect("rootDir");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        nodelet::volume::mounts::on_shared_mount(&mountinfo, &root),
        "{} is not on a shared mount:\n{mountinfo}",
        root.display()
    );
    // A restart finds the directory shared and mounts nothing more over it.
    let mounts_at_root = |table: &str| {
        nodelet::volume::mounts::mount_points(table)
            .iter()
            .filter(|m| **m == root)
            .count()
    };
    let before = mounts_at_root(&mountinfo);
    let mut n = n;
    n.restart();
    n.wait_pod("prop", Duration::from_secs(60), "the pod again", |_| true)
        .await;
    let after = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert_eq!(
        mounts_at_root(&after),
        before,
        "mounts over {}",
        root.display()
    );
}
