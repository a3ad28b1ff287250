//! The cluster's RuntimeClasses (`node.k8s.io/v1`), for the runtime handler a pod's sandbox is
//! created with: the kubelet's RuntimeClass manager (`pkg/kubelet/runtimeclass`, an informer
//! over every RuntimeClass), here a kube-runtime watcher feeding a reflector store.
//!
//! [`lookup_runtime_handler`] is the kubelet's `LookupRuntimeHandler`: no name (or an empty
//! one) is the default handler (`""`), a name the store does not hold is the API server's
//! NotFound. One difference: the kubelet's lister answers NotFound before its first list is
//! complete, which would refuse a pod whose RuntimeClass exists; here an unsynced store is an
//! error of its own, so the pod is tried again and its event does not claim the class is gone.

use crate::backoff::watch::backoff_watch;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::runtime::reflector::{self, store::Writer, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

/// Why a pod's RuntimeClass gives no handler (kept apart from [`super::ObjectError`]: these
/// are answered from the store, without a request, and stay small).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeClassError {
    /// The API server holds no RuntimeClass of this name: its NotFound, as the kubelet's lister
    /// returns it.
    #[error("runtimeclass.node.k8s.io \"{name}\" not found")]
    RuntimeClassNotFound { name: String },
    /// The RuntimeClass watch has not completed its first list.
    #[error("failed to lookup RuntimeClass {name}: the RuntimeClass watch has not listed yet")]
    RuntimeClassesNotSynced { name: String },
    /// Standalone mode: nothing can say which handler the class names, and the default handler
    /// would silently drop the isolation the pod asked for.
    #[error(
        "RuntimeClass \"{name}\" cannot be resolved without an API server (standalone mode); \
         the pod is not run with the default handler"
    )]
    NoApiClientForRuntimeClass { name: String },
}

pub type Result<T, E = RuntimeClassError> = std::result::Result<T, E>;

/// What the watch holds for one name, as [`lookup_runtime_handler`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeClassRead {
    /// Standalone: there is no API server to ask.
    NoApiServer,
    /// The watch has not completed its first list.
    NotSynced,
    /// The watch has listed; the class's handler if it exists.
    Synced(Option<String>),
}

/// The handler a sandbox of a pod with `runtime_class_name` is created with, or why there is
/// none. The kubelet without an API client has no RuntimeClass manager and runs such a pod
/// with the default handler — a pod that asked for gVisor or Kata would run under plain runc;
/// nodelet refuses it instead.
pub fn lookup_runtime_handler(
    runtime_class_name: Option<&str>,
    read: impl FnOnce(&str) -> RuntimeClassRead,
) -> Result<String> {
    let name = match runtime_class_name {
        None | Some("") => return Ok(String::new()),
        Some(name) => name,
    };
    match read(name) {
        RuntimeClassRead::Synced(Some(handler)) => Ok(handler),
        RuntimeClassRead::Synced(None) => Err(RuntimeClassError::RuntimeClassNotFound {
            name: name.to_string(),
        }),
        RuntimeClassRead::NotSynced => Err(RuntimeClassError::RuntimeClassesNotSynced {
            name: name.to_string(),
        }),
        RuntimeClassRead::NoApiServer => Err(RuntimeClassError::NoApiClientForRuntimeClass {
            name: name.to_string(),
        }),
    }
}

/// The read half of the RuntimeClass watch.
#[derive(Clone)]
pub struct RuntimeClassStore {
    store: Store<RuntimeClass>,
}

impl RuntimeClassStore {
    /// A store and the writer a [`watch_runtime_classes`] fills.
    pub fn new() -> (RuntimeClassStore, Writer<RuntimeClass>) {
        let (store, writer) = reflector::store();
        (RuntimeClassStore { store }, writer)
    }

    /// Whether the first list has completed (the informer's `HasSynced`).
    pub fn has_synced(&self) -> bool {
        matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())))
    }

    /// What the watch holds for the RuntimeClass `name`.
    pub fn read(&self, name: &str) -> RuntimeClassRead {
        if !self.has_synced() {
            return RuntimeClassRead::NotSynced;
        }
        RuntimeClassRead::Synced(
            self.store
                .get(&ObjectRef::new(name))
                .map(|rc| rc.handler.clone()),
        )
    }
}

impl std::fmt::Debug for RuntimeClassStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeClassStore")
            .field("synced", &self.has_synced())
            .field("runtime_classes", &self.store.len())
            .finish()
    }
}

/// Lists and watches every RuntimeClass into `writer` until cancelled; a failed watch is
/// retried with kube's default backoff (the store keeps its last content meanwhile).
pub async fn watch_runtime_classes(
    client: Client,
    writer: Writer<RuntimeClass>,
    cancel: CancellationToken,
) {
    let api: Api<RuntimeClass> = Api::all(client);
    let mut events = backoff_watch(watcher(api, watcher::Config::default()))
        .reflect(writer)
        .boxed();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            next = events.next() => match next {
                Some(Ok(watcher::Event::InitDone)) => tracing::debug!("runtime classes listed"),
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "runtime class watch failed; retrying"),
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    #[test]
    fn lookup_is_the_kubelets_and_refuses_what_it_cannot_resolve() {
        use RuntimeClassRead::*;
        let h = |s: &str| Synced(Some(s.to_string()));
        let cases: Vec<(
            Option<&str>,
            RuntimeClassRead,
            std::result::Result<&str, &str>,
        )> = vec![
            // No class, or an empty name: the default handler, whatever the store says.
            (None, NoApiServer, Ok("")),
            (Some(""), NotSynced, Ok("")),
            (Some("gvisor"), h("runsc"), Ok("runsc")),
            // A class with an empty handler is the default handler, as the kubelet passes it.
            (Some("plain"), h(""), Ok("")),
            (
                Some("gone"),
                Synced(None),
                Err(r#"runtimeclass.node.k8s.io "gone" not found"#),
            ),
            (
                Some("kata"),
                NotSynced,
                Err(
                    "failed to lookup RuntimeClass kata: the RuntimeClass watch has not listed yet",
                ),
            ),
            (
                Some("kata"),
                NoApiServer,
                Err(
                    r#"RuntimeClass "kata" cannot be resolved without an API server (standalone mode); the pod is not run with the default handler"#,
                ),
            ),
        ];
        for (name, read, want) in cases {
            let got = lookup_runtime_handler(name, |_| read.clone()).map_err(|e| e.to_string());
            assert_eq!(
                got.as_deref().map_err(String::as_str),
                want,
                "{name:?} with {read:?}"
            );
        }
    }

    #[test]
    fn store_reads_handlers_once_listed() {
        let (store, mut writer) = RuntimeClassStore::new();
        assert_eq!(store.read("alt"), RuntimeClassRead::NotSynced);
        let rc = RuntimeClass {
            metadata: ObjectMeta {
                name: Some("alt".into()),
                ..Default::default()
            },
            handler: "runc-alt".into(),
            ..Default::default()
        };
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(rc));
        assert_eq!(store.read("alt"), RuntimeClassRead::NotSynced);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(
            store.read("alt"),
            RuntimeClassRead::Synced(Some("runc-alt".into()))
        );
        assert_eq!(store.read("other"), RuntimeClassRead::Synced(None));
    }
}
