//! Charts of measured sweeps as SVG (`hccl-test --plot`, `hccl-plot`).
//!
//! A [`Chart`] has two panels side by side: bus bandwidth (GB/s, linear)
//! against message size (bytes, log2), and time (µs, log) against message
//! size. Each panel holds [`Series`]; a series without points is a legend
//! entry only (a note such as "no cost formula"). [`render_svg`] draws a
//! chart with `plotters`' SVG backend; [`read_rows`] reads the rows of
//! `hccl-test --format json` (or rows of the same shape that another
//! library's figures were converted to, see `tools/bench/compare.sh`).

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;
use serde::Deserialize;
use std::path::Path;

/// Width and height of a chart's title and panels, pixels (the legend
/// and the footer add lines below).
pub const SIZE: (u32, u32) = (1400, 560);

/// The x-axis label of both panels.
pub const X_DESC: &str = "message size (bytes, log2)";
/// The y-axis label of the bandwidth panel.
pub const BW_DESC: &str = "bus bandwidth (GB/s)";
/// The y-axis label of the time panel.
pub const TIME_DESC: &str = "time per op (µs, log)";

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// A measurement: a thick line with a dot at every point.
    Measured,
    /// A prediction: a thin line with a cross at every point.
    Model,
}

/// One labelled line of a panel.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend's text.
    pub label: String,
    /// (message bytes, value) pairs, in increasing bytes; a point whose
    /// value is NaN breaks the line there.
    pub points: Vec<(f64, f64)>,
    /// Index into the palette: the same index is the same colour in both
    /// panels.
    pub color: usize,
    /// Measured or predicted.
    pub style: Style,
}

impl Series {
    /// A legend entry without a line (a note about the panel).
    pub fn note(label: impl Into<String>) -> Series {
        Series {
            label: label.into(),
            points: Vec::new(),
            color: 0,
            style: Style::Model,
        }
    }
}

/// What an SVG file shows: a title over two panels.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chart {
    /// The title over both panels.
    pub title: String,
    /// The left panel: bus bandwidth, GB/s.
    pub bandwidth: Vec<Series>,
    /// The right panel: time per op, µs.
    pub time: Vec<Series>,
    /// Lines of small print under the panels (e.g. where the model's
    /// parameters came from).
    pub footer: Vec<String>,
}

/// The colours of the series, by [`Series::color`] (wrapping).
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// `bytes` as the axis prints it: 8 B, 64 KiB, 16 MiB.
pub fn fmt_bytes(bytes: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if (v - v.round()).abs() < 1e-9 {
        format!("{:.0} {}", v, units[u])
    } else {
        format!("{:.1} {}", v, units[u])
    }
}

/// `us` as the axis prints it: 3 µs, 250 µs, 1.5 ms, 2 s.
pub fn fmt_time(us: f64) -> String {
    let (v, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "µs")
    };
    if v >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0} {unit}")
    } else if v >= 0.1 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.2e} {unit}")
    }
}

/// Today's date (UTC) as `YYYY-MM-DD`.
pub fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Checks, before a run, that an SVG can be written at `path`: its
/// directory exists and a file there can be opened for writing. A file
/// made by the check is removed again (an existing one is left as it was).
pub fn check_writable(path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err("the plot path is empty".into());
    }
    if path.is_dir() {
        return Err(format!(
            "cannot write the plot to {shown}: it is a directory"
        ));
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| format!("cannot write the plot to {shown}: {e}"))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Draws `chart` and writes it to `path`.
pub fn write_svg(chart: &Chart, path: &Path) -> Result<(), String> {
    let svg = render_svg(chart)?;
    std::fs::write(path, svg).map_err(|e| format!("writing the plot {}: {e}", path.display()))
}

/// The range of an axis over `values` (finite and, for a log axis,
/// positive), widened so that one value or equal values still span a
/// range: `None` when there is no such value.
fn span(values: impl Iterator<Item = f64>, log: bool) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return None;
    }
    Some(if log {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.0f64.min(lo), if hi > 0.0 { hi * 1.1 } else { 1.0 })
    })
}

/// One entry of the legend under the panels.
struct LegendEntry<'a> {
    label: &'a str,
    color: RGBColor,
    /// `None`: a note, drawn without a sample.
    style: Option<Style>,
}

