//! URL query strings as Go's `url.ParseQuery` reads them (the kubelet's endpoints are Go
//! handlers, and clients encode for them): `&`-separated `key=value` pairs, form-decoded.

/// Every `key=value` pair in order, repeated keys included (`command=ls&command=-l`); a pair
/// without `=` has an empty value.
pub fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .trim_start_matches('?')
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => (percent_decode(key), percent_decode(value)),
            None => (percent_decode(pair), String::new()),
        })
        .collect()
}

/// Form decoding: `+` is a space, `%XX` a byte; malformed escapes are kept as written, and
/// bytes that are not UTF-8 become U+FFFD.
pub fn percent_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    // Two hex digits make at most 255.
                    out.push(u8::try_from(high * 16 + low).unwrap_or(b'%'));
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decode_table() {
        let cases = [
            ("a%20b", "a b"),
            ("a+b", "a b"),
            ("%3A", ":"),
            ("%E2%9C%93", "✓"),
            ("100%", "100%"),
            ("%zz", "%zz"),
            ("%4", "%4"),
            ("%ff", "\u{fffd}"),
        ];
        for (input, want) in cases {
            assert_eq!(percent_decode(input), want, "{input}");
        }
    }

    #[test]
    fn form_pairs_table() {
        let s = |k: &str, v: &str| (k.to_string(), v.to_string());
        let cases = [
            ("", vec![]),
            ("?a=1&b", vec![s("a", "1"), s("b", "")]),
            (
                "command=ls&command=-l+x&&x=%26",
                vec![s("command", "ls"), s("command", "-l x"), s("x", "&")],
            ),
        ];
        for (input, want) in cases {
            assert_eq!(form_pairs(input), want, "{input}");
        }
    }
}
