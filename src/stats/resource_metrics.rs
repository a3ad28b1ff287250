//! `/metrics/resource`: the kubelet's resource metrics (`pkg/kubelet/metrics/collectors/
//! resource_metrics.go`), what metrics-server scrapes for `kubectl top`.
//!
//! Built from the same Summary as `/stats/summary`, read as the kubelet reads it for this
//! endpoint (`GetCPUAndMemoryStats`: [`super::Scope::CpuAndMemory`]). The text is what the
//! kubelet's registry writes in the Prometheus text format 0.0.4: families sorted by name, a
//! family only when it has a sample, samples sorted by their label values (labels in name
//! order: `container`, `namespace`, `pod`), the stability level in the help text (`[STABLE]`,
//! `[ALPHA]`), values as Go's `strconv.FormatFloat(v, 'g', -1, 64)` and the sample time in
//! milliseconds where the kubelet attaches one.
//!
//! `scrape_error` was deprecated in 1.29.0: a v1.37 kubelet hides it unless started with
//! `--show-hidden-metrics-for-version`, and then prints it with the deprecation note that is
//! written here. nodelet keeps serving it for scrapers that still read it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::summary::{CpuStats, MemoryStats, Summary, SwapStats};

/// The content type the kubelet answers the text format with.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Counter,
    Gauge,
}

/// One metric family of the collector: name, help text as the registry prints it, type.
/// (`/metrics/cadvisor` writes its families with the same encoder.)
pub(super) struct Family {
    pub(super) name: &'static str,
    pub(super) help: &'static str,
    pub(super) kind: Kind,
}

const NODE_CPU: Family = Family {
    name: "node_cpu_usage_seconds_total",
    help: "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    kind: Kind::Counter,
};
const NODE_MEMORY: Family = Family {
    name: "node_memory_working_set_bytes",
    help: "[STABLE] Current working set of the node in bytes",
    kind: Kind::Gauge,
};
const NODE_SWAP: Family = Family {
    name: "node_swap_usage_bytes",
    help: "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems",
    kind: Kind::Gauge,
};
const CONTAINER_CPU: Family = Family {
    name: "container_cpu_usage_seconds_total",
    help: "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    kind: Kind::Counter,
};
const CONTAINER_MEMORY: Family = Family {
    name: "container_memory_working_set_bytes",
    help: "[STABLE] Current working set of the container in bytes",
    kind: Kind::Gauge,
};
const CONTAINER_SWAP: Family = Family {
    name: "container_swap_usage_bytes",
    help: "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems",
    kind: Kind::Gauge,
};
const CONTAINER_SWAP_LIMIT: Family = Family {
    name: "container_swap_limit_bytes",
    help: "[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems",
    kind: Kind::Gauge,
};
const CONTAINER_START: Family = Family {
    name: "container_start_time_seconds",
    help: "[STABLE] Start time of the container since unix epoch in seconds",
    kind: Kind::Gauge,
};
const POD_CPU: Family = Family {
    name: "pod_cpu_usage_seconds_total",
    help: "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    kind: Kind::Counter,
};
const POD_MEMORY: Family = Family {
    name: "pod_memory_working_set_bytes",
    help: "[STABLE] Current working set of the pod in bytes",
    kind: Kind::Gauge,
};
const POD_SWAP: Family = Family {
    name: "pod_swap_usage_bytes",
    help: "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
    kind: Kind::Gauge,
};
const SCRAPE_ERROR: Family = Family {
    name: "scrape_error",
    help: "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
    kind: Kind::Gauge,
};
const RESOURCE_SCRAPE_ERROR: Family = Family {
    name: "resource_scrape_error",
    help: "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    kind: Kind::Gauge,
};

/// One sample: label values (already in label-name order), value, time in milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    pub(super) labels: Vec<(&'static str, String)>,
    pub(super) value: f64,
    pub(super) timestamp_ms: Option<i64>,
}

/// Samples by family name (a `BTreeMap`: families come out sorted by name, as the kubelet's
/// registry gathers them).
#[derive(Default)]
pub(super) struct Families {
    samples: BTreeMap<&'static str, (&'static Family, Vec<Sample>)>,
}

impl Families {
    pub(super) fn push(&mut self, family: &'static Family, sample: Sample) {
        self.samples
            .entry(family.name)
            .or_insert_with(|| (family, Vec::new()))
            .1
            .push(sample);
    }

