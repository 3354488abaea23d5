//! One SVG bar chart per workload group (writes, reads, YCSB): ops/s per workload, one bar
//! per engine, on a logarithmic axis (the workloads differ by three orders of magnitude).

use plotters::prelude::*;
use std::path::Path;

/// The workload groups, each drawn as one chart.
pub const GROUPS: [(&str, &[&str]); 3] = [
    ("writes", &["fillseq", "fillrandom", "overwrite"]),
    (
        "reads",
        &[
            "readrandom",
            "readmissing",
            "seekrandom",
            "readwhilewriting",
            "verify",
        ],
    ),
    (
        "ycsb",
        &["ycsb-a", "ycsb-b", "ycsb-c", "ycsb-d", "ycsb-e", "ycsb-f"],
    ),
];

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(174, 199, 232),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

/// Draws `chart-<group>.svg` in `dir` for every group with results; returns the files.
pub fn draw(all: &[serde_json::Value], dir: &Path) -> Result<Vec<String>, String> {
    let mut engines: Vec<&str> = Vec::new();
    for v in all {
        let e = v["engine"].as_str().unwrap_or("?");
        if !engines.contains(&e) {
            engines.push(e);
        }
    }
    let ops = |e: &str, w: &str| -> Option<f64> {
        all.iter()
            .find(|v| v["engine"].as_str() == Some(e) && v["workload"].as_str() == Some(w))
            .and_then(|v| v["ops_per_sec"].as_f64())
    };
    let mut files = Vec::new();
    for (group, workloads) in GROUPS {
        let present: Vec<&str> = workloads
            .iter()
            .copied()
            .filter(|w| engines.iter().any(|e| ops(e, w).is_some()))
            .collect();
        if present.is_empty() {
            continue;
        }
        let max = present
            .iter()
            .flat_map(|w| engines.iter().filter_map(|e| ops(e, w)))
            .fold(10.0, f64::max)
            * 2.0;
        let name = format!("chart-{group}.svg");
        let path = dir.join(&name);
        let plot = |path: &Path| -> Result<(), Box<dyn std::error::Error>> {
            let root =
                SVGBackend::new(path, (200 + 160 * present.len() as u32, 480)).into_drawing_area();
            root.fill(&WHITE)?;
            let names = present.clone();
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!("{group}: operations per second"),
                    ("sans-serif", 20),
                )
                .margin(15)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(0.0..present.len() as f64, (1.0..max).log_scale())?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(present.len() * 2 + 1)
                .x_label_formatter(&|x| {
                    let i = (x - 0.5).round();
                    if (x - 0.5 - i).abs() < 0.01 && i >= 0.0 {
                        names
                            .get(i as usize)
                            .map_or(String::new(), |s| s.to_string())
                    } else {
                        String::new()
                    }
                })
                .y_desc("ops/s")
                .draw()?;
            let width = 0.8 / engines.len() as f64;
            for (k, e) in engines.iter().enumerate() {
                let color = COLORS[k % COLORS.len()];
                let bars: Vec<Rectangle<(f64, f64)>> = present
                    .iter()
                    .enumerate()
                    .filter_map(|(i, w)| {
                        let x0 = i as f64 + 0.1 + k as f64 * width;
                        ops(e, w).map(|v| {
                            Rectangle::new([(x0, 1.0), (x0 + width, v.max(1.0))], color.filled())
                        })
                    })
                    .collect();
                chart.draw_series(bars)?.label(*e).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .border_style(BLACK)
                .background_style(WHITE.mix(0.8))
                .draw()?;
            root.present()?;
            Ok(())
        };
        plot(&path).map_err(|e| format!("chart {}: {e}", path.display()))?;
        files.push(name);
    }
    Ok(files)
}

/// Draws `chart-scaling.svg` in `dir`: operations per second of the load (`fillrandom`) and of
/// present and absent gets against the number of keys, both axes logarithmic, a line per
/// engine and workload. Returns the file, or nothing if the run has fewer than two sizes.
pub fn draw_scaling(all: &[serde_json::Value], dir: &Path) -> Result<Vec<String>, String> {
    let mut keys: Vec<u64> = all.iter().filter_map(|v| v["keys"].as_u64()).collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.len() < 2 {
        return Ok(Vec::new());
    }
    let mut engines: Vec<&str> = Vec::new();
    for v in all {
        let e = v["engine"].as_str().unwrap_or("?");
        if !engines.contains(&e) {
            engines.push(e);
        }
    }
    let workloads = ["fillrandom", "readrandom", "readmissing"];
    let series = |e: &str, w: &str| -> Vec<(f64, f64)> {
        let mut pts: Vec<(f64, f64)> = all
            .iter()
            .filter(|v| v["engine"].as_str() == Some(e) && v["workload"].as_str() == Some(w))
            .filter_map(|v| Some((v["keys"].as_u64()? as f64, v["ops_per_sec"].as_f64()?)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    };
    let max = all
        .iter()
        .filter_map(|v| v["ops_per_sec"].as_f64())
        .fold(10.0, f64::max)
        * 2.0;
    let (lo, hi) = (
        keys[0] as f64 / 1.5,
        *keys.last().unwrap_or(&1) as f64 * 1.5,
    );
    let name = "chart-scaling.svg".to_string();
    let path = dir.join(&name);
    let plot = |path: &Path| -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (760, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "operations per second as the data grows",
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((lo..hi).log_scale(), (100.0..max).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("keys")
            .y_desc("ops/s")
            .x_label_formatter(&|x| format!("{:.0}M", x / 1e6))
            .draw()?;
        let mut k = 0;
        for e in &engines {
            for w in workloads {
                let pts = series(e, w);
                if pts.is_empty() {
                    continue;
                }
                let color = COLORS[k % COLORS.len()];
                k += 1;
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                    .label(format!("{e} {w}"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], color));
                chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
        root.present()?;
        Ok(())
    };
    plot(&path).map_err(|e| format!("chart {}: {e}", path.display()))?;
    Ok(vec![name])
}
