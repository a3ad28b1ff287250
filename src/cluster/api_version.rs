//! Which Kubernetes release the API server is, read from `/version` at start and again after the
//! server was unreachable (it may have been upgraded or rolled back meanwhile).
//!
//! It is also read again when the last read is [`REREAD_AFTER`] old, so a server upgraded or
//! rolled back without nodelet seeing it go away is noticed within minutes.
//!
//! The kubelet never asks: its version-skew policy forbids a kubelet newer than its API
//! server, so every status field it sends is one the server has. nodelet follows the v1.37
//! kubelet but is meant to join older clusters too, and an older server silently drops the
//! fields it does not know; writing them again and again is how a node agent ends up in a
//! write loop. So the writers ([`crate::status::ApiStatusSync`], the node status loop) ask
//! [`ApiServerVersion::refresh_if_stale`] before they write and leave out what the release
//! lacks ([`super::api_fields`]).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::version::Info;

use super::api_fields;

/// How old a read may get before `/version` is read again anyway.
pub const REREAD_AFTER: Duration = Duration::from_secs(600);

/// A `major.minor` Kubernetes release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
}

impl Release {
    pub const fn new(major: u32, minor: u32) -> Release {
        Release { major, minor }
    }

    /// The release whose API types and kubelet behaviour nodelet follows (k8s-openapi `v1_37`).
    pub const NODELET: Release = Release::new(1, 37);

    /// The oldest API server release nodelet is written for: every status field it sends that
    /// is newer than this is in [`api_fields::SENT_FIELDS`].
    pub const OLDEST_SUPPORTED: Release = Release::new(1, 28);
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}", self.major, self.minor)
    }
}

