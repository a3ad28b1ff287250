//! One pod holds as many exec/attach/port-forward sessions and log followers as it can
//! (issue 40, item 4). Each session holds two connections and a relay task in nodelet, each
//! follower a reader's buffers; before the caps per pod and namespace one pod could take every
//! place of the node (followers) or open sessions without end. Now a pod holds at most an
//! eighth of the node's places and a namespace a quarter; past that, nodelet answers as the
//! kubelet does when its streaming requests are at their cap (429, `Retry-After: 60`), and the
//! other pods are served.

use std::time::Duration;

use nodelet::logs::MAX_FOLLOWERS;
use nodelet::server::streaming::{MAX_SESSIONS, TOO_MANY_SESSIONS};

use crate::common::*;
use nodelet_testkit::pod::all_running;
use nodelet_testkit::port::free_port;

const T: Duration = Duration::from_secs(120);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        // An upgrade is HTTP/1.1's.
        .http1_only()
        .timeout(T)
        .build()
        .expect("https client")
}

/// A port-forward session to `pod` as `kubectl port-forward` opens it (SPDY): the status, the
/// `Retry-After` header and the body of a refusal, and the upgraded connection, held open by
/// the caller, of an accepted one.
async fn port_forward(
    port: u16,
    pod: &str,
) -> (u16, Option<String>, String, Option<reqwest::Upgraded>) {
    let url = format!("https://127.0.0.1:{port}/portForward/default/{pod}");
    let resp = client()
        .post(&url)
        .header("Connection", "Upgrade")
        .header("Upgrade", "SPDY/3.1")
        .header("X-Stream-Protocol-Version", "portforward.k8s.io")
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    if status == 101 {
        let upgraded = resp.upgrade().await.expect("the upgraded connection");
        (status, retry_after, String::new(), Some(upgraded))
    } else {
        let body = resp.text().await.unwrap_or_default();
        (status, retry_after, body, None)
    }
}

/// A follower of `pod`'s container `main`: the status and, while accepted, the response whose
/// body is never read (the follower stays).
async fn follow(port: u16, pod: &str) -> (u16, String, Option<reqwest::Response>) {
    let url = format!("https://127.0.0.1:{port}/containerLogs/default/{pod}/main?follow=true");
    let resp = client()
        .get(&url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    if status == 200 {
        (status, String::new(), Some(resp))
    } else {
        (status, resp.text().await.unwrap_or_default(), None)
    }
}

/// Pod `greedy` opens port-forward sessions until refused, and log followers until refused;
/// each refusal comes at its per-pod cap (an eighth of the node's: [`MAX_SESSIONS`] / 8 and
/// [`MAX_FOLLOWERS`] / 8) with the kubelet's answer, while pod `other` of the same node still
/// gets both. A session closed gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pod_cannot_take_every_stream_and_follower_of_the_node() {
    let port = free_port();
    let n = Nodelet::start_with(
        "hostile-stream-caps",
        &format!(
            "port: {port}\nauthentication:\n  anonymous:\n    enabled: true\nauthorization:\n  mode: AlwaysAllow\n"
        ),
    );
    for name in ["greedy", "other"] {
        n.write_manifest(
            &format!("{name}.yaml"),
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
                 terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {TESTBOX}\n    \
                 imagePullPolicy: Never\n    command: [/bin/sh, -c, 'echo up; exec sleep 3600']\n"
            ),
        );
    }
    for name in ["greedy", "other"] {
        n.wait_pod(name, T, &format!("{name} running"), all_running)
            .await;
    }
    let (greedy, other) = (n.pod_name("greedy"), n.pod_name("other"));

    // The positive sign: one session of each pod is relayed by the real containerd.
    let (status, _, body, first) = port_forward(port, &greedy).await;
    assert_eq!(status, 101, "the first port-forward session: {body}");

    let per_pod = MAX_SESSIONS / 8;
    let mut held = vec![first.expect("upgraded")];
    for i in 1..per_pod {
        let (status, _, body, upgraded) = port_forward(port, &greedy).await;
        assert_eq!(status, 101, "session {i} of {per_pod}: {body}");
        held.push(upgraded.expect("upgraded"));
    }
    let (status, retry_after, body, _) = port_forward(port, &greedy).await;
    assert_eq!(status, 429, "a session past the pod's {per_pod}: {body}");
    assert_eq!(retry_after.as_deref(), Some("60"));
    assert_eq!(body, TOO_MANY_SESSIONS);
    // The other pod is served.
    let (status, _, body, other_session) = port_forward(port, &other).await;
    assert_eq!(status, 101, "the other pod's session: {body}");
    // A closed session gives its place back (once nodelet sees the connection end).
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + T;
    let again = loop {
        let (status, _, body, upgraded) = port_forward(port, &greedy).await;
        if status == 101 {
            break upgraded;
        }
        assert_eq!(status, 429, "{body}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed session's place never came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "port-forward: {per_pod} sessions of one pod held, the next refused with 429, another \
         pod's accepted, a closed one's place given back"
    );

    // Log followers: the pod's cap, then the other pod is served.
    let per_pod = MAX_FOLLOWERS / 8;
    let mut followers = Vec::new();
    for i in 0..per_pod {
        let (status, body, resp) = follow(port, &greedy).await;
        assert_eq!(status, 200, "follower {i} of {per_pod}: {body}");
        followers.push(resp);
    }
    let (status, body, _) = follow(port, &greedy).await;
    assert_eq!(status, 429, "a follower past the pod's {per_pod}: {body}");
    assert_eq!(
        body,
        format!(
            "too many log streams are being followed from this pod (at most {per_pod} per pod); \
             try again later"
        )
    );
    let (status, body, other_follower) = follow(port, &other).await;
    assert_eq!(status, 200, "the other pod's follower: {body}");
    println!("log followers: {per_pod} of one pod held, the next refused, another pod's served");

    assert_no_runtime_stalls(&n).await;
    drop((held, again, other_session, followers, other_follower));
}
