//! What a DELETE does to an object: the API server's `rest.BeforeDelete`, the pod strategy's
//! `CheckGracefulDelete` and the generic store's finalizer handling, as one pure decision.

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;

/// `metav1.DeleteOptions` as far as the fixture uses it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub preconditions: Option<Preconditions>,
    pub propagation_policy: Option<String>,
    pub orphan_dependents: Option<bool>,
    #[serde(default)]
    pub dry_run: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// The facts about the stored object that the decision depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteSubject {
    pub uid: String,
    pub resource_version: String,
    pub deletion_timestamp: Option<Timestamp>,
    pub deletion_grace_period_seconds: Option<i64>,
    pub has_finalizers: bool,
    pub generation: i64,
    /// Only pods support graceful deletion.
    pub pod: Option<PodDeleteFacts>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDeleteFacts {
    pub node_name: Option<String>,
    pub phase: Option<String>,
    pub termination_grace_period_seconds: Option<i64>,
}

/// `t + time.Second * time.Duration(seconds)` as Go computes it: the product wraps in int64
/// nanoseconds (grace 2^63 − 1 s is −1 s), and the sum never panics.
fn go_add_seconds(t: Timestamp, seconds: i64) -> Timestamp {
    let wrapped = SignedDuration::from_nanos(seconds.wrapping_mul(1_000_000_000));
    t.saturating_add(wrapped).unwrap_or(t)
}

/// Deletion metadata to write before (or instead of) removing the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletionMark {
    pub deletion_timestamp: Timestamp,
    pub grace_period_seconds: i64,
    pub bump_generation: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteDecision {
    /// Remove the object now; with a mark, the API server first writes the deletion timestamp
    /// (a MODIFIED event), then removes it (DELETED).
    Remove { mark_first: Option<DeletionMark> },
    /// Write the mark and keep the object (grace period running, or finalizers pending).
    Mark(DeletionMark),
    /// A graceful deletion is already under way and this request does not shorten it: nothing
    /// changes.
    Pending,
}

/// A precondition of the DeleteOptions does not hold (409 Conflict).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PreconditionFailed(pub String);

/// Decides what DELETE does; `now` is the server's clock.
pub fn decide(
    subject: &DeleteSubject,
    options: &DeleteOptions,
    now: Timestamp,
) -> Result<DeleteDecision, PreconditionFailed> {
    if let Some(pre) = &options.preconditions {
        if let Some(uid) = &pre.uid {
            if *uid != subject.uid {
                return Err(PreconditionFailed(format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    subject.uid
                )));
            }
        }
        if let Some(rv) = &pre.resource_version {
            if *rv != subject.resource_version {
                return Err(PreconditionFailed(format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                    subject.resource_version
                )));
            }
        }
    }
    // Negative values are treated as 1 s on the delete path.
    let requested = options
        .grace_period_seconds
        .map(|g| if g < 0 { 1 } else { g });
    let existing_grace = subject
        .deletion_grace_period_seconds
        .map(|g| if g < 0 { 1 } else { g });

    let Some(pod) = &subject.pod else {
        return Ok(not_graceful(subject, now));
    };

    let mark = if let Some(ts) = subject.deletion_timestamp {
        let existing = match existing_grace {
            None | Some(0) => return Ok(not_graceful(subject, now)),
            Some(g) => g,
        };
        let Some(mut period) = requested else {
            return Ok(DeleteDecision::Pending);
        };
        if period >= existing {
            return Ok(DeleteDecision::Pending);
        }
        // Move the deletion timestamp back by the old grace period and forward by the new one, but
        // never into the past; a graceful request that would land in the past becomes 1 s so the
        // kubelet still does the final delete.
        let mut deletion_timestamp =
            go_add_seconds(go_add_seconds(ts, existing.wrapping_neg()), period);
        if deletion_timestamp < now {
            deletion_timestamp = now;
            if period != 0 {
                period = 1;
            }
        }
        DeletionMark {
            deletion_timestamp,
            grace_period_seconds: period,
            bump_generation: false,
        }
    } else {
        let mut period = requested
            .or(pod.termination_grace_period_seconds)
            .unwrap_or(0);
        if pod.node_name.as_deref().unwrap_or("").is_empty() {
            period = 0;
        }
        if matches!(pod.phase.as_deref(), Some("Succeeded" | "Failed")) {
            period = 0;
        }
        if period < 0 {
            period = 1;
        }
        DeletionMark {
            deletion_timestamp: go_add_seconds(now, period),
            grace_period_seconds: period,
            bump_generation: subject.generation > 0,
        }
    };
    if subject.has_finalizers || mark.grace_period_seconds > 0 {
        Ok(DeleteDecision::Mark(mark))
    } else {
        Ok(DeleteDecision::Remove {
            mark_first: Some(mark),
        })
    }
}

