use super::*;

#[test]
fn request_attributes_table() {
    // (method, path, the (verb, subresource) pairs tried in order)
    type Case<'a> = (Method, &'a str, &'a [(&'a str, &'a str)]);
    let cases: [Case<'_>; 13] = [
        (Method::GET, "/containerLogs/ns/p/c", &[("get", "proxy")]),
        (Method::GET, "/pods", &[("get", "pods"), ("get", "proxy")]),
        (Method::GET, "/pods/", &[("get", "pods"), ("get", "proxy")]),
        (
            Method::GET,
            "/healthz",
            &[("get", "healthz"), ("get", "proxy")],
        ),
        (Method::GET, "/metrics", &[("get", "metrics")]),
        (Method::GET, "/metrics/cadvisor", &[("get", "metrics")]),
        (Method::GET, "/metrics/probes", &[("get", "metrics")]),
        (Method::GET, "/metrics/resource", &[("get", "metrics")]),
        (Method::GET, "/configz", &[("get", "proxy")]),
        (Method::GET, "/metricsfoo", &[("get", "proxy")]),
        (Method::GET, "/stats/summary", &[("get", "stats")]),
        (Method::POST, "/exec/ns/p/c", &[("create", "proxy")]),
        (Method::HEAD, "/logs/", &[("", "log")]),
    ];
    for (method, path, want) in cases {
        let got: Vec<(&str, &str)> = request_attributes(&method, path, "node-a")
            .iter()
            .map(|a| (a.verb, a.subresource))
            .collect();
        assert_eq!(got, want.to_vec(), "{method} {path}");
        assert!(request_attributes(&method, path, "node-a")
            .iter()
            .all(|a| a.node == "node-a"));
    }
}

#[test]
fn bearer_token_table() {
    let cases = [
        ("Bearer abc", Some("abc")),
        ("bearer  abc ", Some("abc")),
        ("Basic abc", None),
        ("Bearer ", None),
        ("Bearer", None),
    ];
    for (header, want) in cases {
        assert_eq!(bearer_token(header), want, "{header:?}");
    }
}

#[test]
fn certificate_subject_gives_user_and_groups() {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:masters");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let user = user_from_certificate(cert.der()).unwrap();
    assert_eq!(user.name, "kube-apiserver-kubelet-client");
    assert_eq!(user.groups, ["system:masters"]);
    assert_eq!(user_from_certificate(b"garbage"), None);
}

/// Reviewers that answer from a table and count the calls.
#[derive(Default)]
struct Table {
    tokens: Vec<(&'static str, &'static str)>,
    allowed: Vec<(&'static str, &'static str)>,
    fail: bool,
    calls: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl TokenReviewer for Table {
    async fn review_token(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.fail {
            return Err(ReviewError("connection refused".into()));
        }
        Ok(self
            .tokens
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, user)| UserInfo {
                name: user.to_string(),
                ..Default::default()
            }))
    }
}

#[async_trait]
impl AccessReviewer for Table {
    async fn review_access(
        &self,
        user: &UserInfo,
        attrs: &RequestAttributes,
    ) -> Result<bool, ReviewError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.fail {
            return Err(ReviewError("connection refused".into()));
        }
        Ok(self
            .allowed
            .iter()
            .any(|(u, sub)| *u == user.name && *sub == attrs.subresource))
    }
}

fn calls(table: &Table) -> usize {
    table.calls.load(std::sync::atomic::Ordering::SeqCst)
}

fn auth_with(anonymous: bool, mode: AuthorizationMode, table: Arc<Table>) -> KubeletAuth {
    KubeletAuth::new(
        "node-a",
        &Authentication {
            anonymous_enabled: anonymous,
            ..Default::default()
        },
        &Authorization {
            mode,
            ..Default::default()
        },
        Some(table.clone()),
        Some(table),
    )
}

