//! The kubelet server's settings (the authenticated API on `port`): whether it runs
//! (`enableServer`), which debugging handlers it installs (`enableDebuggingHandlers` and the
//! handlers it gates), its TLS (`tlsMinVersion`, `tlsCipherSuites`, `tlsCurvePreferences`) and
//! the idle timeout of exec/attach/port-forward streams (`streamingConnectionIdleTimeout`).
//!
//! Each is honoured as the kubelet does, or refused when nodelet's TLS library (rustls with
//! the ring provider) cannot do what the value asks: a refused value stops startup with the
//! field and value named, never a silently weaker server.

use std::time::Duration;

use super::{FieldError, FieldErrorKind, Warning};

/// The kubelet's default `streamingConnectionIdleTimeout`.
pub const DEFAULT_STREAMING_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

/// What the kubelet API serves and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletServer {
    /// `enableServer`: false → no listener on `port` at all (the read-only and healthz
    /// listeners are separate, as in the kubelet's `startKubelet`).
    pub enable_server: bool,
    /// `enableDebuggingHandlers`: false → exec, attach, portForward, containerLogs, run,
    /// runningpods, `/logs/` and `/debug/pprof/` answer 405 "Debug endpoints are disabled."
    /// and `/configz` is not installed (the kubelet's `InstallDebuggingDisabledHandlers`).
    pub enable_debugging_handlers: bool,
    /// `enableSystemLogHandler` (with debugging handlers on): false → `/logs/` answers 405.
    pub enable_system_log_handler: bool,
    /// `enableProfilingHandler` (with debugging handlers on): false → `/debug/pprof/` 405.
    pub enable_profiling_handler: bool,
    /// `enableDebugFlagsHandler` (with debugging handlers on): false → `/debug/flags/v` 405.
    pub enable_debug_flags_handler: bool,
    /// `streamingConnectionIdleTimeout`: a relayed stream with no bytes either way for this
    /// long is closed (zero in the file is the kubelet's "unset": 4h).
    pub streaming_idle_timeout: Duration,
    pub tls: TlsSettings,
}

impl Default for KubeletServer {
    fn default() -> Self {
        KubeletServer {
            enable_server: true,
            enable_debugging_handlers: true,
            enable_system_log_handler: true,
            enable_profiling_handler: true,
            enable_debug_flags_handler: true,
            streaming_idle_timeout: DEFAULT_STREAMING_IDLE_TIMEOUT,
            tls: TlsSettings::default(),
        }
    }
}

/// The lowest TLS version the server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum TlsVersion {
    /// The kubelet's `DefaultTLSVersion` when `tlsMinVersion` is empty.
    #[default]
    Tls12,
    Tls13,
}

impl TlsVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "VersionTLS12",
            TlsVersion::Tls13 => "VersionTLS13",
        }
    }
}

/// A TLS 1.2 cipher suite nodelet can serve (the ECDHE AEAD suites rustls implements). TLS
/// 1.3's suites are not configurable, in Go's `crypto/tls` as in rustls: all are always on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CipherSuite {
    EcdheEcdsaAes128GcmSha256,
    EcdheEcdsaAes256GcmSha384,
    EcdheEcdsaChacha20Poly1305,
    EcdheRsaAes128GcmSha256,
    EcdheRsaAes256GcmSha384,
    EcdheRsaChacha20Poly1305,
}

impl CipherSuite {
    /// Go's name (`tls.CipherSuiteName`).
    pub fn go_name(self) -> &'static str {
        match self {
            CipherSuite::EcdheEcdsaAes128GcmSha256 => "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            CipherSuite::EcdheEcdsaAes256GcmSha384 => "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            CipherSuite::EcdheEcdsaChacha20Poly1305 => {
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
            }
            CipherSuite::EcdheRsaAes128GcmSha256 => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            CipherSuite::EcdheRsaAes256GcmSha384 => "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            CipherSuite::EcdheRsaChacha20Poly1305 => "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        }
    }
}

