//! Image pulls with credentials, as the kubelet's image manager and puller
//! (`pkg/kubelet/images`, `pkg/kubelet/kuberuntime/kuberuntime_image.go`): the pod's
//! `imagePullSecrets` (which the API server's ServiceAccount admission fills from the service
//! account's) and the credential provider plugins give a keyring; the credentials that match
//! the image's registry are tried in turn (the first success wins, else every error is
//! reported); pulls are serialized node-wide (`serializeImagePulls`) or limited to
//! `maxParallelImagePulls` at once, and the time spent waiting for a slot is reported apart.

pub mod keyring;
pub mod provider;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::cluster::rate_limit::TokenBucket;
use crate::cri::{api, ImageService};
use crate::objects::ObjectSource;
pub use keyring::{repository_of, Credential, Keyring};
pub use provider::CredentialProviders;

/// How many pulls may run at once, from `serializeImagePulls` and `maxParallelImagePulls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullLimit {
    /// `serializeImagePulls: false` without `maxParallelImagePulls`.
    Unlimited,
    /// One (serialized) or `maxParallelImagePulls`.
    AtMost(u32),
}

impl PullLimit {
    pub fn from_config(serialize: bool, max_parallel: Option<u32>) -> PullLimit {
        match (serialize, max_parallel) {
            (true, _) => PullLimit::AtMost(1),
            (false, None) => PullLimit::Unlimited,
            (false, Some(n)) => PullLimit::AtMost(n.max(1)),
        }
    }
}

/// A finished pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    pub image_ref: String,
    /// The pull itself.
    pub pull_duration: Duration,
    /// From the request to the end, waiting for a pull slot (and credentials) included.
    pub total_duration: Duration,
}

/// Pull secrets that could not be read (the kubelet's `FailedToRetrieveImagePullSecret`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    pub matching: Vec<Credential>,
    pub failed_secrets: Vec<String>,
}

/// Node-wide puller: one per nodelet, shared by every pod worker.
pub struct ImagePuller {
    images: Arc<dyn ImageService>,
    objects: Arc<dyn ObjectSource>,
    providers: Arc<CredentialProviders>,
    slots: Option<Arc<Semaphore>>,
    /// `registryPullQPS`/`registryBurst`; `None`: unlimited (`registryPullQPS: 0`).
    rate: Option<std::sync::Mutex<TokenBucket>>,
}

/// The kubelet's error for a pull the registry QPS limit turned away (`throttledImageService`).
pub const PULL_QPS_EXCEEDED: &str = "pull QPS exceeded";

impl ImagePuller {
    pub fn new(
        images: Arc<dyn ImageService>,
        objects: Arc<dyn ObjectSource>,
        providers: Arc<CredentialProviders>,
        limit: PullLimit,
    ) -> ImagePuller {
        let slots = match limit {
            PullLimit::Unlimited => None,
            PullLimit::AtMost(n) => Some(Arc::new(Semaphore::new(n as usize))),
        };
        ImagePuller {
            images,
            objects,
            providers,
            slots,
            rate: None,
        }
    }

    /// Limits pulls to `qps` a second with bursts of `burst` (`registryPullQPS`,
    /// `registryBurst`); a `qps` of 0 leaves pulls unlimited, as in the kubelet. A pull that
    /// finds no token fails at once with [`PULL_QPS_EXCEEDED`] (it does not wait): the pod's
    /// image pull back-off then retries it.
    pub fn with_pull_rate(mut self, qps: u32, burst: u32) -> ImagePuller {
        self.rate = (qps > 0).then(|| {
            std::sync::Mutex::new(TokenBucket::new(qps, burst, tokio::time::Instant::now()))
        });
        self
    }

    fn take_pull_token(&self) -> Result<(), String> {
        let Some(rate) = &self.rate else {
            return Ok(());
        };
        let mut bucket = rate.lock().unwrap_or_else(|e| e.into_inner());
        bucket
            .try_take(tokio::time::Instant::now())
            .map_err(|_| PULL_QPS_EXCEEDED.to_string())
    }

