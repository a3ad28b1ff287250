//! A private D-Bus for protocol tests: `dbus-daemon` on a socket in a temp dir, for stand-ins of
//! systemd's and logind's objects (tests/systemd_dbus.rs, tests/logind_dbus.rs).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private bus: `dbus-daemon` started for this test and killed (by its pid) at the end.
pub struct Bus {
    child: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl Bus {
    pub fn start() -> Bus {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("bus");
        let address = format!("unix:path={}", socket.display());
        let log = dir.path().join("dbus-daemon.log");
        let child = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--nopidfile"])
            .arg(format!("--address={address}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect(
                "dbus-daemon (Debian package dbus-daemon; scripts/install-deps.sh installs it)",
            );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "dbus-daemon did not listen at {address}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Bus {
            child,
            address,
            _dir: dir,
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
