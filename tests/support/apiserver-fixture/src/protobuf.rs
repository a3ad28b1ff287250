//! Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) for the
//! kinds kubectl sends that way: `kubectl create configmap|secret|namespace|serviceaccount` and
//! `kubectl create token` use typed clients that post protobuf. The envelope is `k8s\0` + `runtime.Unknown{typeMeta, raw}`; `raw` is the object
//! in the field numbering of `k8s.io/api/core/v1/generated.proto`. Answers are always JSON (typed
//! clients decode either).

use serde_json::{json, Map, Value};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    #[error("protobuf body does not start with the k8s magic number")]
    NoMagic,
    #[error("truncated or malformed protobuf at byte {0}")]
    Malformed(usize),
    #[error("protobuf bodies of kind {0:?} are not supported (send JSON)")]
    UnsupportedKind(String),
    #[error("protobuf field {0} is not decoded by the fixture (send JSON)")]
    UnsupportedField(String),
}

const MAGIC: &[u8] = b"k8s\0";

/// One field of a protobuf message.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .data
                .get(self.pos)
                .ok_or(ProtobufError::Malformed(self.pos))?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtobufError::Malformed(self.pos))
    }

    fn next_field(&mut self) -> Option<Result<(u64, Field<'a>), ProtobufError>> {
        if self.pos >= self.data.len() {
            return None;
        }
        Some(self.field())
    }

    fn field(&mut self) -> Result<(u64, Field<'a>), ProtobufError> {
        let key = self.varint()?;
        let (number, wire) = (key >> 3, key & 7);
        let field = match wire {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.pos += 8;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?)
                    .map_err(|_| ProtobufError::Malformed(self.pos))?;
                let end = self
                    .pos
                    .checked_add(len)
                    .filter(|e| *e <= self.data.len())
                    .ok_or(ProtobufError::Malformed(self.pos))?;
                let bytes = &self.data[self.pos..end];
                self.pos = end;
                Field::Bytes(bytes)
            }
            5 => {
                self.pos += 4;
                Field::Fixed
            }
            _ => return Err(ProtobufError::Malformed(self.pos)),
        };
        if self.pos > self.data.len() {
            return Err(ProtobufError::Malformed(self.pos));
        }
        Ok((number, field))
    }
}

fn fields(data: &[u8]) -> Result<Vec<(u64, Field<'_>)>, ProtobufError> {
    let mut reader = Reader { data, pos: 0 };
    let mut out = Vec::new();
    while let Some(f) = reader.next_field() {
        out.push(f?);
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                char::from(B64[((n >> (18 - 6 * i)) & 63) as usize])
            } else {
                '='
            });
        }
    }
    out
}

/// A `map<string, string>` (or `map<string, bytes>` rendered base64) entry.
fn map_entry(bytes: &[u8], base64_values: bool) -> Result<(String, Value), ProtobufError> {
    let mut key = String::new();
    let mut value = Value::from("");
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => key = text(b),
            (2, Field::Bytes(b)) => {
                value = if base64_values {
                    Value::from(base64(b))
                } else {
                    Value::from(text(b))
                }
            }
            _ => {}
        }
    }
    Ok((key, value))
}

fn insert_map(
    target: &mut Map<String, Value>,
    field: &str,
    bytes: &[u8],
    base64_values: bool,
) -> Result<(), ProtobufError> {
    let (k, v) = map_entry(bytes, base64_values)?;
    let entry = target.entry(field).or_insert_with(|| json!({}));
    if let Some(m) = entry.as_object_mut() {
        m.insert(k, v);
    }
    Ok(())
}

fn push_list(target: &mut Map<String, Value>, field: &str, value: Value) {
    let entry = target.entry(field).or_insert_with(|| json!([]));
    if let Some(list) = entry.as_array_mut() {
        list.push(value);
    }
}

