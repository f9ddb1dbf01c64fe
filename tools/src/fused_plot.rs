//! `hccl-test --fused … --plot FILE`: the fused ops' speed-up over the
//! unfused baseline and CATCCOS's overlap, per shape, one line per op.

use plotters::prelude::*;
use std::path::Path;

/// One measured (op, shape).
pub(crate) struct FusedRow {
    pub op: &'static str,
    pub shape: String,
    pub speedup: f64,
    pub overlap: f64,
}

const COLORS: [RGBColor; 3] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
];

/// Draws `rows` to `path` as SVG: speed-up (unfused / fused) above,
/// overlap below, shapes in the order measured along x.
pub(crate) fn draw(rows: &[FusedRow], title: &str, path: &Path) -> Result<(), String> {
    let mut shapes: Vec<&str> = Vec::new();
    for r in rows {
        if !shapes.contains(&r.shape.as_str()) {
            shapes.push(&r.shape);
        }
    }
    let mut ops: Vec<&str> = Vec::new();
    for r in rows {
        if !ops.contains(&r.op) {
            ops.push(r.op);
        }
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 760)).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| format!("drawing the plot: {e}");
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(title, ("sans-serif", 18))
            .map_err(|e| err(&e))?;
        let panels = root.split_evenly((2, 1));
        let n = shapes.len().max(1) as f64;
        for (panel, (what, pick)) in panels.iter().zip([
            (
                "speed-up over unfused (×)",
                (|r: &FusedRow| r.speedup) as fn(&FusedRow) -> f64,
            ),
            (
                "overlap (mm + comm − fused) / min(mm, comm)",
                |r: &FusedRow| r.overlap,
            ),
        ]) {
            let vals: Vec<f64> = rows.iter().map(pick).filter(|v| v.is_finite()).collect();
            let lo = vals.iter().copied().fold(0.0f64, f64::min).max(-1.0);
            let hi = vals.iter().copied().fold(1.2f64, f64::max).min(3.0) * 1.1;
            let mut chart = ChartBuilder::on(panel)
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .caption(what, ("sans-serif", 15))
                .build_cartesian_2d(-0.5f64..(n - 0.5), lo..hi)
                .map_err(|e| err(&e))?;
            let labels = shapes.clone();
            chart
                .configure_mesh()
                .x_labels(shapes.len().max(1))
                .x_label_formatter(&|x| {
                    let i = x.round();
                    if (x - i).abs() < 1e-6 && i >= 0.0 {
                        labels
                            .get(i as usize)
                            .map_or(String::new(), |s| s.to_string())
                    } else {
                        String::new()
                    }
                })
                .x_desc("M×K×N")
                .draw()
                .map_err(|e| err(&e))?;
            chart
                .draw_series(LineSeries::new(
                    [(-0.5, 1.0), (n - 0.5, 1.0)],
                    BLACK.mix(0.4).stroke_width(1),
                ))
                .map_err(|e| err(&e))?;
            for (i, op) in ops.iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                let pts: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|r| r.op == *op)
                    .filter_map(|r| {
                        let x = shapes.iter().position(|s| *s == r.shape)? as f64;
                        Some((x, pick(r).clamp(lo, hi)))
                    })
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(*op)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                    .map_err(|e| err(&e))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    std::fs::write(path, svg).map_err(|e| format!("writing the plot {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_is_written_with_every_op_and_shape() {
        let rows = vec![
            FusedRow {
                op: "mm_rs",
                shape: "1792×768×1280".into(),
                speedup: 1.4,
                overlap: 0.6,
            },
            FusedRow {
                op: "ag_mm",
                shape: "1792×768×1280".into(),
                speedup: 1.3,
                overlap: 0.5,
            },
            FusedRow {
                op: "mm_rs",
                shape: "16384×1024×1024".into(),
                speedup: 1.1,
                overlap: 0.9,
            },
        ];
        let path = std::env::temp_dir().join(format!("fused-plot-{}.svg", std::process::id()));
        draw(&rows, "fused ops", &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        for needle in [
            "mm_rs",
            "ag_mm",
            "1792×768×1280",
            "16384×1024×1024",
            "speed-up",
        ] {
            assert!(svg.contains(needle), "the plot lacks {needle}");
        }
    }
}
