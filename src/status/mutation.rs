//! What whoever ends a pod wants its final status to say — the data form of the kubelet's
//! `PodStatusFunc` in `KillPodOptions`: eviction (Failed, `Evicted`, `DisruptionTarget`), node
//! shutdown, `activeDeadlineSeconds` (Failed, `DeadlineExceeded`), admission (Failed, the
//! rejection reason).
//!
//! A value rather than a closure, so it can be compared, logged and merged: applying it sets
//! fields and replaces conditions by type, so the final status carries it once however many
//! times that status is rebuilt.

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

use crate::podspec::Phase;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusMutation {
    /// The phase to report (`Failed` for every user so far).
    pub phase: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Conditions to set (each replaces the status' condition of its type, or is added), e.g.
    /// `DisruptionTarget` with its reason and `lastTransitionTime`.
    pub conditions: Vec<PodCondition>,
}

impl StatusMutation {
    /// Phase `Failed` with this reason and message.
    pub fn failed(reason: impl Into<String>, message: impl Into<String>) -> Self {
        StatusMutation {
            phase: Some(Phase::Failed.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            conditions: Vec::new(),
        }
    }

    /// The same, also setting `condition`.
    pub fn with_condition(mut self, condition: PodCondition) -> Self {
        replace_or_append(&mut self.conditions, condition);
        self
    }

    /// True when applying it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.phase.is_none()
            && self.reason.is_none()
            && self.message.is_none()
            && self.conditions.is_empty()
    }

    /// `later` on top of `self`, as the kubelet chains the status functions of two kills of one
    /// pod (the earlier one first): what `later` sets wins.
    pub fn then(&mut self, later: &StatusMutation) {
        if later.phase.is_some() {
            self.phase.clone_from(&later.phase);
        }
        if later.reason.is_some() {
            self.reason.clone_from(&later.reason);
        }
        if later.message.is_some() {
            self.message.clone_from(&later.message);
        }
        for c in &later.conditions {
            replace_or_append(&mut self.conditions, c.clone());
        }
    }

    /// Writes the mutation into `status`. Idempotent: applying it twice gives the same status.
    pub fn apply(&self, status: &mut PodStatus) {
        if self.phase.is_some() {
            status.phase.clone_from(&self.phase);
        }
        if self.reason.is_some() {
            status.reason.clone_from(&self.reason);
        }
        if self.message.is_some() {
            status.message.clone_from(&self.message);
        }
        if !self.conditions.is_empty() {
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            for c in &self.conditions {
                replace_or_append(conditions, c.clone());
            }
        }
    }
}

fn replace_or_append(conditions: &mut Vec<PodCondition>, c: PodCondition) {
    match conditions.iter_mut().find(|x| x.type_ == c.type_) {
        Some(existing) => *existing = c,
        None => conditions.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(type_: &str, status: &str, reason: &str) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            ..Default::default()
        }
    }

    fn status(phase: &str, conditions: &[PodCondition]) -> PodStatus {
        PodStatus {
            phase: Some(phase.into()),
            reason: Some("Old".into()),
            conditions: Some(conditions.to_vec()),
            ..Default::default()
        }
    }

    #[test]
    fn apply_sets_fields_and_replaces_conditions_once() {
        let evicted = StatusMutation::failed("Evicted", "The node was low on resource: memory.")
            .with_condition(cond("DisruptionTarget", "True", "TerminationByKubelet"));
        // (case, mutation, status before, phase, reason, message, condition types)
        type Case = (
            &'static str,
            StatusMutation,
            PodStatus,
            &'static str,
            Option<&'static str>,
            Option<&'static str>,
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "empty changes nothing",
                StatusMutation::default(),
                status("Running", &[cond("Ready", "True", "")]),
                "Running",
                Some("Old"),
                None,
                vec!["Ready"],
            ),
            (
                "eviction adds its condition",
                evicted.clone(),
                status("Running", &[cond("Ready", "False", "")]),
                "Failed",
                Some("Evicted"),
                Some("The node was low on resource: memory."),
                vec!["Ready", "DisruptionTarget"],
            ),
            (
                "a condition of the same type is replaced, not doubled",
                evicted.clone(),
                status(
                    "Running",
                    &[cond("DisruptionTarget", "True", "PreemptionByScheduler")],
                ),
                "Failed",
                Some("Evicted"),
                Some("The node was low on resource: memory."),
                vec!["DisruptionTarget"],
            ),
        ];
        for (name, m, before, phase, reason, message, types) in cases {
            let mut once = before.clone();
            m.apply(&mut once);
            let mut twice = once.clone();
            m.apply(&mut twice);
            assert_eq!(once, twice, "{name}: idempotent");
            assert_eq!(once.phase.as_deref(), Some(phase), "{name}");
            assert_eq!(once.reason.as_deref(), reason, "{name}");
            assert_eq!(once.message.as_deref(), message, "{name}");
            let got: Vec<&str> = once
                .conditions
                .iter()
                .flatten()
                .map(|c| c.type_.as_str())
                .collect();
            assert_eq!(got, types, "{name}");
            if let Some(dt) = once
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "DisruptionTarget")
            {
                assert_eq!(dt.reason.as_deref(), Some("TerminationByKubelet"), "{name}");
            }
        }
    }

    #[test]
    fn later_mutation_wins_where_it_says_something() {
        let mut m = StatusMutation::failed("Evicted", "low on memory").with_condition(cond(
            "DisruptionTarget",
            "True",
            "TerminationByKubelet",
        ));
        m.then(&StatusMutation {
            message: Some("shutting down".into()),
            conditions: vec![cond("DisruptionTarget", "True", "NodeShutdown")],
            ..Default::default()
        });
        assert_eq!(m.phase.as_deref(), Some("Failed"));
        assert_eq!(m.reason.as_deref(), Some("Evicted"));
        assert_eq!(m.message.as_deref(), Some("shutting down"));
        assert_eq!(m.conditions.len(), 1);
        assert_eq!(m.conditions[0].reason.as_deref(), Some("NodeShutdown"));
        assert!(!m.is_empty());
        assert!(StatusMutation::default().is_empty());
    }
}
