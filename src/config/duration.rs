//! Go `time.Duration` text, as the kubelet's `metav1.Duration` fields read and write it.
//!
//! Operators copy values between a kubelet config and a nodelet config, so the syntax must be
//! Go's exactly: `"1m30s"`, `"500ms"`, `"1.5h"`, `"0"`, and printing gives Go's `String()`
//! (`"1m0s"`, not `"1m"`), so `nodelet validate` shows what `kubelet` would show.

use std::time::Duration;

/// Go's `time.Duration` is an int64 of nanoseconds; larger values are rejected like Go does.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Why a duration string was rejected. `Display` gives a reason that does not repeat the input,
/// for field errors that show the value next to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// Not of the form `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`.
    Invalid,
    /// A number without a unit (`"30"`); only a bare `"0"` may omit it.
    MissingUnit,
    UnknownUnit(String),
    /// More than Go's maximum duration (about 292 years).
    Overflow,
    /// Negative durations parse in Go but are never meaningful in a node agent's settings.
    Negative,
}

impl std::fmt::Display for DurationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DurationError::Invalid => {
                f.write_str("invalid duration (expected a Go duration such as \"1m30s\", \"500ms\", \"2h\")")
            }
            DurationError::MissingUnit => f.write_str(
                "missing unit in duration (use one of \"ns\", \"us\", \"ms\", \"s\", \"m\", \"h\", e.g. \"30s\")",
            ),
            DurationError::UnknownUnit(unit) => write!(
                f,
                "unknown unit {unit:?} in duration (use one of \"ns\", \"us\", \"ms\", \"s\", \"m\", \"h\")"
            ),
            DurationError::Overflow => f.write_str("duration out of range (at most 2562047h47m16.854775807s)"),
            DurationError::Negative => f.write_str("must not be negative"),
        }
    }
}

/// Parses Go `time.ParseDuration` syntax (`"1m30s"`, `"500ms"`, `"2h"`, `"1.5s"`, `"0"`).
///
/// Negative values are an error because a `std::time::Duration` cannot hold them and no
/// configuration field accepts them. The error message quotes the input, like Go's.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_duration_detailed(s).map_err(|e| match e {
        DurationError::Invalid => format!("invalid duration {s:?}"),
        DurationError::MissingUnit => format!("missing unit in duration {s:?}"),
        DurationError::UnknownUnit(unit) => format!("unknown unit {unit:?} in duration {s:?}"),
        DurationError::Overflow => format!("duration {s:?} out of range"),
        DurationError::Negative => format!("negative duration {s:?} is not allowed"),
    })
}

/// [`parse_duration`] with a structured error, for field validation.
pub(crate) fn parse_duration_detailed(s: &str) -> Result<Duration, DurationError> {
    let (negative, nanos) = parse_signed_nanos(s)?;
    if negative && nanos > 0 {
        return Err(DurationError::Negative);
    }
    Ok(nanos_to_duration(nanos))
}

fn nanos_to_duration(nanos: u128) -> Duration {
    // MAX_NANOS fits easily in (u64 seconds, u32 nanos).
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    let sub = u32::try_from(nanos % 1_000_000_000).unwrap_or(0);
    Duration::new(secs, sub)
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        // Go accepts both the micro sign (U+00B5) and the Greek small letter mu (U+03BC).
        "us" | "\u{00b5}s" | "\u{03bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Go's algorithm (`time.ParseDuration`), with exact integer arithmetic for fractions.
fn parse_signed_nanos(orig: &str) -> Result<(bool, u128), DurationError> {
    let mut s = orig;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        negative = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok((negative, 0));
    }
    if s.is_empty() {
        return Err(DurationError::Invalid);
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let first = s.as_bytes()[0];
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(DurationError::Invalid);
        }
        // Integer part.
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let mut whole: u128 = 0;
        for b in s[..int_len].bytes() {
            whole = whole * 10 + u128::from(b - b'0');
            if whole > MAX_NANOS {
                return Err(DurationError::Overflow);
            }
        }
        s = &s[int_len..];
        // Fraction part: digits beyond what fits are ignored, as Go does.
        let mut frac: u128 = 0;
        let mut scale: u128 = 1;
        let mut frac_len = 0;
        if let Some(rest) = s.strip_prefix('.') {
            s = rest;
            frac_len = s.bytes().take_while(u8::is_ascii_digit).count();
            for b in s[..frac_len].bytes() {
                if scale >= 1_000_000_000_000_000_000 {
                    continue;
                }
                frac = frac * 10 + u128::from(b - b'0');
                scale *= 10;
            }
            s = &s[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            // ".s" or "-.s"
            return Err(DurationError::Invalid);
        }
        let unit_len = s
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(s.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(DurationError::MissingUnit);
        }
        let unit_text = &s[..unit_len];
        s = &s[unit_len..];
        let unit = unit_nanos(unit_text)
            .ok_or_else(|| DurationError::UnknownUnit(unit_text.to_string()))?;
        let value = whole * unit + frac * unit / scale;
        total += value;
        if total > MAX_NANOS {
            return Err(DurationError::Overflow);
        }
    }
    Ok((negative, total))
}

