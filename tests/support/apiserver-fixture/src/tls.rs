//! HTTPS for the fixture (`FixtureOptions::tls`): a cluster CA of its own, a serving
//! certificate for 127.0.0.1 and `localhost`, client certificates checked against the CA on
//! every request (as the API server's x509 authenticator does: the handshake only asks for a
//! certificate, the request is authenticated with it at the time it arrives), and the CA's
//! signing of approved CSRs.

use std::sync::Arc;

use jiff::Timestamp;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};

use crate::error::FixtureError;

/// The cluster's certificate authority (kube-controller-manager's `--cluster-signing-*`).
pub struct Authority {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
}

/// Sets a certificate's validity (rcgen takes `time`'s date type; the fixture uses jiff).
fn set_validity(
    params: &mut rcgen::CertificateParams,
    not_before: Timestamp,
    not_after: Timestamp,
) {
    let since_epoch = |t: Timestamp| std::time::Duration::from_secs(t.as_second().max(0) as u64);
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + since_epoch(not_before);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + since_epoch(not_after);
}

impl Authority {
    pub fn new() -> Result<Authority, FixtureError> {
        let tls = |e: rcgen::Error| FixtureError::Tls(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(tls)?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(tls)?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes");
        let now = Timestamp::now();
        set_validity(
            &mut params,
            now - jiff::SignedDuration::from_hours(1),
            now + jiff::SignedDuration::from_hours(24 * 365 * 10),
        );
        let cert = params.self_signed(&key).map_err(tls)?;
        Ok(Authority {
            ca_pem: cert.pem(),
            ca_der: cert.der().clone(),
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM (`/etc/kubernetes/pki/ca.crt`).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client certificate and key for `cn` in groups `orgs`, valid for a year.
    pub fn client_pem(&self, cn: &str, orgs: &[&str]) -> Result<(String, String), FixtureError> {
        let tls = |e: rcgen::Error| FixtureError::Tls(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(tls)?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(tls)?;
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let now = Timestamp::now();
        set_validity(
            &mut params,
            now - jiff::SignedDuration::from_mins(5),
            now + jiff::SignedDuration::from_hours(24 * 365),
        );
        let cert = params.signed_by(&key, &self.issuer).map_err(tls)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Signs a certificate request with the given usages and validity (the subject and
    /// subjectAltNames are the request's).
    pub fn sign(
        &self,
        request: rcgen::CertificateSigningRequestParams,
        usages: &[String],
        not_before: Timestamp,
        not_after: Timestamp,
    ) -> Result<String, String> {
        let mut request = request;
        request.params.is_ca = rcgen::IsCa::ExplicitNoCa;
        set_validity(&mut request.params, not_before, not_after);
        request.params.use_authority_key_identifier_extension = true;
        crate::csr::usages_to_params(&mut request.params, usages);
        request
            .signed_by(&self.issuer)
            .map(|cert| cert.pem())
            .map_err(|e| e.to_string())
    }

    /// The serving certificate chain and key for 127.0.0.1 and `localhost`.
    fn serving(
        &self,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), FixtureError> {
        let tls = |e: rcgen::Error| FixtureError::Tls(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(tls)?;
        let mut params = rcgen::CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "127.0.0.1".to_string(),
        ])
        .map_err(tls)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).map_err(tls)?;
        let key = PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| FixtureError::Tls(e.to_string()))?;
        Ok((vec![cert.der().clone(), self.ca_der.clone()], key))
    }
}

/// The TLS side of a fixture: its CA, its server configuration, and the verifier that
/// authenticates client certificates per request.
pub struct FixtureTls {
    pub authority: Authority,
    pub server_config: Arc<ServerConfig>,
    verifier: Arc<dyn ClientCertVerifier>,
}

/// The certificates a connection's client presented (none for token or anonymous clients).
#[derive(Debug, Clone, Default)]
pub struct PeerCertificates(pub Vec<CertificateDer<'static>>);

impl FixtureTls {
    pub fn new() -> Result<FixtureTls, FixtureError> {
        let authority = Authority::new()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(authority.ca_der.clone())
            .map_err(|e| FixtureError::Tls(e.to_string()))?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(|e| FixtureError::Tls(e.to_string()))?;
        let (chain, key) = authority.serving()?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| FixtureError::Tls(e.to_string()))?
            .with_client_cert_verifier(Arc::new(RequestClientCert(verifier.clone())))
            .with_single_cert(chain, key)
            .map_err(|e| FixtureError::Tls(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(FixtureTls {
            authority,
            server_config: Arc::new(config),
            verifier,
        })
    }

    /// Checks a client's chain against the CA at `now`: `Ok` with the leaf's (CN, O...), or why
    /// not (expired, unknown authority).
    pub fn authenticate(
        &self,
        peer: &PeerCertificates,
        now: Timestamp,
    ) -> Result<Option<(String, Vec<String>)>, String> {
        let Some((leaf, intermediates)) = peer.0.split_first() else {
            return Ok(None);
        };
        let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            now.as_second().max(0) as u64
        ));
        self.verifier
            .verify_client_cert(leaf, intermediates, at)
            .map_err(|e| format!("verifying certificate: {e}"))?;
        let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|e| e.to_string())?;
        let subject = cert.subject();
        let name = subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default()
            .to_string();
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(String::from))
            .collect();
        Ok(Some((name, groups)))
    }
}

/// Go's `tls.RequestClientCert`, as the API server serves: a client certificate is asked for
/// and its handshake signature checked, but the chain is judged per request, not here.
#[derive(Debug)]
struct RequestClientCert(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(
        authority: &Authority,
        not_before: Timestamp,
        not_after: Timestamp,
    ) -> PeerCertificates {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        let request = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
        let cert = authority
            .sign(
                request,
                &["digital signature".into(), "client auth".into()],
                not_before,
                not_after,
            )
            .unwrap();
        let (_, block) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
        PeerCertificates(vec![CertificateDer::from(block.contents)])
    }

    #[test]
    fn client_certificates_are_judged_when_the_request_comes() {
        let tls = FixtureTls::new().unwrap();
        let now = Timestamp::now();
        let minutes = |m: i64| jiff::SignedDuration::from_mins(m);
        let valid = signed(&tls.authority, now - minutes(5), now + minutes(2));
        assert_eq!(
            tls.authenticate(&valid, now).unwrap(),
            Some((
                "system:node:n1".to_string(),
                vec!["system:nodes".to_string()]
            ))
        );
        // The same certificate three minutes later: expired, whatever the connection.
        let later = tls.authenticate(&valid, now + minutes(3)).unwrap_err();
        assert!(
            later.contains("expired") || later.contains("Expired"),
            "{later}"
        );
        // Another cluster's certificate authenticates nobody.
        let other = FixtureTls::new().unwrap();
        let foreign = signed(&other.authority, now - minutes(5), now + minutes(5));
        assert!(tls.authenticate(&foreign, now).is_err());
        assert_eq!(
            tls.authenticate(&PeerCertificates::default(), now).unwrap(),
            None
        );
    }
}
