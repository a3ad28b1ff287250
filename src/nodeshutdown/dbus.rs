//! [`Logind`] over the system bus with zbus: logind's manager object
//! (`org.freedesktop.login1`, `/org/freedesktop/login1`) and systemd's `KillUnit` to reload
//! it. One connection per [`ZbusLogind`]; the shutdown manager makes a new one when the
//! signal stream ends (a restarted D-Bus daemon), as the kubelet reconnects.

use futures::StreamExt;
use std::time::Duration;
use zbus::zvariant::OwnedFd;

use super::logind::{InhibitLock, Logind, LogindError, INHIBIT_WHO, INHIBIT_WHY};

const LOGIND: &str = "org.freedesktop.login1";
const LOGIND_PATH: &str = "/org/freedesktop/login1";
const LOGIND_INTERFACE: &str = "org.freedesktop.login1.Manager";
const SYSTEMD: &str = "org.freedesktop.systemd1";
const SYSTEMD_PATH: &str = "/org/freedesktop/systemd1";
const SYSTEMD_INTERFACE: &str = "org.freedesktop.systemd1.Manager";
const SIGHUP: i32 = 1;

/// logind over one bus connection.
#[derive(Debug, Clone)]
pub struct ZbusLogind {
    logind: zbus::Proxy<'static>,
    systemd: zbus::Proxy<'static>,
}

async fn proxy(
    connection: &zbus::Connection,
    destination: &'static str,
    path: &'static str,
    interface: &'static str,
) -> Result<zbus::Proxy<'static>, LogindError> {
    zbus::proxy::Builder::new(connection)
        .destination(destination)
        .and_then(|b| b.path(path))
        .and_then(|b| b.interface(interface))
        .map(|b| b.cache_properties(zbus::proxy::CacheProperties::No))
        .map_err(|e| LogindError::Connect {
            message: format!("{destination}: {e}"),
        })?
        .build()
        .await
        .map_err(|e| LogindError::Connect {
            message: format!("{destination}: {e}"),
        })
}

impl ZbusLogind {
    /// Connects to the system bus (`address: None`) or to the bus at `address` (a D-Bus
    /// address such as `unix:path=/run/bus`, for tests).
    pub async fn connect(address: Option<&str>) -> Result<ZbusLogind, LogindError> {
        let connect = |message: String| LogindError::Connect { message };
        let connection = match address {
            None => zbus::Connection::system()
                .await
                .map_err(|e| connect(e.to_string()))?,
            Some(address) => zbus::connection::Builder::address(address)
                .map_err(|e| connect(format!("bus address {address}: {e}")))?
                .build()
                .await
                .map_err(|e| connect(format!("the bus at {address}: {e}")))?,
        };
        Ok(ZbusLogind {
            logind: proxy(&connection, LOGIND, LOGIND_PATH, LOGIND_INTERFACE).await?,
            systemd: proxy(&connection, SYSTEMD, SYSTEMD_PATH, SYSTEMD_INTERFACE).await?,
        })
    }
}

#[async_trait::async_trait]
impl Logind for ZbusLogind {
    async fn inhibit_delay_max(&self) -> Result<Duration, LogindError> {
        let usec: u64 = self
            .logind
            .get_property("InhibitDelayMaxUSec")
            .await
            .map_err(|e| LogindError::Property {
                property: "InhibitDelayMaxUSec",
                message: e.to_string(),
            })?;
        Ok(Duration::from_micros(usec))
    }

    async fn inhibit_shutdown(&self) -> Result<InhibitLock, LogindError> {
        let fd: OwnedFd = self
            .logind
            .call("Inhibit", &("shutdown", INHIBIT_WHO, INHIBIT_WHY, "delay"))
            .await
            .map_err(|e| LogindError::Call {
                method: "Inhibit",
                message: e.to_string(),
            })?;
        Ok(InhibitLock::new(fd))
    }

    async fn reload(&self) -> Result<(), LogindError> {
        let _: () = self
            .systemd
            .call("KillUnit", &("systemd-logind.service", "all", SIGHUP))
            .await
            .map_err(|e| LogindError::Call {
                method: "KillUnit(systemd-logind.service, SIGHUP)",
                message: e.to_string(),
            })?;
        Ok(())
    }

    async fn prepare_for_shutdown(
        &self,
    ) -> Result<futures::stream::BoxStream<'static, bool>, LogindError> {
        let signals = self
            .logind
            .receive_signal("PrepareForShutdown")
            .await
            .map_err(|e| LogindError::Call {
                method: "AddMatch(PrepareForShutdown)",
                message: e.to_string(),
            })?;
        Ok(signals
            .filter_map(|message| async move {
                match message.body().deserialize::<bool>() {
                    Ok(active) => Some(active),
                    Err(error) => {
                        tracing::warn!(%error, "node shutdown: a PrepareForShutdown signal without a boolean; ignored");
                        None
                    }
                }
            })
            .boxed())
    }
}
