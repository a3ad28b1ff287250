//! The status page's charts: the last hour of [`crate::server::history`] drawn server-side as
//! SVG with `plotters` (its SVG backend only, no fonts of its own: the browser sets the text).
//!
//! Each chart is a function of a [`Snapshot`] and `now`: the x axis is minutes before `now`
//! (−60 … 0), one line per series (a `<polyline>`), the memory chart's eviction thresholds as
//! horizontal lines, and every marker as a vertical line (red: a pod evicted, orange: a
//! container restarted).

use plotters::prelude::*;

use crate::server::history::{MarkerKind, Sample, Snapshot};

const WIDTH: u32 = 560;
const HEIGHT: u32 = 220;
const WINDOW_MINUTES: f64 = 60.0;

const SERIES_COLORS: [RGBColor; 3] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
];
const THRESHOLD_COLOR: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const EVICTED_COLOR: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const RESTARTED_COLOR: RGBColor = RGBColor(0xff, 0x7f, 0x0e);

/// One line of a chart: its legend and its points (minutes before now, value).
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

/// A horizontal line with its legend (an eviction threshold).
struct Level {
    label: String,
    value: f64,
}

struct Chart<'a> {
    title: &'a str,
    unit: &'a str,
    series: Vec<Series>,
    levels: Vec<Level>,
    /// The top of the y axis at least (memory capacity, 100 %).
    y_floor_max: f64,
}

fn minutes_before(now: i64, at: i64) -> f64 {
    (at - now) as f64 / 60.0
}

