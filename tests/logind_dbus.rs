//! The node shutdown manager's logind client (`nodeshutdown::dbus::ZbusLogind`, the real zbus
//! code) against a stand-in for logind's manager object and systemd's `KillUnit` on a private
//! `dbus-daemon`: the `InhibitDelayMaxUSec` property (`t`, microseconds), `Inhibit` returning a
//! file descriptor that holds the lock until it is closed, the `PrepareForShutdown` signal, and
//! the SIGHUP to `systemd-logind.service`. Then the whole manager over that bus: a delay too
//! short raised through the drop-in, the lock taken, released after `PrepareForShutdown(true)`.
//! logind itself runs only in the VM (tests/vm_shutdown.rs); this is the protocol half.

#[path = "common/dbus_bus.rs"]
mod dbus_bus;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dbus_bus::Bus;
use futures::StreamExt;
use nodelet::clock::Clock;
use nodelet::events::EventRecorder;
use nodelet::lifecycle::kill::{KillHandle, PodKiller};
use nodelet::lifecycle::pods::ActivePods;
use nodelet::nodeshutdown::dbus::ZbusLogind;
use nodelet::nodeshutdown::logind::Logind;
use nodelet::nodeshutdown::manager::{Connect, Settings, ShutdownManager};
use nodelet::status::StatusMutation;
use zbus::object_server::SignalEmitter;

#[derive(Default)]
struct State {
    delay_usec: u64,
    /// `(what, who, why, mode)` of each Inhibit call.
    inhibits: Vec<(String, String, String, String)>,
    /// logind's ends of the locks: EOF once the client closed its end.
    lock_ends: Vec<UnixStream>,
    /// `KillUnit` sets the delay from this drop-in, as logind re-reading its configuration.
    drop_in: Option<PathBuf>,
    kills: Vec<(String, String, i32)>,
}

struct FakeLogind(Arc<Mutex<State>>);

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl FakeLogind {
    async fn inhibit(
        &self,
        what: String,
        who: String,
        why: String,
        mode: String,
    ) -> zbus::fdo::Result<zbus::zvariant::OwnedFd> {
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        ours.set_nonblocking(true).unwrap();
        let mut s = self.0.lock().unwrap();
        s.inhibits.push((what, who, why, mode));
        s.lock_ends.push(ours);
        Ok(std::os::fd::OwnedFd::from(theirs).into())
    }

    #[zbus(property, name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> u64 {
        self.0.lock().unwrap().delay_usec
    }

    #[zbus(signal)]
    async fn prepare_for_shutdown(emitter: &SignalEmitter<'_>, start: bool) -> zbus::Result<()>;
}

struct FakeSystemd(Arc<Mutex<State>>);

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl FakeSystemd {
    async fn kill_unit(&self, name: String, who: String, signal: i32) {
        let mut s = self.0.lock().unwrap();
        s.kills.push((name, who, signal));
        if let Some(path) = s.drop_in.clone() {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if let Some(secs) = text
                .lines()
                .find_map(|l| l.strip_prefix("InhibitDelayMaxSec="))
            {
                s.delay_usec = secs.parse::<u64>().unwrap() * 1_000_000;
            }
        }
    }
}

/// Serves the stand-ins; the connections must live as long as the test.
async fn serve(bus: &Bus, state: &Arc<Mutex<State>>) -> (zbus::Connection, zbus::Connection) {
    let logind = zbus::connection::Builder::address(bus.address.as_str())
        .unwrap()
        .name("org.freedesktop.login1")
        .unwrap()
        .serve_at("/org/freedesktop/login1", FakeLogind(state.clone()))
        .unwrap()
        .build()
        .await
        .expect("the stand-in logind");
    let systemd = zbus::connection::Builder::address(bus.address.as_str())
        .unwrap()
        .name("org.freedesktop.systemd1")
        .unwrap()
        .serve_at("/org/freedesktop/systemd1", FakeSystemd(state.clone()))
        .unwrap()
        .build()
        .await
        .expect("the stand-in systemd");
    (logind, systemd)
}

async fn emit(logind: &zbus::Connection, start: bool) {
    let emitter = SignalEmitter::new(logind, "/org/freedesktop/login1").unwrap();
    FakeLogind::prepare_for_shutdown(&emitter, start)
        .await
        .unwrap();
}

