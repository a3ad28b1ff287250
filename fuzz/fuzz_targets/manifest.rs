//! A static pod manifest (YAML or JSON, as the file source reads it): decoded, defaulted and
//! validated, or refused with errors that each name the file.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use nodelet::source::manifest::decode_manifest;

fuzz_target!(|data: &[u8]| {
    let file = Path::new("/etc/kubernetes/manifests/fuzz.yaml");
    match decode_manifest(data, file, "node-1") {
        Ok(parsed) => {
            // An accepted pod has the identity the file source gives every static pod.
            let meta = &parsed.pod.metadata;
            assert!(meta.uid.as_deref().is_some_and(|u| !u.is_empty()));
            assert!(meta.name.as_deref().is_some_and(|n| n.ends_with("-node-1")));
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "a refused manifest says why");
        }
    }
});
