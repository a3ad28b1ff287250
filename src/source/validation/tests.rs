//! Whole pods across the areas: valid pods, the pod spec's own fields, the static-pod rules
//! (API references, UID), seccomp and stop signals, and every error collected in field order.

use super::test_support::{errors_for, errors_for_pod, label_msg, with_container, C};
use super::*;
use crate::source::defaults::apply_defaults;

#[test]
fn valid_pods_have_no_errors() {
    let cases: &[&str] = &[
        C,
        // seed: a regular container may override the pod's restart policy
        "  restartPolicy: OnFailure\n  containers:\n  - name: try-once\n    image: busybox:1.27.2\n    restartPolicy: Never\n",
        // seed: restart on specific exit codes
        "  restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox:1.27.2\n    restartPolicy: Never\n    restartPolicyRules:\n    - action: Restart\n      exitCodes: {operator: In, values: [42]}\n",
        // seed: a sidecar that restarts the whole pod on exit code 88
        "  restartPolicy: Never\n  initContainers:\n  - name: setup\n    image: busybox:1.27.2\n  - name: watcher\n    image: busybox:1.27.2\n    restartPolicy: Always\n    restartPolicyRules:\n    - action: RestartAllContainers\n      exitCodes: {operator: In, values: [88]}\n  containers:\n  - name: main\n    image: busybox:1.27.2\n",
        // sidecar with probes and lifecycle
        "  initContainers:\n  - name: log\n    image: fluent-bit:1.8\n    restartPolicy: Always\n    readinessProbe:\n      tcpSocket: {port: 2020}\n    lifecycle:\n      preStop:\n        sleep: {seconds: 5}\n  containers:\n  - name: app\n    image: nginx:1.27\n",
        // volumes nodelet supports, mounted
        "  volumes:\n  - name: scratch\n    emptyDir: {sizeLimit: 1Gi}\n  - name: logs\n    hostPath: {path: /var/log, type: Directory}\n  - name: info\n    downwardAPI:\n      items:\n      - path: labels\n        fieldRef: {fieldPath: metadata.labels}\n      - path: cpu\n        resourceFieldRef: {containerName: c, resource: limits.cpu, divisor: 1m}\n  - name: proj\n    projected:\n      sources:\n      - downwardAPI:\n          items:\n          - {path: name, fieldRef: {fieldPath: metadata.name}}\n  containers:\n  - name: c\n    image: busybox:1.36\n    volumeMounts:\n    - {name: scratch, mountPath: /scratch}\n    - {name: logs, mountPath: /logs, readOnly: true, subPath: app}\n    - {name: info, mountPath: /etc/info}\n    - {name: proj, mountPath: /etc/proj}\n",
        // an image volume with subPath and subPathExpr (allowed since v1.33)
        "  volumes:\n  - name: data\n    image: {reference: 'reg.io/data:1', pullPolicy: IfNotPresent}\n  containers:\n  - name: c\n    image: busybox:1.36\n    env:\n    - {name: SUB, value: bin}\n    volumeMounts:\n    - {name: data, mountPath: /data}\n    - {name: data, mountPath: /sub, subPath: usr/share}\n    - {name: data, mountPath: /expr, subPathExpr: $(SUB)}\n",
        // env from the downward API, resources, probes with every handler
        "  containers:\n  - name: c\n    image: busybox:1.36\n    env:\n    - {name: A, value: x}\n    - {name: my.var-1, value: y}\n    - name: POD\n      valueFrom: {fieldRef: {fieldPath: metadata.name}}\n    - name: APP\n      valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}\n    - name: IP\n      valueFrom: {fieldRef: {fieldPath: status.podIPs}}\n    - name: MEM\n      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}\n    resources:\n      limits: {cpu: 500m, memory: 128Mi, example.com/gpu: 1}\n      requests: {cpu: 250m}\n    livenessProbe:\n      httpGet: {path: /healthz, port: http, httpHeaders: [{name: X-Probe, value: '1'}]}\n    readinessProbe:\n      exec: {command: [cat, /tmp/ready]}\n    startupProbe:\n      grpc: {port: 9000}\n    ports:\n    - {name: http, containerPort: 8080}\n    - {containerPort: 53, protocol: UDP, hostPort: 53}\n",
        // host network: host ports default to container ports
        "  hostNetwork: true\n  containers:\n  - name: c\n    image: busybox:1.36\n    ports:\n    - containerPort: 10250\n",
        "  dnsPolicy: None\n  dnsConfig: {nameservers: [10.0.0.10], searches: [svc.cluster.local, my_domain.local, .]}\n" ,
    ];
    for spec in cases {
        let spec = if spec.contains("containers:") {
            spec.to_string()
        } else {
            format!("{C}{spec}")
        };
        assert_eq!(errors_for(&spec), Vec::<String>::new(), "spec:\n{spec}");
    }
}

