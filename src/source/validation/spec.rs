//! Pod-level settings outside containers and volumes: the DNS configuration, tolerations, and
//! host ports, which must be unique across the containers that run at the same time.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, PodDNSConfig, Toleration};

use super::{s, Errors};
use crate::podspec::field::{
    dns1123_subdomain, ip_address, label_value, qualified_name, FieldError, FieldPath,
};

pub(super) fn validate_dns_config(
    config: Option<&PodDNSConfig>,
    policy: &str,
    path: &FieldPath,
    errs: &mut Errors,
) {
    if policy == "None" {
        match config {
            None => {
                errs.push(FieldError::required(
                    path,
                    "must provide `dnsConfig` when `dnsPolicy` is None",
                ));
                return;
            }
            Some(c) if c.nameservers.as_ref().is_none_or(Vec::is_empty) => {
                errs.push(FieldError::required(
                    &path.child("nameservers"),
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                ));
                return;
            }
            Some(_) => {}
        }
    }
    let Some(config) = config else { return };
    let nameservers = config.nameservers.as_deref().unwrap_or(&[]);
    if nameservers.len() > 3 {
        errs.push(FieldError::invalid(
            &path.child("nameservers"),
            nameservers.join(","),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, ns) in nameservers.iter().enumerate() {
        for msg in ip_address(ns) {
            errs.push(FieldError::invalid(
                &path.child("nameservers").index(i),
                ns,
                msg,
            ));
        }
    }
    let searches = config.searches.as_deref().unwrap_or(&[]);
    if searches.len() > 32 {
        errs.push(FieldError::invalid(
            &path.child("searches"),
            searches.join(" "),
            "must not have more than 32 search paths",
        ));
    }
    if searches.join(" ").len() > 2048 {
        errs.push(FieldError::invalid(
            &path.child("searches"),
            searches.join(" "),
            "must not have more than 2048 characters (including spaces) in the search list",
        ));
    }
    for (i, search) in searches.iter().enumerate() {
        // RelaxedDNSSearchValidation (GA): "." alone and underscores are allowed.
        if search == "." {
            continue;
        }
        let trimmed = search.trim_end_matches('.').replace('_', "a");
        for msg in dns1123_subdomain(&trimmed) {
            errs.push(FieldError::invalid(
                &path.child("searches").index(i),
                search,
                msg,
            ));
        }
    }
    for (i, opt) in config.options.iter().flatten().enumerate() {
        if s(&opt.name).is_empty() {
            errs.push(FieldError::required(
                &path.child("options").index(i),
                "must not be empty",
            ));
        }
    }
}

pub(super) fn validate_tolerations(
    tolerations: &[Toleration],
    path: &FieldPath,
    errs: &mut Errors,
) {
    for (i, t) in tolerations.iter().enumerate() {
        let tpath = path.index(i);
        let key = s(&t.key);
        let operator = s(&t.operator);
        let effect = s(&t.effect);
        let value = s(&t.value);
        if !key.is_empty() {
            for msg in qualified_name(key) {
                errs.push(FieldError::invalid(&tpath.child("key"), key, msg));
            }
        }
        if key.is_empty() && operator != "Exists" {
            errs.push(FieldError::invalid(
                &tpath.child("operator"),
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.toleration_seconds.is_some() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                &tpath.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let msgs = label_value(value);
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(
                        &tpath.child("operator"),
                        value,
                        msgs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(FieldError::invalid(
                        &tpath.child("operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &tpath.child("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
        {
            errs.push(FieldError::not_supported(
                &tpath.child("effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
}

pub(super) fn check_host_port_conflicts<'a>(
    containers: impl Iterator<Item = (usize, &'a Container)>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let mut seen = BTreeSet::new();
    for (ci, c) in containers {
        for (pi, p) in c.ports.iter().flatten().enumerate() {
            let hp = p.host_port.unwrap_or(0);
            if hp == 0 {
                continue;
            }
            let key = format!("{}/{}/{}", s(&p.protocol), s(&p.host_ip), hp);
            if !seen.insert(key.clone()) {
                errs.push(FieldError::duplicate(
                    &path.index(ci).child("ports").index(pi).child("hostPort"),
                    key,
                ));
            }
        }
    }
}
