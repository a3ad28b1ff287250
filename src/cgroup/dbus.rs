//! [`SystemdBus`] over the system bus with zbus: systemd's manager object
//! (`org.freedesktop.systemd1`, `/org/freedesktop/systemd1`). Jobs are waited for through the
//! manager's `JobRemoved` signal, subscribed to before the call that queues the job so the
//! signal cannot be missed; a job that does not finish within 30 s (libcontainer's limit) is an
//! error naming the unit and the job. A connection that breaks is made again once per call, so
//! a restarted D-Bus daemon does not leave nodelet without its cgroups.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Mutex;
use zbus::zvariant::{OwnedObjectPath, Value};

use super::manager::{CgroupError, Result};
use super::systemd::{Property, PropertyValue, SystemdBus, UnitStart};

const DESTINATION: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const INTERFACE: &str = "org.freedesktop.systemd1.Manager";
/// How long systemd may take to run a start or stop job (libcontainer waits as long).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(30);

/// systemd over the system bus.
#[derive(Debug)]
pub struct ZbusSystemd {
    proxy: Mutex<Option<zbus::Proxy<'static>>>,
    /// The bus to (re)connect to; `None` = the system bus.
    address: Option<String>,
    job_timeout: Duration,
}

fn property_names(properties: &[Property]) -> Vec<String> {
    properties.iter().map(|(n, _)| n.clone()).collect()
}

fn to_value(value: &PropertyValue) -> Value<'static> {
    match value {
        PropertyValue::Bool(b) => Value::Bool(*b),
        PropertyValue::U64(v) => Value::U64(*v),
        PropertyValue::Str(s) => Value::from(s.clone()),
        PropertyValue::Strs(list) => Value::from(list.clone()),
    }
}

fn method_error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        _ => None,
    }
}

impl ZbusSystemd {
    /// Connects to the system bus and subscribes to the manager's signals. Fails with the
    /// reason when there is no bus or no systemd on it.
    pub async fn connect() -> Result<ZbusSystemd> {
        ZbusSystemd::connect_to(None, JOB_TIMEOUT).await
    }

    /// The same on the bus at `address` (a D-Bus address such as `unix:path=/run/bus`; `None`
    /// is the system bus), waiting at most `job_timeout` for each job.
    pub async fn connect_to(address: Option<&str>, job_timeout: Duration) -> Result<ZbusSystemd> {
        let bus = ZbusSystemd {
            proxy: Mutex::new(None),
            address: address.map(str::to_string),
            job_timeout,
        };
        bus.proxy("Subscribe").await?;
        Ok(bus)
    }

