//! A resource quantity (`500m`, `1Gi`, `1e3`): parsed or refused; what parses prints in a form
//! that parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodelet::quantity::Quantity;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = Quantity::parse(text) {
        let printed = q.to_string();
        let again = Quantity::parse(&printed)
            .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
        assert_eq!(again, q, "{text:?} printed as {printed:?}");
    }
});
