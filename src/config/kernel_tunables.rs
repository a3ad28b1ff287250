//! The kernel tunables the kubelet's container manager insists on at start
//! (`setupKernelTunables`): with `protectKernelDefaults` a value that differs stops the start,
//! without it the value is written. Pure over the values the caller read from `/proc/sys`.

/// The tunables (paths under `/proc/sys`) and the values the kubelet wants.
pub const KERNEL_TUNABLES: &[(&str, i64)] = &[
    ("vm/overcommit_memory", 1),
    ("vm/panic_on_oom", 0),
    ("kernel/panic", 10),
    ("kernel/panic_on_oops", 1),
    ("kernel/keys/root_maxkeys", 1_000_000),
    ("kernel/keys/root_maxbytes", 25_000_000),
];

/// What to do about the tunables, given each one's current value (`None`: unreadable).
/// `Ok` lists the writes (path, value) to make; `Err` is the kubelet's refusal with
/// `protectKernelDefaults`, naming every flag that differs.
pub fn plan(
    protect: bool,
    current: &[(&'static str, Option<i64>)],
) -> Result<Vec<(&'static str, i64)>, String> {
    let mut writes = Vec::new();
    let mut wrong = Vec::new();
    for (path, want) in KERNEL_TUNABLES {
        let got = current
            .iter()
            .find(|(p, _)| p == path)
            .and_then(|(_, v)| *v);
        if got == Some(*want) {
            continue;
        }
        if protect {
            let actual = got.map_or_else(|| "unreadable".to_string(), |v| v.to_string());
            wrong.push(format!(
                "invalid kernel flag: {path}, expected value: {want}, actual value: {actual}"
            ));
        } else {
            writes.push((*path, *want));
        }
    }
    if wrong.is_empty() {
        Ok(writes)
    } else {
        Err(format!(
            "protectKernelDefaults is true and the kernel's tunables differ from the kubelet's: [{}]",
            wrong.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(value: Option<i64>) -> Vec<(&'static str, Option<i64>)> {
        KERNEL_TUNABLES.iter().map(|(p, _)| (*p, value)).collect()
    }

    fn wanted() -> Vec<(&'static str, Option<i64>)> {
        KERNEL_TUNABLES
            .iter()
            .map(|(p, v)| (*p, Some(*v)))
            .collect()
    }

    /// (protectKernelDefaults, current values, the writes or a part of the refusal).
    type Case = (
        bool,
        Vec<(&'static str, Option<i64>)>,
        Result<Vec<(&'static str, i64)>, &'static str>,
    );

    #[test]
    fn plan_table() {
        let mut one_off = wanted();
        one_off[2] = ("kernel/panic", Some(0));
        let cases: Vec<Case> = vec![
            (false, wanted(), Ok(vec![])),
            (true, wanted(), Ok(vec![])),
            (false, one_off.clone(), Ok(vec![("kernel/panic", 10)])),
            (
                true,
                one_off,
                Err("invalid kernel flag: kernel/panic, expected value: 10, actual value: 0]"),
            ),
            (false, all(None), Ok(KERNEL_TUNABLES.to_vec())),
            (
                true,
                all(Some(7)),
                Err("invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 7, "),
            ),
            (
                true,
                all(None),
                Err("actual value: unreadable"),
            ),
        ];
        for (protect, current, want) in cases {
            let got = plan(protect, &current);
            match want {
                Ok(writes) => assert_eq!(got, Ok(writes), "protect={protect} {current:?}"),
                Err(part) => {
                    let err = got.expect_err("refused");
                    assert!(err.starts_with("protectKernelDefaults is true"), "{err}");
                    assert!(err.contains(part), "{err} lacks {part}");
                }
            }
        }
    }
}
