//! Containers and init containers: names, images, ports, restart policies and rules, the
//! container security context and seccomp profiles. The fields with areas of their own (env,
//! mounts, resources, probes, lifecycle) are checked by the sibling modules from here.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Container, ContainerRestartRule, SeccompProfile, SecurityContext,
};

use super::env::{validate_env, validate_env_from};
use super::lifecycle::{validate_lifecycle, validate_probes, validate_stop_signal};
use super::resources::validate_resources;
use super::spec::check_host_port_conflicts;
use super::volumes::{
    validate_local_descending_path, validate_volume_devices, validate_volume_mounts,
};
use super::{s, Errors, PodContext};
use crate::podspec::field::{
    dns1123_label, inclusive_range_error, port_name, port_num, FieldError, FieldPath,
};

const MAX_RESTART_RULES: usize = 20;
const MAX_EXIT_CODE_VALUES: usize = 255;

pub(super) fn validate_containers(
    containers: &[Container],
    ctx: &PodContext<'_>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    if containers.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let mut names = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        let cpath = path.index(i);
        validate_container_common(c, ctx, &cpath, errs);
        if !names.insert(c.name.as_str()) {
            errs.push(FieldError::duplicate(&cpath.child("name"), &c.name));
        }
        if let Some(l) = &c.lifecycle {
            validate_lifecycle(l, ctx.grace_period, &cpath.child("lifecycle"), errs);
            validate_stop_signal(l, ctx.os, &cpath.child("lifecycle"), errs);
        }
        validate_probes(c, &cpath, errs);
        validate_container_restart(c, false, &cpath, errs);
    }
    check_host_port_conflicts(containers.iter().enumerate(), path, errs);
}

