//! Probes and lifecycle hooks (their handlers and ports) and the container stop signal, which
//! must be one the pod's OS has.

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Lifecycle, LifecycleHandler, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{s, Errors, IS_NEGATIVE};
use crate::podspec::field::{http_header_name, port_name, port_num, FieldError, FieldPath};

pub(super) fn validate_probes(c: &Container, path: &FieldPath, errs: &mut Errors) {
    if let Some(p) = &c.liveness_probe {
        let ppath = path.child("livenessProbe");
        validate_probe(p, &ppath, errs);
        if p.success_threshold.unwrap_or(0) != 1 {
            errs.push(FieldError::invalid(
                &ppath.child("successThreshold"),
                p.success_threshold.unwrap_or(0),
                "must be 1",
            ));
        }
    }
    if let Some(p) = &c.readiness_probe {
        let ppath = path.child("readinessProbe");
        validate_probe(p, &ppath, errs);
        if let Some(t) = p.termination_grace_period_seconds {
            errs.push(FieldError::invalid(
                &ppath.child("terminationGracePeriodSeconds"),
                t,
                "must not be set for readinessProbes",
            ));
        }
    }
    if let Some(p) = &c.startup_probe {
        let ppath = path.child("startupProbe");
        validate_probe(p, &ppath, errs);
        if p.success_threshold.unwrap_or(0) != 1 {
            errs.push(FieldError::invalid(
                &ppath.child("successThreshold"),
                p.success_threshold.unwrap_or(0),
                "must be 1",
            ));
        }
    }
}

fn validate_probe(p: &Probe, path: &FieldPath, errs: &mut Errors) {
    let mut handlers = Vec::new();
    if let Some(exec) = &p.exec {
        handlers.push((
            "exec",
            Handler::Exec(exec.command.as_deref().unwrap_or(&[])),
        ));
    }
    if let Some(http) = &p.http_get {
        handlers.push(("httpGet", Handler::Http(http)));
    }
    if let Some(tcp) = &p.tcp_socket {
        handlers.push(("tcpSocket", Handler::Port(&tcp.port)));
    }
    if let Some(grpc) = &p.grpc {
        handlers.push(("grpc", Handler::Grpc(grpc.port, s(&grpc.mode))));
    }
    validate_handlers(handlers, None, path, errs);
    for (field, v) in [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        if let Some(v) = v.filter(|v| *v < 0) {
            errs.push(FieldError::invalid(&path.child(field), v, IS_NEGATIVE));
        }
    }
    if let Some(t) = p.termination_grace_period_seconds.filter(|t| *t <= 0) {
        errs.push(FieldError::invalid(
            &path.child("terminationGracePeriodSeconds"),
            t,
            "must be greater than 0",
        ));
    }
}

/// The stop signals the API accepts for Linux pods (`supportedStopSignalsLinux`).
pub const LINUX_STOP_SIGNALS: &[&str] = &[
    "SIGABRT",
    "SIGALRM",
    "SIGBUS",
    "SIGCHLD",
    "SIGCLD",
    "SIGCONT",
    "SIGFPE",
    "SIGHUP",
    "SIGILL",
    "SIGINT",
    "SIGIO",
    "SIGIOT",
    "SIGKILL",
    "SIGPIPE",
    "SIGPOLL",
    "SIGPROF",
    "SIGPWR",
    "SIGQUIT",
    "SIGSEGV",
    "SIGSTKFLT",
    "SIGSTOP",
    "SIGSYS",
    "SIGTERM",
    "SIGTRAP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGUSR1",
    "SIGUSR2",
    "SIGVTALRM",
    "SIGWINCH",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGRTMIN",
    "SIGRTMIN+1",
    "SIGRTMIN+2",
    "SIGRTMIN+3",
    "SIGRTMIN+4",
    "SIGRTMIN+5",
    "SIGRTMIN+6",
    "SIGRTMIN+7",
    "SIGRTMIN+8",
    "SIGRTMIN+9",
    "SIGRTMIN+10",
    "SIGRTMIN+11",
    "SIGRTMIN+12",
    "SIGRTMIN+13",
    "SIGRTMIN+14",
    "SIGRTMIN+15",
    "SIGRTMAX-14",
    "SIGRTMAX-13",
    "SIGRTMAX-12",
    "SIGRTMAX-11",
    "SIGRTMAX-10",
    "SIGRTMAX-9",
    "SIGRTMAX-8",
    "SIGRTMAX-7",
    "SIGRTMAX-6",
    "SIGRTMAX-5",
    "SIGRTMAX-4",
    "SIGRTMAX-3",
    "SIGRTMAX-2",
    "SIGRTMAX-1",
    "SIGRTMAX",
];