fn object_meta(bytes: &[u8]) -> Result<Value, ProtobufError> {
    let mut m = Map::new();
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) if !b.is_empty() => {
                m.insert("name".into(), Value::from(text(b)));
            }
            (2, Field::Bytes(b)) if !b.is_empty() => {
                m.insert("generateName".into(), Value::from(text(b)));
            }
            (3, Field::Bytes(b)) if !b.is_empty() => {
                m.insert("namespace".into(), Value::from(text(b)));
            }
            (5, Field::Bytes(b)) if !b.is_empty() => {
                m.insert("uid".into(), Value::from(text(b)));
            }
            (6, Field::Bytes(b)) if !b.is_empty() => {
                m.insert("resourceVersion".into(), Value::from(text(b)));
            }
            (11, Field::Bytes(b)) => insert_map(&mut m, "labels", b, false)?,
            (12, Field::Bytes(b)) => insert_map(&mut m, "annotations", b, false)?,
            (14, Field::Bytes(b)) => push_list(&mut m, "finalizers", Value::from(text(b))),
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

fn config_map(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!("v1"));
    obj.insert("kind".into(), json!("ConfigMap"));
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            (2, Field::Bytes(b)) => insert_map(&mut obj, "data", b, false)?,
            (3, Field::Bytes(b)) => insert_map(&mut obj, "binaryData", b, true)?,
            (4, Field::Varint(v)) => {
                obj.insert("immutable".into(), Value::from(v != 0));
            }
            _ => {}
        }
    }
    Ok(Value::Object(obj))
}

fn secret(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!("v1"));
    obj.insert("kind".into(), json!("Secret"));
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            (2, Field::Bytes(b)) => insert_map(&mut obj, "data", b, true)?,
            (3, Field::Bytes(b)) if !b.is_empty() => {
                obj.insert("type".into(), Value::from(text(b)));
            }
            (4, Field::Bytes(b)) => insert_map(&mut obj, "stringData", b, false)?,
            (5, Field::Varint(v)) => {
                obj.insert("immutable".into(), Value::from(v != 0));
            }
            _ => {}
        }
    }
    Ok(Value::Object(obj))
}

fn namespace(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!("v1"));
    obj.insert("kind".into(), json!("Namespace"));
    for (n, f) in fields(raw)? {
        if let (1, Field::Bytes(b)) = (n, f) {
            obj.insert("metadata".into(), object_meta(b)?);
        }
    }
    Ok(Value::Object(obj))
}

/// `k8s.io.api.core.v1.ServiceAccount` (`kubectl create serviceaccount`).
fn service_account(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!("v1"));
    obj.insert("kind".into(), json!("ServiceAccount"));
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            (2, Field::Bytes(b)) => {
                // ObjectReference: name is field 3, namespace 2.
                let mut reference = Map::new();
                for (rn, rf) in fields(b)? {
                    match (rn, rf) {
                        (2, Field::Bytes(v)) if !v.is_empty() => {
                            reference.insert("namespace".into(), Value::from(text(v)));
                        }
                        (3, Field::Bytes(v)) if !v.is_empty() => {
                            reference.insert("name".into(), Value::from(text(v)));
                        }
                        _ => {}
                    }
                }
                push_list(&mut obj, "secrets", Value::Object(reference));
            }
            (3, Field::Bytes(b)) => {
                let mut name = String::new();
                for (rn, rf) in fields(b)? {
                    if let (1, Field::Bytes(v)) = (rn, rf) {
                        name = text(v);
                    }
                }
                push_list(&mut obj, "imagePullSecrets", json!({ "name": name }));
            }
            (4, Field::Varint(v)) => {
                obj.insert("automountServiceAccountToken".into(), Value::from(v != 0));
            }
            _ => {}
        }
    }
    Ok(Value::Object(obj))
}

