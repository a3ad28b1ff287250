//! Services as the API server treats them on create: the defaults of `SetDefaults_Service`
//! (type `ClusterIP`, `sessionAffinity: None`, port protocol `TCP`, `targetPort` = `port`,
//! single-stack IPv4) and a cluster IP from the service range, the first address of which is
//! the `kubernetes` service's, as the API server reserves it.
//!
//! Approximations: the range is fixed (10.96.0.0/16, kubeadm's default is a /12), a cluster IP
//! given in the request is taken as it is (the real allocator checks range and use), and
//! updates do not enforce the field's immutability.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::{json, Value};

/// The first address of the service range: the `kubernetes` service's cluster IP.
pub const MASTER_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);

/// The `kubernetes` service in `default`, as the API server's bootstrap controller keeps it:
/// port 443 (`https`) to the API server's own port.
pub fn master_service(api_server_port: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "type": "ClusterIP",
            "clusterIP": MASTER_SERVICE_IP.to_string(),
            "ports": [{
                "name": "https",
                "port": 443,
                "protocol": "TCP",
                "targetPort": api_server_port,
            }],
            "sessionAffinity": "None",
        },
    })
}

/// Fills what the API server fills in a new service; `used` holds the cluster IPs of the
/// services stored. Returns an error message for a range with no address left.
pub fn prepare_create(obj: &mut Value, used: &BTreeSet<String>) -> Result<(), String> {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        obj["spec"] = json!({});
        return prepare_create(obj, used);
    };
    spec.entry("type").or_insert(json!("ClusterIP"));
    spec.entry("sessionAffinity").or_insert(json!("None"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.entry("protocol").or_insert(json!("TCP"));
            if let Some(number) = port.get("port").cloned() {
                port.entry("targetPort").or_insert(number);
            }
        }
    }
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return Ok(());
    }
    let given = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let ip = if given.is_empty() {
        allocate(used).ok_or("the service range 10.96.0.0/16 has no address left")?
    } else {
        given
    };
    spec.insert("clusterIPs".into(), json!([ip]));
    spec.insert("clusterIP".into(), json!(ip));
    if ip != "None" {
        spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
    }
    spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
    spec.entry("internalTrafficPolicy")
        .or_insert(json!("Cluster"));
    Ok(())
}

/// The lowest free address of the range after the reserved first one.
fn allocate(used: &BTreeSet<String>) -> Option<String> {
    let base = u32::from(MASTER_SERVICE_IP);
    (1..0xffff)
        .map(|i| Ipv4Addr::from(base + i).to_string())
        .find(|ip| !used.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_defaults_and_allocation() {
        let used: BTreeSet<String> = ["10.96.0.1", "10.96.0.2"].map(String::from).into();
        let cases = [
            (
                "allocated, ports defaulted",
                json!({"spec": {"ports": [{"port": 80}]}}),
                json!({"type": "ClusterIP", "sessionAffinity": "None",
                       "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
                       "clusterIP": "10.96.0.3", "clusterIPs": ["10.96.0.3"],
                       "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                       "internalTrafficPolicy": "Cluster"}),
            ),
            (
                "headless stays headless",
                json!({"spec": {"clusterIP": "None", "ports": [{"port": 80, "targetPort": 8080}]}}),
                json!({"type": "ClusterIP", "sessionAffinity": "None",
                       "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}],
                       "clusterIP": "None", "clusterIPs": ["None"],
                       "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster"}),
            ),
            (
                "ExternalName gets no cluster IP",
                json!({"spec": {"type": "ExternalName", "externalName": "example.com"}}),
                json!({"type": "ExternalName", "externalName": "example.com",
                       "sessionAffinity": "None"}),
            ),
        ];
        for (name, mut obj, want) in cases {
            prepare_create(&mut obj, &used).unwrap();
            assert_eq!(obj["spec"], want, "{name}");
        }
    }

    #[test]
    fn master_service_points_at_the_api_server() {
        let s = master_service(6443);
        assert_eq!(s["spec"]["clusterIP"], "10.96.0.1");
        assert_eq!(s["spec"]["ports"][0]["port"], 443);
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 6443);
    }
}
