//! SIGTERM/SIGINT handling and, as PID 1, zombie reaping.
//!
//! testbox usually runs as PID 1 of its container, where the kernel ignores signals whose
//! disposition is the default: without a real handler `SIGTERM` would do nothing and every stop
//! would wait for the grace period and end in SIGKILL. So handlers are installed first thing, and
//! what happens on a signal is decided by `--on-sigterm`, `--sigterm-delay`, `--sigterm-exit-code`.

use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::events::Events;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnSigterm {
    /// Exit (after `--sigterm-delay`) with `--sigterm-exit-code`.
    Exit,
    /// Log the signal and keep running (only SIGKILL ends the process).
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminationPolicy {
    pub on_sigterm: OnSigterm,
    pub delay: Duration,
    pub exit_code: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermSignal {
    Term,
    Int,
}

impl TermSignal {
    pub fn name(self) -> &'static str {
        match self {
            TermSignal::Term => "SIGTERM",
            TermSignal::Int => "SIGINT",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalResponse {
    /// Keep running; the event log says the signal was ignored.
    Ignore,
    /// Keep serving for `delay` (a slow graceful shutdown), then exit with `code`.
    ExitAfter { delay: Duration, code: u8 },
}

/// What to do with a SIGTERM or SIGINT (both follow the same flags, so `ctr run` + Ctrl-C behaves
/// like a kubelet stop).
pub fn response_to(policy: &TerminationPolicy) -> SignalResponse {
    match policy.on_sigterm {
        OnSigterm::Ignore => SignalResponse::Ignore,
        OnSigterm::Exit => SignalResponse::ExitAfter {
            delay: policy.delay,
            code: policy.exit_code,
        },
    }
}

/// The installed SIGTERM/SIGINT handlers plus the policy that answers them.
pub struct Termination {
    sigterm: Signal,
    sigint: Signal,
    policy: TerminationPolicy,
    events: Events,
}

impl Termination {
    /// Installs the handlers now, so a signal that arrives before the first `wait` is not lost.
    pub fn install(policy: TerminationPolicy, events: Events) -> std::io::Result<Self> {
        Ok(Self {
            sigterm: signal(SignalKind::terminate())?,
            sigint: signal(SignalKind::interrupt())?,
            policy,
            events,
        })
    }

    async fn next_signal(&mut self) -> TermSignal {
        tokio::select! {
            Some(()) = self.sigterm.recv() => TermSignal::Term,
            Some(()) = self.sigint.recv() => TermSignal::Int,
            else => std::future::pending().await,
        }
    }

    /// Resolves with the exit code once a signal has been answered with an exit; signals answered
    /// with `Ignore` are logged and waiting goes on. Signals arriving during `--sigterm-delay` are
    /// logged and do not shorten it.
    pub async fn wait(&mut self) -> u8 {
        loop {
            let received = self.next_signal().await;
            self.events.emit(&format!("received {}", received.name()));
            match response_to(&self.policy) {
                SignalResponse::Ignore => {
                    self.events.emit(&format!("ignoring {}", received.name()));
                }
                SignalResponse::ExitAfter { delay, code } => {
                    if !delay.is_zero() {
                        self.events.emit(&format!("exiting in {delay:?}"));
                        let deadline = tokio::time::sleep(delay);
                        tokio::pin!(deadline);
                        loop {
                            tokio::select! {
                                () = &mut deadline => break,
                                again = self.next_signal() => self.events.emit(&format!(
                                    "received {} (already terminating)",
                                    again.name()
                                )),
                            }
                        }
                    }
                    return code;
                }
            }
        }
    }
}

/// As PID 1, orphans inside the container (e.g. from `sh -c 'sleep 100 &'` in an exec probe) are
/// re-parented to testbox; reap them so they do not pile up as zombies. testbox starts no
/// children of its own, so reaping any child is safe.
pub fn spawn_reaper_if_pid1() -> std::io::Result<()> {
    if std::process::id() != 1 {
        return Ok(());
    }
    let mut sigchld = signal(SignalKind::child())?;
    tokio::spawn(async move {
        while sigchld.recv().await.is_some() {
            reap_all_exited_children();
        }
    });
    Ok(())
}

fn reap_all_exited_children() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;
    // One SIGCHLD can stand for several exits: loop until nothing is left to reap.
    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_to_cases() {
        let delay = Duration::from_secs(3);
        let cases = [
            (
                OnSigterm::Exit,
                Duration::ZERO,
                0,
                SignalResponse::ExitAfter {
                    delay: Duration::ZERO,
                    code: 0,
                },
            ),
            (
                OnSigterm::Exit,
                delay,
                143,
                SignalResponse::ExitAfter { delay, code: 143 },
            ),
            (OnSigterm::Ignore, delay, 7, SignalResponse::Ignore),
        ];
        for (on_sigterm, delay, exit_code, want) in cases {
            let policy = TerminationPolicy {
                on_sigterm,
                delay,
                exit_code,
            };
            assert_eq!(response_to(&policy), want, "policy {policy:?}");
        }
    }

    #[test]
    fn signal_names() {
        assert_eq!(TermSignal::Term.name(), "SIGTERM");
        assert_eq!(TermSignal::Int.name(), "SIGINT");
    }
}