/// The stop signals the API accepts for Windows pods (`supportedStopSignalsWindows`).
pub const WINDOWS_STOP_SIGNALS: &[&str] = &["SIGKILL", "SIGTERM"];

/// The API's `validateStopSignal`: only with `spec.os.name`, and only a signal that OS has.
pub(super) fn validate_stop_signal(
    l: &Lifecycle,
    os: Option<&str>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let Some(signal) = l.stop_signal.as_deref() else {
        return;
    };
    let path = path.child("stopSignal");
    let supported = match os {
        Some("linux") => LINUX_STOP_SIGNALS,
        Some("windows") => WINDOWS_STOP_SIGNALS,
        // An unknown OS name is reported at `spec.os.name`.
        Some(_) => return,
        None => {
            errs.push(FieldError::forbidden(
                &path,
                "may not be set for containers with empty `spec.os.name`",
            ));
            return;
        }
    };
    if !supported.contains(&signal) {
        // The API lists the supported values sorted, as `sets.List` does.
        let mut sorted = supported.to_vec();
        sorted.sort_unstable();
        errs.push(FieldError::not_supported(&path, signal, &sorted));
    }
}

pub(super) fn validate_lifecycle(
    l: &Lifecycle,
    grace: Option<i64>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    for (field, h) in [("postStart", &l.post_start), ("preStop", &l.pre_stop)] {
        if let Some(h) = h {
            validate_lifecycle_handler(h, grace, &path.child(field), errs);
        }
    }
}

fn validate_lifecycle_handler(
    h: &LifecycleHandler,
    grace: Option<i64>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let mut handlers = Vec::new();
    if let Some(exec) = &h.exec {
        handlers.push((
            "exec",
            Handler::Exec(exec.command.as_deref().unwrap_or(&[])),
        ));
    }
    if let Some(http) = &h.http_get {
        // Hooks send HTTP/1.1; h2c is for probes.
        if s(&http.protocol) == "HTTP2" {
            errs.push(FieldError::forbidden(
                &path.child("httpGet").child("protocol"),
                "HTTP2 is only supported for probes",
            ));
        }
        handlers.push(("httpGet", Handler::Http(http)));
    }
    if let Some(tcp) = &h.tcp_socket {
        handlers.push(("tcpSocket", Handler::Port(&tcp.port)));
    }
    if let Some(sleep) = &h.sleep {
        handlers.push(("sleep", Handler::Sleep(sleep.seconds)));
    }
    validate_handlers(handlers, grace, path, errs);
}

