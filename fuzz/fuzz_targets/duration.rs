//! A Go duration string (`1m30s`, `500ms`): parsed or refused; what parses formats back to a
//! string that parses to the same duration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodelet::config::{format_duration, parse_duration};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = parse_duration(text) {
        let printed = format_duration(d);
        let again = parse_duration(&printed)
            .unwrap_or_else(|e| panic!("{text:?} formatted as {printed:?}, which fails: {e}"));
        assert_eq!(again, d, "{text:?} formatted as {printed:?}");
    }
});
