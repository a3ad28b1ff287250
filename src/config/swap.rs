//! The kubelet's swap check at start (`failSwapOn`, `memorySwap`): pure over the text of
//! `/proc/swaps`, which the caller reads.

/// The kubelet's refusal of a node with swap on while `failSwapOn` is true.
pub const SWAP_ON_REFUSAL: &str =
    "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false";

/// Whether `/proc/swaps` lists a swap area (anything after its header line), as the kubelet's
/// `IsSwapOn`.
pub fn swap_on(proc_swaps: &str) -> bool {
    proc_swaps.lines().skip(1).any(|l| !l.trim().is_empty())
}

/// `Err` with the reason nodelet does not start: swap is on and `failSwapOn` is true (the
/// kubelet's error), or swap is on and `failSwapOn` is false, which in the kubelet lets
/// containers swap under `memorySwap` — limits nodelet does not set, so it refuses rather than
/// run containers with swap it does not control.
pub fn check_swap(fail_swap_on: bool, proc_swaps: &str) -> Result<(), String> {
    if !swap_on(proc_swaps) {
        return Ok(());
    }
    if fail_swap_on {
        return Err(format!(
            "failed to run Kubelet: {SWAP_ON_REFUSAL} (failSwapOn is true)"
        ));
    }
    Err("failSwapOn: Invalid value: false: this node has swap on, and nodelet does not set containers' swap limits (memorySwap) yet; turn swap off (swapoff -a) or keep failSwapOn: true".to_string())
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
            (
                false,
                &with_swap,
                Some("failSwapOn: Invalid value: false: this node has swap on"),
            ),
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
