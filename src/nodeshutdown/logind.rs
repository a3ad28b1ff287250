//! What node shutdown needs from systemd-logind, behind a small trait ([`Logind`]), and the
//! logind drop-in that raises `InhibitDelayMaxSec` (the kubelet's `OverrideInhibitDelay`).
//!
//! The protocol (freedesktop's "inhibitor locks"): a `delay` lock on `shutdown` is a file
//! descriptor from `Inhibit`; while it is open, logind announces a shutdown with
//! `PrepareForShutdown(true)` and waits — at most `InhibitDelayMaxUSec` — for the lock to be
//! closed before it goes on. `PrepareForShutdown(false)` says a shutdown was cancelled.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::stream::BoxStream;

/// What logind and systemd answered when they did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    #[error("connecting to the system bus: {message}")]
    Connect { message: String },
    #[error("reading logind's {property}: {message}")]
    Property {
        property: &'static str,
        message: String,
    },
    #[error("logind {method}: {message}")]
    Call {
        method: &'static str,
        message: String,
    },
    #[error("writing the logind drop-in {path}: {source}")]
    DropIn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "logind's InhibitDelayMaxSec is {current:?} after writing {path} and reloading logind, \
         less than the {requested:?} the shutdown grace periods need"
    )]
    DelayTooShort {
        requested: Duration,
        current: Duration,
        path: PathBuf,
    },
}

/// An open inhibitor lock: the shutdown waits while it is held; dropping it releases it. It
/// holds what keeps the lock open (the file descriptor logind gave, or a fake's guard).
pub struct InhibitLock {
    _held: Box<dyn Send + Sync>,
}

impl InhibitLock {
    pub fn new(held: impl Send + Sync + 'static) -> InhibitLock {
        InhibitLock {
            _held: Box::new(held),
        }
    }
}

impl std::fmt::Debug for InhibitLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InhibitLock")
    }
}

/// logind (and systemd's `KillUnit`, to make logind re-read its configuration).
#[async_trait::async_trait]
pub trait Logind: Send + Sync {
    /// `InhibitDelayMaxUSec`: the longest a delay lock can hold a shutdown.
    async fn inhibit_delay_max(&self) -> Result<Duration, LogindError>;
    /// `Inhibit("shutdown", "nodelet", why, "delay")`.
    async fn inhibit_shutdown(&self) -> Result<InhibitLock, LogindError>;
    /// Makes logind re-read `logind.conf` and its drop-ins (SIGHUP through systemd, as the
    /// kubelet does).
    async fn reload(&self) -> Result<(), LogindError>;
    /// `PrepareForShutdown` signals from now on: true = shutting down, false = cancelled. The
    /// stream ends when the bus connection does.
    async fn prepare_for_shutdown(&self) -> Result<BoxStream<'static, bool>, LogindError>;
}

/// Who asks for the lock, and why (what `systemd-inhibit --list` shows).
pub const INHIBIT_WHO: &str = "nodelet";
pub const INHIBIT_WHY: &str = "nodelet needs time to end the pods gracefully on node shutdown";

/// The default drop-in (the kubelet writes `/etc/systemd/logind.conf.d/99-kubelet.conf`).
pub const DEFAULT_DROP_IN: &str = "/etc/systemd/logind.conf.d/99-nodelet.conf";

/// The drop-in's text: `InhibitDelayMaxSec` in whole seconds, rounded as Go's `%.0f`.
pub fn drop_in_text(delay: Duration) -> String {
    let seconds = delay.as_secs_f64().round_ties_even();
    format!("# nodelet logind override (graceful node shutdown)\n[Login]\nInhibitDelayMaxSec={seconds:.0}\n")
}

/// Writes the drop-in (and its directory) with `drop_in_text(delay)`.
pub fn write_drop_in(path: &Path, delay: Duration) -> Result<(), LogindError> {
    let error = |source| LogindError::DropIn {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(error)?;
    }
    std::fs::write(path, drop_in_text(delay)).map_err(error)
}

/// What nodelet does about logind's delay before taking the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayCheck {
    /// logind already lets a lock hold the shutdown long enough.
    Enough,
    /// Write the drop-in with this delay, reload logind, and read the delay again.
    Raise(Duration),
}

/// The kubelet's rule: raise the delay when the periods need more than logind allows.
pub fn check_delay(requested: Duration, current: Duration) -> DelayCheck {
    if requested > current {
        DelayCheck::Raise(requested)
    } else {
        DelayCheck::Enough
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_sets_the_delay_in_seconds() {
        let cases: &[(Duration, &str)] = &[
            (Duration::from_secs(30), "30"),
            (Duration::from_secs(0), "0"),
            (Duration::from_millis(1_500), "2"),
            (Duration::from_millis(2_500), "2"),
            (Duration::from_secs(3_600), "3600"),
        ];
        for (delay, want) in cases {
            let text = drop_in_text(*delay);
            assert!(text.starts_with('#'), "{text}");
            assert!(
                text.ends_with(&format!("\n[Login]\nInhibitDelayMaxSec={want}\n")),
                "{delay:?}: {text}"
            );
        }
    }

    #[test]
    fn the_drop_in_is_written_with_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logind.conf.d/99-nodelet.conf");
        write_drop_in(&path, Duration::from_secs(30)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("InhibitDelayMaxSec=30"), "{text}");
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, "").unwrap();
        let err = write_drop_in(&blocked.join("99.conf"), Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("file/99.conf"), "{err}");
    }

    #[test]
    fn the_delay_is_raised_only_when_too_short() {
        let s = Duration::from_secs;
        assert_eq!(check_delay(s(30), s(5)), DelayCheck::Raise(s(30)));
        assert_eq!(check_delay(s(30), s(30)), DelayCheck::Enough);
        assert_eq!(check_delay(s(30), s(90)), DelayCheck::Enough);
        assert_eq!(check_delay(s(0), s(0)), DelayCheck::Enough);
    }
}
