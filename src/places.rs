//! Places for long-lived work a tenant starts on the node (log followers, exec, attach and
//! port-forward sessions): how many run now on the node, in each namespace and for each pod,
//! against a cap for each, so that one pod or one namespace cannot take every place of the
//! node. [`admit`] is the pure decision; [`Places`] keeps the counts and hands out a [`Permit`]
//! that gives its place back when dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The caps: of the node, of one namespace, of one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub node: usize,
    pub namespace: usize,
    pub pod: usize,
}

impl Limits {
    /// The node's cap only (each namespace and pod may take all of it).
    pub fn node(limit: usize) -> Self {
        Limits {
            node: limit,
            namespace: limit,
            pod: limit,
        }
    }

    /// `node` places, a quarter of them for one namespace and an eighth for one pod (at least
    /// one each).
    pub fn shared(node: usize) -> Self {
        Limits {
            node,
            namespace: (node / 4).max(1),
            pod: (node / 8).max(1),
        }
    }
}

/// Whose work takes a place: the namespace and UID of the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Owner {
    pub namespace: String,
    pub pod_uid: String,
}

/// Places taken now: on the node, in the owner's namespace, by the owner's pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub node: usize,
    pub namespace: usize,
    pub pod: usize,
}

/// The cap a refused owner met, the narrowest named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cap {
    Pod(usize),
    Namespace(usize),
    Node(usize),
}

/// Whether one more place may be taken.
pub fn admit(counts: Counts, limits: Limits) -> Result<(), Cap> {
    if counts.pod >= limits.pod {
        Err(Cap::Pod(limits.pod))
    } else if counts.namespace >= limits.namespace {
        Err(Cap::Namespace(limits.namespace))
    } else if counts.node >= limits.node {
        Err(Cap::Node(limits.node))
    } else {
        Ok(())
    }
}

/// Who holds places now.
#[derive(Default)]
struct Taken {
    node: usize,
    namespaces: HashMap<String, usize>,
    pods: HashMap<String, usize>,
}

impl Taken {
    fn counts(&self, owner: &Owner) -> Counts {
        Counts {
            node: self.node,
            namespace: self.namespaces.get(&owner.namespace).copied().unwrap_or(0),
            pod: self.pods.get(&owner.pod_uid).copied().unwrap_or(0),
        }
    }

    fn add(&mut self, owner: &Owner) {
        self.node += 1;
        *self.namespaces.entry(owner.namespace.clone()).or_default() += 1;
        *self.pods.entry(owner.pod_uid.clone()).or_default() += 1;
    }

    fn remove(&mut self, owner: &Owner) {
        self.node = self.node.saturating_sub(1);
        for (map, key) in [
            (&mut self.namespaces, &owner.namespace),
            (&mut self.pods, &owner.pod_uid),
        ] {
            if let Some(n) = map.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

/// The places of one kind of work on the node; clones share the counts.
#[derive(Clone)]
pub struct Places {
    limits: Limits,
    taken: Arc<Mutex<Taken>>,
}

impl Places {
    pub fn new(limits: Limits) -> Self {
        Places {
            limits,
            taken: Arc::default(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, Taken> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for `owner`, or the cap that is full.
    pub fn admit(&self, owner: &Owner) -> Result<Permit, Cap> {
        let mut taken = self.lock();
        admit(taken.counts(owner), self.limits)?;
        taken.add(owner);
        Ok(Permit {
            places: self.clone(),
            owner: owner.clone(),
        })
    }

    /// Places taken now on the node.
    pub fn taken(&self) -> usize {
        self.lock().node
    }
}

/// One place, given back when dropped.
pub struct Permit {
    places: Places,
    owner: Owner,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.places.lock().remove(&self.owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_table() {
        let limits = Limits {
            node: 64,
            namespace: 16,
            pod: 8,
        };
        let counts = |node, namespace, pod| Counts {
            node,
            namespace,
            pod,
        };
        let cases = [
            (counts(0, 0, 0), Ok(())),
            (counts(63, 15, 7), Ok(())),
            (counts(64, 15, 7), Err(Cap::Node(64))),
            (counts(65, 0, 0), Err(Cap::Node(64))),
            (counts(20, 16, 0), Err(Cap::Namespace(16))),
            (counts(20, 16, 8), Err(Cap::Pod(8))),
            (counts(64, 16, 8), Err(Cap::Pod(8))),
        ];
        for (c, want) in cases {
            assert_eq!(admit(c, limits), want, "{c:?}");
        }
        assert_eq!(admit(counts(0, 0, 0), Limits::node(0)), Err(Cap::Pod(0)));
        assert_eq!(Limits::shared(64), limits);
        // Small caps still leave every namespace and pod at least one place.
        let two = Limits {
            node: 2,
            namespace: 1,
            pod: 1,
        };
        assert_eq!(Limits::shared(2), two);
    }

    #[test]
    fn permits_are_counted_and_given_back() {
        let places = Places::new(Limits::node(2));
        let owner = Owner::default();
        let a = places.admit(&owner).expect("first");
        let b = places.admit(&owner).expect("second");
        assert_eq!(places.admit(&owner).err(), Some(Cap::Pod(2)));
        assert_eq!(places.taken(), 2);
        drop(a);
        let c = places.admit(&owner).expect("a place was given back");
        drop((b, c));
        assert_eq!(places.taken(), 0);
    }

    #[test]
    fn one_pod_or_namespace_cannot_take_the_node_s_places() {
        let places = Places::new(Limits {
            node: 4,
            namespace: 2,
            pod: 1,
        });
        let owner = |ns: &str, uid: &str| Owner {
            namespace: ns.into(),
            pod_uid: uid.into(),
        };
        let a1 = places.admit(&owner("a", "a1")).expect("a1");
        assert_eq!(places.admit(&owner("a", "a1")).err(), Some(Cap::Pod(1)));
        let a2 = places.admit(&owner("a", "a2")).expect("a2");
        assert_eq!(
            places.admit(&owner("a", "a3")).err(),
            Some(Cap::Namespace(2))
        );
        // Another namespace still has its places.
        let b1 = places.admit(&owner("b", "b1")).expect("b1");
        let b2 = places.admit(&owner("b", "b2")).expect("b2");
        assert_eq!(places.admit(&owner("c", "c1")).err(), Some(Cap::Node(4)));
        drop(a1);
        let _a3 = places
            .admit(&owner("a", "a3"))
            .expect("a place of a's came back");
        drop((a2, b1, b2));
        assert_eq!(places.taken(), 1);
    }
}
