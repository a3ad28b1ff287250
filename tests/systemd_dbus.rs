//! The systemd cgroup driver's D-Bus client (`cgroup::dbus::ZbusSystemd`, the real zbus code)
//! against a stand-in for systemd's manager object on a private `dbus-daemon`: the wire types of
//! the unit properties (`a(sv)` with `t`, `b`, `s`, `as` variants), the wait for `JobRemoved`,
//! systemd's error names (`UnitExists`, `NoSuchUnit`), failed and stuck jobs. systemd itself
//! runs only in the VM; this is the protocol half, checked here.

#[path = "common/dbus_bus.rs"]
mod dbus_bus;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dbus_bus::Bus;
use nodelet::cgroup::dbus::ZbusSystemd;
use nodelet::cgroup::manager::{CgroupError, CgroupManager};
use nodelet::cgroup::systemd::{SystemdBus, SystemdManager, UnitStart};
use nodelet::cgroup::{CgroupName, ResourceConfig};
use zbus::object_server::SignalEmitter;
use zbus::zvariant::{ObjectPath, OwnedObjectPath, OwnedValue, Value};

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
enum SystemdError {
    #[zbus(error)]
    ZBus(zbus::Error),
    UnitExists(String),
    NoSuchUnit(String),
}

/// One call as the stand-in received it: method, unit, and the properties as
/// `(name, D-Bus signature, value)`.
type Received = (String, String, Vec<(String, String, String)>);

#[derive(Debug, Default)]
struct State {
    units: BTreeSet<String>,
    calls: Vec<Received>,
    next_job: u32,
    /// Jobs for this unit finish with `failed`.
    fail: Option<String>,
    /// Jobs for this unit never finish.
    hang: Option<String>,
}

struct FakeSystemd {
    state: Arc<Mutex<State>>,
}

fn render(value: &Value<'_>) -> String {
    match value {
        Value::U64(v) => v.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Str(s) => s.to_string(),
        Value::Array(a) => a.iter().map(render).collect::<Vec<_>>().join(","),
        other => format!("{other:?}"),
    }
}

fn received(properties: &[(String, OwnedValue)]) -> Vec<(String, String, String)> {
    properties
        .iter()
        .map(|(name, value)| {
            (
                name.clone(),
                value.value_signature().to_string(),
                render(value),
            )
        })
        .collect()
}