/// A key exchange group (`tlsCurvePreferences` holds Go's `tls.CurveID`, the IANA number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KxGroup {
    Secp256r1,
    Secp384r1,
    X25519,
}

impl KxGroup {
    /// Go's `tls.CurveID` (the IANA named-group number).
    pub fn curve_id(self) -> u16 {
        match self {
            KxGroup::Secp256r1 => 23,
            KxGroup::Secp384r1 => 24,
            KxGroup::X25519 => 29,
        }
    }
}

/// The server's TLS, as resolved from the three fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSettings {
    pub min_version: TlsVersion,
    /// TLS 1.2 suites in the order given; empty = rustls' defaults (`tlsCipherSuites` unset).
    pub cipher_suites_tls12: Vec<CipherSuite>,
    /// Whether `tlsCipherSuites` was set: a list of TLS 1.3 names only leaves no TLS 1.2
    /// suite, as Go's `CipherSuites` would (TLS 1.2 handshakes then fail).
    pub cipher_suites_set: bool,
    /// In preference order; empty = rustls' defaults.
    pub curve_preferences: Vec<KxGroup>,
}

/// Go's cipher suite names (`tls.CipherSuites()` plus the two legacy CHACHA20 names the
/// kubelet's flag keeps) → what nodelet serves for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SuiteName {
    Tls12(CipherSuite),
    /// A TLS 1.3 suite: always on, as in Go; naming it changes nothing.
    Tls13,
    /// In Go's `tls.InsecureCipherSuites()` (CBC, RC4, 3DES, RSA key exchange): the kubelet
    /// accepts it with a log line; nodelet refuses it (rustls has none of them).
    Insecure,
}

fn suite_name(name: &str) -> Option<SuiteName> {
    use CipherSuite::*;
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => SuiteName::Tls12(EcdheEcdsaAes128GcmSha256),
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => SuiteName::Tls12(EcdheEcdsaAes256GcmSha384),
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => SuiteName::Tls12(EcdheEcdsaChacha20Poly1305),
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => SuiteName::Tls12(EcdheRsaAes128GcmSha256),
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => SuiteName::Tls12(EcdheRsaAes256GcmSha384),
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            SuiteName::Tls12(EcdheRsaChacha20Poly1305)
        }
        "TLS_AES_128_GCM_SHA256" | "TLS_AES_256_GCM_SHA384" | "TLS_CHACHA20_POLY1305_SHA256" => {
            SuiteName::Tls13
        }
        // Go's secure list without a rustls implementation: CBC with SHA-1 (ECDHE key
        // exchange) is in `tls.CipherSuites()`, so the kubelet takes it without a word.
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"
        | "TLS_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_RSA_WITH_AES_256_CBC_SHA"
        | "TLS_RSA_WITH_AES_128_GCM_SHA256"
        | "TLS_RSA_WITH_AES_256_GCM_SHA384"
        | "TLS_RSA_WITH_AES_128_CBC_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"
        | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"
        | "TLS_RSA_WITH_RC4_128_SHA"
        | "TLS_RSA_WITH_3DES_EDE_CBC_SHA"
        | "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA"
        | "TLS_ECDHE_RSA_WITH_RC4_128_SHA"
        | "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA" => SuiteName::Insecure,
        _ => return None,
    })
}

/// The names nodelet serves, for the refusal messages.
const SERVED_SUITES: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

fn invalid(path: String, value: String, detail: impl Into<String>) -> FieldError {
    FieldError {
        path,
        kind: FieldErrorKind::Invalid,
        value: Some(value),
        detail: detail.into(),
    }
}

