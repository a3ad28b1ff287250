//! The query string of `/containerLogs` → [`LogOptions`], decoded and validated as the kubelet
//! does it (`getContainerLogs` decodes a v1 `PodLogOptions` from the query, then runs
//! `ValidatePodLogOptions`; `NewLogOptions` resolves `sinceSeconds` against `now`).

use jiff::Timestamp;

use super::LogError;

/// Which output streams of the container to return (`PodLogOptions.stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogStream {
    #[default]
    All,
    Stdout,
    Stderr,
}

impl LogStream {
    /// Whether a log entry written to `stream` is part of the output.
    pub fn includes(self, stream: super::parse::Stream) -> bool {
        use super::parse::Stream;
        matches!(
            (self, stream),
            (LogStream::All, _)
                | (LogStream::Stdout, Stream::Stdout)
                | (LogStream::Stderr, Stream::Stderr)
        )
    }
}

/// What to read from a container's log, resolved against the request time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogOptions {
    /// Keep streaming new lines until the container stops running.
    pub follow: bool,
    /// Read the previous (last terminated) instance of the container instead of the current one.
    pub previous: bool,
    /// Prefix every line with its RFC3339Nano timestamp and a space.
    pub timestamps: bool,
    /// Only the last N lines (non-negative after validation).
    pub tail_lines: Option<i64>,
    /// Stop after this many bytes of output (positive after validation).
    pub limit_bytes: Option<i64>,
    /// Only lines written at or after this time (`sinceSeconds` resolved, or `sinceTime`).
    pub since: Option<Timestamp>,
    /// Which streams to return.
    pub stream: LogStream,
}

/// The raw query values, before validation: what the kubelet's parameter codec decodes into a
/// `v1.PodLogOptions`.
#[derive(Debug, Default, PartialEq)]
struct RawOptions {
    follow: bool,
    previous: bool,
    timestamps: bool,
    tail_lines: Option<i64>,
    limit_bytes: Option<i64>,
    since_seconds: Option<i64>,
    since_time: Option<Timestamp>,
    stream: Option<String>,
}

impl LogOptions {
    /// From the query string of `/containerLogs` (follow, previous, timestamps, tailLines — or the
    /// legacy `tail`, where `all` means no limit — limitBytes, sinceSeconds, sinceTime, stream);
    /// `now` resolves sinceSeconds. A value that does not decode is [`LogError::BadQuery`] (the
    /// kubelet's 400), one that decodes but is out of range is [`LogError::InvalidOptions`] (the
    /// kubelet's 422); both name the parameter and the value.
    pub fn from_query(query: &str, now: Timestamp) -> Result<LogOptions, LogError> {
        let raw = decode(query)?;
        validate(&raw)?;
        Ok(resolve(raw, now))
    }
}

/// `key=value` pairs of a URL query, percent-decoded; like Go's `url.Values`, only the first
/// value of a repeated key counts.
fn query_pairs(query: &str) -> Vec<(String, String)> {
    let mut seen = std::collections::HashSet::new();
    crate::query::form_pairs(query)
        .into_iter()
        .filter(|(k, _)| seen.insert(k.clone()))
        .collect()
}

