//! Pure parts of the benchmark report: percentiles, the rows of a part's table, and the
//! markdown of `docs/benchmarks.md` (each part replaces only its own block, so a part re-run
//! alone leaves the others' figures, and the hand-written explanations, as they were).

use std::fmt::Write as _;
use std::time::Duration;

/// Nearest-rank percentile (`p` in 0..=100) of unsorted values; `None` when there are none.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Milliseconds of a list of durations.
pub fn millis(values: &[Duration]) -> Vec<f64> {
    values.iter().map(|d| d.as_secs_f64() * 1000.0).collect()
}

/// `p50 12.3 ms, p90 …` style summaries of samples, in one unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(values: &[f64]) -> Option<Summary> {
        Some(Summary {
            n: values.len(),
            p50: percentile(values, 50.0)?,
            p90: percentile(values, 90.0)?,
            p99: percentile(values, 99.0)?,
            max: percentile(values, 100.0)?,
        })
    }
}

/// A number with a sensible precision for a table: 3 significant digits, at most 3 decimals.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Whether a figure meets its goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Meets,
    Misses,
    /// No goal for this figure (context, or a baseline).
    None,
}

impl Verdict {
    /// `value <= goal`.
    pub fn at_most(value: f64, goal: f64) -> Verdict {
        if value <= goal {
            Verdict::Meets
        } else {
            Verdict::Misses
        }
    }

    fn cell(self) -> &'static str {
        match self {
            Verdict::Meets => "meets",
            Verdict::Misses => "**misses**",
            Verdict::None => "",
        }
    }
}

/// One line of a part's table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub figure: String,
    pub nodelet: String,
    /// The bare runtime doing the same work in the same run ("" when there is no such thing).
    pub baseline: String,
    /// nodelet / baseline ("" without a baseline).
    pub ratio: String,
    /// The real kubelet doing the same in the same run ("" where it was not measured).
    pub kubelet: String,
    /// nodelet / kubelet ("" without a kubelet figure).
    pub versus: String,
    pub goal: String,
    pub verdict: Verdict,
    /// The 1-minute load average when the measurement began and ended.
    pub load: String,
    /// The runtime the figure was measured on (`containerd 2.1.9`).
    pub runtime: String,
}

impl Row {
    pub fn new(figure: impl Into<String>, nodelet: impl Into<String>) -> Row {
        Row {
            figure: figure.into(),
            nodelet: nodelet.into(),
            baseline: String::new(),
            ratio: String::new(),
            kubelet: String::new(),
            versus: String::new(),
            goal: String::new(),
            verdict: Verdict::None,
            load: String::new(),
            runtime: String::new(),
        }
    }

    pub fn baseline(mut self, baseline: impl Into<String>, ratio: Option<f64>) -> Row {
        self.baseline = baseline.into();
        self.ratio = ratio.map(|r| format!("{r:.2}×")).unwrap_or_default();
        self
    }

    /// The kubelet's figure and nodelet / kubelet (below 1: nodelet is ahead where less is
    /// better).
    pub fn kubelet(mut self, kubelet: impl Into<String>, ratio: Option<f64>) -> Row {
        self.kubelet = kubelet.into();
        self.versus = ratio.map(|r| format!("{r:.2}×")).unwrap_or_default();
        self
    }

    pub fn goal(mut self, goal: impl Into<String>, verdict: Verdict) -> Row {
        self.goal = goal.into();
        self.verdict = verdict;
        self
    }

    pub fn load(mut self, load: &LoadSpan) -> Row {
        self.load = load.to_string();
        self
    }
}

/// The 1-minute load average at the start and the end of a measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadSpan {
    pub start: f64,
    pub end: f64,
}

impl std::fmt::Display for LoadSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1}→{:.1}", self.start, self.end)
    }
}

/// One part's results: its table and what a reader needs to know about how it was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// The part's name on the command line (`start`, `reaction`, ...), also its block's id.
    pub part: String,
    pub title: String,
    /// When and on what this part was measured (`2026-12-02 10:31 UTC, nodelet 1a2b3c4`).
    pub measured: String,
    pub rows: Vec<Row>,
    /// Method and context, one paragraph each.
    pub notes: Vec<String>,
}