/// `tlsMinVersion`: empty is the kubelet's default (TLS 1.2); 1.0 and 1.1 are valid kubelet
/// values nodelet refuses (rustls implements neither).
pub fn tls_min_version(value: &str) -> Result<TlsVersion, FieldError> {
    match value {
        "" | "VersionTLS12" => Ok(TlsVersion::Tls12),
        "VersionTLS13" => Ok(TlsVersion::Tls13),
        "VersionTLS10" | "VersionTLS11" => Err(invalid(
            "tlsMinVersion".into(),
            format!("{value:?}"),
            "refused by nodelet: its TLS library (rustls) implements only TLS 1.2 and 1.3; use VersionTLS12 or VersionTLS13",
        )),
        _ => Err(FieldError {
            path: "tlsMinVersion".into(),
            kind: FieldErrorKind::NotSupported,
            value: Some(format!("{value:?}")),
            detail: "unknown tls version; supported values: \"VersionTLS12\", \"VersionTLS13\" (the kubelet's \"VersionTLS10\" and \"VersionTLS11\" are refused by nodelet)".into(),
        }),
    }
}

/// `tlsCipherSuites`: Go's names mapped onto rustls' suites, in order, duplicates kept once.
pub fn tls_cipher_suites(names: &[String]) -> Result<Vec<CipherSuite>, Vec<FieldError>> {
    let mut suites = Vec::new();
    let mut errors = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let path = format!("tlsCipherSuites[{i}]");
        match suite_name(name) {
            Some(SuiteName::Tls12(suite)) => {
                if !suites.contains(&suite) {
                    suites.push(suite);
                }
            }
            Some(SuiteName::Tls13) => {}
            Some(SuiteName::Insecure) => errors.push(invalid(
                path,
                format!("{name:?}"),
                format!(
                    "refused by nodelet: an insecure or non-AEAD suite its TLS library (rustls) does not implement; served suites: {}",
                    SERVED_SUITES.join(", ")
                ),
            )),
            None => errors.push(FieldError {
                path,
                kind: FieldErrorKind::NotSupported,
                value: Some(format!("{name:?}")),
                detail: format!(
                    "Cipher suite {name} not supported or doesn't exist; supported values: {}",
                    SERVED_SUITES.join(", ")
                ),
            }),
        }
    }
    if errors.is_empty() {
        Ok(suites)
    } else {
        Err(errors)
    }
}

/// `tlsCurvePreferences`: the kubelet's range and duplicate checks (`TLSCurvePreferences`),
/// then Go's curve IDs mapped onto rustls' (ring) key exchange groups; P-521 and the hybrid
/// post-quantum groups Go knows are refused (ring has none of them).
pub fn tls_curve_preferences(ids: &[i64]) -> Result<Vec<KxGroup>, Vec<FieldError>> {
    let mut groups = Vec::new();
    let mut seen = Vec::new();
    let mut errors = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let path = format!("tlsCurvePreferences[{i}]");
        if id <= 0 || id > i64::from(u16::MAX) {
            errors.push(invalid(
                path,
                id.to_string(),
                format!("curve preference {id} is out of range (must be 1-65535)"),
            ));
            continue;
        }
        if seen.contains(&id) {
            errors.push(invalid(
                path,
                id.to_string(),
                format!("duplicate curve preference {id}"),
            ));
            continue;
        }
        seen.push(id);
        match id {
            23 => groups.push(KxGroup::Secp256r1),
            24 => groups.push(KxGroup::Secp384r1),
            29 => groups.push(KxGroup::X25519),
            _ => errors.push(invalid(
                path,
                id.to_string(),
                format!(
                    "refused by nodelet: curve {id} is not implemented by its TLS library (rustls with ring); supported: 23 (P-256), 24 (P-384), 29 (X25519)"
                ),
            )),
        }
    }
    if errors.is_empty() {
        Ok(groups)
    } else {
        Err(errors)
    }
}

