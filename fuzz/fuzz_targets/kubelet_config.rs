//! The KubeletConfiguration file: loaded, or refused with an error (never a panic).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use nodelet::config::{parse, Environment};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = Environment {
        hostname: "node-1".to_string(),
    };
    if let Err(error) = parse(text, Path::new("/etc/nodelet/config.yaml"), &env) {
        assert!(!error.to_string().is_empty());
    }
});