/// The leading decimal digits of `s` (`"33+"` → 33, as GKE reports minors).
fn leading_number(s: &str) -> Option<u32> {
    let digits: String = s.trim().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `v1.33.4-gke.100` → 1.33.
fn release_of_git_version(git_version: &str) -> Option<Release> {
    let mut parts = git_version.trim().strip_prefix('v')?.split('.');
    let major = leading_number(parts.next()?)?;
    let minor = leading_number(parts.next()?)?;
    Some(Release::new(major, minor))
}

/// The release whose API behaviour the server has: its emulation version when it reports one
/// (a v1.35 binary run with `--emulated-version=1.34` stores what v1.34 stores), else its
/// `major`/`minor`, else what `gitVersion` says.
pub fn release_of(info: &Info) -> Result<Release, String> {
    let pair = |major: Option<&str>, minor: Option<&str>| {
        Some(Release::new(
            leading_number(major?)?,
            leading_number(minor?)?,
        ))
    };
    pair(
        info.emulation_major.as_deref(),
        info.emulation_minor.as_deref(),
    )
    .or_else(|| pair(Some(&info.major), Some(&info.minor)))
    .or_else(|| release_of_git_version(&info.git_version))
    .ok_or_else(|| {
        format!(
            "/version names no release: major {:?}, minor {:?}, gitVersion {:?}",
            info.major, info.minor, info.git_version
        )
    })
}

#[derive(Debug, Default)]
struct State {
    /// The release last read; `None` until a read succeeded.
    known: Option<Release>,
    /// Read `/version` before the next write: never read, or the server was unreachable since.
    stale: bool,
    /// Successful reads, for tests and logs.
    reads: u64,
    /// Failed reads since the last success, and when to try again: a server that is down is
    /// not asked for its version at every pass.
    failures: u32,
    next_attempt: Option<tokio::time::Instant>,
    /// When the last successful read was.
    read_at: Option<tokio::time::Instant>,
}

/// The API server's release as nodelet last read it, shared by every writer (cheap to clone).
#[derive(Debug, Clone)]
pub struct ApiServerVersion {
    state: Arc<Mutex<State>>,
}

impl Default for ApiServerVersion {
    fn default() -> Self {
        Self::new()
    }
}

impl ApiServerVersion {
    /// Not read yet: the first [`Self::refresh_if_stale`] reads `/version`.
    pub fn new() -> Self {
        ApiServerVersion {
            state: Arc::new(Mutex::new(State {
                stale: true,
                ..State::default()
            })),
        }
    }

    /// A version that is never read from a server (component tests).
    pub fn fixed(release: Release) -> Self {
        ApiServerVersion {
            state: Arc::new(Mutex::new(State {
                known: Some(release),
                ..State::default()
            })),
        }
    }

    /// A poisoned lock only means a panic elsewhere mid-update of three plain fields.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The release to write for: the one last read, or nodelet's own while none could be read
    /// (nothing is left out then; the writers' convergence backoff still bounds the writes).
    pub fn current(&self) -> Release {
        self.lock().known.unwrap_or(Release::NODELET)
    }

    /// Successful `/version` reads so far.
    pub fn reads(&self) -> u64 {
        self.lock().reads
    }

    /// A request found the server unreachable: read `/version` again before the next write.
    pub fn mark_unreachable(&self) {
        self.lock().stale = true;
    }

    /// Reads `/version` if it was never read, the server was unreachable since, or the last read
    /// is [`REREAD_AFTER`] old, and returns
    /// the release to write for. A failed read keeps the previous release and tries again
    /// next time.
    pub async fn refresh_if_stale(&self, client: &kube::Client, timeout: Duration) -> Release {
        {
            let state = self.lock();
            let now = tokio::time::Instant::now();
            let waiting = state.next_attempt.is_some_and(|at| now < at);
            let old = state
                .read_at
                .is_some_and(|at| now.saturating_duration_since(at) >= REREAD_AFTER);
            if !(state.stale || old) || waiting {
                return state.known.unwrap_or(Release::NODELET);
            }
        }
        let read = match tokio::time::timeout(timeout, client.apiserver_version()).await {
            Ok(Ok(info)) => release_of(&info).map(|r| (r, info.git_version)),
            Ok(Err(error)) => Err(format!("reading /version: {error}")),
            Err(_) => Err(format!("reading /version: no answer within {timeout:?}")),
        };
        match read {
            Ok((release, git_version)) => {
                let previous = {
                    let mut state = self.lock();
                    state.stale = false;
                    state.reads += 1;
                    state.failures = 0;
                    state.next_attempt = None;
                    state.read_at = Some(tokio::time::Instant::now());
                    state.known.replace(release)
                };
                if previous != Some(release) {
                    log_release(release, &git_version);
                }
                release
            }
            Err(error) => {
                let (assumed, retry_in) = {
                    let mut state = self.lock();
                    state.failures = state.failures.saturating_add(1);
                    let wait = read_backoff(state.failures);
                    state.next_attempt = Some(tokio::time::Instant::now() + wait);
                    (state.known.unwrap_or(Release::NODELET), wait)
                };
                tracing::warn!(%error, assumed = %assumed, ?retry_in, "unable to read the API server's version");
                assumed
            }
        }
    }
}

/// Wait after `failures` failed `/version` reads: 1 s doubling, at most 30 s.
pub fn read_backoff(failures: u32) -> Duration {
    crate::backoff::exponential(
        Duration::from_secs(1),
        failures.saturating_sub(1),
        Duration::from_secs(30),
    )
}

fn log_release(release: Release, git_version: &str) {
    let missing: Vec<String> = api_fields::unsupported(release)
        .map(|f| format!("{} ({})", f.display_path(), f.since))
        .collect();
    if release < Release::OLDEST_SUPPORTED {
        tracing::warn!(
            server = %git_version,
            oldest_supported = %Release::OLDEST_SUPPORTED,
            "the API server is older than any release nodelet is written for; status fields it lacks are not sent, other requests may be refused"
        );
    }
    if missing.is_empty() {
        tracing::info!(server = %git_version, release = %release, "API server version");
    } else {
        tracing::info!(
            server = %git_version,
            release = %release,
            not_sent = %missing.join(", "),
            "API server version: status fields it does not have are not sent"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str, emulation: Option<(&str, &str)>, git: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            emulation_major: emulation.map(|e| e.0.into()),
            emulation_minor: emulation.map(|e| e.1.into()),
            git_version: git.into(),
            ..Default::default()
        }
    }

    #[test]
    fn release_of_table() {
        // (name, /version answer, release or error)
        let cases = [
            (
                "plain",
                info("1", "32", None, "v1.32.4"),
                Ok(Release::new(1, 32)),
            ),
            (
                "GKE's plus",
                info("1", "33+", None, "v1.33.1-gke.1"),
                Ok(Release::new(1, 33)),
            ),
            (
                "emulation wins",
                info("1", "35", Some(("1", "34")), "v1.35.0"),
                Ok(Release::new(1, 34)),
            ),
            (
                "empty emulation falls back",
                info("1", "35", Some(("", "")), "v1.35.0"),
                Ok(Release::new(1, 35)),
            ),
            (
                "only gitVersion",
                info("", "", None, "v1.31.7-eks-1"),
                Ok(Release::new(1, 31)),
            ),
            ("nothing", info("", "", None, "devel"), Err(())),
        ];
        for (name, info, want) in cases {
            assert_eq!(release_of(&info).map_err(|_| ()), want, "{name}");
        }
        let err = release_of(&info("x", "y", None, "devel")).unwrap_err();
        assert!(err.contains("\"devel\""), "{err}");
    }

    #[test]
    fn read_backoff_table() {
        let cases = [(1, 1), (2, 2), (3, 4), (5, 16), (6, 30), (60, 30)];
        for (failures, secs) in cases {
            assert_eq!(
                read_backoff(failures),
                Duration::from_secs(secs),
                "{failures}"
            );
        }
    }

    #[test]
    fn releases_order_by_minor() {
        assert!(Release::new(1, 9) < Release::new(1, 10));
        assert!(Release::new(1, 33) < Release::NODELET);
        assert_eq!(Release::new(1, 32).to_string(), "v1.32");
    }

    #[test]
    fn unreachable_makes_it_stale_and_unknown_means_nodelets_own() {
        let version = ApiServerVersion::new();
        assert_eq!(version.current(), Release::NODELET);
        assert!(version.lock().stale);
        let fixed = ApiServerVersion::fixed(Release::new(1, 32));
        assert_eq!(fixed.current(), Release::new(1, 32));
        assert!(!fixed.lock().stale);
        fixed.mark_unreachable();
        assert!(fixed.lock().stale);
        assert_eq!(
            fixed.current(),
            Release::new(1, 32),
            "kept until read again"
        );
    }
}
