//! A certificate with its private key, parsed once: what the API client presents, what the
//! kubelet API serves, and what the rotation schedule reads (validity, subject, names).

use std::net::IpAddr;
use std::sync::Arc;

use jiff::Timestamp;
use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What a certificate says about itself, as the certificate manager compares it with what it
/// wants (`certSatisfiesTemplate`) and schedules its renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub not_before: Timestamp,
    pub not_after: Timestamp,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// The serial number, hex: tells two issued certificates apart in logs and tests.
    pub serial: String,
}

/// A certificate chain (leaf first) and its private key, both as PEM text and parsed.
/// `Debug` shows the certificate's details, never the key.
pub struct CertifiedPair {
    pub cert_pem: String,
    pub key_pem: String,
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub info: CertInfo,
}

impl std::fmt::Debug for CertifiedPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertifiedPair")
            .field("info", &self.info)
            .field("chain_len", &self.chain.len())
            .field("key_pem", &crate::redact::secret(&self.key_pem))
            .finish_non_exhaustive()
    }
}

/// The current pair of a certificate manager, shared by its readers.
pub type SharedPair = Arc<CertifiedPair>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairError {
    #[error("no PEM certificate")]
    NoCertificate,
    #[error("no PEM private key")]
    NoKey,
    #[error("not PEM: {0}")]
    Pem(String),
    #[error("the certificate does not parse: {0}")]
    Certificate(String),
}

impl CertifiedPair {
    /// Parses a chain and a key given separately (either may also hold the other: the
    /// kubelet's `kubelet-client-current.pem` carries both, and kubeconfigs name it twice).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedPair, PairError> {
        let chain = certificates(cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => PairError::NoKey,
            other => PairError::Pem(other.to_string()),
        })?;
        let leaf = chain.first().ok_or(PairError::NoCertificate)?;
        let info = cert_info(leaf)?;
        Ok(CertifiedPair {
            cert_pem: pem_blocks(cert_pem, SectionKind::Certificate),
            key_pem: key_block(key_pem),
            chain,
            key,
            info,
        })
    }

    /// Parses one PEM text holding the certificate chain and the key (the kubelet's pair file).
    pub fn from_combined_pem(pem: &[u8]) -> Result<CertifiedPair, PairError> {
        Self::from_pem(pem, pem)
    }

    /// The certificate chain, then the key: the kubelet's pair file format.
    pub fn combined_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }

    /// The leaf is valid at `now` (not before its start, not after its end).
    pub fn valid_at(&self, now: Timestamp) -> bool {
        self.info.not_before <= now && now <= self.info.not_after
    }

    /// The key, cloned (rustls takes ownership in its configurations).
    pub fn key_clone(&self) -> PrivateKeyDer<'static> {
        self.key.clone_key()
    }
}

/// Every certificate of a PEM text, in order.
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PairError> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PairError::Pem(e.to_string()))?;
    if chain.is_empty() {
        return Err(PairError::NoCertificate);
    }
    Ok(chain)
}

/// What a DER certificate says: validity, subject, names, serial.
pub fn cert_info(der: &[u8]) -> Result<CertInfo, PairError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| PairError::Certificate(e.to_string()))?;
    let validity = cert.validity();
    let timestamp = |t: x509_parser::time::ASN1Time| {
        Timestamp::from_second(t.timestamp())
            .map_err(|e| PairError::Certificate(format!("validity out of range: {e}")))
    };
    let subject = cert.subject();
    let common_name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let organizations = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    let mut dns_names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(dns) => {
                    dns_names.push(dns.to_string())
                }
                x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                        ips.push(IpAddr::from(v4));
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                        ips.push(IpAddr::from(v6));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        not_before: timestamp(validity.not_before)?,
        not_after: timestamp(validity.not_after)?,
        common_name,
        organizations,
        dns_names,
        ips,
        serial: cert.raw_serial_as_string().replace(':', ""),
    })
}

/// The PEM blocks of one kind, re-encoded (other blocks left out).
fn pem_blocks(pem: &[u8], wanted: SectionKind) -> String {
    let mut out = String::new();
    let mut rest = pem;
    while let Ok(Some((kind, der))) = rustls::pki_types::pem::from_buf(&mut rest) {
        if kind == wanted {
            out.push_str(&encode_pem(label(kind), &der));
        }
    }
    out
}

/// The first private key block, re-encoded.
fn key_block(pem: &[u8]) -> String {
    let mut rest = pem;
    while let Ok(Some((kind, der))) = rustls::pki_types::pem::from_buf(&mut rest) {
        if matches!(
            kind,
            SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey
        ) {
            return encode_pem(label(kind), &der);
        }
    }
    String::new()
}

fn label(kind: SectionKind) -> &'static str {
    match kind {
        SectionKind::Certificate => "CERTIFICATE",
        SectionKind::PrivateKey => "PRIVATE KEY",
        SectionKind::RsaPrivateKey => "RSA PRIVATE KEY",
        SectionKind::EcPrivateKey => "EC PRIVATE KEY",
        _ => "UNKNOWN",
    }
}

/// PEM with 64-character lines, as Go's `pem.Encode` writes it.
pub fn encode_pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A CA and a leaf it signed, for the certificate module's tests.
    pub(crate) fn issued(
        cn: &str,
        orgs: &[&str],
        sans: &[&str],
        not_before: Timestamp,
        not_after: Timestamp,
    ) -> (String, String) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        params.not_before = rcgen::date_time_ymd(1970, 1, 1)
            + std::time::Duration::from_secs(not_before.as_second() as u64);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1)
            + std::time::Duration::from_secs(not_after.as_second() as u64);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn parses_subject_names_and_validity() {
        let nb: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let na: Timestamp = "2030-01-01T00:02:00Z".parse().unwrap();
        let (cert, key) = issued(
            "system:node:n1",
            &["system:nodes"],
            &["n1", "10.0.0.7"],
            nb,
            na,
        );
        let pair = CertifiedPair::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(pair.info.common_name, "system:node:n1");
        assert_eq!(pair.info.organizations, vec!["system:nodes"]);
        assert_eq!(pair.info.dns_names, vec!["n1"]);
        assert_eq!(pair.info.ips, vec!["10.0.0.7".parse::<IpAddr>().unwrap()]);
        assert_eq!((pair.info.not_before, pair.info.not_after), (nb, na));
        assert!(pair.valid_at(nb) && pair.valid_at(na));
        assert!(!pair.valid_at("2030-01-01T00:02:01Z".parse().unwrap()));
        // The combined form (the kubelet's pair file) parses back to the same pair.
        let again = CertifiedPair::from_combined_pem(pair.combined_pem().as_bytes()).unwrap();
        assert_eq!(again.info, pair.info);
        assert_eq!(again.chain, pair.chain);
    }

    #[test]
    fn names_what_is_missing() {
        let nb: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let (cert, key) = issued("x", &[], &[], nb, nb);
        let cases: &[(&str, &str, PairError)] = &[
            (&cert, "", PairError::NoKey),
            ("", &key, PairError::NoCertificate),
            (&key, &key, PairError::NoCertificate),
        ];
        for (c, k, want) in cases {
            let err = CertifiedPair::from_pem(c.as_bytes(), k.as_bytes()).unwrap_err();
            assert_eq!(&err, want, "cert {:.20} key {:.20}", c, k);
        }
    }
}
