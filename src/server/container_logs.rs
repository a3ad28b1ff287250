//! `GET /containerLogs/{namespace}/{pod}/{container}` of the kubelet API, over the pods nodelet
//! runs and the runtime: the kubelet's `getContainerLogs`.
//!
//! The pod is looked up by namespace and name among the pods nodelet has (a static pod's name is
//! its mirror pod's, so `kubectl logs` of a mirror pod reads the static pod's containers), the
//! container instance is chosen from the pod's status as the kubelet chooses it (current or
//! `previous`, with its messages), and the log file is streamed.

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::StatusCode;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;

use super::{ContainerLogSource, LogRefusal};
use crate::clock::Clock;
use crate::cri::Runtime;
use crate::logs::{
    container_log, log_container_id, stream_logs_with, LogError, LogFollowers, LogOptions,
};
use crate::places::Owner;

/// The pods to serve logs of (`StatusManager::pods`: each with its latest status).
pub type PodsFn = Arc<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>;

pub struct PodContainerLogs {
    pub runtime: Arc<dyn Runtime>,
    pub pods: PodsFn,
    pub clock: Clock,
    /// The node's log followers: a follow past their cap is answered 429.
    pub followers: LogFollowers,
}

fn refusal(error: LogError) -> LogRefusal {
    LogRefusal {
        code: StatusCode::from_u16(error.status_code()).unwrap_or(StatusCode::BAD_REQUEST),
        message: error.to_string(),
    }
}

fn not_found(message: String) -> LogRefusal {
    LogRefusal {
        code: StatusCode::NOT_FOUND,
        message,
    }
}

/// Whether the pod's spec has a container (regular, init or ephemeral) of this name.
fn has_container(pod: &Pod, name: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.containers.iter().any(|c| c.name == name)
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
}

#[async_trait]
impl ContainerLogSource for PodContainerLogs {
    async fn container_logs(
        &self,
        namespace: &str,
        pod_name: &str,
        container: &str,
        query: &str,
    ) -> Result<Body, LogRefusal> {
        let options = LogOptions::from_query(query, self.clock.now()).map_err(refusal)?;
        let pods = (self.pods)();
        let pod = pods
            .iter()
            .find(|p| {
                p.metadata.namespace.as_deref() == Some(namespace)
                    && p.metadata.name.as_deref() == Some(pod_name)
            })
            .ok_or_else(|| not_found(format!("pod \"{pod_name}\" does not exist")))?;
        if !has_container(pod, container) {
            return Err(not_found(format!(
                "container \"{container}\" not found in pod \"{pod_name}\""
            )));
        }
        let status = pod.status.clone().unwrap_or_default();
        let id =
            log_container_id(pod_name, &status, container, options.previous).map_err(refusal)?;
        let owner = Owner {
            namespace: namespace.to_string(),
            pod_uid: crate::podspec::pod_uid(pod).to_string(),
        };
        let log = container_log(self.runtime.as_ref(), &id)
            .await
            .map_err(refusal)?;
        let mut stream = Box::pin(
            stream_logs_with(&self.followers, &owner, self.runtime.clone(), log, options)
                .map_err(refusal)?,
        );
        // The first chunk decides the status: a file that cannot be opened is an error answer,
        // not a 200 with an empty body.
        match stream.next().await {
            None => Ok(Body::empty()),
            Some(Err(error)) => Err(LogRefusal {
                code: StatusCode::BAD_REQUEST,
                message: error.to_string(),
            }),
            Some(Ok(first)) => Ok(Body::from_stream(
                futures::stream::once(async move { Ok::<_, std::io::Error>(first) })
                    .chain(stream)
                    .chain(end_after_a_flush()),
            )),
        }
    }
}

/// The end of a log body, after the data before it has gone out in a write of its own: the
/// stream yields once, and hyper flushes what it holds while the body is pending, so the
/// chunked terminator does not travel in the same TLS record as the last data — as it does not
/// from the kubelet, whose writer flushes every write. The API server's websocket log stream
/// (wsstream's `messageCopy`, Kubernetes' e2e test "should support retrieving logs from the
/// container over websockets") drops the data of a read that also returns EOF, which Go's
/// chunked reader does when both arrive in one record: the whole log came out empty.
fn end_after_a_flush() -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> {
    futures::stream::once(tokio::task::yield_now()).filter_map(|()| futures::future::ready(None))
}
