use super::*;

#[test]
fn request_attributes_table() {
    // (method, path, the (verb, subresource) pairs tried in order)
    type Case<'a> = (Method, &'a str, &'a [(&'a str, &'a str)]);
    let cases: [Case<'_>; 10] = [
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
        .authenticate(Some(&cert_user), Some("Bearer good"))
        .await
        .unwrap();
    assert_eq!(user.name, "apiserver");
    assert_eq!(user.groups, ["system:masters", GROUP_AUTHENTICATED]);
    assert_eq!(calls(&table), 0);

    let user = auth.authenticate(None, Some("Bearer good")).await.unwrap();
    assert_eq!(user.name, "alice");
    assert_eq!(user.groups, [GROUP_AUTHENTICATED]);
    // Cached for webhook.cacheTTL (2m), then asked again.
    auth.authenticate(None, Some("Bearer good")).await.unwrap();
    assert_eq!(calls(&table), 1);
    tokio::time::sleep(Duration::from_secs(121)).await;
    auth.authenticate(None, Some("Bearer good")).await.unwrap();
    assert_eq!(calls(&table), 2);

    assert_eq!(
        auth.authenticate(None, Some("Bearer bad")).await,
        Err(Refusal::Unauthorized)
    );
    assert_eq!(
        auth.authenticate(None, None).await,
        Err(Refusal::Unauthorized)
    );

    let anonymous = auth_with(true, AuthorizationMode::AlwaysAllow, table.clone());
    let user = anonymous
        .authenticate(None, Some("Bearer bad"))
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
            auth.authenticate(None, Some("Bearer x")).await,
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
        Err(Refusal::Error(message)) => assert!(
            message.starts_with(
                "Authorization error (user=alice, verb=get, resource=nodes, subresource=pods)"
            ),
            "{message}"
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
        standalone.authenticate(None, Some("Bearer x")).await,
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