/// `k8s.io.api.authentication.v1.TokenRequest` (`kubectl create token`): the spec's audiences
/// (1), boundObjectRef (3: kind 1, apiVersion 2, name 3, uid 4) and expirationSeconds (4).
fn token_request(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!("authentication.k8s.io/v1"));
    obj.insert("kind".into(), json!("TokenRequest"));
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            (2, Field::Bytes(b)) => {
                let mut spec = Map::new();
                for (sn, sf) in fields(b)? {
                    match (sn, sf) {
                        (1, Field::Bytes(v)) => {
                            push_list(&mut spec, "audiences", Value::from(text(v)))
                        }
                        (3, Field::Bytes(v)) => {
                            let mut reference = Map::new();
                            for (rn, rf) in fields(v)? {
                                let key = match rn {
                                    1 => "kind",
                                    2 => "apiVersion",
                                    3 => "name",
                                    4 => "uid",
                                    _ => continue,
                                };
                                if let Field::Bytes(t) = rf {
                                    reference.insert(key.into(), Value::from(text(t)));
                                }
                            }
                            spec.insert("boundObjectRef".into(), Value::Object(reference));
                        }
                        (4, Field::Varint(v)) => {
                            // int64 on the wire: a negative value is its two's complement.
                            spec.insert("expirationSeconds".into(), Value::from(v as i64));
                        }
                        _ => {}
                    }
                }
                obj.insert("spec".into(), Value::Object(spec));
            }
            _ => {}
        }
    }
    Ok(Value::Object(obj))
}

/// `meta.v1.Time` (seconds 1, nanos 2) as the API's RFC 3339 text.
fn time(bytes: &[u8]) -> Result<Value, ProtobufError> {
    let mut seconds = 0i64;
    for (n, f) in fields(bytes)? {
        if let (1, Field::Varint(v)) = (n, f) {
            seconds = v as i64;
        }
    }
    Ok(jiff::Timestamp::from_second(seconds)
        .map(|t| Value::from(crate::store::format_time(t)))
        .unwrap_or(Value::Null))
}

/// `k8s.io.api.certificates.v1.CertificateSigningRequest` (`kubectl certificate approve|deny`
/// writes the `/approval` subresource with it): metadata (1), spec (2: request 1, username 2,
/// uid 3, groups 4, usages 5, signerName 7, expirationSeconds 8), status (3: conditions 1 —
/// type 1, reason 2, message 3, lastUpdateTime 4, lastTransitionTime 5, status 6 —,
/// certificate 2). Byte fields are base64 in JSON.
fn certificate_signing_request(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!("certificates.k8s.io/v1"));
    obj.insert("kind".into(), json!("CertificateSigningRequest"));
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            (2, Field::Bytes(b)) => {
                let mut spec = Map::new();
                for (sn, sf) in fields(b)? {
                    match (sn, sf) {
                        (1, Field::Bytes(v)) => {
                            spec.insert("request".into(), Value::from(base64(v)));
                        }
                        (2, Field::Bytes(v)) => {
                            spec.insert("username".into(), Value::from(text(v)));
                        }
                        (3, Field::Bytes(v)) => {
                            spec.insert("uid".into(), Value::from(text(v)));
                        }
                        (4, Field::Bytes(v)) => {
                            push_list(&mut spec, "groups", Value::from(text(v)))
                        }
                        (5, Field::Bytes(v)) => {
                            push_list(&mut spec, "usages", Value::from(text(v)))
                        }
                        (7, Field::Bytes(v)) => {
                            spec.insert("signerName".into(), Value::from(text(v)));
                        }
                        (8, Field::Varint(v)) => {
                            spec.insert("expirationSeconds".into(), Value::from(v as i32));
                        }
                        _ => {}
                    }
                }
                obj.insert("spec".into(), Value::Object(spec));
            }
            (3, Field::Bytes(b)) => {
                let mut status = Map::new();
                for (sn, sf) in fields(b)? {
                    match (sn, sf) {
                        (1, Field::Bytes(c)) => {
                            let mut condition = Map::new();
                            for (cn, cf) in fields(c)? {
                                let (key, value) = match (cn, cf) {
                                    (1, Field::Bytes(v)) => ("type", Value::from(text(v))),
                                    (2, Field::Bytes(v)) => ("reason", Value::from(text(v))),
                                    (3, Field::Bytes(v)) => ("message", Value::from(text(v))),
                                    (4, Field::Bytes(v)) => ("lastUpdateTime", time(v)?),
                                    (5, Field::Bytes(v)) => ("lastTransitionTime", time(v)?),
                                    (6, Field::Bytes(v)) => ("status", Value::from(text(v))),
                                    _ => continue,
                                };
                                condition.insert(key.into(), value);
                            }
                            push_list(&mut status, "conditions", Value::Object(condition));
                        }
                        (2, Field::Bytes(v)) if !v.is_empty() => {
                            status.insert("certificate".into(), Value::from(base64(v)));
                        }
                        _ => {}
                    }
                }
                obj.insert("status".into(), Value::Object(status));
            }
            _ => {}
        }
    }
    Ok(Value::Object(obj))
}

