//! core/v1 Events and events.k8s.io/v1 Events share storage, as in the API server; these functions
//! are the field mapping of `pkg/apis/events/v1` conversion (core/v1 is the storage form here).

use serde_json::{Map, Value};

fn moved(from: &Map<String, Value>, to: &mut Map<String, Value>, from_key: &str, to_key: &str) {
    if let Some(v) = from.get(from_key) {
        if !v.is_null() {
            to.insert(to_key.to_string(), v.clone());
        }
    }
}

/// core/v1 Event → events.k8s.io/v1 Event.
pub fn core_to_events_v1(core: &Value) -> Value {
    let Some(c) = core.as_object() else {
        return core.clone();
    };
    let mut e = Map::new();
    e.insert("apiVersion".into(), Value::from("events.k8s.io/v1"));
    e.insert("kind".into(), Value::from("Event"));
    for (from, to) in [
        ("metadata", "metadata"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("reason", "reason"),
        ("involvedObject", "regarding"),
        ("related", "related"),
        ("message", "note"),
        ("type", "type"),
        ("source", "deprecatedSource"),
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
        ("count", "deprecatedCount"),
        ("series", "series"),
    ] {
        moved(c, &mut e, from, to);
    }
    let controller = c
        .get("reportingComponent")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| {
            c.get("source")
                .and_then(|s| s.get("component"))
                .and_then(Value::as_str)
        });
    if let Some(controller) = controller {
        e.insert("reportingController".into(), Value::from(controller));
    }
    let instance = c
        .get("reportingInstance")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| {
            c.get("source")
                .and_then(|s| s.get("host"))
                .and_then(Value::as_str)
        });
    if let Some(instance) = instance {
        e.insert("reportingInstance".into(), Value::from(instance));
    }
    Value::Object(e)
}

/// events.k8s.io/v1 Event → core/v1 Event.
pub fn events_v1_to_core(event: &Value) -> Value {
    let Some(e) = event.as_object() else {
        return event.clone();
    };
    let mut c = Map::new();
    c.insert("apiVersion".into(), Value::from("v1"));
    c.insert("kind".into(), Value::from("Event"));
    for (from, to) in [
        ("metadata", "metadata"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("reason", "reason"),
        ("regarding", "involvedObject"),
        ("related", "related"),
        ("note", "message"),
        ("type", "type"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
        ("series", "series"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
    ] {
        moved(e, &mut c, from, to);
    }
    Value::Object(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_mapping_both_ways() {
        let core = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
            "reason": "Started",
            "message": "Started container app",
            "type": "Normal",
            "source": {"component": "kubelet", "host": "node-1"},
            "count": 2,
            "firstTimestamp": "2025-01-01T00:00:00Z",
            "lastTimestamp": "2025-01-01T00:01:00Z"
        });
        let grouped = core_to_events_v1(&core);
        let cases: &[(&str, Value)] = &[
            ("/apiVersion", json!("events.k8s.io/v1")),
            ("/regarding/name", json!("web")),
            ("/note", json!("Started container app")),
            ("/reportingController", json!("kubelet")),
            ("/reportingInstance", json!("node-1")),
            ("/deprecatedCount", json!(2)),
            ("/deprecatedFirstTimestamp", json!("2025-01-01T00:00:00Z")),
        ];
        for (pointer, want) in cases {
            assert_eq!(grouped.pointer(pointer), Some(want), "{pointer}");
        }
        let back = events_v1_to_core(&grouped);
        for key in [
            "involvedObject",
            "reason",
            "message",
            "type",
            "source",
            "count",
            "firstTimestamp",
            "lastTimestamp",
        ] {
            assert_eq!(back.get(key), core.get(key), "{key}");
        }
        assert_eq!(back["reportingComponent"], "kubelet");
    }
}
