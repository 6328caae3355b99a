//! `symshard report --sweep RESULTS.parquet -o sweep.html`: a sweep's rows drawn in one
//! self-contained HTML file (inline SVG, no script, nothing fetched): the cost and the time of
//! 10¹² tokens against device count per machine, the Pareto front of time against cost, and a heatmap of the
//! winning layout family over two swept axes. Every number is read back from the Parquet file
//! `sweep` wrote; nothing is priced again.

use super::point::Row;
use crate::error::{Error, Result};
use crate::report::{chart_err, esc};
use plotters::prelude::*;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The rows of a sweep's Parquet file, as `sweep` wrote them.
pub fn read_rows(path: &Path) -> Result<Vec<Row>> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Float64Type, UInt64Type};
    let bad = |e: &dyn std::fmt::Display| Error::Usage(format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| bad(&format!("not a Parquet file `symshard sweep` wrote ({e})")))?
        .build()
        .map_err(|e| bad(&e))?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| bad(&e))?;
        let schema = batch.schema();
        for i in 0..batch.num_rows() {
            let mut m = Map::new();
            for (f, col) in schema.fields().iter().zip(batch.columns()) {
                let v = if col.is_null(i) {
                    Value::Null
                } else {
                    match f.data_type() {
                        DataType::UInt64 => Value::from(col.as_primitive::<UInt64Type>().value(i)),
                        // Floats travel as their shortest text, as the journal writes them.
                        DataType::Float64 => {
                            Value::from(col.as_primitive::<Float64Type>().value(i).to_string())
                        }
                        DataType::Utf8 => Value::from(col.as_string::<i32>().value(i)),
                        DataType::Boolean => Value::from(col.as_boolean().value(i)),
                        t => return Err(bad(&format!("column `{}` has type {t}", f.name()))),
                    }
                };
                m.insert(f.name().clone(), v);
            }
            let row: Row = serde_json::from_value(Value::Object(m)).map_err(|e| {
                bad(&format!(
                    "row {i} is not a row of `symshard sweep` ({e}): write it again with this version"
                ))
            })?;
            rows.push(row);
        }
    }
    if rows.is_empty() {
        return Err(bad(&"the sweep has no rows"));
    }
    Ok(rows)
}