/// True when a field holds only zero values: the Go marshaller writes every non-pointer field,
/// so a field the fixture does not decode is refused only when it says something.
fn is_zero(field: &Field<'_>) -> bool {
    match field {
        Field::Varint(v) => *v == 0,
        Field::Fixed => false,
        Field::Bytes(b) => {
            b.is_empty() || fields(b).is_ok_and(|fs| fs.iter().all(|(_, f)| is_zero(f)))
        }
    }
}

/// The fields a message of `what` does not decode must be zero.
fn unknown(what: &str, number: u64, field: &Field<'_>) -> Result<(), ProtobufError> {
    if is_zero(field) {
        Ok(())
    } else {
        Err(ProtobufError::UnsupportedField(format!("{what}.{number}")))
    }
}

fn set_text(m: &mut Map<String, Value>, key: &str, b: &[u8]) {
    if !b.is_empty() {
        m.insert(key.into(), Value::from(text(b)));
    }
}

fn set_true(m: &mut Map<String, Value>, key: &str, v: u64) {
    if v != 0 {
        m.insert(key.into(), Value::from(true));
    }
}

/// `core/v1` Container (the fields `kubectl debug` and `kubectl run` set).
fn container(bytes: &[u8]) -> Result<Value, ProtobufError> {
    let mut c = Map::new();
    for (n, f) in fields(bytes)? {
        match (n, &f) {
            (1, Field::Bytes(b)) => set_text(&mut c, "name", b),
            (2, Field::Bytes(b)) => set_text(&mut c, "image", b),
            (3, Field::Bytes(b)) => push_list(&mut c, "command", Value::from(text(b))),
            (4, Field::Bytes(b)) => push_list(&mut c, "args", Value::from(text(b))),
            (5, Field::Bytes(b)) => set_text(&mut c, "workingDir", b),
            (7, Field::Bytes(b)) => {
                let mut env = Map::new();
                for (en, ef) in fields(b)? {
                    match (en, &ef) {
                        (1, Field::Bytes(v)) => set_text(&mut env, "name", v),
                        (2, Field::Bytes(v)) => set_text(&mut env, "value", v),
                        _ => unknown("Container.env", en, &ef)?,
                    }
                }
                push_list(&mut c, "env", Value::Object(env));
            }
            (9, Field::Bytes(b)) => {
                let mut mount = Map::new();
                for (mn, mf) in fields(b)? {
                    match (mn, &mf) {
                        (1, Field::Bytes(v)) => set_text(&mut mount, "name", v),
                        (2, Field::Varint(v)) => set_true(&mut mount, "readOnly", *v),
                        (3, Field::Bytes(v)) => set_text(&mut mount, "mountPath", v),
                        _ => unknown("Container.volumeMounts", mn, &mf)?,
                    }
                }
                push_list(&mut c, "volumeMounts", Value::Object(mount));
            }
            (13, Field::Bytes(b)) => set_text(&mut c, "terminationMessagePath", b),
            (14, Field::Bytes(b)) => set_text(&mut c, "imagePullPolicy", b),
            (16, Field::Varint(v)) => set_true(&mut c, "stdin", *v),
            (17, Field::Varint(v)) => set_true(&mut c, "stdinOnce", *v),
            (18, Field::Varint(v)) => set_true(&mut c, "tty", *v),
            (20, Field::Bytes(b)) => set_text(&mut c, "terminationMessagePolicy", b),
            _ => unknown("Container", n, &f)?,
        }
    }
    Ok(Value::Object(c))
}

