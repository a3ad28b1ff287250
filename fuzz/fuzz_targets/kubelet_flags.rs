//! The kubelet's command line (what kubeadm's drop-in and node images pass): parsed with the
//! pflag rules and laid over the defaults, or refused with an error naming the flag (never a
//! panic). One argument per line of the input.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use nodelet::config::{flags, load_kubelet, Environment};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let args: Vec<String> = text.lines().map(str::to_string).collect();
    let mut line = match flags::parse(&args, Path::new("/var/lib/kubelet")) {
        Ok(line) => line,
        Err(error) => {
            assert!(!error.to_string().is_empty());
            return;
        }
    };
    // The files the flags name are the machine's, not the input's.
    line.config_file = None;
    line.config_dir = None;
    let env = Environment {
        hostname: "node-1".to_string(),
    };
    if let Err(error) = load_kubelet(&line, &env) {
        assert!(!error.to_string().is_empty());
    }
});
