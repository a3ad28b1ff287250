//! The in-memory object store: one global resourceVersion counter, a watch history of the last N
//! events, and the API server's create/update/patch/delete semantics on top.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use crate::delete::{
    self, DeleteDecision, DeleteOptions, DeleteSubject, DeletionMark, PodDeleteFacts,
};
use crate::error::{ApiError, FieldError};
use crate::events;
use crate::patch::{self, PatchError, PatchType};
use crate::pod;
use crate::resource::{self, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::service;
use crate::serviceaccount;
use crate::typed;
use crate::version::ServerProfile;

/// Wall-clock source for timestamps (creationTimestamp, deletionTimestamp); injectable for tests.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(Timestamp::now)
}

/// `metav1.Time` renders with second precision.
pub fn format_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn truncate_to_second(ts: Timestamp) -> Timestamp {
    Timestamp::from_second(ts.as_second()).unwrap_or(ts)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the watch history (objects in storage form).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub resource_version: u64,
    pub event_type: EventType,
    pub storage: String,
    pub namespace: String,
    pub object: Value,
    /// The object before a MODIFIED change: a watcher whose selector stops (or starts) matching
    /// sees DELETED (or ADDED), as with the API server's watch cache.
    pub previous: Option<Value>,
}

/// `fieldValidation` of create/update/patch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_validation: FieldValidation,
}

/// The result of a write: the object as served, and `Warning` header texts.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub object: Value,
    pub warnings: Vec<String>,
    /// 201 for a create (also through PUT or apply), 200 otherwise.
    pub created: bool,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// Synthetic ADDED events for every current object, then changes (resourceVersion unset or "0",
    /// or sendInitialEvents=true).
    InitialState,
    /// Changes after this resourceVersion.
    After(u64),
}

/// A started watch: the events to send first, then everything from `receiver`.
#[derive(Debug)]
pub struct WatchStarted {
    pub first: Vec<Arc<StoredEvent>>,
    pub receiver: broadcast::Receiver<Arc<StoredEvent>>,
    /// The resourceVersion when the watch started; later events are above it.
    pub resource_version: u64,
}

type Key = (String, String, String);

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<StoredEvent>>,
    /// Events at or below this resourceVersion may be missing from `history`.
    compacted: u64,
    counter: u64,
}

pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<StoredEvent>>,
    clock: Clock,
    history_limit: usize,
    state_path: Mutex<Option<PathBuf>>,
    /// The release the fixture pretends to be and what it therefore does not store.
    profile: Mutex<ServerProfile>,
}

fn key(rt: &ResourceType, namespace: Option<&str>, name: &str) -> Key {
    let ns = if rt.namespaced {
        namespace.unwrap_or("")
    } else {
        ""
    };
    (rt.storage.to_string(), ns.to_string(), name.to_string())
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(root) = obj else {
        unreachable!("made an object above")
    };
    let slot = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn parse_time(obj: &Value, field: &str) -> Option<Timestamp> {
    meta_str(obj, field).and_then(|s| s.parse().ok())
}

/// Converts a stored object to the form of the resource it is served as.
pub fn to_served(rt: &ResourceType, stored: &Value) -> Value {
    if rt.group == "events.k8s.io" {
        events::core_to_events_v1(stored)
    } else {
        stored.clone()
    }
}

fn to_storage(rt: &ResourceType, served: Value) -> Value {
    if rt.group == "events.k8s.io" {
        events::events_v1_to_core(&served)
    } else {
        served
    }
}

/// The storage (primary) resource type for a storage key.
fn storage_type(storage: &str) -> Option<&'static ResourceType> {
    resource::RESOURCES
        .iter()
        .find(|r| r.storage == storage && r.group.is_empty())
        .or_else(|| resource::RESOURCES.iter().find(|r| r.storage == storage))
}

fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && !s.contains('.') && is_dns1123_subdomain(s)
}

/// `metadata.name` validation with the API server's messages.
fn validate_name(rt: &ResourceType, name: &str) -> Option<FieldError> {
    if rt.storage == "certificatesigningrequests" {
        // CSR names are only path segments (`ValidateCertificateRequestName`): the kubelet's
        // `node-csr-<base64url digest>` has capitals and underscores.
        let bad = name == "." || name == ".." || name.contains('/') || name.contains('%');
        return bad.then(|| {
            FieldError::invalid(
                "metadata.name",
                &json!(name),
                "may not be '.' or '..' and may not contain '/' or '%'",
            )
        });
    }
    if rt.storage == "namespaces" {
        if !is_dns1123_label(name) {
            return Some(FieldError::invalid(
                "metadata.name",
                &json!(name),
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            ));
        }
    } else if !is_dns1123_subdomain(name) {
        return Some(FieldError::invalid(
            "metadata.name",
            &json!(name),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ));
    }
    None
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn check_type_meta(rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: the body is not a JSON object",
            kind = rt.kind,
            v = rt.version
        )));
    }
    let expected_version = rt.api_version();
    if let Some(v) = obj.get("apiVersion").and_then(Value::as_str) {
        if v != expected_version {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({expected_version})"
            )));
        }
    }
    if let Some(k) = obj.get("kind").and_then(Value::as_str) {
        if k != rt.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
    }
    obj["apiVersion"] = json!(expected_version);
    obj["kind"] = json!(rt.kind);
    Ok(())
}

/// Decodes the body as its type; applies `fieldValidation` to unknown fields.
fn check_fields(
    rt: &ResourceType,
    obj: &Value,
    mode: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let unknown = typed::check(rt, obj).map_err(ApiError::bad_request)?;
    match mode {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => Ok(unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect()),
        FieldValidation::Strict if unknown.is_empty() => Ok(Vec::new()),
        FieldValidation::Strict => {
            let listed: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            Err(ApiError::bad_request(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
                listed.join(", "),
                kind = rt.kind,
                v = rt.version
            )))
        }
    }
}