impl Section {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "### {}\n", self.title);
        let _ = writeln!(
            s,
            "Measured {} (`scripts/bench.sh {}`).\n",
            self.measured, self.part
        );
        // The kubelet's columns only in a table that has a kubelet figure.
        let with_kubelet = self.rows.iter().any(|r| !r.kubelet.is_empty());
        if with_kubelet {
            s.push_str(
                "| runtime | figure | nodelet | kubelet, same run | nodelet ÷ kubelet | \
                 bare containerd, same run | nodelet ÷ bare | goal | | load avg |\n",
            );
            s.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
        } else {
            s.push_str(
                "| runtime | figure | nodelet | bare containerd, same run | ratio | goal | | load avg |\n",
            );
            s.push_str("|---|---|---|---|---|---|---|---|\n");
        }
        for r in &self.rows {
            let kubelet = if with_kubelet {
                format!(" {} | {} |", cell(&r.kubelet), r.versus)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} |{kubelet} {} | {} | {} | {} | {} |",
                cell(&r.runtime),
                cell(&r.figure),
                cell(&r.nodelet),
                cell(&r.baseline),
                r.ratio,
                cell(&r.goal),
                r.verdict.cell(),
                r.load
            );
        }
        for n in &self.notes {
            let _ = write!(s, "\n{n}\n");
        }
        s
    }

    /// The table as plain text for the terminal.
    pub fn text(&self) -> String {
        let mut s = format!("== {} ({})\n", self.title, self.measured);
        for r in &self.rows {
            let mut line = format!("  [{}] {:<58} {}", r.runtime, r.figure, r.nodelet);
            if !r.kubelet.is_empty() {
                let _ = write!(line, "  | kubelet {} ({})", r.kubelet, r.versus);
            }
            if !r.baseline.is_empty() {
                let _ = write!(line, "  | bare {} ({})", r.baseline, r.ratio);
            }
            if !r.goal.is_empty() {
                let _ = write!(
                    line,
                    "  | goal {} {}",
                    r.goal,
                    r.verdict.cell().replace('*', "")
                );
            }
            let _ = writeln!(s, "{line}  [load {}]", r.load);
        }
        for n in &self.notes {
            let _ = writeln!(s, "  - {n}");
        }
        s
    }
}

/// A table cell: `|` would end it.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn begin(id: &str) -> String {
    format!("<!-- bench:{id} begin -->")
}

fn end(id: &str) -> String {
    format!("<!-- bench:{id} end -->")
}

/// The block `id` with `body` between its markers.
pub fn block(id: &str, body: &str) -> String {
    format!("{}\n{}\n{}", begin(id), body.trim_end(), end(id))
}

/// `doc` with each `(id, body)` block replaced; a block the document lacks is inserted before
/// the `<!-- bench:blocks-end -->` marker (or appended when that is missing too).
pub fn merge(doc: &str, blocks: &[(String, String)]) -> String {
    let mut out = doc.to_string();
    for (id, body) in blocks {
        let new = block(id, body);
        let (b, e) = (begin(id), end(id));
        match (out.find(&b), out.find(&e)) {
            (Some(start), Some(stop)) if stop > start => {
                out.replace_range(start..stop + e.len(), &new);
            }
            _ => {
                const TAIL: &str = "<!-- bench:blocks-end -->";
                match out.find(TAIL) {
                    Some(at) => out.insert_str(at, &format!("{new}\n\n")),
                    None => {
                        if !out.ends_with('\n') && !out.is_empty() {
                            out.push('\n');
                        }
                        out.push_str(&format!("\n{new}\n"));
                    }
                }
            }
        }
    }
    out
}

/// Reads a loadavg file's first field (the 1-minute average).
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// A testbox event file's lines (`<RFC 3339 UTC, nanoseconds> <event>`), in order.
pub fn parse_events(text: &str) -> Vec<(jiff::Timestamp, String)> {
    text.lines()
        .filter_map(|l| {
            let (ts, event) = l.split_once(' ')?;
            Some((ts.parse().ok()?, event.to_string()))
        })
        .collect()
}

/// The first event at or after `after` whose text contains `what`.
pub fn first_event<'a>(
    events: &'a [(jiff::Timestamp, String)],
    after: jiff::Timestamp,
    what: &str,
) -> Option<&'a (jiff::Timestamp, String)> {
    events.iter().find(|(t, e)| *t >= after && e.contains(what))
}

/// `b - a` as milliseconds (negative when b is earlier).
pub fn ms_between(a: jiff::Timestamp, b: jiff::Timestamp) -> f64 {
    (b.as_nanosecond() - a.as_nanosecond()) as f64 / 1e6
}