/// The legend of both panels: each (label, colour, style) once, the
/// measured series first, then the predicted ones, then the notes, each
/// kind in the order the series come (bandwidth panel first).
fn legend(chart: &Chart) -> Vec<LegendEntry<'_>> {
    let mut out: Vec<LegendEntry<'_>> = Vec::new();
    for s in chart.bandwidth.iter().chain(&chart.time) {
        if s.label.is_empty() {
            continue;
        }
        let style = (!s.points.is_empty()).then_some(s.style);
        let color = PALETTE[s.color % PALETTE.len()];
        if !out
            .iter()
            .any(|e| e.label == s.label && e.color == color && e.style == style)
        {
            out.push(LegendEntry {
                label: &s.label,
                color,
                style,
            });
        }
    }
    out.sort_by_key(|e| match e.style {
        Some(Style::Measured) => 0,
        Some(Style::Model) => 1,
        None => 2,
    });
    out
}

/// The line width and marker size of a style.
fn look(style: Style) -> (u32, i32) {
    match style {
        Style::Measured => (3, 3),
        Style::Model => (1, 4),
    }
}

/// Height of one legend or footer line, pixels.
const LINE: i32 = 18;

/// Draws `chart` as SVG text: the title, the two panels, the legend of
/// both under them (two columns when the labels are short enough), then
/// the footer.
pub fn render_svg(chart: &Chart) -> Result<String, String> {
    let entries = legend(chart);
    let columns = if entries.iter().all(|e| e.label.chars().count() <= 95) {
        2
    } else {
        1
    };
    let legend_lines = entries.len().div_ceil(columns) as i32;
    let below = LINE * (legend_lines + chart.footer.len() as i32) + 16;
    let size = (SIZE.0, SIZE.1 + below as u32);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| format!("drawing the plot: {e}");
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(&chart.title, ("sans-serif", 24).into_font())
            .map_err(|e| err(&e))?;
        let height = root.dim_in_pixel().1 as i32;
        let (panels, under) = root.split_vertically(height - below);
        let half = SIZE.0 as i32 / 2;
        let font = ("sans-serif", 15).into_font();
        for (i, e) in entries.iter().enumerate() {
            // column after column: the measured entries first, then the model's
            let (col, row) = (i as i32 / legend_lines, i as i32 % legend_lines);
            let (x, y) = (90 + col * half, 4 + row * LINE + LINE / 2);
            if let Some(style) = e.style {
                let (width, marker) = look(style);
                under
                    .draw(&PathElement::new(
                        vec![(x, y), (x + 30, y)],
                        e.color.stroke_width(width),
                    ))
                    .map_err(|e| err(&e))?;
                match style {
                    Style::Measured => {
                        under.draw(&Circle::new((x + 15, y), marker, e.color.filled()))
                    }
                    Style::Model => {
                        under.draw(&Cross::new((x + 15, y), marker, e.color.stroke_width(1)))
                    }
                }
                .map_err(|e| err(&e))?;
            }
            under
                .draw_text(e.label, &font.color(&BLACK), (x + 40, y - 7))
                .map_err(|e| err(&e))?;
        }
        let small = ("sans-serif", 14).into_font();
        for (i, line) in chart.footer.iter().enumerate() {
            let y = 10 + (legend_lines + i as i32) * LINE;
            under
                .draw_text(line, &small.color(&BLACK.mix(0.7)), (20, y))
                .map_err(|e| err(&e))?;
        }
        let (left, right) = panels.split_horizontally(half);
        // every x of both panels: the panels share the axis
        let xs = || {
            chart
                .bandwidth
                .iter()
                .chain(&chart.time)
                .flat_map(|s| s.points.iter().map(|p| p.0))
        };
        let (x0, x1) = span(xs(), true).unwrap_or((1.0, 1024.0));
        // a narrow sweep (one size: a barrier) still spans whole powers of two
        let (x0, x1) = if x1 / x0 < 4.0 {
            (x0 / 1.5, x1 * 1.5)
        } else {
            (x0, x1)
        };
        let bw = span(
            chart
                .bandwidth
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1)),
            false,
        )
        .unwrap_or((0.0, 1.0));
        let t = span(
            chart.time.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
            true,
        )
        .unwrap_or((1.0, 1000.0));
        let x = || (x0..x1).log_scale().base(2.0);
        panel(
            &left,
            "Bus bandwidth",
            BW_DESC,
            &chart.bandwidth,
            x(),
            bw.0..bw.1,
            &|v: &f64| format!("{v:.2}"),
        )?;
        panel(
            &right,
            "Latency",
            TIME_DESC,
            &chart.time,
            x(),
            (t.0..t.1).log_scale(),
            &|v: &f64| fmt_time(*v),
        )?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// The runs of finite points of `points` (a NaN y breaks the line).
fn segments(points: &[(f64, f64)]) -> impl Iterator<Item = &[(f64, f64)]> {
    points
        .split(|p| !(p.0.is_finite() && p.1.is_finite()))
        .filter(|s| !s.is_empty())
}

