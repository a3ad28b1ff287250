//! The kubelet's swap check at start (`failSwapOn`): pure over the text of `/proc/swaps`,
//! which the caller reads; and `memorySwap.swapBehavior`'s values.

/// The kubelet's refusal of a node with swap on while `failSwapOn` is true.
pub const SWAP_ON_REFUSAL: &str =
    "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false";

/// Whether `/proc/swaps` lists a swap area (anything after its header line), as the kubelet's
/// `IsSwapOn`.
pub fn swap_on(proc_swaps: &str) -> bool {
    proc_swaps.lines().skip(1).any(|l| !l.trim().is_empty())
}

/// `memorySwap.swapBehavior`: how much swap containers may use on a node with swap on
/// (`cgroup::swap` decides per container).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwapBehavior {
    /// Default (also the empty string): no container swaps.
    #[default]
    NoSwap,
    /// cgroup v2: Burstable pods' containers get swap in proportion to their memory request.
    LimitedSwap,
}

impl SwapBehavior {
    /// The configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SwapBehavior::NoSwap => "NoSwap",
            SwapBehavior::LimitedSwap => "LimitedSwap",
        }
    }
}

/// `Err` with the kubelet's reason not to start: swap is on and `failSwapOn` is true. With
/// `failSwapOn` false nodelet starts, and containers swap as `memorySwap` says.
pub fn check_swap(fail_swap_on: bool, proc_swaps: &str) -> Result<(), String> {
    if fail_swap_on && swap_on(proc_swaps) {
        return Err(format!(
            "failed to run Kubelet: {SWAP_ON_REFUSAL} (failSwapOn is true)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";

    #[test]
    fn swap_table() {
        let with_swap =
            format!("{HEADER}/swapfile                               file\t\t1048572\t\t0\t\t-2\n");
        let cases: &[(bool, &str, Option<&str>)] = &[
            (true, HEADER, None),
            (false, HEADER, None),
            (true, "", None),
            (
                true,
                &with_swap,
                Some("failed to run Kubelet: running with swap on is not supported"),
            ),
            (false, &with_swap, None),
        ];
        for (fail, text, want) in cases {
            let got = check_swap(*fail, text);
            match want {
                None => assert_eq!(got, Ok(()), "failSwapOn={fail} {text:?}"),
                Some(prefix) => assert!(
                    got.as_ref().is_err_and(|e| e.starts_with(prefix)),
                    "failSwapOn={fail} {text:?}: {got:?}"
                ),
            }
        }
    }
}