/// CPU ticks and resident memory of one process, read from `/proc/PID/stat` and `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcSample {
    /// utime + stime + cutime + cstime, in clock ticks.
    pub ticks: u64,
    pub rss_kib: u64,
}

/// `/proc/PID/stat`: utime, stime, cutime, cstime (fields 14-17), after the `comm` in
/// parentheses, which may itself hold spaces or parentheses.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field N is fields[N - 3].
    let tick = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(tick(14)? + tick(15)? + tick(16)? + tick(17)?)
}

/// One request in the API server's audit log (`scripts/k8s.sh`'s policy logs every request of
/// `system:nodes`): who made it, when the server received it, and what it was.
#[derive(Debug, Clone, PartialEq)]
pub struct Audited {
    pub id: String,
    pub at: jiff::Timestamp,
    pub user: String,
    pub verb: String,
    /// `pods/status`, `leases`, ...; a non-resource request's path (`/api`).
    pub resource: String,
    /// The object's name (`""` for a list, a watch or a non-resource request).
    pub name: String,
}

impl Audited {
    /// A pod status write: PATCH or PUT of `pods/NAME/status`.
    pub fn is_pod_status_write(&self) -> bool {
        self.is_write() && self.resource == "pods/status"
    }

    /// Any request that changes an object (not get, list or watch).
    pub fn is_write(&self) -> bool {
        !matches!(self.verb.as_str(), "get" | "list" | "watch")
    }

    /// An event written (core or `events.k8s.io`: both are `events`).
    pub fn is_event_write(&self) -> bool {
        self.is_write() && self.resource == "events"
    }

    /// `verb resource`, the key of [`audit_summary`].
    pub fn kind(&self) -> String {
        format!("{} {}", self.verb, self.resource)
    }
}

/// The requests of an audit log (JSON lines), each once: a long-running request (a watch) has a
/// `ResponseStarted` event when it begins and a `ResponseComplete` when it ends, both with its
/// `auditID` and `requestReceivedTimestamp`; the first of them counts. `RequestReceived` is
/// skipped (a policy may leave it in; the request's later stage follows), and so are lines that
/// are no audit event (a line cut by the log's rotation).
pub fn parse_audit(text: &str) -> Vec<Audited> {
    let mut seen = std::collections::HashSet::new();
    text.lines()
        .filter_map(|line| {
            let e: serde_json::Value = serde_json::from_str(line).ok()?;
            if !matches!(
                e["stage"].as_str()?,
                "ResponseStarted" | "ResponseComplete" | "Panic"
            ) {
                return None;
            }
            let id = e["auditID"].as_str()?.to_string();
            let object = &e["objectRef"];
            let resource = match (object["resource"].as_str(), object["subresource"].as_str()) {
                (Some(r), Some(s)) => format!("{r}/{s}"),
                (Some(r), None) => r.to_string(),
                _ => e["requestURI"].as_str()?.split('?').next()?.to_string(),
            };
            let request = Audited {
                at: e["requestReceivedTimestamp"].as_str()?.parse().ok()?,
                user: e["user"]["username"].as_str()?.to_string(),
                verb: e["verb"].as_str()?.to_string(),
                resource,
                name: object["name"].as_str().unwrap_or_default().to_string(),
                id,
            };
            seen.insert(request.id.clone()).then_some(request)
        })
        .collect()
}

/// The requests of `user` received in `[from, to)`.
pub fn audited_between<'a>(
    requests: &'a [Audited],
    user: &str,
    from: jiff::Timestamp,
    to: jiff::Timestamp,
) -> Vec<&'a Audited> {
    requests
        .iter()
        .filter(|r| r.user == user && r.at >= from && r.at < to)
        .collect()
}

/// Requests counted by `verb resource`, most frequent first (then by name).
pub fn audit_summary<'a>(requests: impl IntoIterator<Item = &'a Audited>) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for r in requests {
        *counts.entry(r.kind()).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// `get nodes 6, update leases 6` (an empty summary: `none`).
pub fn summary_text(summary: &[(String, usize)]) -> String {
    if summary.is_empty() {
        return "none".into();
    }
    summary
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// nodelet ÷ kubelet of a count; `None` when the kubelet's is 0 (no ratio to show).
pub fn ratio(nodelet: f64, kubelet: f64) -> Option<f64> {
    (kubelet > 0.0).then(|| nodelet / kubelet)
}