/// One panel: axes, mesh, every series (the legend is the chart's).
fn panel<X, Y>(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    series: &[Series],
    x: X,
    y: Y,
    y_fmt: &dyn Fn(&f64) -> String,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: &dyn std::fmt::Display| format!("drawing the plot: {e}");
    let mut c = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 19).into_font())
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(85)
        .build_cartesian_2d(x, y)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc(X_DESC)
        .y_desc(y_desc)
        .x_labels(10)
        .y_labels(10)
        .label_style(("sans-serif", 14).into_font())
        .axis_desc_style(("sans-serif", 15).into_font())
        .x_label_formatter(&|v| fmt_bytes(*v))
        .y_label_formatter(y_fmt)
        .light_line_style(BLACK.mix(0.04))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(|e| err(&e))?;
    for s in series {
        let color = PALETTE[s.color % PALETTE.len()];
        let (width, marker) = look(s.style);
        for seg in segments(&s.points) {
            c.draw_series(LineSeries::new(
                seg.iter().copied(),
                color.stroke_width(width),
            ))
            .map_err(|e| err(&e))?;
        }
        let points = s
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite());
        match s.style {
            Style::Measured => c
                .draw_series(points.map(|&p| Circle::new(p, marker, color.filled())))
                .map(|_| ()),
            Style::Model => c
                .draw_series(points.map(|&p| Cross::new(p, marker, color.stroke_width(1))))
                .map(|_| ()),
        }
        .map_err(|e| err(&e))?;
    }
    Ok(())
}

/// The fields of a `hccl-test --format json` row that a chart uses. Rows
/// converted from another library need `bytes`, `time_us` and
/// `busbw_gbps`; the others are optional.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct PlotRow {
    /// Collective name.
    #[serde(default)]
    pub op: String,
    /// Ranks.
    #[serde(default)]
    pub ranks: u32,
    /// Message size, bytes.
    pub bytes: u64,
    /// Data type name.
    #[serde(default)]
    pub dtype: String,
    /// Average time per op, µs.
    pub time_us: f64,
    /// Bus bandwidth, GB/s.
    pub busbw_gbps: f64,
    /// The executor (or library) that ran.
    #[serde(default)]
    pub algorithm: String,
    /// Median per-iteration time, µs (0 when not measured).
    #[serde(default)]
    pub p50_us: f64,
    /// 99th-percentile per-iteration time, µs (0 when not measured).
    #[serde(default)]
    pub p99_us: f64,
}

/// The rows of `text` (one JSON object a line, as `hccl-test --format
/// json` prints; blank lines and its `baseline` line are skipped).
/// `origin` names the input in errors. No row at all is an error, and so
/// is a line that is not a row.
pub fn parse_rows(text: &str, origin: &str) -> Result<Vec<PlotRow>, String> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
            format!(
                "{origin} line {}: not JSON ({e}); expected the output of hccl-test --format json",
                i + 1
            )
        })?;
        if value.get("baseline").is_some() {
            continue;
        }
        let row: PlotRow = serde_json::from_value(value).map_err(|e| {
            format!(
                "{origin} line {}: not a row of hccl-test --format json ({e})",
                i + 1
            )
        })?;
        if !(row.time_us.is_finite() && row.busbw_gbps.is_finite()) {
            return Err(format!(
                "{origin} line {}: time_us and busbw_gbps must be numbers",
                i + 1
            ));
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(format!(
            "{origin} holds no rows (expected the output of hccl-test --format json)"
        ));
    }
    Ok(rows)
}

/// The rows of the file at `path` ([`parse_rows`]).
pub fn read_rows(path: &Path) -> Result<Vec<PlotRow>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    parse_rows(&text, &path.display().to_string())
}

/// The x of a row: its size, with a sizeless op (barrier) at 1 byte so a
/// log axis can show it.
fn x_of(bytes: u64) -> f64 {
    bytes.max(1) as f64
}

