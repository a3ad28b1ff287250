//! Pressure stall information: the kernel's `some`/`full` lines, as `/proc/pressure/{cpu,memory,io}`
//! and every cgroup v2 `*.pressure` file print them.
//!
//! ```text
//! some avg10=0.12 avg60=0.05 avg300=0.00 total=123456
//! full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//! ```
//!
//! Hand-written rather than `procfs::CpuPressure` and friends: those need both lines (the `full`
//! line of `/proc/pressure/cpu` only exists since Linux 5.13), parse the averages as `f32`
//! (so `2.10` would reach the Summary API as `2.0999999`), and are tied to `/proc`; the same
//! format is read here from cgroup files as well.

/// One line: the share of wall time (in percent) over the last 10, 60 and 300 seconds during
/// which tasks stalled on the resource, and the total stall time in microseconds since boot
/// (or since the cgroup was created).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Microseconds, as the kernel prints it (the kubelet passes it on unchanged as well).
    pub total: u64,
}

/// A pressure file: `some` (at least one task stalled) and `full` (all non-idle tasks stalled at
/// once). `full` is `None` where the kernel does not print it (`/proc/pressure/cpu` before 5.13).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Psi {
    pub some: PsiLine,
    pub full: Option<PsiLine>,
}

/// What is wrong with a pressure file's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PsiError {
    #[error("line {line:?}: {reason}")]
    Line { line: String, reason: String },
    #[error("no `some` line")]
    NoSome,
}

/// Parses the text of a pressure file. Unknown `key=value` fields are ignored (the kernel may
/// add some); a missing or malformed known field is an error naming the line.
pub fn parse_psi(text: &str) -> Result<Psi, PsiError> {
    let mut some = None;
    let mut full = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let bad = |reason: String| PsiError::Line {
            line: line.to_string(),
            reason,
        };
        let mut fields = line.split_whitespace();
        let slot = match fields.next() {
            Some("some") => &mut some,
            Some("full") => &mut full,
            Some(other) => return Err(bad(format!("unknown kind {other:?}"))),
            None => continue,
        };
        let (mut avg10, mut avg60, mut avg300, mut total) = (None, None, None, None);
        for field in fields {
            let Some((key, value)) = field.split_once('=') else {
                return Err(bad(format!("field {field:?} is not key=value")));
            };
            let avg = |v: &str| {
                v.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .ok_or_else(|| bad(format!("{key}={v:?} is not a percentage")))
            };
            match key {
                "avg10" => avg10 = Some(avg(value)?),
                "avg60" => avg60 = Some(avg(value)?),
                "avg300" => avg300 = Some(avg(value)?),
                "total" => {
                    total = Some(
                        value
                            .parse::<u64>()
                            .map_err(|_| bad(format!("total={value:?} is not a number")))?,
                    )
                }
                _ => {}
            }
        }
        let missing = |name: &str| bad(format!("no {name}"));
        *slot = Some(PsiLine {
            avg10: avg10.ok_or_else(|| missing("avg10"))?,
            avg60: avg60.ok_or_else(|| missing("avg60"))?,
            avg300: avg300.ok_or_else(|| missing("avg300"))?,
            total: total.ok_or_else(|| missing("total"))?,
        });
    }
    Ok(Psi {
        some: some.ok_or(PsiError::NoSome)?,
        full,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(avg10: f64, avg60: f64, avg300: f64, total: u64) -> PsiLine {
        PsiLine {
            avg10,
            avg60,
            avg300,
            total,
        }
    }

    #[test]
    fn parse_table() {
        let cases: &[(&str, Result<Psi, &str>)] = &[
            (
                "some avg10=4.50 avg60=0.91 avg300=0.00 total=681245\n\
                 full avg10=2.10 avg60=0.12 avg300=0.00 total=391926\n",
                Ok(Psi {
                    some: line(4.5, 0.91, 0.0, 681_245),
                    full: Some(line(2.1, 0.12, 0.0, 391_926)),
                }),
            ),
            // /proc/pressure/cpu before Linux 5.13: no full line
            (
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                Ok(Psi {
                    some: line(0.0, 0.0, 0.0, 0),
                    full: None,
                }),
            ),
            // a field the kernel might add later is ignored
            (
                "some avg10=1.00 avg60=2.00 avg300=3.00 total=4 avg1=9.00\n",
                Ok(Psi {
                    some: line(1.0, 2.0, 3.0, 4),
                    full: None,
                }),
            ),
            ("", Err("no `some` line")),
            (
                "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                Err("no `some` line"),
            ),
            (
                "some avg10=0.00 avg60=0.00 total=0\n",
                Err("line \"some avg10=0.00 avg60=0.00 total=0\": no avg300"),
            ),
            (
                "some avg10=x avg60=0.00 avg300=0.00 total=0\n",
                Err("line \"some avg10=x avg60=0.00 avg300=0.00 total=0\": avg10=\"x\" is not a percentage"),
            ),
            (
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n",
                Err("line \"some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\": total=\"-1\" is not a number"),
            ),
            ("partial avg10=0.00\n", Err("line \"partial avg10=0.00\": unknown kind \"partial\"")),
            ("some avg10\n", Err("line \"some avg10\": field \"avg10\" is not key=value")),
            // a truncated line does not panic
            ("some", Err("line \"some\": no avg10")),
        ];
        for (text, want) in cases {
            let got = parse_psi(text).map_err(|e| e.to_string());
            assert_eq!(got, (*want).map_err(str::to_string), "{text:?}");
        }
    }
}