    async fn proxy(&self, method: &'static str) -> Result<zbus::Proxy<'static>> {
        let mut slot = self.proxy.lock().await;
        if let Some(p) = slot.as_ref() {
            return Ok(p.clone());
        }
        let error = |message: String| CgroupError::Bus {
            message: format!("{method}: {message}"),
        };
        let connection = match &self.address {
            None => zbus::Connection::system()
                .await
                .map_err(|e| error(format!("connecting to the system bus: {e}")))?,
            Some(address) => zbus::connection::Builder::address(address.as_str())
                .map_err(|e| error(format!("bus address {address}: {e}")))?
                .build()
                .await
                .map_err(|e| error(format!("connecting to the bus at {address}: {e}")))?,
        };
        // No property cache: nodelet reads no manager property, and the cache would fetch them
        // all and watch them.
        let proxy: zbus::Proxy<'static> = zbus::proxy::Builder::new(&connection)
            .destination(DESTINATION)
            .and_then(|b| b.path(PATH))
            .and_then(|b| b.interface(INTERFACE))
            .map(|b| b.cache_properties(zbus::proxy::CacheProperties::No))
            .map_err(|e| error(format!("systemd's manager object: {e}")))?
            .build()
            .await
            .map_err(|e| error(format!("reaching systemd on the bus: {e}")))?;
        // Job signals reach the client that queued the job anyway; subscribing makes sure.
        let _: () = proxy
            .call("Subscribe", &())
            .await
            .map_err(|e| error(format!("Subscribe: {e}")))?;
        *slot = Some(proxy.clone());
        Ok(proxy)
    }

    /// Forgets a broken connection so the next call makes a new one.
    async fn reset(&self) {
        *self.proxy.lock().await = None;
    }

    /// Calls `method` with `body` once.
    async fn call_once<B, R>(&self, method: &'static str, body: &B) -> Result<R, zbus::Error>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType + Sync,
        R: for<'d> zbus::zvariant::DynamicDeserialize<'d>,
    {
        let proxy = self
            .proxy(method)
            .await
            .map_err(|e| zbus::Error::Failure(e.to_string()))?;
        proxy.call(method, body).await
    }

    /// Calls `method` with `body`; a transport failure (not an answer from systemd) is tried
    /// once more on a new connection.
    async fn call<B, R>(&self, method: &'static str, body: &B) -> Result<R, zbus::Error>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType + Sync,
        R: for<'d> zbus::zvariant::DynamicDeserialize<'d>,
    {
        match self.call_once(method, body).await {
            Err(e) if method_error_name(&e).is_none() => {
                tracing::debug!(method, error = %e, "systemd call failed; reconnecting");
                self.reset().await;
                self.call_once(method, body).await
            }
            other => other,
        }
    }

    /// Queues a job with `method` and returns it with the `JobRemoved` stream it will be
    /// announced on (subscribed first, on the same connection; after a transport failure both
    /// are made again on a new one).
    async fn queue_job<B>(
        &self,
        unit: &str,
        method: &'static str,
        body: &B,
    ) -> Result<(zbus::proxy::SignalStream<'static>, OwnedObjectPath), zbus::Error>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType + Sync,
    {
        let mut last = None;
        for _ in 0..2 {
            let jobs = match self.job_signals(unit, method).await {
                Ok(jobs) => jobs,
                Err(e) => {
                    self.reset().await;
                    last = Some(zbus::Error::Failure(e.to_string()));
                    continue;
                }
            };
            match self.call_once::<_, OwnedObjectPath>(method, body).await {
                Ok(job) => return Ok((jobs, job)),
                Err(e) if method_error_name(&e).is_none() => {
                    tracing::debug!(method, error = %e, "systemd call failed; reconnecting");
                    self.reset().await;
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| zbus::Error::Failure(format!("{method}: no connection"))))
    }

    /// Waits for `JobRemoved` of `job` on `jobs` (subscribed before the call).
    async fn wait_for_job(
        &self,
        jobs: &mut zbus::proxy::SignalStream<'static>,
        unit: &str,
        method: &'static str,
        job: &OwnedObjectPath,
    ) -> Result<()> {
        let wait = async {
            while let Some(msg) = jobs.next().await {
                let Ok((_id, path, _unit, result)) =
                    msg.body()
                        .deserialize::<(u32, OwnedObjectPath, String, String)>()
                else {
                    continue;
                };
                if &path == job {
                    return Some(result);
                }
            }
            None
        };
        match tokio::time::timeout(self.job_timeout, wait).await {
            Ok(Some(result)) if result == "done" => Ok(()),
            Ok(Some(result)) => Err(CgroupError::Job {
                unit: unit.to_string(),
                method,
                job: job.to_string(),
                result,
            }),
            Ok(None) => Err(CgroupError::Systemd {
                unit: unit.to_string(),
                method,
                properties: Vec::new(),
                message: format!("the bus closed while waiting for job {job}"),
            }),
            Err(_) => Err(CgroupError::JobTimeout {
                unit: unit.to_string(),
                method,
                job: job.to_string(),
                after: self.job_timeout,
            }),
        }
    }

    async fn job_signals(
        &self,
        unit: &str,
        method: &'static str,
    ) -> Result<zbus::proxy::SignalStream<'static>> {
        let proxy = self.proxy(method).await?;
        proxy
            .receive_signal("JobRemoved")
            .await
            .map_err(|e| CgroupError::Systemd {
                unit: unit.to_string(),
                method,
                properties: Vec::new(),
                message: format!("subscribing to JobRemoved: {e}"),
            })
    }
}

#[async_trait::async_trait]
impl SystemdBus for ZbusSystemd {
    async fn start_transient_unit(&self, unit: &str, properties: &[Property]) -> Result<UnitStart> {
        const METHOD: &str = "StartTransientUnit";
        let props: Vec<(&str, Value<'static>)> = properties
            .iter()
            .map(|(n, v)| (n.as_str(), to_value(v)))
            .collect();
        let aux: Vec<(&str, Vec<(&str, Value<'static>)>)> = Vec::new();
        let (mut jobs, job) = match self
            .queue_job(unit, METHOD, &(unit, "replace", props, aux))
            .await
        {
            Ok(queued) => queued,
            Err(e) if method_error_name(&e) == Some("org.freedesktop.systemd1.UnitExists") => {
                return Ok(UnitStart::Exists)
            }
            Err(e) => {
                return Err(CgroupError::Systemd {
                    unit: unit.to_string(),
                    method: METHOD,
                    properties: property_names(properties),
                    message: e.to_string(),
                })
            }
        };
        match self.wait_for_job(&mut jobs, unit, METHOD, &job).await {
            Ok(()) => Ok(UnitStart::Started),
            Err(e) => {
                // A failed start leaves a failed unit behind: let systemd forget it.
                let _ = self.reset_failed_unit(unit).await;
                Err(e)
            }
        }
    }

    async fn set_unit_properties(&self, unit: &str, properties: &[Property]) -> Result<()> {
        const METHOD: &str = "SetUnitProperties";
        let props: Vec<(&str, Value<'static>)> = properties
            .iter()
            .map(|(n, v)| (n.as_str(), to_value(v)))
            .collect();
        self.call::<_, ()>(METHOD, &(unit, true, props))
            .await
            .map_err(|e| CgroupError::Systemd {
                unit: unit.to_string(),
                method: METHOD,
                properties: property_names(properties),
                message: e.to_string(),
            })
    }

    async fn stop_unit(&self, unit: &str) -> Result<()> {
        const METHOD: &str = "StopUnit";
        let (mut jobs, job) = match self.queue_job(unit, METHOD, &(unit, "replace")).await {
            Ok(queued) => queued,
            Err(e) if method_error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => {
                return Ok(())
            }
            Err(e) => {
                return Err(CgroupError::Systemd {
                    unit: unit.to_string(),
                    method: METHOD,
                    properties: Vec::new(),
                    message: e.to_string(),
                })
            }
        };
        self.wait_for_job(&mut jobs, unit, METHOD, &job).await
    }

    async fn reset_failed_unit(&self, unit: &str) -> Result<()> {
        const METHOD: &str = "ResetFailedUnit";
        match self.call::<_, ()>(METHOD, &(unit,)).await {
            Ok(()) => Ok(()),
            Err(e) if method_error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => {
                Ok(())
            }
            Err(e) => Err(CgroupError::Systemd {
                unit: unit.to_string(),
                method: METHOD,
                properties: Vec::new(),
                message: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_values_have_systemds_types() {
        let cases = [
            (PropertyValue::Bool(true), "b"),
            (PropertyValue::U64(u64::MAX), "t"),
            (PropertyValue::Str("x".into()), "s"),
            (PropertyValue::Strs(vec!["kubepods.slice".into()]), "as"),
        ];
        for (value, signature) in cases {
            assert_eq!(
                to_value(&value).value_signature().to_string(),
                signature,
                "{value:?}"
            );
        }
    }

    #[tokio::test]
    async fn without_a_system_bus_connecting_fails_with_the_reason() {
        // A bus that is not there (as on this machine; systemd runs only in the VM): the error
        // must say so rather than hang or panic. Only this test reads the variable.
        std::env::set_var(
            "DBUS_SYSTEM_BUS_ADDRESS",
            "unix:path=/nonexistent/nodelet-test/system_bus_socket",
        );
        let err = ZbusSystemd::connect().await.unwrap_err().to_string();
        assert!(err.contains("system bus"), "{err}");
    }
}
