//! The resource pressures the eviction manager reports, as the node status reads them.

/// Which resource pressures the eviction manager currently reports. All false until it sets
/// them: this is the seam through which it turns the pressure conditions True.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}
