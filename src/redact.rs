//! `Debug` output of values that hold secrets (private keys, tokens, passwords): the value is
//! replaced by `<redacted>`, so a `{:?}` in a log line or a panic message cannot leak it. Only
//! whether it is set stays visible.

use std::fmt;

/// Debug-prints as `<redacted>`, or `<empty>` for an empty value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Redacted {
    set: bool,
}

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.set { "<redacted>" } else { "<empty>" })
    }
}

/// The stand-in of a secret string or byte string.
pub fn secret(value: impl AsRef<[u8]>) -> Redacted {
    Redacted {
        set: !value.as_ref().is_empty(),
    }
}

/// The stand-in of an optional secret: `None`, or `Some(<redacted>)`.
pub fn optional(value: Option<impl AsRef<[u8]>>) -> Option<Redacted> {
    value.map(secret)
}

/// Test support for the modules that own credential-bearing types: each case is (what, its
/// `{:?}` text, secrets that must not appear, what must still appear); every problem is
/// reported at once.
#[cfg(test)]
pub(crate) fn assert_debug_redacted(cases: Vec<(&str, String, Vec<String>, Vec<&str>)>) {
    let mut problems = Vec::new();
    for (what, text, secrets, shown) in cases {
        for secret in secrets {
            if text.contains(&secret) {
                problems.push(format!("{what} shows {secret:?}: {text}"));
            }
        }
        for shown in shown {
            if !text.contains(shown) {
                problems.push(format!("{what} lacks {shown:?}: {text}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_ins() {
        assert_eq!(format!("{:?}", secret("hunter2")), "<redacted>");
        assert_eq!(format!("{:?}", secret("")), "<empty>");
        assert_eq!(format!("{:?}", secret(vec![b'k'])), "<redacted>");
        assert_eq!(format!("{:?}", optional(Some("t"))), "Some(<redacted>)");
        assert_eq!(format!("{:?}", optional(None::<&str>)), "None");
    }
}