impl FakeSystemd {
    /// Queues a job for `unit` and announces its end, before the reply as systemd may.
    async fn job(&self, unit: &str, emitter: &SignalEmitter<'_>) -> OwnedObjectPath {
        let (id, result, hang) = {
            let mut s = self.state.lock().unwrap();
            s.next_job += 1;
            let result = if s.fail.as_deref() == Some(unit) {
                "failed"
            } else {
                "done"
            };
            (s.next_job, result, s.hang.as_deref() == Some(unit))
        };
        let path =
            OwnedObjectPath::try_from(format!("/org/freedesktop/systemd1/job/{id}")).unwrap();
        if !hang {
            // Another job's end first: the client must wait for its own.
            let other = ObjectPath::try_from("/org/freedesktop/systemd1/job/999999").unwrap();
            let _ = FakeSystemd::job_removed(emitter, 999_999, other, "other.slice", "done").await;
            FakeSystemd::job_removed(emitter, id, path.as_ref(), unit, result)
                .await
                .unwrap();
        }
        path
    }
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl FakeSystemd {
    async fn subscribe(&self) {}

    async fn start_transient_unit(
        &self,
        name: String,
        mode: String,
        properties: Vec<(String, OwnedValue)>,
        aux: Vec<(String, Vec<(String, OwnedValue)>)>,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SystemdError> {
        {
            let mut s = self.state.lock().unwrap();
            s.calls.push((
                format!("StartTransientUnit {mode} aux={}", aux.len()),
                name.clone(),
                received(&properties),
            ));
            if !s.units.insert(name.clone()) {
                return Err(SystemdError::UnitExists(format!(
                    "Unit {name} was already loaded or has a fragment file."
                )));
            }
        }
        Ok(self.job(&name, &emitter).await)
    }

    async fn set_unit_properties(
        &self,
        name: String,
        runtime: bool,
        properties: Vec<(String, OwnedValue)>,
    ) -> Result<(), SystemdError> {
        self.state.lock().unwrap().calls.push((
            format!("SetUnitProperties runtime={runtime}"),
            name,
            received(&properties),
        ));
        Ok(())
    }

    async fn stop_unit(
        &self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SystemdError> {
        {
            let mut s = self.state.lock().unwrap();
            s.calls
                .push((format!("StopUnit {mode}"), name.clone(), Vec::new()));
            if !s.units.remove(&name) {
                return Err(SystemdError::NoSuchUnit(format!("Unit {name} not loaded.")));
            }
        }
        Ok(self.job(&name, &emitter).await)
    }

    async fn reset_failed_unit(&self, name: String) -> Result<(), SystemdError> {
        self.state
            .lock()
            .unwrap()
            .calls
            .push(("ResetFailedUnit".into(), name, Vec::new()));
        Ok(())
    }

    #[zbus(signal)]
    async fn job_removed(
        emitter: &SignalEmitter<'_>,
        id: u32,
        job: ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

fn props_of<'a>(call: &'a Received, name: &str) -> Option<(&'a str, &'a str)> {
    call.2
        .iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, sig, v)| (sig.as_str(), v.as_str()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dbus_client_speaks_systemds_protocol() {
    let bus = Bus::start();
    let state = Arc::new(Mutex::new(State::default()));
    let _server = zbus::connection::Builder::address(bus.address.as_str())
        .unwrap()
        .name("org.freedesktop.systemd1")
        .unwrap()
        .serve_at(
            "/org/freedesktop/systemd1",
            FakeSystemd {
                state: state.clone(),
            },
        )
        .unwrap()
        .build()
        .await
        .expect("the stand-in systemd on the private bus");
    let client = Arc::new(
        ZbusSystemd::connect_to(Some(&bus.address), Duration::from_millis(500))
            .await
            .expect("connect"),
    );
    let mount = tempfile::tempdir().unwrap();
    let manager = SystemdManager::new(mount.path(), client.clone());
    let pod = CgroupName::parse_cgroupfs("/kubepods/burstable/pod12-34");
    let cfg = ResourceConfig {
        cpu_shares: Some(102),
        cpu_quota: Some(20_000),
        cpu_period: Some(100_000),
        memory_limit: Some(64 << 20),
        pids_limit: Some(-1),
        ..Default::default()
    };

    // A new slice: started, and its job waited for.
    manager.ensure(&pod, &cfg).await.expect("first ensure");
    let calls = state.lock().unwrap().calls.clone();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].0, "StartTransientUnit replace aux=0");
    assert_eq!(calls[0].1, "kubepods-burstable-pod12_34.slice");
    let start = &calls[0];
    assert_eq!(
        props_of(start, "Wants"),
        Some(("as", "kubepods-burstable.slice"))
    );
    assert_eq!(props_of(start, "DefaultDependencies"), Some(("b", "false")));
    assert_eq!(props_of(start, "MemoryAccounting"), Some(("b", "true")));
    assert_eq!(
        props_of(start, "Description"),
        Some(("s", "nodelet cgroup kubepods-burstable-pod12_34.slice"))
    );
    assert_eq!(props_of(start, "MemoryMax"), Some(("t", "67108864")));
    assert_eq!(props_of(start, "CPUWeight"), Some(("t", "17")));
    assert_eq!(props_of(start, "CPUQuotaPeriodUSec"), Some(("t", "100000")));
    assert_eq!(props_of(start, "CPUQuotaPerSecUSec"), Some(("t", "200000")));
    assert_eq!(
        props_of(start, "TasksMax"),
        Some(("t", u64::MAX.to_string().as_str()))
    );

    // It exists now: systemd answers UnitExists and the properties are set instead.
    assert_eq!(
        client
            .start_transient_unit("kubepods-burstable-pod12_34.slice", &[])
            .await
            .unwrap(),
        UnitStart::Exists
    );
    manager.ensure(&pod, &cfg).await.expect("second ensure");
    let calls = state.lock().unwrap().calls.clone();
    let set = calls.last().unwrap();
    assert_eq!(set.0, "SetUnitProperties runtime=true");
    assert_eq!(props_of(set, "MemoryMax"), Some(("t", "67108864")));
    assert!(
        props_of(set, "Wants").is_none(),
        "only resources on an update"
    );

    // Removal: StopUnit waited for, then ResetFailedUnit; a unit already gone is fine.
    manager.destroy(&pod).await.expect("destroy");
    manager
        .destroy(&pod)
        .await
        .expect("destroy of a unit that is gone");
    let names: Vec<String> = state.lock().unwrap().calls[calls.len()..]
        .iter()
        .map(|c| format!("{} {}", c.0, c.1))
        .collect();
    assert_eq!(
        names,
        [
            "StopUnit replace kubepods-burstable-pod12_34.slice",
            "ResetFailedUnit kubepods-burstable-pod12_34.slice",
            "StopUnit replace kubepods-burstable-pod12_34.slice",
            "ResetFailedUnit kubepods-burstable-pod12_34.slice",
        ]
    );

    // A job that fails is an error naming the unit and the result; the failed unit is reset.
    state.lock().unwrap().fail = Some("kubepods-besteffort.slice".into());
    let tier = CgroupName::parse_cgroupfs("/kubepods/besteffort");
    let err = manager.ensure(&tier, &cfg).await.unwrap_err();
    assert!(matches!(err, CgroupError::Job { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("kubepods-besteffort.slice") && text.contains("\"failed\""),
        "{text}"
    );
    assert_eq!(
        state.lock().unwrap().calls.last().map(|c| c.0.clone()),
        Some("ResetFailedUnit".into())
    );

    // A job that never finishes times out, naming the unit.
    state.lock().unwrap().hang = Some("kubepods.slice".into());
    let err = manager
        .ensure(&CgroupName::parse_cgroupfs("/kubepods"), &cfg)
        .await
        .unwrap_err();
    assert!(matches!(err, CgroupError::JobTimeout { .. }), "{err}");
    assert!(err.to_string().contains("kubepods.slice"), "{err}");
}