#[tokio::test(start_paused = true)]
async fn authentication_order_and_token_cache() {
    let table = Arc::new(Table {
        tokens: vec![("good", "alice")],
        ..Default::default()
    });
    let auth = auth_with(false, AuthorizationMode::AlwaysAllow, table.clone());
    let cert_user = UserInfo {
        name: "apiserver".into(),
        groups: vec!["system:masters".into()],
        ..Default::default()
    };
    // A certificate wins over a token and does not call the API server.
    let user = auth
        .authenticate(Some(&cert_user), None, Some("Bearer good"))
        .await
        .unwrap();
    assert_eq!(user.name, "apiserver");
    assert_eq!(user.groups, ["system:masters", GROUP_AUTHENTICATED]);
    assert_eq!(calls(&table), 0);

    let user = auth
        .authenticate(None, None, Some("Bearer good"))
        .await
        .unwrap();
    assert_eq!(user.name, "alice");
    assert_eq!(user.groups, [GROUP_AUTHENTICATED]);
    // Cached for webhook.cacheTTL (2m), then asked again.
    auth.authenticate(None, None, Some("Bearer good"))
        .await
        .unwrap();
    assert_eq!(calls(&table), 1);
    tokio::time::sleep(Duration::from_secs(121)).await;
    auth.authenticate(None, None, Some("Bearer good"))
        .await
        .unwrap();
    assert_eq!(calls(&table), 2);

    assert_eq!(
        auth.authenticate(None, None, Some("Bearer bad")).await,
        Err(Refusal::Unauthorized)
    );
    assert_eq!(
        auth.authenticate(None, None, None).await,
        Err(Refusal::Unauthorized)
    );

    let anonymous = auth_with(true, AuthorizationMode::AlwaysAllow, table.clone());
    let user = anonymous
        .authenticate(None, None, Some("Bearer bad"))
        .await
        .unwrap();
    assert_eq!(
        (user.name.as_str(), user.groups.clone()),
        (USER_ANONYMOUS, vec![GROUP_UNAUTHENTICATED.to_string()])
    );
}

#[tokio::test(start_paused = true)]
async fn token_review_errors_are_401_and_not_cached() {
    let table = Arc::new(Table {
        fail: true,
        ..Default::default()
    });
    let auth = auth_with(false, AuthorizationMode::AlwaysAllow, table.clone());
    for _ in 0..2 {
        assert_eq!(
            auth.authenticate(None, None, Some("Bearer x")).await,
            Err(Refusal::Unauthorized)
        );
    }
    assert_eq!(calls(&table), 2);
}

#[tokio::test(start_paused = true)]
async fn webhook_authorization_with_fallback_and_caches() {
    let table = Arc::new(Table {
        allowed: vec![("alice", "proxy"), ("bob", "pods")],
        ..Default::default()
    });
    let auth = auth_with(false, AuthorizationMode::Webhook, table.clone());
    let user = |name: &str| UserInfo {
        name: name.into(),
        ..Default::default()
    };
    // alice: nodes/proxy grants logs and (after nodes/pods is denied) /pods.
    auth.authorize(&user("alice"), &Method::GET, "/containerLogs/a/b/c")
        .await
        .unwrap();
    auth.authorize(&user("alice"), &Method::GET, "/pods")
        .await
        .unwrap();
    // bob: nodes/pods only.
    auth.authorize(&user("bob"), &Method::GET, "/pods")
        .await
        .unwrap();
    assert_eq!(
        auth.authorize(&user("bob"), &Method::GET, "/containerLogs/a/b/c")
            .await,
        Err(Refusal::Forbidden(
            "Forbidden (user=bob, verb=get, resource=nodes, subresource=proxy)".into()
        ))
    );
    let asked = calls(&table);
    // Allowed answers are kept 5m, denials 30s.
    auth.authorize(&user("alice"), &Method::GET, "/containerLogs/x/y/z")
        .await
        .unwrap();
    let _ = auth
        .authorize(&user("bob"), &Method::GET, "/containerLogs/a/b/c")
        .await;
    assert_eq!(calls(&table), asked);
    tokio::time::sleep(Duration::from_secs(31)).await;
    let _ = auth
        .authorize(&user("bob"), &Method::GET, "/containerLogs/a/b/c")
        .await;
    assert_eq!(calls(&table), asked + 1, "the denial expired");
    auth.authorize(&user("alice"), &Method::GET, "/containerLogs/x/y/z")
        .await
        .unwrap();
    assert_eq!(calls(&table), asked + 1, "the grant did not");

    // AlwaysAllow asks nobody.
    let always = auth_with(false, AuthorizationMode::AlwaysAllow, table.clone());
    always
        .authorize(&user("mallory"), &Method::GET, "/containerLogs/a/b/c")
        .await
        .unwrap();
    assert_eq!(calls(&table), asked + 1);
}