impl Store {
    pub fn new(clock: Clock, history_limit: usize) -> Store {
        let (tx, _) = broadcast::channel(4096);
        let store = Store {
            inner: Mutex::new(Inner {
                rv: 0,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                compacted: 0,
                counter: 0,
            }),
            tx,
            clock,
            history_limit: history_limit.max(1),
            state_path: Mutex::new(None),
            profile: Mutex::new(ServerProfile::default()),
        };
        store.seed_namespaces();
        store
    }

    fn seed_namespaces(&self) {
        let Some(namespaces) = resource::find_by_plural("", "v1", "namespaces") else {
            return;
        };
        for name in ["default", "kube-node-lease", "kube-public", "kube-system"] {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            // Cannot fail: the names are valid and the store is empty.
            let _ = self.create(namespaces, None, body, &WriteOptions::default());
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn now(&self) -> Timestamp {
        truncate_to_second((self.clock)())
    }

    /// What kind of server this is from now on (writes already stored are not revisited, as
    /// an upgraded or downgraded API server leaves etcd as it is).
    pub fn set_profile(&self, profile: ServerProfile) {
        *self
            .profile
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = profile;
    }

    pub fn profile(&self) -> ServerProfile {
        self.profile
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Drops what this server does not store from an object about to be written.
    fn prune(&self, rt: &ResourceType, obj: &mut Value) {
        self.profile
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .prune(rt.kind, obj);
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Persist the state to this file after every write (and load it now if it exists).
    pub fn set_state_file(&self, path: PathBuf) -> Result<(), crate::error::FixtureError> {
        if path.exists() {
            let text = std::fs::read_to_string(&path).map_err(|source| {
                crate::error::FixtureError::StateIo {
                    path: path.display().to_string(),
                    source,
                }
            })?;
            let state: Value = serde_json::from_str(&text).map_err(|source| {
                crate::error::FixtureError::StateJson {
                    path: path.display().to_string(),
                    source,
                }
            })?;
            self.restore(&state);
        }
        *self.state_path.lock().unwrap_or_else(|p| p.into_inner()) = Some(path);
        Ok(())
    }

    /// All objects and the counter, for state files.
    pub fn snapshot(&self) -> Value {
        let inner = self.lock();
        let objects: Vec<Value> = inner.objects.values().cloned().collect();
        json!({"resourceVersion": inner.rv, "counter": inner.counter, "objects": objects})
    }

    fn restore(&self, state: &Value) {
        let mut inner = self.lock();
        inner.objects.clear();
        inner.history.clear();
        inner.rv = state
            .get("resourceVersion")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        inner.counter = state.get("counter").and_then(Value::as_u64).unwrap_or(0);
        inner.compacted = inner.rv;
        for obj in state
            .get("objects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
            let (Some(rt), Some(name)) = (
                resource::find_by_kind(api_version, kind),
                meta_str(obj, "name"),
            ) else {
                continue;
            };
            let k = key(rt, meta_str(obj, "namespace"), name);
            inner.objects.insert(k, obj.clone());
        }
    }

    fn persist(&self, inner: &Inner) {
        let path = self
            .state_path
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(path) = path else {
            return;
        };
        let objects: Vec<&Value> = inner.objects.values().collect();
        let state =
            json!({"resourceVersion": inner.rv, "counter": inner.counter, "objects": objects});
        let tmp = path.with_extension("tmp");
        let result = serde_json::to_vec_pretty(&state)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = result {
            tracing::warn!(path = %path.display(), error = %e, "could not write the state file");
        }
    }

    /// A unique id derived from a counter, the clock and the process (formatted as a v4 UUID).
    fn new_uid(&self, inner: &mut Inner) -> String {
        inner.counter += 1;
        let mut hasher = Sha256::new();
        hasher.update(inner.counter.to_le_bytes());
        hasher.update((self.clock)().as_nanosecond().to_le_bytes());
        hasher.update(std::process::id().to_le_bytes());
        hasher.update(format!("{:p}", self as *const Store).as_bytes());
        let mut b: [u8; 16] = [0; 16];
        b.copy_from_slice(&hasher.finalize()[..16]);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h = hex::encode(b);
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// `names.SimpleNameGenerator`: 5 random characters from a consonant/digit alphabet.
    fn generated_suffix(&self, inner: &mut Inner) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let uid = self.new_uid(inner);
        uid.bytes()
            .filter(u8::is_ascii_hexdigit)
            .collect::<Vec<u8>>()
            .chunks(2)
            .take(5)
            .map(|pair| {
                let n = pair
                    .iter()
                    .fold(0usize, |acc, b| acc * 31 + usize::from(*b));
                char::from(ALPHABET[n % ALPHABET.len()])
            })
            .collect()
    }

    /// Records a change: bumps the resourceVersion, stores or removes, appends to the history,
    /// notifies watchers. Returns the object as stored (with the new resourceVersion).
    fn commit(
        &self,
        inner: &mut Inner,
        k: Key,
        mut obj: Value,
        event_type: EventType,
        previous: Option<Value>,
    ) -> Value {
        inner.rv += 1;
        let rv = inner.rv;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        match event_type {
            EventType::Deleted => {
                inner.objects.remove(&k);
            }
            _ => {
                inner.objects.insert(k.clone(), obj.clone());
            }
        }
        let event = Arc::new(StoredEvent {
            resource_version: rv,
            event_type,
            storage: k.0,
            namespace: k.1,
            object: obj.clone(),
            previous,
        });
        inner.history.push_back(event.clone());
        while inner.history.len() > self.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.compacted = dropped.resource_version;
            }
        }
        // No receivers is fine: nobody watches.
        let _ = self.tx.send(event);
        self.persist(inner);
        obj
    }

    pub fn get(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let inner = self.lock();
        inner
            .objects
            .get(&key(rt, namespace, name))
            .map(|o| to_served(rt, o))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// Objects of `rt` (in `namespace`, or all) matching the selectors, sorted by namespace and
    /// name, with the list's resourceVersion.
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects
            .iter()
            .filter(|((storage, ns, _), _)| {
                storage == rt.storage && namespace.is_none_or(|want| want == ns)
            })
            .filter(|(_, obj)| labels.matches_object(obj) && fields.matches_object(rt.storage, obj))
            .map(|(_, obj)| to_served(rt, obj))
            .collect();
        (items, inner.rv)
    }

    pub fn create(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let mut inner = self.lock();
        self.create_locked(&mut inner, rt, namespace, body, opts)
    }

    fn create_locked(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        namespace: Option<&str>,
        mut body: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        check_type_meta(rt, &mut body)?;
        let warnings = check_fields(rt, &body, opts.field_validation)?;
        let mut obj = to_storage(rt, body);
        let now = self.now();
        let now_text = format_time(now);

        // Namespace.
        let ns = if rt.namespaced {
            let body_ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
            let ns = match namespace {
                Some(path_ns) if !body_ns.is_empty() && body_ns != path_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                Some(path_ns) => path_ns.to_string(),
                None if !body_ns.is_empty() => body_ns,
                None => "default".to_string(),
            };
            meta_mut(&mut obj).insert("namespace".into(), json!(ns));
            Some(ns)
        } else {
            meta_mut(&mut obj).remove("namespace");
            None
        };

        // Name.
        let mut name = meta_str(&obj, "name").unwrap_or("").to_string();
        if name.is_empty() {
            let generate = meta_str(&obj, "generateName").unwrap_or("").to_string();
            if generate.is_empty() {
                return Err(ApiError::invalid(
                    rt,
                    "",
                    &[FieldError::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
            name = format!("{generate}{}", self.generated_suffix(inner));
            meta_mut(&mut obj).insert("name".into(), json!(name));
        }
        if let Some(err) = validate_name(rt, &name) {
            return Err(ApiError::invalid(rt, &name, &[err]));
        }
        if meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }

        if let Some(ns) = &ns {
            let ns_key = ("namespaces".to_string(), String::new(), ns.clone());
            if !inner.objects.contains_key(&ns_key) {
                let namespaces = resource::find_by_plural("", "v1", "namespaces").unwrap_or(rt);
                return Err(ApiError::not_found(namespaces, ns));
            }
        }

        // Kind-specific preparation (PrepareForCreate, defaulting, admission, validation).
        match rt.storage {
            "pods" => {
                if let Some(class) = pod::unknown_priority_class(&obj) {
                    return Err(ApiError::forbidden(
                        rt,
                        &name,
                        &format!("no PriorityClass with name {class} was found"),
                    ));
                }
                pod::apply_defaults(&mut obj);
                // The ServiceAccount admission plugin runs after defaulting, before validation.
                let pod_ns = ns.clone().unwrap_or_default();
                let account = serviceaccount::account_to_admit(&obj).and_then(|sa| {
                    inner
                        .objects
                        .get(&("serviceaccounts".to_string(), pod_ns.clone(), sa))
                        .cloned()
                });
                let suffix = if account.is_some() {
                    self.generated_suffix(inner)
                } else {
                    String::new()
                };
                if let Err(detail) =
                    serviceaccount::admit_pod(&mut obj, &pod_ns, account.as_ref(), &suffix)
                {
                    return Err(ApiError::forbidden(rt, &name, &detail));
                }
                let errors = pod::validate_create(&obj);
                if !errors.is_empty() {
                    return Err(ApiError::invalid(rt, &name, &errors));
                }
                obj["status"] = pod::initial_status(&obj, &now_text);
                meta_mut(&mut obj).insert("generation".into(), json!(1));
            }
            "namespaces" => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
                let labels = meta_mut(&mut obj)
                    .entry("labels")
                    .or_insert_with(|| json!({}));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
            "secrets" => {
                if obj.get("type").is_none_or(Value::is_null) {
                    obj["type"] = json!("Opaque");
                }
                fold_string_data(&mut obj);
            }
            "services" => {
                let used: std::collections::BTreeSet<String> = inner
                    .objects
                    .iter()
                    .filter(|((storage, _, _), _)| storage == "services")
                    .filter_map(|(_, svc)| svc.pointer("/spec/clusterIP")?.as_str())
                    .map(String::from)
                    .collect();
                service::prepare_create(&mut obj, &used).map_err(ApiError::internal)?;
            }
            _ => {}
        }

        self.prune(rt, &mut obj);
        let k = key(rt, ns.as_deref(), &name);
        if inner.objects.contains_key(&k) {
            return Err(ApiError::already_exists(rt, &name));
        }
        let uid = self.new_uid(inner);
        let m = meta_mut(&mut obj);
        m.insert("uid".into(), json!(uid));
        m.insert("creationTimestamp".into(), json!(now_text));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("managedFields");
        m.remove("selfLink");
        if opts.dry_run {
            return Ok(Written {
                object: to_served(rt, &obj),
                warnings,
                created: true,
            });
        }
        let stored = self.commit(inner, k, obj, EventType::Added, None);
        if rt.storage == "namespaces" {
            self.create_namespace_objects(inner, &name);
        }
        Ok(Written {
            object: to_served(rt, &stored),
            warnings,
            created: true,
        })
    }

    /// What the controller manager puts in every new namespace, at once: the `default`
    /// ServiceAccount and the `kube-root-ca.crt` ConfigMap.
    fn create_namespace_objects(&self, inner: &mut Inner, namespace: &str) {
        let objects = [
            (
                "serviceaccounts",
                serviceaccount::default_service_account(namespace),
            ),
            ("configmaps", serviceaccount::root_ca_config_map(namespace)),
        ];
        for (storage, body) in objects {
            let Some(rt) = storage_type(storage) else {
                continue;
            };
            // Cannot fail: the namespace is new and the objects are valid.
            let _ = self.create_locked(inner, rt, Some(namespace), body, &WriteOptions::default());
        }
    }

    /// `POST .../serviceaccounts/<name>/token`: issues a token for the ServiceAccount, bound to
    /// the pod the request names (which must exist, run as that account, and have the named
    /// UID). Nothing is stored and the resourceVersion does not move.
    pub fn create_token(
        &self,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let request = serviceaccount::parse_token_request(body)?;
        let (Some(accounts), Some(pods), Some(nodes)) = (
            storage_type("serviceaccounts"),
            storage_type("pods"),
            storage_type("nodes"),
        ) else {
            return Err(ApiError::internal("resource types missing"));
        };
        let mut inner = self.lock();
        let jti = self.new_uid(&mut inner);
        let account = inner
            .objects
            .get(&key(accounts, Some(namespace), name))
            .ok_or_else(|| ApiError::not_found(accounts, name))?;
        let pod = request
            .bound
            .as_ref()
            .filter(|b| b.kind == "Pod")
            .and_then(|b| inner.objects.get(&key(pods, Some(namespace), &b.name)));
        serviceaccount::check_bound_pod(&request, name, pod, pods)?;
        let node = pod
            .and_then(|p| p.pointer("/spec/nodeName"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .and_then(|n| inner.objects.get(&key(nodes, None, n)));
        let subjects = serviceaccount::TokenSubjects {
            namespace,
            service_account: account,
            pod,
            node,
        };
        Ok(serviceaccount::issue_token(
            &request,
            &subjects,
            self.now(),
            &jti,
        ))
    }

    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let mut inner = self.lock();
        self.update_locked(&mut inner, rt, namespace, name, body, status, opts)
    }

    #[allow(clippy::too_many_arguments)]
    fn update_locked(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        mut body: Value,
        status: bool,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        check_type_meta(rt, &mut body)?;
        let body_name = meta_str(&body, "name").unwrap_or("").to_string();
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if rt.namespaced {
            if let (Some(body_ns), Some(path_ns)) = (meta_str(&body, "namespace"), namespace) {
                if !body_ns.is_empty() && body_ns != path_ns {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
        }
        let k = key(rt, namespace, name);
        let Some(old) = inner.objects.get(&k).cloned() else {
            let unconditional = meta_str(&body, "resourceVersion").unwrap_or("").is_empty();
            if rt.allow_create_on_update && !status && unconditional {
                return self.create_locked(inner, rt, namespace, body, opts);
            }
            return Err(ApiError::not_found(rt, name));
        };
        let warnings = check_fields(rt, &body, opts.field_validation)?;
        let body = to_storage(rt, body);
        let old_rv = meta_str(&old, "resourceVersion").unwrap_or("").to_string();
        if let Some(rv) = meta_str(&body, "resourceVersion") {
            if !rv.is_empty() && rv != old_rv {
                return Err(ApiError::update_conflict(rt, name));
            }
        }
        let mut new = prepare_update(rt, &old, body, status);
        // Before the no-op check: a write of nothing but fields this server drops changes
        // nothing, as on a real server.
        self.prune(rt, &mut new);
        if self.profile().stamp_writes && matches!(rt.kind, "Pod" | "Node") {
            let annotations = meta_mut(&mut new)
                .entry("annotations")
                .or_insert_with(|| json!({}));
            if let Some(a) = annotations.as_object_mut() {
                a.insert(
                    crate::version::WRITE_STAMP_ANNOTATION.into(),
                    json!((inner.rv + 1).to_string()),
                );
            }
        }
        let mut errors = Vec::new();
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            let old_finalizers = finalizers(&old);
            let added: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !old_finalizers.contains(f))
                .collect();
            if !added.is_empty() {
                errors.push(FieldError::forbidden(
                    "metadata.finalizers",
                    &format!("no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}", added.iter().map(|f| format!("{f:?}")).collect::<Vec<_>>().join(", ")),
                ));
            }
        }
        if rt.is_pod() {
            if status {
                errors.extend(pod::validate_status_update(&new, &old));
            } else {
                errors.extend(pod::validate_update(&new, &old));
            }
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, name, &errors));
        }
        if new == old {
            // A no-op update writes nothing: no new resourceVersion, no watch event.
            return Ok(Written {
                object: to_served(rt, &old),
                warnings,
                created: false,
            });
        }
        if delete::should_delete_during_update(
            !finalizers(&new).is_empty(),
            parse_time(&old, "deletionTimestamp"),
            old.pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64),
        ) {
            if opts.dry_run {
                return Ok(Written {
                    object: to_served(rt, &old),
                    warnings,
                    created: false,
                });
            }
            // The API server deletes the stored object (finalizers and all) instead of writing.
            let deleted = self.commit(inner, k, old, EventType::Deleted, None);
            return Ok(Written {
                object: to_served(rt, &deleted),
                warnings,
                created: false,
            });
        }
        if opts.dry_run {
            return Ok(Written {
                object: to_served(rt, &new),
                warnings,
                created: false,
            });
        }
        let stored = self.commit(inner, k, new, EventType::Modified, Some(old));
        Ok(Written {
            object: to_served(rt, &stored),
            warnings,
            created: false,
        })
    }

    /// Replaces an object with what `change` makes of it, under the store's lock: the writes
    /// the API server makes itself (a CSR's approval conditions, its certificate). A change
    /// that gives back the stored object writes nothing.
    pub fn modify(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        change: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Written, ApiError> {
        let mut inner = self.lock();
        let k = key(rt, namespace, name);
        let old = inner
            .objects
            .get(&k)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let new = change(&old)?;
        if new == old {
            return Ok(Written {
                object: to_served(rt, &old),
                warnings: Vec::new(),
                created: false,
            });
        }
        let stored = self.commit(&mut inner, k, new, EventType::Modified, Some(old));
        Ok(Written {
            object: to_served(rt, &stored),
            warnings: Vec::new(),
            created: false,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch_body: &Value,
        status: bool,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let mut inner = self.lock();
        let k = key(rt, namespace, name);
        let Some(old) = inner.objects.get(&k).cloned() else {
            if patch_type == PatchType::Apply && !status {
                let mut body = patch_body.clone();
                if !body.is_object() {
                    return Err(ApiError::bad_request("an apply patch must be an object"));
                }
                let m = meta_mut(&mut body);
                m.entry("name").or_insert(json!(name));
                return self.create_locked(&mut inner, rt, namespace, body, opts);
            }
            return Err(ApiError::not_found(rt, name));
        };
        let served = to_served(rt, &old);
        let patched =
            patch::apply(patch_type, rt.kind, &served, patch_body).map_err(|e| match e {
                PatchError::Malformed(m) => ApiError::bad_request(m),
                PatchError::Unapplicable(m) => ApiError {
                    code: 422,
                    reason: "Invalid",
                    message: m,
                    details: None,
                },
            })?;
        self.update_locked(&mut inner, rt, namespace, name, patched, status, opts)
    }

    /// `pods/NAME/ephemeralcontainers`, PUT or PATCH: `requested` is the pod the client asks
    /// for (the body, or the patch applied to the served pod); only its ephemeral containers
    /// are taken, by the API server's rules (`pod::update_ephemeral_containers`). A pod being
    /// deleted takes none.
    pub fn update_ephemeral_containers(
        &self,
        namespace: &str,
        name: &str,
        requested: &Value,
    ) -> Result<Written, ApiError> {
        let pods = resource::find_by_plural("", "v1", "pods")
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        self.modify(pods, Some(namespace), name, |old| {
            let new = pod::update_ephemeral_containers(old, requested)
                .map_err(|errors| ApiError::invalid(pods, name, &errors))?;
            if new != *old && old.pointer("/metadata/deletionTimestamp").is_some() {
                return Err(ApiError::invalid(
                    pods,
                    name,
                    &[FieldError::forbidden(
                        "metadata.deletionTimestamp",
                        "ephemeral containers cannot be added to a pod being deleted",
                    )],
                ));
            }
            Ok(new)
        })
    }

    /// `pods/binding`: what the scheduler does to put a pod on a node (spec.nodeName and the
    /// PodScheduled condition).
    pub fn bind_pod(&self, namespace: &str, name: &str, node: &str) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let pods = resource::find_by_plural("", "v1", "pods")
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        let k = key(pods, Some(namespace), name);
        let Some(old) = inner.objects.get(&k).cloned() else {
            return Err(ApiError::not_found(pods, name));
        };
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::precondition_conflict(
                pods,
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        let current = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !current.is_empty() {
            return Err(ApiError::precondition_conflict(
                pods,
                name,
                &format!("pod {name} is already assigned to node {current:?}"),
            ));
        }
        let mut new = old.clone();
        new["spec"]["nodeName"] = json!(node);
        let now = format_time(self.now());
        let scheduled = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
        if !new.get("status").is_some_and(Value::is_object) {
            new["status"] = json!({});
        }
        let conditions = new["status"]
            .as_object_mut()
            .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
        if let Some(Value::Array(list)) = conditions {
            list.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
            list.push(scheduled);
        }
        Ok(self.commit(&mut inner, k, new, EventType::Modified, Some(old)))
    }

    /// DELETE: the object (pods, namespaces, or anything kept by a grace period or finalizers) or
    /// a `Status` of success.
    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        self.delete_locked(&mut inner, rt, namespace, name, options)
    }

    fn delete_locked(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let k = key(rt, namespace, name);
        let Some(old) = inner.objects.get(&k).cloned() else {
            return Err(ApiError::not_found(rt, name));
        };
        if rt.storage == "namespaces" && ["default", "kube-system", "kube-public"].contains(&name) {
            return Err(ApiError::forbidden(
                rt,
                name,
                "this namespace may not be deleted",
            ));
        }
        let subject = DeleteSubject {
            uid: meta_str(&old, "uid").unwrap_or("").to_string(),
            resource_version: meta_str(&old, "resourceVersion").unwrap_or("").to_string(),
            deletion_timestamp: parse_time(&old, "deletionTimestamp"),
            deletion_grace_period_seconds: old
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64),
            has_finalizers: !finalizers(&old).is_empty(),
            generation: old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            pod: rt.is_pod().then(|| PodDeleteFacts {
                node_name: old
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .map(String::from),
                phase: old
                    .pointer("/status/phase")
                    .and_then(Value::as_str)
                    .map(String::from),
                termination_grace_period_seconds: old
                    .pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64),
            }),
        };
        let decision = delete::decide(&subject, options, self.now())
            .map_err(|e| ApiError::precondition_conflict(rt, name, &e.0))?;
        let dry_run = !options.dry_run.is_empty();
        match decision {
            DeleteDecision::Pending => Ok(self.deleted_response(rt, &old)),
            DeleteDecision::Mark(mark) => {
                let marked = with_mark(&old, &mark);
                if marked == old || dry_run {
                    return Ok(to_served(rt, &marked));
                }
                let stored = self.commit(inner, k, marked, EventType::Modified, Some(old));
                Ok(to_served(rt, &stored))
            }
            DeleteDecision::Remove { mark_first } => {
                if dry_run {
                    return Ok(self.deleted_response(rt, &old));
                }
                let mut last = old.clone();
                if let Some(mark) = mark_first {
                    let marked = with_mark(&old, &mark);
                    if marked != old {
                        last =
                            self.commit(inner, k.clone(), marked, EventType::Modified, Some(old));
                    }
                }
                if rt.storage == "namespaces" {
                    self.empty_namespace(inner, name);
                }
                let deleted = self.commit(inner, k, last, EventType::Deleted, None);
                Ok(self.deleted_response(rt, &deleted))
            }
        }
    }

    /// The namespace controller's job, done at once: every object in the namespace is removed.
    fn empty_namespace(&self, inner: &mut Inner, namespace: &str) {
        let keys: Vec<Key> = inner
            .objects
            .keys()
            .filter(|(_, ns, _)| ns == namespace)
            .cloned()
            .collect();
        for k in keys {
            if let Some(obj) = inner.objects.get(&k).cloned() {
                self.commit(inner, k, obj, EventType::Deleted, None);
            }
        }
    }

    fn deleted_response(&self, rt: &ResourceType, obj: &Value) -> Value {
        if rt.return_deleted_object {
            return to_served(rt, obj);
        }
        let mut details = json!({
            "name": meta_str(obj, "name").unwrap_or(""),
            "kind": rt.plural,
            "uid": meta_str(obj, "uid").unwrap_or(""),
        });
        if !rt.group.is_empty() {
            details["group"] = json!(rt.group);
        }
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
    }

    /// DELETE on a collection: deletes each matching object with the same options; returns the
    /// responses for each.
    pub fn delete_collection(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        options: &DeleteOptions,
    ) -> Result<Vec<Value>, ApiError> {
        let mut inner = self.lock();
        let names: Vec<(String, String)> = inner
            .objects
            .iter()
            .filter(|((storage, ns, _), _)| {
                storage == rt.storage && namespace.is_none_or(|want| want == ns)
            })
            .filter(|(_, obj)| labels.matches_object(obj) && fields.matches_object(rt.storage, obj))
            .map(|((_, ns, name), _)| (ns.clone(), name.clone()))
            .collect();
        let mut out = Vec::new();
        for (ns, name) in names {
            let ns = (!ns.is_empty()).then_some(ns);
            match self.delete_locked(&mut inner, rt, ns.as_deref(), &name, options) {
                Ok(v) => out.push(v),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Starts a watch: the events to send first, a receiver for later ones (subscribed under the
    /// lock, so nothing is lost between them), and the resourceVersion at the start.
    pub fn watch(&self, rt: &ResourceType, start: WatchStart) -> Result<WatchStarted, ApiError> {
        let inner = self.lock();
        let receiver = self.tx.subscribe();
        let first = match start {
            WatchStart::InitialState => inner
                .objects
                .iter()
                .filter(|((storage, _, _), _)| storage == rt.storage)
                .map(|((storage, ns, _), obj)| {
                    Arc::new(StoredEvent {
                        resource_version: meta_str(obj, "resourceVersion")
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0),
                        event_type: EventType::Added,
                        storage: storage.clone(),
                        namespace: ns.clone(),
                        object: obj.clone(),
                        previous: None,
                    })
                })
                .collect(),
            WatchStart::After(rv) => {
                if rv < inner.compacted {
                    return Err(ApiError::expired(rv, inner.compacted + 1));
                }
                inner
                    .history
                    .iter()
                    .filter(|e| e.resource_version > rv && e.storage == rt.storage)
                    .cloned()
                    .collect()
            }
        };
        Ok(WatchStarted {
            first,
            receiver,
            resource_version: inner.rv,
        })
    }

    /// The storage resource type for events of `storage` (typed helpers).
    pub fn storage_type(storage: &str) -> Option<&'static ResourceType> {
        storage_type(storage)
    }
}

/// `stringData` is write-only: merged into `data` (base64) on write.
fn fold_string_data(obj: &mut Value) {
    let Some(string_data) = obj.get("stringData").and_then(Value::as_object).cloned() else {
        if let Some(m) = obj.as_object_mut() {
            m.remove("stringData");
        }
        return;
    };
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    if let Some(data) = obj.get_mut("data").and_then(Value::as_object_mut) {
        for (k, v) in string_data {
            if let Some(s) = v.as_str() {
                data.insert(k, json!(base64_encode(s.as_bytes())));
            }
        }
    }
    if let Some(m) = obj.as_object_mut() {
        m.remove("stringData");
    }
}

fn with_mark(old: &Value, mark: &DeletionMark) -> Value {
    let mut marked = old.clone();
    let m = meta_mut(&mut marked);
    m.insert(
        "deletionTimestamp".into(),
        json!(format_time(mark.deletion_timestamp)),
    );
    m.insert(
        "deletionGracePeriodSeconds".into(),
        json!(mark.grace_period_seconds),
    );
    if mark.bump_generation {
        let generation = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
        m.insert("generation".into(), json!(generation + 1));
    }
    marked
}

/// The update strategies: which parts of the body are taken and which are kept from the stored
/// object (`PrepareForUpdate` of the main resource and of `/status`, plus `BeforeUpdate`).
pub fn prepare_update(rt: &ResourceType, old: &Value, body: Value, status: bool) -> Value {
    let mut new = body;
    let copy_from_old = |new: &mut Value, field: &str| match old.get(field) {
        Some(v) => new[field] = v.clone(),
        None => {
            if let Some(m) = new.as_object_mut() {
                m.remove(field);
            }
        }
    };
    if status {
        copy_from_old(&mut new, "spec");
        if rt.is_pod() {
            let owners = old.pointer("/metadata/ownerReferences").cloned();
            let m = meta_mut(&mut new);
            match owners {
                Some(o) => m.insert("ownerReferences".into(), o),
                None => m.remove("ownerReferences"),
            };
            if new.pointer("/status/qosClass").is_none() {
                if let (Some(q), Some(s)) = (
                    old.pointer("/status/qosClass").cloned(),
                    new.get_mut("status"),
                ) {
                    if let Some(s) = s.as_object_mut() {
                        s.insert("qosClass".into(), q);
                    }
                }
            }
            if new.pointer("/status/observedGeneration").is_none() {
                if let (Some(g), Some(s)) = (
                    old.pointer("/status/observedGeneration").cloned(),
                    new.get_mut("status"),
                ) {
                    if let Some(s) = s.as_object_mut() {
                        s.insert("observedGeneration".into(), g);
                    }
                }
            }
        }
    } else if rt.status_subresource {
        copy_from_old(&mut new, "status");
    }
    if rt.is_pod() && !status {
        pod::apply_defaults(&mut new);
    }
    if rt.storage == "secrets" {
        fold_string_data(&mut new);
    }
    let old_generation = old.pointer("/metadata/generation").cloned();
    let spec_changed = new.get("spec") != old.get("spec");
    let m = meta_mut(&mut new);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
        "resourceVersion",
    ] {
        match old.pointer(&format!("/metadata/{field}")) {
            Some(v) => m.insert(field.into(), v.clone()),
            None => m.remove(field),
        };
    }
    m.remove("managedFields");
    m.remove("selfLink");
    match old_generation {
        Some(g) => {
            let bumped = if rt.is_pod() && !status && spec_changed {
                json!(g.as_i64().unwrap_or(0) + 1)
            } else {
                g
            };
            m.insert("generation".into(), bumped);
        }
        None => {
            m.remove("generation");
        }
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed_clock(at: &str) -> Clock {
        let ts: Timestamp = at.parse().unwrap();
        Arc::new(move || ts)
    }

    fn store() -> Store {
        Store::new(fixed_clock("2025-01-01T00:00:00Z"), 1000)
    }

    fn rt(plural: &str) -> &'static ResourceType {
        resource::find_by_plural("", "v1", plural).unwrap()
    }

    fn pod_body(name: &str, node: Option<&str>) -> Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                           "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("hello world", "aGVsbG8gd29ybGQ="),
        ];
        for (input, want) in cases {
            assert_eq!(base64_encode(input.as_bytes()), want, "{input}");
        }
    }

    #[test]
    fn starts_with_the_standard_namespaces() {
        let s = store();
        let (items, rv) = s.list(
            rt("namespaces"),
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        let names: Vec<&str> = items.iter().filter_map(|n| meta_str(n, "name")).collect();
        assert_eq!(
            names,
            ["default", "kube-node-lease", "kube-public", "kube-system"]
        );
        // Each namespace comes with its `default` ServiceAccount and `kube-root-ca.crt`.
        assert_eq!(rv, 12);
        for ns in names {
            let account = s.get(rt("serviceaccounts"), Some(ns), "default").unwrap();
            assert_eq!(account["metadata"]["namespace"], ns);
            let ca = s
                .get(rt("configmaps"), Some(ns), "kube-root-ca.crt")
                .unwrap();
            assert!(ca["data"]["ca.crt"].is_string(), "{ca}");
        }
        assert_eq!(items[0]["status"]["phase"], "Active");
        assert_eq!(
            items[0]["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "default"
        );
    }

    #[test]
    fn create_sets_system_fields_and_defaults() {
        let s = store();
        let w = s
            .create(
                rt("pods"),
                Some("default"),
                pod_body("web", None),
                &WriteOptions::default(),
            )
            .unwrap();
        let p = &w.object;
        assert!(w.created);
        assert_eq!(p["metadata"]["namespace"], "default");
        assert_eq!(p["metadata"]["resourceVersion"], "13");
        assert_eq!(p["metadata"]["generation"], 1);
        assert_eq!(p["metadata"]["creationTimestamp"], "2025-01-01T00:00:00Z");
        assert_eq!(p["metadata"]["uid"].as_str().unwrap().len(), 36);
        assert_eq!(
            p["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
        assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 30);
        let again = s.create(
            rt("pods"),
            Some("default"),
            pod_body("web", None),
            &WriteOptions::default(),
        );
        assert_eq!(again.unwrap_err().reason, "AlreadyExists");
        let elsewhere = s.create(
            rt("pods"),
            Some("nope"),
            pod_body("web", None),
            &WriteOptions::default(),
        );
        assert_eq!(
            elsewhere.unwrap_err().message,
            r#"namespaces "nope" not found"#
        );
    }

    #[test]
    fn create_errors() {
        let s = store();
        let no_image = json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "a"}]}});
        let bad_name = pod_body("Web", None);
        let with_rv = json!({"metadata": {"name": "x", "resourceVersion": "3"}, "spec": {"containers": [{"name": "a", "image": "b"}]}});
        let nameless =
            json!({"metadata": {}, "spec": {"containers": [{"name": "a", "image": "b"}]}});
        let wrong_kind = json!({"kind": "Node", "metadata": {"name": "x"}});
        let cases = [
            (
                no_image,
                422,
                r#"Pod "x" is invalid: spec.containers[0].image: Required value"#,
            ),
            (
                bad_name,
                422,
                r#"Pod "Web" is invalid: metadata.name: Invalid value: "Web": a lowercase RFC 1123 subdomain"#,
            ),
            (
                with_rv,
                400,
                "resourceVersion should not be set on objects to be created",
            ),
            (
                nameless,
                422,
                r#"Pod "" is invalid: metadata.name: Required value: name or generateName is required"#,
            ),
            (
                wrong_kind,
                400,
                "the kind in the data (Node) does not match the expected kind (Pod)",
            ),
        ];
        for (body, code, message) in cases {
            let err = s
                .create(rt("pods"), Some("default"), body, &WriteOptions::default())
                .unwrap_err();
            assert_eq!(err.code, code, "{message}");
            assert!(
                err.message.starts_with(message),
                "{} does not start with {message}",
                err.message
            );
        }
    }

