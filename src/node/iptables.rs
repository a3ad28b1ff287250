//! The kubelet's iptables utility chains (`makeIPTablesUtilChains`, on by default): the
//! `KUBE-IPTABLES-HINT` chain in `mangle` (other components read from it whether the node uses
//! iptables-legacy or iptables-nft), and for IPv4 the `KUBE-FIREWALL` chain, jumped to first from
//! `INPUT` and `OUTPUT`, with the rule that drops connections to 127.0.0.0/8 from elsewhere
//! (kubernetes#90259). A canary chain `KUBE-KUBELET-CANARY` in `mangle`, `nat` and `filter` tells
//! when a firewall reload flushed them: checked every minute, and everything is put back.
//!
//! The steps are values ([`steps`]) and each becomes `iptables` arguments ([`check_args`],
//! [`apply_args`]); running them is behind [`IptablesRunner`]. As in the kubelet, a failure is
//! logged and nodelet runs on ("some functionality may be missing").

use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub const HINT_CHAIN: &str = "KUBE-IPTABLES-HINT";
pub const FIREWALL_CHAIN: &str = "KUBE-FIREWALL";
pub const CANARY_CHAIN: &str = "KUBE-KUBELET-CANARY";
/// How often the canary is looked at (the kubelet's `Monitor` interval).
pub const CANARY_PERIOD: Duration = Duration::from_secs(60);

/// The two families, as the kubelet has one client for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn binary(self) -> &'static str {
        match self {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        }
    }
}

/// One thing that must be there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Chain {
        table: &'static str,
        chain: &'static str,
    },
    /// A rule, inserted first (`prepend`) or appended when missing.
    Rule {
        prepend: bool,
        table: &'static str,
        chain: &'static str,
        args: Vec<&'static str>,
    },
}

/// The kubelet's `syncIPTablesRules` for one family, then the canaries.
pub fn steps(family: Family) -> Vec<Step> {
    let mut steps = vec![Step::Chain {
        table: "mangle",
        chain: HINT_CHAIN,
    }];
    if family == Family::V4 {
        steps.push(Step::Chain {
            table: "filter",
            chain: FIREWALL_CHAIN,
        });
        for chain in ["OUTPUT", "INPUT"] {
            steps.push(Step::Rule {
                prepend: true,
                table: "filter",
                chain,
                args: vec!["-j", FIREWALL_CHAIN],
            });
        }
        steps.push(Step::Rule {
            prepend: false,
            table: "filter",
            chain: FIREWALL_CHAIN,
            args: vec![
                "-m",
                "comment",
                "--comment",
                "block incoming localnet connections",
                "--dst",
                "127.0.0.0/8",
                "!",
                "--src",
                "127.0.0.0/8",
                "-m",
                "conntrack",
                "!",
                "--ctstate",
                "RELATED,ESTABLISHED,DNAT",
                "-j",
                "DROP",
            ],
        });
    }
    for table in ["mangle", "nat", "filter"] {
        steps.push(Step::Chain {
            table,
            chain: CANARY_CHAIN,
        });
    }
    steps
}

/// The arguments that succeed when the step is already there.
pub fn check_args(step: &Step) -> Vec<&'static str> {
    match step {
        Step::Chain { table, chain } => vec!["-w", "-t", table, "-S", chain],
        Step::Rule {
            table, chain, args, ..
        } => {
            let mut a = vec!["-w", "-t", table, "-C", chain];
            a.extend(args);
            a
        }
    }
}

/// The arguments that make the step true.
pub fn apply_args(step: &Step) -> Vec<&'static str> {
    match step {
        Step::Chain { table, chain } => vec!["-w", "-t", table, "-N", chain],
        Step::Rule {
            prepend,
            table,
            chain,
            args,
        } => {
            let mut a = vec!["-w", "-t", table, if *prepend { "-I" } else { "-A" }, chain];
            a.extend(args);
            a
        }
    }
}

/// Runs `iptables`/`ip6tables`.
pub trait IptablesRunner: Send + Sync {
    /// Whether the command exited 0; `Err` when it could not be run at all.
    fn run(&self, binary: &str, args: &[&str]) -> Result<bool, String>;
}

