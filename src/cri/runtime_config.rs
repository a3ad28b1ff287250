//! The cgroup driver from the runtime's `RuntimeConfig` (the kubelet's
//! `KubeletCgroupDriverFromCRI`, GA since v1.34): a runtime that answers decides the driver and
//! the configured `cgroupDriver` is only the fallback for runtimes without the call
//! (containerd before 2.0), as the kubelet's `getCgroupDriverFromCRI`.

use std::time::Duration;

use super::api;
use crate::config::CgroupDriver;

/// How often a failing `RuntimeConfig` is asked (a runtime still starting), and the pause
/// between attempts: the kubelet's three tries, two seconds apart.
pub const ATTEMPTS: u32 = 3;
pub const RETRY_DELAY: Duration = Duration::from_secs(2);

/// The kubelet's line when the runtime lacks the call.
pub const FALLBACK_MESSAGE: &str = "CRI implementation should be updated to support RuntimeConfig when KubeletCgroupDriverFromCRI feature gate has been enabled. Falling back to using cgroupDriver from kubelet config.";
/// The kubelet's line when the runtime's answer is used.
pub const FROM_RUNTIME_MESSAGE: &str = "Using cgroup driver setting received from the CRI runtime";

/// What the runtime said when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriverAnswer {
    /// `RuntimeConfig` answered with a Linux configuration (the enum's raw value).
    Reported(i32),
    /// It answered without a Linux configuration.
    NoLinuxConfig,
    /// The runtime has no `RuntimeConfig` (gRPC `Unimplemented`).
    Unimplemented,
    /// Not asked: a runtime handed in by a test, which places no cgroups of its own.
    NotAsked,
}

/// Where the driver nodelet uses came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverSource {
    Runtime,
    Config,
}

/// The answer of one `RuntimeConfig` call: `Err` is an error worth retrying.
pub fn answer_of(
    result: std::result::Result<api::RuntimeConfigResponse, tonic::Status>,
) -> std::result::Result<CgroupDriverAnswer, tonic::Status> {
    match result {
        Ok(response) => Ok(match response.linux {
            Some(linux) => CgroupDriverAnswer::Reported(linux.cgroup_driver),
            None => CgroupDriverAnswer::NoLinuxConfig,
        }),
        Err(status) if status.code() == tonic::Code::Unimplemented => {
            Ok(CgroupDriverAnswer::Unimplemented)
        }
        Err(status) => Err(status),
    }
}

/// The driver to use, given the configured one and the runtime's answer; an unknown driver
/// value from the runtime is an error (the kubelet's `runtime returned an unknown cgroup
/// driver N`).
pub fn effective_cgroup_driver(
    configured: CgroupDriver,
    answer: CgroupDriverAnswer,
) -> Result<(CgroupDriver, DriverSource), String> {
    match answer {
        CgroupDriverAnswer::Reported(raw) => match api::CgroupDriver::try_from(raw) {
            Ok(api::CgroupDriver::Systemd) => Ok((CgroupDriver::Systemd, DriverSource::Runtime)),
            Ok(api::CgroupDriver::Cgroupfs) => Ok((CgroupDriver::Cgroupfs, DriverSource::Runtime)),
            Err(_) => Err(format!("runtime returned an unknown cgroup driver {raw}")),
        },
        CgroupDriverAnswer::NoLinuxConfig
        | CgroupDriverAnswer::Unimplemented
        | CgroupDriverAnswer::NotAsked => Ok((configured, DriverSource::Config)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_driver_table() {
        use CgroupDriver::*;
        use CgroupDriverAnswer::*;
        let systemd = api::CgroupDriver::Systemd as i32;
        let cgroupfs = api::CgroupDriver::Cgroupfs as i32;
        let cases = [
            (
                "runtime says systemd, config cgroupfs",
                Cgroupfs,
                Reported(systemd),
                Ok((Systemd, DriverSource::Runtime)),
            ),
            (
                "runtime says cgroupfs, config systemd",
                Systemd,
                Reported(cgroupfs),
                Ok((Cgroupfs, DriverSource::Runtime)),
            ),
            (
                "runtime agrees",
                Systemd,
                Reported(systemd),
                Ok((Systemd, DriverSource::Runtime)),
            ),
            (
                "no Linux configuration",
                Systemd,
                NoLinuxConfig,
                Ok((Systemd, DriverSource::Config)),
            ),
            (
                "containerd 1.x: no RuntimeConfig",
                Cgroupfs,
                Unimplemented,
                Ok((Cgroupfs, DriverSource::Config)),
            ),
            (
                "a test's runtime",
                Systemd,
                NotAsked,
                Ok((Systemd, DriverSource::Config)),
            ),
            (
                "unknown value",
                Cgroupfs,
                Reported(7),
                Err("runtime returned an unknown cgroup driver 7".to_string()),
            ),
        ];
        for (name, configured, answer, want) in cases {
            assert_eq!(effective_cgroup_driver(configured, answer), want, "{name}");
        }
    }

    #[test]
    fn answers_table() {
        let linux = |d: api::CgroupDriver| api::RuntimeConfigResponse {
            linux: Some(api::LinuxRuntimeConfiguration {
                cgroup_driver: d as i32,
            }),
        };
        assert_eq!(
            answer_of(Ok(linux(api::CgroupDriver::Cgroupfs))).unwrap(),
            CgroupDriverAnswer::Reported(api::CgroupDriver::Cgroupfs as i32)
        );
        assert_eq!(
            answer_of(Ok(api::RuntimeConfigResponse { linux: None })).unwrap(),
            CgroupDriverAnswer::NoLinuxConfig
        );
        assert_eq!(
            answer_of(Err(tonic::Status::unimplemented(
                "unknown method RuntimeConfig"
            )))
            .unwrap(),
            CgroupDriverAnswer::Unimplemented
        );
        let retry = answer_of(Err(tonic::Status::unavailable("starting"))).unwrap_err();
        assert_eq!(retry.code(), tonic::Code::Unavailable);
    }
}
