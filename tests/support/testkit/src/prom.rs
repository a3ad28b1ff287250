//! The Prometheus text exposition format as nodelet's `/metrics` writes it (prometheus-client:
//! `name{label="value",...} value`, no timestamps), read into samples.

/// One sample line: its metric name (with any `_total`, `_count`, `_sum`, `_bucket` suffix), its
/// label text between the braces (`""` when it has none) and its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: &'a str,
    pub value: f64,
}

/// The samples of an exposition, in order; comments and lines that are not `sample value` are
/// left out.
pub fn samples(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (sample, value) = l.rsplit_once(' ')?;
            let (name, labels) = match sample.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (sample, ""),
            };
            Some(Sample {
                name,
                labels,
                value: value.parse().ok()?,
            })
        })
}

/// The sum of the samples of `series`, `None` when there is none. `series` is a metric name,
/// optionally with label matchers that must all be present:
/// `nodelet_pleg_events_total{source="containerd"}`.
pub fn metric_sum(text: &str, series: &str) -> Option<f64> {
    let (name, matchers) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.trim_end_matches('}')),
        None => (series, ""),
    };
    let matchers: Vec<&str> = matchers.split(',').filter(|m| !m.is_empty()).collect();
    let values: Vec<f64> = samples(text)
        .filter(|s| {
            let labels: Vec<&str> = s.labels.split(',').collect();
            s.name == name && matchers.iter().all(|m| labels.contains(m))
        })
        .map(|s| s.value)
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP nodelet_pleg_events_total Events.\n\
        # TYPE nodelet_pleg_events_total counter\n\
        nodelet_pleg_events_total{source=\"containerd\",kind=\"started\"} 3\n\
        nodelet_pleg_events_total{source=\"containerd\",kind=\"died\"} 2\n\
        nodelet_pleg_events_total{source=\"relist\",kind=\"started\"} 1\n\
        nodelet_pleg_events 99\n\
        nodelet_pods 4\n\
        nodelet_sync_seconds_count{result=\"ok\"} 7\n\
        nodelet_sync_seconds_sum{result=\"ok\"} 0.5\n\
        broken_line_without_value\n\
        nodelet_bad_value{a=\"b\"} x\n\
        # EOF\n";

    #[test]
    fn metric_sum_table() {
        for (series, want) in [
            ("nodelet_pleg_events_total", Some(6.0)),
            (
                "nodelet_pleg_events_total{source=\"containerd\"}",
                Some(5.0),
            ),
            (
                "nodelet_pleg_events_total{source=\"containerd\",kind=\"died\"}",
                Some(2.0),
            ),
            ("nodelet_pleg_events_total{source=\"none\"}", None),
            // A name is whole: neither a prefix nor a longer name matches.
            ("nodelet_pleg_events", Some(99.0)),
            ("nodelet_pleg", None),
            ("nodelet_pods", Some(4.0)),
            ("nodelet_sync_seconds_count", Some(7.0)),
            ("nodelet_sync_seconds", None),
            ("nodelet_bad_value", None),
            ("missing", None),
        ] {
            assert_eq!(metric_sum(TEXT, series), want, "{series}");
        }
    }

    /// The table that came with the VM scenarios' parser (`tests/vm_node.rs`).
    #[test]
    fn metric_sum_vm_table() {
        let text = "# HELP nodelet_pleg_events Pod lifecycle events\n\
                    nodelet_pleg_events_total{source=\"containerd\"} 4\n\
                    nodelet_pleg_events_total{source=\"relist\"} 2\n\
                    nodelet_started_containers_total 0\n\
                    nodelet_pod_worker_duration_seconds_count 7\n";
        let cases = [
            ("nodelet_pleg_events_total", Some(6.0)),
            (
                "nodelet_pleg_events_total{source=\"containerd\"}",
                Some(4.0),
            ),
            ("nodelet_pleg_events_total{source=\"other\"}", None),
            ("nodelet_started_containers_total", Some(0.0)),
            ("nodelet_pod_worker_duration_seconds_count", Some(7.0)),
            ("nodelet_started_container_total", None),
        ];
        for (series, want) in cases {
            assert_eq!(metric_sum(text, series), want, "{series}");
        }
    }

    #[test]
    fn samples_keep_name_labels_and_value() {
        let all: Vec<Sample> = samples(TEXT).collect();
        assert_eq!(all.len(), 7, "{all:?}");
        assert_eq!(
            all[0],
            Sample {
                name: "nodelet_pleg_events_total",
                labels: "source=\"containerd\",kind=\"started\"",
                value: 3.0
            }
        );
        assert_eq!(
            all[4],
            Sample {
                name: "nodelet_pods",
                labels: "",
                value: 4.0
            }
        );
    }
}
