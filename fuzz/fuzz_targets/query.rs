//! The query strings the APIs decode: `/containerLogs` options (`tailLines`, `sinceTime`, ...),
//! exec/attach/port-forward options, and the form decoding under both.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodelet::logs::LogOptions;
use nodelet::query::form_pairs;
use nodelet::server::streaming::stream_options;

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let _ = form_pairs(query);
    let now = jiff::Timestamp::from_second(1_800_000_000).expect("a valid time");
    let _ = LogOptions::from_query(query, now);
    let _ = stream_options(query);
});
