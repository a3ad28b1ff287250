//! Certificates from outside: the PEM an API server returns in a CSR's `status.certificate`,
//! and the certificate/key files nodelet finds in `certDir` at start. Read, or refused with an
//! error (never a panic).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodelet::certificate::pair::{cert_info, certificates, CertifiedPair};

fuzz_target!(|data: &[u8]| {
    if let Ok(chain) = certificates(data) {
        for der in chain {
            let _ = cert_info(&der);
        }
    }
    let _ = cert_info(data);
    if let Err(error) = CertifiedPair::from_combined_pem(data) {
        assert!(!error.to_string().is_empty());
    }
});
