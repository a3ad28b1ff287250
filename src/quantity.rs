//! Kubernetes resource quantities (`100m`, `1.5`, `128Mi`, `1G`, `2e3`).
//!
//! Values are kept exactly as a rational number of nano-units (i128), which covers every
//! quantity the API accepts for CPU and memory; `milli_value` and `value` round up like the
//! API's `MilliValue()` and `Value()`.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {reason}")]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

/// A parsed quantity, in nano-units (10⁻⁹ of the base unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Quantity {
    nanos: i128,
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    pub fn from_milli(milli: i64) -> Self {
        Quantity {
            nanos: i128::from(milli) * 1_000_000,
        }
    }

    pub fn from_value(value: i64) -> Self {
        Quantity {
            nanos: i128::from(value) * NANO,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// The value in thousandths of the unit, rounded up (CPU millicores).
    pub fn milli_value(&self) -> i64 {
        saturate(ceil_div(self.nanos, 1_000_000))
    }

    /// The value in whole units, rounded up (bytes for memory).
    pub fn value(&self) -> i64 {
        saturate(ceil_div(self.nanos, NANO))
    }

    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let err = |reason| QuantityError {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty"));
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err("expected a number"));
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        // Scale the significand to nano-units before applying the suffix, exactly.
        let mut nanos: i128 = 0;
        for d in int_part.bytes() {
            nanos = nanos
                .checked_mul(10)
                .and_then(|n| n.checked_add(i128::from(d - b'0')))
                .ok_or_else(|| err("too large"))?;
        }
        nanos = nanos.checked_mul(NANO).ok_or_else(|| err("too large"))?;
        let mut place = NANO;
        let mut remainder_nonzero = false;
        for d in frac_part.bytes() {
            place /= 10;
            if place == 0 {
                remainder_nonzero |= d != b'0';
                continue;
            }
            nanos += i128::from(d - b'0') * place;
        }
        let (multiplier, divisor) = suffix_factor(suffix).ok_or_else(|| err("unknown suffix"))?;
        let mut scaled = nanos
            .checked_mul(multiplier)
            .ok_or_else(|| err("too large"))?;
        // Round any fraction below a nano-unit up, as the API rounds up.
        let exact = scaled % divisor == 0 && !remainder_nonzero;
        scaled /= divisor;
        if !exact {
            scaled += 1;
        }
        if scaled > i128::from(i64::MAX) * NANO {
            return Err(err("too large"));
        }
        Ok(Quantity {
            nanos: if negative { -scaled } else { scaled },
        })
    }
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && a > 0 {
        q + 1
    } else {
        q
    }
}

/// (multiplier, divisor) applied to nano-units for a suffix.
fn suffix_factor(suffix: &str) -> Option<(i128, i128)> {
    let binary = |p: u32| Some((1i128 << (10 * p), 1));
    let decimal = |e: i32| {
        if e >= 0 {
            Some((10i128.pow(e.unsigned_abs()), 1))
        } else {
            Some((1, 10i128.pow(e.unsigned_abs())))
        }
    };
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..].parse().ok()?;
            if !(-30..=30).contains(&exp) {
                return None;
            }
            decimal(exp)
        }
        _ => None,
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl TryFrom<&k8s_openapi::apimachinery::pkg::api::resource::Quantity> for Quantity {
    type Error = QuantityError;
    fn try_from(
        q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Self, Self::Error> {
        Quantity::parse(&q.0)
    }
}

impl fmt::Display for Quantity {
    /// Canonical-enough output: whole units when exact, else millis, else nanos.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos % NANO == 0 {
            write!(f, "{}", self.nanos / NANO)
        } else if self.nanos % 1_000_000 == 0 {
            write!(f, "{}m", self.nanos / 1_000_000)
        } else {
            write!(f, "{}n", self.nanos)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_the_api() {
        // (input, milli_value, value)
        let cases: &[(&str, i64, i64)] = &[
            ("0", 0, 0),
            ("1", 1000, 1),
            ("100m", 100, 1),
            ("1500m", 1500, 2),
            ("0.5", 500, 1),
            ("1.25", 1250, 2),
            ("250000u", 250, 1),
            ("1n", 1, 1),
            ("1k", 1_000_000, 1000),
            ("128Mi", 134_217_728_000, 134_217_728),
            ("1Gi", 1_073_741_824_000, 1_073_741_824),
            ("1G", 1_000_000_000_000, 1_000_000_000),
            ("1.5Gi", 1_610_612_736_000, 1_610_612_736),
            ("2e3", 2_000_000, 2000),
            ("1E2", 100_000, 100),
            ("5e-1", 500, 1),
            ("+3", 3000, 3),
            ("-1", -1000, -1),
            ("0.0001", 1, 1),
        ];
        for (input, milli, value) in cases {
            let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.milli_value(), *milli, "milli of {input}");
            assert_eq!(q.value(), *value, "value of {input}");
        }
    }

    #[test]
    fn rejects_garbage_with_the_input_in_the_message() {
        for bad in ["", "abc", "1x", "1.2.3", "Mi", ".", "1e99", "--1"] {
            let err = Quantity::parse(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn orders_and_displays() {
        let a = Quantity::parse("500m").unwrap();
        let b = Quantity::parse("1").unwrap();
        assert!(a < b);
        assert_eq!(a.to_string(), "500m");
        assert_eq!(b.to_string(), "1");
        assert_eq!(Quantity::from_milli(250).to_string(), "250m");
        assert_eq!(Quantity::from_value(3), Quantity::parse("3").unwrap());
    }
}
