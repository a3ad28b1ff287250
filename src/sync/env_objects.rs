//! Reads the ConfigMaps and Secrets a container's environment refers to, before the pure
//! environment of [`crate::podspec::env`] is built from them.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::objects::{fetch_objects, ObjectSource};
use crate::podspec::env::env_references;
use crate::podspec::references::FetchedObjects;

/// Reads the objects the container's environment needs, each once, from `source`.
pub async fn gather_env_objects(
    pod: &Pod,
    container: &Container,
    source: &dyn ObjectSource,
) -> FetchedObjects {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    fetch_objects(source, namespace, &env_references(container)).await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::podspec::env::make_environment;
    use crate::podspec::env::tests::{cm_key, field_env, from_cm, secret_key, test_pod, CTX};
    use crate::podspec::resources::test_support::container;

    #[tokio::test]
    async fn gather_reads_each_referenced_object_once() {
        use crate::objects::FakeObjects;
        let fake = FakeObjects::new();
        fake.set_config_map(ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("settings".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([("PORT".to_string(), "1".to_string())])),
            ..Default::default()
        });
        let mut c = container("c", "", "");
        c.env_from = Some(vec![from_cm("settings", "", false)]);
        c.env = Some(vec![
            cm_key("A", "settings", "PORT", false),
            secret_key("B", "creds", "k", true),
            field_env("N", "metadata.name"),
        ]);
        let p = test_pod(c.clone());
        let objects = gather_env_objects(&p, &c, &fake).await;
        assert_eq!(fake.reads(), 2);
        assert_eq!(objects.config_maps.len(), 1);
        assert!(matches!(objects.secrets.get("creds"), Some(Ok(None))));
        let env = make_environment(&p, &c, &CTX, &objects).unwrap();
        assert_eq!(
            env,
            [
                ("PORT".to_string(), "1".to_string()),
                ("A".to_string(), "1".to_string()),
                ("N".to_string(), "web".to_string()),
            ]
        );
    }
}