    #[test]
    fn generate_name() {
        let s = store();
        let body = json!({"metadata": {"generateName": "web-"}, "spec": {"containers": [{"name": "a", "image": "b"}]}});
        let a = s
            .create(
                rt("pods"),
                Some("default"),
                body.clone(),
                &WriteOptions::default(),
            )
            .unwrap()
            .object;
        let b = s
            .create(rt("pods"), Some("default"), body, &WriteOptions::default())
            .unwrap()
            .object;
        let (na, nb) = (meta_str(&a, "name").unwrap(), meta_str(&b, "name").unwrap());
        assert!(na.starts_with("web-") && na.len() == 9, "{na}");
        assert_ne!(na, nb);
    }

    #[test]
    fn update_semantics() {
        let s = store();
        let pods = rt("pods");
        let created = s
            .create(
                pods,
                Some("default"),
                pod_body("web", Some("n1")),
                &WriteOptions::default(),
            )
            .unwrap()
            .object;
        // Main resource ignores status; image change bumps generation.
        let mut body = created.clone();
        body["status"]["phase"] = json!("Running");
        body["spec"]["containers"][0]["image"] = json!("nginx:2");
        let updated = s
            .update(
                pods,
                Some("default"),
                "web",
                body,
                false,
                &WriteOptions::default(),
            )
            .unwrap()
            .object;
        assert_eq!(updated["status"]["phase"], "Pending");
        assert_eq!(updated["metadata"]["generation"], 2);
        // Stale resourceVersion.
        let stale = s.update(
            pods,
            Some("default"),
            "web",
            created.clone(),
            false,
            &WriteOptions::default(),
        );
        assert_eq!(stale.unwrap_err().reason, "Conflict");
        // Status ignores spec, keeps generation.
        let mut status_body = updated.clone();
        status_body["status"]["phase"] = json!("Running");
        status_body["spec"]["containers"][0]["image"] = json!("nginx:3");
        let st = s
            .update(
                pods,
                Some("default"),
                "web",
                status_body,
                true,
                &WriteOptions::default(),
            )
            .unwrap()
            .object;
        assert_eq!(st["status"]["phase"], "Running");
        assert_eq!(st["spec"]["containers"][0]["image"], "nginx:2");
        assert_eq!(st["metadata"]["generation"], 2);
        // No-op update: no new resourceVersion.
        let rv = s.resource_version();
        let same = s
            .update(
                pods,
                Some("default"),
                "web",
                st.clone(),
                true,
                &WriteOptions::default(),
            )
            .unwrap()
            .object;
        assert_eq!(s.resource_version(), rv);
        assert_eq!(
            same["metadata"]["resourceVersion"],
            st["metadata"]["resourceVersion"]
        );
        // Forbidden spec change.
        let mut bad = same.clone();
        bad["spec"]["restartPolicy"] = json!("Never");
        assert_eq!(
            s.update(
                pods,
                Some("default"),
                "web",
                bad,
                false,
                &WriteOptions::default()
            )
            .unwrap_err()
            .code,
            422
        );
    }