    /// The credentials for `image` (pull secrets first, then the plugins', each most specific
    /// first), and the pull secrets that could not be read.
    pub async fn credentials(&self, pod: &Pod, image: &str) -> Credentials {
        let repository = repository_of(image);
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut secrets = Keyring::default();
        let mut failed_secrets = Vec::new();
        let names = pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_ref())
            .into_iter()
            .flatten()
            .filter(|r| !r.name.is_empty());
        for reference in names {
            match self.objects.secret(namespace, &reference.name).await {
                Ok(Some(secret)) => match keyring::docker_config_of_secret(&secret) {
                    Ok(Some(config)) => secrets.add(&config),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "ignoring an unreadable pull secret");
                        failed_secrets.push(format!("{namespace}/{}", reference.name));
                    }
                },
                Ok(None) | Err(_) => failed_secrets.push(format!("{namespace}/{}", reference.name)),
            }
        }
        let mut matching = secrets.lookup(&repository);
        if !self.providers.is_empty() {
            matching.extend(
                self.providers
                    .keyring(&repository)
                    .await
                    .lookup(&repository),
            );
        }
        Credentials {
            matching,
            failed_secrets,
        }
    }

    /// Pulls `image` with each credential in turn until one works (none: one pull without
    /// credentials). The error joins the runtime's messages of every attempt.
    pub async fn pull(
        &self,
        image: &str,
        credentials: &[Credential],
        sandbox_config: &api::PodSandboxConfig,
    ) -> Result<Pulled, String> {
        let requested = Instant::now();
        let _slot = match &self.slots {
            Some(s) => Some(s.clone().acquire_owned().await.map_err(|e| e.to_string())?),
            None => None,
        };
        let started = Instant::now();
        let done = |image_ref: String| Pulled {
            image_ref,
            pull_duration: started.elapsed(),
            total_duration: requested.elapsed(),
        };
        if credentials.is_empty() {
            self.take_pull_token()?;
            return self
                .images
                .pull_image(image, None, Some(sandbox_config.clone()))
                .await
                .map(done)
                .map_err(|e| e.runtime_message());
        }
        let mut errors = Vec::new();
        for credential in credentials {
            if let Err(e) = self.take_pull_token() {
                errors.push(e);
                break;
            }
            match self
                .images
                .pull_image(
                    image,
                    Some(credential.auth_config()),
                    Some(sandbox_config.clone()),
                )
                .await
            {
                Ok(image_ref) => return Ok(done(image_ref)),
                Err(e) => errors.push(e.runtime_message()),
            }
        }
        if errors.len() == 1 {
            Err(errors.remove(0))
        } else {
            Err(format!("[{}]", errors.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeRuntime;
    use crate::objects::FakeObjects;

    #[test]
    fn pull_limits_from_config() {
        assert_eq!(PullLimit::from_config(true, None), PullLimit::AtMost(1));
        assert_eq!(PullLimit::from_config(true, Some(1)), PullLimit::AtMost(1));
        assert_eq!(PullLimit::from_config(false, None), PullLimit::Unlimited);
        assert_eq!(PullLimit::from_config(false, Some(3)), PullLimit::AtMost(3));
    }

    fn puller(fake: &Arc<FakeRuntime>, objects: FakeObjects, limit: PullLimit) -> ImagePuller {
        ImagePuller::new(
            fake.clone(),
            Arc::new(objects),
            Arc::new(CredentialProviders::new(
                Vec::new(),
                Arc::new(provider::ProcessExec),
            )),
            limit,
        )
    }

    fn pull_secret(name: &str, registry: &str, user: &str) -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "team"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64::Engine::encode(&base64::engine::general_purpose::STANDARD,
                format!(r#"{{"auths":{{"{registry}":{{"username":"{user}","password":"pw"}}}}}}"#))},
        }))
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn registry_pull_qps_turns_pulls_away_beyond_the_burst() {
        let fake = Arc::new(FakeRuntime::default());
        fake.add_pullable_image("registry.local/app:1");
        async fn pull(p: &ImagePuller) -> Result<(), String> {
            let sandbox = api::PodSandboxConfig::default();
            p.pull("registry.local/app:1", &[], &sandbox)
                .await
                .map(|_| ())
        }
        // registryPullQPS 1, registryBurst 2: two pulls at once, the third turned away, one
        // more a second later.
        let limited =
            puller(&fake, FakeObjects::default(), PullLimit::Unlimited).with_pull_rate(1, 2);
        assert_eq!(pull(&limited).await, Ok(()));
        assert_eq!(pull(&limited).await, Ok(()));
        assert_eq!(pull(&limited).await, Err(PULL_QPS_EXCEEDED.to_string()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(pull(&limited).await, Ok(()));
        assert_eq!(pull(&limited).await, Err(PULL_QPS_EXCEEDED.to_string()));
        // registryPullQPS 0: unlimited.
        let unlimited =
            puller(&fake, FakeObjects::default(), PullLimit::Unlimited).with_pull_rate(0, 1);
        for _ in 0..20 {
            assert_eq!(pull(&unlimited).await, Ok(()));
        }
    }

    #[tokio::test]
    async fn pull_secrets_are_matched_to_the_image_and_missing_ones_reported() {
        let fake = Arc::new(FakeRuntime::default());
        let objects = FakeObjects::default();
        objects.set_secret(pull_secret("a", "reg.io:5000", "ua"));
        objects.set_secret(pull_secret("b", "reg.io:5000/team", "ub"));
        objects.set_secret(pull_secret("c", "other.io", "uc"));
        let p = puller(&fake, objects, PullLimit::Unlimited);
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "team", "uid": "u"},
            "spec": {"imagePullSecrets": [{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "gone"}],
                     "containers": []},
        }))
        .unwrap();
        let c = p.credentials(&pod, "reg.io:5000/team/app:1").await;
        let users: Vec<_> = c.matching.iter().map(|c| c.username.as_str()).collect();
        assert_eq!(users, ["ub", "ua"]);
        assert_eq!(c.failed_secrets, ["team/gone"]);
    }

    #[tokio::test(start_paused = true)]
    async fn serialized_pulls_wait_and_report_the_wait() {
        let fake = Arc::new(FakeRuntime::default());
        fake.add_pullable_image("reg.io/a:1");
        fake.set_pull_delay(Duration::from_secs(2));
        let p = Arc::new(puller(&fake, FakeObjects::default(), PullLimit::AtMost(1)));
        let sandbox = api::PodSandboxConfig::default();
        let (a, b) = tokio::join!(
            p.pull("reg.io/a:1", &[], &sandbox),
            p.pull("reg.io/a:1", &[], &sandbox)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let mut totals = [a.total_duration, b.total_duration];
        totals.sort();
        assert_eq!(a.pull_duration, Duration::from_secs(2));
        assert_eq!(b.pull_duration, Duration::from_secs(2));
        assert_eq!(totals, [Duration::from_secs(2), Duration::from_secs(4)]);

        let parallel = Arc::new(puller(&fake, FakeObjects::default(), PullLimit::Unlimited));
        let (a, b) = tokio::join!(
            parallel.pull("reg.io/a:1", &[], &sandbox),
            parallel.pull("reg.io/a:1", &[], &sandbox)
        );
        assert_eq!(a.unwrap().total_duration, Duration::from_secs(2));
        assert_eq!(b.unwrap().total_duration, Duration::from_secs(2));
    }

    #[tokio::test]
    async fn each_credential_is_tried_until_one_works() {
        let fake = Arc::new(FakeRuntime::default());
        fake.add_pullable_image("reg.io/a:1");
        fake.require_pull_user("reg.io/a:1", "good");
        let p = puller(&fake, FakeObjects::default(), PullLimit::Unlimited);
        let cred = |u: &str| Credential {
            registry: "reg.io".into(),
            username: u.into(),
            password: "pw".into(),
        };
        let sandbox = api::PodSandboxConfig::default();
        assert!(p
            .pull("reg.io/a:1", &[cred("bad"), cred("good")], &sandbox)
            .await
            .is_ok());
        let err = p
            .pull("reg.io/a:1", &[cred("bad"), cred("worse")], &sandbox)
            .await
            .unwrap_err();
        assert!(
            err.starts_with('[') && err.matches("401 Unauthorized").count() == 2,
            "{err}"
        );
        let err = p.pull("reg.io/a:1", &[], &sandbox).await.unwrap_err();
        assert!(err.contains("401 Unauthorized"), "{err}");
    }
}