enum Handler<'a> {
    Exec(&'a [String]),
    Http(&'a HTTPGetAction),
    Port(&'a IntOrString),
    /// The port and `mode`.
    Grpc(i32, &'a str),
    Sleep(i64),
}

fn validate_handlers(
    handlers: Vec<(&str, Handler<'_>)>,
    grace: Option<i64>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    if handlers.is_empty() {
        errs.push(FieldError::required(path, "must specify a handler type"));
        return;
    }
    for (i, (name, handler)) in handlers.into_iter().enumerate() {
        let hpath = path.child(name);
        if i > 0 {
            errs.push(FieldError::forbidden(
                &hpath,
                "may not specify more than 1 handler type",
            ));
            continue;
        }
        match handler {
            Handler::Exec(command) => {
                if command.is_empty() {
                    errs.push(FieldError::required(&hpath.child("command"), ""));
                }
            }
            Handler::Http(http) => {
                if s(&http.path).is_empty() {
                    errs.push(FieldError::required(&hpath.child("path"), ""));
                }
                validate_port_num_or_name(&http.port, &hpath.child("port"), errs);
                let scheme = s(&http.scheme);
                if scheme != "HTTP" && scheme != "HTTPS" {
                    errs.push(FieldError::not_supported(
                        &hpath.child("scheme"),
                        scheme,
                        &["HTTP", "HTTPS"],
                    ));
                }
                match s(&http.protocol) {
                    "" | "HTTP1" => {}
                    "HTTP2" if scheme == "HTTPS" => errs.push(FieldError::invalid(
                        &hpath.child("protocol"),
                        "HTTP2",
                        "HTTP2 (h2c) may not be used with scheme HTTPS",
                    )),
                    "HTTP2" => {}
                    other => errs.push(FieldError::not_supported(
                        &hpath.child("protocol"),
                        other,
                        &["HTTP1", "HTTP2"],
                    )),
                }
                for header in http.http_headers.iter().flatten() {
                    for msg in http_header_name(&header.name) {
                        errs.push(FieldError::invalid(
                            &hpath.child("httpHeaders"),
                            &header.name,
                            msg,
                        ));
                    }
                }
            }
            Handler::Port(port) => validate_port_num_or_name(port, &hpath.child("port"), errs),
            Handler::Grpc(port, mode) => {
                for msg in port_num(i64::from(port)) {
                    errs.push(FieldError::invalid(&hpath.child("port"), port, msg));
                }
                if !matches!(mode, "" | "TLS" | "Plaintext") {
                    errs.push(FieldError::not_supported(
                        &hpath.child("mode"),
                        mode,
                        &["Plaintext", "TLS"],
                    ));
                }
            }
            Handler::Sleep(seconds) => {
                // PodLifecycleSleepActionAllowZero is on: zero is allowed.
                if let Some(g) = grace.filter(|g| seconds < 0 || seconds > *g) {
                    errs.push(FieldError::invalid(
                        &hpath,
                        seconds,
                        format!("must be non-negative and less than terminationGracePeriodSeconds ({g})"),
                    ));
                }
            }
        }
    }
}

fn validate_port_num_or_name(port: &IntOrString, path: &FieldPath, errs: &mut Errors) {
    match port {
        IntOrString::Int(n) => {
            for msg in port_num(i64::from(*n)) {
                errs.push(FieldError::invalid(path, *n, msg));
            }
        }
        IntOrString::String(name) => {
            for msg in port_name(name) {
                errs.push(FieldError::invalid(path, name, msg));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::source::validation::test_support::{errors_for, with_container};

    #[test]
    fn probe_and_lifecycle_rules() {
        let c0 = "spec.containers[0]";
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                with_container("    livenessProbe: {periodSeconds: 5}\n"),
                vec![format!("{c0}.livenessProbe: Required value: must specify a handler type")],
            ),
            (
                with_container("    livenessProbe:\n      exec: {command: [true]}\n      tcpSocket: {port: 80}\n"),
                vec![format!("{c0}.livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type")],
            ),
            (
                with_container("    livenessProbe:\n      exec: {command: []}\n      successThreshold: 2\n      periodSeconds: -1\n"),
                vec![
                    format!("{c0}.livenessProbe.exec.command: Required value"),
                    format!("{c0}.livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0"),
                    format!("{c0}.livenessProbe.successThreshold: Invalid value: 2: must be 1"),
                ],
            ),
            (
                with_container("    readinessProbe:\n      httpGet: {port: 80, path: /, protocol: HTTP2}\n"),
                vec![],
            ),
            (
                with_container("    readinessProbe:\n      httpGet: {port: 80, path: /, scheme: HTTPS, protocol: HTTP2}\n"),
                vec![format!("{c0}.readinessProbe.httpGet.protocol: Invalid value: \"HTTP2\": HTTP2 (h2c) may not be used with scheme HTTPS")],
            ),
            (
                with_container("    readinessProbe:\n      httpGet: {port: 80, path: /, protocol: HTTP3}\n"),
                vec![format!("{c0}.readinessProbe.httpGet.protocol: Unsupported value: \"HTTP3\": supported values: \"HTTP1\", \"HTTP2\"")],
            ),
            (
                with_container("    livenessProbe:\n      grpc: {port: 9090, mode: TLS}\n"),
                vec![],
            ),
            (
                with_container("    livenessProbe:\n      grpc: {port: 9090, mode: mTLS}\n"),
                vec![format!("{c0}.livenessProbe.grpc.mode: Unsupported value: \"mTLS\": supported values: \"Plaintext\", \"TLS\"")],
            ),
            (
                with_container("    lifecycle:\n      preStop:\n        httpGet: {port: 80, path: /, protocol: HTTP2}\n"),
                vec![format!("{c0}.lifecycle.preStop.httpGet.protocol: Forbidden: HTTP2 is only supported for probes")],
            ),
            (
                with_container("    startupProbe:\n      httpGet: {port: 0, scheme: FTP}\n      successThreshold: 3\n"),
                vec![
                    format!("{c0}.startupProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive"),
                    format!("{c0}.startupProbe.httpGet.scheme: Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\""),
                    format!("{c0}.startupProbe.successThreshold: Invalid value: 3: must be 1"),
                ],
            ),
            (
                with_container("    readinessProbe:\n      tcpSocket: {port: HTTP}\n      terminationGracePeriodSeconds: 5\n"),
                vec![
                    format!("{c0}.readinessProbe.tcpSocket.port: Invalid value: \"HTTP\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"),
                    format!("{c0}.readinessProbe.tcpSocket.port: Invalid value: \"HTTP\": must contain at least one letter (a-z)"),
                    format!("{c0}.readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes"),
                ],
            ),
            (
                with_container("    lifecycle:\n      preStop:\n        sleep: {seconds: 60}\n      postStart: {}\n"),
                vec![
                    format!("{c0}.lifecycle.postStart: Required value: must specify a handler type"),
                    format!("{c0}.lifecycle.preStop.sleep: Invalid value: 60: must be non-negative and less than terminationGracePeriodSeconds (30)"),
                ],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }
}
