//! The benchmark report's pure parts (benches/node_bench/report.rs: percentiles, `/proc` and
//! testbox event-file parsing, the `docs/benchmarks.md` block merge), table-tested with the test
//! suite; the benchmarks themselves never run there (scripts/bench.sh).

#[allow(dead_code)]
#[path = "../benches/node_bench/report.rs"]
mod report;

use report::*;

#[test]
fn percentiles_by_nearest_rank() {
    let v: Vec<f64> = (1..=10).map(f64::from).collect();
    let cases = [
        (0.0, 1.0),
        (50.0, 5.0),
        (90.0, 9.0),
        (99.0, 10.0),
        (100.0, 10.0),
    ];
    for (p, want) in cases {
        assert_eq!(percentile(&v, p), Some(want), "p{p}");
    }
    assert_eq!(percentile(&[], 50.0), None);
    assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
}

#[test]
fn numbers_keep_three_significant_digits() {
    let cases = [
        (1234.5, "1234"),
        (12.345, "12.3"),
        (1.2345, "1.23"),
        (0.012345, "0.012"),
        (f64::NAN, "—"),
    ];
    for (v, want) in cases {
        assert_eq!(num(v), want, "{v}");
    }
}

#[test]
fn merge_replaces_only_the_blocks_given() {
    let doc = format!(
        "# T\n\n{}\n\nhand-written\n\n{}\n\n<!-- bench:blocks-end -->\n\n## Where\nkept\n",
        block("a", "old a"),
        block("b", "old b")
    );
    let out = merge(&doc, &[("b".into(), "new b".into())]);
    assert!(out.contains("old a") && out.contains("new b") && !out.contains("old b"));
    assert!(out.contains("hand-written") && out.ends_with("## Where\nkept\n"));
    // A block the document lacks goes before the end marker.
    let out = merge(&out, &[("c".into(), "new c".into())]);
    let c = out.find("new c").unwrap();
    assert!(c > out.find("new b").unwrap() && c < out.find("bench:blocks-end").unwrap());
    // Merging again is idempotent.
    assert_eq!(merge(&out, &[("c".into(), "new c".into())]), out);
}

#[test]
fn proc_files() {
    let stat = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 4 0";
    assert_eq!(parse_stat_ticks(stat), Some(13));
    assert_eq!(parse_stat_ticks("garbage"), None);
    // `VmRSS` is read by `nodelet_testkit::proc` (its table has this case).
    assert_eq!(parse_loadavg("2.57 1.52 0.90 3/512 1234\n"), Some(2.57));
}

#[test]
fn events_and_the_first_match() {
    let text = "2026-12-02T10:00:00.100000000Z http GET /healthz -> 200\n\
                2026-12-02T10:00:01.100000000Z http GET /healthz -> 500\n\
                not a line\n\
                2026-12-02T10:00:01.150000000Z received SIGTERM\n";
    let events = parse_events(text);
    assert_eq!(events.len(), 3);
    let after: jiff::Timestamp = "2026-12-02T10:00:00.5Z".parse().unwrap();
    let fail = first_event(&events, after, "-> 500").unwrap();
    let term = first_event(&events, fail.0, "received SIGTERM").unwrap();
    assert!((ms_between(fail.0, term.0) - 50.0).abs() < 1e-6);
    assert!(first_event(&events, term.0, "-> 500").is_none());
}

#[test]
fn the_kubelet_columns_appear_only_in_a_table_with_a_kubelet_figure() {
    let section = |rows: Vec<Row>| Section {
        part: "start".into(),
        title: "Pod start".into(),
        measured: "now".into(),
        rows,
        notes: vec![],
    };
    let bare_only = section(vec![
        Row::new("1 pod started, ms", "250").baseline("200", Some(1.25))
    ])
    .markdown();
    assert!(!bare_only.contains("kubelet"), "{bare_only}");
    assert!(bare_only.contains("|  | 1 pod started, ms | 250 | 200 | 1.25× |"));
    let both = section(vec![
        Row::new("1 pod started, ms", "250")
            .baseline("200", Some(1.25))
            .kubelet("500", Some(0.5)),
        // A row without a kubelet figure keeps its cells in their columns.
        Row::new("CRI calls", "8"),
    ])
    .markdown();
    let lines: Vec<&str> = both.lines().filter(|l| l.starts_with('|')).collect();
    let columns = |l: &str| l.matches('|').count();
    assert!(lines[0].contains("| nodelet | kubelet, same run | nodelet ÷ kubelet | bare"));
    assert!(
        lines.iter().all(|l| columns(l) == columns(lines[0])),
        "{both}"
    );
    assert!(
        lines[2].contains("| 250 | 500 | 0.50× | 200 | 1.25× |"),
        "{both}"
    );
    let text = section(vec![Row::new("x", "250").kubelet("500", Some(0.5))]).text();
    assert!(text.contains("kubelet 500 (0.50×)"), "{text}");
}