fn series(
    label: &str,
    samples: &[Sample],
    now: i64,
    value: impl Fn(&Sample) -> Option<f64>,
) -> Series {
    Series {
        label: label.to_string(),
        points: samples
            .iter()
            .filter(|s| minutes_before(now, s.at) >= -WINDOW_MINUTES)
            .filter_map(|s| Some((minutes_before(now, s.at), value(s)?)))
            .collect(),
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// The four charts, as `(id, svg)`: `memory`, `psi`, `cpu`, `pods`.
pub fn charts(snapshot: &Snapshot, now: i64) -> Vec<(&'static str, String)> {
    let s = &snapshot.samples;
    let memory = Chart {
        title: "memory available",
        unit: "MiB",
        series: vec![series("memory.available", s, now, |x| {
            Some(x.memory_available? as f64 / MIB)
        })],
        levels: snapshot
            .thresholds
            .iter()
            .map(|t| Level {
                label: t.label.clone(),
                value: t.bytes as f64 / MIB,
            })
            .collect(),
        y_floor_max: snapshot.memory_capacity as f64 / MIB,
    };
    let psi = Chart {
        title: "pressure stall (avg10)",
        unit: "%",
        series: vec![
            series("memory some", s, now, |x| {
                x.memory_some_avg10.map(f64::from)
            }),
            series("memory full", s, now, |x| {
                x.memory_full_avg10.map(f64::from)
            }),
            series("cpu some", s, now, |x| x.cpu_some_avg10.map(f64::from)),
        ],
        levels: vec![],
        y_floor_max: 10.0,
    };
    let cpu = Chart {
        title: "CPU used",
        unit: "cores",
        series: vec![series("node", s, now, |x| x.cpu_cores.map(f64::from))],
        levels: vec![],
        y_floor_max: 0.1,
    };
    let pods = Chart {
        title: "pods",
        unit: "pods",
        series: vec![series("running", s, now, |x| Some(f64::from(x.pods)))],
        levels: vec![],
        y_floor_max: 1.0,
    };
    [
        ("memory", memory),
        ("psi", psi),
        ("cpu", cpu),
        ("pods", pods),
    ]
    .into_iter()
    .map(|(id, chart)| (id, draw(&chart, snapshot, now)))
    .collect()
}

/// A chart as an SVG document (a text note in place of the chart if drawing failed).
fn draw(chart: &Chart<'_>, snapshot: &Snapshot, now: i64) -> String {
    let mut svg = String::new();
    if let Err(e) = draw_into(&mut svg, chart, snapshot, now) {
        tracing::warn!(chart = chart.title, error = %e, "status page: drawing a chart");
        return format!(
            "<p class=\"chart-error\">{}: {}</p>",
            super::status_page::escape(chart.title),
            super::status_page::escape(&e.to_string())
        );
    }
    svg
}

fn draw_into(
    svg: &mut String,
    chart: &Chart<'_>,
    snapshot: &Snapshot,
    now: i64,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let data_max = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(chart.levels.iter().map(|l| l.value))
        .fold(0.0_f64, f64::max);
    // Head room above the highest value, and at least the chart's natural top.
    let y_max = (data_max * 1.1).max(chart.y_floor_max);
    let mut ctx = ChartBuilder::on(&root)
        .margin(6)
        .caption(
            format!("{} ({})", chart.title, chart.unit),
            ("sans-serif", 15),
        )
        .x_label_area_size(22)
        .y_label_area_size(52)
        .build_cartesian_2d(-WINDOW_MINUTES..0.0, 0.0..y_max)?;
    ctx.configure_mesh()
        .x_labels(7)
        .y_labels(5)
        .x_label_formatter(&|x| format!("{:.0}m", x))
        .y_label_formatter(&|y| {
            if y_max >= 100.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .label_style(("sans-serif", 11))
        .draw()?;
    for (i, s) in chart.series.iter().enumerate() {
        let color = SERIES_COLORS[i % SERIES_COLORS.len()];
        ctx.draw_series(LineSeries::new(
            s.points.iter().copied(),
            color.stroke_width(2),
        ))?
        .label(s.label.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], color));
    }
    for level in &chart.levels {
        ctx.draw_series(LineSeries::new(
            [(-WINDOW_MINUTES, level.value), (0.0, level.value)],
            THRESHOLD_COLOR.stroke_width(1),
        ))?
        .label(level.label.clone())
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], THRESHOLD_COLOR));
    }
    for marker in &snapshot.markers {
        let x = minutes_before(now, marker.at);
        if x < -WINDOW_MINUTES {
            continue;
        }
        let color = match marker.kind {
            MarkerKind::Evicted => EVICTED_COLOR,
            MarkerKind::Restarted => RESTARTED_COLOR,
        };
        ctx.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, y_max)],
            color.mix(0.6).stroke_width(1),
        )))?;
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(RGBColor(0xcc, 0xcc, 0xcc))
        .label_font(("sans-serif", 11))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::history::{Marker, ThresholdLine};

    fn snapshot(samples: usize) -> Snapshot {
        Snapshot {
            samples: (0..samples)
                .map(|i| Sample {
                    at: 10_000 + 10 * i as i64,
                    memory_available: Some((900 - i as u64) << 20),
                    memory_working_set: Some(100 << 20),
                    cpu_usage_nanos: Some(0),
                    cpu_cores: Some(0.25),
                    memory_some_avg10: Some(1.0),
                    memory_full_avg10: Some(0.5),
                    cpu_some_avg10: Some(2.0),
                    io_some_avg10: None,
                    pods: 3,
                })
                .collect(),
            markers: vec![Marker {
                at: 10_020,
                kind: MarkerKind::Evicted,
                pod: "default/hog".into(),
                detail: "low on memory".into(),
            }],
            memory_capacity: 1 << 30,
            thresholds: vec![ThresholdLine {
                label: "evictionHard memory.available".into(),
                bytes: 100 << 20,
            }],
        }
    }

    fn polylines(svg: &str) -> Vec<usize> {
        svg.split("<polyline")
            .skip(1)
            .filter_map(|p| {
                let points = p.split("points=\"").nth(1)?.split('"').next()?;
                Some(points.split_whitespace().count())
            })
            .collect()
    }

    #[test]
    fn each_chart_draws_its_series_threshold_and_markers() {
        let snap = snapshot(30);
        let now = 10_000 + 10 * 29;
        let charts = charts(&snap, now);
        let ids: Vec<&str> = charts.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, ["memory", "psi", "cpu", "pods"]);
        let memory = &charts[0].1;
        assert!(memory.starts_with("<svg"), "{memory}");
        // The series (30 points), the threshold (2), the marker (2), the legend's two strokes.
        let lines = polylines(memory);
        assert!(lines.contains(&30), "{lines:?}");
        assert!(lines.iter().filter(|n| **n == 2).count() >= 2, "{lines:?}");
        assert!(memory.contains("evictionHard memory.available"), "{memory}");
        assert!(memory.contains("memory available (MiB)"), "{memory}");
        // Three PSI series of 30 points.
        assert_eq!(
            polylines(&charts[1].1).iter().filter(|n| **n == 30).count(),
            3
        );
    }

    #[test]
    fn samples_older_than_the_window_are_left_out_and_no_samples_draw_an_empty_chart() {
        let snap = snapshot(30);
        // Now is 65 minutes after the first sample: the first 30 samples span 290 s, all too old.
        let charts = charts(&snap, 10_000 + 65 * 60);
        assert!(!polylines(&charts[0].1).iter().any(|n| *n > 2));
        let empty = super::charts(&snapshot(0), 0);
        assert!(empty.iter().all(|(_, svg)| svg.starts_with("<svg")));
    }
}
