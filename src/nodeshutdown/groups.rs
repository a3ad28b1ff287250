//! Which pods end in which order, and with how long: the kubelet's `migrateConfig`,
//! `groupByPriority` and the per-pod grace period of `killPods`, as pure functions.
//!
//! A node shutdown ends pods in groups of priority, lowest first. Each group has a period;
//! the pods of a group are ended together, each with the smaller of the group's period and its
//! own `terminationGracePeriodSeconds`, and the next group starts when they are all gone or
//! the period is over. `shutdownGracePeriod` / `shutdownGracePeriodCriticalPods` are the
//! two-group shorthand: every pod below the system-critical priority gets the difference, the
//! critical ones get `shutdownGracePeriodCriticalPods`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::config::shutdown::GracePeriodByPriority;

/// `scheduling.DefaultPriorityWhenNoDefaultClassExists`.
pub const DEFAULT_PRIORITY: i32 = 0;
/// `scheduling.SystemCriticalPriority` (`2 * HighestUserDefinablePriority`).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// The periods to use, sorted by priority (lowest first): the by-priority list when given,
/// else the two groups of `shutdownGracePeriod` and `shutdownGracePeriodCriticalPods`. Empty
/// when graceful shutdown is off (both zero, no list): the node shuts down at once.
pub fn effective_periods(
    by_priority: &[GracePeriodByPriority],
    grace_period: Duration,
    critical_pods: Duration,
) -> Vec<GracePeriodByPriority> {
    let mut periods = if by_priority.is_empty() {
        migrate(grace_period, critical_pods)
    } else {
        by_priority.to_vec()
    };
    // Stable, as Go's sort.Slice is not guaranteed to be: equal priorities keep their order.
    periods.sort_by_key(|p| p.priority);
    periods
}

/// The kubelet's `migrateConfig`: `shutdownGracePeriod` split into the regular pods' share and
/// the critical pods' share; nothing when the total is zero or smaller than the critical share.
fn migrate(grace_period: Duration, critical_pods: Duration) -> Vec<GracePeriodByPriority> {
    if grace_period.is_zero() || critical_pods > grace_period {
        return Vec::new();
    }
    let seconds = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    vec![
        GracePeriodByPriority {
            priority: DEFAULT_PRIORITY,
            shutdown_grace_period_seconds: seconds(grace_period - critical_pods),
        },
        GracePeriodByPriority {
            priority: SYSTEM_CRITICAL_PRIORITY,
            shutdown_grace_period_seconds: seconds(critical_pods),
        },
    ]
}

/// How long the node is asked to wait in total (the kubelet's `periodRequested`): the sum of
/// every group's period. logind's `InhibitDelayMaxUSec` must be at least this.
pub fn period_requested(periods: &[GracePeriodByPriority]) -> Duration {
    let total: i64 = periods
        .iter()
        .map(|p| p.shutdown_grace_period_seconds.max(0))
        .fold(0, i64::saturating_add);
    Duration::from_secs(u64::try_from(total).unwrap_or(0))
}

/// The pods of one group and the group's period.
#[derive(Debug, Clone)]
pub struct ShutdownGroup {
    pub period: GracePeriodByPriority,
    pub pods: Vec<Arc<Pod>>,
}

fn pod_priority(pod: &Pod) -> i32 {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority)
        .unwrap_or(DEFAULT_PRIORITY)
}

/// The index of the group a pod of `priority` belongs to, in `periods` sorted lowest first:
/// the last group whose priority is at most the pod's; below the lowest, the lowest.
fn group_index(periods: &[GracePeriodByPriority], priority: i32) -> usize {
    periods
        .iter()
        .rposition(|p| p.priority <= priority)
        .unwrap_or(0)
}

/// The kubelet's `groupByPriority`: every pod in its group, groups in `periods`' order
/// (lowest priority first), empty groups kept (the caller skips them without waiting).
pub fn group_by_priority(
    periods: &[GracePeriodByPriority],
    pods: &[Arc<Pod>],
) -> Vec<ShutdownGroup> {
    let mut groups: Vec<ShutdownGroup> = periods
        .iter()
        .map(|p| ShutdownGroup {
            period: *p,
            pods: Vec::new(),
        })
        .collect();
    if groups.is_empty() {
        return groups;
    }
    for pod in pods {
        let i = group_index(periods, pod_priority(pod));
        groups[i].pods.push(pod.clone());
    }
    groups
}

