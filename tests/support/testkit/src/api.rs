//! A client of a running nodelet's read-only HTTP API: `/pods`, `/metrics` and the rest, and
//! waiting on what they show.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

/// How long a wait lasts and how often it looks.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    pub timeout: Duration,
    pub poll: Duration,
}

/// One nodelet's API at `base` (`http://127.0.0.1:PORT`).
#[derive(Debug, Clone)]
pub struct NodeletApi {
    base: String,
    client: reqwest::Client,
    request_timeout: Duration,
}

impl NodeletApi {
    /// `request_timeout` bounds each request (a nodelet that does not answer reads as `None`).
    pub fn new(base: impl Into<String>, request_timeout: Duration) -> NodeletApi {
        NodeletApi {
            base: base.into(),
            client: reqwest::Client::new(),
            request_timeout,
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The body of `GET path`; `None` when nodelet does not answer or answers an error.
    pub async fn get(&self, path: &str) -> Option<String> {
        let resp = self
            .client
            .get(format!("{}{path}", self.base))
            .timeout(self.request_timeout)
            .send()
            .await
            .ok()?;
        resp.error_for_status().ok()?.text().await.ok()
    }

    /// The pods of `/pods`; `None` while nodelet does not answer.
    pub async fn pods(&self) -> Option<Vec<Pod>> {
        let v: serde_json::Value = serde_json::from_str(&self.get("/pods").await?).ok()?;
        match v.get("items")? {
            // The kubelet's list of no pods (a Go nil slice).
            serde_json::Value::Null => Some(Vec::new()),
            items => serde_json::from_value(items.clone()).ok(),
        }
    }

    /// The pod of `/pods` named exactly `name` (a static pod's name ends in `-<node>`).
    pub async fn pod(&self, name: &str) -> Option<Pod> {
        self.pods()
            .await?
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> Option<String> {
        self.get("/metrics").await
    }

    /// The sum of the samples of `series` (see [`crate::prom::metric_sum`]), or `None` while
    /// nodelet does not answer or does not expose it.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        crate::prom::metric_sum(&self.metrics().await?, series)
    }

    /// Polls `/pods` until pod `name` satisfies `check`; fails after `wait.timeout` with its last
    /// state and `context()` (the caller's view of nodelet: its log, its journal).
    pub async fn wait_pod(
        &self,
        name: &str,
        wait: Wait,
        what: &str,
        check: impl Fn(&Pod) -> bool,
        context: impl Fn() -> String,
    ) -> Pod {
        let deadline = Instant::now() + wait.timeout;
        let mut last = None;
        loop {
            if let Some(p) = self.pod(name).await {
                if check(&p) {
                    return p;
                }
                last = Some(p);
            }
            if Instant::now() > deadline {
                panic!(
                    "pod {name}: timed out after {:?} waiting for {what}\nlast seen: {}\n{}",
                    wait.timeout,
                    last.map(|p| serde_json::to_string_pretty(&p.status).unwrap_or_default())
                        .unwrap_or_else(|| "(not listed)".into()),
                    context()
                );
            }
            tokio::time::sleep(wait.poll).await;
        }
    }

    /// Polls `/pods` until pod `name` is no longer listed; fails after `wait.timeout` with
    /// `context()`.
    pub async fn wait_gone(&self, name: &str, wait: Wait, context: impl Fn() -> String) {
        let deadline = Instant::now() + wait.timeout;
        loop {
            if let Some(pods) = self.pods().await {
                if !pods
                    .iter()
                    .any(|p| p.metadata.name.as_deref() == Some(name))
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "pod {name} still listed after {:?}\n{}",
                wait.timeout,
                context()
            );
            tokio::time::sleep(wait.poll).await;
        }
    }
}
