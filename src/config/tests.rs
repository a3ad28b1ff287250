use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::decode::IMPLEMENTED_FIELDS;
use super::kubelet_fields::{Accepts, FIXED_FIELDS, FIXED_LOGGING_FIELDS};
use super::*;

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn env() -> Environment {
    Environment {
        hostname: "Node-1".to_string(),
    }
}

fn source() -> &'static Path {
    Path::new("/etc/nodelet/config.yaml")
}

fn parse_body(body: &str) -> Result<Loaded> {
    parse(&format!("{HEADER}{body}"), source(), &env())
}

fn ok(body: &str) -> Loaded {
    match parse_body(body) {
        Ok(loaded) => loaded,
        Err(e) => panic!("body {body:?} was rejected: {e}"),
    }
}

fn field_errors(text: &str) -> Vec<String> {
    match parse(text, source(), &env()) {
        Err(Error::Invalid { errors, .. }) => errors.iter().map(ToString::to_string).collect(),
        other => panic!("text {text:?}: expected Error::Invalid, got {other:?}"),
    }
}

fn warnings(loaded: &Loaded) -> Vec<String> {
    loaded.warnings.iter().map(ToString::to_string).collect()
}

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

#[test]
fn defaults_match_the_kubelet_and_the_brief() {
    let c = Config::defaults(&env());
    assert_eq!(
        c.container_runtime_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(c.image_service_endpoint, c.container_runtime_endpoint);
    assert_eq!(c.static_pod_path, None);
    assert_eq!(c.file_check_frequency, s(20));
    assert_eq!(c.sync_frequency, s(60));
    assert_eq!(c.pod_logs_dir, PathBuf::from("/var/log/pods"));
    assert_eq!(c.cgroup_driver, CgroupDriver::Cgroupfs);
    assert!(c.cgroups_per_qos);
    assert_eq!(c.cgroup_root, "/");
    assert_eq!(c.max_pods, 110);
    assert_eq!(c.node_status_max_images, Some(50));
    assert_eq!(c.address, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    assert_eq!(c.port, 10250);
    assert_eq!(c.tls_cert_file, None);
    assert_eq!(c.authentication.client_ca_file, None);
    assert!(c.authentication.webhook_enabled);
    assert_eq!(c.authentication.webhook_cache_ttl, s(120));
    assert!(!c.authentication.anonymous_enabled);
    assert_eq!(c.authorization.mode, AuthorizationMode::Webhook);
    assert_eq!(c.authorization.cache_authorized_ttl, s(300));
    assert_eq!(c.authorization.cache_unauthorized_ttl, s(30));
    assert_eq!(c.read_only_port, 0);
    assert_eq!(c.healthz_port, 10248);
    assert_eq!(c.healthz_bind_address, IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert!(c.cluster_dns.is_empty());
    assert_eq!(c.cluster_domain, "");
    assert_eq!(c.resolv_conf, PathBuf::from("/etc/resolv.conf"));
    assert_eq!(c.runtime_request_timeout, s(120));
    assert!(c.serialize_image_pulls);
    assert!(c.feature_gates.is_empty());
    assert_eq!(
        c.logging,
        Logging {
            format: LogFormat::Text,
            verbosity: 0
        }
    );
    assert_eq!(c.node_status_update_frequency, s(10));
    assert_eq!(c.node_status_report_frequency, s(300));
    assert_eq!(c.node_lease_duration_seconds, 40);
    assert_eq!((c.kube_api_qps, c.kube_api_burst), (50, 100));
    assert_eq!(c.crash_loop_back_off.max_container_restart_period, s(300));
    assert_eq!(c.root_dir, PathBuf::from("/var/lib/nodelet"));
    assert_eq!(c.node_name, "node-1");
    assert_eq!(c.node_ip, None);
    assert_eq!(c.containerd_endpoint, c.container_runtime_endpoint);
    assert_eq!(c.containerd_namespace, "k8s.io");
    assert_eq!(c.pleg_relist_period, s(5));
}

#[test]
fn empty_documents_give_the_defaults() {
    let cases: &[&str] = &[
        "",
        "\n\n",
        "# nothing configured yet\n",
        "---\n",
        HEADER,
        "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n",
    ];
    for text in cases {
        let loaded = parse(text, source(), &env()).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(loaded.config, Config::defaults(&env()), "text {text:?}");
        assert!(
            loaded.warnings.is_empty(),
            "text {text:?}: {:?}",
            loaded.warnings
        );
    }
}

#[test]
fn every_implemented_field_accepts_null_as_unset() {
    for name in IMPLEMENTED_FIELDS
        .iter()
        .filter(|n| !["apiVersion", "kind"].contains(n))
    {
        let loaded = ok(&format!("{name}:\n"));
        assert_eq!(loaded.config, Config::defaults(&env()), "field {name}");
        assert!(loaded.warnings.is_empty(), "field {name}");
    }
}

#[test]
fn each_field_happy_path() {
    type Expect = fn(&mut Config);
    let cases: &[(&str, Expect)] = &[
        (
            "containerRuntimeEndpoint: unix:///run/crio/crio.sock",
            |c| {
                c.container_runtime_endpoint = "unix:///run/crio/crio.sock".into();
                c.image_service_endpoint = "unix:///run/crio/crio.sock".into();
                c.containerd_endpoint = "unix:///run/crio/crio.sock".into();
            },
        ),
        ("containerRuntimeEndpoint: ''", |_| {}),
        ("imageServiceEndpoint: unix:///run/images.sock", |c| {
            c.image_service_endpoint = "unix:///run/images.sock".into()
        }),
        ("staticPodPath: /etc/kubernetes/manifests", |c| {
            c.static_pod_path = Some("/etc/kubernetes/manifests".into())
        }),
        ("staticPodPath: ''", |_| {}),
        ("fileCheckFrequency: 5s", |c| c.file_check_frequency = s(5)),
        ("fileCheckFrequency: 0s", |_| {}),
        ("syncFrequency: 1m30s", |c| c.sync_frequency = s(90)),
        ("syncFrequency: \"0\"", |_| {}),
        ("podLogsDir: /srv/logs/pods", |c| {
            c.pod_logs_dir = "/srv/logs/pods".into()
        }),
        ("podLogsDir: ''", |_| {}),
        ("cgroupDriver: systemd", |c| {
            c.cgroup_driver = CgroupDriver::Systemd
        }),
        ("cgroupDriver: cgroupfs", |_| {}),
        ("cgroupsPerQOS: false", |c| c.cgroups_per_qos = false),
        ("cgroupRoot: /kubelet", |c| {
            c.cgroup_root = "/kubelet".into()
        }),
        ("cgroupRoot: ''", |_| {}),
        ("maxPods: 250", |c| c.max_pods = 250),
        ("enableServer: false", |c| c.kubelet_server.enable_server = false),
        ("enableServer: true", |_| {}),
        ("enableDebuggingHandlers: false", |c| {
            c.kubelet_server.enable_debugging_handlers = false
        }),
        ("enableSystemLogHandler: false", |c| {
            c.kubelet_server.enable_system_log_handler = false
        }),
        ("enableProfilingHandler: false", |c| {
            c.kubelet_server.enable_profiling_handler = false
        }),
        ("enableDebugFlagsHandler: false", |c| {
            c.kubelet_server.enable_debug_flags_handler = false
        }),
        ("enableSystemLogQuery: false", |_| {}),
        ("enableContentionProfiling: false", |_| {}),
        ("streamingConnectionIdleTimeout: 2s", |c| {
            c.kubelet_server.streaming_idle_timeout = s(2)
        }),
        ("streamingConnectionIdleTimeout: 0s", |_| {}),
        // Go's largest duration: kept as written (the relay saturates it to "never").
        ("streamingConnectionIdleTimeout: 2562047h47m16.854775807s", |c| {
            c.kubelet_server.streaming_idle_timeout = Duration::new(9_223_372_036, 854_775_807)
        }),
        ("tlsMinVersion: VersionTLS13", |c| {
            c.kubelet_server.tls.min_version = kubelet_server::TlsVersion::Tls13
        }),
        ("tlsMinVersion: ''", |_| {}),
        ("tlsCipherSuites: [TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305, TLS_AES_128_GCM_SHA256]", |c| {
            c.kubelet_server.tls.cipher_suites_tls12 =
                vec![kubelet_server::CipherSuite::EcdheEcdsaChacha20Poly1305];
            c.kubelet_server.tls.cipher_suites_set = true;
        }),
        ("tlsCipherSuites: []", |_| {}),
        ("tlsCurvePreferences: [24, 29]", |c| {
            c.kubelet_server.tls.curve_preferences =
                vec![kubelet_server::KxGroup::Secp384r1, kubelet_server::KxGroup::X25519]
        }),
        ("nodeStatusMaxImages: 3", |c| {
            c.node_status_max_images = Some(3)
        }),
        ("nodeStatusMaxImages: 0", |c| {
            c.node_status_max_images = Some(0)
        }),
        ("nodeStatusMaxImages: -1", |c| {
            c.node_status_max_images = None
        }),
        ("address: 127.0.0.1", |c| {
            c.address = IpAddr::V4(Ipv4Addr::LOCALHOST)
        }),
        ("port: 10350", |c| c.port = 10350),
        ("port: 0", |c| c.port = 0),
        ("tlsCertFile: /etc/n/c.pem\ntlsPrivateKeyFile: /etc/n/k.pem", |c| {
            c.tls_cert_file = Some(PathBuf::from("/etc/n/c.pem"));
            c.tls_private_key_file = Some(PathBuf::from("/etc/n/k.pem"));
        }),
        ("authentication:\n  x509:\n    clientCAFile: /etc/n/ca.pem\n  webhook:\n    enabled: false\n    cacheTTL: 10s\n  anonymous:\n    enabled: true", |c| {
            c.authentication.client_ca_file = Some(PathBuf::from("/etc/n/ca.pem"));
            c.authentication.webhook_enabled = false;
            c.authentication.webhook_cache_ttl = s(10);
            c.authentication.anonymous_enabled = true;
        }),
        ("authorization:\n  mode: AlwaysAllow\n  webhook:\n    cacheAuthorizedTTL: 1m\n    cacheUnauthorizedTTL: 5s", |c| {
            c.authorization.mode = AuthorizationMode::AlwaysAllow;
            c.authorization.cache_authorized_ttl = s(60);
            c.authorization.cache_unauthorized_ttl = s(5);
        }),
        ("authorization:\n  mode: ''", |_| {}),
        ("address: '::1'", |c| {
            c.address = IpAddr::V6(Ipv6Addr::LOCALHOST)
        }),
        ("address: ''", |_| {}),
        ("readOnlyPort: 10255", |c| c.read_only_port = 10255),
        ("readOnlyPort: 0", |_| {}),
        ("healthzPort: 0", |c| c.healthz_port = 0),
        ("healthzPort: 65535", |c| c.healthz_port = 65535),
        ("healthzBindAddress: 0.0.0.0", |c| {
            c.healthz_bind_address = IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        }),
        ("clusterDNS: [10.96.0.10, 'fd00::a']", |c| {
            c.cluster_dns = vec!["10.96.0.10".parse().unwrap(), "fd00::a".parse().unwrap()]
        }),
        ("clusterDNS: []", |_| {}),
        ("clusterDomain: cluster.local", |c| {
            c.cluster_domain = "cluster.local".into()
        }),
        ("resolvConf: /run/systemd/resolve/resolv.conf", |c| {
            c.resolv_conf = "/run/systemd/resolve/resolv.conf".into()
        }),
        ("resolvConf: ''", |c| c.resolv_conf = PathBuf::new()),
        ("runtimeRequestTimeout: 10m", |c| {
            c.runtime_request_timeout = s(600)
        }),
        ("serializeImagePulls: false", |c| {
            c.serialize_image_pulls = false
        }),
        ("serializeImagePulls: false\nmaxParallelImagePulls: 3", |c| {
            c.serialize_image_pulls = false;
            c.max_parallel_image_pulls = Some(3)
        }),
        ("maxParallelImagePulls: 1", |c| {
            c.max_parallel_image_pulls = Some(1)
        }),
        (
            "imageCredentialProviderConfig: /etc/nodelet/providers.yaml\nimageCredentialProviderBinDir: /usr/libexec/nodelet",
            |c| {
                c.image_credential_provider_config = Some("/etc/nodelet/providers.yaml".into());
                c.image_credential_provider_bin_dir = Some("/usr/libexec/nodelet".into())
            },
        ),
        (
            "featureGates: {ContainerStopSignals: true, KubeletCrashLoopBackOffMax: false}",
            |c| {
                c.feature_gates = BTreeMap::from([
                    ("ContainerStopSignals".to_string(), true),
                    ("KubeletCrashLoopBackOffMax".to_string(), false),
                ])
            },
        ),
        ("userNamespaces: {idsPerPod: 131072}", |c| {
            c.user_namespaces_ids_per_pod = 131072
        }),
        ("userNamespaces: {}", |_| {}),
        ("featureGates: {CSIVolumeHealth: true}", |c| {
            c.feature_gates = BTreeMap::from([("CSIVolumeHealth".to_string(), true)])
        }),
        ("logging: {format: json, verbosity: 4}", |c| {
            c.logging = Logging {
                format: LogFormat::Json,
                verbosity: 4,
            }
        }),
        ("logging: {format: ''}", |_| {}),
        ("logging: {}", |_| {}),
        ("nodeStatusUpdateFrequency: 20s", |c| {
            c.node_status_update_frequency = s(20);
            c.node_status_report_frequency = s(20);
        }),
        ("nodeStatusReportFrequency: 1m", |c| {
            c.node_status_report_frequency = s(60)
        }),
        (
            "nodeStatusUpdateFrequency: 20s\nnodeStatusReportFrequency: 1m",
            |c| {
                c.node_status_update_frequency = s(20);
                c.node_status_report_frequency = s(60);
            },
        ),
        ("nodeLeaseDurationSeconds: 60", |c| {
            c.node_lease_duration_seconds = 60
        }),
        ("nodeLeaseDurationSeconds: 0", |_| {}),
        ("kubeAPIQPS: 0", |c| c.kube_api_qps = 0),
        ("kubeAPIQPS: 20", |c| c.kube_api_qps = 20),
        ("kubeAPIBurst: 40", |c| c.kube_api_burst = 40),
        ("kubeAPIBurst: 0", |_| {}),
        ("crashLoopBackOff: {maxContainerRestartPeriod: 100s}", |c| {
            c.crash_loop_back_off.max_container_restart_period = s(100)
        }),
        ("crashLoopBackOff: {maxContainerRestartPeriod: 1s}", |c| {
            c.crash_loop_back_off.max_container_restart_period = s(1)
        }),
        ("crashLoopBackOff: {maxContainerRestartPeriod: 5m}", |_| {}),
        ("crashLoopBackOff: {}", |_| {}),
        ("rootDir: /var/lib/nodelet-test", |c| {
            c.root_dir = "/var/lib/nodelet-test".into();
            // `certDir` follows `rootDir` (the kubelet's `--cert-dir` default).
            c.cert_dir = "/var/lib/nodelet-test/pki".into();
        }),
        ("nodeName: Worker-7.Example.COM", |c| {
            c.node_name = "worker-7.example.com".into()
        }),
        ("nodeName: ''", |_| {}),
        ("nodeIP: 192.168.1.20", |c| {
            c.node_ip = Some("192.168.1.20".parse().unwrap())
        }),
        ("nodeIP: '2001:db8::20'", |c| {
            c.node_ip = Some("2001:db8::20".parse().unwrap())
        }),
        (
            "containerdEndpoint: unix:///run/containerd/other.sock",
            |c| c.containerd_endpoint = "unix:///run/containerd/other.sock".into(),
        ),
        ("containerdNamespace: nodelet-test", |c| {
            c.containerd_namespace = "nodelet-test".into()
        }),
        ("plegRelistPeriod: 1s", |c| c.pleg_relist_period = s(1)),
    ];
    for (body, expect) in cases {
        let loaded = ok(body);
        let mut want = Config::defaults(&env());
        expect(&mut want);
        assert_eq!(loaded.config, want, "body {body:?}");
        assert!(
            loaded.warnings.is_empty(),
            "body {body:?}: {:?}",
            loaded.warnings
        );
    }
}

#[test]
fn field_errors_name_the_path_and_the_value() {
    let cases: &[(&str, &[&str])] = &[
        // wrong types
        ("maxPods: many", &["maxPods: Invalid value: \"many\": expected an integer"]),
        // the kubelet server's settings nodelet refuses, each naming field and value
        ("tlsMinVersion: VersionTLS10", &["tlsMinVersion: Invalid value: \"VersionTLS10\": refused by nodelet: its TLS library (rustls) implements only TLS 1.2 and 1.3; use VersionTLS12 or VersionTLS13"]),
        ("tlsMinVersion: VersionTLS11", &["tlsMinVersion: Invalid value: \"VersionTLS11\": refused by nodelet: its TLS library (rustls) implements only TLS 1.2 and 1.3; use VersionTLS12 or VersionTLS13"]),
        ("tlsMinVersion: TLS13", &["tlsMinVersion: Unsupported value: \"TLS13\": unknown tls version; supported values: \"VersionTLS12\", \"VersionTLS13\" (the kubelet's \"VersionTLS10\" and \"VersionTLS11\" are refused by nodelet)"]),
        ("tlsMinVersion: 13", &["tlsMinVersion: Invalid value: 13: expected a string"]),
        ("tlsCipherSuites: [TLS_RSA_WITH_3DES_EDE_CBC_SHA]", &["tlsCipherSuites[0]: Invalid value: \"TLS_RSA_WITH_3DES_EDE_CBC_SHA\": refused by nodelet: an insecure or non-AEAD suite its TLS library (rustls) does not implement; served suites: TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256"]),
        ("tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, NOPE]", &["tlsCipherSuites[1]: Unsupported value: \"NOPE\": Cipher suite NOPE not supported or doesn't exist; supported values: TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256"]),
        ("tlsCipherSuites: TLS_AES_128_GCM_SHA256", &["tlsCipherSuites: Invalid value: \"TLS_AES_128_GCM_SHA256\": expected a list"]),
        ("tlsCipherSuites: [1]", &["tlsCipherSuites[0]: Invalid value: 1: expected a string"]),
        ("tlsCurvePreferences: [25]", &["tlsCurvePreferences[0]: Invalid value: 25: refused by nodelet: curve 25 is not implemented by its TLS library (rustls with ring); supported: 23 (P-256), 24 (P-384), 29 (X25519)"]),
        ("tlsCurvePreferences: [29, 29]", &["tlsCurvePreferences[1]: Invalid value: 29: duplicate curve preference 29"]),
        ("tlsCurvePreferences: [0]", &["tlsCurvePreferences[0]: Invalid value: 0: curve preference 0 is out of range (must be 1-65535)"]),
        ("tlsCurvePreferences: [9999999999]", &["tlsCurvePreferences[0]: Invalid value: 9999999999: curve preference 9999999999 is out of range (must be 1-65535)"]),
        ("tlsCurvePreferences: [29, x]", &["tlsCurvePreferences[1]: Invalid value: \"x\": expected an integer"]),
        ("enableSystemLogQuery: true", &["enableSystemLogQuery: Invalid value: true: refused by nodelet: nodelet serves no node log query (/logs/?query=); the kubelet needs the NodeLogQuery feature gate for it"]),
        ("enableContentionProfiling: true", &["enableContentionProfiling: Invalid value: true: refused by nodelet: a Go runtime setting (block profiling); nodelet has no such profiler"]),
        ("enableServer: 'no'", &["enableServer: Invalid value: \"no\": expected a boolean (true or false)"]),
        ("streamingConnectionIdleTimeout: 4 hours", &["streamingConnectionIdleTimeout: Invalid value: \"4 hours\": unknown unit \" hours\" in duration (use one of \"ns\", \"us\", \"ms\", \"s\", \"m\", \"h\")"]),
        ("maxParallelImagePulls: 2", &["maxParallelImagePulls: Invalid value: 2: must be 1 or unset when serializeImagePulls is true"]),
        ("serializeImagePulls: false\nmaxParallelImagePulls: 0", &["maxParallelImagePulls: Invalid value: 0: must be greater than 0"]),
        ("imageCredentialProviderConfig: providers.yaml", &["imageCredentialProviderConfig: Invalid value: \"providers.yaml\": must be an absolute path"]),
        ("imageCredentialProviderConfig: /etc/p.yaml", &["imageCredentialProviderBinDir: Required value: must be set together with imageCredentialProviderConfig"]),
        ("imageCredentialProviderBinDir: /usr/libexec/nodelet", &["imageCredentialProviderConfig: Required value: must be set together with imageCredentialProviderBinDir"]),
        ("maxPods: 1.5", &["maxPods: Invalid value: 1.5: expected an integer"]),
        ("maxPods: '110'", &["maxPods: Invalid value: \"110\": expected an integer"]),
        ("cgroupsPerQOS: 'true'", &["cgroupsPerQOS: Invalid value: \"true\": expected a boolean (true or false)"]),
        ("syncFrequency: 60", &["syncFrequency: Invalid value: 60: expected a duration string such as \"30s\" or \"1m30s\""]),
        ("clusterDomain: [a]", &["clusterDomain: Invalid value: [\"a\"]: expected a string"]),
        ("clusterDNS: 10.0.0.10", &["clusterDNS: Invalid value: \"10.0.0.10\": expected a list of IP addresses"]),
        ("clusterDNS: [10.0.0.10, 53]", &["clusterDNS[1]: Invalid value: 53: expected a string"]),
        ("logging: json", &["logging: Invalid value: \"json\": expected a mapping"]),
        ("featureGates: [a]", &["featureGates: Invalid value: [\"a\"]: expected a mapping"]),
        ("featureGates: {Foo: yes}", &["featureGates.Foo: Invalid value: \"yes\": expected a boolean (true or false)"]),
        ("readOnlyPort: 18446744073709551615", &["readOnlyPort: Invalid value: 18446744073709551615: out of range"]),
        // bad values
        ("maxPods: 0", &["maxPods: Invalid value: 0: must be greater than 0"]),
        ("maxPods: -5", &["maxPods: Invalid value: -5: must be greater than 0"]),
        ("tlsCertFile: /etc/n/c.pem", &["tlsPrivateKeyFile: Required value: must be set together with tlsCertFile"]),
        ("tlsPrivateKeyFile: /etc/n/k.pem", &["tlsCertFile: Required value: must be set together with tlsPrivateKeyFile"]),
        ("tlsCertFile: c.pem\ntlsPrivateKeyFile: /k.pem", &["tlsCertFile: Invalid value: \"c.pem\": must be an absolute path"]),
        ("authorization:\n  mode: RBAC", &["authorization.mode: Invalid value: \"RBAC\": must be \"AlwaysAllow\" or \"Webhook\""]),
        ("authentication:\n  x509:\n    clientCaFile: /ca.pem", &["authentication.x509.clientCaFile: Unknown field: did you mean \"clientCAFile\"?"]),
        ("authentication:\n  webhook:\n    enabled: yes please", &["authentication.webhook.enabled: Invalid value: \"yes please\": expected a boolean (true or false)"]),
        ("authorization:\n  webhook:\n    cacheAuthorizedTTL: soon", &["authorization.webhook.cacheAuthorizedTTL: Invalid value: \"soon\": invalid duration (expected a Go duration such as \"1m30s\", \"500ms\", \"2h\")"]),
        ("port: 70000", &["port: Invalid value: 70000: must be between 0 and 65535, inclusive (0 disables it)"]),
        ("nodeStatusMaxImages: -2", &["nodeStatusMaxImages: Invalid value: -2: must be -1 or greater"]),
        ("nodeStatusMaxImages: lots", &["nodeStatusMaxImages: Invalid value: \"lots\": expected an integer"]),
        ("maxPods: 3000000000", &["maxPods: Invalid value: 3000000000: must be at most 2147483647"]),
        ("cgroupDriver: foo", &["cgroupDriver: Unsupported value: \"foo\": supported values: \"cgroupfs\", \"systemd\""]),
        ("cgroupRoot: kubepods", &["cgroupRoot: Invalid value: \"kubepods\": must be an absolute cgroup path such as \"/\" or \"/kubelet\""]),
        ("syncFrequency: -1s", &["syncFrequency: Invalid value: \"-1s\": must not be negative"]),
        ("fileCheckFrequency: '5'", &["fileCheckFrequency: Invalid value: \"5\": missing unit in duration (use one of \"ns\", \"us\", \"ms\", \"s\", \"m\", \"h\", e.g. \"30s\")"]),
        ("runtimeRequestTimeout: 2 minutes", &["runtimeRequestTimeout: Invalid value: \"2 minutes\": unknown unit \" minutes\" in duration (use one of \"ns\", \"us\", \"ms\", \"s\", \"m\", \"h\")"]),
        ("nodeStatusUpdateFrequency: soon", &["nodeStatusUpdateFrequency: Invalid value: \"soon\": invalid duration (expected a Go duration such as \"1m30s\", \"500ms\", \"2h\")"]),
        ("podLogsDir: var/log/pods", &["podLogsDir: Invalid value: \"var/log/pods\": must be an absolute path"]),
        ("podLogsDir: /var/log/pods/", &["podLogsDir: Invalid value: \"/var/log/pods/\": must be normalized (no trailing slash, \"//\", \".\" or \"..\")"]),
        ("podLogsDir: /var/log/pöds", &["podLogsDir: Invalid value: \"/var/log/pöds\": must contain ASCII characters only"]),
        ("rootDir: nodelet", &["rootDir: Invalid value: \"nodelet\": must be an absolute path"]),
        ("staticPodPath: manifests", &["staticPodPath: Invalid value: \"manifests\": must be an absolute path"]),
        ("resolvConf: resolv.conf", &["resolvConf: Invalid value: \"resolv.conf\": must be an absolute path"]),
        ("readOnlyPort: 70000", &["readOnlyPort: Invalid value: 70000: must be between 0 and 65535, inclusive (0 disables it)"]),
        ("healthzPort: -1", &["healthzPort: Invalid value: -1: must be between 0 and 65535, inclusive (0 disables it)"]),
        ("address: 1.2.3", &["address: Invalid value: \"1.2.3\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]),
        ("healthzBindAddress: localhost", &["healthzBindAddress: Invalid value: \"localhost\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]),
        ("clusterDNS: [10.96.0.10, nope, '']", &[
            "clusterDNS[1]: Invalid value: \"nope\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            "clusterDNS[2]: Invalid value: \"\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ]),
        ("nodeIP: 127.0.0.1", &["nodeIP: Invalid value: \"127.0.0.1\": must not be a loopback address"]),
        ("nodeIP: 0.0.0.0", &["nodeIP: Invalid value: \"0.0.0.0\": must not be an all-zeros address"]),
        ("nodeIP: 224.0.0.1", &["nodeIP: Invalid value: \"224.0.0.1\": must not be a multicast address"]),
        ("nodeIP: 'fe80::1'", &["nodeIP: Invalid value: \"fe80::1\": must not be a link-local unicast address"]),
        ("nodeLeaseDurationSeconds: -1", &["nodeLeaseDurationSeconds: Invalid value: -1: must be greater than 0"]),
        ("kubeAPIQPS: -1", &["kubeAPIQPS: Invalid value: -1: must not be a negative number"]),
        ("kubeAPIBurst: -1", &["kubeAPIBurst: Invalid value: -1: must not be a negative number"]),
        ("logging: {format: xml}", &["logging.format: Unsupported value: \"xml\": supported values: \"json\", \"text\""]),
        ("logging: {verbosity: -2}", &["logging.verbosity: Invalid value: -2: must not be negative"]),
        ("crashLoopBackOff: {maxContainerRestartPeriod: 301s}", &["crashLoopBackOff.maxContainerRestartPeriod: Invalid value: \"301s\": must be between 1s and 300s, inclusive"]),
        ("crashLoopBackOff: {maxContainerRestartPeriod: 500ms}", &["crashLoopBackOff.maxContainerRestartPeriod: Invalid value: \"500ms\": must be between 1s and 300s, inclusive"]),
        ("crashLoopBackOff: {maxContainerRestartPeriod: 0s}", &["crashLoopBackOff.maxContainerRestartPeriod: Invalid value: \"0s\": must be between 1s and 300s, inclusive"]),
        ("containerRuntimeEndpoint: tcp://10.0.0.1:5000", &["containerRuntimeEndpoint: Invalid value: \"tcp://10.0.0.1:5000\": protocol \"tcp\" not supported; only unix:// endpoints are supported on Linux"]),
        ("imageServiceEndpoint: containerd.sock", &["imageServiceEndpoint: Invalid value: \"containerd.sock\": must be a unix socket URL such as \"unix:///run/containerd/containerd.sock\""]),
        ("containerdEndpoint: unix://run/containerd.sock", &["containerdEndpoint: Invalid value: \"unix://run/containerd.sock\": a unix:// endpoint needs an absolute socket path, e.g. \"unix:///run/containerd/containerd.sock\""]),
        ("containerdNamespace: k8s io", &["containerdNamespace: Invalid value: \"k8s io\": must be at most 76 characters of letters and digits, separated by single '.', '_' or '-'"]),
        ("plegRelistPeriod: 0s", &["plegRelistPeriod: Invalid value: \"0s\": must be greater than 0"]),
        ("nodeName: my_node", &["nodeName: Invalid value: \"my_node\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"]),
        // feature gate rules
        ("featureGates: {InPlacePodVerticalScaling: false}", &["featureGates.InPlacePodVerticalScaling: Forbidden: cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true"]),
        // GA and locked in v1.37 (the kubelet refuses false too).
        ("featureGates: {UserNamespacesSupport: false}", &["featureGates.UserNamespacesSupport: Forbidden: cannot set feature gate UserNamespacesSupport to false, feature is locked to true"]),
        // Removed from the kubelet in v1.37 (GA since v1.33).
        ("featureGates: {SidecarContainers: true}", &["featureGates.SidecarContainers: Invalid value: true: unrecognized feature gate: SidecarContainers"]),
        // The kubelet's gate dependencies.
        ("featureGates: {GracefulNodeShutdown: false}", &[
            "featureGates: Invalid value: GracefulNodeShutdownBasedOnPodPriority is enabled, but depends on features that are disabled: [GracefulNodeShutdown]",
            "featureGates: Invalid value: WindowsGracefulNodeShutdown is enabled, but depends on features that are disabled: [GracefulNodeShutdown]",
        ]),
        // Read by the kubelet, not acted on by nodelet: only at the kubelet's default.
        ("featureGates: {PodAndContainerStatsFromCRI: true}", &["featureGates.PodAndContainerStatsFromCRI: Invalid value: true: nodelet implements only PodAndContainerStatsFromCRI=false: the kubelet reads this gate; nodelet runs as with it at its default, and what a pod or the configuration asks of a feature nodelet lacks is refused there, naming the field"]),
        ("featureGates: {KubeletCrashLoopBackOffMax: false}\ncrashLoopBackOff: {maxContainerRestartPeriod: 100s}", &["crashLoopBackOff.maxContainerRestartPeriod: Forbidden: may only be set when feature gate KubeletCrashLoopBackOffMax is enabled"]),
        ("userNamespaces: {idsPerPod: 1000}", &["userNamespaces.idsPerPod: Invalid value: 1000: must not be less than 65536"]),
        ("userNamespaces: {idsPerPod: 100000}", &["userNamespaces.idsPerPod: Invalid value: 100000: must be a multiple of 65536"]),
        ("userNamespaces: {idsPerPod: 4295032832}", &["userNamespaces.idsPerPod: Invalid value: 4295032832: must not be more than 4294967295"]),
        ("userNamespaces: {idsPerPod: many}", &["userNamespaces.idsPerPod: Invalid value: \"many\": expected an integer"]),
        ("userNamespaces: {idPerPod: 65536}", &["userNamespaces.idPerPod: Unknown field"]),
        // unknown fields
        ("fooBar: 1", &["fooBar: Unknown field"]),
        ("MaxPods: 3", &["MaxPods: Unknown field: did you mean \"maxPods\"?"]),
        ("evictionhard: {}", &["evictionhard: Unknown field: did you mean \"evictionHard\"?"]),
        ("metadata: {name: x}", &["metadata: Unknown field"]),
        ("logging: {colour: red}", &["logging.colour: Unknown field"]),
        ("logging: {Format: json}", &["logging.Format: Unknown field: did you mean \"format\"?"]),
        ("crashLoopBackOff: {maxRestartPeriod: 10s}", &["crashLoopBackOff.maxRestartPeriod: Unknown field"]),
        ("1: one", &["1: Unknown field"]),
    ];
    for (body, want) in cases {
        let got = field_errors(&format!("{HEADER}{body}"));
        assert_eq!(&got, want, "body {body:?}");
    }
}

#[test]
fn type_meta_is_required_and_checked() {
    let cases: &[(&str, &[&str])] = &[
        ("{}", &[
            "apiVersion: Required value: must be \"kubelet.config.k8s.io/v1beta1\"",
            "kind: Required value: must be \"KubeletConfiguration\"",
        ]),
        ("kind: KubeletConfiguration\nmaxPods: 3", &["apiVersion: Required value: must be \"kubelet.config.k8s.io/v1beta1\""]),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\nmaxPods: 3", &["kind: Required value: must be \"KubeletConfiguration\""]),
        ("apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration", &[
            "apiVersion: Unsupported value: \"kubelet.config.k8s.io/v1\": supported values: \"kubelet.config.k8s.io/v1beta1\"",
        ]),
        ("apiVersion: v1\nkind: Pod", &[
            "apiVersion: Unsupported value: \"v1\": supported values: \"kubelet.config.k8s.io/v1beta1\"",
            "kind: Unsupported value: \"Pod\": supported values: \"KubeletConfiguration\"",
        ]),
        ("apiVersion: ''\nkind: KubeletConfiguration", &["apiVersion: Required value: must be \"kubelet.config.k8s.io/v1beta1\""]),
        ("apiVersion: 1\nkind: KubeletConfiguration", &["apiVersion: Invalid value: 1: expected a string"]),
    ];
    for (text, want) in cases {
        assert_eq!(&field_errors(text), want, "text {text:?}");
    }
}

#[test]
fn warnings_are_the_kubelets_own_and_never_say_ignored() {
    let cases: &[(&str, &[&str])] = &[
        ("runOnce: false", &[]),
        // The kubelet server's settings are honoured: no "ignored" line.
        ("tlsMinVersion: VersionTLS12\nstreamingConnectionIdleTimeout: 4h\nenableServer: true\nenableDebuggingHandlers: false\nenableSystemLogHandler: false\nenableProfilingHandler: false\nenableDebugFlagsHandler: false\nenableSystemLogQuery: false\nenableContentionProfiling: false\ntlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\ntlsCurvePreferences: [29, 23]", &[]),
        ("tlsMinVersion: VersionTLS13\ntlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]", &[
            "tlsCipherSuites: with tlsMinVersion VersionTLS13 the suites are TLS 1.3's own, which are not configurable: this list has no effect (as in the kubelet)",
        ]),
        ("authentication: {anonymous: {enabled: true}}\nauthorization: {mode: AlwaysAllow}", &[
            "authentication.anonymous.enabled: anonymous requests with authorization mode AlwaysAllow: anyone who can reach port 10250 on any address of this node (listening on 0.0.0.0) can exec into, attach to and port-forward into every container on this node, as well as read every container's logs, without any credentials; set authentication.anonymous.enabled=false and authorization.mode=Webhook (or start with --config), or bind address to 127.0.0.1",
        ]),
        ("logging: {flushFrequency: 5s, vmodule: [], options: {json: {infoBufferSize: \"0\", splitStream: false}, text: {infoBufferSize: 0}}}", &[]),
        ("featureGates: {InPlacePodVerticalScaling: true}", &["featureGates.InPlacePodVerticalScaling: setting GA feature gate InPlacePodVerticalScaling=true; it will be removed in a future release"]),
        ("featureGates: {ChangeContainerStatusOnKubeletRestart: false}", &["featureGates.ChangeContainerStatusOnKubeletRestart: setting deprecated feature gate ChangeContainerStatusOnKubeletRestart=false; it will be removed in a future release"]),
        ("containerRuntimeEndpoint: /run/containerd/containerd.sock", &["containerRuntimeEndpoint: using a bare path as endpoint is deprecated, please use the full URL \"unix:///run/containerd/containerd.sock\""]),
    ];
    for (body, want) in cases {
        let loaded = ok(body);
        assert_eq!(&warnings(&loaded), want, "body {body:?}");
        for w in warnings(&loaded) {
            assert!(!w.contains("ignor"), "{w}");
        }
    }
    let refused = field_errors(&format!(
        "{HEADER}logging: {{options: {{json: {{infoBufferSize: 1Mi, splitStream: true}}}}}}"
    ));
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused[0].starts_with("logging.options.json.infoBufferSize: Invalid value: \"1Mi\": nodelet accepts only the default"), "{refused:?}");
    assert!(refused[1].starts_with("logging.options.json.splitStream: Invalid value: true: nodelet accepts only the default"), "{refused:?}");
}

#[test]
fn fixed_fields_at_nodelets_values_change_nothing_and_unknown_gates_are_refused() {
    let loaded =
        ok("runOnce: false\nport: 10250\ncpuManagerPolicy: none\nhairpinMode: hairpin-veth");
    assert_eq!(loaded.config, Config::defaults(&env()));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(
        field_errors(&format!("{HEADER}featureGates: {{SomeOtherGate: true}}")),
        vec!["featureGates.SomeOtherGate: Invalid value: true: unrecognized feature gate: SomeOtherGate"]
    );
}

/// A value `accepts` takes and one it refuses, as YAML (`None`: it takes every value of the
/// field's type).
fn fixed_samples(accepts: &Accepts) -> (String, Option<String>) {
    match accepts {
        Accepts::AnyDuration => ("2m".into(), None),
        Accepts::Duration(d) => (format!("{}ms", d.as_millis()), Some("3s".into())),
        Accepts::Strings(values) => (
            values
                .first()
                .map_or_else(|| "\"\"".to_string(), |v| format!("{v:?}")),
            Some("\"something-else\"".into()),
        ),
        Accepts::AnyString => ("/some.slice".into(), None),
        Accepts::Bool(b) => (b.to_string(), Some((!b).to_string())),
        Accepts::IntIn(lo, hi) => (lo.to_string(), Some((hi + 1).to_string())),
        Accepts::Empty => ("{}".into(), Some("{a: 1}".into())),
    }
}

#[test]
fn every_fixed_field_takes_its_values_silently_and_refuses_others_by_name() {
    let top = FIXED_FIELDS.iter().map(|f| (f, String::new()));
    let logging = FIXED_LOGGING_FIELDS
        .iter()
        .map(|f| (f, "logging.".to_string()));
    for (field, prefix) in top.chain(logging) {
        let path = format!("{prefix}{}", field.name);
        let yaml = |value: &str| match prefix.as_str() {
            "" => format!("{}: {value}", field.name),
            _ => format!("logging:\n  {}: {value}", field.name),
        };
        let (accepted, refused) = fixed_samples(&field.accepts);
        let loaded = ok(&yaml(&accepted));
        assert!(loaded.warnings.is_empty(), "{path}: {:?}", loaded.warnings);
        assert_eq!(loaded.config, Config::defaults(&env()), "{path}");
        assert!(ok(&yaml("null")).warnings.is_empty(), "{path}: null");
        if let Some(refused) = refused {
            let errors = field_errors(&format!("{HEADER}{}", yaml(&refused)));
            assert_eq!(errors.len(), 1, "{path}: {errors:?}");
            assert!(
                errors[0].starts_with(&format!("{path}: Invalid value: "))
                    && errors[0].contains(&format!(
                        "nodelet accepts only {}: {}",
                        field.accepts.describe(),
                        field.why
                    )),
                "{path}: {}",
                errors[0]
            );
        }
    }
}

/// The kubelet's fields (from its `types.go`) that nodelet neither implements nor fixes.
fn unclassified<'a>(kubelet_fields: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    kubelet_fields
        .filter(|name| {
            !IMPLEMENTED_FIELDS.contains(name) && !FIXED_FIELDS.iter().any(|f| f.name == *name)
        })
        .collect()
}

fn kubelet_fields() -> Vec<&'static str> {
    include_str!("kubelet-config-v1beta1-fields.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect()
}

#[test]
fn every_kubelet_field_is_implemented_or_fixed() {
    let fields = kubelet_fields();
    assert!(fields.len() > 100, "the list holds the kubelet's fields");
    assert_eq!(unclassified(fields.iter().copied()), Vec::<&str>::new());
    // A field the kubelet adds in a new release, and nodelet has not classified, fails it.
    let planted = fields.iter().copied().chain(["plantedNewField"]);
    assert_eq!(unclassified(planted), vec!["plantedNewField"]);
    // Every classified field is a kubelet field or one of nodelet's own (documented) fields.
    for fixed in FIXED_FIELDS {
        assert!(
            fields.contains(&fixed.name),
            "{} is not a kubelet field",
            fixed.name
        );
    }
}

#[test]
fn every_problem_in_a_file_is_reported() {
    let text = format!("{HEADER}maxPods: many\nfooBar: 1\nevictionHard: {{}}\nlogging:\n  format: xml\n  colour: red\nclusterDNS: [10.0.0.10, bad]\n");
    let err = parse(&text, source(), &env()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "config file /etc/nodelet/config.yaml: invalid configuration:\n  \
         maxPods: Invalid value: \"many\": expected an integer\n  \
         fooBar: Unknown field\n  \
         logging.format: Unsupported value: \"xml\": supported values: \"json\", \"text\"\n  \
         logging.colour: Unknown field\n  \
         clusterDNS[1]: Invalid value: \"bad\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
    );
    let Error::Invalid { path, errors } = err else {
        panic!("expected Error::Invalid");
    };
    assert_eq!(path, source());
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "maxPods",
            "fooBar",
            "logging.format",
            "logging.colour",
            "clusterDNS[1]"
        ]
    );
    assert_eq!(errors[0].value.as_deref(), Some("\"many\""));
    assert_eq!(errors[0].detail, "expected an integer");
    assert_eq!(errors[0].kind, FieldErrorKind::Invalid);
    assert_eq!(errors[1].value, None);
    assert_eq!(errors[1].kind, FieldErrorKind::Unknown);
}

#[test]
fn documents_that_are_not_a_configuration_mapping() {
    let cases: &[(&str, &str)] = &[
        ("maxPods: [", "config file /etc/nodelet/config.yaml: not valid YAML: "),
        ("- a\n- b\n", "config file /etc/nodelet/config.yaml: expected a KubeletConfiguration mapping at the top level, found a list"),
        ("just text", "config file /etc/nodelet/config.yaml: expected a KubeletConfiguration mapping at the top level, found a string"),
        ("a: 1\n---\nb: 2\n", "config file /etc/nodelet/config.yaml: not valid YAML: "),
        ("maxPods: 1\nmaxPods: 2\n", "config file /etc/nodelet/config.yaml: not valid YAML: "),
    ];
    for (text, want_prefix) in cases {
        match parse(text, source(), &env()) {
            Err(e @ Error::Yaml { .. }) => {
                let shown = e.to_string();
                assert!(shown.starts_with(want_prefix), "text {text:?}: {shown}");
            }
            other => panic!("text {text:?}: expected Error::Yaml, got {other:?}"),
        }
    }
}

#[test]
fn node_name_comes_from_the_hostname_unless_set() {
    let cases: &[(&str, &str, Result<&str, &str>)] = &[
        ("Node-1", "", Ok("node-1")),
        (" host.example.com \n", "", Ok("host.example.com")),
        ("ignored", "nodeName: ' Worker-7 '", Ok("worker-7")),
        ("", "nodeName: worker-7", Ok("worker-7")),
        ("", "", Err("nodeName: Required value: the hostname is empty; set nodeName")),
        ("bad_host", "", Err("nodeName: Invalid value: \"bad_host\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com'); the hostname is not a valid node name, set nodeName")),
    ];
    for (hostname, body, want) in cases {
        let env = Environment {
            hostname: hostname.to_string(),
        };
        let got = parse(&format!("{HEADER}{body}"), source(), &env);
        match (got, want) {
            (Ok(loaded), Ok(name)) => {
                assert_eq!(loaded.config.node_name, *name, "hostname {hostname:?}")
            }
            (Err(Error::Invalid { errors, .. }), Err(message)) => {
                assert_eq!(errors.len(), 1, "hostname {hostname:?}: {errors:?}");
                assert_eq!(errors[0].to_string(), *message, "hostname {hostname:?}");
            }
            (got, want) => panic!("hostname {hostname:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn crash_loop_back_off_follows_the_kubelet_gates() {
    let cases: &[(&str, Duration, Duration)] = &[
        ("", s(10), s(300)),
        ("crashLoopBackOff: {maxContainerRestartPeriod: 100s}", s(10), s(100)),
        ("crashLoopBackOff: {maxContainerRestartPeriod: 2s}", s(2), s(2)),
        ("featureGates: {ReduceDefaultCrashLoopBackOffDecay: true}", s(1), s(60)),
        ("featureGates: {ReduceDefaultCrashLoopBackOffDecay: true}\ncrashLoopBackOff: {maxContainerRestartPeriod: 30s}", s(1), s(30)),
        ("featureGates: {ReduceDefaultCrashLoopBackOffDecay: true, KubeletCrashLoopBackOffMax: false}", s(1), s(60)),
        ("featureGates: {KubeletCrashLoopBackOffMax: false}", s(10), s(300)),
    ];
    for (body, initial, max) in cases {
        let config = ok(body).config;
        assert_eq!(
            config.crash_loop_back_off.max_container_restart_period, *max,
            "body {body:?}"
        );
        assert_eq!(
            config.crash_loop_back_off_delays(),
            (*initial, *max),
            "body {body:?}"
        );
    }
}

/// `AllAlpha` and `AllBeta` set every gate of their stage not set by name: accepted where that
/// moves no gate the kubelet reads off its default (all alpha gates off, as they are), refused
/// otherwise, naming gates that would move.
#[test]
fn stage_wide_gates() {
    let loaded = ok("featureGates: {AllAlpha: false}");
    assert!(!loaded.config.feature_enabled("CSIVolumeHealth"));
    for (body, value, moved) in [
        (
            "featureGates: {AllAlpha: true}",
            "true",
            "CPUManagerPolicyAlphaOptions",
        ),
        (
            "featureGates: {AllBeta: true}",
            "true",
            "PodAndContainerStatsFromCRI",
        ),
        (
            "featureGates: {AllBeta: false}",
            "false",
            "KubeletSeparateDiskGC",
        ),
    ] {
        let errors = field_errors(&format!("{HEADER}{body}"));
        let gate = if body.contains("AllAlpha") {
            "AllAlpha"
        } else {
            "AllBeta"
        };
        let want = format!(
            "featureGates.{gate}: Invalid value: {value}: nodelet implements only {gate}={}: \
             it would set gates nodelet cannot behave as to {value}: ",
            value == "false"
        );
        assert_eq!(errors.len(), 1, "{body}: {errors:?}");
        assert!(errors[0].starts_with(&want), "{body}: {}", errors[0]);
        assert!(
            errors[0].contains(moved) || errors[0].contains(" more"),
            "{body}: {}",
            errors[0]
        );
    }
}

#[test]
fn feature_enabled_uses_kubernetes_defaults_for_known_gates() {
    let config = ok("featureGates: {GracefulNodeShutdown: false, GracefulNodeShutdownBasedOnPodPriority: false, WindowsGracefulNodeShutdown: false, MemoryQoS: true, AllAlpha: false}").config;
    let cases: &[(&str, bool)] = &[
        ("GracefulNodeShutdown", false),
        ("ContainerRestartRules", true),
        // Alpha and off in the kubelet; nodelet always honours stop signals.
        ("ContainerStopSignals", true),
        ("ChangeContainerStatusOnKubeletRestart", false),
        ("MemoryQoS", true),
        ("InPlacePodVerticalScaling", true),
        // Alpha gates through AllAlpha (all off, as by default).
        ("CSIVolumeHealth", false),
        ("StorageVersionAPI", false),
        ("SidecarContainers", false),
        ("KubeletCrashLoopBackOffMax", true),
        ("ReduceDefaultCrashLoopBackOffDecay", false),
        ("NotAGate", false),
    ];
    for (gate, want) in cases {
        assert_eq!(config.feature_enabled(gate), *want, "gate {gate}");
    }
}

#[test]
fn bare_path_endpoints_are_normalized_and_shared() {
    let config = ok("containerRuntimeEndpoint: /run/containerd/containerd.sock").config;
    assert_eq!(
        config.container_runtime_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(
        config.image_service_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(
        config.containerd_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
}

#[test]
fn example_file_is_accepted_without_warnings() {
    let text = include_str!("../../config.example.yaml");
    let loaded =
        parse(text, Path::new("config.example.yaml"), &env()).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let c = loaded.config;
    assert_eq!(
        c.container_runtime_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(
        c.static_pod_path,
        Some(PathBuf::from("/etc/kubernetes/manifests"))
    );
    assert_eq!(c.read_only_port, 10255);
    assert_eq!(c.address, IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert_eq!(c.pod_logs_dir, PathBuf::from("/var/log/pods"));
    assert_eq!(c.root_dir, PathBuf::from("/var/lib/nodelet"));
    assert_eq!(c.file_check_frequency, s(5));
}

#[test]
fn load_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, format!("{HEADER}maxPods: 42\n")).unwrap();
    let loaded = load(&path, &env()).unwrap();
    assert_eq!(loaded.config.max_pods, 42);

    std::fs::write(&path, format!("{HEADER}maxPods: none\n")).unwrap();
    match load(&path, &env()) {
        Err(Error::Invalid { path: p, errors }) => {
            assert_eq!(p, path);
            assert_eq!(errors[0].path, "maxPods");
        }
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[test]
fn load_reports_a_missing_file_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.yaml");
    match load(&path, &env()) {
        Err(e @ Error::Read { .. }) => {
            let shown = e.to_string();
            assert!(
                shown.starts_with(&format!("reading config file {}: ", path.display())),
                "{shown}"
            );
        }
        other => panic!("expected Error::Read, got {other:?}"),
    }
}

#[test]
fn field_error_display_omits_empty_parts() {
    let cases: &[(FieldError, &str)] = &[
        (
            FieldError {
                path: "maxPods".into(),
                kind: FieldErrorKind::Invalid,
                value: Some("\"many\"".into()),
                detail: "expected an integer".into(),
            },
            "maxPods: Invalid value: \"many\": expected an integer",
        ),
        (
            FieldError {
                path: "fooBar".into(),
                kind: FieldErrorKind::Unknown,
                value: None,
                detail: String::new(),
            },
            "fooBar: Unknown field",
        ),
        (
            FieldError {
                path: "x".into(),
                kind: FieldErrorKind::Invalid,
                value: Some("0".into()),
                detail: String::new(),
            },
            "x: Invalid value: 0",
        ),
    ];
    for (error, want) in cases {
        assert_eq!(error.to_string(), *want);
    }
    let warning = Warning {
        path: "port".into(),
        message: "ignored".into(),
    };
    assert_eq!(warning.to_string(), "port: ignored");
}

#[test]
fn detect_reads_a_hostname() {
    // Every Linux host (and container) has a non-empty nodename.
    assert!(!Environment::detect().hostname.is_empty());
}

#[test]
fn documentation_lists_every_field() {
    let doc = include_str!("../../docs/configuration.md");
    let implemented = IMPLEMENTED_FIELDS
        .iter()
        .filter(|n| {
            ![
                "apiVersion",
                "kind",
                "logging",
                "crashLoopBackOff",
                "podCleanup",
                "authentication",
                "authorization",
            ]
            .contains(n)
        })
        .map(|n| format!("| `{n}` |"))
        .chain(
            [
                "logging.format",
                "logging.verbosity",
                "crashLoopBackOff.maxContainerRestartPeriod",
                "podCleanup.enabled",
                "podCleanup.retention",
                "podCleanup.barePods",
                "authentication.x509.clientCAFile",
                "authentication.webhook.enabled",
                "authentication.webhook.cacheTTL",
                "authentication.anonymous.enabled",
                "authorization.mode",
                "authorization.webhook.cacheAuthorizedTTL",
                "authorization.webhook.cacheUnauthorizedTTL",
            ]
            .iter()
            .map(|n| format!("| `{n}` |")),
        );
    for row in implemented {
        assert!(
            doc.contains(&row),
            "docs/configuration.md has no table row {row}"
        );
    }
    // Every fixed field has a row in the fixed-fields table, with the values it accepts.
    for field in FIXED_FIELDS {
        assert!(
            doc.contains(&format!("| `{}` |", field.name)),
            "docs/configuration.md has no row for fixed field {}",
            field.name
        );
    }
    for field in FIXED_LOGGING_FIELDS {
        assert!(
            doc.contains(&format!("| `logging.{}` |", field.name)),
            "docs/configuration.md has no row for logging.{}",
            field.name
        );
    }
    assert!(
        !doc.contains("not implemented by nodelet yet"),
        "docs/configuration.md still describes ignored fields"
    );
    for gate in super::kubelet_fields::acting_gates() {
        assert!(
            doc.contains(&format!("| `{gate}` |")),
            "docs/configuration.md does not list gate {gate}"
        );
    }
}

#[test]
fn cluster_mode_fields() {
    let c = ok("kubeconfig: /etc/nodelet/kubeconfig\nregisterNode: false\nnodeLabels: {zone: a, tier: edge}\nregisterWithTaints:\n- {key: dedicated, value: gpu, effect: NoSchedule}\npodCleanup: {retention: 10m, barePods: true}\n").config;
    assert_eq!(
        c.kubeconfig.as_deref(),
        Some(std::path::Path::new("/etc/nodelet/kubeconfig"))
    );
    assert!(!c.register_node);
    assert_eq!(c.node_labels.get("zone").map(String::as_str), Some("a"));
    assert_eq!(c.register_with_taints[0].key, "dedicated");
    assert_eq!(
        c.pod_cleanup,
        PodCleanup {
            enabled: true,
            retention: s(600),
            bare_pods: true
        }
    );
    let d = ok("").config;
    assert_eq!(
        (d.kubeconfig, d.register_node, d.pod_cleanup),
        (None, true, PodCleanup::default())
    );
    for (body, want) in [
        ("kubeconfig: etc/kubeconfig", "kubeconfig: Invalid value: \"etc/kubeconfig\": must be an absolute path"),
        ("registerWithTaints:\n- {key: a, effect: Sometimes}", "registerWithTaints[0].effect: Unsupported value: \"Sometimes\": supported values: \"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\""),
        ("podCleanup: {retain: 1h}", "podCleanup.retain: Unknown field"),
        ("podCleanup: {retention: soon}", "podCleanup.retention: Invalid value: \"soon\""),
    ] {
        let errors = match parse(&format!("{HEADER}{body}"), source(), &env()) {
            Err(Error::Invalid { errors, .. }) => errors,
            other => panic!("{body}: {other:?}"),
        };
        assert!(errors[0].to_string().starts_with(want), "{body}: {}", errors[0]);
    }
}

#[test]
fn cgroup_and_memory_qos_fields() {
    use crate::config::memory_qos::ReservationPolicy;
    use crate::config::reserved::Reserved;
    let d = Config::defaults(&env());
    assert!(d.fail_cgroup_v1);
    assert!(
        !d.single_process_oom_kill,
        "the kubelet's default on cgroup v2"
    );
    assert!(
        ok("singleProcessOOMKill: true")
            .config
            .single_process_oom_kill
    );
    assert_eq!(d.pod_pids_limit, -1);
    assert_eq!(d.enforce_node_allocatable, ["pods"]);
    assert!(d.enforces_pods_allocatable());
    assert_eq!(d.memory_throttling_factor, None);
    assert_eq!(d.memory_reservation_policy, ReservationPolicy::None);
    assert!(
        d.feature_enabled("MemoryQoS"),
        "MemoryQoS is Beta and on in 1.37"
    );

    let c = ok("failCgroupV1: false\npodPidsLimit: 1024\nkubeReserved: {cpu: 500m, memory: 1Gi, pid: '1000'}\nsystemReserved: {memory: 512Mi, ephemeral-storage: 1Gi}\nenforceNodeAllocatable: [pods]\nmemoryThrottlingFactor: 0.9\nmemoryReservationPolicy: TieredReservation").config;
    assert!(!c.fail_cgroup_v1);
    assert_eq!(c.pod_pids_limit, 1024);
    assert_eq!(
        c.kube_reserved,
        Reserved {
            cpu_milli: 500,
            memory: 1 << 30,
            pids: 1000,
            ephemeral_storage: 0
        }
    );
    assert_eq!(c.system_reserved.memory, 512 << 20);
    assert_eq!(c.system_reserved.ephemeral_storage, 1 << 30);
    assert_eq!(c.memory_throttling_factor, Some(0.9));
    assert_eq!(
        c.memory_reservation_policy,
        ReservationPolicy::TieredReservation
    );
    assert_eq!(
        ok("memoryThrottlingFactor: 1")
            .config
            .memory_throttling_factor,
        Some(1.0)
    );
    assert!(!ok("enforceNodeAllocatable: [none]")
        .config
        .enforces_pods_allocatable());
    assert!(!ok("enforceNodeAllocatable: []")
        .config
        .enforces_pods_allocatable());

    let errors: &[(&str, &[&str])] = &[
        ("memoryThrottlingFactor: 0", &["memoryThrottlingFactor: Invalid value: 0: must be greater than 0 and less than or equal to 1"]),
        ("memoryThrottlingFactor: 1.5", &["memoryThrottlingFactor: Invalid value: 1.5: must be greater than 0 and less than or equal to 1"]),
        ("memoryThrottlingFactor: -0.1", &["memoryThrottlingFactor: Invalid value: -0.1: must be greater than 0 and less than or equal to 1"]),
        ("memoryThrottlingFactor: high", &["memoryThrottlingFactor: Invalid value: \"high\": expected a number greater than 0 and at most 1, such as 0.9"]),
        ("memoryReservationPolicy: Tiered", &["memoryReservationPolicy: Unsupported value: \"Tiered\": supported values: \"None\", \"TieredReservation\""]),
        ("featureGates: {MemoryQoS: false}\nmemoryThrottlingFactor: 0.5", &["memoryThrottlingFactor: Forbidden: 0.5: may only be set (to anything but 0.9, the former default) when feature gate MemoryQoS is enabled"]),
        ("featureGates: {MemoryQoS: false}\nmemoryReservationPolicy: TieredReservation", &["memoryReservationPolicy: Forbidden: \"TieredReservation\": requires feature gate MemoryQoS"]),
        ("podPidsLimit: -2", &["podPidsLimit: Invalid value: -2: must be -1 (no limit) or greater"]),
        ("failCgroupV1: no", &["failCgroupV1: Invalid value: \"no\": expected a boolean (true or false)"]),
        ("singleProcessOOMKill: 1", &["singleProcessOOMKill: Invalid value: 1: expected a boolean (true or false)"]),
        ("kubeReserved: {memory: lots}", &["kubeReserved.memory: Invalid value: \"lots\": invalid quantity \"lots\": expected a number"]),
        ("systemReserved: {cpu: -1}", &["systemReserved.cpu: Invalid value: -1: resource quantity for \"cpu\" cannot be negative"]),
        ("kubeReserved: {gpu: 1}", &["kubeReserved.gpu: Unsupported value: cannot reserve \"gpu\" resource; supported: cpu, ephemeral-storage, memory, pid"]),
        ("kubeReserved: 1Gi", &["kubeReserved: Invalid value: \"1Gi\": expected a mapping"]),
        ("enforceNodeAllocatable: [pods, nodes]", &["enforceNodeAllocatable[1]: Unsupported value: \"nodes\": supported values: \"kube-reserved\", \"kube-reserved-compressible\", \"none\", \"pods\", \"system-reserved\", \"system-reserved-compressible\""]),
        ("enforceNodeAllocatable: [none, pods]", &["enforceNodeAllocatable: Invalid value: [\"none\",\"pods\"]: enforceNodeAllocatable may not contain additional enforcements when \"none\" is specified"]),
        ("enforceNodeAllocatable: pods", &["enforceNodeAllocatable: Invalid value: \"pods\": expected a list such as [pods]"]),
    ];
    for (body, want) in errors {
        assert_eq!(
            &field_errors(&format!("{HEADER}{body}")),
            want,
            "body {body:?}"
        );
    }

    // The gate off and the former default: accepted, ignored, said so.
    let loaded = ok("featureGates: {MemoryQoS: false}\nmemoryThrottlingFactor: 0.9");
    assert_eq!(loaded.config.memory_throttling_factor, None);
    assert_eq!(
        warnings(&loaded),
        ["memoryThrottlingFactor: 0.9 has no effect while feature gate MemoryQoS is disabled (as in the kubelet)"]
    );
    assert_eq!(
        field_errors(&format!("{HEADER}enforceNodeAllocatable: [pods, kube-reserved]")),
        ["enforceNodeAllocatable[1]: Invalid value: \"kube-reserved\": nodelet enforces only \"pods\": it manages no kubeReservedCgroup/systemReservedCgroup"]
    );
}

#[test]
fn image_gc_and_log_rotation_fields() {
    let d = ok("").config;
    assert_eq!(
        (
            d.image_gc_high_threshold_percent,
            d.image_gc_low_threshold_percent,
            d.image_minimum_gc_age,
            d.image_maximum_gc_age
        ),
        (85, 80, s(120), s(0))
    );
    assert_eq!(
        (
            d.container_log_max_size,
            d.container_log_max_files,
            d.container_log_max_workers,
            d.container_log_monitor_interval
        ),
        (10 << 20, 5, 1, s(10))
    );
    let c = ok("imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\nimageMinimumGCAge: 1s\nimageMaximumGCAge: 1h\ncontainerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMaxWorkers: 2\ncontainerLogMonitorInterval: 3s").config;
    assert_eq!(
        (
            c.image_gc_high_threshold_percent,
            c.image_gc_low_threshold_percent,
            c.image_minimum_gc_age,
            c.image_maximum_gc_age
        ),
        (1, 0, s(1), s(3600))
    );
    assert_eq!(
        (
            c.container_log_max_size,
            c.container_log_max_files,
            c.container_log_max_workers,
            c.container_log_monitor_interval
        ),
        (1 << 20, 3, 2, s(3))
    );
    // "0s" is the kubelet's unset: the default minimum age.
    assert_eq!(
        ok("imageMinimumGCAge: 0s").config.image_minimum_gc_age,
        s(120)
    );

    let errors: &[(&str, &[&str])] = &[
        ("imageGCHighThresholdPercent: 101", &["imageGCHighThresholdPercent: Invalid value: 101: must be at most 100"]),
        ("imageGCLowThresholdPercent: -1", &["imageGCLowThresholdPercent: Invalid value: -1: must be between 0 and 100, inclusive"]),
        ("imageGCLowThresholdPercent: 90", &["imageGCLowThresholdPercent: Invalid value: 90: must be less than imageGCHighThresholdPercent (85)"]),
        ("imageGCHighThresholdPercent: 50\nimageGCLowThresholdPercent: 50", &["imageGCLowThresholdPercent: Invalid value: 50: must be less than imageGCHighThresholdPercent (50)"]),
        ("imageMaximumGCAge: 1m", &["imageMaximumGCAge: Invalid value: 60s: must be greater than imageMinimumGCAge (120s)"]),
        ("imageMinimumGCAge: soon", &["imageMinimumGCAge: Invalid value: \"soon\": invalid duration (expected a Go duration such as \"1m30s\", \"500ms\", \"2h\")"]),
        ("containerLogMaxSize: big", &["containerLogMaxSize: Invalid value: \"big\": invalid quantity \"big\": expected a number"]),
        ("containerLogMaxSize: 0Mi", &["containerLogMaxSize: Invalid value: \"0Mi\": must be greater than 0"]),
        ("containerLogMaxFiles: 1", &["containerLogMaxFiles: Invalid value: 1: must be greater than 1"]),
        ("containerLogMaxWorkers: 0", &["containerLogMaxWorkers: Invalid value: 0: must be greater than or equal to 1"]),
        ("containerLogMonitorInterval: 2s", &["containerLogMonitorInterval: Invalid value: \"2s\": must be a positive time duration greater than or equal to 3s"]),
    ];
    for (body, want) in errors {
        assert_eq!(
            &field_errors(&format!("{HEADER}{body}")),
            want,
            "body {body:?}"
        );
    }
}

#[test]
fn eviction_fields() {
    use crate::config::eviction::{Signal, Threshold, ThresholdValue};
    const MI: i64 = 1 << 20;
    let hard = |signal, value| Threshold {
        signal,
        value,
        grace_period: Duration::ZERO,
        min_reclaim: None,
    };
    // Defaults: the kubelet's five hard thresholds, plus the allocatable copy of memory's.
    let c = Config::defaults(&env());
    assert_eq!(c.eviction.thresholds.len(), 6);
    assert!(c.eviction.thresholds.contains(&hard(
        Signal::AllocatableMemoryAvailable,
        ThresholdValue::Quantity(100 * MI)
    )));
    assert_eq!(c.eviction.pressure_transition_period, s(300));
    assert_eq!(c.eviction.max_pod_grace_period_seconds, 0);
    assert!(!c.eviction.evict_static_pods);

    let e = ok("evictionHard: {pid.available: \"1000\"}\n\
        evictionSoft: {memory.available: 1Gi}\n\
        evictionSoftGracePeriod: {memory.available: 1m30s}\n\
        evictionMinimumReclaim: {memory.available: 0.5Gi}\n\
        evictionPressureTransitionPeriod: 30s\n\
        evictionMaxPodGracePeriod: 20\n\
        evictStaticPods: true\n\
        enforceNodeAllocatable: []")
    .config
    .eviction;
    assert_eq!(
        e.thresholds,
        vec![
            hard(Signal::PidAvailable, ThresholdValue::Quantity(1000)),
            Threshold {
                grace_period: s(90),
                min_reclaim: Some(ThresholdValue::Quantity(512 * MI)),
                ..hard(Signal::MemoryAvailable, ThresholdValue::Quantity(1 << 30))
            },
        ]
    );
    assert_eq!(e.pressure_transition_period, s(30));
    assert_eq!(e.max_pod_grace_period_seconds, 20);
    assert!(e.evict_static_pods);

    // An empty evictionHard replaces the defaults with nothing (the kubelet's rule);
    // mergeDefaultEvictionSettings fills in the ones left out.
    let none = ok("evictionHard: {}\nenforceNodeAllocatable: []")
        .config
        .eviction;
    assert!(none.thresholds.is_empty());
    let merged = ok("evictionHard: {memory.available: 1Gi}\nmergeDefaultEvictionSettings: true\nenforceNodeAllocatable: []")
        .config
        .eviction;
    assert_eq!(merged.thresholds.len(), 5);
    assert!(merged.thresholds.contains(&hard(
        Signal::MemoryAvailable,
        ThresholdValue::Quantity(1 << 30)
    )));
    // A zero transition period is the kubelet's "unset".
    assert_eq!(
        ok("evictionPressureTransitionPeriod: 0s")
            .config
            .eviction
            .pressure_transition_period,
        s(300)
    );

    // Errors stop the file, naming the field and the value.
    let cases: &[(&str, &[&str])] = &[
        ("evictionHard: {memory.avail: 1Gi}", &["evictionHard[memory.avail]: Invalid value: \"1Gi\": unsupported eviction signal memory.avail"]),
        ("evictionHard: {memory.available: -1Gi}", &["evictionHard[memory.available]: Invalid value: \"-1Gi\": eviction threshold memory.available must be positive: -1Gi"]),
        ("evictionHard: {nodefs.available: 120%}", &["evictionHard[nodefs.available]: Invalid value: \"120%\": eviction percentage threshold nodefs.available must be <= 100%: 120%"]),
        ("evictionSoft: {memory.available: 1Gi}", &["evictionSoftGracePeriod[memory.available]: Required value: grace period must be specified for the soft eviction threshold memory.available"]),
        ("evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: -1s}", &["evictionSoftGracePeriod[memory.available]: Invalid value: \"-1s\": invalid eviction grace period specified: -1s, must be a positive value"]),
        ("evictionMinimumReclaim: {memory.available: -1Mi}", &["evictionMinimumReclaim[memory.available]: Invalid value: \"-1Mi\": negative eviction minimum reclaim specified for memory.available"]),
        ("evictionHard: {pid.available: 1000}", &["evictionHard[\"pid.available\"]: Invalid value: 1000: expected string keys and values"]),
        ("evictionMaxPodGracePeriod: -1", &["evictionMaxPodGracePeriod: Invalid value: -1: must be greater than or equal to 0"]),
        ("evictStaticPods: maybe", &["evictStaticPods: Invalid value: \"maybe\": expected a boolean (true or false)"]),
    ];
    for (body, want) in cases {
        assert_eq!(
            &field_errors(&format!("{HEADER}{body}")),
            want,
            "body {body:?}"
        );
    }
}

#[test]
fn graceful_node_shutdown_fields_follow_the_kubelets_rules() {
    use crate::config::shutdown::GracePeriodByPriority as P;
    let p = |priority, shutdown_grace_period_seconds| P {
        priority,
        shutdown_grace_period_seconds,
    };
    let accepted: &[(&str, Duration, Duration, Vec<P>)] = &[
        ("", s(0), s(0), vec![]),
        ("shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s", s(30), s(10), vec![]),
        ("shutdownGracePeriod: 30s", s(30), s(0), vec![]),
        ("shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 10s", s(10), s(10), vec![]),
        (
            "shutdownGracePeriodByPodPriority: [{priority: 100000, shutdownGracePeriodSeconds: 10}, {priority: -10, shutdownGracePeriodSeconds: 0}]",
            s(0),
            s(0),
            vec![p(100_000, 10), p(-10, 0)],
        ),
        ("shutdownGracePeriodByPodPriority: []", s(0), s(0), vec![]),
        ("shutdownGracePeriodByPodPriority: []\nshutdownGracePeriod: 5s", s(5), s(0), vec![]),
    ];
    for (body, total, critical, list) in accepted {
        let shutdown = ok(body).config.shutdown;
        assert_eq!(shutdown.grace_period, *total, "{body}");
        assert_eq!(shutdown.grace_period_critical_pods, *critical, "{body}");
        assert_eq!(&shutdown.grace_period_by_pod_priority, list, "{body}");
    }
    let rejected: &[(&str, &[&str])] = &[
        ("shutdownGracePeriod: 1s\nshutdownGracePeriodCriticalPods: 2s", &[
            "shutdownGracePeriodCriticalPods: Invalid value: \"2s\": must be <= shutdownGracePeriod 1s",
        ]),
        ("shutdownGracePeriod: 1ms", &["shutdownGracePeriod: Invalid value: \"1ms\": must be either zero or otherwise >= 1 sec"]),
        ("shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 500ms", &[
            "shutdownGracePeriodCriticalPods: Invalid value: \"500ms\": must be either zero or otherwise >= 1 sec",
        ]),
        ("shutdownGracePeriod: -1s", &["shutdownGracePeriod: Invalid value: \"-1s\": must not be negative"]),
        ("shutdownGracePeriod: 30", &["shutdownGracePeriod: Invalid value: 30: expected a duration string such as \"30s\" or \"1m30s\""]),
        ("featureGates: {GracefulNodeShutdown: false, GracefulNodeShutdownBasedOnPodPriority: false, WindowsGracefulNodeShutdown: false}\nshutdownGracePeriod: 1s", &[
            "shutdownGracePeriod: Forbidden: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown",
        ]),
        ("featureGates: {GracefulNodeShutdown: false, GracefulNodeShutdownBasedOnPodPriority: false, WindowsGracefulNodeShutdown: false}\nshutdownGracePeriodCriticalPods: 1s", &[
            "shutdownGracePeriodCriticalPods: Forbidden: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown",
        ]),
        ("shutdownGracePeriod: 30s\nshutdownGracePeriodByPodPriority: [{priority: 1, shutdownGracePeriodSeconds: 10}]", &[
            "shutdownGracePeriodByPodPriority: Forbidden: cannot be specified together with shutdownGracePeriod or shutdownGracePeriodCriticalPods",
        ]),
        ("featureGates: {GracefulNodeShutdownBasedOnPodPriority: false}\nshutdownGracePeriodByPodPriority: [{priority: 1, shutdownGracePeriodSeconds: 10}]", &[
            "shutdownGracePeriodByPodPriority: Forbidden: specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority",
        ]),
        ("shutdownGracePeriodByPodPriority: {priority: 1}", &["shutdownGracePeriodByPodPriority: Invalid value: {\"priority\":1}: expected a list"]),
        ("shutdownGracePeriodByPodPriority: [{priority: 1}]", &["shutdownGracePeriodByPodPriority[0].shutdownGracePeriodSeconds: Required value"]),
        ("shutdownGracePeriodByPodPriority: [{shutdownGracePeriodSeconds: 1}, 5]", &[
            "shutdownGracePeriodByPodPriority[0].priority: Required value",
            "shutdownGracePeriodByPodPriority[1]: Invalid value: 5: expected a mapping",
        ]),
        ("shutdownGracePeriodByPodPriority: [{priority: 1, shutdownGracePeriodSeconds: -3, grace: 2}]", &[
            "shutdownGracePeriodByPodPriority[0].grace: Unknown field",
            "shutdownGracePeriodByPodPriority[0].shutdownGracePeriodSeconds: Invalid value: -3: must be greater than or equal to 0",
        ]),
        ("shutdownGracePeriodByPodPriority: [{priority: 3000000000, shutdownGracePeriodSeconds: 1}]", &[
            "shutdownGracePeriodByPodPriority[0].priority: Invalid value: 3000000000: must be at most 2147483647",
        ]),
    ];
    for (body, want) in rejected {
        assert_eq!(&field_errors(&format!("{HEADER}{body}")), want, "{body}");
    }
}

/// `/var/lib/kubelet/config.yaml` as `kubeadm join` writes it (kubeadm 1.3x: the defaulted
/// KubeletConfiguration with its zero values spelled out).
const KUBEADM_CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: \"\"
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: \"0\"
    text:
      infoBufferSize: \"0\"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
resolvConf: /run/systemd/resolve/resolv.conf
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
";

fn kubelet_line(args: &[&str]) -> flags::KubeletCommandLine {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    flags::parse(&args, Path::new("/")).unwrap()
}

#[test]
fn kubeadms_config_is_accepted_with_the_kubelets_defaults_for_its_zeros() {
    let loaded = parse(KUBEADM_CONFIG, source(), &env()).unwrap();
    let c = &loaded.config;
    // Zero durations are "unset": the kubelet's defaults.
    assert_eq!(c.authentication.webhook_cache_ttl, s(120));
    assert_eq!(c.authorization.cache_authorized_ttl, s(300));
    assert_eq!(c.authorization.cache_unauthorized_ttl, s(30));
    assert_eq!(c.eviction.pressure_transition_period, s(300));
    assert_eq!(c.file_check_frequency, s(20));
    assert_eq!(c.image_minimum_gc_age, s(120));
    assert_eq!(c.node_status_update_frequency, s(10));
    assert_eq!(c.node_status_report_frequency, s(300));
    assert_eq!(c.runtime_request_timeout, s(120));
    assert_eq!(c.sync_frequency, s(60));
    assert_eq!(
        c.container_runtime_endpoint,
        DEFAULT_CONTAINER_RUNTIME_ENDPOINT
    );
    assert!(c.rotate_certificates && !c.server_tls_bootstrap);
    assert_eq!(c.cert_dir, PathBuf::from("/var/lib/nodelet/pki"));
    assert_eq!(
        c.authentication.client_ca_file,
        Some(PathBuf::from("/etc/kubernetes/pki/ca.crt"))
    );
    // Every field is honoured: nothing to warn about.
    assert_eq!(warnings(&loaded), Vec::<String>::new());
}

#[test]
fn kubeadm_drop_in_flags_behave_as_the_same_settings_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, KUBEADM_CONFIG).unwrap();
    let config_flag = format!("--config={}", config.display());
    // The drop-in's KUBELET_KUBECONFIG_ARGS and KUBELET_CONFIG_ARGS, kubeadm-flags.env's
    // KUBELET_KUBEADM_ARGS, and /etc/default/kubelet's KUBELET_EXTRA_ARGS.
    let line = kubelet_line(&[
        "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        &config_flag,
        "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
        "--pod-infra-container-image=registry.k8s.io/pause:3.10",
        "--hostname-override=worker-1",
        "--node-ip=10.0.0.7",
        "--node-labels=node-role.kubernetes.io/worker=,tier=edge",
        "--v=2",
    ]);
    let from_flags = load_kubelet(&line, &env()).unwrap();
    let file = KUBEADM_CONFIG
        .replace(
            "containerRuntimeEndpoint: \"\"",
            "containerRuntimeEndpoint: unix:///var/run/containerd/containerd.sock",
        )
        .replace("  verbosity: 0", "  verbosity: 2")
        + "bootstrapKubeconfig: /etc/kubernetes/bootstrap-kubelet.conf\n\
           kubeconfig: /etc/kubernetes/kubelet.conf\n\
           nodeName: worker-1\nnodeIP: 10.0.0.7\n\
           nodeLabels: {node-role.kubernetes.io/worker: '', tier: edge}\n\
           rootDir: /var/lib/kubelet\n";
    let from_file = parse(&file, source(), &env()).unwrap();
    assert_eq!(from_flags.config, from_file.config);
    assert_eq!(
        from_flags.config.cert_dir,
        PathBuf::from("/var/lib/kubelet/pki")
    );
    assert_eq!(
        from_flags.config.kubeconfig,
        Some(PathBuf::from("/etc/kubernetes/kubelet.conf"))
    );
    // --pod-infra-container-image has no effect in the kubelet either: nothing to say.
    assert_eq!(warnings(&from_flags), Vec::<String>::new());
}

#[test]
fn flags_win_over_the_file_and_errors_name_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!("{HEADER}nodeIP: 10.0.0.8\nmaxPods: 50\nfeatureGates: {{MemoryQoS: false, ContainerStopSignals: true}}\nauthentication: {{x509: {{clientCAFile: /ca.crt}}}}\n"),
    )
    .unwrap();
    let config_flag = format!("--config={}", config.display());
    let line = kubelet_line(&[
        &config_flag,
        "--node-ip=10.0.0.7",
        "--feature-gates=MemoryQoS=true",
        "--anonymous-auth=true",
        "--pods-per-core=10",
    ]);
    let loaded = load_kubelet(&line, &env()).unwrap();
    let c = &loaded.config;
    assert_eq!(c.node_ip, Some("10.0.0.7".parse().unwrap()), "flag wins");
    assert_eq!(c.max_pods, 50, "file kept where no flag");
    assert!(c.feature_enabled("MemoryQoS"), "flag wins per gate");
    assert!(
        c.feature_enabled("ContainerStopSignals"),
        "the file's other gates stay"
    );
    assert!(c.authentication.anonymous_enabled);
    assert_eq!(
        c.authentication.client_ca_file,
        Some(PathBuf::from("/ca.crt")),
        "a flag for one field of a group keeps the file's others"
    );
    assert_eq!(c.pods_per_core, 10, "--pods-per-core sets podsPerCore");
    let bad = kubelet_line(&[&config_flag, "--node-ip=127.0.0.1", "--max-pods=0"]);
    let error = load_kubelet(&bad, &env()).unwrap_err().to_string();
    assert!(
        error.contains(
            "--node-ip (nodeIP): Invalid value: \"127.0.0.1\": must not be a loopback address"
        ) && error.contains("--max-pods (maxPods): Invalid value: 0")
            && error.contains(&format!("over {}", config.display())),
        "{error}"
    );
    let missing = kubelet_line(&["--config=/no/such/config.yaml"]);
    let error = load_kubelet(&missing, &env()).unwrap_err().to_string();
    assert!(error.contains("/no/such/config.yaml"), "{error}");
}

#[test]
fn without_config_the_kubelets_flag_defaults_apply() {
    let loaded = load_kubelet(&kubelet_line(&["--hostname-override=n1"]), &env()).unwrap();
    let c = &loaded.config;
    assert!(c.authentication.anonymous_enabled);
    assert!(!c.authentication.webhook_enabled);
    assert_eq!(c.authorization.mode, AuthorizationMode::AlwaysAllow);
    assert_eq!(c.read_only_port, 10255);
    assert_eq!(c.root_dir, PathBuf::from(KUBELET_ROOT_DIR));
    assert_eq!(c.cert_dir, PathBuf::from("/var/lib/kubelet/pki"));
    assert_eq!(c.node_name, "n1");
    // The warning says what the open API allows: a shell in every container.
    let warning = loaded
        .warnings
        .iter()
        .find(|w| w.path == "authentication.anonymous.enabled")
        .expect("started without --config: the open kubelet API is warned about");
    assert!(
        warning
            .message
            .contains("anyone who can reach port 10250 on any address of this node")
            && warning
                .message
                .contains("exec into, attach to and port-forward into every container"),
        "{}",
        warning.message
    );
    // --root-dir moves the certificate directory with it; --cert-dir wins over both.
    let c = load_kubelet(&kubelet_line(&["--root-dir=/srv/kubelet"]), &env())
        .unwrap()
        .config;
    assert_eq!(c.cert_dir, PathBuf::from("/srv/kubelet/pki"));
    let c = load_kubelet(
        &kubelet_line(&["--root-dir=/srv/kubelet", "--cert-dir=/etc/kubelet-pki"]),
        &env(),
    )
    .unwrap()
    .config;
    assert_eq!(c.cert_dir, PathBuf::from("/etc/kubelet-pki"));
}

#[test]
fn config_dir_drop_ins_merge_over_the_file_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, format!("{HEADER}maxPods: 50\nauthentication: {{webhook: {{cacheTTL: 1m}}, x509: {{clientCAFile: /ca.crt}}}}\n")).unwrap();
    let drop_ins = dir.path().join("conf.d");
    std::fs::create_dir(&drop_ins).unwrap();
    std::fs::write(drop_ins.join("20-b.conf"), format!("{HEADER}maxPods: 70\n")).unwrap();
    std::fs::write(
        drop_ins.join("10-a.conf"),
        format!("{HEADER}maxPods: 60\nauthentication: {{webhook: {{cacheTTL: 3m}}}}\n"),
    )
    .unwrap();
    std::fs::write(drop_ins.join("30-c.yaml"), "maxPods: 1000\n").unwrap();
    let line = kubelet_line(&[
        &format!("--config={}", config.display()),
        &format!("--config-dir={}", drop_ins.display()),
    ]);
    let c = load_kubelet(&line, &env()).unwrap().config;
    assert_eq!(
        c.max_pods, 70,
        "the last drop-in wins; only *.conf files count"
    );
    assert_eq!(c.authentication.webhook_cache_ttl, s(180));
    assert_eq!(
        c.authentication.client_ca_file,
        Some(PathBuf::from("/ca.crt"))
    );
    let with_flag = kubelet_line(&[
        &format!("--config={}", config.display()),
        &format!("--config-dir={}", drop_ins.display()),
        "--max-pods=80",
    ]);
    assert_eq!(
        load_kubelet(&with_flag, &env()).unwrap().config.max_pods,
        80
    );
}

#[test]
fn open_kubelet_api_warning_table() {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let cases: [(IpAddr, u16, &str); 3] = [
        (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 10250, "anyone who can reach port 10250 on any address of this node (listening on 0.0.0.0) can exec into, attach to and port-forward into every container"),
        (IpAddr::V6(Ipv6Addr::UNSPECIFIED), 10250, "anyone who can reach port 10250 on any address of this node (listening on ::) can exec into"),
        (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5)), 11250, "anyone who can reach 10.0.0.5:11250 can exec into, attach to and port-forward into every container"),
    ];
    for (address, port, want) in cases {
        let message = crate::config::resolve::open_kubelet_api_warning(address, port);
        assert!(message.contains(want), "{message}");
        assert!(
            message.contains("as well as read every container's logs"),
            "{message}"
        );
    }
    // With the kubelet API off (port 0) there is nothing to warn about.
    let loaded = ok(
        "authentication: {anonymous: {enabled: true}}\nauthorization: {mode: AlwaysAllow}\nport: 0",
    );
    assert!(
        loaded
            .warnings
            .iter()
            .all(|w| w.path != "authentication.anonymous.enabled"),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn seccomp_default_and_unsafe_sysctls_are_read() {
    let loaded = ok("seccompDefault: true\nallowedUnsafeSysctls: [\"kernel.shm*\", net.core.somaxconn, \"kernel/msgmax\"]");
    assert!(warnings(&loaded).is_empty(), "{:?}", warnings(&loaded));
    assert!(loaded.config.seccomp_default);
    assert_eq!(
        loaded.config.allowed_unsafe_sysctls,
        ["kernel.shm*", "net.core.somaxconn", "kernel/msgmax"]
    );
    let defaults = ok("port: 10250");
    assert!(!defaults.config.seccomp_default);
    assert!(defaults.config.allowed_unsafe_sysctls.is_empty());

    let cases: &[(&str, &[&str])] = &[
        ("seccompDefault: yes-please", &["seccompDefault: Invalid value: \"yes-please\": expected a boolean (true or false)"]),
        ("allowedUnsafeSysctls: [vm.swappiness]", &["allowedUnsafeSysctls[0]: Invalid value: \"vm.swappiness\": the sysctl \"vm.swappiness\" are not known to be namespaced"]),
        ("allowedUnsafeSysctls: [\"kernel.*\"]", &["allowedUnsafeSysctls[0]: Invalid value: \"kernel.*\": the sysctls \"kernel.*\" are not known to be namespaced"]),
        ("allowedUnsafeSysctls: kernel.shmmax", &["allowedUnsafeSysctls: Invalid value: \"kernel.shmmax\": expected a list of sysctl names or patterns"]),
    ];
    for (text, want) in cases {
        assert_eq!(
            &field_errors(&format!("{HEADER}{text}")),
            want,
            "text {text:?}"
        );
    }
}

#[test]
fn gates_nodelet_implements_one_way_refuse_the_other_value() {
    let cases: &[(&str, &[&str])] = &[
        ("featureGates: {ContainerStopSignals: false}", &["featureGates.ContainerStopSignals: Invalid value: false: nodelet implements only ContainerStopSignals=true: lifecycle.stopSignal is always honoured"]),
        ("featureGates: {ContainerRestartRules: false}", &["featureGates.ContainerRestartRules: Invalid value: false: nodelet implements only ContainerRestartRules=true: containers' restartPolicy and restartPolicyRules are always honoured"]),
        ("featureGates: {RestartAllContainersOnContainerExits: false}", &["featureGates.RestartAllContainersOnContainerExits: Invalid value: false: nodelet implements only RestartAllContainersOnContainerExits=true: the RestartAllContainers restart rule is always honoured"]),
        ("kubeconfig: /etc/k.conf\nserverTLSBootstrap: true\nfeatureGates: {RotateKubeletServerCertificate: false}", &["serverTLSBootstrap: Invalid value: true: requires feature gate RotateKubeletServerCertificate"]),
        ("featureGates: {ChangeContainerStatusOnKubeletRestart: true}", &["featureGates.ChangeContainerStatusOnKubeletRestart: Invalid value: true: nodelet implements only ChangeContainerStatusOnKubeletRestart=false: a restart of nodelet keeps running containers' Started and Ready as last reported"]),
    ];
    for (text, want) in cases {
        assert_eq!(
            &field_errors(&format!("{HEADER}{text}")),
            want,
            "text {text:?}"
        );
    }
    // The implemented value is accepted without a word.
    let loaded = ok("featureGates: {ContainerStopSignals: true, RestartAllContainersOnContainerExits: true, KubeletSeparateDiskGC: true, StorageVersionAPI: true, RotateKubeletServerCertificate: false}");
    assert!(warnings(&loaded).is_empty(), "{:?}", warnings(&loaded));
    assert!(!loaded
        .config
        .feature_enabled("RotateKubeletServerCertificate"));
}