pub(super) fn validate_init_containers(
    inits: &[Container],
    regular: &[Container],
    ctx: &PodContext<'_>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let mut names: BTreeSet<&str> = regular.iter().map(|c| c.name.as_str()).collect();
    for (i, c) in inits.iter().enumerate() {
        let cpath = path.index(i);
        validate_container_common(c, ctx, &cpath, errs);
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        validate_container_restart(c, true, &cpath, errs);
        if names.contains(c.name.as_str()) {
            errs.push(FieldError::duplicate(&cpath.child("name"), &c.name));
        } else if !c.name.is_empty() {
            names.insert(c.name.as_str());
        }
        // Init containers run one at a time, so only ports within one container can clash.
        check_host_port_conflicts(std::iter::once((i, c)), path, errs);
        if sidecar {
            if let Some(l) = &c.lifecycle {
                validate_lifecycle(l, ctx.grace_period, &cpath.child("lifecycle"), errs);
                validate_stop_signal(l, ctx.os, &cpath.child("lifecycle"), errs);
            }
            validate_probes(c, &cpath, errs);
        } else {
            for (field, set) in [
                ("lifecycle", c.lifecycle.is_some()),
                ("livenessProbe", c.liveness_probe.is_some()),
                ("readinessProbe", c.readiness_probe.is_some()),
                ("startupProbe", c.startup_probe.is_some()),
            ] {
                if set {
                    errs.push(FieldError::forbidden(
                        &cpath.child(field),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
            if c.resize_policy.as_ref().is_some_and(|r| !r.is_empty()) {
                errs.push(FieldError::invalid(
                    &cpath.child("resizePolicy"),
                    "",
                    "must not be set for init containers",
                ));
            }
        }
    }
}

/// Container-level `restartPolicy` / `restartPolicyRules` (the ContainerRestartRules and
/// RestartAllContainersOnContainerExits features, as the seed documents them): any container may
/// override the pod's policy; rules need an explicit policy; a sidecar (init container with
/// `Always`) may only carry `RestartAllContainers` rules.
fn validate_container_restart(c: &Container, is_init: bool, path: &FieldPath, errs: &mut Errors) {
    let rules: &[ContainerRestartRule] = c.restart_policy_rules.as_deref().unwrap_or(&[]);
    let policy_path = path.child("restartPolicy");
    let sidecar = is_init && c.restart_policy.as_deref() == Some("Always");
    match c.restart_policy.as_deref() {
        None => {
            if !rules.is_empty() {
                errs.push(FieldError::required(
                    &policy_path,
                    "must specify restartPolicy when restart rules are used",
                ));
            }
        }
        Some("Always" | "OnFailure" | "Never") => {}
        Some(other) => errs.push(FieldError::not_supported(
            &policy_path,
            other,
            &["Always", "Never", "OnFailure"],
        )),
    }
    let rules_path = path.child("restartPolicyRules");
    if rules.len() > MAX_RESTART_RULES {
        errs.push(FieldError::too_many(
            &rules_path,
            rules.len(),
            MAX_RESTART_RULES,
        ));
    }
    let actions: &[&str] = if sidecar {
        &["RestartAllContainers"]
    } else {
        &["Restart", "RestartAllContainers"]
    };
    for (i, rule) in rules.iter().enumerate() {
        let rpath = rules_path.index(i);
        if !actions.contains(&rule.action.as_str()) {
            errs.push(FieldError::not_supported(
                &rpath.child("action"),
                &rule.action,
                actions,
            ));
        }
        let Some(codes) = &rule.exit_codes else {
            errs.push(FieldError::required(
                &rpath.child("exitCodes"),
                "must be specified",
            ));
            continue;
        };
        let cpath = rpath.child("exitCodes");
        if !matches!(codes.operator.as_str(), "In" | "NotIn") {
            errs.push(FieldError::not_supported(
                &cpath.child("operator"),
                &codes.operator,
                &["In", "NotIn"],
            ));
        }
        let values = codes.values.as_deref().unwrap_or(&[]);
        if values.len() > MAX_EXIT_CODE_VALUES {
            errs.push(FieldError::too_many(
                &cpath.child("values"),
                values.len(),
                MAX_EXIT_CODE_VALUES,
            ));
        }
        for (j, v) in values.iter().enumerate() {
            if !(0..=255).contains(v) {
                errs.push(FieldError::invalid(
                    &cpath.child("values").index(j),
                    *v,
                    inclusive_range_error(0, 255),
                ));
            }
        }
    }
}

fn validate_container_common(
    c: &Container,
    ctx: &PodContext<'_>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let name_path = path.child("name");
    if c.name.is_empty() {
        errs.push(FieldError::required(&name_path, ""));
    } else {
        for msg in dns1123_label(&c.name) {
            errs.push(FieldError::invalid(&name_path, &c.name, msg));
        }
    }
    if s(&c.image).is_empty() {
        errs.push(FieldError::required(&path.child("image"), ""));
    }
    match s(&c.termination_message_policy) {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(FieldError::required(
            &path.child("terminationMessagePolicy"),
            "",
        )),
        other => errs.push(FieldError::not_supported(
            &path.child("terminationMessagePolicy"),
            other,
            &["File", "FallbackToLogsOnError"],
        )),
    }
    validate_ports(c, &path.child("ports"), errs);
    for (i, e) in c.env.iter().flatten().enumerate() {
        validate_env(e, ctx, &path.child("env").index(i), errs);
    }
    validate_env_from(
        c.env_from.as_deref().unwrap_or(&[]),
        &path.child("envFrom"),
        errs,
    );
    let devices = c.volume_devices.as_deref().unwrap_or(&[]);
    let mounts = c.volume_mounts.as_deref().unwrap_or(&[]);
    validate_volume_mounts(mounts, devices, c, ctx, &path.child("volumeMounts"), errs);
    validate_volume_devices(devices, mounts, ctx, &path.child("volumeDevices"), errs);
    match s(&c.image_pull_policy) {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => errs.push(FieldError::required(&path.child("imagePullPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("imagePullPolicy"),
            other,
            &["Always", "IfNotPresent", "Never"],
        )),
    }
    if let Some(r) = &c.resources {
        validate_resources(
            r.limits.as_ref(),
            r.requests.as_ref(),
            &path.child("resources"),
            errs,
        );
    }
    for (i, rp) in c.resize_policy.iter().flatten().enumerate() {
        let rpath = path.child("resizePolicy");
        match rp.resource_name.as_str() {
            "cpu" | "memory" => {}
            "" => errs.push(FieldError::required(&rpath, "")),
            other => errs.push(FieldError::not_supported(&rpath, other, &["cpu", "memory"])),
        }
        match rp.restart_policy.as_str() {
            "NotRequired" | "RestartContainer" => {}
            "" => errs.push(FieldError::required(&rpath, "")),
            other => errs.push(FieldError::not_supported(
                &rpath,
                other,
                &["NotRequired", "RestartContainer"],
            )),
        }
        if ctx.pod_restart_policy == "Never" && rp.restart_policy != "NotRequired" {
            errs.push(FieldError::invalid(
                &rpath.index(i),
                &rp.restart_policy,
                "must be 'NotRequired' when `restartPolicy` is 'Never'",
            ));
        }
    }
    if let Some(sc) = &c.security_context {
        validate_security_context(sc, &path.child("securityContext"), errs);
    }
}

fn validate_security_context(sc: &SecurityContext, path: &FieldPath, errs: &mut Errors) {
    if let Some(sp) = &sc.seccomp_profile {
        validate_seccomp_profile(sp, &path.child("seccompProfile"), errs);
    }
    for (field, id) in [
        ("runAsUser", sc.run_as_user),
        ("runAsGroup", sc.run_as_group),
    ] {
        if let Some(id) = id.filter(|id| !(0..=i64::from(i32::MAX)).contains(id)) {
            errs.push(FieldError::invalid(
                &path.child(field),
                id,
                inclusive_range_error(0, i64::from(i32::MAX)),
            ));
        }
    }
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            errs.push(FieldError::invalid(
                path,
                "",
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        let adds_sys_admin = sc
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref())
            .is_some_and(|add| {
                add.iter()
                    .any(|cap| cap == "CAP_SYS_ADMIN" || cap == "SYS_ADMIN")
            });
        if adds_sys_admin {
            errs.push(FieldError::invalid(
                path,
                "",
                "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            ));
        }
    }
}

/// The API's `validateSeccompProfileField`: a known type; `localhostProfile` set exactly when
/// the type is `Localhost`, and then a relative path without `..` (it is joined to the
/// node's seccomp directory).
pub(super) fn validate_seccomp_profile(sp: &SeccompProfile, path: &FieldPath, errs: &mut Errors) {
    let types = ["Localhost", "RuntimeDefault", "Unconfined"];
    match sp.type_.as_str() {
        "" => errs.push(FieldError::required(&path.child("type"), "")),
        t if !types.contains(&t) => {
            errs.push(FieldError::not_supported(&path.child("type"), t, &types))
        }
        _ => {}
    }
    let profile_path = path.child("localhostProfile");
    match (sp.type_.as_str(), sp.localhost_profile.as_deref()) {
        ("Localhost", None | Some("")) => errs.push(FieldError::required(
            &profile_path,
            "must be set when seccomp type is Localhost",
        )),
        ("Localhost", Some(profile)) => {
            validate_local_descending_path(profile, &profile_path, errs)
        }
        (_, Some(profile)) => errs.push(FieldError::invalid(
            &profile_path,
            profile,
            "can only be set when seccomp type is Localhost",
        )),
        (_, None) => {}
    }
}

fn validate_ports(c: &Container, path: &FieldPath, errs: &mut Errors) {
    let mut names = BTreeSet::new();
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let ppath = path.index(i);
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            let msgs = port_name(name);
            if !msgs.is_empty() {
                for msg in msgs {
                    errs.push(FieldError::invalid(&ppath.child("name"), name, msg));
                }
            } else if !names.insert(name) {
                errs.push(FieldError::duplicate(&ppath.child("name"), name));
            }
        }
        if p.container_port == 0 {
            errs.push(FieldError::required(&ppath.child("containerPort"), ""));
        } else {
            for msg in port_num(i64::from(p.container_port)) {
                errs.push(FieldError::invalid(
                    &ppath.child("containerPort"),
                    p.container_port,
                    msg,
                ));
            }
        }
        if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
            for msg in port_num(i64::from(hp)) {
                errs.push(FieldError::invalid(&ppath.child("hostPort"), hp, msg));
            }
        }
        match s(&p.protocol) {
            "TCP" | "UDP" | "SCTP" => {}
            "" => errs.push(FieldError::required(&ppath.child("protocol"), "")),
            other => errs.push(FieldError::not_supported(
                &ppath.child("protocol"),
                other,
                &["SCTP", "TCP", "UDP"],
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::source::validation::test_support::{errors_for, label_msg, with_container, C};

    #[test]
    fn container_rules() {
        let c0 = "spec.containers[0]";
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                "  containers:\n  - name: Web_1\n    image: busybox:1.36\n".into(),
                vec![format!("{c0}.name: Invalid value: \"Web_1\": {}", label_msg("Web_1"))],
            ),
            ("  containers:\n  - name: c\n".into(), vec![format!("{c0}.image: Required value")]),
            (
                "  containers:\n  - name: c\n    image: \"busybox:1.36 \"\n".into(),
                vec![format!("{c0}.image: Invalid value: \"busybox:1.36 \": must not have leading or trailing whitespace")],
            ),
            (
                "  containers:\n  - name: c\n    image: a\n  - name: c\n    image: b\n".into(),
                vec!["spec.containers[1].name: Duplicate value: \"c\"".into()],
            ),
            (
                format!("  initContainers:\n  - name: c\n    image: a\n{C}"),
                vec!["spec.initContainers[0].name: Duplicate value: \"c\"".into()],
            ),
            (
                with_container("    imagePullPolicy: Sometimes\n"),
                vec![format!("{c0}.imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"")],
            ),
            (
                with_container("    terminationMessagePolicy: Sometimes\n"),
                vec![format!("{c0}.terminationMessagePolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"FallbackToLogsOnError\"")],
            ),
            (
                with_container("    ports:\n    - containerPort: 0\n    - containerPort: 70000\n    - {containerPort: 80, hostPort: 70000}\n    - {containerPort: 81, protocol: ICMP}\n"),
                vec![
                    format!("{c0}.ports[0].containerPort: Required value"),
                    format!("{c0}.ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"),
                    format!("{c0}.ports[2].hostPort: Invalid value: 70000: must be between 1 and 65535, inclusive"),
                    format!("{c0}.ports[3].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\""),
                ],
            ),
            (
                with_container("    ports:\n    - {name: metrics-port-1234, containerPort: 80}\n    - {name: http, containerPort: 81}\n    - {name: http, containerPort: 82}\n"),
                vec![
                    format!("{c0}.ports[0].name: Invalid value: \"metrics-port-1234\": must be no more than 15 characters"),
                    format!("{c0}.ports[2].name: Duplicate value: \"http\""),
                ],
            ),
            (
                with_container("    securityContext: {runAsUser: -1}\n"),
                vec![format!("{c0}.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive")],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    #[test]
    fn container_restart_policy_and_rules() {
        let c0 = "spec.containers[0]";
        let i0 = "spec.initContainers[0]";
        let init = |extra: &str| {
            format!("  initContainers:\n  - name: i\n    image: busybox:1.36\n{extra}{C}")
        };
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                with_container("    restartPolicy: Sometimes\n"),
                vec![format!("{c0}.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\", \"OnFailure\"")],
            ),
            (
                with_container("    restartPolicyRules:\n    - action: Restart\n      exitCodes: {operator: In, values: [1]}\n"),
                vec![format!("{c0}.restartPolicy: Required value: must specify restartPolicy when restart rules are used")],
            ),
            (
                with_container("    restartPolicy: Never\n    restartPolicyRules:\n    - action: Reboot\n      exitCodes: {operator: Gt, values: [1, 256, -1]}\n    - action: Restart\n"),
                vec![
                    format!("{c0}.restartPolicyRules[0].action: Unsupported value: \"Reboot\": supported values: \"Restart\", \"RestartAllContainers\""),
                    format!("{c0}.restartPolicyRules[0].exitCodes.operator: Unsupported value: \"Gt\": supported values: \"In\", \"NotIn\""),
                    format!("{c0}.restartPolicyRules[0].exitCodes.values[1]: Invalid value: 256: must be between 0 and 255, inclusive"),
                    format!("{c0}.restartPolicyRules[0].exitCodes.values[2]: Invalid value: -1: must be between 0 and 255, inclusive"),
                    format!("{c0}.restartPolicyRules[1].exitCodes: Required value: must be specified"),
                ],
            ),
            (
                init("    restartPolicy: Sometimes\n"),
                vec![format!("{i0}.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\", \"OnFailure\"")],
            ),
            (
                init("    restartPolicy: Always\n    restartPolicyRules:\n    - action: Restart\n      exitCodes: {operator: In, values: [1]}\n"),
                vec![format!("{i0}.restartPolicyRules[0].action: Unsupported value: \"Restart\": supported values: \"RestartAllContainers\"")],
            ),
            (
                init("    livenessProbe:\n      exec: {command: [true]}\n    lifecycle:\n      postStart:\n        exec: {command: [true]}\n"),
                vec![
                    format!("{i0}.lifecycle: Forbidden: may not be set for init containers without restartPolicy=Always"),
                    format!("{i0}.livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"),
                ],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
        let many = (0..21)
            .map(|_| "    - action: Restart\n      exitCodes: {operator: In, values: [1]}\n")
            .collect::<String>();
        assert_eq!(
            errors_for(&with_container(&format!(
                "    restartPolicy: Never\n    restartPolicyRules:\n{many}"
            ))),
            vec![format!(
                "{c0}.restartPolicyRules: Too many: 21: must have at most 20 items"
            )]
        );
    }
}