    pub(super) fn encode(mut self) -> String {
        let mut out = String::new();
        for (family, samples) in self.samples.values_mut() {
            // Go's registry sorts a family's metrics by their label values, then by time.
            samples.sort_by(|a, b| {
                a.labels
                    .iter()
                    .map(|(_, v)| v)
                    .cmp(b.labels.iter().map(|(_, v)| v))
                    .then(a.timestamp_ms.cmp(&b.timestamp_ms))
            });
            let kind = match family.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let _ = writeln!(out, "# HELP {} {}", family.name, escape_help(family.help));
            let _ = writeln!(out, "# TYPE {} {kind}", family.name);
            for s in samples.iter() {
                out.push_str(family.name);
                if !s.labels.is_empty() {
                    out.push('{');
                    for (i, (name, value)) in s.labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{name}=\"{}\"", escape_label(value));
                    }
                    out.push('}');
                }
                out.push(' ');
                out.push_str(&go_float(s.value));
                if let Some(ms) = s.timestamp_ms {
                    let _ = write!(out, " {ms}");
                }
                out.push('\n');
            }
        }
        out
    }
}

/// The help text as the text format escapes it (backslash and newline).
fn escape_help(help: &str) -> String {
    help.replace('\\', r"\\").replace('\n', r"\n")
}