/// The grace period a pod is ended with: the group's period, or the pod's own
/// `terminationGracePeriodSeconds` when that is shorter.
pub fn pod_grace_period(group_seconds: i64, pod: &Pod) -> Duration {
    let own = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds);
    let seconds = match own {
        Some(own) if own <= group_seconds => own,
        _ => group_seconds,
    };
    crate::clock::seconds_from_api(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn p(priority: i32, seconds: i64) -> GracePeriodByPriority {
        GracePeriodByPriority {
            priority,
            shutdown_grace_period_seconds: seconds,
        }
    }

    fn pod(name: &str, priority: Option<i32>, grace: Option<i64>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                priority,
                termination_grace_period_seconds: grace,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn periods_from_the_configuration() {
        let s = Duration::from_secs;
        type Case = (
            &'static str,
            Vec<GracePeriodByPriority>,
            Duration,
            Duration,
            Vec<GracePeriodByPriority>,
        );
        let cases: &[Case] = &[
            ("off", vec![], s(0), s(0), vec![]),
            (
                "critical only is off, as the kubelet",
                vec![],
                s(0),
                s(10),
                vec![],
            ),
            (
                "critical larger than the total",
                vec![],
                s(5),
                s(10),
                vec![],
            ),
            (
                "regular pods only",
                vec![],
                s(30),
                s(0),
                vec![p(0, 30), p(SYSTEM_CRITICAL_PRIORITY, 0)],
            ),
            (
                "split",
                vec![],
                s(30),
                s(10),
                vec![p(0, 20), p(SYSTEM_CRITICAL_PRIORITY, 10)],
            ),
            (
                "all for critical pods",
                vec![],
                s(10),
                s(10),
                vec![p(0, 0), p(SYSTEM_CRITICAL_PRIORITY, 10)],
            ),
            (
                "sub-second parts are dropped",
                vec![],
                Duration::from_millis(30_500),
                s(10),
                vec![p(0, 20), p(SYSTEM_CRITICAL_PRIORITY, 10)],
            ),
            (
                "the list wins and is sorted",
                vec![p(100_000, 10), p(-5, 3), p(1_000, 20)],
                s(0),
                s(0),
                vec![p(-5, 3), p(1_000, 20), p(100_000, 10)],
            ),
        ];
        for (name, list, total, critical, want) in cases {
            assert_eq!(&effective_periods(list, *total, *critical), want, "{name}");
        }
    }

    #[test]
    fn the_period_requested_is_the_sum() {
        assert_eq!(period_requested(&[]), Duration::ZERO);
        assert_eq!(
            period_requested(&[p(0, 20), p(SYSTEM_CRITICAL_PRIORITY, 10)]),
            Duration::from_secs(30)
        );
        assert_eq!(
            period_requested(&[p(0, -5), p(1, 7)]),
            Duration::from_secs(7)
        );
    }

    #[test]
    fn pods_land_in_the_group_of_their_priority() {
        // As the kubelet's table: 1 and 10 and 100 are group boundaries.
        let periods = [p(1, 10), p(10, 20), p(100, 30)];
        let cases: &[(Option<i32>, usize)] = &[
            (None, 0), // priority 0: below the lowest, into the lowest
            (Some(-10), 0),
            (Some(1), 0), // a boundary belongs to its own group
            (Some(5), 0),
            (Some(10), 1),
            (Some(99), 1),
            (Some(100), 2),
            (Some(1_000_000), 2), // above the highest, into the highest
        ];
        for (priority, want) in cases {
            let pods = [pod("x", *priority, None)];
            let groups = group_by_priority(&periods, &pods);
            assert_eq!(groups.len(), 3);
            let found: Vec<usize> = groups
                .iter()
                .enumerate()
                .filter(|(_, g)| !g.pods.is_empty())
                .map(|(i, _)| i)
                .collect();
            assert_eq!(found, vec![*want], "priority {priority:?}");
        }
    }

    #[test]
    fn groups_keep_their_order_and_empty_ones() {
        let periods = effective_periods(&[], Duration::from_secs(30), Duration::from_secs(10));
        let pods = [
            pod("critical", Some(SYSTEM_CRITICAL_PRIORITY + 1000), None),
            pod("regular", None, None),
            pod("high", Some(1_000_000), None),
        ];
        let groups = group_by_priority(&periods, &pods);
        let names: Vec<Vec<&str>> = groups
            .iter()
            .map(|g| {
                g.pods
                    .iter()
                    .map(|p| p.metadata.name.as_deref().unwrap())
                    .collect()
            })
            .collect();
        assert_eq!(names, vec![vec!["regular", "high"], vec!["critical"]]);
        assert!(group_by_priority(&[], &pods).is_empty());
        let none = group_by_priority(&periods, &[]);
        assert_eq!(none.len(), 2);
        assert!(none.iter().all(|g| g.pods.is_empty()));
    }

    #[test]
    fn each_pod_gets_the_shorter_of_the_group_period_and_its_own() {
        let s = Duration::from_secs;
        let cases: &[(i64, Option<i64>, Duration)] = &[
            (20, None, s(20)),
            (20, Some(30), s(20)),
            (20, Some(5), s(5)),
            (20, Some(20), s(20)),
            (20, Some(0), s(0)),
            (0, Some(30), s(0)),
        ];
        for (group, own, want) in cases {
            assert_eq!(
                pod_grace_period(*group, &pod("x", None, *own)),
                *want,
                "group {group}, own {own:?}"
            );
        }
    }
}
