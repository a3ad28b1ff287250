//! ServiceAccounts, their admission and the TokenRequest subresource, driven by the real kubectl
//! and by kube-rs.

mod common;

use apiserver_fixture::serviceaccount::{token_claims, ISSUER, TOKEN_MOUNT_PATH};
use apiserver_fixture::Fixture;
use common::{kubectl, kubectl_ok, manifest, POD_YAML};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use serde_json::json;

fn client(fixture: &Fixture) -> Client {
    let config = Config::new(fixture.url().parse::<axum::http::Uri>().unwrap());
    Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_accounts_admission_and_tokens() {
    let fixture = Fixture::start(None).await.unwrap();

    // Every namespace has its default account and CA bundle, new ones too.
    kubectl_ok(&fixture, &["create", "namespace", "team"]).await;
    for ns in ["default", "kube-system", "team"] {
        let accounts = kubectl_ok(&fixture, &["get", "sa", "-n", ns, "--no-headers"]).await;
        assert!(accounts.starts_with("default "), "{ns}: {accounts}");
        let ca: ConfigMap = fixture
            .get(Some(ns), "kube-root-ca.crt")
            .unwrap()
            .expect("kube-root-ca.crt");
        assert!(ca.data.unwrap()["ca.crt"].contains("BEGIN CERTIFICATE"));
    }

    // Admission: the default account and its projected volume, mounted by the container.
    let (_dir, path) = manifest(POD_YAML);
    kubectl_ok(&fixture, &["apply", "-f", &path]).await;
    let pod: Pod = fixture.get(Some("default"), "web").unwrap().unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    let volumes = spec.volumes.unwrap();
    let volume = &volumes[0];
    assert!(volume.name.starts_with("kube-api-access-"), "{volume:?}");
    assert_eq!(volume.name.len(), "kube-api-access-".len() + 5);
    let sources = volume.projected.as_ref().unwrap().sources.as_ref().unwrap();
    let token = sources[0].service_account_token.as_ref().unwrap();
    assert_eq!(
        (token.path.as_str(), token.expiration_seconds),
        ("token", Some(3607))
    );
    assert_eq!(
        sources[1].config_map.as_ref().unwrap().name,
        "kube-root-ca.crt"
    );
    let mount = &spec.containers[0].volume_mounts.as_ref().unwrap()[0];
    assert_eq!(
        (
            mount.name.as_str(),
            mount.mount_path.as_str(),
            mount.read_only
        ),
        (volume.name.as_str(), TOKEN_MOUNT_PATH, Some(true))
    );
    let yaml = kubectl_ok(&fixture, &["get", "pod", "web", "-o", "yaml"]).await;
    assert!(yaml.contains("serviceAccountName: default"), "{yaml}");

    // A missing account is the API server's Forbidden.
    let ghost = POD_YAML.replace("name: web", "name: ghost").replace(
        "  nodeName: node-1\n",
        "  nodeName: node-1\n  serviceAccountName: ghost\n",
    );
    let (_dir2, ghost_path) = manifest(&ghost);
    let out = kubectl(&fixture, &["apply", "-f", &ghost_path]).await;
    assert!(!out.success);
    assert!(
        out.stderr.contains(
            "pods \"ghost\" is forbidden: error looking up service account default/ghost: serviceaccount \"ghost\" not found"
        ),
        "{}",
        out.stderr
    );

    // kubectl create serviceaccount and create token post protobuf.
    kubectl_ok(&fixture, &["create", "serviceaccount", "builder"]).await;
    let token = kubectl_ok(&fixture, &["create", "token", "builder", "--duration=20m"]).await;
    let claims = token_claims(token.trim()).expect("a JWT");
    assert_eq!(claims["sub"], "system:serviceaccount:default:builder");
    assert_eq!(claims["aud"], json!([ISSUER]));
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        1200
    );
    let post = fixture
        .request_log()
        .into_iter()
        .find(|r| r.path.ends_with("/serviceaccounts/builder/token"))
        .unwrap();
    assert_eq!(post.status, 201);
    assert_eq!(
        post.content_type.as_deref(),
        Some("application/vnd.kubernetes.protobuf")
    );
    assert_eq!(post.body.unwrap()["spec"]["expirationSeconds"], 1200);

    // Bound to the pod: kubectl looks the pod up for its UID.
    let bound = kubectl_ok(
        &fixture,
        &[
            "create",
            "token",
            "default",
            "--bound-object-kind=Pod",
            "--bound-object-name=web",
            "--audience=vault",
        ],
    )
    .await;
    let claims = token_claims(bound.trim()).unwrap();
    assert_eq!(claims["aud"], json!(["vault"]));
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "web");
    assert_eq!(
        claims["kubernetes.io"]["pod"]["uid"].as_str(),
        pod.metadata.uid.as_deref()
    );

    let out = kubectl(&fixture, &["create", "token", "builder", "--duration=5m"]).await;
    assert!(!out.success);
    assert!(
        out.stderr
            .contains("may not specify a duration less than 10 minutes"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn token_requests_bound_to_pods() {
    let fixture = Fixture::start(None).await.unwrap();
    let client = client(&fixture);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"nodeName": "node-1", "automountServiceAccountToken": false,
                         "containers": [{"name": "app", "image": "nginx:1.27"}]}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.volumes, None, "opted out of the token volume");
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    let uid = created.metadata.uid.unwrap();

    let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
    let request = |name: &str, uid: &str, expiration: Option<i64>| TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(vec![]),
            expiration_seconds: expiration,
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let issued = accounts
        .create_token_request(
            "default",
            &PostParams::default(),
            &request("web", &uid, Some(3607)),
        )
        .await
        .unwrap();
    let status = issued.status.unwrap();
    let claims = token_claims(status.token.as_deref().unwrap()).unwrap();
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str());
    assert_eq!(claims["kubernetes.io"]["namespace"], "default");
    let expires = status.expiration_timestamp.unwrap().0.as_second();
    assert_eq!(expires, claims["exp"].as_i64().unwrap());
    assert_eq!(expires - claims["iat"].as_i64().unwrap(), 3607);
    assert_eq!(
        issued.spec.unwrap().audiences,
        Some(vec![ISSUER.to_string()])
    );

    // What the API server refuses, with its messages.
    type Case<'a> = (&'a str, TokenRequest, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("default", request("gone", "", None), 404, "pods \"gone\" not found"),
        (
            "default",
            request("web", "other-uid", None),
            409,
            "Operation cannot be fulfilled on Pod \"web\": the UID in the bound object reference (other-uid) does not match the UID in record. The object might have been deleted and then recreated",
        ),
        ("ghost", request("web", &uid, None), 404, "serviceaccounts \"ghost\" not found"),
        (
            "default",
            request("web", &uid, Some(60)),
            422,
            "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
        ),
    ];
    for (account, body, code, message) in cases {
        match accounts
            .create_token_request(account, &PostParams::default(), &body)
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.message.as_str()), (code, message));
            }
            other => panic!("{account} {body:?}: {other:?}"),
        }
    }
    // Tokens are not objects: the resourceVersion did not move.
    let rv = fixture.resource_version();
    accounts
        .create_token_request(
            "default",
            &PostParams::default(),
            &request("web", &uid, None),
        )
        .await
        .unwrap();
    assert_eq!(fixture.resource_version(), rv);
}