/// The swept axes of a row, in the sweep's order, as text.
fn axes(r: &Row) -> [(&'static str, String); 6] {
    let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    [
        ("model", r.model.clone()),
        ("machine", r.machine.clone()),
        ("devices", r.devices.to_string()),
        ("precision", r.precision.clone()),
        ("batch", opt(r.batch)),
        ("sequence", opt(r.sequence)),
    ]
}

/// Each axis's distinct values in the order the rows first give them.
fn axis_values(rows: &[Row]) -> Vec<(&'static str, Vec<String>)> {
    let mut out: Vec<(&'static str, Vec<String>)> = Vec::new();
    for r in rows {
        for (k, (name, v)) in axes(r).into_iter().enumerate() {
            if out.len() <= k {
                out.push((name, Vec::new()));
            }
            if !out[k].1.contains(&v) {
                out[k].1.push(v);
            }
        }
    }
    out
}

/// The axes that are swept on their own: more than one value, and (for batch and sequence,
/// which follow each model's own unless the spec sweeps them) not one value per model.
fn free_axes(rows: &[Row], values: &[(&'static str, Vec<String>)]) -> Vec<usize> {
    (0..values.len())
        .filter(|&k| values[k].1.len() > 1)
        .filter(|&k| {
            k < 4 || {
                let mut per_model: BTreeMap<String, String> = BTreeMap::new();
                rows.iter().any(|r| {
                    let ax = axes(r);
                    per_model
                        .insert(r.model.clone(), ax[k].1.clone())
                        .is_some_and(|old| old != ax[k].1)
                })
            }
        })
        .collect()
}

/// SI text for a chart's tick: three significant digits and k, M, G.
fn si(v: f64) -> String {
    let (x, unit) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, " G"),
        a if a >= 1e6 => (v / 1e6, " M"),
        a if a >= 1e3 => (v / 1e3, " k"),
        _ => (v, ""),
    };
    let digits = if x.abs() >= 100.0 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.digits$}{unit}")
}

/// A legend as HTML: a swatch and a label per series.
fn legend(labels: &[String]) -> String {
    let mut h = String::from("<ul class=\"legend\">");
    for (i, l) in labels.iter().enumerate() {
        let RGBColor(r, g, b) = PALETTE[i % PALETTE.len()];
        h += &format!(
            "<li><span style=\"background:rgb({r},{g},{b})\"></span>{}</li>",
            esc(l)
        );
    }
    h + "</ul>"
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// A per-token quantity a scaling chart draws: its name (the caption and the y axis) and how a
/// row gives it.
struct PerToken {
    name: &'static str,
    of: fn(&Row) -> Option<f64>,
}

/// Hours the point's devices take to train 10¹² tokens: 10¹² ÷ tokens per second ÷ 3600.
fn hours_per_trillion_tokens(r: &Row) -> Option<f64> {
    r.tokens_per_second
        .filter(|&t| t > 0.0)
        .map(|t| 1e12 / t / 3600.0)
}

/// A per-token quantity (logarithmic) against devices (one column per device count), one line
/// per machine and per value of every other axis swept on its own; the legend as HTML.
fn scaling_svg(
    rows: &[Row],
    values: &[(&'static str, Vec<String>)],
    what: &PerToken,
) -> Result<(String, String)> {
    let free = free_axes(rows, values);
    let mut counts: Vec<u64> = rows.iter().map(|r| r.devices).collect();
    counts.sort_unstable();
    counts.dedup();
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        let Some(t) = (what.of)(r).filter(|&t| r.feasible && t > 0.0) else {
            continue;
        };
        let ax = axes(r);
        let label: Vec<String> = (0..ax.len())
            .filter(|&k| k != 2 && (k == 1 || free.contains(&k)))
            .map(|k| ax[k].1.clone())
            .collect();
        let x = counts.iter().position(|&c| c == r.devices).unwrap_or(0) as f64;
        series
            .entry(label.join(" · "))
            .or_default()
            .push((x, t.log10()));
    }
    let (y0, y1) = log_range(series.values().flatten().map(|p| p.1));
    let n = counts.len();
    let mut svg = String::new();
    let labels: Vec<String> = series.keys().cloned().collect();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{} against devices", what.name), ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.4f64..(n as f64 - 0.6), y0..y1)
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .x_desc("devices")
            .y_desc(what.name)
            .x_labels(n.max(2))
            .x_label_formatter(&|x| {
                let i = x.round();
                match counts.get(i as usize) {
                    Some(c) if (x - i).abs() < 1e-6 && i >= 0.0 => c.to_string(),
                    _ => String::new(),
                }
            })
            .y_labels(6)
            .y_label_formatter(&|y| si(10f64.powf(*y)))
            .light_line_style(WHITE)
            .draw()
            .map_err(chart_err)?;
        for (i, pts) in series.into_values().enumerate() {
            let mut pts = pts;
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(chart_err)?;
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))
                .map_err(chart_err)?;
        }
        root.present().map_err(chart_err)?;
    }
    Ok((svg, legend(&labels)))
}

/// A logarithmic axis drawn as a linear one over log₁₀ of the values (`ls`, already log₁₀),
/// so that its ticks are always there however narrow the range: the range, widened a little;
/// one decade where there is no value. The ticks read `10^v`.
fn log_range(ls: impl Iterator<Item = f64>) -> (f64, f64) {
    let (a, b) = ls
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
    if !a.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((b - a) * 0.08).max(0.03);
    (a - pad, b + pad)
}

/// What a row's cost axis reads: dollars per 10¹² tokens where every feasible row is priced,
/// else GPU-hours per 10¹² tokens.
fn cost_of(rows: &[Row]) -> (&'static str, fn(&Row) -> Option<f64>) {
    let priced = rows
        .iter()
        .filter(|r| r.feasible)
        .all(|r| r.cost_per_trillion_tokens_dollars.is_some());
    if priced {
        ("dollars per 10¹² tokens", |r| {
            r.cost_per_trillion_tokens_dollars
        })
    } else {
        ("GPU-hours per 10¹² tokens", |r| {
            r.gpu_hours_per_trillion_tokens
        })
    }
}

/// The points no other point beats on both time and cost (lower is better on both).
pub fn pareto(points: &[(f64, f64)]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..points.len()).collect();
    idx.sort_by(|&a, &b| {
        points[a]
            .0
            .total_cmp(&points[b].0)
            .then(points[a].1.total_cmp(&points[b].1))
    });
    let mut front = Vec::new();
    let mut best = f64::INFINITY;
    for i in idx {
        if points[i].1 < best {
            best = points[i].1;
            front.push(i);
        }
    }
    front
}