/// `fileKeyRef` as `validateFileKeySelector` and `validateFileKeyRefVolumes` check it.
#[test]
fn file_key_ref_rules() {
    let pod = |volumes: &str, selector: &str| {
        format!("{volumes}  containers:\n  - name: c\n    image: busybox:1.36\n    env:\n    - name: A\n      valueFrom: {{fileKeyRef: {selector}}}\n")
    };
    let empty =
        "  volumes:\n  - {name: config, emptyDir: {}}\n  - {name: host, hostPath: {path: /etc}}\n";
    let f = "spec.containers[0].env[0].valueFrom.fileKeyRef";
    let cases: Vec<(String, Vec<String>)> = vec![
        (pod(empty, "{volumeName: config, path: a.env, key: A}"), vec![]),
        (pod(empty, "{volumeName: config, path: /abs/a.env, key: my.key-1}"), vec![]),
        (
            pod(empty, "{volumeName: host, path: a.env, key: A}"),
            vec![format!("{f}.volumeName: Invalid value: \"host\": referenced volume must be of type emptyDir")],
        ),
        (
            pod(empty, "{volumeName: nope, path: a.env, key: A}"),
            vec![format!("{f}.volumeName: Not found: \"nope\"")],
        ),
        (
            pod(empty, "{volumeName: config, path: ../a.env, key: 'A=B'}"),
            vec![
                format!("{f}.key: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='"),
                format!("{f}.path: Invalid value: \"../a.env\": must not contain '..'"),
            ],
        ),
        (
            pod(empty, "{volumeName: '', path: '', key: ''}"),
            vec![
                format!("{f}.key: Required value"),
                format!("{f}.volumeName: Required value"),
                format!("{f}.path: Required value"),
            ],
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
    }
}

#[test]
fn pod_level_rules() {
    let cases: Vec<(String, Vec<String>)> = vec![
        ("  containers: []\n".into(), vec!["spec.containers: Required value".into()]),
        (
            // the API server's sysctl grammar: a name cannot climb out of /proc/sys
            format!("{C}  securityContext:\n    sysctls:\n    - {{name: net.core.somaxconn, value: '1024'}}\n    - {{name: 'net.ipv4/../../kernel/core_pattern', value: x}}\n    - {{name: net.core.somaxconn, value: '1'}}\n    - {{name: '', value: x}}\n"),
            vec![
                "spec.securityContext.sysctls[1].name: Invalid value: \"net.ipv4/../../kernel/core_pattern\": must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$".into(),
                "spec.securityContext.sysctls[2].name: Duplicate value: \"net.core.somaxconn\"".into(),
                "spec.securityContext.sysctls[3].name: Required value".into(),
            ],
        ),
        (
            format!("{C}  hostNetwork: true\n  hostIPC: true\n  securityContext:\n    sysctls:\n    - {{name: net.core.somaxconn, value: '1024'}}\n    - {{name: kernel.shmmax, value: '1'}}\n    - {{name: kernel.hostname, value: x}}\n"),
            vec![
                "spec.securityContext.sysctls[0].name: Invalid value: \"net.core.somaxconn\": may not be specified when 'hostNetwork' is true".into(),
                "spec.securityContext.sysctls[1].name: Invalid value: \"kernel.shmmax\": may not be specified when 'hostIPC' is true".into(),
            ],
        ),
        (
            format!("{C}  restartPolicy: Sometimes\n"),
            vec!["spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"".into()],
        ),
        (
            format!("{C}  terminationGracePeriodSeconds: -1\n"),
            vec!["spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal to 0".into()],
        ),
        (
            format!("{C}  activeDeadlineSeconds: 0\n"),
            vec!["spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive".into()],
        ),
        (
            format!("{C}  dnsPolicy: Sometimes\n"),
            vec!["spec.dnsPolicy: Unsupported value: \"Sometimes\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"".into()],
        ),
        (
            format!("{C}  dnsPolicy: None\n"),
            vec!["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None".into()],
        ),
        (
            format!("{C}  hostname: Web_1\n"),
            vec![format!("spec.hostname: Invalid value: \"Web_1\": {}", label_msg("Web_1"))],
        ),
        (
            format!("{C}  tolerations:\n  - {{operator: Equal, value: x}}\n"),
            vec!["spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"".into()],
        ),
        (
            format!("{C}  tolerations:\n  - {{key: k, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}}\n"),
            vec!["spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set".into()],
        ),
        (
            format!("{C}  hostAliases:\n  - {{ip: 10.0.0, hostnames: [db]}}\n"),
            vec!["spec.hostAliases[0].ip: Invalid value: \"10.0.0\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into()],
        ),
        (
            format!("{C}  os: {{name: plan9}}\n"),
            vec!["spec.os.name: Unsupported value: \"plan9\": supported values: \"linux\", \"windows\"".into()],
        ),
        (
            format!("{C}  schedulingGates:\n  - name: wait\n"),
            vec!["spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared".into()],
        ),
        (
            format!("{C}  hostUsers: false\n  hostPID: true\n"),
            vec!["spec.hostPID: Forbidden: when `pod.Spec.HostUsers` is false".into()],
        ),
        (
            format!("{C}  ephemeralContainers:\n  - name: debug\n    image: busybox:1.36\n"),
            vec!["spec.ephemeralContainers: Forbidden: cannot be set on create".into()],
        ),
        (
            "  hostNetwork: true\n  containers:\n  - name: c\n    image: busybox:1.36\n    ports:\n    - {containerPort: 80, hostPort: 8080}\n".into(),
            vec!["spec.containers[0].ports[0].hostPort: Invalid value: 8080: must match `containerPort` when `hostNetwork` is true".into()],
        ),
        (
            "  containers:\n  - name: a\n    image: busybox:1.36\n    ports: [{containerPort: 80, hostPort: 8080}]\n  - name: b\n    image: busybox:1.36\n    ports: [{containerPort: 81, hostPort: 8080}]\n".into(),
            vec!["spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP//8080\"".into()],
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
    }
}

#[test]
fn static_pod_api_references() {
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            format!("{C}  serviceAccountName: builder\n"),
            vec!["spec.serviceAccountName: Forbidden: static pods may not reference serviceaccounts".into()],
        ),
        (
            format!("{C}  imagePullSecrets: [{{name: regcred}}]\n"),
            vec!["spec.imagePullSecrets: Forbidden: static pods may not reference secrets".into()],
        ),
        (
            with_container("    envFrom:\n    - configMapRef: {name: conf}\n"),
            vec!["spec.containers[0].envFrom[0].configMapRef: Forbidden: static pods may not reference configmaps".into()],
        ),
        (
            format!("{C}  volumes:\n  - name: a\n    projected:\n      sources:\n      - configMap: {{name: conf}}\n      - downwardAPI:\n          items: [{{path: n, fieldRef: {{fieldPath: metadata.name}}}}]\n"),
            vec!["spec.volumes[0].projected.sources[0].configMap: Forbidden: static pods may not reference configmaps (via projected volumes)".into()],
        ),
        (
            format!("{C}  volumes:\n  - name: a\n    persistentVolumeClaim: {{claimName: data}}\n"),
            vec!["spec.volumes[0].persistentVolumeClaim: Forbidden: static pods may not reference persistentvolumeclaims".into()],
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
    }
}

/// A static pod's UID, seccomp profile and stop signal end up in paths and signals: each
/// is held to the API's rules (the UID, which the API server sets itself for other pods, to
/// one path segment).
#[test]
fn uid_seccomp_and_stop_signal_rules() {
    let meta = |uid: &str| format!("  name: web-node1\n  namespace: default\n  uid: {uid:?}\n");
    let uid_cases: Vec<(String, Vec<String>)> = vec![
        ("0f9c1d3e-2b4a-4c5d-8e6f-7a8b9c0d1e2f".into(), vec![]),
        ("my-static-uid".into(), vec![]),
        (
            "../../etc".into(),
            vec!["metadata.uid: Invalid value: \"../../etc\": must not contain '/'".into()],
        ),
        (
            "a/b".into(),
            vec!["metadata.uid: Invalid value: \"a/b\": must not contain '/'".into()],
        ),
        (
            "..".into(),
            vec!["metadata.uid: Invalid value: \"..\": must not be '.' or '..'".into()],
        ),
        (
            ".".into(),
            vec!["metadata.uid: Invalid value: \".\": must not be '.' or '..'".into()],
        ),
        (
            "a\0b".into(),
            vec!["metadata.uid: Invalid value: \"a\\0b\": must not contain NUL".into()],
        ),
        (
            "u".repeat(256),
            vec![format!(
                "metadata.uid: Invalid value: \"{}\": must be no more than 255 bytes",
                "u".repeat(256)
            )],
        ),
    ];
    for (uid, want) in uid_cases {
        assert_eq!(errors_for_pod(&meta(&uid), C), want, "uid {uid:?}");
    }

    let c0 = "spec.containers[0]";
    let linux = "  os: {name: linux}\n";
    let mut linux_sorted = LINUX_STOP_SIGNALS.to_vec();
    linux_sorted.sort_unstable();
    let linux_list = linux_sorted
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let cases: Vec<(String, Vec<String>)> = vec![
        // seccomp
        (with_container("    securityContext:\n      seccompProfile: {type: Localhost, localhostProfile: profiles/audit.json}\n"), vec![]),
        (format!("{C}  securityContext:\n    seccompProfile: {{type: RuntimeDefault}}\n"), vec![]),
        (
            with_container("    securityContext:\n      seccompProfile: {type: Localhost, localhostProfile: ../../etc/shadow}\n"),
            vec![format!("{c0}.securityContext.seccompProfile.localhostProfile: Invalid value: \"../../etc/shadow\": must not contain '..'")],
        ),
        (
            format!("{C}  securityContext:\n    seccompProfile: {{type: Localhost, localhostProfile: /etc/shadow}}\n"),
            vec!["spec.securityContext.seccompProfile.localhostProfile: Invalid value: \"/etc/shadow\": must be a relative path".into()],
        ),
        (
            with_container("    securityContext:\n      seccompProfile: {type: Localhost}\n"),
            vec![format!("{c0}.securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost")],
        ),
        (
            with_container("    securityContext:\n      seccompProfile: {type: RuntimeDefault, localhostProfile: a.json}\n"),
            vec![format!("{c0}.securityContext.seccompProfile.localhostProfile: Invalid value: \"a.json\": can only be set when seccomp type is Localhost")],
        ),
        (
            with_container("    securityContext:\n      seccompProfile: {type: Whatever}\n"),
            vec![format!("{c0}.securityContext.seccompProfile.type: Unsupported value: \"Whatever\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\"")],
        ),
        // stopSignal
        (format!("{}{linux}", with_container("    lifecycle: {stopSignal: SIGUSR1}\n")), vec![]),
        (format!("{}{linux}", with_container("    lifecycle: {stopSignal: SIGRTMIN+1}\n")), vec![]),
        (format!("{}{linux}", with_container("    lifecycle: {stopSignal: SIGRTMAX-14}\n")), vec![]),
        (
            format!("{}{linux}", with_container("    lifecycle: {stopSignal: SIGRTMIN+16}\n")),
            vec![format!("{c0}.lifecycle.stopSignal: Unsupported value: \"SIGRTMIN+16\": supported values: {linux_list}")],
        ),
        (
            format!("{}{linux}", with_container("    lifecycle: {stopSignal: USR1}\n")),
            vec![format!("{c0}.lifecycle.stopSignal: Unsupported value: \"USR1\": supported values: {linux_list}")],
        ),
        (
            format!("{}  os: {{name: windows}}\n", with_container("    lifecycle: {stopSignal: SIGUSR1}\n")),
            vec![format!("{c0}.lifecycle.stopSignal: Unsupported value: \"SIGUSR1\": supported values: \"SIGKILL\", \"SIGTERM\"")],
        ),
        (
            with_container("    lifecycle: {stopSignal: SIGTERM}\n"),
            vec![format!("{c0}.lifecycle.stopSignal: Forbidden: may not be set for containers with empty `spec.os.name`")],
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
    }
}

/// API pods come from the API server, which validated them: only static pods are held
/// to the no-API-references rule (`validate_static_pod` runs for manifests only).
#[test]
fn api_pods_may_reference_api_objects() {
    let src = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n    envFrom:\n    - configMapRef: {name: conf}\n      prefix: APP_\n    - secretRef: {name: creds, optional: true}\n    env:\n    - name: PW\n      valueFrom: {secretKeyRef: {name: creds, key: password}}\n    - name: LEVEL\n      valueFrom: {configMapKeyRef: {name: conf, key: level, optional: true}}\n    volumeMounts:\n    - {name: a, mountPath: /a}\n    - {name: b, mountPath: /b}\n    - {name: p, mountPath: /p}\n  volumes:\n  - name: a\n    configMap: {name: conf, items: [{key: level, path: lvl, mode: 256}]}\n  - name: b\n    secret: {secretName: creds, defaultMode: 256}\n  - name: p\n    projected:\n      sources:\n      - configMap: {name: conf}\n      - secret: {name: creds}\n      - downwardAPI:\n          items: [{path: n, fieldRef: {fieldPath: metadata.name}}]\n";
    let mut pod: Pod = serde_yaml::from_str(src).unwrap();
    apply_defaults(&mut pod);
    let api: Vec<String> = validate_pod(&pod).iter().map(|e| e.to_string()).collect();
    assert!(api.is_empty(), "{api:?}");
    let static_errors: Vec<String> = validate_static_pod(&pod)
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(static_errors.len(), 8, "{static_errors:?}");
    assert!(static_errors
        .iter()
        .all(|e| e.contains("Forbidden: static pods may not reference")));
}

#[test]
fn every_error_is_collected() {
    let spec = "  restartPolicy: Sometimes\n  containers:\n  - name: Bad_Name\n  - name: ok\n    image: x\n    ports: [{containerPort: 0}]\n";
    let errs = errors_for(spec);
    let paths: Vec<&str> = errs.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        paths,
        vec![
            "spec.containers[0].name",
            "spec.containers[0].image",
            "spec.containers[1].ports[0].containerPort",
            "spec.restartPolicy",
        ]
    );
}
