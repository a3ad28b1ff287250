//! Resource names and quantities: the pod overhead and container requests and limits, with the
//! rules for extended resources and hugepages (no overcommit, whole numbers).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::{Errors, IS_NEGATIVE, QUANTITY_REGEX_ERR};
use crate::podspec::field::{qualified_name, FieldError, FieldPath};
use crate::quantity::Quantity;

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// No `/`, or in the `kubernetes.io/` domain (`IsNativeResource`).
fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn is_extended_resource(name: &str) -> bool {
    !is_native_resource(name)
        && !name.starts_with("requests.")
        && qualified_name(&format!("requests.{name}")).is_empty()
}

/// Requests may be below limits only for overcommittable resources (native, not hugepages).
fn is_overcommit_allowed(name: &str) -> bool {
    is_native_resource(name) && !is_hugepages(name)
}

fn validate_resource_name(name: &str, path: &FieldPath, errs: &mut Errors) {
    for msg in qualified_name(name) {
        errs.push(FieldError::invalid(path, name, msg));
    }
    if !name.contains('/') {
        let standard = matches!(name, "cpu" | "memory" | "ephemeral-storage") || is_hugepages(name);
        if !standard {
            errs.push(FieldError::invalid(
                path,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native_resource(name) && !is_extended_resource(name) {
        errs.push(FieldError::invalid(
            path,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
}

/// Parse and range-check one quantity; `None` when it is unusable (error already recorded).
fn validate_quantity(
    name: &str,
    q: &K8sQuantity,
    path: &FieldPath,
    errs: &mut Errors,
) -> Option<Quantity> {
    let parsed = match Quantity::try_from(q) {
        Ok(p) => p,
        Err(_) => {
            errs.push(FieldError::invalid(path, &q.0, QUANTITY_REGEX_ERR));
            return None;
        }
    };
    if parsed < Quantity::default() {
        errs.push(FieldError::invalid(path, &q.0, IS_NEGATIVE));
    }
    if is_extended_resource(name) && parsed.milli_value() % 1000 != 0 {
        errs.push(FieldError::invalid(path, &q.0, "must be an integer"));
    }
    Some(parsed)
}

pub(super) fn validate_resource_list(
    list: &BTreeMap<String, K8sQuantity>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    for (name, q) in list {
        let qpath = path.key(name);
        validate_resource_name(name, &qpath, errs);
        validate_quantity(name, q, &qpath, errs);
    }
}

pub(super) fn validate_resources(
    limits: Option<&BTreeMap<String, K8sQuantity>>,
    requests: Option<&BTreeMap<String, K8sQuantity>>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let lim_path = path.child("limits");
    let req_path = path.child("requests");
    let mut parsed_limits = BTreeMap::new();
    let mut cpu_or_memory = false;
    let mut hugepages = false;
    for (name, q) in limits.into_iter().flatten() {
        let qpath = lim_path.key(name);
        validate_resource_name(name, &qpath, errs);
        if let Some(p) = validate_quantity(name, q, &qpath, errs) {
            parsed_limits.insert(name.as_str(), (p, q));
        }
        cpu_or_memory |= name == "cpu" || name == "memory";
        hugepages |= is_hugepages(name);
    }
    for (name, q) in requests.into_iter().flatten() {
        let qpath = req_path.key(name);
        validate_resource_name(name, &qpath, errs);
        let parsed = validate_quantity(name, q, &qpath, errs);
        cpu_or_memory |= name == "cpu" || name == "memory";
        hugepages |= is_hugepages(name);
        match (parsed, parsed_limits.get(name.as_str())) {
            (Some(req), Some((lim, lim_raw))) => {
                if req != *lim && !is_overcommit_allowed(name) {
                    errs.push(FieldError::invalid(
                        &req_path,
                        &q.0,
                        format!("must be equal to {name} limit of {}", lim_raw.0),
                    ));
                } else if req > *lim {
                    errs.push(FieldError::invalid(
                        &req_path,
                        &q.0,
                        format!(
                            "must be less than or equal to {name} limit of {}",
                            lim_raw.0
                        ),
                    ));
                }
            }
            (_, None)
                if !is_overcommit_allowed(name)
                    && !limits.is_some_and(|l| l.contains_key(name)) =>
            {
                errs.push(FieldError::required(
                    &lim_path,
                    "Limit must be set for non overcommitable resources",
                ));
            }
            _ => {}
        }
    }
    if hugepages && !cpu_or_memory {
        errs.push(FieldError::forbidden(
            path,
            "HugePages require cpu or memory",
        ));
    }
}

#[cfg(test)]
mod tests {
    use crate::source::validation::test_support::{errors_for, with_container};

    #[test]
    fn resource_rules() {
        let r = "spec.containers[0].resources";
        let res = |yaml: &str| with_container(&format!("    resources:\n{yaml}"));
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                res("      limits: {cpu: '1'}\n      requests: {cpu: '2'}\n"),
                vec![format!("{r}.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1")],
            ),
            (
                res("      limits: {memory: lots}\n"),
                vec![
                    format!("{r}.limits[memory]: Invalid value: \"lots\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
                    format!("{r}.requests[memory]: Invalid value: \"lots\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
                ],
            ),
            (
                res("      requests: {cpu: '-1'}\n"),
                vec![format!("{r}.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0")],
            ),
            (
                res("      requests: {gpu: '1'}\n"),
                vec![format!("{r}.requests[gpu]: Invalid value: \"gpu\": must be a standard resource for containers")],
            ),
            (
                res("      requests: {example.com/gpu: '1'}\n"),
                vec![format!("{r}.limits: Required value: Limit must be set for non overcommitable resources")],
            ),
            (
                res("      limits: {example.com/gpu: '2'}\n      requests: {example.com/gpu: '1'}\n"),
                vec![format!("{r}.requests: Invalid value: \"1\": must be equal to example.com/gpu limit of 2")],
            ),
            (
                res("      limits: {example.com/gpu: 500m}\n"),
                vec![
                    format!("{r}.limits[example.com/gpu]: Invalid value: \"500m\": must be an integer"),
                    format!("{r}.requests[example.com/gpu]: Invalid value: \"500m\": must be an integer"),
                ],
            ),
            (
                res("      limits: {hugepages-2Mi: 4Mi}\n"),
                vec![format!("{r}: Forbidden: HugePages require cpu or memory")],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }
}