/// apimachinery's query → bool conversion: only `0` and `false` (any case) are false; any other
/// value, even an empty one (`?follow`), is true.
fn query_bool(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

fn query_int(param: &'static str, value: &str) -> Result<i64, LogError> {
    value.parse::<i64>().map_err(|_| LogError::BadQuery {
        param,
        value: value.to_string(),
        reason: "must be an integer".into(),
    })
}

fn decode(query: &str) -> Result<RawOptions, LogError> {
    let pairs = query_pairs(query);
    let mut raw = RawOptions::default();
    // The legacy `tail` parameter overrides tailLines; `all` means "no limit".
    let legacy_tail = pairs.iter().find(|(k, _)| k == "tail").map(|(_, v)| v);
    for (key, value) in &pairs {
        match key.as_str() {
            "follow" => raw.follow = query_bool(value),
            "previous" => raw.previous = query_bool(value),
            "timestamps" => raw.timestamps = query_bool(value),
            "tailLines" if legacy_tail.is_none_or(|t| t.is_empty()) => {
                raw.tail_lines = Some(query_int("tailLines", value)?)
            }
            "tail" if !value.is_empty() && value != "all" => {
                raw.tail_lines = Some(query_int("tail", value)?)
            }
            "limitBytes" => raw.limit_bytes = Some(query_int("limitBytes", value)?),
            "sinceSeconds" => raw.since_seconds = Some(query_int("sinceSeconds", value)?),
            "sinceTime" if !value.is_empty() && value != "null" => {
                raw.since_time =
                    Some(value.parse::<Timestamp>().map_err(|_| LogError::BadQuery {
                        param: "sinceTime",
                        value: value.clone(),
                        reason: "must be an RFC 3339 time".into(),
                    })?)
            }
            "stream" => raw.stream = Some(value.clone()),
            _ => {}
        }
    }
    Ok(raw)
}

/// `ValidatePodLogOptions`: every problem, in the kubelet's order and wording.
fn validate(raw: &RawOptions) -> Result<(), LogError> {
    let mut errors = Vec::new();
    if let Some(n) = raw.tail_lines.filter(|n| *n < 0) {
        errors.push(format!(
            "tailLines: Invalid value: {n}: must be greater than or equal to 0"
        ));
    }
    if let Some(n) = raw.limit_bytes.filter(|n| *n < 1) {
        errors.push(format!(
            "limitBytes: Invalid value: {n}: must be greater than 0"
        ));
    }
    match (raw.since_seconds, raw.since_time) {
        (Some(_), Some(_)) => errors.push(
            "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
        ),
        (Some(n), None) if n < 1 => errors.push(format!(
            "sinceSeconds: Invalid value: {n}: must be greater than 0"
        )),
        _ => {}
    }
    if let Some(stream) = &raw.stream {
        if !matches!(stream.as_str(), "All" | "Stdout" | "Stderr") {
            errors.push(format!(
                "stream: Unsupported value: {stream:?}: supported values: \"All\", \"Stderr\", \"Stdout\""
            ));
        }
        if stream != "All" && raw.tail_lines.is_some() {
            errors.push(
                "Forbidden: `tailLines` and specific `stream` are mutually exclusive for now"
                    .into(),
            );
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(LogError::InvalidOptions {
            errors: errors.join(", "),
        })
    }
}

/// `NewLogOptions`: sinceSeconds counts back from `now`; a later sinceTime wins.
fn resolve(raw: RawOptions, now: Timestamp) -> LogOptions {
    let from_seconds = raw.since_seconds.map(|s| {
        jiff::SignedDuration::from_secs(s)
            .checked_neg()
            .and_then(|d| now.checked_add(d).ok())
            .unwrap_or(Timestamp::MIN)
    });
    let since = match (from_seconds, raw.since_time) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    LogOptions {
        follow: raw.follow,
        previous: raw.previous,
        timestamps: raw.timestamps,
        tail_lines: raw.tail_lines,
        limit_bytes: raw.limit_bytes,
        since,
        stream: match raw.stream.as_deref() {
            Some("Stdout") => LogStream::Stdout,
            Some("Stderr") => LogStream::Stderr,
            _ => LogStream::All,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const NOW: &str = "2026-01-02T03:04:05Z";

    #[test]
    fn from_query_cases() {
        let base = LogOptions::default();
        let cases: Vec<(&str, LogOptions)> = vec![
            ("", base.clone()),
            (
                "follow=true&previous=1&timestamps=TRUE",
                LogOptions {
                    follow: true,
                    previous: true,
                    timestamps: true,
                    ..base.clone()
                },
            ),
            // apimachinery: only absent, "0" and "false" are false; a bare key is true.
            (
                "follow",
                LogOptions {
                    follow: true,
                    ..base.clone()
                },
            ),
            ("follow=False&previous=0", base.clone()),
            (
                "follow=yes",
                LogOptions {
                    follow: true,
                    ..base.clone()
                },
            ),
            (
                "tailLines=10",
                LogOptions {
                    tail_lines: Some(10),
                    ..base.clone()
                },
            ),
            (
                "tailLines=0",
                LogOptions {
                    tail_lines: Some(0),
                    ..base.clone()
                },
            ),
            (
                "tail=5",
                LogOptions {
                    tail_lines: Some(5),
                    ..base.clone()
                },
            ),
            ("tail=all&tailLines=3", base.clone()),
            (
                "tailLines=3&tail=7",
                LogOptions {
                    tail_lines: Some(7),
                    ..base.clone()
                },
            ),
            (
                "limitBytes=100",
                LogOptions {
                    limit_bytes: Some(100),
                    ..base.clone()
                },
            ),
            (
                "sinceSeconds=60",
                LogOptions {
                    since: Some(ts("2026-01-02T03:03:05Z")),
                    ..base.clone()
                },
            ),
            (
                "sinceTime=2025-12-31T23:59:59Z",
                LogOptions {
                    since: Some(ts("2025-12-31T23:59:59Z")),
                    ..base.clone()
                },
            ),
            (
                "sinceTime=2025-12-31T23%3A59%3A59.5%2B01%3A00",
                LogOptions {
                    since: Some(ts("2025-12-31T22:59:59.5Z")),
                    ..base.clone()
                },
            ),
            ("sinceTime=", base.clone()),
            (
                "stream=Stdout",
                LogOptions {
                    stream: LogStream::Stdout,
                    ..base.clone()
                },
            ),
            (
                "stream=Stderr",
                LogOptions {
                    stream: LogStream::Stderr,
                    ..base.clone()
                },
            ),
            (
                "stream=All&tailLines=2",
                LogOptions {
                    tail_lines: Some(2),
                    ..base.clone()
                },
            ),
            // Unknown parameters are ignored, as by the parameter codec.
            (
                "container=x&insecureSkipTLSVerifyBackend=true",
                base.clone(),
            ),
            // The first of repeated values counts.
            (
                "tailLines=1&tailLines=-5",
                LogOptions {
                    tail_lines: Some(1),
                    ..base.clone()
                },
            ),
        ];
        for (query, want) in cases {
            let got =
                LogOptions::from_query(query, ts(NOW)).unwrap_or_else(|e| panic!("{query}: {e}"));
            assert_eq!(got, want, "{query}");
        }
    }

    #[test]
    fn from_query_error_cases() {
        let cases: &[(&str, u16, &str)] = &[
            ("tailLines=abc", 400, "query parameter tailLines=\"abc\": must be an integer"),
            ("tail=-x", 400, "query parameter tail=\"-x\": must be an integer"),
            ("limitBytes=1.5", 400, "query parameter limitBytes=\"1.5\": must be an integer"),
            ("sinceSeconds=", 400, "query parameter sinceSeconds=\"\": must be an integer"),
            ("sinceTime=yesterday", 400, "query parameter sinceTime=\"yesterday\": must be an RFC 3339 time"),
            ("tailLines=-1", 422, "invalid log options: tailLines: Invalid value: -1: must be greater than or equal to 0"),
            ("limitBytes=0", 422, "invalid log options: limitBytes: Invalid value: 0: must be greater than 0"),
            ("sinceSeconds=0", 422, "invalid log options: sinceSeconds: Invalid value: 0: must be greater than 0"),
            (
                "sinceSeconds=5&sinceTime=2025-01-01T00:00:00Z",
                422,
                "invalid log options: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
            ),
            (
                "stream=stdout",
                422,
                "invalid log options: stream: Unsupported value: \"stdout\": supported values: \"All\", \"Stderr\", \"Stdout\"",
            ),
            (
                "stream=Stderr&tailLines=1",
                422,
                "invalid log options: Forbidden: `tailLines` and specific `stream` are mutually exclusive for now",
            ),
            (
                "tailLines=-2&limitBytes=-1",
                422,
                "invalid log options: tailLines: Invalid value: -2: must be greater than or equal to 0, limitBytes: Invalid value: -1: must be greater than 0",
            ),
        ];
        for (query, code, message) in cases {
            let err = LogOptions::from_query(query, ts(NOW)).expect_err(query);
            assert_eq!(err.status_code(), *code, "{query}");
            assert_eq!(err.to_string(), *message, "{query}");
        }
    }

    #[test]
    fn huge_since_seconds_saturates_instead_of_overflowing() {
        let got = LogOptions::from_query("sinceSeconds=9223372036854775807", ts(NOW)).unwrap();
        assert_eq!(got.since, Some(Timestamp::MIN));
    }
}