/// Time to train 10¹² tokens against its cost, every feasible point, the Pareto front joined.
fn pareto_svg(rows: &[Row]) -> Result<(String, Vec<usize>)> {
    let (cost_name, cost) = cost_of(rows);
    let mut which = Vec::new();
    let mut points = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let (Some(t), Some(hours), Some(c)) =
            (r.seconds_per_step, hours_per_trillion_tokens(r), cost(r))
        else {
            continue;
        };
        if r.feasible && t > 0.0 {
            which.push(i);
            points.push((hours.log10(), c.log10()));
        }
    }
    let front = pareto(&points);
    let (x0, x1) = log_range(points.iter().map(|p| p.0));
    let (y0, y1) = log_range(points.iter().map(|p| p.1));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("time against cost per 10¹² tokens", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(72)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .x_desc("hours per 10¹² tokens")
            .y_desc(cost_name)
            .x_labels(6)
            .x_label_formatter(&|x| si(10f64.powf(*x)))
            .y_labels(6)
            .y_label_formatter(&|y| si(10f64.powf(*y)))
            .light_line_style(WHITE)
            .draw()
            .map_err(chart_err)?;
        let grey = RGBColor(150, 150, 150);
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 3, grey.filled())))
            .map_err(chart_err)?;
        let line: Vec<(f64, f64)> = front.iter().map(|&i| points[i]).collect();
        let red = RGBColor(214, 39, 40);
        chart
            .draw_series(LineSeries::new(line.clone(), red.stroke_width(2)))
            .map_err(chart_err)?;
        chart
            .draw_series(line.iter().map(|p| Circle::new(*p, 4, red.filled())))
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok((svg, front.into_iter().map(|i| which[i]).collect()))
}

/// One point in a heatmap cell: the other swept axes' values, its winning family, and why it
/// has none.
type Cell = (String, String, String);

/// A point with no layout to show (none fits, or the machine cannot run it); its reason is the
/// cell's title.
const NO_LAYOUT: &str = "no layout";

