//! A real browser for page tests: Debian's `chromium`, headless, driven through
//! `chromedriver` (WebDriver) with `fantoccini`. Fails loudly when either is missing.
//!
//! Chromium starts with the flags that keep it off the network (this machine has none but the
//! package registries; without them it keeps trying, and failing, to reach Google's services)
//! and a fresh profile directory.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use nodelet_testkit::port::free_port;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The flags the test machine needs (see docs/testing.md).
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
];

/// chromedriver and a WebDriver session with a headless Chromium; both end when dropped
/// (after [`Browser::close`] for a clean session end).
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a Chromium session with a `width`×`height` window.
    pub async fn start(width: u32, height: u32) -> Browser {
        for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: install Debian's `{package}` (scripts/install-deps.sh does)"
            );
        }
        let port = free_port();
        // Its own process group, which the browser it starts joins: a test that fails before
        // closing the session still takes every Chromium process down with it (Drop).
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {CHROMEDRIVER}: {e}"));
        let profile = tempfile::Builder::new()
            .prefix("nodelet-chromium-")
            .tempdir()
            .expect("profile directory");
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--window-size={width},{height}"));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({"binary": CHROMIUM, "args": args}),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "no WebDriver session from {CHROMEDRIVER} at {url}: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        };
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    /// Ends the session (Chromium exits), then chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
        // Drop ends chromedriver and anything left of the browser.
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the browser processes it started (their process group; Chromium's
        // crash handlers leave with them).
        if let Ok(pid) = i32::try_from(self.driver.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.driver.wait();
    }
}

/// Loads `url` and returns the browser's own navigation timing, in milliseconds: (response
/// end − request start, load event end − request start), i.e. until the page arrived and until
/// it was laid out and loaded.
pub async fn load(client: &Client, url: &str) -> (f64, f64) {
    client
        .goto(url)
        .await
        .unwrap_or_else(|e| panic!("loading {url}: {e}"));
    let timing = client
        .execute(
            "const n = performance.getEntriesByType('navigation')[0];\
             return [n.responseEnd - n.requestStart, n.loadEventEnd - n.requestStart];",
            vec![],
        )
        .await
        .expect("navigation timing");
    let number = |i: usize| timing[i].as_f64().unwrap_or(f64::NAN);
    (number(0), number(1))
}