/// The host's `iptables` and `ip6tables` from `PATH`.
pub struct HostIptables;

impl IptablesRunner for HostIptables {
    fn run(&self, binary: &str, args: &[&str]) -> Result<bool, String> {
        std::process::Command::new(binary)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .map_err(|e| format!("running {binary}: {e}"))
    }
}

/// Makes every step of `family` true: checked first, applied when missing. `Err` names the first
/// step that could not be made true.
pub fn sync(runner: &dyn IptablesRunner, family: Family) -> Result<(), String> {
    let binary = family.binary();
    for step in steps(family) {
        if runner.run(binary, &check_args(&step))? {
            continue;
        }
        let args = apply_args(&step);
        if !runner.run(binary, &args)? {
            return Err(format!("{binary} {} failed", args.join(" ")));
        }
    }
    Ok(())
}

/// Whether the canary of `family` is still in every table.
pub fn canaries_present(runner: &dyn IptablesRunner, family: Family) -> bool {
    ["mangle", "nat", "filter"].iter().all(|table| {
        runner
            .run(
                family.binary(),
                &check_args(&Step::Chain {
                    table,
                    chain: CANARY_CHAIN,
                }),
            )
            .unwrap_or(false)
    })
}

/// The kubelet's `initNetworkUtil`: syncs both families, then for each one that worked looks at
/// its canaries every [`CANARY_PERIOD`] and syncs again when one is gone, until cancelled.
pub async fn keep_util_chains(
    runner: std::sync::Arc<dyn IptablesRunner>,
    period: Duration,
    cancel: CancellationToken,
) {
    let mut watched = Vec::new();
    for family in [Family::V4, Family::V6] {
        let r = runner.clone();
        match tokio::task::spawn_blocking(move || sync(r.as_ref(), family)).await {
            Ok(Ok(())) => {
                tracing::info!(protocol = ?family, "initialized iptables rules");
                watched.push(family);
            }
            Ok(Err(e)) => tracing::error!(
                protocol = ?family,
                error = %e,
                "failed to initialize iptables rules; some functionality may be missing"
            ),
            Err(e) => tracing::error!(error = %e, "iptables task failed"),
        }
    }
    if watched.is_empty() {
        return;
    }
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        for family in &watched {
            let (r, family) = (runner.clone(), *family);
            let resynced = tokio::task::spawn_blocking(move || {
                if canaries_present(r.as_ref(), family) {
                    None
                } else {
                    Some(sync(r.as_ref(), family))
                }
            })
            .await;
            match resynced {
                Ok(None) => {}
                Ok(Some(Ok(()))) => {
                    tracing::info!(protocol = ?family, "iptables canary gone; rules put back")
                }
                Ok(Some(Err(e))) => {
                    tracing::error!(protocol = ?family, error = %e, "putting iptables rules back")
                }
                Err(e) => tracing::error!(error = %e, "iptables task failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};

    /// A table of chains and rules that answers `-S`, `-C`, `-N`, `-I`, `-A` and `-F`/`-X`.
    #[derive(Default)]
    struct FakeTables {
        /// (binary, table, chain)
        chains: Mutex<BTreeSet<(String, String, String)>>,
        /// (binary, table, chain, rule args)
        rules: Mutex<Vec<(String, String, String, String)>>,
        calls: Mutex<Vec<String>>,
        missing_binary: bool,
    }

    impl IptablesRunner for FakeTables {
        fn run(&self, binary: &str, args: &[&str]) -> Result<bool, String> {
            if self.missing_binary {
                return Err(format!("running {binary}: No such file or directory"));
            }
            self.calls
                .lock()
                .unwrap()
                .push(format!("{binary} {}", args.join(" ")));
            let [w, t, table, op, chain, rest @ ..] = args else {
                panic!("unexpected {args:?}");
            };
            assert_eq!((*w, *t), ("-w", "-t"));
            let key = (binary.to_string(), table.to_string(), chain.to_string());
            let builtin = ["INPUT", "OUTPUT"].contains(chain);
            let mut chains = self.chains.lock().unwrap();
            let mut rules = self.rules.lock().unwrap();
            let rule = (key.0.clone(), key.1.clone(), key.2.clone(), rest.join(" "));
            Ok(match *op {
                "-S" => chains.contains(&key),
                "-N" => chains.insert(key),
                "-X" => chains.remove(&key),
                "-C" => rules.contains(&rule),
                "-I" | "-A" if builtin || chains.contains(&key) => {
                    rules.push(rule);
                    true
                }
                "-I" | "-A" => false,
                _ => panic!("unexpected {args:?}"),
            })
        }
    }

    #[test]
    fn steps_are_the_kubelets() {
        let v4 = steps(Family::V4);
        assert_eq!(
            v4.iter().map(|s| apply_args(s).join(" ")).collect::<Vec<_>>(),
            vec![
                "-w -t mangle -N KUBE-IPTABLES-HINT",
                "-w -t filter -N KUBE-FIREWALL",
                "-w -t filter -I OUTPUT -j KUBE-FIREWALL",
                "-w -t filter -I INPUT -j KUBE-FIREWALL",
                "-w -t filter -A KUBE-FIREWALL -m comment --comment block incoming localnet connections --dst 127.0.0.0/8 ! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP",
                "-w -t mangle -N KUBE-KUBELET-CANARY",
                "-w -t nat -N KUBE-KUBELET-CANARY",
                "-w -t filter -N KUBE-KUBELET-CANARY",
            ]
        );
        let v6 = steps(Family::V6);
        assert_eq!(v6.len(), 4, "IPv6: the hint chain and the canaries only");
        assert_eq!(
            check_args(&v4[2]).join(" "),
            "-w -t filter -C OUTPUT -j KUBE-FIREWALL"
        );
    }

    #[test]
    fn sync_creates_what_is_missing_once_and_is_idempotent() {
        let fake = FakeTables::default();
        assert_eq!(sync(&fake, Family::V4), Ok(()));
        assert_eq!(fake.chains.lock().unwrap().len(), 5);
        assert_eq!(fake.rules.lock().unwrap().len(), 3);
        assert!(canaries_present(&fake, Family::V4));
        assert!(!canaries_present(&fake, Family::V6));
        fake.calls.lock().unwrap().clear();
        assert_eq!(sync(&fake, Family::V4), Ok(()));
        let calls = fake.calls.lock().unwrap().clone();
        assert!(
            calls
                .iter()
                .all(|c| c.contains(" -S ") || c.contains(" -C ")),
            "a second sync only checks: {calls:?}"
        );
        assert_eq!(fake.rules.lock().unwrap().len(), 3, "no rule twice");
    }

    #[test]
    fn a_missing_binary_is_an_error_naming_it() {
        let fake = FakeTables {
            missing_binary: true,
            ..Default::default()
        };
        assert_eq!(
            sync(&fake, Family::V6),
            Err("running ip6tables: No such file or directory".to_string())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_flushed_canary_brings_everything_back() {
        let fake = Arc::new(FakeTables::default());
        let cancel = CancellationToken::new();
        let task = tokio::spawn(keep_util_chains(
            fake.clone(),
            CANARY_PERIOD,
            cancel.clone(),
        ));
        // The first sync, both families.
        for _ in 0..50 {
            if fake.chains.lock().unwrap().len() == 9 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            fake.chains.lock().unwrap().len(),
            9,
            "5 IPv4 chains, 4 IPv6"
        );
        // A firewall reload flushes the IPv4 filter table.
        fake.chains
            .lock()
            .unwrap()
            .retain(|(b, t, _)| !(b == "iptables" && t == "filter"));
        fake.rules
            .lock()
            .unwrap()
            .retain(|(b, t, _, _)| !(b == "iptables" && t == "filter"));
        tokio::time::sleep(CANARY_PERIOD + Duration::from_secs(1)).await;
        for _ in 0..50 {
            if fake.rules.lock().unwrap().len() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(fake.chains.lock().unwrap().len(), 9);
        assert_eq!(fake.rules.lock().unwrap().len(), 3);
        cancel.cancel();
        task.await.unwrap();
    }
}
