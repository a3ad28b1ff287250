//! One line of a CRI container log file (`<time> <stream> <P|F> <text>`), as written by
//! containerd and read back for `/containerLogs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodelet::logs::parse_cri_line;

fuzz_target!(|data: &[u8]| {
    if let Ok(entry) = parse_cri_line(data) {
        // What the parser hands out is a part of the line it was given.
        assert!(entry.content.len() <= data.len());
    }
});