/// Objects without graceful deletion (or already at grace 0): removed unless finalizers are pending,
/// in which case the store's `markAsDeleting` sets the timestamp (never later than an existing one)
/// and grace 0.
fn not_graceful(subject: &DeleteSubject, now: Timestamp) -> DeleteDecision {
    if !subject.has_finalizers {
        return DeleteDecision::Remove { mark_first: None };
    }
    let deletion_timestamp = match subject.deletion_timestamp {
        Some(ts) if ts <= now => ts,
        _ => now,
    };
    DeleteDecision::Mark(DeletionMark {
        deletion_timestamp,
        grace_period_seconds: 0,
        bump_generation: subject.deletion_timestamp.is_none() && subject.generation > 0,
    })
}

/// Whether an update that leaves `new_has_finalizers` removes the object: the store deletes during
/// update when the last finalizer goes away from an object whose deletion is due (grace 0 or unset).
pub fn should_delete_during_update(
    new_has_finalizers: bool,
    old_deletion_timestamp: Option<Timestamp>,
    old_deletion_grace_period_seconds: Option<i64>,
) -> bool {
    !new_has_finalizers
        && old_deletion_timestamp.is_some()
        && matches!(old_deletion_grace_period_seconds, None | Some(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pod(node: Option<&str>, phase: Option<&str>, tgps: Option<i64>) -> DeleteSubject {
        DeleteSubject {
            uid: "u1".into(),
            resource_version: "10".into(),
            deletion_timestamp: None,
            deletion_grace_period_seconds: None,
            has_finalizers: false,
            generation: 1,
            pod: Some(PodDeleteFacts {
                node_name: node.map(String::from),
                phase: phase.map(String::from),
                termination_grace_period_seconds: tgps,
            }),
        }
    }

    fn grace(g: Option<i64>) -> DeleteOptions {
        DeleteOptions {
            grace_period_seconds: g,
            ..Default::default()
        }
    }

    fn mark(at: &str, grace: i64, bump: bool) -> DeletionMark {
        DeletionMark {
            deletion_timestamp: ts(at),
            grace_period_seconds: grace,
            bump_generation: bump,
        }
    }

    #[test]
    fn decisions() {
        let now = ts("2025-01-01T00:00:00Z");
        let bound = pod(Some("n1"), Some("Running"), Some(30));
        let mut terminating = bound.clone();
        terminating.deletion_timestamp = Some(ts("2025-01-01T00:00:20Z"));
        terminating.deletion_grace_period_seconds = Some(30);
        let mut bound_with_finalizer = bound.clone();
        bound_with_finalizer.has_finalizers = true;
        let mut due_with_finalizer = bound_with_finalizer.clone();
        due_with_finalizer.deletion_timestamp = Some(ts("2024-12-31T23:59:00Z"));
        due_with_finalizer.deletion_grace_period_seconds = Some(0);
        let configmap = DeleteSubject {
            pod: None,
            generation: 0,
            ..bound.clone()
        };
        let configmap_with_finalizer = DeleteSubject {
            has_finalizers: true,
            ..configmap.clone()
        };

        let cases: Vec<(&str, DeleteSubject, DeleteOptions, DeleteDecision)> = vec![
            (
                "bound pod, default grace from spec",
                bound.clone(),
                grace(None),
                DeleteDecision::Mark(mark("2025-01-01T00:00:30Z", 30, true)),
            ),
            (
                "bound pod, grace 5",
                bound.clone(),
                grace(Some(5)),
                DeleteDecision::Mark(mark("2025-01-01T00:00:05Z", 5, true)),
            ),
            (
                "bound pod without terminationGracePeriodSeconds deletes at once",
                pod(Some("n1"), Some("Running"), None),
                grace(None),
                DeleteDecision::Remove {
                    mark_first: Some(mark("2025-01-01T00:00:00Z", 0, true)),
                },
            ),
            (
                "bound pod, negative grace is 1 s",
                bound.clone(),
                grace(Some(-5)),
                DeleteDecision::Mark(mark("2025-01-01T00:00:01Z", 1, true)),
            ),
            (
                "bound pod, grace 0 (force)",
                bound.clone(),
                grace(Some(0)),
                DeleteDecision::Remove {
                    mark_first: Some(mark("2025-01-01T00:00:00Z", 0, true)),
                },
            ),
            (
                "unbound pod is removed at once",
                pod(None, Some("Pending"), Some(30)),
                grace(Some(30)),
                DeleteDecision::Remove {
                    mark_first: Some(mark("2025-01-01T00:00:00Z", 0, true)),
                },
            ),
            (
                "succeeded pod is removed at once",
                pod(Some("n1"), Some("Succeeded"), Some(30)),
                grace(None),
                DeleteDecision::Remove {
                    mark_first: Some(mark("2025-01-01T00:00:00Z", 0, true)),
                },
            ),
            (
                "failed pod is removed at once",
                pod(Some("n1"), Some("Failed"), Some(30)),
                grace(Some(10)),
                DeleteDecision::Remove {
                    mark_first: Some(mark("2025-01-01T00:00:00Z", 0, true)),
                },
            ),
            (
                "terminating pod, same grace: pending",
                terminating.clone(),
                grace(Some(30)),
                DeleteDecision::Pending,
            ),
            (
                "terminating pod, longer grace: pending",
                terminating.clone(),
                grace(Some(60)),
                DeleteDecision::Pending,
            ),
            (
                "terminating pod, no grace given: pending",
                terminating.clone(),
                grace(None),
                DeleteDecision::Pending,
            ),
            (
                "terminating pod, shorter grace moves the timestamp back",
                terminating.clone(),
                grace(Some(25)),
                DeleteDecision::Mark(mark("2025-01-01T00:00:15Z", 25, false)),
            ),
            (
                "terminating pod, shorter grace in the past becomes 1 s from now",
                terminating.clone(),
                grace(Some(5)),
                DeleteDecision::Mark(mark("2025-01-01T00:00:00Z", 1, false)),
            ),
            (
                "kubelet's final delete with grace 0",
                terminating.clone(),
                grace(Some(0)),
                DeleteDecision::Remove {
                    mark_first: Some(mark("2025-01-01T00:00:00Z", 0, false)),
                },
            ),
            (
                "bound pod with finalizer, grace 0: marked, kept",
                bound_with_finalizer.clone(),
                grace(Some(0)),
                DeleteDecision::Mark(mark("2025-01-01T00:00:00Z", 0, true)),
            ),
            (
                "pod already due with finalizer: timestamp kept",
                due_with_finalizer.clone(),
                grace(Some(0)),
                DeleteDecision::Mark(mark("2024-12-31T23:59:00Z", 0, false)),
            ),
            (
                // Go wraps time.Second * 2^63-1 to -1 s: the timestamp lands 1 s in the past.
                "bound pod, grace int64 max as the API server computes it",
                pod(Some("n1"), Some("Running"), Some(i64::MAX)),
                grace(None),
                DeleteDecision::Mark(mark("2024-12-31T23:59:59Z", i64::MAX, true)),
            ),
            (
                "terminating pod of grace int64 max, force",
                {
                    let mut p = pod(Some("n1"), Some("Running"), Some(i64::MAX));
                    p.deletion_timestamp = Some(ts("2024-12-31T23:59:59Z"));
                    p.deletion_grace_period_seconds = Some(i64::MAX);
                    p
                },
                grace(Some(0)),
                DeleteDecision::Remove {
                    mark_first: Some(mark("2025-01-01T00:00:00Z", 0, false)),
                },
            ),
            (
                "configmap is removed at once",
                configmap.clone(),
                grace(Some(30)),
                DeleteDecision::Remove { mark_first: None },
            ),
            (
                "configmap with finalizer: marked with grace 0",
                configmap_with_finalizer.clone(),
                grace(None),
                DeleteDecision::Mark(mark("2025-01-01T00:00:00Z", 0, false)),
            ),
        ];
        for (name, subject, options, want) in cases {
            assert_eq!(decide(&subject, &options, now), Ok(want), "{name}");
        }
    }

    #[test]
    fn preconditions() {
        let now = ts("2025-01-01T00:00:00Z");
        let subject = pod(Some("n1"), None, Some(30));
        let with = |uid: Option<&str>, rv: Option<&str>| DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: uid.map(String::from),
                resource_version: rv.map(String::from),
            }),
            ..Default::default()
        };
        let cases = [
            (with(Some("u1"), None), None),
            (with(Some("u1"), Some("10")), None),
            (
                with(Some("u2"), None),
                Some("the UID in the precondition (u2) does not match the UID in record (u1). The object might have been deleted and then recreated"),
            ),
            (
                with(None, Some("9")),
                Some("the ResourceVersion in the precondition (9) does not match the ResourceVersion in record (10). The object might have been modified"),
            ),
        ];
        for (options, want) in cases {
            let got = decide(&subject, &options, now).err().map(|e| e.0);
            assert_eq!(got.as_deref(), want, "{options:?}");
        }
    }

    #[test]
    fn delete_during_update() {
        let t = Some(ts("2025-01-01T00:00:00Z"));
        let cases = [
            (false, t, Some(0), true),
            (false, t, None, true),
            (false, t, Some(30), false),
            (true, t, Some(0), false),
            (false, None, None, false),
        ];
        for (has_finalizers, dt, grace, want) in cases {
            assert_eq!(
                should_delete_during_update(has_finalizers, dt, grace),
                want,
                "{has_finalizers} {dt:?} {grace:?}"
            );
        }
    }
}
