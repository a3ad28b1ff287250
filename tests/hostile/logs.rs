//! Log reading against a container that writes without newlines (issue 23, item 3).
//!
//! containerd splits such output into 16 KiB `P` entries without end. A reader that joins them
//! into one line, or searches a whole file for the start of `tailLines`, holds the container's
//! output in nodelet's memory; nodelet runs at oom_score_adj −999, so the node evicts other
//! tenants first. Here a container writes 200 MiB without a newline while a follower
//! (`follow=true`) and repeated `tailLines=10` readers read it through nodelet's own kubelet
//! API, and nodelet's resident memory is sampled throughout.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nodelet::logs::{JOIN_CAP, TAIL_LINE_CAP};

use crate::common::*;
use nodelet_testkit::pod::all_running;
use nodelet_testkit::port::free_port;
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(120);

/// What the container writes before its newline.
const FLOOD: u64 = 200 << 20;

/// The most nodelet's RSS may grow over its baseline while the flood is read: a follower and a
/// tail reader each hold a few hundred KiB (a file line, two joined lines of the 64 KiB join
/// cap, a 32 KiB output chunk, a channel of four chunks), plus TLS and HTTP buffers and the
/// allocator's slack. 64 MiB leaves a wide margin for a loaded host and is still far below the
/// 200 MiB the old reader held (it joined the whole line, and the tail search read the file).
const RSS_GROWTH_BOUND: u64 = 64 << 20;

/// The most `tailLines=10` may return of the flood: ten parts of the tail search's line cap
/// (file bytes, so more than the content they hold) and the marker line.
const TAIL_MAX: u64 = 10 * TAIL_LINE_CAP + 64;

/// VmRSS of a process, in bytes.
fn vm_rss(pid: u32) -> Option<u64> {
    Some(nodelet_testkit::proc::vm_rss_kib(pid)? * 1024)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .expect("https client")
}

/// A whole (non-follow) log response: status and body.
async fn get(url: &str) -> (u16, Vec<u8>) {
    let resp = client()
        .get(url)
        .timeout(T)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let body = resp
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("body of {url}: {e}"));
    (status, body.to_vec())
}

