//! Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`): the columns
//! `kubectl get` shows for pods, nodes, events, namespaces, configmaps, secrets and leases, computed
//! like the API server's printers (`pkg/printers/internalversion/printers.go`).

use jiff::Timestamp;
use serde_json::{json, Value};

use crate::resource::ResourceType;

/// `duration.HumanDuration`: "5s", "2m30s", "3h", "4d5h", ...
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let d = (hours / 24) % 365;
        return if d == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{d}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn since(value: Option<&Value>, now: Timestamp) -> String {
    match value
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<Timestamp>().ok())
    {
        Some(t) => human_duration(now.as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.to_string()
    }
}

fn list<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn terminated_reason(t: &Value, prefix: &str) -> String {
    let reason = str_at(t, "/reason");
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    let signal = t.get("signal").and_then(Value::as_i64).unwrap_or(0);
    if signal != 0 {
        format!("{prefix}Signal:{signal}")
    } else {
        format!(
            "{prefix}ExitCode:{}",
            t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
        )
    }
}

/// The READY, STATUS and RESTARTS cells of `kubectl get pods`.
pub fn pod_status_cells(pod: &Value, now: Timestamp) -> (String, String, String) {
    let phase = str_at(pod, "/status/phase");
    let mut reason = if str_at(pod, "/status/reason").is_empty() {
        phase.to_string()
    } else {
        str_at(pod, "/status/reason").to_string()
    };
    let conditions = list(pod, "/status/conditions");
    if conditions
        .iter()
        .any(|c| str_at(c, "/type") == "PodScheduled" && str_at(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let init_specs = list(pod, "/spec/initContainers");
    let mut total = list(pod, "/spec/containers").len();
    let mut ready = 0;
    let mut restarts: i64 = 0;
    let mut sidecar_restarts: i64 = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_sidecar_restart: Option<Timestamp> = None;
    let finished_at = |s: &Value| {
        s.pointer("/lastState/terminated/finishedAt")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<Timestamp>().ok())
    };
    let mut initializing = false;
    for (i, status) in list(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        let count = status
            .get("restartCount")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        restarts += count;
        if let Some(t) = finished_at(status) {
            last_restart = last_restart.max(Some(t));
        }
        let name = str_at(status, "/name");
        let sidecar = init_specs
            .iter()
            .any(|c| str_at(c, "/name") == name && str_at(c, "/restartPolicy") == "Always");
        if sidecar {
            sidecar_restarts += count;
            if let Some(t) = finished_at(status) {
                last_sidecar_restart = last_sidecar_restart.max(Some(t));
            }
            if status.get("started").and_then(Value::as_bool) == Some(true) {
                total += 1;
                if status.get("ready").and_then(Value::as_bool) == Some(true) {
                    ready += 1;
                }
            }
            continue;
        }
        let terminated = status.pointer("/state/terminated");
        let waiting_reason = str_at(status, "/state/waiting/reason");
        match terminated {
            Some(t) if t.get("exitCode").and_then(Value::as_i64) == Some(0) => continue,
            Some(t) => reason = terminated_reason(t, "Init:"),
            None if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" => {
                reason = format!("Init:{waiting_reason}");
            }
            None => reason = format!("Init:{i}/{}", init_specs.len()),
        }
        initializing = true;
        break;
    }
    let initialized = conditions
        .iter()
        .any(|c| str_at(c, "/type") == "Initialized" && str_at(c, "/status") == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for status in list(pod, "/status/containerStatuses").iter().rev() {
            restarts += status
                .get("restartCount")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if let Some(t) = finished_at(status) {
                last_restart = last_restart.max(Some(t));
            }
            let waiting_reason = str_at(status, "/state/waiting/reason");
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(t) = status.pointer("/state/terminated") {
                reason = terminated_reason(t, "");
            } else if status.get("ready").and_then(Value::as_bool) == Some(true)
                && status.pointer("/state/running").is_some()
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| str_at(c, "/type") == "Ready" && str_at(c, "/status") == "True");
            reason = if pod_ready {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && str_at(pod, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts_text = match last_restart {
        Some(t) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            human_duration(now.as_second() - t.as_second())
        ),
        _ => restarts.to_string(),
    };
    (format!("{ready}/{total}"), reason, restarts_text)
}

fn column(name: &str, kind: &str, priority: u8) -> Value {
    let mut c =
        json!({"name": name, "type": kind, "format": "", "description": "", "priority": priority});
    if name == "Name" {
        c["format"] = json!("name");
    }
    c
}

fn columns_and_cells(rt: &ResourceType, obj: &Value, now: Timestamp) -> (Vec<Value>, Vec<Value>) {
    let name = str_at(obj, "/metadata/name").to_string();
    let age = since(obj.pointer("/metadata/creationTimestamp"), now);
    match (rt.group, rt.kind) {
        ("", "Pod") => {
            let (ready, status, restarts) = pod_status_cells(obj, now);
            let gates = list(obj, "/spec/readinessGates");
            let gates_text = if gates.is_empty() {
                "<none>".to_string()
            } else {
                let conditions = list(obj, "/status/conditions");
                let true_count = gates
                    .iter()
                    .filter(|g| {
                        let t = str_at(g, "/conditionType");
                        conditions
                            .iter()
                            .any(|c| str_at(c, "/type") == t && str_at(c, "/status") == "True")
                    })
                    .count();
                format!("{true_count}/{}", gates.len())
            };
            (
                vec![
                    column("Name", "string", 0),
                    column("Ready", "string", 0),
                    column("Status", "string", 0),
                    column("Restarts", "string", 0),
                    column("Age", "string", 0),
                    column("IP", "string", 1),
                    column("Node", "string", 1),
                    column("Nominated Node", "string", 1),
                    column("Readiness Gates", "string", 1),
                ],
                vec![
                    json!(name),
                    json!(ready),
                    json!(status),
                    json!(restarts),
                    json!(age),
                    json!(or_none(str_at(obj, "/status/podIP"))),
                    json!(or_none(str_at(obj, "/spec/nodeName"))),
                    json!(or_none(str_at(obj, "/status/nominatedNodeName"))),
                    json!(gates_text),
                ],
            )
        }
        ("", "Node") => {
            let ready = list(obj, "/status/conditions")
                .iter()
                .find(|c| str_at(c, "/type") == "Ready")
                .map(|c| str_at(c, "/status"));
            let mut status = match ready {
                Some("True") => "Ready".to_string(),
                Some("False") => "NotReady".to_string(),
                _ => "Unknown".to_string(),
            };
            if obj.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                status.push_str(",SchedulingDisabled");
            }
            let mut roles: Vec<String> = obj
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|labels| {
                    labels
                        .iter()
                        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
                            Some(role) if !role.is_empty() => Some(role.to_string()),
                            _ if k == "kubernetes.io/role" => v.as_str().map(String::from),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            roles.sort();
            let address = |kind: &str| {
                list(obj, "/status/addresses")
                    .iter()
                    .find(|a| str_at(a, "/type") == kind)
                    .map(|a| str_at(a, "/address").to_string())
                    .unwrap_or_else(|| "<none>".into())
            };
            (
                vec![
                    column("Name", "string", 0),
                    column("Status", "string", 0),
                    column("Roles", "string", 0),
                    column("Age", "string", 0),
                    column("Version", "string", 0),
                    column("Internal-IP", "string", 1),
                    column("External-IP", "string", 1),
                    column("OS-Image", "string", 1),
                    column("Kernel-Version", "string", 1),
                    column("Container-Runtime", "string", 1),
                ],
                vec![
                    json!(name),
                    json!(status),
                    json!(if roles.is_empty() {
                        "<none>".to_string()
                    } else {
                        roles.join(",")
                    }),
                    json!(age),
                    json!(str_at(obj, "/status/nodeInfo/kubeletVersion")),
                    json!(address("InternalIP")),
                    json!(address("ExternalIP")),
                    json!(or_none(str_at(obj, "/status/nodeInfo/osImage"))),
                    json!(or_none(str_at(obj, "/status/nodeInfo/kernelVersion"))),
                    json!(or_none(str_at(
                        obj,
                        "/status/nodeInfo/containerRuntimeVersion"
                    ))),
                ],
            )
        }
        ("", "Event") => {
            let first = obj
                .pointer("/firstTimestamp")
                .filter(|v| !v.is_null())
                .or_else(|| obj.pointer("/eventTime"));
            let last = obj
                .pointer("/lastTimestamp")
                .filter(|v| !v.is_null())
                .or(first);
            let count = obj.get("count").and_then(Value::as_i64).unwrap_or(0);
            let last_seen = if count > 1 {
                format!("{} (x{count} over {})", since(last, now), since(first, now))
            } else {
                since(last, now)
            };
            let source = {
                let component = str_at(obj, "/source/component");
                let component = if component.is_empty() {
                    str_at(obj, "/reportingComponent")
                } else {
                    component
                };
                let host = str_at(obj, "/source/host");
                if host.is_empty() {
                    component.to_string()
                } else {
                    format!("{component}, {host}")
                }
            };
            (
                vec![
                    column("Last Seen", "string", 0),
                    column("Type", "string", 0),
                    column("Reason", "string", 0),
                    column("Object", "string", 0),
                    column("Subobject", "string", 1),
                    column("Source", "string", 1),
                    column("Message", "string", 0),
                    column("First Seen", "string", 1),
                    column("Count", "string", 1),
                    column("Name", "string", 1),
                ],
                vec![
                    json!(last_seen),
                    json!(str_at(obj, "/type")),
                    json!(str_at(obj, "/reason")),
                    json!(format!(
                        "{}/{}",
                        str_at(obj, "/involvedObject/kind").to_lowercase(),
                        str_at(obj, "/involvedObject/name")
                    )),
                    json!(str_at(obj, "/involvedObject/fieldPath")),
                    json!(source),
                    json!(str_at(obj, "/message").trim()),
                    json!(since(first, now)),
                    json!(count),
                    json!(name),
                ],
            )
        }
        ("", "Namespace") => (
            vec![
                column("Name", "string", 0),
                column("Status", "string", 0),
                column("Age", "string", 0),
            ],
            vec![json!(name), json!(str_at(obj, "/status/phase")), json!(age)],
        ),
        ("", "ConfigMap") => {
            let data = obj
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
                + obj
                    .get("binaryData")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len());
            (
                vec![
                    column("Name", "string", 0),
                    column("Data", "integer", 0),
                    column("Age", "string", 0),
                ],
                vec![json!(name), json!(data), json!(age)],
            )
        }
        ("", "Secret") => {
            let data = obj
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
            (
                vec![
                    column("Name", "string", 0),
                    column("Type", "string", 0),
                    column("Data", "integer", 0),
                    column("Age", "string", 0),
                ],
                vec![
                    json!(name),
                    json!(str_at(obj, "/type")),
                    json!(data),
                    json!(age),
                ],
            )
        }
        ("", "ServiceAccount") => {
            let secrets = obj
                .get("secrets")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            (
                vec![
                    column("Name", "string", 0),
                    column("Secrets", "string", 0),
                    column("Age", "string", 0),
                ],
                vec![json!(name), json!(secrets), json!(age)],
            )
        }
        ("coordination.k8s.io", "Lease") => (
            vec![
                column("Name", "string", 0),
                column("Holder", "string", 0),
                column("Age", "string", 0),
            ],
            vec![
                json!(name),
                json!(str_at(obj, "/spec/holderIdentity")),
                json!(age),
            ],
        ),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            // kubectl's CSR printer: the conditions by type, `Issued` once there is a
            // certificate, `Pending` without either.
            let mut condition: Vec<String> = list(obj, "/status/conditions")
                .iter()
                .map(|c| str_at(c, "/type").to_string())
                .collect();
            if !str_at(obj, "/status/certificate").is_empty() {
                condition.push("Issued".into());
            }
            let condition = if condition.is_empty() {
                "Pending".to_string()
            } else {
                condition.join(",")
            };
            let requested = obj
                .pointer("/spec/expirationSeconds")
                .and_then(Value::as_i64)
                .map(|s| short_duration(s.max(0)))
                .unwrap_or_else(|| "<none>".into());
            (
                vec![
                    column("Name", "string", 0),
                    column("Age", "string", 0),
                    column("SignerName", "string", 0),
                    column("Requestor", "string", 0),
                    column("RequestedDuration", "string", 0),
                    column("Condition", "string", 0),
                ],
                vec![
                    json!(name),
                    json!(age),
                    json!(str_at(obj, "/spec/signerName")),
                    json!(str_at(obj, "/spec/username")),
                    json!(requested),
                    json!(condition),
                ],
            )
        }
        _ => (
            vec![column("Name", "string", 0), column("Age", "string", 0)],
            vec![json!(name), json!(age)],
        ),
    }
}

