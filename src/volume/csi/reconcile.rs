//! The reconciler's decisions, pure: from what one pod wants (its volumes, empty when it is
//! gone), what the other pods want, and what is on the node (published targets, staged global
//! mounts), the operations in the order they must run — unpublish before unstage, stage before
//! publish; stage once per volume per node, unstage only after the last target of the volume
//! is unpublished and no pod wants it.

use std::collections::BTreeSet;

/// One volume on the node: its driver and handle.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VolumeKey {
    pub driver: String,
    pub handle: String,
}

impl VolumeKey {
    pub fn new(driver: &str, handle: &str) -> VolumeKey {
        VolumeKey {
            driver: driver.to_string(),
            handle: handle.to_string(),
        }
    }
}

/// A volume a pod wants published at `spec_name`; `stage`: its driver stages volumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub spec_name: String,
    pub key: VolumeKey,
    pub stage: bool,
}

/// A published target found on disk.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Published {
    pub pod_uid: String,
    pub spec_name: String,
    pub key: VolumeKey,
}

/// What is on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actual {
    pub published: Vec<Published>,
    pub staged: BTreeSet<VolumeKey>,
}

impl Actual {
    /// What there is of the volume `key` alone.
    pub fn only(mut self, key: &VolumeKey) -> Actual {
        self.published.retain(|p| &p.key == key);
        self.staged.retain(|k| k == key);
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Unpublish {
        pod_uid: String,
        spec_name: String,
        key: VolumeKey,
    },
    Unstage {
        key: VolumeKey,
    },
    Stage {
        key: VolumeKey,
    },
    Publish {
        pod_uid: String,
        spec_name: String,
        key: VolumeKey,
    },
}

impl Op {
    /// The volume the operation is on.
    pub fn key(&self) -> &VolumeKey {
        match self {
            Op::Unpublish { key, .. }
            | Op::Unstage { key }
            | Op::Stage { key }
            | Op::Publish { key, .. } => key,
        }
    }
}

/// The operations that bring pod `pod_uid` to `want` (`None` for `pod_uid`: only the volumes
/// staged for no one are unstaged — the pass after a restart). `others`: the volumes the other
/// pods on the node want (their targets may not be published yet).
pub fn plan(
    pod_uid: Option<&str>,
    want: &[Want],
    others: &BTreeSet<VolumeKey>,
    actual: &Actual,
) -> Vec<Op> {
    let mut ops = Vec::new();
    let wanted = |p: &Published| {
        Some(p.pod_uid.as_str()) == pod_uid
            && want
                .iter()
                .any(|w| w.spec_name == p.spec_name && w.key == p.key)
    };
    // The pod's targets it no longer wants (all of them when it is gone).
    let mut remaining = Vec::new();
    for p in &actual.published {
        if Some(p.pod_uid.as_str()) == pod_uid && !wanted(p) {
            ops.push(Op::Unpublish {
                pod_uid: p.pod_uid.clone(),
                spec_name: p.spec_name.clone(),
                key: p.key.clone(),
            });
        } else {
            remaining.push(p);
        }
    }
    // Staged volumes no one uses or wants.
    for key in &actual.staged {
        let used = remaining.iter().any(|p| &p.key == key)
            || others.contains(key)
            || want.iter().any(|w| &w.key == key);
        if !used {
            ops.push(Op::Unstage { key: key.clone() });
        }
    }
    let Some(uid) = pod_uid else {
        return ops;
    };
    let mut staging = BTreeSet::new();
    for w in want {
        if w.stage && !actual.staged.contains(&w.key) && staging.insert(w.key.clone()) {
            ops.push(Op::Stage { key: w.key.clone() });
        }
    }
    for w in want {
        let published = actual
            .published
            .iter()
            .any(|p| p.pod_uid == uid && p.spec_name == w.spec_name && p.key == w.key);
        if !published {
            ops.push(Op::Publish {
                pod_uid: uid.to_string(),
                spec_name: w.spec_name.clone(),
                key: w.key.clone(),
            });
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(h: &str) -> VolumeKey {
        VolumeKey::new("d", h)
    }
    fn want(spec: &str, h: &str, stage: bool) -> Want {
        Want {
            spec_name: spec.into(),
            key: key(h),
            stage,
        }
    }
    fn published(uid: &str, spec: &str, h: &str) -> Published {
        Published {
            pod_uid: uid.into(),
            spec_name: spec.into(),
            key: key(h),
        }
    }
    fn stage(h: &str) -> Op {
        Op::Stage { key: key(h) }
    }
    fn unstage(h: &str) -> Op {
        Op::Unstage { key: key(h) }
    }
    fn publish(uid: &str, spec: &str, h: &str) -> Op {
        Op::Publish {
            pod_uid: uid.into(),
            spec_name: spec.into(),
            key: key(h),
        }
    }
    fn unpublish(uid: &str, spec: &str, h: &str) -> Op {
        Op::Unpublish {
            pod_uid: uid.into(),
            spec_name: spec.into(),
            key: key(h),
        }
    }

    #[test]
    fn table() {
        let none = BTreeSet::new();
        let others_h1: BTreeSet<_> = [key("h1")].into();
        struct Case {
            name: &'static str,
            pod: Option<&'static str>,
            want: Vec<Want>,
            others: BTreeSet<VolumeKey>,
            actual: Actual,
            ops: Vec<Op>,
        }
        let cases =
            vec![
            Case {
                name: "first pod: stage then publish",
                pod: Some("a"),
                want: vec![want("pv1", "h1", true)],
                others: none.clone(),
                actual: Actual::default(),
                ops: vec![stage("h1"), publish("a", "pv1", "h1")],
            },
            Case {
                name: "second pod on a staged volume: publish only",
                pod: Some("b"),
                want: vec![want("pv1", "h1", true)],
                others: others_h1.clone(),
                actual: Actual {
                    published: vec![published("a", "pv1", "h1")],
                    staged: [key("h1")].into(),
                },
                ops: vec![publish("b", "pv1", "h1")],
            },
            Case {
                name: "a driver without STAGE_UNSTAGE: publish only",
                pod: Some("a"),
                want: vec![want("v", "h2", false)],
                others: none.clone(),
                actual: Actual::default(),
                ops: vec![publish("a", "v", "h2")],
            },
            Case {
                name: "two volumes of one handle in one pod: one stage, two publishes",
                pod: Some("a"),
                want: vec![want("x", "h1", true), want("y", "h1", true)],
                others: none.clone(),
                actual: Actual::default(),
                ops: vec![stage("h1"), publish("a", "x", "h1"), publish("a", "y", "h1")],
            },
            Case {
                name: "everything in place: nothing",
                pod: Some("a"),
                want: vec![want("pv1", "h1", true)],
                others: none.clone(),
                actual: Actual {
                    published: vec![published("a", "pv1", "h1")],
                    staged: [key("h1")].into(),
                },
                ops: vec![],
            },
            Case {
                name: "first of two pods goes: unpublish, keep stage",
                pod: Some("a"),
                want: vec![],
                others: others_h1.clone(),
                actual: Actual {
                    published: vec![published("a", "pv1", "h1"), published("b", "pv1", "h1")],
                    staged: [key("h1")].into(),
                },
                ops: vec![unpublish("a", "pv1", "h1")],
            },
            Case {
                name: "last pod goes: unpublish then unstage",
                pod: Some("b"),
                want: vec![],
                others: none.clone(),
                actual: Actual {
                    published: vec![published("b", "pv1", "h1")],
                    staged: [key("h1")].into(),
                },
                ops: vec![unpublish("b", "pv1", "h1"), unstage("h1")],
            },
            Case {
                name: "a pod goes while another wants the volume but has not published: keep stage",
                pod: Some("a"),
                want: vec![],
                others: others_h1.clone(),
                actual: Actual {
                    published: vec![published("a", "pv1", "h1")],
                    staged: [key("h1")].into(),
                },
                ops: vec![unpublish("a", "pv1", "h1")],
            },
            Case {
                name: "after a restart: a staged volume no one uses is unstaged, a used one kept",
                pod: None,
                want: vec![],
                others: none.clone(),
                actual: Actual {
                    published: vec![published("a", "pv1", "h1")],
                    staged: [key("h1"), key("h9")].into(),
                },
                ops: vec![unstage("h9")],
            },
            Case {
                name: "a pod that changed volume: unpublish the old, publish the new",
                pod: Some("a"),
                want: vec![want("pv2", "h2", false)],
                others: none.clone(),
                actual: Actual {
                    published: vec![published("a", "pv1", "h1")],
                    staged: BTreeSet::new(),
                },
                ops: vec![unpublish("a", "pv1", "h1"), publish("a", "pv2", "h2")],
            },
        ];
        for c in cases {
            assert_eq!(
                plan(c.pod, &c.want, &c.others, &c.actual),
                c.ops,
                "{}",
                c.name
            );
        }
    }
}