#[tokio::test]
async fn review_failures_are_500_and_standalone_webhook_denies() {
    let table = Arc::new(Table {
        fail: true,
        ..Default::default()
    });
    let auth = auth_with(false, AuthorizationMode::Webhook, table);
    let alice = UserInfo {
        name: "alice".into(),
        ..Default::default()
    };
    match auth.authorize(&alice, &Method::GET, "/pods").await {
        // The kubelet's text exactly: the reviewer's own error ("connection refused") is
        // logged, never sent to the client.
        Err(Refusal::Error(message)) => assert_eq!(
            message,
            "Authorization error (user=alice, verb=get, resource=nodes, subresource=pods)"
        ),
        other => panic!("{other:?}"),
    }
    let standalone = KubeletAuth::new(
        "node-a",
        &Authentication::default(),
        &Authorization::default(),
        None,
        None,
    );
    assert!(matches!(
        standalone.authorize(&alice, &Method::GET, "/pods").await,
        Err(Refusal::Error(_))
    ));
    // No token reviewer standalone: a token authenticates nobody.
    assert_eq!(
        standalone.authenticate(None, None, Some("Bearer x")).await,
        Err(Refusal::Unauthorized)
    );
}

#[test]
fn access_review_is_the_kubelets() {
    let user = UserInfo {
        name: "alice".into(),
        uid: "u1".into(),
        groups: vec!["devs".into()],
        ..Default::default()
    };
    let attrs = RequestAttributes {
        verb: "get",
        subresource: "proxy",
        node: "node-a".into(),
    };
    let review = serde_json::to_value(access_review(&user, &attrs)).unwrap();
    assert_eq!(
        review["spec"],
        serde_json::json!({
            "user": "alice", "uid": "u1", "groups": ["devs"],
            "resourceAttributes": {"verb": "get", "group": "", "version": "v1",
                "resource": "nodes", "subresource": "proxy", "name": "node-a"}
        })
    );
}