/// A label value as the text format escapes it (backslash, double quote, newline).
fn escape_label(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)` as the Prometheus text writer uses it: the
/// shortest digits that read back to `v`, in exponent form (`1.23456789e+08`) when the decimal
/// exponent is below -4 or at least 6 (Go's `%g` with the shortest precision), else plain.
pub fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits too: "1.6243962483020916e9".
    let formatted = format!("{:e}", v.abs());
    let (mantissa, exponent) = formatted.split_once('e').unwrap_or((&formatted, "0"));
    let exp: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if v < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}{rest}e{exp_sign}{:02}", exp.abs());
    }
    // Plain: the decimal point sits after `exp + 1` digits.
    let point = exp + 1;
    let text = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else {
        let point = point as usize;
        if digits.len() <= point {
            format!("{digits}{}", "0".repeat(point - digits.len()))
        } else {
            format!("{}.{}", &digits[..point], &digits[point..])
        }
    };
    format!("{sign}{text}")
}

fn millis(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    t.0.as_millisecond()
}

fn cpu_sample(cpu: Option<&CpuStats>, labels: Vec<(&'static str, String)>) -> Option<Sample> {
    let cpu = cpu?;
    Some(Sample {
        value: cpu.usage_core_nano_seconds? as f64 / 1e9,
        timestamp_ms: Some(millis(&cpu.time)),
        labels,
    })
}

fn memory_sample(
    memory: Option<&MemoryStats>,
    labels: Vec<(&'static str, String)>,
) -> Option<Sample> {
    let memory = memory?;
    Some(Sample {
        value: memory.working_set_bytes? as f64,
        timestamp_ms: Some(millis(&memory.time)),
        labels,
    })
}

fn swap_usage(swap: Option<&SwapStats>, labels: Vec<(&'static str, String)>) -> Option<Sample> {
    let swap = swap?;
    Some(Sample {
        value: swap.swap_usage_bytes? as f64,
        timestamp_ms: Some(millis(&swap.time)),
        labels,
    })
}

/// The body of `/metrics/resource` for a Summary, or for a failed read (then only the two
/// scrape-error gauges, at 1).
pub fn encode(summary: Result<&Summary, &super::Error>) -> String {
    let mut families = Families::default();
    let errors = match summary {
        Ok(summary) => {
            collect(&mut families, summary);
            0.0
        }
        Err(_) => 1.0,
    };
    for family in [&SCRAPE_ERROR, &RESOURCE_SCRAPE_ERROR] {
        families.push(
            family,
            Sample {
                labels: Vec::new(),
                value: errors,
                timestamp_ms: None,
            },
        );
    }
    families.encode()
}

fn collect(families: &mut Families, summary: &Summary) {
    let node = &summary.node;
    if let Some(s) = cpu_sample(node.cpu.as_ref(), Vec::new()) {
        families.push(&NODE_CPU, s);
    }
    if let Some(s) = memory_sample(node.memory.as_ref(), Vec::new()) {
        families.push(&NODE_MEMORY, s);
    }
    // The kubelet stamps the node's swap with the memory reading's time.
    if let (Some(swap), Some(memory)) = (&node.swap, &node.memory) {
        if let Some(bytes) = swap.swap_usage_bytes {
            families.push(
                &NODE_SWAP,
                Sample {
                    labels: Vec::new(),
                    value: bytes as f64,
                    timestamp_ms: Some(millis(&memory.time)),
                },
            );
        }
    }
    for pod in &summary.pods {
        let (name, namespace) = (&pod.pod_ref.name, &pod.pod_ref.namespace);
        let container_labels = |container: &str| {
            vec![
                ("container", container.to_string()),
                ("namespace", namespace.clone()),
                ("pod", name.clone()),
            ]
        };
        for c in &pod.containers {
            let start = c.start_time.0;
            if start.as_second() > 0 {
                families.push(
                    &CONTAINER_START,
                    Sample {
                        labels: container_labels(&c.name),
                        value: start.as_nanosecond() as f64 / 1e9,
                        timestamp_ms: None,
                    },
                );
            }
            if let Some(s) = cpu_sample(c.cpu.as_ref(), container_labels(&c.name)) {
                families.push(&CONTAINER_CPU, s);
            }
            if let Some(s) = memory_sample(c.memory.as_ref(), container_labels(&c.name)) {
                families.push(&CONTAINER_MEMORY, s);
            }
            if let Some(swap) = &c.swap {
                if let Some(s) = swap_usage(Some(swap), container_labels(&c.name)) {
                    families.push(&CONTAINER_SWAP, s);
                }
                if let Some(available) = swap.swap_available_bytes {
                    families.push(
                        &CONTAINER_SWAP_LIMIT,
                        Sample {
                            labels: container_labels(&c.name),
                            value: available as f64 + swap.swap_usage_bytes.unwrap_or(0) as f64,
                            timestamp_ms: Some(millis(&swap.time)),
                        },
                    );
                }
            }
        }
        let pod_labels = || vec![("namespace", namespace.clone()), ("pod", name.clone())];
        if let Some(s) = cpu_sample(pod.cpu.as_ref(), pod_labels()) {
            families.push(&POD_CPU, s);
        }
        if let Some(s) = memory_sample(pod.memory.as_ref(), pod_labels()) {
            families.push(&POD_MEMORY, s);
        }
        if let Some(s) = swap_usage(pod.swap.as_ref(), pod_labels()) {
            families.push(&POD_SWAP, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{ContainerStats, NodeStats, PodReference, PodStats};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn floats_print_as_gos_shortest_g() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (10.0, "10"),
            (1000.0, "1000"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (123456789.0, "1.23456789e+08"),
            (1.6243962483020916e9, "1.6243962483020916e+09"),
            (0.5, "0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (12.345678, "12.345678"),
            (1.5e-7, "1.5e-07"),
            (1e21, "1e+21"),
            (1e100, "1e+100"),
            (-2.5e9, "-2.5e+09"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ];
        for (v, want) in cases {
            assert_eq!(go_float(*v), *want, "{v}");
        }
    }

    /// 2021-06-23 05:11:18.302091597 +0800, the kubelet's test time.
    fn at(offset_nanos: i64) -> Time {
        Time(
            jiff::Timestamp::from_nanosecond(1_624_396_278_302_091_597 + i128::from(offset_nanos))
                .unwrap(),
        )
    }

    fn memory(time: Time, working_set: Option<u64>) -> MemoryStats {
        MemoryStats {
            time,
            available_bytes: None,
            usage_bytes: Some(2000),
            working_set_bytes: working_set,
            rss_bytes: None,
            page_faults: None,
            major_page_faults: None,
            psi: None,
        }
    }

    fn cpu(time: Time, nanos: Option<u64>) -> CpuStats {
        CpuStats {
            time,
            usage_nano_cores: None,
            usage_core_nano_seconds: nanos,
            psi: None,
        }
    }

    fn node(cpu_stats: Option<CpuStats>, memory_stats: Option<MemoryStats>) -> NodeStats {
        NodeStats {
            node_name: "n1".into(),
            system_containers: vec![],
            start_time: at(0),
            cpu: cpu_stats,
            memory: memory_stats,
            io: None,
            network: None,
            fs: None,
            runtime: None,
            rlimit: None,
            swap: None,
        }
    }

    fn container(
        name: &str,
        start_offset_secs: i64,
        nanos: Option<u64>,
        ws: Option<u64>,
    ) -> ContainerStats {
        ContainerStats {
            name: name.into(),
            start_time: at(start_offset_secs * 1_000_000_000),
            cpu: Some(cpu(at(0), nanos)),
            memory: Some(memory(at(0), ws)),
            io: None,
            rootfs: None,
            logs: None,
            swap: None,
        }
    }

    fn pod(name: &str, namespace: &str, containers: Vec<ContainerStats>) -> PodStats {
        PodStats {
            pod_ref: PodReference {
                name: name.into(),
                namespace: namespace.into(),
                uid: format!("uid-{name}"),
            },
            start_time: at(0),
            containers,
            cpu: None,
            memory: None,
            io: None,
            network: None,
            volume_stats: vec![],
            ephemeral_storage: None,
            process_stats: None,
            swap: None,
        }
    }

    const SCRAPE_OK: &str = "\
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
# HELP scrape_error [ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise
# TYPE scrape_error gauge
scrape_error 0
";

    /// The kubelet's own test cases (`TestCollectResourceMetrics`), in its output order.
    #[test]
    fn encodes_the_kubelets_cases() {
        // A failed read: the two error gauges only.
        let failed = encode(Err(&crate::stats::Error::Task("no runtime".into())));
        assert_eq!(
            failed,
            SCRAPE_OK
                .replace("resource_scrape_error 0", "resource_scrape_error 1")
                .replace("\nscrape_error 0", "\nscrape_error 1")
        );

        // Node metrics.
        let summary = Summary {
            node: node(
                Some(cpu(at(0), Some(10_000_000_000))),
                Some(memory(at(0), Some(1000))),
            ),
            pods: vec![],
        };
        let want = format!(
            "\
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 10 1624396278302
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1000 1624396278302
{SCRAPE_OK}"
        );
        assert_eq!(encode(Ok(&summary)), want);

        // Nil node values: nothing but the error gauges.
        let summary = Summary {
            node: node(Some(cpu(at(0), None)), Some(memory(at(0), None))),
            pods: vec![],
        };
        assert_eq!(encode(Ok(&summary)), SCRAPE_OK);

        // Containers of two pods in two namespaces, sorted by label values; pod totals.
        let mut pod_a = pod(
            "pod_a",
            "namespace_a",
            vec![
                container("container_a", -30, Some(10_000_000_000), Some(1000)),
                container("container_b", -120, Some(10_000_000_000), Some(1000)),
            ],
        );
        pod_a.cpu = Some(cpu(at(0), Some(10_000_000_000)));
        pod_a.memory = Some(memory(at(0), Some(1000)));
        let pod_b = pod(
            "pod_b",
            "namespace_b",
            vec![container(
                "container_a",
                -600,
                Some(10_000_000_000),
                Some(1000),
            )],
        );
        // A container without readings still has its start time; one started before 1970 not.
        let pod_c = pod(
            "pod_c",
            "namespace_c",
            vec![container("old", -1_624_396_279, None, None)],
        );
        let summary = Summary {
            node: node(None, None),
            pods: vec![pod_b, pod_a, pod_c],
        };
        let want = format!(
            r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{{container="container_a",namespace="namespace_a",pod="pod_a"}} 10 1624396278302
container_cpu_usage_seconds_total{{container="container_a",namespace="namespace_b",pod="pod_b"}} 10 1624396278302
container_cpu_usage_seconds_total{{container="container_b",namespace="namespace_a",pod="pod_a"}} 10 1624396278302
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{{container="container_a",namespace="namespace_a",pod="pod_a"}} 1000 1624396278302
container_memory_working_set_bytes{{container="container_a",namespace="namespace_b",pod="pod_b"}} 1000 1624396278302
container_memory_working_set_bytes{{container="container_b",namespace="namespace_a",pod="pod_a"}} 1000 1624396278302
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{{container="container_a",namespace="namespace_a",pod="pod_a"}} 1.6243962483020916e+09
container_start_time_seconds{{container="container_a",namespace="namespace_b",pod="pod_b"}} 1.6243956783020916e+09
container_start_time_seconds{{container="container_b",namespace="namespace_a",pod="pod_a"}} 1.6243961583020916e+09
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{{namespace="namespace_a",pod="pod_a"}} 10 1624396278302
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{{namespace="namespace_a",pod="pod_a"}} 1000 1624396278302
{SCRAPE_OK}"#
        );
        assert_eq!(encode(Ok(&summary)), want);
    }

    #[test]
    fn swap_and_escaped_labels() {
        let mut c = container("a\"b", 1, Some(5), Some(7));
        c.swap = Some(SwapStats {
            time: at(10_000_000_000),
            swap_available_bytes: Some(9000),
            swap_usage_bytes: Some(1000),
        });
        let mut summary = Summary {
            node: node(None, Some(memory(at(0), Some(1)))),
            pods: vec![pod("p\\q", "ns\nx", vec![c])],
        };
        summary.node.swap = Some(SwapStats {
            time: at(10_000_000_000),
            swap_available_bytes: None,
            swap_usage_bytes: Some(500),
        });
        let text = encode(Ok(&summary));
        assert!(
            text.contains("node_swap_usage_bytes 500 1624396278302\n"),
            "{text}"
        );
        assert!(
            text.contains(r#"container_swap_limit_bytes{container="a\"b",namespace="ns\nx",pod="p\\q"} 10000 1624396288302"#),
            "{text}"
        );
        assert!(
            text.contains(r#"container_swap_usage_bytes{container="a\"b",namespace="ns\nx",pod="p\\q"} 1000 1624396288302"#),
            "{text}"
        );
        assert!(text.contains("container_cpu_usage_seconds_total{container=\"a\\\"b\",namespace=\"ns\\nx\",pod=\"p\\\\q\"} 5e-09 1624396278302"), "{text}");
    }
}
