//! `grpc.health.v1.Health` for gRPC probes. The service is implemented here on tonic-health's
//! generated server (rather than its `HealthReporter`) so `Check` evaluates health at the moment
//! of the request, exactly like `/healthz`; `Watch` streams the monitor's changes.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_stream::wrappers::{TcpListenerStream, WatchStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health as HealthApi, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::events::Events;
use crate::health::Health;

pub struct HealthService {
    health: Arc<Health>,
    changes: watch::Receiver<bool>,
    /// "" (the whole server, per the gRPC health protocol) plus every `--grpc-service`.
    services: BTreeSet<String>,
    events: Events,
}

impl HealthService {
    pub fn new(
        health: Arc<Health>,
        changes: watch::Receiver<bool>,
        extra_services: &[String],
        events: Events,
    ) -> Self {
        let mut services: BTreeSet<String> = extra_services.iter().cloned().collect();
        services.insert(String::new());
        Self {
            health,
            changes,
            services,
            events,
        }
    }
}

/// The answer for `service` given the current health; `None` means NOT_FOUND (unknown service),
/// which is what the gRPC health protocol prescribes and what a probe counts as a failure.
pub fn check_answer(
    services: &BTreeSet<String>,
    service: &str,
    healthy: bool,
) -> Option<ServingStatus> {
    if !services.contains(service) {
        return None;
    }
    Some(if healthy {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    })
}

type WatchResponses = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl HealthApi for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.into_inner().service;
        let answer = check_answer(&self.services, &service, self.health.is_healthy_now());
        let shown = answer.map_or("NOT_FOUND", |status| status.as_str_name());
        self.events
            .emit(&format!("grpc check service={service:?} -> {shown}"));
        match answer {
            Some(status) => Ok(Response::new(HealthCheckResponse {
                status: status as i32,
            })),
            None => Err(Status::not_found(format!("unknown service {service:?}"))),
        }
    }

    type WatchStream = WatchResponses;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let service = request.into_inner().service;
        self.events.emit(&format!("grpc watch service={service:?}"));
        if !self.services.contains(&service) {
            return Err(Status::not_found(format!("unknown service {service:?}")));
        }
        let stream = WatchStream::new(self.changes.clone()).map(|healthy| {
            let status = if healthy {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            Ok(HealthCheckResponse {
                status: status as i32,
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

pub async fn serve(listener: TcpListener, service: HealthService, events: Events) {
    let served = tonic::transport::Server::builder()
        .add_service(HealthServer::new(service))
        .serve_with_incoming(TcpListenerStream::new(listener))
        .await;
    if let Err(err) = served {
        events.emit(&format!("grpc server failed: {err}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_answer_cases() {
        let services: BTreeSet<String> = ["".to_owned(), "liveness".to_owned()].into();
        let cases = [
            ("", true, Some(ServingStatus::Serving)),
            ("", false, Some(ServingStatus::NotServing)),
            ("liveness", true, Some(ServingStatus::Serving)),
            ("liveness", false, Some(ServingStatus::NotServing)),
            ("other", true, None),
            ("other", false, None),
        ];
        for (service, healthy, want) in cases {
            assert_eq!(
                check_answer(&services, service, healthy),
                want,
                "service {service:?} healthy {healthy}"
            );
        }
    }
}
