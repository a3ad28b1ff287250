//! Duration arguments in Go's `time.ParseDuration` syntax (`300ms`, `1.5s`, `2m30s`, `1h`), because
//! the tests that drive testbox are written next to Kubernetes YAML, where that syntax is the norm.
//! A bare number is taken as seconds, like coreutils `sleep 10`.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("invalid duration {input:?}: empty")]
    Empty { input: String },
    #[error("invalid duration {input:?}: expected a number at byte {at}")]
    ExpectedNumber { input: String, at: usize },
    #[error("invalid duration {input:?}: unknown unit {unit:?} (use ns, us, ms, s, m, h)")]
    UnknownUnit { input: String, unit: String },
    #[error("invalid duration {input:?}: missing unit after {number:?} (use ns, us, ms, s, m, h)")]
    MissingUnit { input: String, number: String },
    #[error("invalid duration {input:?}: too large")]
    Overflow { input: String },
}

const NANOS_PER_UNIT: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses `input` as a non-negative duration.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let text = input.trim();
    if text.is_empty() {
        return Err(DurationError::Empty {
            input: input.to_owned(),
        });
    }
    if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let nanos = scaled_nanos(input, text, 1_000_000_000)?;
        return nanos_to_duration(input, nanos);
    }
    let mut total: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let at = text.len() - rest.len();
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() || number == "." {
            return Err(DurationError::ExpectedNumber {
                input: input.to_owned(),
                at,
            });
        }
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        if unit.is_empty() {
            // A bare number was handled above; here it trails other parts ("1m30").
            return Err(DurationError::MissingUnit {
                input: input.to_owned(),
                number: number.to_owned(),
            });
        }
        let per_unit = NANOS_PER_UNIT
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, nanos)| *nanos)
            .ok_or_else(|| DurationError::UnknownUnit {
                input: input.to_owned(),
                unit: unit.to_owned(),
            })?;
        total = total
            .checked_add(scaled_nanos(input, number, per_unit)?)
            .ok_or_else(|| DurationError::Overflow {
                input: input.to_owned(),
            })?;
    }
    nanos_to_duration(input, total)
}

/// `number` (digits with at most one `.`) times `per_unit` nanoseconds, truncating below 1 ns.
fn scaled_nanos(input: &str, number: &str, per_unit: u128) -> Result<u128, DurationError> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let malformed = (whole.is_empty() && fraction.is_empty()) || fraction.contains('.');
    if malformed {
        return Err(DurationError::ExpectedNumber {
            input: input.to_owned(),
            at: 0,
        });
    }
    let overflow = || DurationError::Overflow {
        input: input.to_owned(),
    };
    let whole_value: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| overflow())?
    };
    let mut nanos = whole_value.checked_mul(per_unit).ok_or_else(overflow)?;
    // Digits past 1e-18 of a unit cannot change the result: ignore them instead of overflowing.
    let fraction = &fraction[..fraction.len().min(18)];
    if !fraction.is_empty() {
        let fraction_value: u128 = fraction.parse().map_err(|_| overflow())?;
        let scale = 10u128.pow(fraction.len() as u32);
        nanos = nanos
            .checked_add(fraction_value * per_unit / scale)
            .ok_or_else(overflow)?;
    }
    Ok(nanos)
}

fn nanos_to_duration(input: &str, nanos: u128) -> Result<Duration, DurationError> {
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| DurationError::Overflow {
        input: input.to_owned(),
    })?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// A `sleep` length: a duration, or `infinity` (also `inf`) for "until a signal ends it".
pub fn parse_sleep_length(input: &str) -> Result<Option<Duration>, DurationError> {
    match input.trim() {
        "infinity" | "inf" => Ok(None),
        _ => parse_duration(input).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parse_duration_cases() {
        let cases: &[(&str, Result<Duration, &str>)] = &[
            ("0", Ok(Duration::ZERO)),
            ("0s", Ok(Duration::ZERO)),
            ("10", Ok(Duration::from_secs(10))),
            ("1.5", Ok(ms(1500))),
            (" 2s ", Ok(Duration::from_secs(2))),
            ("300ms", Ok(ms(300))),
            ("1.5s", Ok(ms(1500))),
            (".5s", Ok(ms(500))),
            ("5.s", Ok(Duration::from_secs(5))),
            ("2m30s", Ok(Duration::from_secs(150))),
            ("1h", Ok(Duration::from_secs(3600))),
            ("1h2m3s4ms", Ok(Duration::new(3723, 4_000_000))),
            ("10us", Ok(Duration::from_micros(10))),
            ("10µs", Ok(Duration::from_micros(10))),
            ("7ns", Ok(Duration::from_nanos(7))),
            ("0.1ns", Ok(Duration::ZERO)),
            ("1.0000000000000000000001s", Ok(Duration::from_secs(1))),
            ("", Err("empty")),
            ("   ", Err("empty")),
            ("s", Err("expected a number")),
            ("1x", Err("unknown unit \"x\"")),
            ("1sec", Err("unknown unit \"sec\"")),
            ("1s5", Err("missing unit after \"5\"")),
            ("-1s", Err("expected a number")),
            ("1..5s", Err("expected a number")),
            ("1.2.3", Err("expected a number")),
            ("99999999999999999999999h", Err("too large")),
        ];
        for (input, want) in cases {
            let got = parse_duration(input);
            match (want, &got) {
                (Ok(want), Ok(got)) => assert_eq!(got, want, "input {input:?}"),
                (Err(fragment), Err(err)) => assert!(
                    err.to_string().contains(fragment),
                    "input {input:?}: error {err} should contain {fragment:?}"
                ),
                _ => panic!("input {input:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn parse_sleep_length_cases() {
        let cases: &[(&str, Option<Option<Duration>>)] = &[
            ("infinity", Some(None)),
            ("inf", Some(None)),
            ("3", Some(Some(Duration::from_secs(3)))),
            ("250ms", Some(Some(ms(250)))),
            ("forever", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_sleep_length(input).ok(), *want, "input {input:?}");
        }
    }

    #[test]
    fn error_names_the_input() {
        let err = parse_duration("5 minutes").unwrap_err();
        assert!(err.to_string().contains("\"5 minutes\""), "{err}");
    }
}