/// A chart of several runs, one colour per run: bus bandwidth and
/// average time against size, each run labelled with its label (one
/// legend entry per run: the same colour in both panels).
/// The title is `title`, or one made of what the rows say (ops, ranks,
/// data types) and today's date.
pub fn compare_chart(runs: &[(String, Vec<PlotRow>)], title: Option<&str>) -> Chart {
    let mut chart = Chart {
        title: title
            .map(str::to_owned)
            .unwrap_or_else(|| default_title(runs)),
        ..Chart::default()
    };
    let mut ran = Vec::new();
    for (i, (label, rows)) in runs.iter().enumerate() {
        let mut rows = rows.clone();
        rows.sort_by_key(|r| r.bytes);
        let mut names: Vec<&str> = Vec::new();
        for r in &rows {
            let n = r.algorithm.strip_suffix("Executor").unwrap_or(&r.algorithm);
            if !n.is_empty() && !names.contains(&n) {
                names.push(n);
            }
        }
        if !names.is_empty() {
            ran.push(format!("{label}: {}", names.join(", ")));
        }
        chart.bandwidth.push(Series {
            label: label.clone(),
            points: rows.iter().map(|r| (x_of(r.bytes), r.busbw_gbps)).collect(),
            color: i,
            style: Style::Measured,
        });
        chart.time.push(Series {
            label: label.clone(),
            points: rows
                .iter()
                .filter(|r| r.time_us > 0.0)
                .map(|r| (x_of(r.bytes), r.time_us))
                .collect(),
            color: i,
            style: Style::Measured,
        });
    }
    if !ran.is_empty() {
        chart.footer.push(format!("ran: {}", ran.join("; ")));
    }
    chart
}

/// "all_reduce, p=4, fp32, 2025-01-31" from the rows: each field lists
/// the values the runs have (one when they agree).
fn default_title(runs: &[(String, Vec<PlotRow>)]) -> String {
    let distinct = |f: &dyn Fn(&PlotRow) -> String| {
        let mut v: Vec<String> = runs
            .iter()
            .flat_map(|(_, rows)| rows.iter().map(f))
            .filter(|s| !s.is_empty() && s != "0")
            .collect();
        v.sort();
        v.dedup();
        v.join("/")
    };
    let mut parts = Vec::new();
    let ops = distinct(&|r| r.op.clone());
    if !ops.is_empty() {
        parts.push(ops);
    }
    let ranks = distinct(&|r| r.ranks.to_string());
    if !ranks.is_empty() {
        parts.push(format!("p={ranks}"));
    }
    let dtypes = distinct(&|r| r.dtype.clone());
    if !dtypes.is_empty() {
        parts.push(dtypes);
    }
    parts.push(utc_date());
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_units() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(fmt_bytes(8.0), "8 B");
        assert_eq!(fmt_bytes(65536.0), "64 KiB");
        assert_eq!(fmt_bytes(64.0 * 1024.0 * 1024.0), "64 MiB");
        assert_eq!(fmt_time(3.0), "3 µs");
        assert_eq!(fmt_time(1500.0), "1.5 ms");
        assert_eq!(fmt_time(2e6), "2 s");
    }

    #[test]
    fn rows_parse_and_bad_input_is_named() {
        let text = "{\"op\":\"all_reduce\",\"ranks\":2,\"bytes\":8,\"count\":2,\"dtype\":\"fp32\",\"time_us\":5.0,\"algbw_gbps\":0.0016,\"busbw_gbps\":0.0016,\"check\":\"success\",\"algorithm\":\"X\",\"p50_us\":4.0,\"p99_us\":9.0,\"max_us\":9.0}\n\
            {\"baseline\":\"memcpy\",\"bytes\":8,\"memcpy_gbps\":1.0,\"best_busbw_gbps\":0.1}\n";
        let rows = parse_rows(text, "a.json").unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].bytes, rows[0].p99_us), (8, 9.0));
        let e = parse_rows("", "empty.json").unwrap_err();
        assert!(e.contains("empty.json holds no rows"), "{e}");
        let e = parse_rows("{\"bytes\": 8,", "cut.json").unwrap_err();
        assert!(e.contains("cut.json line 1: not JSON"), "{e}");
        let e = parse_rows("{\"bytes\": 8}", "short.json").unwrap_err();
        assert!(e.contains("short.json line 1: not a row"), "{e}");
    }

    #[test]
    fn comparison_of_two_runs_labels_both() {
        let row = |bytes: u64, t: f64| PlotRow {
            op: "all_reduce".into(),
            ranks: 2,
            bytes,
            dtype: "fp32".into(),
            time_us: t,
            busbw_gbps: bytes as f64 / t / 1e3,
            algorithm: String::new(),
            p50_us: 0.0,
            p99_us: 0.0,
        };
        let runs = vec![
            ("ring".to_string(), vec![row(8, 5.0), row(1024, 9.0)]),
            ("mesh".to_string(), vec![row(1024, 7.0), row(8, 4.0)]),
        ];
        let chart = compare_chart(&runs, None);
        assert!(chart.title.starts_with("all_reduce, p=2, fp32, "));
        // sorted by size
        assert_eq!(chart.bandwidth[1].points[0].0, 8.0);
        let svg = render_svg(&chart).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        for text in ["ring", "mesh", X_DESC, BW_DESC] {
            assert!(svg.contains(text), "no {text} in the SVG");
        }
        assert!(svg.matches("<polyline").count() >= 4);
    }
}