/// Whether the client still holds lock `i` (its end open: no EOF on logind's end).
fn held(state: &Arc<Mutex<State>>, i: usize) -> bool {
    let mut s = state.lock().unwrap();
    let mut buf = [0u8; 1];
    match s.lock_ends[i].read(&mut buf) {
        Ok(0) => false,
        Ok(_) => panic!("nothing is written to a lock"),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
        Err(e) => panic!("reading the lock: {e}"),
    }
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_logind_client_speaks_loginds_protocol() {
    let bus = Bus::start();
    let state = Arc::new(Mutex::new(State {
        delay_usec: 5_000_000,
        ..Default::default()
    }));
    let (logind_conn, _systemd_conn) = serve(&bus, &state).await;
    let client = ZbusLogind::connect(Some(&bus.address))
        .await
        .expect("connect");

    assert_eq!(
        client.inhibit_delay_max().await.unwrap(),
        Duration::from_secs(5)
    );

    let lock = client.inhibit_shutdown().await.expect("Inhibit");
    assert_eq!(
        state.lock().unwrap().inhibits,
        vec![(
            "shutdown".to_string(),
            "nodelet".to_string(),
            "nodelet needs time to end the pods gracefully on node shutdown".to_string(),
            "delay".to_string()
        )]
    );
    assert!(held(&state, 0), "the descriptor keeps the lock");
    drop(lock);
    until("the lock is released when dropped", || !held(&state, 0)).await;

    let mut signals = client.prepare_for_shutdown().await.expect("subscribe");
    emit(&logind_conn, true).await;
    emit(&logind_conn, false).await;
    let got: Vec<bool> =
        tokio::time::timeout(Duration::from_secs(30), signals.by_ref().take(2).collect())
            .await
            .expect("both signals");
    assert_eq!(got, vec![true, false]);

    client.reload().await.expect("KillUnit");
    assert_eq!(
        state.lock().unwrap().kills,
        vec![("systemd-logind.service".to_string(), "all".to_string(), 1)]
    );
}

struct NoPods;

impl ActivePods for NoPods {
    fn active_pods(&self) -> Vec<Arc<k8s_openapi::api::core::v1::Pod>> {
        Vec::new()
    }
}

struct NoKills;

impl PodKiller for NoKills {
    fn kill_pod(
        &self,
        _: Arc<k8s_openapi::api::core::v1::Pod>,
        _: Option<Duration>,
        _: StatusMutation,
    ) -> KillHandle {
        panic!("no pods to end");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_raises_the_delay_holds_the_lock_and_releases_it_on_shutdown() {
    let bus = Bus::start();
    let dir = tempfile::tempdir().unwrap();
    let drop_in = dir.path().join("logind.conf.d/99-nodelet.conf");
    let state = Arc::new(Mutex::new(State {
        delay_usec: 5_000_000,
        drop_in: Some(drop_in.clone()),
        ..Default::default()
    }));
    let (logind_conn, _systemd_conn) = serve(&bus, &state).await;
    let address = bus.address.clone();
    let connect: Connect = Arc::new(move || {
        let address = address.clone();
        Box::pin(async move {
            Ok(Arc::new(ZbusLogind::connect(Some(&address)).await?) as Arc<dyn Logind>)
        })
    });
    let settings = Settings {
        periods: nodelet::nodeshutdown::groups::effective_periods(
            &[],
            Duration::from_secs(30),
            Duration::from_secs(10),
        ),
        drop_in: drop_in.clone(),
        state_file: dir.path().join("graceful_node_shutdown_state"),
        node_name: "node-1".into(),
    };
    let clock = Clock::system();
    let manager = ShutdownManager::new(
        settings,
        connect,
        Arc::new(NoPods),
        Arc::new(NoKills),
        EventRecorder::new(clock, "nodelet", "node-1"),
        clock,
    );
    let view = manager.view();
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(manager.run(cancel.clone()));

    until("the lock is taken", || {
        !state.lock().unwrap().inhibits.is_empty()
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(&drop_in).unwrap(),
        "# nodelet logind override (graceful node shutdown)\n[Login]\nInhibitDelayMaxSec=30\n"
    );
    assert_eq!(state.lock().unwrap().kills.len(), 1, "logind reloaded once");
    assert_eq!(state.lock().unwrap().delay_usec, 30_000_000);
    assert!(held(&state, 0));

    // The manager subscribes before it takes the lock, so the signal reaches it now.
    emit(&logind_conn, true).await;
    until("marked shutting down", || view.is_shutting_down()).await;
    until("the lock is released (no pods to wait for)", || {
        !held(&state, 0)
    })
    .await;
    let text = std::fs::read_to_string(dir.path().join("graceful_node_shutdown_state")).unwrap();
    assert!(text.starts_with("{\"startTime\":\"20"), "{text}");
    assert!(
        !text.contains("\"endTime\":\"0001-"),
        "the end is recorded: {text}"
    );

    // Cancelled: un-marked, and a second lock is taken.
    emit(&logind_conn, false).await;
    until("un-marked", || !view.is_shutting_down()).await;
    until("a second lock", || {
        state.lock().unwrap().inhibits.len() == 2
    })
    .await;
    assert!(held(&state, 1));
    cancel.cancel();
    task.await.unwrap();
    until("stopping releases the lock", || !held(&state, 1)).await;
}