/// The two axes the heatmap spans: the first two with more than one value, devices and
/// machine first; an axis of one value fills out a grid of one row or column.
fn heatmap_axes(values: &[(&'static str, Vec<String>)]) -> (usize, usize) {
    let order = [2, 1, 0, 3, 4, 5];
    let mut swept = order.iter().copied().filter(|&k| values[k].1.len() > 1);
    let a = swept.next().unwrap_or(2);
    let b = swept.next().unwrap_or(if a == 1 { 2 } else { 1 });
    (a, b)
}

/// The winning layout family per cell of two swept axes, as an HTML table (one cell per pair;
/// where other axes are swept too, the cell lists each of their points' family).
fn heatmap(rows: &[Row], values: &[(&'static str, Vec<String>)]) -> String {
    let (a, b) = heatmap_axes(values);
    let free = free_axes(rows, values);
    let mut families: Vec<String> = Vec::new();
    let mut cells: BTreeMap<(usize, usize), Vec<Cell>> = BTreeMap::new();
    for r in rows {
        let ax = axes(r);
        let i = values[a].1.iter().position(|v| *v == ax[a].1).unwrap_or(0);
        let j = values[b].1.iter().position(|v| *v == ax[b].1).unwrap_or(0);
        let fam = match (&r.family, r.feasible) {
            (Some(f), true) => f.clone(),
            _ => NO_LAYOUT.into(),
        };
        if !families.contains(&fam) {
            families.push(fam.clone());
        }
        let others: Vec<String> = free
            .iter()
            .filter(|&&k| k != a && k != b)
            .map(|&k| ax[k].1.clone())
            .collect();
        let why = r.reason.clone().unwrap_or_default();
        cells
            .entry((i, j))
            .or_default()
            .push((others.join(" "), fam, why));
    }
    let colour = |f: &str| {
        if f == NO_LAYOUT {
            "#dddddd".to_string()
        } else {
            let k = families
                .iter()
                .filter(|x| *x != NO_LAYOUT)
                .position(|x| x == f)
                .unwrap_or(0);
            let RGBColor(r, g, b) = PALETTE[k % PALETTE.len()];
            format!("rgba({r},{g},{b},0.35)")
        }
    };
    let mut h = format!(
        "<table class=\"heat\"><caption>winning layout family: {} (rows) by {} (columns)</caption><thead><tr><th></th>",
        values[a].0, values[b].0
    );
    for v in &values[b].1 {
        h += &format!("<th>{}</th>", esc(v));
    }
    h += "</tr></thead><tbody>";
    for (i, va) in values[a].1.iter().enumerate() {
        h += &format!("<tr><th>{}</th>", esc(va));
        for j in 0..values[b].1.len() {
            let fams = cells.get(&(i, j)).cloned().unwrap_or_default();
            if fams.is_empty() {
                h += "<td>-</td>";
                continue;
            }
            let lines: Vec<String> = fams
                .iter()
                .map(|(who, f, why)| {
                    let who = if who.is_empty() {
                        String::new()
                    } else {
                        format!("<span class=\"who\">{}</span> ", esc(who))
                    };
                    let title = if why.is_empty() {
                        String::new()
                    } else {
                        format!(" title=\"{}\"", esc(why))
                    };
                    format!(
                        "<div style=\"background:{}\"{title}>{who}{}</div>",
                        colour(f),
                        esc(f)
                    )
                })
                .collect();
            h += &format!("<td>{}</td>", lines.join(""));
        }
        h += "</tr>";
    }
    h + "</tbody></table>"
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:20px}\
table{border-collapse:collapse;font-size:13px;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}\
.heat td{padding:0}.heat td div{padding:2px 8px}.who{color:#555;font-size:12px}figure{margin:16px 0}\
.legend{list-style:none;padding:0;columns:2;font-size:13px}.legend span{display:inline-block;width:14px;height:4px;margin:0 6px 3px 0}";

/// The sweep's HTML page.
pub fn html(rows: &[Row], source: &str) -> Result<String> {
    let values = axis_values(rows);
    let (cost_name, cost) = cost_of(rows);
    let (scaling, scaling_legend) = scaling_svg(
        rows,
        &values,
        &PerToken {
            name: cost_name,
            of: cost,
        },
    )?;
    let (hours, hours_legend) = scaling_svg(
        rows,
        &values,
        &PerToken {
            name: "hours per 10¹² tokens",
            of: hours_per_trillion_tokens,
        },
    )?;
    let (front_svg, front) = pareto_svg(rows)?;
    let feasible = rows.iter().filter(|r| r.feasible).count();
    let mut h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>symshard sweep · {}</title><style>{STYLE}</style></head><body data-rendered=\"yes\">\n",
        esc(source)
    );
    h += &format!(
        "<h1>sweep {}: {} points, {} with a layout that fits</h1>\n",
        esc(source),
        rows.len(),
        feasible
    );
    let swept: Vec<String> = values
        .iter()
        .map(|(n, v)| format!("{n}: {}", esc(&v.join(", "))))
        .collect();
    h += &format!("<p>{}</p>\n", swept.join("; "));
    h += &format!("<figure id=\"scaling\">{scaling}{scaling_legend}</figure>\n");
    h += &format!("<figure id=\"hours\">{hours}{hours_legend}</figure>\n");
    h += &format!("<figure id=\"pareto\">{front_svg}</figure>\n");
    h += "<table id=\"front\"><caption>the Pareto front (no other point is both faster and cheaper)</caption><thead><tr><th>point</th><th>model</th><th>machine</th><th>devices</th><th>precision</th><th>seconds per step</th><th>best layout</th></tr></thead><tbody>";
    for &i in &front {
        let r = &rows[i];
        h += &format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.4}</td><td>{}</td></tr>",
            r.point,
            esc(&r.model),
            esc(&r.machine),
            r.devices,
            esc(&r.precision),
            r.seconds_per_step.unwrap_or(f64::NAN),
            esc(r.strategy.as_deref().unwrap_or("")),
        );
    }
    h += "</tbody></table>\n";
    h += &format!(
        "<figure id=\"heatmap\">{}</figure>\n",
        heatmap(rows, &values)
    );
    h += "</body></html>\n";
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::{pareto, si};

    #[test]
    fn the_pareto_front_keeps_the_points_nothing_beats_on_both_axes() {
        // (time, cost): (3, 1) and (1, 3) and (2, 2) are each best somewhere; (3, 3) and
        // (2, 2.5) are beaten by (2, 2).
        let pts = [(3.0, 1.0), (3.0, 3.0), (1.0, 3.0), (2.0, 2.0), (2.0, 2.5)];
        assert_eq!(pareto(&pts), vec![2, 3, 0]);
        assert_eq!(pareto(&[]), Vec::<usize>::new());
    }

    #[test]
    fn ticks_read_with_three_significant_digits() {
        assert_eq!(si(1_234_567.0), "1.23 M");
        assert_eq!(si(45_600.0), "45.6 k");
        assert_eq!(si(512.0), "512");
        assert_eq!(si(0.0421), "0.04");
    }
}