/// The three TLS fields together, with the kubelet's note that a TLS 1.3 minimum leaves the
/// cipher suites without effect (Go's TLS 1.3 suites are not configurable).
pub fn tls_settings(
    min_version: Option<&str>,
    cipher_suites: Option<&[String]>,
    curves: Option<&[i64]>,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<Warning>,
) -> TlsSettings {
    let mut tls = TlsSettings::default();
    match tls_min_version(min_version.unwrap_or("")) {
        Ok(v) => tls.min_version = v,
        Err(e) => errors.push(e),
    }
    if let Some(names) = cipher_suites.filter(|n| !n.is_empty()) {
        match tls_cipher_suites(names) {
            Ok(suites) => {
                tls.cipher_suites_tls12 = suites;
                tls.cipher_suites_set = true;
            }
            Err(e) => errors.extend(e),
        }
        if tls.min_version == TlsVersion::Tls13 {
            warnings.push(Warning {
                path: "tlsCipherSuites".into(),
                message: "with tlsMinVersion VersionTLS13 the suites are TLS 1.3's own, which are not configurable: this list has no effect (as in the kubelet)".into(),
            });
        }
    }
    if let Some(ids) = curves {
        match tls_curve_preferences(ids) {
            Ok(groups) => tls.curve_preferences = groups,
            Err(e) => errors.extend(e),
        }
    }
    tls
}

/// `enableSystemLogQuery` and `enableContentionProfiling`: nodelet has neither a log query
/// endpoint nor a Go runtime to profile, so `true` is refused (false is what it does).
pub fn refuse_true(path: &str, value: Option<bool>, what: &str) -> Option<FieldError> {
    (value == Some(true)).then(|| {
        invalid(
            path.into(),
            "true".into(),
            format!("refused by nodelet: {what}"),
        )
    })
}

