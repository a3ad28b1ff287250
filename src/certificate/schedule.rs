//! When a certificate is renewed: the kubelet's certificate manager schedule
//! (`client-go/util/certificate`, `nextRotationDeadline`, `jitteryDuration`), as pure
//! functions of the certificate, the template wanted and a jitter value.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::pair::CertInfo;

/// What the manager wants a certificate to say (`x509.CertificateRequest` template): the
/// subject, and for a serving certificate the node's names and addresses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<std::net::IpAddr>,
}

/// The earliest share of a certificate's lifetime at which it is renewed; the jitter adds up
/// to [`JITTER_SHARE`] more, so renewals fall between 70 % and 90 % of the lifetime and the
/// nodes of a cluster created at once spread theirs.
pub const EARLIEST_SHARE: f64 = 0.7;
pub const JITTER_SHARE: f64 = 0.2;

/// `NotBefore + lifetime × (0.7 + 0.2 × jitter)`, `jitter` in `[0, 1)` (clamped).
pub fn rotation_deadline(info: &CertInfo, jitter: f64) -> Timestamp {
    let lifetime = info.not_after.duration_since(info.not_before);
    let share = EARLIEST_SHARE + JITTER_SHARE * jitter.clamp(0.0, 1.0);
    let offset = SignedDuration::from_secs_f64(lifetime.as_secs_f64().max(0.0) * share);
    info.not_before
        .checked_add(offset)
        .unwrap_or(info.not_after)
}

/// Whether the certificate already says all the template asks (`certSatisfiesTemplate`):
/// the same common name, and none of the template's DNS names, IP addresses or organizations
/// missing. Extra names in the certificate do not matter.
pub fn satisfies(info: &CertInfo, template: &Template) -> bool {
    info.common_name == template.common_name
        && template
            .dns_names
            .iter()
            .all(|n| info.dns_names.contains(n))
        && template.ips.iter().all(|ip| info.ips.contains(ip))
        && template
            .organizations
            .iter()
            .all(|o| info.organizations.contains(o))
}

/// When to request the next certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Now: there is no certificate, it does not match the template, it expired, or its
    /// deadline passed.
    Now,
    /// At this time.
    At(Timestamp),
    /// Not at all until the template is known (a serving certificate before the node has an
    /// address to put in it).
    WaitForTemplate,
}

/// The manager's decision: the deadline of the current certificate unless it is missing or
/// does not match the template.
pub fn next_rotation(
    current: Option<&CertInfo>,
    template: Option<&Template>,
    jitter: f64,
    now: Timestamp,
) -> Next {
    let Some(template) = template else {
        return Next::WaitForTemplate;
    };
    let Some(info) = current else {
        return Next::Now;
    };
    if !satisfies(info, template) || now > info.not_after {
        return Next::Now;
    }
    let deadline = rotation_deadline(info, jitter);
    if deadline <= now {
        Next::Now
    } else {
        Next::At(deadline)
    }
}

/// The wait before retry `attempt` (0-based) of a failed renewal: the manager's backoff of
/// 2 s doubling over five attempts (each up to 10 % longer), then every 32 s
/// (`wait.ExponentialBackoff{2s, 2, 0.1, 5}`, then `PollInfinite(32s)`).
pub fn retry_delay(attempt: u32, jitter: f64) -> Duration {
    if attempt >= 5 {
        return Duration::from_secs(32);
    }
    let base = crate::backoff::exponential(Duration::from_secs(2), attempt, Duration::MAX);
    base.mul_f64(1.0 + 0.1 * jitter.clamp(0.0, 1.0))
}