/// Formats like Go's `time.Duration.String()`: `"1m30s"`, `"500ms"`, `"1h0m0s"`, `"0s"`.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        // Below a second Go switches to a smaller unit with a fraction: "1.5ms", "250µs".
        let (unit, precision) = if nanos < 1_000 {
            ("ns", 0)
        } else if nanos < 1_000_000 {
            ("\u{00b5}s", 3)
        } else {
            ("ms", 6)
        };
        let (whole, frac) = split_fraction(nanos, precision);
        return format!("{whole}{frac}{unit}");
    }
    let (secs, frac) = split_fraction(nanos, 9);
    let mut out = String::new();
    let minutes = secs / 60;
    if minutes > 0 {
        let hours = minutes / 60;
        if hours > 0 {
            out.push_str(&format!("{hours}h"));
        }
        out.push_str(&format!("{}m", minutes % 60));
    }
    out.push_str(&format!("{}{frac}s", secs % 60));
    out
}

/// Splits `value` into `value / 10^precision` and the fraction digits (`".5"`), trailing zeros
/// dropped and no dot when the fraction is zero (Go's `fmtFrac`).
fn split_fraction(value: u128, precision: u32) -> (u128, String) {
    let divisor = 10u128.pow(precision);
    let whole = value / divisor;
    let rem = value % divisor;
    if rem == 0 {
        return (whole, String::new());
    }
    let digits = format!("{rem:0width$}", width = precision as usize);
    (whole, format!(".{}", digits.trim_end_matches('0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_duration_accepts_go_syntax() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        let cases: &[(&str, Duration)] = &[
            ("0", s(0)),
            ("+0", s(0)),
            ("-0", s(0)),
            ("0s", s(0)),
            ("-0s", s(0)),
            ("5s", s(5)),
            ("30s", s(30)),
            ("1m", s(60)),
            ("1m30s", s(90)),
            ("2h", s(7200)),
            ("1h2m3s", s(3723)),
            ("500ms", ms(500)),
            ("1.5s", ms(1500)),
            (".5s", ms(500)),
            ("5.s", s(5)),
            ("1.5h", s(5400)),
            ("+5s", s(5)),
            ("100ns", Duration::from_nanos(100)),
            ("3us", Duration::from_micros(3)),
            ("3\u{00b5}s", Duration::from_micros(3)),
            ("3\u{03bc}s", Duration::from_micros(3)),
            ("1h1h", s(7200)),
            (
                "0.333333333333333333333s",
                Duration::from_nanos(333_333_333),
            ),
            (
                "2562047h47m16.854775807s",
                Duration::new(9_223_372_036, 854_775_807),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input), Ok(*want), "input {input:?}");
        }
    }

    #[test]
    fn parse_duration_rejects_what_go_rejects() {
        let cases: &[(&str, DurationError)] = &[
            ("", DurationError::Invalid),
            ("-", DurationError::Invalid),
            ("s", DurationError::Invalid),
            (".s", DurationError::Invalid),
            ("1", DurationError::MissingUnit),
            ("30", DurationError::MissingUnit),
            ("00", DurationError::MissingUnit),
            ("1.5", DurationError::MissingUnit),
            ("1x", DurationError::UnknownUnit("x".into())),
            ("1 s", DurationError::UnknownUnit(" s".into())),
            ("1sec", DurationError::UnknownUnit("sec".into())),
            ("1d", DurationError::UnknownUnit("d".into())),
            ("1S", DurationError::UnknownUnit("S".into())),
            ("-1s", DurationError::Negative),
            ("-1.5m", DurationError::Negative),
            ("2562047h47m16.854775808s", DurationError::Overflow),
            ("9999999999999999999999h", DurationError::Overflow),
            (" 1s", DurationError::Invalid),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_duration_detailed(input),
                Err(want.clone()),
                "input {input:?}"
            );
        }
    }

    #[test]
    fn parse_duration_errors_quote_the_input() {
        let cases: &[(&str, &str)] = &[
            ("1", "missing unit in duration \"1\""),
            ("abc", "invalid duration \"abc\""),
            ("1d", "unknown unit \"d\" in duration \"1d\""),
            ("-1s", "negative duration \"-1s\" is not allowed"),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input).unwrap_err(), *want, "input {input:?}");
        }
    }

    #[test]
    fn format_duration_matches_go_string() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(999), "999ns"),
            (Duration::from_nanos(1_100), "1.1\u{00b5}s"),
            (Duration::from_micros(250), "250\u{00b5}s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_micros(1_500), "1.5ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(20), "20s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(7200), "2h0m0s"),
            (Duration::from_secs(3723), "1h2m3s"),
            (Duration::new(3723, 500_000_000), "1h2m3.5s"),
            (
                Duration::new(9_223_372_036, 854_775_807),
                "2562047h47m16.854775807s",
            ),
        ];
        for (d, want) in cases {
            assert_eq!(format_duration(*d), *want, "duration {d:?}");
        }
    }

    #[test]
    fn format_then_parse_round_trips() {
        let cases = [
            Duration::from_nanos(7),
            Duration::from_micros(1_234),
            Duration::new(0, 123_456_789),
            Duration::new(86_399, 1),
            Duration::from_secs(300),
        ];
        for d in cases {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "duration {d:?}");
        }
    }
}