/// `streamingConnectionIdleTimeout`: absent or zero is the kubelet's 4h (its defaulting
/// treats a zero duration as unset, so kubeadm's `0s` means 4h, not "no timeout").
pub fn streaming_idle_timeout(value: Option<Duration>) -> Duration {
    value
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_STREAMING_IDLE_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn min_version_table() {
        let cases: &[(&str, Result<TlsVersion, &str>)] = &[
            ("", Ok(TlsVersion::Tls12)),
            ("VersionTLS12", Ok(TlsVersion::Tls12)),
            ("VersionTLS13", Ok(TlsVersion::Tls13)),
            (
                "VersionTLS10",
                Err("tlsMinVersion: Invalid value: \"VersionTLS10\": refused by nodelet"),
            ),
            (
                "VersionTLS11",
                Err("tlsMinVersion: Invalid value: \"VersionTLS11\": refused by nodelet"),
            ),
            (
                "TLS1.3",
                Err("tlsMinVersion: Unsupported value: \"TLS1.3\": unknown tls version"),
            ),
            (
                "versiontls13",
                Err("tlsMinVersion: Unsupported value: \"versiontls13\""),
            ),
        ];
        for (value, want) in cases {
            match (tls_min_version(value), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{value}"),
                (Err(got), Err(want)) => {
                    let got = got.to_string();
                    assert!(got.starts_with(want), "{value}: {got}");
                }
                (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn cipher_suites_table() {
        use CipherSuite::*;
        let ok: &[(&[&str], &[CipherSuite])] = &[
            (&[], &[]),
            (
                &[
                    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
                ],
                &[EcdheRsaAes128GcmSha256, EcdheEcdsaAes256GcmSha384],
            ),
            // The legacy CHACHA20 names and the SHA256 ones are one suite, kept once.
            (
                &[
                    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
                    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
                    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
                ],
                &[EcdheRsaChacha20Poly1305, EcdheEcdsaChacha20Poly1305],
            ),
            // TLS 1.3 names are accepted and change nothing (always on).
            (
                &[
                    "TLS_AES_128_GCM_SHA256",
                    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                ],
                &[EcdheRsaAes256GcmSha384],
            ),
            (&["TLS_CHACHA20_POLY1305_SHA256"], &[]),
        ];
        for (names, want) in ok {
            assert_eq!(
                tls_cipher_suites(&strings(names)).unwrap(),
                *want,
                "{names:?}"
            );
        }
        let refused: &[(&[&str], &[&str])] = &[
            (
                &["TLS_RSA_WITH_AES_128_CBC_SHA"],
                &["tlsCipherSuites[0]: Invalid value: \"TLS_RSA_WITH_AES_128_CBC_SHA\": refused by nodelet: an insecure or non-AEAD suite"],
            ),
            (
                &["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_RC4_128_SHA", "TLS_FOO"],
                &[
                    "tlsCipherSuites[1]: Invalid value: \"TLS_ECDHE_RSA_WITH_RC4_128_SHA\": refused by nodelet",
                    "tlsCipherSuites[2]: Unsupported value: \"TLS_FOO\": Cipher suite TLS_FOO not supported or doesn't exist",
                ],
            ),
            (
                &["TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"],
                &["tlsCipherSuites[0]: Invalid value: \"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA\": refused by nodelet"],
            ),
            (&["tls_aes_128_gcm_sha256"], &["tlsCipherSuites[0]: Unsupported value"]),
        ];
        for (names, want) in refused {
            let got: Vec<String> = tls_cipher_suites(&strings(names))
                .unwrap_err()
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got.len(), want.len(), "{names:?}: {got:?}");
            for (got, want) in got.iter().zip(want.iter()) {
                assert!(got.starts_with(want), "{names:?}: {got}");
            }
        }
    }

    #[test]
    fn curve_preferences_table() {
        use KxGroup::*;
        assert_eq!(tls_curve_preferences(&[]).unwrap(), vec![]);
        assert_eq!(
            tls_curve_preferences(&[29, 23, 24]).unwrap(),
            vec![X25519, Secp256r1, Secp384r1]
        );
        let refused: &[(&[i64], &str)] = &[
            (&[0], "tlsCurvePreferences[0]: Invalid value: 0: curve preference 0 is out of range (must be 1-65535)"),
            (&[-1], "tlsCurvePreferences[0]: Invalid value: -1: curve preference -1 is out of range"),
            (&[65536], "tlsCurvePreferences[0]: Invalid value: 65536: curve preference 65536 is out of range"),
            (&[i64::MAX], "tlsCurvePreferences[0]: Invalid value: 9223372036854775807: curve preference"),
            (&[29, 29], "tlsCurvePreferences[1]: Invalid value: 29: duplicate curve preference 29"),
            (&[25], "tlsCurvePreferences[0]: Invalid value: 25: refused by nodelet: curve 25 is not implemented"),
            (&[4588], "tlsCurvePreferences[0]: Invalid value: 4588: refused by nodelet: curve 4588"),
        ];
        for (ids, want) in refused {
            let got = tls_curve_preferences(ids).unwrap_err();
            assert_eq!(got.len(), 1, "{ids:?}: {got:?}");
            let got = got[0].to_string();
            assert!(got.starts_with(want), "{ids:?}: {got}");
        }
    }

    #[test]
    fn cipher_suites_with_a_tls13_minimum_warn_as_the_kubelet() {
        let (mut errors, mut warnings) = (Vec::new(), Vec::new());
        let names = strings(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]);
        let tls = tls_settings(
            Some("VersionTLS13"),
            Some(&names),
            None,
            &mut errors,
            &mut warnings,
        );
        assert!(errors.is_empty());
        assert_eq!(tls.min_version, TlsVersion::Tls13);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0]
            .message
            .starts_with("with tlsMinVersion VersionTLS13 the suites are TLS 1.3"));
        let (mut errors, mut warnings) = (Vec::new(), Vec::new());
        let tls = tls_settings(
            Some("VersionTLS12"),
            Some(&names),
            Some(&[23]),
            &mut errors,
            &mut warnings,
        );
        assert!(errors.is_empty() && warnings.is_empty());
        assert!(tls.cipher_suites_set);
        assert_eq!(tls.curve_preferences, vec![KxGroup::Secp256r1]);
    }

    #[test]
    fn streaming_idle_timeout_zero_is_the_default() {
        assert_eq!(streaming_idle_timeout(None), DEFAULT_STREAMING_IDLE_TIMEOUT);
        assert_eq!(
            streaming_idle_timeout(Some(Duration::ZERO)),
            DEFAULT_STREAMING_IDLE_TIMEOUT
        );
        assert_eq!(
            streaming_idle_timeout(Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
    }
}