/// An audit event line as kube-apiserver writes it (the fields the count reads).
fn audit_line(id: &str, stage: &str, at: &str, user: &str, verb: &str, object: &str) -> String {
    format!(
        r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"{id}","stage":"{stage}","requestURI":"/api/v1/x?watch=true","verb":"{verb}","user":{{"username":"{user}","groups":["system:nodes"]}},{object}"requestReceivedTimestamp":"{at}","stageTimestamp":"{at}"}}"#
    )
}

#[test]
fn audit_events_count_each_request_once() {
    let node = "system:node:n1";
    let pod_status =
        r#""objectRef":{"resource":"pods","namespace":"ns","name":"p0","subresource":"status"},"#;
    let lease = r#""objectRef":{"resource":"leases","namespace":"kube-node-lease","name":"n1"},"#;
    let pods = r#""objectRef":{"resource":"pods"},"#;
    let events = r#""objectRef":{"resource":"events","namespace":"ns"},"#;
    let text = [
        audit_line(
            "a",
            "ResponseComplete",
            "2026-12-07T10:00:00.5Z",
            node,
            "patch",
            pod_status,
        ),
        // A watch: started, then complete with the same ID: once.
        audit_line(
            "b",
            "ResponseStarted",
            "2026-12-07T10:00:01Z",
            node,
            "watch",
            pods,
        ),
        audit_line(
            "b",
            "ResponseComplete",
            "2026-12-07T10:00:01Z",
            node,
            "watch",
            pods,
        ),
        // RequestReceived is no request of its own.
        audit_line(
            "c",
            "RequestReceived",
            "2026-12-07T10:00:02Z",
            node,
            "update",
            lease,
        ),
        audit_line(
            "c",
            "ResponseComplete",
            "2026-12-07T10:00:02Z",
            node,
            "update",
            lease,
        ),
        audit_line(
            "d",
            "ResponseComplete",
            "2026-12-07T10:00:03Z",
            node,
            "create",
            events,
        ),
        // Another user's request, and one outside the window.
        audit_line(
            "e",
            "ResponseComplete",
            "2026-12-07T10:00:03Z",
            "system:node:n2",
            "patch",
            pod_status,
        ),
        audit_line(
            "f",
            "ResponseComplete",
            "2026-12-07T10:00:09Z",
            node,
            "patch",
            pod_status,
        ),
        // A non-resource request: its path.
        audit_line(
            "g",
            "ResponseComplete",
            "2026-12-07T10:00:04Z",
            node,
            "get",
            "",
        ),
        // A line cut by rotation.
        r#"{"kind":"Event","auditID":"h","stage":"Respo"#.to_string(),
    ]
    .join("\n");
    let all = parse_audit(&text);
    assert_eq!(all.len(), 7, "{all:#?}");
    assert_eq!(all[0].resource, "pods/status");
    assert_eq!(all[0].name, "p0");
    assert!(all[0].is_pod_status_write() && all[0].is_write());
    assert!(!all[1].is_write());
    assert_eq!(all[6].resource, "/api/v1/x");
    let from: jiff::Timestamp = "2026-12-07T10:00:00Z".parse().unwrap();
    let to: jiff::Timestamp = "2026-12-07T10:00:05Z".parse().unwrap();
    let window = audited_between(&all, node, from, to);
    assert_eq!(
        window.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c", "d", "g"]
    );
    assert_eq!(window.iter().filter(|r| r.is_event_write()).count(), 1);
    let summary = audit_summary(window.iter().copied());
    assert_eq!(
        summary_text(&summary),
        "create events 1, get /api/v1/x 1, patch pods/status 1, update leases 1, watch pods 1"
    );
    // Most frequent first.
    let twice = [window[2], window[2], window[0]];
    assert_eq!(
        summary_text(&audit_summary(twice)),
        "update leases 2, patch pods/status 1"
    );
    assert_eq!(summary_text(&[]), "none");
    assert_eq!(ratio(1.0, 2.0), Some(0.5));
    assert_eq!(ratio(0.0, 0.0), None);
}
