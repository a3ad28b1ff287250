//! `shutdownGracePeriodByPodPriority` as configured. The groups and periods a node shutdown
//! uses are `nodeshutdown::groups`.

/// One entry of `shutdownGracePeriodByPodPriority`: pods of at least `priority` (and below the
/// next entry's) get `shutdown_grace_period_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GracePeriodByPriority {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}