/// The wait before acting on `next` right after rotations that each left the new certificate
/// due at once (`due_at_once`: how many in a row; `None` when the last look was not right
/// after a rotation). A signer that issues a certificate that does not satisfy the template,
/// or one whose rotation deadline has already passed by this node's clock, would otherwise
/// have the manager request certificate after certificate as fast as the signer answers: the
/// failed renewal's backoff applies (the kubelet's loop waits at least its `wait.Until`
/// second). `None`: no wait.
pub fn wait_after_rotation(next: Next, due_at_once: Option<u32>, jitter: f64) -> Option<Duration> {
    match (next, due_at_once) {
        (Next::Now, Some(in_a_row)) => Some(retry_delay(in_a_row, jitter)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn info(not_before: &str, not_after: &str) -> CertInfo {
        CertInfo {
            not_before: ts(not_before),
            not_after: ts(not_after),
            common_name: "system:node:n1".into(),
            organizations: vec!["system:nodes".into()],
            dns_names: vec!["n1".into()],
            ips: vec!["10.0.0.7".parse().unwrap()],
            serial: "01".into(),
        }
    }

    fn template() -> Template {
        Template {
            common_name: "system:node:n1".into(),
            organizations: vec!["system:nodes".into()],
            dns_names: vec!["n1".into()],
            ips: vec!["10.0.0.7".parse().unwrap()],
        }
    }

    #[test]
    fn deadline_is_70_to_90_percent_of_the_lifetime() {
        // (not before, not after, jitter, deadline)
        let cases: &[(&str, &str, f64, &str)] = &[
            // 100 s lifetime: 70 s, 80 s, 90 s in.
            (
                "2030-01-01T00:00:00Z",
                "2030-01-01T00:01:40Z",
                0.0,
                "2030-01-01T00:01:10Z",
            ),
            (
                "2030-01-01T00:00:00Z",
                "2030-01-01T00:01:40Z",
                0.5,
                "2030-01-01T00:01:20Z",
            ),
            (
                "2030-01-01T00:00:00Z",
                "2030-01-01T00:01:40Z",
                1.0,
                "2030-01-01T00:01:30Z",
            ),
            // Out-of-range jitter is clamped.
            (
                "2030-01-01T00:00:00Z",
                "2030-01-01T00:01:40Z",
                7.0,
                "2030-01-01T00:01:30Z",
            ),
            (
                "2030-01-01T00:00:00Z",
                "2030-01-01T00:01:40Z",
                -1.0,
                "2030-01-01T00:01:10Z",
            ),
            // A year: 255.5 days at the earliest.
            (
                "2030-01-01T00:00:00Z",
                "2031-01-01T00:00:00Z",
                0.0,
                "2030-09-13T12:00:00Z",
            ),
            // The API server's signer backdates by 5 min and does not for short lifetimes:
            // a 2 min certificate issued at 00:05 lives 7 min, renewed from 00:04:54 on.
            (
                "2030-01-01T00:00:00Z",
                "2030-01-01T00:07:00Z",
                0.0,
                "2030-01-01T00:04:54Z",
            ),
            (
                "2030-01-01T00:00:00Z",
                "2030-01-01T00:07:00Z",
                1.0,
                "2030-01-01T00:06:18Z",
            ),
        ];
        for (nb, na, jitter, want) in cases {
            assert_eq!(
                rotation_deadline(&info(nb, na), *jitter),
                ts(want),
                "{nb}..{na} jitter {jitter}"
            );
        }
    }

    #[test]
    fn next_rotation_table() {
        let cert = info("2030-01-01T00:00:00Z", "2030-01-01T00:01:40Z");
        let wanted = template();
        let mut other_ip = template();
        other_ip.ips.push("10.0.0.8".parse().unwrap());
        let mut other_cn = template();
        other_cn.common_name = "system:node:n2".into();
        let mut fewer = template();
        fewer.dns_names.clear();
        fewer.organizations.clear();
        // (current, template, now, want)
        let cases: Vec<(Option<&CertInfo>, Option<&Template>, &str, Next)> = vec![
            (None, Some(&wanted), "2030-01-01T00:00:10Z", Next::Now),
            (
                Some(&cert),
                None,
                "2030-01-01T00:00:10Z",
                Next::WaitForTemplate,
            ),
            (None, None, "2030-01-01T00:00:10Z", Next::WaitForTemplate),
            (
                Some(&cert),
                Some(&wanted),
                "2030-01-01T00:00:10Z",
                Next::At(ts("2030-01-01T00:01:20Z")),
            ),
            // Extra names in the certificate are fine.
            (
                Some(&cert),
                Some(&fewer),
                "2030-01-01T00:00:10Z",
                Next::At(ts("2030-01-01T00:01:20Z")),
            ),
            // A missing address or another name: renew now.
            (
                Some(&cert),
                Some(&other_ip),
                "2030-01-01T00:00:10Z",
                Next::Now,
            ),
            (
                Some(&cert),
                Some(&other_cn),
                "2030-01-01T00:00:10Z",
                Next::Now,
            ),
            // At or past the deadline, and past expiry.
            (
                Some(&cert),
                Some(&wanted),
                "2030-01-01T00:01:20Z",
                Next::Now,
            ),
            (
                Some(&cert),
                Some(&wanted),
                "2030-01-01T00:05:00Z",
                Next::Now,
            ),
        ];
        for (current, template, now, want) in cases {
            assert_eq!(
                next_rotation(current, template, 0.5, ts(now)),
                want,
                "current {:?} template {:?} at {now}",
                current.map(|c| &c.serial),
                template.map(|t| (&t.common_name, &t.ips))
            );
        }
    }

    #[test]
    fn a_certificate_due_at_once_after_its_rotation_waits_the_backoff() {
        let at = Next::At(ts("2026-01-01T00:00:00Z"));
        // (next, rotations in a row that left it due at once, wait in ms)
        let cases: &[(Next, Option<u32>, Option<u64>)] = &[
            (Next::Now, None, None), // no certificate yet, or its deadline came: at once
            (Next::Now, Some(0), Some(2000)),
            (Next::Now, Some(3), Some(16000)),
            (Next::Now, Some(40), Some(32000)),
            (at, Some(0), None),
            (at, None, None),
            (Next::WaitForTemplate, Some(2), None),
        ];
        for (next, in_a_row, millis) in cases {
            assert_eq!(
                wait_after_rotation(*next, *in_a_row, 0.0),
                millis.map(Duration::from_millis),
                "{next:?} after {in_a_row:?}"
            );
        }
    }

    #[test]
    fn retry_delays() {
        let cases: &[(u32, f64, u64)] = &[
            (0, 0.0, 2000),
            (1, 0.0, 4000),
            (2, 0.0, 8000),
            (3, 0.0, 16000),
            (4, 0.0, 32000),
            (4, 1.0, 35200),
            (5, 0.0, 32000),
            (50, 1.0, 32000),
        ];
        for (attempt, jitter, millis) in cases {
            assert_eq!(
                retry_delay(*attempt, *jitter),
                Duration::from_millis(*millis),
                "attempt {attempt} jitter {jitter}"
            );
        }
    }
}
