//! URL query strings as Go's `url.ParseQuery` reads them (the kubelet's endpoints are Go
//! handlers, and clients encode for them): `&`-separated `key=value` pairs, form-decoded.

/// Every `key=value` pair in order, repeated keys included (`command=ls&command=-l`); a pair
/// without `=` has an empty value. Decoding is `application/x-www-form-urlencoded`
/// (`form_urlencoded`): `+` is a space, `%XX` a byte, a malformed escape is kept as written, and
/// bytes that are not UTF-8 become U+FFFD.
pub fn form_pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.trim_start_matches('?').as_bytes())
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect()
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
            let decoded = form_pairs(&format!("k={input}"));
            assert_eq!(decoded, [("k".to_string(), want.to_string())], "{input}");
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