/// `core/v1` Pod as `kubectl debug node/…` and `kubectl run` post it: metadata, the spec fields
/// they set (containers, hostPath volumes, host namespaces, node name, tolerations); any other
/// field that is not zero is refused.
fn pod(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!("v1"));
    obj.insert("kind".into(), json!("Pod"));
    for (n, f) in fields(raw)? {
        match (n, &f) {
            (1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            (2, Field::Bytes(b)) => {
                let mut spec = Map::new();
                for (sn, sf) in fields(b)? {
                    match (sn, &sf) {
                        (1, Field::Bytes(v)) => {
                            let mut volume = Map::new();
                            for (vn, vf) in fields(v)? {
                                match (vn, &vf) {
                                    (1, Field::Bytes(name)) => set_text(&mut volume, "name", name),
                                    (2, Field::Bytes(source)) => {
                                        for (kn, kf) in fields(source)? {
                                            let (1, Field::Bytes(host)) = (kn, &kf) else {
                                                unknown("VolumeSource", kn, &kf)?;
                                                continue;
                                            };
                                            let mut host_path = Map::new();
                                            for (hn, hf) in fields(host)? {
                                                match (hn, &hf) {
                                                    (1, Field::Bytes(p)) => {
                                                        set_text(&mut host_path, "path", p)
                                                    }
                                                    (2, Field::Bytes(t)) => {
                                                        set_text(&mut host_path, "type", t)
                                                    }
                                                    _ => unknown("HostPathVolumeSource", hn, &hf)?,
                                                }
                                            }
                                            volume.insert(
                                                "hostPath".into(),
                                                Value::Object(host_path),
                                            );
                                        }
                                    }
                                    _ => unknown("Volume", vn, &vf)?,
                                }
                            }
                            push_list(&mut spec, "volumes", Value::Object(volume));
                        }
                        (2, Field::Bytes(v)) => push_list(&mut spec, "containers", container(v)?),
                        (3, Field::Bytes(v)) => set_text(&mut spec, "restartPolicy", v),
                        (4, Field::Varint(v)) => {
                            spec.insert(
                                "terminationGracePeriodSeconds".into(),
                                Value::from(*v as i64),
                            );
                        }
                        (6, Field::Bytes(v)) => set_text(&mut spec, "dnsPolicy", v),
                        (8, Field::Bytes(v)) => set_text(&mut spec, "serviceAccountName", v),
                        (9, Field::Bytes(_)) => {}
                        (10, Field::Bytes(v)) => set_text(&mut spec, "nodeName", v),
                        (11, Field::Varint(v)) => set_true(&mut spec, "hostNetwork", *v),
                        (12, Field::Varint(v)) => set_true(&mut spec, "hostPID", *v),
                        (13, Field::Varint(v)) => set_true(&mut spec, "hostIPC", *v),
                        (19, Field::Bytes(v)) => set_text(&mut spec, "schedulerName", v),
                        (22, Field::Bytes(v)) => {
                            let mut toleration = Map::new();
                            for (tn, tf) in fields(v)? {
                                match (tn, &tf) {
                                    (1, Field::Bytes(t)) => set_text(&mut toleration, "key", t),
                                    (2, Field::Bytes(t)) => {
                                        set_text(&mut toleration, "operator", t)
                                    }
                                    (3, Field::Bytes(t)) => set_text(&mut toleration, "value", t),
                                    (4, Field::Bytes(t)) => set_text(&mut toleration, "effect", t),
                                    _ => unknown("Toleration", tn, &tf)?,
                                }
                            }
                            push_list(&mut spec, "tolerations", Value::Object(toleration));
                        }
                        _ => unknown("PodSpec", sn, &sf)?,
                    }
                }
                obj.insert("spec".into(), Value::Object(spec));
            }
            // The status a client sends is ignored on create, as the API server ignores it.
            (3, _) => {}
            _ => unknown("Pod", n, &f)?,
        }
    }
    Ok(Value::Object(obj))
}

