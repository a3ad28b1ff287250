//! The pod phase (`status.phase`) as a value, so no module compares phase strings.

use std::fmt;

use k8s_openapi::api::core::v1::PodStatus;

/// `PodPhase` of the core API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    /// The API's spelling, as `status.phase` carries it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
        }
    }

    /// The phase `s` names; `None` for anything else.
    pub fn parse(s: &str) -> Option<Phase> {
        [
            Phase::Pending,
            Phase::Running,
            Phase::Succeeded,
            Phase::Failed,
            Phase::Unknown,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }

    /// The phase of a status; `None` when it has none (or one this API version does not know).
    pub fn of(status: Option<&PodStatus>) -> Option<Phase> {
        status
            .and_then(|s| s.phase.as_deref())
            .and_then(Phase::parse)
    }

    /// Succeeded and Failed: the phases a pod never leaves.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    /// Whether the status has a terminal phase.
    pub fn is_terminal_status(status: Option<&PodStatus>) -> bool {
        Phase::of(status).is_some_and(Phase::is_terminal)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Phase> for String {
    fn from(p: Phase) -> String {
        p.as_str().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_round_trip_and_only_two_are_terminal() {
        let cases = [
            ("Pending", Some(Phase::Pending), false),
            ("Running", Some(Phase::Running), false),
            ("Succeeded", Some(Phase::Succeeded), true),
            ("Failed", Some(Phase::Failed), true),
            ("Unknown", Some(Phase::Unknown), false),
            ("running", None, false),
            ("", None, false),
        ];
        for (s, want, terminal) in cases {
            assert_eq!(Phase::parse(s), want, "{s:?}");
            if let Some(p) = want {
                assert_eq!(p.as_str(), s);
                assert_eq!(p.to_string(), s);
            }
            let status = PodStatus {
                phase: Some(s.to_string()),
                ..Default::default()
            };
            assert_eq!(Phase::is_terminal_status(Some(&status)), terminal, "{s:?}");
        }
        assert_eq!(Phase::of(None), None);
        assert_eq!(Phase::of(Some(&PodStatus::default())), None);
    }
}
