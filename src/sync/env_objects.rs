//! Reads the ConfigMaps, Secrets and environment files a container's environment refers to,
//! before the pure environment of [`crate::podspec::env`] is built from them.

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::objects::{fetch_objects, ObjectSource};
use crate::podspec::env::env_references;
use crate::podspec::references::{EnvFileRead, FetchedObjects};
use crate::volume::emptydir::empty_dir_path;
use crate::volume::env_file::{read_env_file, MAX_ENV_FILE};

/// Reads the objects the container's environment needs, each once, from `source`, and the
/// environment files its `fileKeyRef`s name from the pod's emptyDir volumes under `pod_dir`
/// (a file of a volume that is not one of them is left out: the reference fails as the
/// kubelet's does, naming the volume).
pub async fn gather_env_objects(
    pod: &Pod,
    container: &Container,
    source: &dyn ObjectSource,
    pod_dir: &Path,
) -> FetchedObjects {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut objects = fetch_objects(source, namespace, &env_references(container)).await;
    for (volume, path) in env_file_references(pod, container) {
        let dir = empty_dir_path(pod_dir, &volume);
        let host_path = dir.join(&path);
        let rel = path.clone();
        let read = tokio::task::spawn_blocking(move || read_env_file(&dir, &rel, MAX_ENV_FILE))
            .await
            .map_err(|e| format!("reading the file: {e}"))
            .and_then(|read| read.map_err(|e| e.to_string()));
        let (content, truncated) = match read {
            Ok((content, truncated)) => (Ok(content), truncated),
            Err(e) => (Err(e), false),
        };
        objects.env_files.insert(
            (volume, path),
            EnvFileRead {
                host_path,
                content,
                truncated,
            },
        );
    }
    objects
}

/// The (volume, path) of every `fileKeyRef` of the container whose volume is an emptyDir of
/// the pod (the only kind the API server accepts there).
fn env_file_references(pod: &Pod, container: &Container) -> BTreeSet<(String, String)> {
    let empty_dirs: BTreeSet<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| v.empty_dir.is_some())
        .map(|v| v.name.as_str())
        .collect();
    container
        .env
        .iter()
        .flatten()
        .filter_map(|var| var.value_from.as_ref()?.file_key_ref.as_ref())
        .filter(|f| empty_dirs.contains(f.volume_name.as_str()))
        .map(|f| (f.volume_name.clone(), f.path.clone()))
        .collect()
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
        let pod_dir = tempfile::tempdir().unwrap();
        let objects = gather_env_objects(&p, &c, &fake, pod_dir.path()).await;
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

    #[tokio::test]
    async fn gather_reads_the_env_files_of_empty_dirs() {
        use crate::objects::FakeObjects;
        use k8s_openapi::api::core::v1::{
            EmptyDirVolumeSource, EnvVar, EnvVarSource, FileKeySelector, HostPathVolumeSource,
            Volume,
        };
        let pod_dir = tempfile::tempdir().unwrap();
        let config = empty_dir_path(pod_dir.path(), "config");
        std::fs::create_dir_all(config.join("sub")).unwrap();
        std::fs::write(config.join("sub/app.env"), "A='from the file'\n").unwrap();
        let file_key = |name: &str, volume: &str, path: &str| EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                file_key_ref: Some(FileKeySelector {
                    volume_name: volume.into(),
                    path: path.into(),
                    key: "A".into(),
                    optional: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut c = container("c", "", "");
        c.env = Some(vec![
            file_key("ONE", "config", "sub/app.env"),
            file_key("TWO", "config", "sub/app.env"),
            file_key("GONE", "config", "missing.env"),
            file_key("HOST", "host", "app.env"),
        ]);
        let mut p = test_pod(c.clone());
        p.spec.as_mut().unwrap().volumes = Some(vec![
            Volume {
                name: "config".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
            Volume {
                name: "host".into(),
                host_path: Some(HostPathVolumeSource {
                    path: "/etc".into(),
                    type_: None,
                }),
                ..Default::default()
            },
        ]);
        let objects = gather_env_objects(&p, &c, &FakeObjects::new(), pod_dir.path()).await;
        let keys: Vec<_> = objects.env_files.keys().cloned().collect();
        assert_eq!(
            keys,
            [
                ("config".to_string(), "missing.env".to_string()),
                ("config".to_string(), "sub/app.env".to_string()),
            ],
            "each file once, and only of emptyDirs"
        );
        let read = &objects.env_files[&("config".to_string(), "sub/app.env".to_string())];
        assert_eq!(read.content.as_deref(), Ok(&b"A='from the file'\n"[..]));
        assert_eq!(read.host_path, config.join("sub/app.env"));
        assert!(
            objects.env_files[&("config".to_string(), "missing.env".to_string())]
                .content
                .is_err()
        );
        let mut c1 = c.clone();
        c1.env.as_mut().unwrap().truncate(2);
        let env = make_environment(&p, &c1, &CTX, &objects).unwrap();
        assert_eq!(
            env,
            [
                ("ONE".to_string(), "from the file".to_string()),
                ("TWO".to_string(), "from the file".to_string()),
            ]
        );
    }
}