/// Decodes a protobuf request body to the JSON form of the object.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let unknown = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (n, f) in fields(unknown)? {
        match (n, f) {
            (1, Field::Bytes(type_meta)) => {
                for (tn, tf) in fields(type_meta)? {
                    if let (2, Field::Bytes(k)) = (tn, tf) {
                        kind = text(k);
                    }
                }
            }
            (2, Field::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    match kind.as_str() {
        "ConfigMap" => config_map(raw),
        "Secret" => secret(raw),
        "Namespace" => namespace(raw),
        "ServiceAccount" => service_account(raw),
        "TokenRequest" => token_request(raw),
        "CertificateSigningRequest" => certificate_signing_request(raw),
        "Pod" => pod(raw),
        other => Err(ProtobufError::UnsupportedKind(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Bodies captured from `kubectl create configmap cfg --from-literal=a=1` and
    // `kubectl create secret generic s1 --from-literal=p=secret` (kubectl v1.32).
    const CONFIGMAP: &[u8] = b"k8s\0\n\x0f\n\x02v1\x12\tConfigMap\x12\x1d\n\x13\n\x03cfg\x12\0\x1a\0\"\0*\x002\x008\0B\0\x12\x06\n\x01a\x12\x011\x1a\0\"\0";
    const SECRET: &[u8] = b"k8s\0\n\x0c\n\x02v1\x12\x06Secret\x12#\n\x12\n\x02s1\x12\0\x1a\0\"\0*\x002\x008\0B\0\x12\x0b\n\x01p\x12\x06secret\x1a\0\x1a\0\"\0";

    #[test]
    fn decodes_kubectl_bodies() {
        let cases = [
            (
                CONFIGMAP,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}),
            ),
            (
                SECRET,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}, "data": {"p": "c2VjcmV0"}}),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(decode(body).unwrap(), want);
        }
    }

    /// A length-delimited field (lengths here stay below 128: one-byte varints).
    fn bytes_field(number: u8, data: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3) | 2, u8::try_from(data.len()).unwrap()];
        out.extend_from_slice(data);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [
            bytes_field(1, api_version.as_bytes()),
            bytes_field(2, kind.as_bytes()),
        ]
        .concat();
        [
            MAGIC.to_vec(),
            bytes_field(1, &type_meta),
            bytes_field(2, raw),
        ]
        .concat()
    }

    #[test]
    fn decodes_service_accounts_and_token_requests() {
        let meta = bytes_field(1, &bytes_field(1, b"builder"));
        let account = [
            meta.clone(),
            bytes_field(2, &bytes_field(3, b"builder-token")),
            bytes_field(3, &bytes_field(1, b"registry")),
            vec![4 << 3, 0],
        ]
        .concat();
        let bound = [
            bytes_field(1, b"Pod"),
            bytes_field(2, b"v1"),
            bytes_field(3, b"web"),
            bytes_field(4, b"u1"),
        ]
        .concat();
        // expirationSeconds 1200 as a varint: 0xb0 0x09.
        let spec = [
            bytes_field(1, b"vault"),
            bytes_field(3, &bound),
            vec![4 << 3, 0xb0, 0x09],
        ]
        .concat();
        let request = [meta, bytes_field(2, &spec)].concat();
        let cases = [
            (
                envelope("v1", "ServiceAccount", &account),
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"},
                       "secrets": [{"name": "builder-token"}], "imagePullSecrets": [{"name": "registry"}],
                       "automountServiceAccountToken": false}),
            ),
            (
                envelope("authentication.k8s.io/v1", "TokenRequest", &request),
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": "builder"},
                       "spec": {"audiences": ["vault"], "expirationSeconds": 1200,
                                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "u1"}}}),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(decode(&body).unwrap(), want);
        }
    }

    #[test]
    fn rejects_bad_bodies() {
        let cases: [(&[u8], ProtobufError); 3] = [
            (b"{}", ProtobufError::NoMagic),
            (b"k8s\0\n\x05\n\x02v1", ProtobufError::Malformed(2)),
            (
                b"k8s\0\n\x09\n\x02v1\x12\x03Job",
                ProtobufError::UnsupportedKind("Job".into()),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(decode(body).unwrap_err(), want, "{body:?}");
        }
    }

    /// A field's key as a varint (numbers from 16 take two bytes).
    fn key(number: u8, wire: u8) -> Vec<u8> {
        let k = (u16::from(number) << 3) | u16::from(wire);
        if k < 0x80 {
            vec![u8::try_from(k).unwrap()]
        } else {
            vec![
                u8::try_from(k & 0x7f).unwrap() | 0x80,
                u8::try_from(k >> 7).unwrap(),
            ]
        }
    }

    fn long_field(number: u8, data: &[u8]) -> Vec<u8> {
        [
            key(number, 2),
            vec![u8::try_from(data.len()).unwrap()],
            data.to_vec(),
        ]
        .concat()
    }

    #[test]
    fn decodes_a_debug_pod_and_refuses_what_it_does_not_decode() {
        let varint = |number: u8, v: u8| [key(number, 0), vec![v]].concat();
        let bytes_field = long_field;
        let meta = bytes_field(1, b"dbg");
        let container = [
            bytes_field(1, b"debugger"),
            bytes_field(2, b"busybox"),
            bytes_field(3, b"sh"),
            bytes_field(14, b"Never"),
            // An empty resources message and a false stdin: zero, so not refused.
            bytes_field(8, b""),
            varint(16, 0),
        ]
        .concat();
        let host_path = bytes_field(1, &bytes_field(1, b"/"));
        let volume = [bytes_field(1, b"host-root"), bytes_field(2, &host_path)].concat();
        let spec = [
            bytes_field(1, &volume),
            bytes_field(2, &container),
            bytes_field(10, b"n1"),
            varint(11, 1),
            varint(12, 1),
            bytes_field(22, &bytes_field(2, b"Exists")),
        ]
        .concat();
        let raw = [bytes_field(1, &meta), bytes_field(2, &spec)].concat();
        assert_eq!(
            decode(&envelope("v1", "Pod", &raw)).unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "dbg"},
                "spec": {
                    "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
                    "containers": [{"name": "debugger", "image": "busybox", "command": ["sh"], "imagePullPolicy": "Never"}],
                    "nodeName": "n1",
                    "hostNetwork": true,
                    "hostPID": true,
                    "tolerations": [{"operator": "Exists"}],
                }
            })
        );
        // runtimeClassName (29) says something the fixture does not decode: refused.
        let spec = [spec, bytes_field(29, b"gvisor")].concat();
        let raw = [bytes_field(1, &meta), bytes_field(2, &spec)].concat();
        assert_eq!(
            decode(&envelope("v1", "Pod", &raw)),
            Err(ProtobufError::UnsupportedField("PodSpec.29".into()))
        );
    }
}