/// The attack of issue 23 item 3, for real: 200 MiB without a newline, read at once by a
/// follower (`/containerLogs?follow=true`, the request `kubectl logs -f` makes through the API
/// server, sent here straight to nodelet's kubelet API) and by `tailLines=10` again and again. nodelet's RSS (VmRSS of its process, sampled every 50 ms)
/// grows by less than [`RSS_GROWTH_BOUND`] (64 MiB) over the baseline taken before the flood;
/// baseline and peak are printed. The follower receives every one of the 200 MiB, the tail
/// readers get at most ten parts of the join cap each, and `limitBytes` is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_mib_line_without_newline_is_read_in_bounded_memory() {
    let port = free_port();
    // No rotation during the flood (the default 10Mi would rotate it away from the tail
    // readers): the whole 200 MiB stays in one file, the hardest case for the tail search.
    let mut n = Nodelet::start_with(
        "hostile-logs",
        &format!(
            "port: {port}\nauthentication:\n  anonymous:\n    enabled: true\nauthorization:\n  mode: AlwaysAllow\n\
             containerLogMaxSize: 300Mi\n"
        ),
    );
    let pid = n.pid().expect("nodelet pid");
    n.write_manifest(
        "flood.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: flood\nspec:\n  restartPolicy: Never\n  \
             terminationGracePeriodSeconds: 2\n  containers:\n  - name: flood\n    image: {TESTBOX}\n    \
             imagePullPolicy: Never\n    command: [/bin/sh, -c, 'echo flood-on; sleep 8; head -c {FLOOD} /dev/zero | tr \"\\0\" a; echo; echo flood-done; exec sleep 3600']\n"
        ),
    );
    n.wait_pod("flood", T, "flood running", all_running).await;
    let base = format!(
        "https://127.0.0.1:{port}/containerLogs/default/{}/flood",
        n.pod_name("flood")
    );

    // Alive and serving: the first line is there (this also warms up the TLS server).
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let (status, body) = get(&format!("{base}?tailLines=1")).await;
        if status == 200 && body == b"flood-on\n" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no first line: {status} {:?}\n{}",
            String::from_utf8_lossy(&body),
            tail(&n.logs(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let baseline = vm_rss(pid).expect("nodelet VmRSS");

    // The sampler.
    let peak = Arc::new(AtomicU64::new(baseline));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(rss) = vm_rss(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // The follower: reads the whole log as it grows, keeping only counts.
    let follow_done = Arc::new(AtomicBool::new(false));
    let follower = {
        let url = format!("{base}?follow=true");
        let done = follow_done.clone();
        tokio::spawn(async move {
            let mut resp = client()
                .get(&url)
                .send()
                .await
                .unwrap_or_else(|e| panic!("GET {url}: {e}"));
            assert_eq!(resp.status().as_u16(), 200);
            let (mut a, mut total) = (0u64, 0u64);
            let mut last = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
            loop {
                let chunk = tokio::time::timeout_at(deadline, resp.chunk())
                    .await
                    .unwrap_or_else(|_| panic!("follower not done after 600s: {total} bytes"))
                    .expect("follow body")
                    .unwrap_or_else(|| panic!("follow ended early after {total} bytes"));
                total += chunk.len() as u64;
                a += chunk.iter().filter(|b| **b == b'a').count() as u64;
                last.extend_from_slice(&chunk);
                let keep = last.len().saturating_sub(64);
                last.drain(..keep);
                if last.ends_with(b"\nflood-done\n") {
                    break;
                }
            }
            done.store(true, Ordering::Relaxed);
            (a, total)
        })
    };

    // `tailLines=10` again and again while the follower reads.
    let (mut tails, mut tails_with_data, mut largest_tail) = (0, 0, 0);
    while !follow_done.load(Ordering::Relaxed) && !follower.is_finished() {
        let (status, body) = get(&format!("{base}?tailLines=10")).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        tails += 1;
        if body.iter().filter(|b| **b == b'a').count() > 0 {
            tails_with_data += 1;
        }
        largest_tail = largest_tail.max(body.len());
        assert!(
            body.len() as u64 <= TAIL_MAX,
            "tailLines=10 returned {} bytes",
            body.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (followed_a, followed_total) = follower.await.expect("follower");

    // After the flood: the last ten lines end with the marker; limitBytes is exact.
    let (status, last10) = get(&format!("{base}?tailLines=10")).await;
    assert_eq!(status, 200);
    assert!(
        last10.ends_with(b"a\nflood-done\n"),
        "{:?}",
        String::from_utf8_lossy(&last10[last10.len().saturating_sub(80)..])
    );
    assert!(
        last10.len() > JOIN_CAP && last10.len() as u64 <= TAIL_MAX,
        "tailLines=10 after the flood: {} bytes",
        last10.len()
    );
    let (status, limited) = get(&format!("{base}?limitBytes=1048576")).await;
    assert_eq!(status, 200);
    assert_eq!(limited.len(), 1 << 20);
    assert!(limited.starts_with(b"flood-on\naaaa"));

    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let peak = peak.load(Ordering::Relaxed);
    let growth = peak.saturating_sub(baseline);
    println!(
        "nodelet VmRSS: baseline {} KiB, peak {} KiB, growth {} KiB (bound {} KiB); follower got {followed_total} bytes; \
         {tails} tailLines=10 reads during the flood, {tails_with_data} with data, largest {largest_tail} bytes",
        baseline / 1024,
        peak / 1024,
        growth / 1024,
        RSS_GROWTH_BOUND / 1024
    );
    assert_eq!(
        followed_a, FLOOD,
        "the follower got every byte of the flood"
    );
    assert!(
        tails_with_data >= 1,
        "no tail read saw the flood ({tails} reads)"
    );
    assert!(
        growth < RSS_GROWTH_BOUND,
        "nodelet grew by {} KiB reading the flood (baseline {} KiB, peak {} KiB)",
        growth / 1024,
        baseline / 1024,
        peak / 1024
    );
    assert!(
        n.exited().is_none(),
        "nodelet exited:\n{}",
        tail(&n.logs(), 30)
    );
    assert_no_runtime_stalls(&n).await;
}