    #[test]
    fn graceful_delete_then_final_delete() {
        let s = Store::new(fixed_clock("2025-01-01T00:00:00Z"), 1000);
        let pods = rt("pods");
        let created = s
            .create(
                pods,
                Some("default"),
                pod_body("web", Some("n1")),
                &WriteOptions::default(),
            )
            .unwrap()
            .object;
        let uid = meta_str(&created, "uid").unwrap().to_string();
        let mut rx = s
            .watch(pods, WatchStart::After(s.resource_version()))
            .unwrap()
            .receiver;
        let graceful = DeleteOptions {
            grace_period_seconds: Some(5),
            ..Default::default()
        };
        let marked = s.delete(pods, Some("default"), "web", &graceful).unwrap();
        assert_eq!(
            marked["metadata"]["deletionTimestamp"],
            "2025-01-01T00:00:05Z"
        );
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 5);
        assert_eq!(marked["metadata"]["generation"], 2);
        assert!(s.get(pods, Some("default"), "web").is_ok());
        let wrong_uid = DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(delete::Preconditions {
                uid: Some("other".into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let err = s
            .delete(pods, Some("default"), "web", &wrong_uid)
            .unwrap_err();
        assert_eq!(err.code, 409);
        assert!(err.message.starts_with(
            r#"Operation cannot be fulfilled on Pod "web": the UID in the precondition (other)"#
        ));
        let final_delete = DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(delete::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        let gone = s
            .delete(pods, Some("default"), "web", &final_delete)
            .unwrap();
        assert_eq!(gone["kind"], "Pod");
        assert_eq!(s.get(pods, Some("default"), "web").unwrap_err().code, 404);
        let types: Vec<EventType> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| e.event_type)
            .collect();
        assert_eq!(
            types,
            [EventType::Modified, EventType::Modified, EventType::Deleted]
        );
    }

    #[test]
    fn finalizers_keep_objects_until_removed() {
        let s = store();
        let cms = rt("configmaps");
        let body = json!({"metadata": {"name": "c", "finalizers": ["example.com/keep"]}, "data": {"a": "1"}});
        s.create(cms, Some("default"), body, &WriteOptions::default())
            .unwrap();
        let marked = s
            .delete(cms, Some("default"), "c", &DeleteOptions::default())
            .unwrap();
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        let add = json!({"metadata": {"finalizers": ["example.com/keep", "x/y"]}});
        let err = s
            .patch(
                cms,
                Some("default"),
                "c",
                PatchType::Merge,
                &add,
                false,
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(err.code, 422);
        let remove = json!({"metadata": {"finalizers": null}});
        s.patch(
            cms,
            Some("default"),
            "c",
            PatchType::Merge,
            &remove,
            false,
            &WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(s.get(cms, Some("default"), "c").unwrap_err().code, 404);
    }

    #[test]
    fn watch_history_and_expiry() {
        let s = Store::new(fixed_clock("2025-01-01T00:00:00Z"), 3);
        let cms = rt("configmaps");
        for i in 0..5 {
            let body = json!({"metadata": {"name": format!("c{i}")}});
            s.create(cms, Some("default"), body, &WriteOptions::default())
                .unwrap();
        }
        // rv 1..12 are the namespaces and their objects, 13..17 the configmaps; history holds
        // 15, 16, 17.
        let started = s.watch(cms, WatchStart::After(15)).unwrap();
        let (events, rv) = (started.first, started.resource_version);
        assert_eq!(rv, 17);
        assert_eq!(
            events
                .iter()
                .map(|e| e.resource_version)
                .collect::<Vec<_>>(),
            [16, 17]
        );
        let err = s.watch(cms, WatchStart::After(2)).unwrap_err();
        assert_eq!((err.code, err.reason), (410, "Expired"));
        // Five created and four kube-root-ca.crt.
        let initial = s.watch(cms, WatchStart::InitialState).unwrap().first;
        assert_eq!(initial.len(), 9);
    }

    #[test]
    fn state_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let s = store();
        s.set_state_file(path.clone()).unwrap();
        s.create(
            rt("configmaps"),
            Some("default"),
            json!({"metadata": {"name": "c"}}),
            &WriteOptions::default(),
        )
        .unwrap();
        let t = store();
        t.set_state_file(path).unwrap();
        assert_eq!(t.resource_version(), s.resource_version());
        assert_eq!(
            t.get(rt("configmaps"), Some("default"), "c").unwrap(),
            s.get(rt("configmaps"), Some("default"), "c").unwrap()
        );
    }

    #[test]
    fn secrets_fold_string_data() {
        let s = store();
        let body = json!({"metadata": {"name": "s"}, "stringData": {"k": "foo"}});
        let secret = s
            .create(
                rt("secrets"),
                Some("default"),
                body,
                &WriteOptions::default(),
            )
            .unwrap()
            .object;
        assert_eq!(secret["data"]["k"], "Zm9v");
        assert_eq!(secret["type"], "Opaque");
        assert!(secret.get("stringData").is_none());
    }
}