/// A TokenReview flood against a slow API server: the reviews beyond [`REVIEW_CONCURRENCY`]
/// are refused at once with 429 (they never queue), none of them reaches the API server, and
/// the pods client's token bucket (pod status writes, events) still has every token while the
/// flood is in flight. The clients are wired as the agent wires them ([`crate::cluster::api_clients`]).
#[tokio::test(start_paused = true)]
async fn a_review_flood_fails_fast_and_leaves_the_status_bucket_alone() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let (open, gate) = tokio::sync::watch::channel(false);
    let reviews_seen = Arc::new(AtomicUsize::new(0));
    // The API server: TokenReviews answer once `open` says so; everything else at once.
    let transport = {
        let seen = reviews_seen.clone();
        tower::service_fn(move |request: axum::http::Request<kube::client::Body>| {
            let mut gate = gate.clone();
            let seen = seen.clone();
            async move {
                let body: &str = if request.uri().path().ends_with("/tokenreviews") {
                    seen.fetch_add(1, SeqCst);
                    let _ = gate.wait_for(|open| *open).await;
                    r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{},"status":{"authenticated":true,"user":{"username":"alice"}}}"#
                } else {
                    r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"}}"#
                };
                Ok::<_, std::convert::Infallible>(axum::http::Response::new(
                    kube::client::Body::from(body.as_bytes().to_vec()),
                ))
            }
        })
    };
    // Exactly enough tokens for the reviews in flight: a shared bucket would be empty after them.
    let settings = crate::cluster::ClientSettings {
        kubeconfig: None,
        qps: 1,
        burst: REVIEW_CONCURRENCY as u32,
        event_qps: 1,
        event_burst: 1,
    };
    let clients = crate::cluster::api_clients(&settings, |limit| {
        let builder = kube::client::ClientBuilder::new(transport.clone(), "default");
        Ok::<_, std::convert::Infallible>(match limit {
            Some(layer) => builder.with_layer(layer).build(),
            None => builder.build(),
        })
    })
    .unwrap();
    let reviews = Arc::new(ApiReviews::new(clients.reviews.clone()));
    let auth = Arc::new(KubeletAuth::new(
        "node-a",
        &Authentication::default(),
        &Authorization::default(),
        Some(reviews.clone()),
        Some(reviews),
    ));

    let in_flight: Vec<_> = (0..REVIEW_CONCURRENCY)
        .map(|i| {
            let auth = auth.clone();
            tokio::spawn(async move {
                // Each from an address of its own: one address holds at most
                // REVIEWS_PER_CLIENT slots (tested below).
                let client = Some(std::net::IpAddr::from([10, 0, 0, i as u8]));
                auth.authenticate(None, client, Some(&format!("Bearer flood-{i}")))
                    .await
            })
        })
        .collect();
    // Without letting time pass: every slot is taken and every review is at the API server.
    for _ in 0..100_000 {
        if reviews_seen.load(SeqCst) == REVIEW_CONCURRENCY {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(reviews_seen.load(SeqCst), REVIEW_CONCURRENCY);
    assert_eq!(auth.token_slots.available_permits(), 0);

    // A status write now finds its bucket full: no wait (paused time would have moved).
    let before = tokio::time::Instant::now();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(clients.pods.clone(), "default");
    pods.get_status("p").await.unwrap();
    assert_eq!(
        tokio::time::Instant::now(),
        before,
        "the pods client waited for a token: the reviews drew from its bucket"
    );

    // The excess fails at once, with 429, and never reaches the API server.
    for i in 0..3 {
        let refused = tokio::time::timeout(
            Duration::from_secs(3600),
            auth.authenticate(
                None,
                Some(std::net::IpAddr::from([10, 0, 1, i])),
                Some(&format!("Bearer extra-{i}")),
            ),
        )
        .await
        .expect("an excess review queued for a slot instead of failing");
        assert_eq!(
            refused,
            Err(Refusal::TooManyRequests(too_many_reviews("TokenReview")))
        );
    }
    assert_eq!(reviews_seen.load(SeqCst), REVIEW_CONCURRENCY);
    let response = Refusal::TooManyRequests(too_many_reviews("TokenReview")).into_response();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");

    // The reviews in flight finish, and their slots come back.
    open.send_replace(true);
    for task in in_flight {
        assert_eq!(task.await.unwrap().unwrap().name, "alice");
    }
    assert_eq!(auth.token_slots.available_permits(), REVIEW_CONCURRENCY);
    assert_eq!(
        auth.authenticate(None, None, Some("Bearer flood-0"))
            .await
            .unwrap()
            .name,
        "alice",
        "answered from the cache"
    );
}

/// A TokenReviewer whose reviews wait until `open`; tokens starting `good` are Prometheus's.
struct GatedReviews {
    open: tokio::sync::watch::Receiver<bool>,
    seen: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl TokenReviewer for GatedReviews {
    async fn review_token(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _ = self.open.clone().wait_for(|open| *open).await;
        Ok(token.starts_with("good").then(|| UserInfo {
            name: "prometheus".into(),
            ..Default::default()
        }))
    }
}

/// One client address floods made-up tokens against a slow API server: it holds at most
/// [`REVIEWS_PER_CLIENT`] review slots (its next request is 429 at once), so another client's
/// token is reviewed meanwhile; and thousands of rejected tokens never push the good token out
/// of the cache.
#[tokio::test(start_paused = true)]
async fn one_client_flooding_made_up_tokens_leaves_review_slots_to_the_others() {
    use std::sync::atomic::Ordering::SeqCst;
    let (open, gate) = tokio::sync::watch::channel(false);
    let reviews = Arc::new(GatedReviews {
        open: gate,
        seen: Default::default(),
    });
    let auth = Arc::new(KubeletAuth::new(
        "node-a",
        &Authentication::default(),
        &Authorization::default(),
        Some(reviews.clone()),
        None,
    ));
    let flooder = Some(std::net::IpAddr::from([10, 0, 0, 66]));
    let prometheus = Some(std::net::IpAddr::from([10, 0, 0, 7]));
    let wait_seen = |n: usize| {
        let reviews = reviews.clone();
        async move {
            for _ in 0..100_000 {
                if reviews.seen.load(SeqCst) == n {
                    return;
                }
                tokio::task::yield_now().await;
            }
            panic!("{} reviews, not {n}", reviews.seen.load(SeqCst));
        }
    };
    let flood: Vec<_> = (0..REVIEWS_PER_CLIENT)
        .map(|i| {
            let auth = auth.clone();
            tokio::spawn(async move {
                auth.authenticate(None, flooder, Some(&format!("Bearer made-up-{i}")))
                    .await
            })
        })
        .collect();
    wait_seen(REVIEWS_PER_CLIENT).await;
    assert_eq!(
        auth.authenticate(None, flooder, Some("Bearer made-up-x"))
            .await,
        Err(Refusal::TooManyRequests(too_many_client_reviews())),
        "the flooder's third review"
    );
    assert!(
        auth.token_slots.available_permits() > 0,
        "the flooder holds every slot"
    );
    let scrape = {
        let auth = auth.clone();
        tokio::spawn(async move {
            auth.authenticate(None, prometheus, Some("Bearer good-prom"))
                .await
        })
    };
    wait_seen(REVIEWS_PER_CLIENT + 1).await;
    open.send_replace(true);
    assert_eq!(scrape.await.unwrap().unwrap().name, "prometheus");
    for task in flood {
        assert_eq!(task.await.unwrap(), Err(Refusal::Unauthorized));
    }
    // Thousands of rejected tokens, one after another (never more than one slot), and the
    // rejections are cached too: each is reviewed once.
    for i in 0..3000 {
        let token = format!("Bearer made-up-{i}");
        assert_eq!(
            auth.authenticate(None, flooder, Some(&token)).await,
            Err(Refusal::Unauthorized)
        );
    }
    let seen = reviews.seen.load(SeqCst);
    assert_eq!(
        auth.authenticate(None, flooder, Some("Bearer made-up-2999"))
            .await,
        Err(Refusal::Unauthorized)
    );
    assert_eq!(
        auth.authenticate(None, prometheus, Some("Bearer good-prom"))
            .await
            .unwrap()
            .name,
        "prometheus"
    );
    assert_eq!(
        reviews.seen.load(SeqCst),
        seen,
        "the good token (and the last rejected one) answered from the caches"
    );
}

/// SubjectAccessReviews have slots of their own: while they are all taken, the next one is
/// refused at once with 429; a cached answer needs no slot.
#[tokio::test(start_paused = true)]
async fn access_reviews_beyond_the_cap_fail_fast() {
    struct Slow(tokio::sync::watch::Receiver<bool>);
    #[async_trait]
    impl AccessReviewer for Slow {
        async fn review_access(
            &self,
            _: &UserInfo,
            _: &RequestAttributes,
        ) -> Result<bool, ReviewError> {
            let _ = self.0.clone().wait_for(|open| *open).await;
            Ok(true)
        }
    }
    let (open, gate) = tokio::sync::watch::channel(false);
    let auth = Arc::new(KubeletAuth::new(
        "node-a",
        &Authentication::default(),
        &Authorization {
            mode: AuthorizationMode::Webhook,
            ..Default::default()
        },
        None,
        Some(Arc::new(Slow(gate))),
    ));
    let user = |i: usize| UserInfo {
        name: format!("user-{i}"),
        ..Default::default()
    };
    let in_flight: Vec<_> = (0..REVIEW_CONCURRENCY)
        .map(|i| {
            let auth = auth.clone();
            tokio::spawn(async move { auth.authorize(&user(i), &Method::GET, "/stats").await })
        })
        .collect();
    for _ in 0..100_000 {
        if auth.access_slots.available_permits() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(auth.access_slots.available_permits(), 0);
    let refused = tokio::time::timeout(
        Duration::from_secs(3600),
        auth.authorize(&user(99), &Method::GET, "/stats"),
    )
    .await
    .expect("an excess review queued for a slot instead of failing");
    assert_eq!(
        refused,
        Err(Refusal::TooManyRequests(too_many_reviews(
            "SubjectAccessReview"
        )))
    );
    open.send_replace(true);
    for task in in_flight {
        task.await.unwrap().unwrap();
    }
    auth.authorize(&user(0), &Method::GET, "/stats")
        .await
        .unwrap();
}