/// `10m`, `1h`, `2d`: a whole number of the largest unit that fits (kubectl's short form for
/// requested durations).
fn short_duration(seconds: i64) -> String {
    match seconds {
        s if s >= 86400 && s % 86400 == 0 => format!("{}d", s / 86400),
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A `meta.k8s.io/v1` Table of `items` (served objects).
pub fn table(rt: &ResourceType, items: &[Value], resource_version: &str, now: Timestamp) -> Value {
    let mut columns = None;
    let mut rows = Vec::new();
    for obj in items {
        let (cols, cells) = columns_and_cells(rt, obj, now);
        columns.get_or_insert(cols);
        rows.push(json!({
            "cells": cells,
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))
            }
        }));
    }
    let columns = columns.unwrap_or_else(|| columns_and_cells(rt, &json!({}), now).0);
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60 * 5, "3h5m"),
            (10 * 3600, "10h"),
            (3 * 86400 + 3600, "3d1h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400, "3y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(human_duration(seconds), want, "{seconds}");
        }
    }

    #[test]
    fn pod_status_column() {
        let now: Timestamp = "2025-01-01T01:00:00Z".parse().unwrap();
        let running =
            json!({"ready": true, "restartCount": 0, "state": {"running": {}}, "name": "a"});
        let crash = json!({"ready": false, "restartCount": 3, "name": "a",
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-01-01T00:59:00Z"}}});
        let done = json!({"ready": false, "restartCount": 0, "name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}});
        let killed = json!({"ready": false, "restartCount": 0, "name": "a", "state": {"terminated": {"exitCode": 137}}});
        let pod = |phase: &str, statuses: Vec<Value>, deleting: bool| {
            let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]},
                               "status": {"phase": phase, "containerStatuses": statuses}});
            if deleting {
                p["metadata"]["deletionTimestamp"] = json!("2025-01-01T01:00:30Z");
            }
            p
        };
        let init_pod = json!({"spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"running": {}}, "restartCount": 0}]}});
        let cases = [
            (pod("Pending", vec![], false), ("0/1", "Pending", "0")),
            (
                pod("Running", vec![running.clone()], false),
                ("1/1", "Running", "0"),
            ),
            (
                pod("Running", vec![running], true),
                ("1/1", "Terminating", "0"),
            ),
            (
                pod("Running", vec![crash], false),
                ("0/1", "CrashLoopBackOff", "3 (60s ago)"),
            ),
            (
                pod("Succeeded", vec![done.clone()], false),
                ("0/1", "Completed", "0"),
            ),
            (
                pod("Succeeded", vec![done], true),
                ("0/1", "Completed", "0"),
            ),
            (
                pod("Failed", vec![killed], false),
                ("0/1", "ExitCode:137", "0"),
            ),
            (init_pod, ("0/1", "Init:0/1", "0")),
        ];
        for (p, (ready, status, restarts)) in cases {
            let got = pod_status_cells(&p, now);
            assert_eq!(
                (got.0.as_str(), got.1.as_str(), got.2.as_str()),
                (ready, status, restarts),
                "{p}"
            );
        }
    }

    #[test]
    fn tables_have_columns_and_rows() {
        let now: Timestamp = "2025-01-01T00:10:00Z".parse().unwrap();
        let nodes = crate::resource::find_by_plural("", "v1", "nodes").unwrap();
        let node = json!({"metadata": {"name": "n1", "creationTimestamp": "2025-01-01T00:00:00Z",
                                       "labels": {"node-role.kubernetes.io/worker": ""}},
                          "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                     "nodeInfo": {"kubeletVersion": "nodelet-0.1"}}});
        let t = table(nodes, &[node], "7", now);
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["columnDefinitions"][1]["name"], "Status");
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "n1",
                "Ready",
                "worker",
                "10m",
                "nodelet-0.1",
                "<none>",
                "<none>",
                "<none>",
                "<none>",
                "<none>"
            ])
        );
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "n1");
        let empty = table(nodes, &[], "7", now);
        assert_eq!(empty["rows"], json!([]));
        assert_eq!(empty["columnDefinitions"][0]["name"], "Name");
    }
}
