//! A self-contained HTML report of a ranking: the sortable ranking table, the cost components of
//! each strategy, memory versus time with its Pareto frontier, and the top strategy's timeline,
//! memory and formulas.
//!
//! The report lays out what the commands computed — the JSON of `rank`, of `cost --symbolic` and
//! of `timeline` for the top strategy, and the timeline's Gantt chart — and computes no cost of
//! its own. Charts are drawn with `plotters`' SVG backend; the Gantt chart, which can hold tens
//! of thousands of bars, is embedded zlib-compressed and inflated by the browser. The file
//! references nothing outside itself.

mod write;

pub use write::write_report;
pub(crate) use write::write_report_loaded;

use crate::error::{Error, Result};
use crate::sym::Rational;
use crate::units::{self, si};
use base64::Engine as _;
use num_traits::ToPrimitive;
use plotters::prelude::*;
use serde_json::Value;
use std::fmt::Write as _;

/// What a report shows.
pub struct ReportInput<'a> {
    /// The command line that made it, shown at the top.
    pub command: String,
    /// `rank --format json`.
    pub rank: &'a Value,
    /// `cost --symbolic --format json` of the top strategy.
    pub cost: &'a Value,
    /// `timeline --format json` of the top strategy.
    pub timeline: &'a Value,
    /// The top strategy's Gantt chart ([`crate::timeline::gantt_svg`]).
    pub gantt_svg: &'a str,
    /// Device memory, in bytes.
    pub capacity_bytes: &'a Rational,
    /// For each ranked strategy, in the ranking's order: its relative communication cost by
    /// collective kind and tier ([`crate::parallel::breakdown::comm_by_kind`]), as
    /// `[{"kind", "tier", "cost"}]` with `cost` exact.
    pub comm_parts: &'a Value,
    /// The top strategy's per-device amounts ([`crate::search::versus::compare`] of it with
    /// itself), as `[{"group", "name", "value", "formula", "why"}]`: `value` exact, `formula` in the
    /// model's symbols or null where none is derived, `why` (or null) why it cannot be one.
    pub top_formulas: &'a Value,
    /// What the ranking says of part of each NVLink domain
    /// ([`crate::api::PartialDomains::sentence`]), where it searched it.
    pub partial_domains: Option<String>,
}

/// Collective kinds in the order the bars stack them, each with its colour within the
/// intra-node and the inter-node tier (every other kind shares the last pair).
const COLLECTIVES: [(&str, RGBColor, RGBColor); 6] = [
    (
        "all-reduce",
        RGBColor(0xb0, 0x7a, 0xa1),
        RGBColor(0xe1, 0x57, 0x59),
    ),
    (
        "reduce-scatter",
        RGBColor(0xd4, 0xa6, 0xc8),
        RGBColor(0xff, 0x9d, 0x9a),
    ),
    (
        "all-gather",
        RGBColor(0x86, 0xbc, 0xb6),
        RGBColor(0x49, 0x98, 0x94),
    ),
    (
        "all-to-all",
        RGBColor(0xf1, 0xce, 0x63),
        RGBColor(0xf2, 0x8e, 0x2b),
    ),
    (
        "send-recv",
        RGBColor(0x8c, 0xd1, 0x7d),
        RGBColor(0x59, 0xa1, 0x4f),
    ),
    (
        "other",
        RGBColor(0xd7, 0xb5, 0xa6),
        RGBColor(0x9d, 0x76, 0x60),
    ),
];

/// The legend of the hatched band inside a bar: the data-parallel traffic that overlapping
/// hides, drawn where it overlaps the compute it runs under, so that no bar rises above its total.
const HIDDEN_LABEL: &str =
    "hatched: data-parallel traffic hidden under compute, drawn over the compute it runs under (each bar ends at its total)";

/// The colour of the relative cost's kernel term in the components chart.
const KERNELS_COLOUR: RGBColor = RGBColor(0xa0, 0xcb, 0xe8);

/// Colours of the cost components (the same in the bars and the table).
const COMPONENTS: [(&str, &str, RGBColor); 4] = [
    ("compute", "compute", RGBColor(0x4e, 0x79, 0xa7)),
    (
        "comm_intra",
        "intra-node communication",
        RGBColor(0xb0, 0x7a, 0xa1),
    ),
    (
        "comm_inter",
        "inter-node communication",
        RGBColor(0xe1, 0x57, 0x59),
    ),
    (
        "bubble",
        "bubble (pipeline fill and drain)",
        RGBColor(0x9c, 0x9c, 0x9c),
    ),
];

const MEMORY: [(&str, &str, RGBColor); 4] = [
    ("params", "weights", RGBColor(0x4e, 0x79, 0xa7)),
    ("grads", "gradients", RGBColor(0x59, 0xa1, 0x4f)),
    ("optimizer", "optimizer state", RGBColor(0xf2, 0x8e, 0x2b)),
    (
        "activations",
        "saved activations",
        RGBColor(0xb0, 0x7a, 0xa1),
    ),
];

/// An exact number as the commands print it (`"123"` or `"7/3"`).
fn exact(v: &Value) -> Option<Rational> {
    match v {
        Value::String(s) => {
            let (n, d) = s.split_once('/').unwrap_or((s, "1"));
            let n: num_bigint::BigInt = n.trim().parse().ok()?;
            let d: num_bigint::BigInt = d.trim().parse().ok()?;
            (d != 0.into()).then(|| Rational::new(n, d))
        }
        Value::Number(n) => n.as_u64().map(|u| Rational::from_integer(u.into())),
        _ => None,
    }
}

fn float(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        _ => exact(v).and_then(|r| r.to_f64()).unwrap_or(f64::NAN),
    }
}

/// `s` with the characters HTML gives meaning escaped.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A chart axis' value with a decimal prefix, as the terminal tables write amounts.
fn si_float(v: f64, sig: u32, unit: &str) -> String {
    Rational::from_float(v).map_or_else(|| format!("{v:.2e}"), |r| si(&r, sig, unit))
}

/// An exact amount as the terminal's formatter `f` prints it ([`units`]: one formatter per
/// quantity), with what `--exact` prints in its title (followed by `unit`); other text as it is.
fn amount(v: &Value, f: fn(&Rational) -> String, unit: &str) -> String {
    match exact(v) {
        Some(r) => format!(
            "<span title=\"{}{unit}\">{}</span>",
            esc(&units::with_exact(true, || f(&r))),
            esc(&f(&r))
        ),
        None => esc(&text(v)),
    }
}

/// `part` of `total` in per cent, as `rank` prints a share ([`units::percent`]).
fn pct(part: &Value, total: &Value) -> String {
    match (exact(part), exact(total)) {
        (Some(p), Some(t)) => units::percent(&p, &t),
        _ => "-".into(),
    }
}

/// A row's bubble as `rank` prints it: a share of its relative cost, `-` without a pipeline.
fn bubble(r: &Value) -> String {
    if r["pp"].as_u64() == Some(1) {
        "-".into()
    } else {
        pct(&r["relative"]["bubble"], &r["relative"]["total"])
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A chart that plotters could not draw: an internal error.
pub(crate) fn chart_err<E: std::fmt::Debug>(e: E) -> Error {
    Error::Internal(format!("cannot draw a chart: {e:?}"))
}

/// A short label of a rank row's knobs.
fn knobs(r: &Value) -> String {
    let mut s = format!("dp={} tp={} pp={}", r["dp"], r["tp"], r["pp"]);
    if r["cp"].as_u64().unwrap_or(1) > 1 {
        let _ = write!(s, " cp={}", r["cp"]);
    }
    if r["ep"].as_u64().unwrap_or(1) > 1 {
        let _ = write!(s, " ep={}", r["ep"]);
    }
    let _ = write!(s, " mbs={}", r["micro_batch_size"]);
    s
}

/// A segment of the components chart's bars: its label, colour and the value of every row.
type Segment = (String, RGBColor, Vec<f64>);

/// The stacked segments of the components chart: compute, communication by tier and
/// collective kind (those some strategy has), bubble (where some strategy has one) — each a
/// label, a colour and the value of every row; and how many of them, from the first, are
/// compute (compute alone, or compute and the kernel term): what overlapped traffic runs under.
fn segments(rows: &[Value], parts: &Value) -> (Vec<Segment>, usize) {
    let mut out = vec![(
        "compute".to_string(),
        COMPONENTS[0].2,
        rows.iter()
            .map(|r| float(&r["relative"]["compute"]))
            .collect(),
    )];
    let kernels: Vec<f64> = rows
        .iter()
        .map(|r| float(&r["relative"]["kernels"]))
        .map(|x| if x.is_finite() { x } else { 0.0 })
        .collect();
    if kernels.iter().any(|v| *v > 0.0) {
        out.push((
            "kernels beyond their FLOPs (GEMMs below the plateau, launches)".to_string(),
            KERNELS_COLOUR,
            kernels,
        ));
    }
    let under = out.len();
    let slot = |kind: &str| {
        COLLECTIVES
            .iter()
            .position(|(k, _, _)| *k == kind)
            .unwrap_or(COLLECTIVES.len() - 1)
    };
    for tier in ["intra", "inter"] {
        for (c, (kind, intra, inter)) in COLLECTIVES.iter().enumerate() {
            let values: Vec<f64> = (0..rows.len())
                .map(|i| {
                    parts[i]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .filter(|p| {
                            p["tier"] == tier && slot(p["kind"].as_str().unwrap_or("")) == c
                        })
                        .map(|p| float(&p["cost"]))
                        .sum()
                })
                .collect();
            if values.iter().any(|v| *v > 0.0) {
                let what = match *kind {
                    "send-recv" => "send/receive (pipeline, context-parallel ring)",
                    "other" => "other collectives",
                    k => k,
                };
                let (colour, where_) = if tier == "intra" {
                    (*intra, "intra-node")
                } else {
                    (*inter, "inter-node")
                };
                out.push((format!("{where_} {what}"), colour, values));
            }
        }
    }
    // No legend entry for a bubble no row has (none without a pipeline).
    let bubbles: Vec<f64> = rows
        .iter()
        .map(|r| float(&r["relative"]["bubble"]))
        .collect();
    if bubbles.iter().any(|v| *v > 0.0) {
        out.push((COMPONENTS[3].1.to_string(), COMPONENTS[3].2, bubbles));
    }
    (out, under)
}

/// Characters of a components legend line: 12 px sans-serif in the 254 px beside the swatches.
const LEGEND_CHARS: usize = 34;

/// `text` in lines of at most `width` characters, broken between words (a longer word stands on
/// its own line).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = vec![];
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// Stacked bars of each strategy's relative cost: compute, communication by tier and collective
/// kind, and pipeline bubble, with a legend entry for every colour.
fn components_svg(rows: &[Value], parts: &Value) -> Result<String> {
    let (segs, under) = segments(rows, parts);
    let hidden: Vec<f64> = rows
        .iter()
        .map(|r| float(&r["relative"]["hidden"]))
        .map(|x| if x.is_finite() { x } else { 0.0 })
        .collect();
    let marked = hidden.iter().any(|h| *h > 0.0);
    let height = 400.max(40 + legend_height(&segs, marked) as u32 + 10);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1060, height)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let (left, right) = root.split_horizontally(780);
        component_bars(&left, (&segs, under), &hidden, marked)?;
        component_legend(&right, &segs, marked)?;
        root.present().map_err(chart_err)?;
    }
    Ok(svg)
}

/// The height of the components chart's legend in pixels: 15 a line and 7 between entries, for
/// every segment and, where overlap hides traffic, the hatched band's entry.
fn legend_height(segs: &[Segment], marked: bool) -> usize {
    segs.iter()
        .map(|(label, _, _)| label.as_str())
        .chain(marked.then_some(HIDDEN_LABEL))
        .map(|label| 15 * wrap(label, LEGEND_CHARS).len() + 7)
        .sum()
}

/// Pixels between two lines of the hatching, and the lines' width.
const HATCH_STEP: i32 = 6;
const HATCH_WIDTH: u32 = 2;

/// Hatches the pixel box `(left, top, right, bottom)` of `area` with lines rising at 45° in
/// `colour`, each clipped to the box.
fn hatch(
    area: &Area,
    (left, top, right, bottom): (i32, i32, i32, i32),
    colour: RGBColor,
) -> Result<()> {
    // The lines x + y = c that cross the box.
    let mut c = left + top + HATCH_STEP / 2;
    while c < right + bottom {
        let x0 = left.max(c - bottom);
        let x1 = right.min(c - top);
        if x0 < x1 {
            area.draw(&PathElement::new(
                vec![(x0, c - x0), (x1, c - x1)],
                colour.stroke_width(HATCH_WIDTH),
            ))
            .map_err(chart_err)?;
        }
        c += HATCH_STEP;
    }
    Ok(())
}

/// The components chart's plot: one stacked bar a strategy, ending at its total. Compute (with
/// the kernel term) stacks first; the data-parallel traffic that overlap hides runs under it,
/// so the communication above starts that much below compute's top, and the band where both
/// run is hatched in compute's colour over the communication's.
fn component_bars(
    area: &Area,
    (segs, under): (&[Segment], usize),
    hidden: &[f64],
    marked: bool,
) -> Result<()> {
    let count = hidden.len();
    // `segs[..under]`: compute and the kernel term, which the hidden traffic runs under.
    let compute_top: Vec<f64> = (0..count)
        .map(|i| segs[..under].iter().map(|(_, _, v)| v[i]).sum::<f64>())
        .collect();
    // What overlap hides, at most the compute it runs under.
    let overlap: Vec<f64> = (0..count)
        .map(|i| hidden[i].clamp(0.0, compute_top[i]))
        .collect();
    let tops: Vec<f64> = (0..count)
        .map(|i| {
            let rest: f64 = segs[under..].iter().map(|(_, _, v)| v[i]).sum();
            compute_top[i].max(compute_top[i] - overlap[i] + rest)
        })
        .collect();
    let max = tops.iter().copied().fold(0.0, f64::max).max(1.0);
    let n = count as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "relative cost per strategy by component (FLOP-equivalents, busiest device, one step)",
            ("sans-serif", 15),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(80)
        .build_cartesian_2d(0.5f64..n + 0.5, 0f64..max * 1.05)
        .map_err(chart_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("rank")
        .x_labels(count.min(25))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| si_float(*y, 3, "FLOP"))
        .draw()
        .map_err(chart_err)?;
    let mut base = vec![0.0; count];
    for (s, (_, colour, values)) in segs.iter().enumerate() {
        if s == under {
            for (i, b) in base.iter_mut().enumerate() {
                *b -= overlap[i];
            }
        }
        let bars: Vec<Rectangle<(f64, f64)>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let x = i as f64 + 1.0;
                let rect = Rectangle::new(
                    [(x - 0.35, base[i]), (x + 0.35, base[i] + v)],
                    colour.filled(),
                );
                base[i] += v;
                rect
            })
            .collect();
        chart.draw_series(bars).map_err(chart_err)?;
    }
    if marked {
        let (ox, oy) = area.get_base_pixel();
        for (i, h) in overlap.iter().enumerate() {
            if *h <= 0.0 {
                continue;
            }
            let x = i as f64 + 1.0;
            let (left, top) = chart.backend_coord(&(x - 0.35, compute_top[i]));
            let (right, bottom) = chart.backend_coord(&(x + 0.35, compute_top[i] - h));
            hatch(
                area,
                (left - ox, top - oy, right - ox, bottom - oy),
                COMPONENTS[0].2,
            )?;
        }
    }
    Ok(())
}

/// The components chart's legend beside the plot, top of the stack first; long labels wrap to
/// its width.
fn component_legend(area: &Area, segs: &[Segment], marked: bool) -> Result<()> {
    let font = ("sans-serif", 12).into_font().color(&BLACK);
    let mut y = 40;
    // One entry: its swatch, then its label wrapped, from `y` down.
    let mut entry = |swatch: ShapeStyle, label: &str, hatched: bool| -> Result<()> {
        area.draw(&Rectangle::new([(6, y), (20, y + 14)], swatch))
            .map_err(chart_err)?;
        if hatched {
            hatch(area, (6, y, 20, y + 14), COMPONENTS[0].2)?;
        }
        for line in wrap(label, LEGEND_CHARS) {
            area.draw(&Text::new(line, (26, y + 1), font.clone()))
                .map_err(chart_err)?;
            y += 15;
        }
        y += 7;
        Ok(())
    };
    if marked {
        // Compute's stripes over a communication colour, as in the bars.
        entry(COLLECTIVES[1].2.filled(), HIDDEN_LABEL, true)?;
    }
    for (label, colour, _) in segs.iter().rev() {
        entry(colour.filled(), label, false)?;
    }
    Ok(())
}

/// The chart's caption and x axis: what the ranking ranks by.
fn frontier_titles(seconds: bool) -> (&'static str, &'static str) {
    if seconds {
        (
            "memory per device versus simulated seconds per step: Pareto frontier and device memory limit",
            "simulated seconds per step (logarithmic)",
        )
    } else {
        (
            "memory per device versus relative cost per step: Pareto frontier and device memory limit",
            "relative cost per step (FLOP-equivalents, busiest device; logarithmic)",
        )
    }
}

/// Width of a label's character, in pixels, at the charts' 10 px tick and point labels: 0.6 em,
/// wider than sans-serif's average, so that labels judged apart are apart.
const CHAR_PX: f64 = 6.0;
/// Pixels kept free between two tick labels.
const TICK_GAP: f64 = 10.0;
/// Canvas width of the frontier chart, its margin and its y-label area, in pixels.
const FRONTIER_W: u32 = 960;
const FRONTIER_MARGIN: u32 = 12;
const FRONTIER_Y_AREA: u32 = 60;

/// An axis' value as its tick label: `x` to the fewest significant digits (at most four) that
/// state it, with a decimal prefix before `unit`, or in seconds with the fewest decimals.
fn tick_label(x: f64, seconds: bool) -> String {
    let close = |y: f64| (y - x).abs() <= 1e-9 * x.abs();
    if seconds {
        let d = (0..6)
            .find(|d| close(format!("{x:.d$}").parse().unwrap_or(f64::NAN)))
            .unwrap_or(6);
        return format!("{x:.d$}");
    }
    let sig = (1..4)
        .find(|s| {
            let p = 10f64.powi(x.abs().log10().floor() as i32 - *s as i32 + 1);
            close((x / p).round() * p)
        })
        .unwrap_or(4);
    si_float(x, sig, "FLOP")
}

/// Where on an axis from `lo` to `hi` (0 to 1) a value lies, logarithmically or linearly.
fn axis_share(x: f64, lo: f64, hi: f64, log: bool) -> f64 {
    if log {
        (x / lo).ln() / (hi / lo).ln()
    } else {
        (x - lo) / (hi - lo)
    }
}

/// The most ticks an axis gets: more crowd it without telling more.
const MAX_TICKS: usize = 10;

/// Ticks for an axis from `lo` to `hi` (positive) drawn `width` pixels wide, with `room` pixels
/// of canvas before and after it: the most (up to [`MAX_TICKS`]) of the round values (1, 2, 5 and
/// finer in each decade on a logarithmic axis; every multiple of 1, 2, 2.5 or 5 times a power of
/// ten) whose labels leave [`TICK_GAP`] pixels between them and stay on the canvas. A narrow
/// logarithmic range, inside one decade, gets evenly spaced ticks; a wide one its 1–2–5.
fn ticks(
    (lo, hi): (f64, f64),
    width: f64,
    room: (f64, f64),
    log: bool,
    label: &dyn Fn(f64) -> String,
) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo < hi) {
        return vec![];
    }
    let mut sets: Vec<Vec<f64>> = vec![];
    let (k0, k1) = (
        (hi - lo).log10().floor() as i32 - 2,
        hi.log10().ceil() as i32 + 1,
    );
    if log {
        for mantissas in [
            &[1.0][..],
            &[1.0, 2.0, 5.0],
            &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        ] {
            let decades = lo.log10().floor() as i32..=hi.log10().floor() as i32;
            sets.push(
                decades
                    .flat_map(|k| mantissas.iter().map(move |m| m * 10f64.powi(k)))
                    .filter(|t| (lo..=hi).contains(t))
                    .collect(),
            );
        }
    }
    for k in k0..=k1 {
        for m in [1.0, 2.0, 2.5, 5.0] {
            let step = m * 10f64.powi(k);
            let (first, last) = ((lo / step).ceil() as i64, (hi / step).floor() as i64);
            if (0..MAX_TICKS as i64).contains(&(last - first)) {
                sets.push((first..=last).map(|n| n as f64 * step).collect());
            }
        }
    }
    let at = |t: f64| width * axis_share(t, lo, hi, log);
    let half = |t: f64| label(t).chars().count() as f64 * CHAR_PX / 2.0;
    // A tick whose label would leave the canvas is dropped from its set (the others still
    // mark the axis); the labels left must keep their distance.
    let on_canvas = |t: &f64| at(*t) - half(*t) >= -room.0 && at(*t) + half(*t) <= width + room.1;
    let apart = |set: &Vec<f64>| {
        set.windows(2)
            .all(|w| at(w[1]) - at(w[0]) >= half(w[0]) + half(w[1]) + TICK_GAP)
    };
    sets.into_iter()
        .map(|s| s.into_iter().filter(on_canvas).collect::<Vec<f64>>())
        .filter(|s| (2..=MAX_TICKS).contains(&s.len()) && apart(s))
        .max_by_key(Vec::len)
        .unwrap_or_default()
}

/// A label's box in pixels: left, top, right, bottom.
type LabelBox = (f64, f64, f64, f64);

/// Places the label of each point (in order) beside it — right, left, above or below — where
/// it overlaps no label placed before; `None` for a point with no free place (under the points
/// and labels of others).
fn place_labels(points: &[(i32, i32)], labels: &[String], size: f64) -> Vec<Option<(i32, i32)>> {
    let mut taken: Vec<LabelBox> = vec![];
    let apart = |a: &LabelBox, b: &LabelBox| a.2 <= b.0 || b.2 <= a.0 || a.3 <= b.1 || b.3 <= a.1;
    points
        .iter()
        .zip(labels)
        .map(|(&(x, y), text)| {
            let w = text.chars().count() as f64 * CHAR_PX;
            let (x, y) = (f64::from(x), f64::from(y));
            let spots = [
                (x + 6.0, y - size / 2.0),
                (x - 6.0 - w, y - size / 2.0),
                (x - w / 2.0, y - 6.0 - size),
                (x - w / 2.0, y + 6.0),
                (x + 6.0, y - 6.0 - size),
                (x + 6.0, y + 6.0),
                (x - 6.0 - w, y - 6.0 - size),
                (x - 6.0 - w, y + 6.0),
            ];
            let free = spots
                .iter()
                .map(|&(l, t)| (l, t, l + w, t + size))
                .find(|b| taken.iter().all(|o| apart(b, o)))?;
            taken.push(free);
            Some((free.0.round() as i32, free.1.round() as i32))
        })
        .collect()
}

/// A panel's x ticks (logarithmic), labelled in seconds or as relative cost, for the plotting
/// width of the frontier chart.
fn frontier_ticks(lo: f64, hi: f64, seconds: bool) -> Vec<f64> {
    let width = f64::from(FRONTIER_W - 2 * FRONTIER_MARGIN - FRONTIER_Y_AREA);
    let room = (
        f64::from(FRONTIER_MARGIN + FRONTIER_Y_AREA),
        f64::from(FRONTIER_MARGIN),
    );
    ticks((lo, hi), width, room, true, &|x| tick_label(x, seconds))
}

/// Memory per device against step time (or relative cost): the ranking's Pareto frontier
/// (`rank --pareto`, over every strategy that fits), the rows shown and the capacity line
/// above; below, the rows shown close up, each labelled with its rank where the label has room.
fn frontier_svg(
    rows: &[Value],
    pareto: &[Value],
    seconds: bool,
    capacity: &Rational,
) -> Result<String> {
    let x_of = |r: &Value| {
        if seconds {
            float(&r["iteration_seconds"])
        } else {
            float(&r["relative_cost"])
        }
    };
    let point = |r: &Value| (x_of(r), float(&r["memory_per_device"]) / 1e9);
    let points: Vec<(f64, f64)> = rows.iter().map(point).collect();
    let front: Vec<(f64, f64)> = pareto
        .iter()
        .map(point)
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (FRONTIER_W, 780)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let (upper, lower) = root.split_vertically(420);
        frontier_panel(&upper, rows, &points, &front, seconds, capacity)?;
        close_up_panel(&root, &lower, rows, &points, seconds)?;
        root.present().map_err(chart_err)?;
    }
    Ok(svg)
}

/// The smallest and largest of `xs` (finite ones), widened by `pad` of their spread (or of the
/// value, when they are all one), as an axis range.
fn padded(xs: impl Iterator<Item = f64>, pad: f64, floor: f64) -> (f64, f64) {
    let (a, b) = xs
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
    if !a.is_finite() {
        return (floor.max(1e-12), floor.max(1e-12) * 2.0);
    }
    let spread = if b > a {
        b - a
    } else {
        a.abs().max(1e-12) * 0.2
    };
    ((a - pad * spread).max(floor), b + pad * spread)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// The frontier panel: the Pareto staircase, the rows shown (only #1 labelled; the close-up
/// below labels them all), a frame around them, and the capacity line.
fn frontier_panel(
    area: &Area,
    rows: &[Value],
    points: &[(f64, f64)],
    front: &[(f64, f64)],
    seconds: bool,
    capacity: &Rational,
) -> Result<()> {
    let cap = capacity.to_f64().unwrap_or(f64::NAN) / 1e9;
    let (x0, x1) = padded(points.iter().chain(front).map(|p| p.0), 0.0, 1e-12);
    // A logarithmic axis: the frontier runs from the fastest strategies to ones many times slower.
    let (lo, hi) = (x0 / 1.15, x1.max(x0 * 1.01) * 1.15);
    let ymax = points.iter().chain(front).map(|p| p.1).fold(cap, f64::max) * 1.1;
    let (caption, x_desc) = frontier_titles(seconds);
    let x_ticks = frontier_ticks(lo, hi, seconds);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(FRONTIER_MARGIN)
        .x_label_area_size(40)
        .y_label_area_size(FRONTIER_Y_AREA)
        .build_cartesian_2d((lo..hi).log_scale().with_key_points(x_ticks), 0f64..ymax)
        .map_err(chart_err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("memory per device (GB)")
        .x_label_formatter(&|x| tick_label(*x, seconds))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(chart_err)?;
    let cap_style = ShapeStyle::from(&RED).stroke_width(2);
    chart
        .draw_series(DashedLineSeries::new(
            [(lo, cap), (hi, cap)],
            8,
            5,
            cap_style,
        ))
        .map_err(chart_err)?
        .label(format!(
            "device memory limit {}",
            units::bytes_rounded(capacity)
        ))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], cap_style));
    if !front.is_empty() {
        // The frontier as a staircase: each point is better in time than every one using
        // less memory.
        let line = ShapeStyle::from(&BLACK).stroke_width(1);
        let mut stairs = vec![];
        for (i, p) in front.iter().enumerate() {
            if i > 0 {
                stairs.push((p.0, front[i - 1].1));
            }
            stairs.push(*p);
        }
        chart
            .draw_series(LineSeries::new(stairs, line))
            .map_err(chart_err)?
            .label(format!(
                "Pareto frontier of every strategy that fits ({} strategies, rank --pareto)",
                front.len()
            ))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], line));
        chart
            .draw_series(front.iter().map(|&p| Circle::new(p, 2, BLACK.filled())))
            .map_err(chart_err)?;
    }
    // The rows shown, framed: the panel below draws them close up.
    let (fx0, fx1) = padded(points.iter().map(|p| p.0), 0.05, lo);
    let (fy0, fy1) = padded(points.iter().map(|p| p.1), 0.05, 0.0);
    let frame = ShapeStyle::from(&RGBColor(0x88, 0x88, 0x88)).stroke_width(1);
    chart
        .draw_series([Rectangle::new(
            [(fx0.max(lo), fy0), (fx1.min(hi), fy1.min(ymax))],
            frame,
        )])
        .map_err(chart_err)?
        .label(format!("the {} rows shown: close up below", rows.len()))
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], frame));
    draw_rows(&mut chart, rows, points)?;
    if let (Some(p), Some(r)) = (points.first(), rows.first()) {
        // The panel's area starts at the canvas' corner: its pixels are the canvas'.
        let (x, y) = chart.backend_coord(p);
        area.draw(&Text::new(
            format!("#{}", r["rank"]),
            (x + 6, y - 5),
            ("sans-serif", 10).into_font().color(&BLACK),
        ))
        .map_err(chart_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(chart_err)
}

/// The rows as points: a filled circle where the strategy fits, a cross where it does not.
fn draw_rows<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    rows: &[Value],
    points: &[(f64, f64)],
) -> Result<()>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let fits = |r: &Value| r["feasible"].as_bool() == Some(true);
    let blue = RGBColor(0x4e, 0x79, 0xa7);
    chart
        .draw_series(
            rows.iter()
                .zip(points)
                .filter(|(r, _)| fits(r))
                .map(|(_, &p)| Circle::new(p, 4, blue.filled())),
        )
        .map_err(chart_err)?
        .label("strategy that fits")
        .legend(move |(x, y)| Circle::new((x + 7, y), 4, blue.filled()));
    if rows.iter().any(|r| !fits(r)) {
        chart
            .draw_series(
                rows.iter()
                    .zip(points)
                    .filter(|(r, _)| !fits(r))
                    .map(|(_, &p)| Cross::new(p, 4, RED.stroke_width(2))),
            )
            .map_err(chart_err)?
            .label("does not fit")
            .legend(|(x, y)| Cross::new((x + 7, y), 4, RED.stroke_width(2)));
    }
    Ok(())
}

/// The rows shown close up, each labelled with its rank beside its point where
/// the label overlaps no other (labels are drawn on `root`, whose pixels are the canvas'); the
/// ranks left unlabelled are listed under the panel.
fn close_up_panel(
    root: &Area,
    area: &Area,
    rows: &[Value],
    points: &[(f64, f64)],
    seconds: bool,
) -> Result<()> {
    let (_, height) = area.dim_in_pixel();
    let (plot, note) = area.split_vertically(height.saturating_sub(20));
    let (lo, hi) = padded(points.iter().map(|p| p.0), 0.08, 1e-12);
    let (y0, y1) = padded(points.iter().map(|p| p.1), 0.12, 0.0);
    // Logarithmic as above, so that the close-up is the frame's contents enlarged.
    let x_ticks = frontier_ticks(lo, hi, seconds);
    let what = if seconds {
        "simulated seconds per step"
    } else {
        "relative cost per step"
    };
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!(
                "the {} rows shown, close up: memory per device versus {what}",
                rows.len()
            ),
            ("sans-serif", 15),
        )
        .margin(FRONTIER_MARGIN)
        .x_label_area_size(40)
        .y_label_area_size(FRONTIER_Y_AREA)
        .build_cartesian_2d((lo..hi).log_scale().with_key_points(x_ticks), y0..y1)
        .map_err(chart_err)?;
    chart
        .configure_mesh()
        .x_desc(frontier_titles(seconds).1)
        .y_desc("memory per device (GB)")
        .x_label_formatter(&|x| tick_label(*x, seconds))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()
        .map_err(chart_err)?;
    draw_rows(&mut chart, rows, points)?;
    let pixels: Vec<(i32, i32)> = points.iter().map(|p| chart.backend_coord(p)).collect();
    // `#7`, not `7`: a rank, not a number of the axes.
    let labels: Vec<String> = rows.iter().map(|r| format!("#{}", r["rank"])).collect();
    let font = ("sans-serif", 10).into_font().color(&BLACK);
    let mut unlabelled = vec![];
    for (at, label) in place_labels(&pixels, &labels, 10.0)
        .into_iter()
        .zip(&labels)
    {
        match at {
            Some(p) => root
                .draw(&Text::new(label.clone(), p, font.clone()))
                .map_err(chart_err)?,
            None => unlabelled.push(label.clone()),
        }
    }
    if !unlabelled.is_empty() {
        note.draw(&Text::new(
            format!(
                "not labelled, for want of room beside the points around them: {}",
                unlabelled.join(", ")
            ),
            ((FRONTIER_MARGIN + FRONTIER_Y_AREA) as i32, 2),
            font,
        ))
        .map_err(chart_err)?;
    }
    Ok(())
}

/// The top strategy's memory by kind, against the capacity.
fn memory_svg(memory: &Value, capacity: &Rational) -> Result<String> {
    let cap = capacity.to_f64().unwrap_or(f64::NAN) / 1e9;
    let vals: Vec<f64> = MEMORY
        .iter()
        .map(|(k, _, _)| float(&memory[*k]) / 1e9)
        .collect();
    let total = float(&memory["total"]) / 1e9;
    let xmax = total.max(cap) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 220)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("memory per device of #1 (GB)", ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(20)
            .build_cartesian_2d(0f64..xmax, 0f64..1f64)
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc("GB")
            .draw()
            .map_err(chart_err)?;
        let mut at = 0.0;
        for ((key, label, colour), v) in MEMORY.iter().zip(&vals) {
            let (a, b) = (at, at + v);
            let shown = exact(&memory[*key]).map_or_else(|| "-".into(), |m| units::bytes(&m));
            at = b;
            let colour = *colour;
            chart
                .draw_series([Rectangle::new([(a, 0.3), (b, 0.7)], colour.filled())])
                .map_err(chart_err)?
                .label(format!("{label} {shown}"))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                });
        }
        let cap_style = ShapeStyle::from(&RED).stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new(
                [(cap, 0.05), (cap, 0.95)],
                6,
                4,
                cap_style,
            ))
            .map_err(chart_err)?
            .label(format!("memory limit {}", units::bytes_rounded(capacity)))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], cap_style));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(svg)
}

/// The ranking table's column heads, one for each of [`ranking_cells`]' cells.
const RANKING_HEADS: [&str; 21] = [
    "rank",
    "dp",
    "tp",
    "pp",
    "ep",
    "cp",
    "mbs",
    "schedule",
    "sequence parallel",
    "recompute",
    "ZeRO",
    "layout",
    "relative cost",
    "compute",
    "intra-node",
    "inter-node",
    "bubble",
    "hidden",
    "memory",
    "s / step",
    "fits",
];

/// The sortable ranking table, one row a strategy, and below it, when the ranking is by
/// relative cost, a note on how to rank by seconds.
fn ranking_table(rows: &[Value], seconds: bool) -> String {
    let mut h = String::from("<table class=\"sortable\" id=\"ranking\"><thead><tr>");
    for t in RANKING_HEADS {
        let _ = write!(h, "<th title=\"click to sort\">{t}</th>");
    }
    h.push_str("</tr></thead><tbody>\n");
    for r in rows {
        h.push_str("<tr>");
        for (i, (key, shown)) in ranking_cells(r).iter().enumerate() {
            // Cells 12…18 and 20 already hold markup built from escaped text.
            let shown = if (12..=18).contains(&i) || i == 20 {
                shown.clone()
            } else {
                esc(shown)
            };
            let _ = write!(h, "<td data-v=\"{}\">{shown}</td>", esc(key));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table>");
    if !seconds {
        h.push_str("<p class=\"note\">Ranked by relative cost; pass <code>--calib</code> to rank by simulated seconds.</p>");
    }
    h
}

/// One ranked strategy's cells, under [`RANKING_HEADS`]: each the key the column sorts by and
/// what the cell shows.
fn ranking_cells(r: &Value) -> [(String, String); 21] {
    let rel = &r["relative"];
    let total = &rel["total"];
    let compute = compute_with_kernels(rel);
    let sched = match r["schedule"].as_str() {
        Some("interleaved-1f1b") => format!("interleaved-1f1b (v={})", r["chunks"]),
        Some(s) => s.to_string(),
        None => String::new(),
    };
    let secs = r["iteration_seconds"]
        .as_f64()
        .map_or("-".to_string(), |s| format!("{s:.4}"));
    let fits = if r["feasible"].as_bool() == Some(true) {
        "yes".to_string()
    } else {
        let reason = &r["reason"];
        match (exact(&reason["need"]), exact(&reason["have"])) {
            (Some(need), Some(have)) => format!("no: {}", units::fit_text(&need, &have)),
            _ => "no".to_string(),
        }
    };
    [
        (text(&r["rank"]), text(&r["rank"])),
        (text(&r["dp"]), text(&r["dp"])),
        (text(&r["tp"]), text(&r["tp"])),
        (text(&r["pp"]), text(&r["pp"])),
        (text(&r["ep"]), text(&r["ep"])),
        (text(&r["cp"]), text(&r["cp"])),
        (text(&r["micro_batch_size"]), text(&r["micro_batch_size"])),
        (sched.clone(), sched),
        (
            text(&r["sequence_parallel"]),
            if r["sequence_parallel"].as_bool() == Some(true) {
                "on".into()
            } else {
                "off".into()
            },
        ),
        (text(&r["recompute"]), text(&r["recompute"])),
        (text(&r["zero"]), text(&r["zero"])),
        (text(&r["layout"]), text(&r["layout"])),
        (float(total).to_string(), amount(total, units::flops, "")),
        (float(&compute).to_string(), pct(&compute, total)),
        (
            float(&rel["comm_intra"]).to_string(),
            pct(&rel["comm_intra"], total),
        ),
        (
            float(&rel["comm_inter"]).to_string(),
            pct(&rel["comm_inter"], total),
        ),
        (float(&rel["bubble"]).to_string(), bubble(r)),
        (float(&rel["hidden"]).to_string(), hidden_share(rel)),
        (
            float(&r["memory_per_device"]).to_string(),
            amount(&r["memory_per_device"], units::bytes, " bytes"),
        ),
        (
            r["iteration_seconds"]
                .as_f64()
                .map_or(String::new(), |s| s.to_string()),
            secs,
        ),
        (fits.clone(), esc(&fits)),
    ]
}

/// A strategy's relative compute cost with what the kernels take beyond their FLOPs, as `rank`
/// prints it (the compute alone where either is not exact).
fn compute_with_kernels(rel: &Value) -> Value {
    match (exact(&rel["compute"]), exact(&rel["kernels"])) {
        (Some(c), Some(k)) => Value::String((c + k).to_string()),
        _ => rel["compute"].clone(),
    }
}

/// The share of the total that overlap hides, marked as taken off the total (as `rank` marks it)
/// where it is not zero.
fn hidden_share(rel: &Value) -> String {
    let total = &rel["total"];
    match exact(&rel["hidden"]) {
        Some(h) if !num_traits::Zero::is_zero(&h) => {
            format!("−{}", pct(&rel["hidden"], total))
        }
        _ => pct(&rel["hidden"], total),
    }
}

/// The formulas section: the model's symbols and whole-model totals, the top strategy's
/// per-device amounts as formulas, its communication by collective kind, and its collectives.
fn formulas(cost: &Value, top: &Value, top_formulas: &Value, top_parts: &Value) -> String {
    let mut h = String::new();
    whole_model_formulas(&mut h, cost);
    let ep = top["ep"].as_u64().unwrap_or(1);
    let cp = top["cp"].as_u64().unwrap_or(1);
    per_device_formulas(&mut h, &cost["per_device"], top_formulas, ep, cp);
    comm_parts_table(&mut h, top_parts);
    let zero = top["zero"].as_u64().unwrap_or(0);
    collectives_table(&mut h, &cost["per_device"]["comm"], zero);
    h
}

/// The elements of a JSON array (none where it is not one).
fn elements(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// The symbols' values and the whole model's formulas for one step: parameters, FLOPs by pass
/// and class, activation bytes.
fn whole_model_formulas(h: &mut String, cost: &Value) {
    h.push_str("<h3>Symbols</h3><table class=\"kv\">");
    if let Some(m) = cost["symbols"].as_object() {
        for (k, v) in m {
            let _ = write!(
                h,
                "<tr><th>{}</th><td><code>{}</code></td></tr>",
                esc(k),
                esc(&text(v))
            );
        }
    }
    h.push_str(
        "</table><h3>Whole model, one step (formulas in the symbols)</h3><table class=\"kv\">",
    );
    let _ = write!(
        h,
        "<tr><th>parameters</th><td><code>{}</code></td></tr>",
        esc(&text(&cost["params"]))
    );
    for pass in ["forward", "backward"] {
        for class in ["matmul", "other"] {
            let _ = write!(
                h,
                "<tr><th>{pass} FLOPs, {class}</th><td><code>{}</code></td></tr>",
                esc(&text(&cost["flops"][pass][class]))
            );
        }
    }
    let _ = write!(
        h,
        "<tr><th>activation bytes</th><td><code>{}</code></td></tr></table>",
        esc(&text(&cost["memory"]["activations"]))
    );
}

/// The top strategy's per-device amounts, grouped, each with its formula in the symbols (or why
/// there is none) and its value; `pd` is `cost`'s `per_device`.
fn per_device_formulas(h: &mut String, pd: &Value, top_formulas: &Value, ep: u64, cp: u64) {
    let _ = write!(
        h,
        "<h3>Per device under #1 ({})</h3><p class=\"note\">Each amount of the busiest device in one step as a formula in the model's symbols, with the data- and tensor-parallel sizes and the micro-batch count put in, and its value at the symbols' values above, as the terminal prints it (hover for what <code>--exact</code> prints: bytes in whole bytes, other amounts exactly). The formulas are those <code>symshard compare</code> derives, the relative cost's with the calibration's machine balances (κ) as exact fractions, each shown only where it evaluates exactly to the exact amount. The bubble is the slowest stage's time × (pp − 1)/(m·v); as a share of the step it is the ranking's bubble column.</p><table class=\"kv\" id=\"per-device\"><tr><th>amount</th><th>formula in the symbols</th><th>value</th></tr>",
        esc(&text(&pd["strategy"]))
    );
    let mut group = String::new();
    for c in elements(top_formulas) {
        let g = text(&c["group"]);
        if g != group {
            group.clone_from(&g);
            let _ = write!(h, "<tr><th colspan=\"3\">{}</th></tr>", esc(&g));
        }
        let name = units::component_name(&g, &text(&c["name"])).to_string();
        let (format, unit) = (units::component_format(&g), units::component_unit(&g));
        let formula = match (c["formula"].as_str(), c["why"].as_str()) {
            (Some(f), _) => format!("<code>{}</code>", esc(f)),
            (None, Some(why)) => format!("<span class=\"note\">{}</span>", esc(why)),
            (None, None) => format!("<span class=\"note\">{}</span>", no_formula(ep, cp)),
        };
        let _ = write!(
            h,
            "<tr><th>{}</th><td>{formula}</td><td data-exact=\"{}\">{}</td></tr>",
            esc(&name),
            esc(&text(&c["value"])),
            amount(&c["value"], format, unit)
        );
    }
    h.push_str("</table>");
}

/// The communication the bars stack for #1: relative cost by collective kind and tier.
fn comm_parts_table(h: &mut String, top_parts: &Value) {
    h.push_str("<h3>Communication of #1 by collective kind (the bars' parts)</h3><table class=\"kv\" id=\"comm-parts\"><tr><th>collective</th><th>tier</th><th>relative cost (FLOP-equivalents)</th></tr>");
    for p in elements(top_parts) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&text(&p["kind"])),
            esc(&text(&p["tier"])),
            amount(&p["cost"], units::flops, "")
        );
    }
    h.push_str("</table>");
}

/// The top strategy's collectives as `cost` lists them (`comm`), as the step runs them, after a
/// note on how its ZeRO stage reduces the gradients. As in `cost`'s table, a collective that
/// moves nothing (over a group of one device: tensor parallelism at tp = 1) is not listed.
fn collectives_table(h: &mut String, comm: &Value, zero: u64) {
    h.push_str("<h3>Collectives per device and step</h3>");
    if zero > 0 {
        let _ = write!(
            h,
            "<p class=\"note\">ZeRO-{zero}: the gradients' data-parallel reduction runs as {}, as the bars count it.</p>",
            match zero {
                1 => "a reduce-scatter to the optimizer shards once a step and an all-gather of the updated weights",
                2 => "a reduce-scatter of every micro-batch's gradients to their shards and an all-gather of the updated weights once a step",
                _ => "a reduce-scatter of every micro-batch's gradients and an all-gather of the weights before every forward and backward",
            }
        );
    }
    h.push_str("<table class=\"sortable\" id=\"collectives\"><thead><tr><th>collective</th><th>axis</th><th>tier</th><th>bytes per call</th><th>calls per step</th><th>where</th></tr></thead><tbody>");
    let moves = |c: &&Value| !exact(&c["bytes"]).is_some_and(|b| num_traits::Zero::is_zero(&b));
    for c in elements(comm).iter().filter(moves) {
        let kind = text(&c["collective"]);
        let calls = exact(&c["count"]);
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td><td>{}</td></tr>",
            esc(&kind),
            esc(&text(&c["axis"])),
            esc(&text(&c["tier"])),
            float(&c["bytes"]),
            amount(&c["bytes"], units::bytes, " bytes"),
            esc(&text(&c["count"])),
            esc(&calls.map_or_else(|| text(&c["count"]), |n| units::count(&n))),
            esc(&collective_site(c))
        );
    }
    h.push_str("</tbody></table>");
}

/// Where a collective runs: its operator or edge, and the tensor it moves where that is not the
/// operator's own output (a layer norm's two weight gradients, `dgamma` and `dbeta`, are two
/// rows of one operator).
fn collective_site(c: &Value) -> String {
    let (op, tensor) = (text(&c["op"]), text(&c["tensor"]));
    let from = op.split('→').next().unwrap_or_default();
    if tensor.is_empty() || tensor == from {
        op
    } else {
        format!("{op} ({tensor})")
    }
}

/// Why an amount of the top strategy has no formula, where its formula failed its check (the
/// structural reasons come with the amounts).
fn no_formula(ep: u64, cp: u64) -> &'static str {
    if ep > 1 {
        "no formula derived: under expert parallelism the expert blocks are reshaped, and the amounts are numbers only"
    } else if cp > 1 {
        "no formula: the one built from the operators' formulas, with the data- and tensor-parallel sizes put in, does not reproduce this number under context parallelism"
    } else {
        "no formula: the one built from the operators' formulas does not reproduce this number, so none is shown"
    }
}

fn timeline_summary(t: &Value) -> String {
    let mut h = String::from("<table class=\"kv\">");
    let row = |h: &mut String, k: &str, v: String| {
        let _ = write!(h, "<tr><th>{k}</th><td>{}</td></tr>", esc(&v));
    };
    row(&mut h, "machine", text(&t["calibration"]));
    if let Some(w) = t["what_if"].as_str() {
        row(
            &mut h,
            "what-if machine",
            format!("{w} (derived, not a measured machine)"),
        );
    }
    if let Some(s) = t["stack_profile"].as_str() {
        row(&mut h, "stack profile", s.to_string());
    }
    row(
        &mut h,
        "seconds per step",
        format!("{:.4}", float(&t["iteration_seconds"])),
    );
    row(
        &mut h,
        "tokens per second",
        Rational::from_float(float(&t["tokens_per_second"]).round())
            .map_or_else(|| "-".into(), |n| units::count(&n)),
    );
    row(
        &mut h,
        "model TFLOP/s per device",
        format!("{:.1}", float(&t["model_tflops_per_device"])),
    );
    row(
        &mut h,
        "MFU (of the bf16 peak)",
        units::percent_float(float(&t["mfu"])),
    );
    row(&mut h, "devices shown", text(&t["representative"]));
    // One figure per quantity: the bubble of #1 is the ranking's, not a second, simulated one.
    h.push_str("</table><p class=\"note\">The step of #1 simulated on this machine. Its bubble is the ranking's bubble column; the gaps in the chart are where each device idles. ");
    h.push_str(&esc(units::MFU_MEANS));
    h.push_str(".</p>");
    h
}

const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1240px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd} h3{font-size:14px}
code,.cmd{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.cmd{background:#f4f4f4;padding:6px 8px;display:inline-block}
table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
table.kv th{text-align:left;background:#fafafa} table.kv td{text-align:left;word-break:break-all}
table.sortable th{cursor:pointer;background:#f0f0f0;position:sticky;top:0} table.sortable th:hover{background:#e4e4e4}
tbody tr:first-child td{font-weight:600}
figure.chart{margin:8px 0;overflow-x:auto} .note{color:#666;font-size:12px}
"#;

const SCRIPT: &str = r#"
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){
    th.addEventListener('click',function(){
      var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows),up=th.dataset.dir!=='up';
      t.querySelectorAll('th').forEach(function(x){delete x.dataset.dir});th.dataset.dir=up?'up':'down';
      rows.sort(function(r,s){
        var x=r.cells[i].dataset.v||r.cells[i].textContent,y=s.cells[i].dataset.v||s.cells[i].textContent;
        var nx=parseFloat(x),ny=parseFloat(y),c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);
        return up?c:-c;});
      rows.forEach(function(r){b.appendChild(r)});
    });
  });
});
(async function(){
  var el=document.getElementById('timeline');
  try{
    var bytes=Uint8Array.from(atob(el.dataset.zlib),function(c){return c.charCodeAt(0)});
    var stream=new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
    el.innerHTML=await new Response(stream).text();
    delete el.dataset.zlib;
  }catch(e){
    el.textContent='This browser cannot inflate the embedded timeline ('+e+').';
  }
  document.body.dataset.rendered='yes';
})();
"#;

/// The lines a report ranked by simulated seconds adds under its header: the stack profile,
/// what the stack runs, and the borrowed efficiency curves.
fn seconds_notes(h: &mut String, r: &Value) {
    let _ = writeln!(
        h,
        "<p>{}</p>",
        esc(&units::stack_line(r["stack_profile"].as_str()))
    );
    if let Ok(s) = serde_json::from_value::<crate::api::StackSupports>(r["stack_supports"].clone())
    {
        let _ = writeln!(h, "<p>{}</p>", esc(&s.line()));
    }
    for line in r["borrowed_curves"].as_array().into_iter().flatten() {
        let _ = writeln!(
            h,
            "<p class=\"borrowed-curve\">{}</p>",
            esc(line.as_str().unwrap_or(""))
        );
    }
}

/// The report as one HTML document.
pub fn html(input: &ReportInput) -> Result<String> {
    let r = input.rank;
    let rows: Vec<Value> = r["strategies"].as_array().cloned().unwrap_or_default();
    let top = rows
        .first()
        .ok_or_else(|| Error::Usage("a report needs at least one ranked strategy".into()))?;
    let seconds = rows.iter().all(|x| x["iteration_seconds"].is_number());
    let capacity = input.capacity_bytes;
    let count = |v: &Value| exact(v).map_or_else(|| text(v), |n| units::count(&n));
    let title = format!("{} on {} devices", text(&r["model"]), text(&r["devices"]));
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>symshard · {}</title><style>{STYLE}</style></head><body>\n",
        esc(&title)
    );
    let _ = writeln!(
        h,
        "<h1>{}</h1><p><span class=\"cmd\">{}</span></p><p>{} per node; machine balance from <b>{}</b>; ranked by {}; {} strategies priced, {} fit in {}.</p>",
        esc(&title),
        esc(&input.command),
        esc(&text(&r["gpus_per_node"])),
        esc(&text(&r["calibration"])),
        if seconds {
            "simulated seconds per step"
        } else {
            "relative cost (FLOP-equivalents)"
        },
        esc(&count(&r["evaluated"])),
        esc(&count(&r["feasible"])),
        esc(&units::bytes_rounded(capacity))
    );
    if seconds {
        seconds_notes(&mut h, r);
    }
    if let Some(p) = &input.partial_domains {
        let _ = writeln!(
            h,
            "<p id=\"partial-domains\">Partial domains: {}</p>",
            esc(p)
        );
    }
    let _ = writeln!(
        h,
        "<section><h2>Ranking</h2><p class=\"note\">Click a column to sort. Hover a relative cost or a memory figure for what <code>--exact</code> prints (bytes in whole bytes). compute, intra-node, inter-node, bubble and hidden are shares of the relative cost; {}. mbs: micro-batch size (samples per micro-batch and data-parallel rank); layout: the tensor-parallel layout, <code>annotated</code> (the model's own marks) or <code>auto</code> (the per-operator search's).</p>{}</section>",
        esc(units::BUBBLE_MEANS),
        ranking_table(&rows, seconds)
    );
    let _ = writeln!(
        h,
        "<section><h2>Cost components</h2><figure class=\"chart\" id=\"components\">{}</figure></section>",
        components_svg(&rows, input.comm_parts)?
    );
    let _ = writeln!(
        h,
        "<section><h2>Memory versus {}</h2><figure class=\"chart\" id=\"frontier\">{}</figure></section>",
        if seconds {
            "simulated seconds"
        } else {
            "relative cost"
        },
        frontier_svg(
            &rows,
            r["pareto"].as_array().map(Vec::as_slice).unwrap_or_default(),
            seconds,
            capacity
        )?
    );
    let packed = miniz_oxide::deflate::compress_to_vec_zlib(input.gantt_svg.as_bytes(), 9);
    let _ = writeln!(
        h,
        "<section><h2>Timeline of #1: {}</h2>{}<figure class=\"chart\" id=\"timeline\" data-zlib=\"{}\"></figure></section>",
        esc(&knobs(top)),
        timeline_summary(input.timeline),
        base64::engine::general_purpose::STANDARD.encode(packed)
    );
    let _ = writeln!(
        h,
        "<section><h2>Memory of #1</h2><figure class=\"chart\" id=\"memory\">{}</figure></section>",
        memory_svg(&top["memory"], capacity)?
    );
    let _ = writeln!(
        h,
        "<section><h2>Formulas behind #1</h2>{}</section>",
        formulas(input.cost, top, input.top_formulas, &input.comm_parts[0])
    );
    let _ = write!(h, "<script>{SCRIPT}</script>\n</body></html>\n");
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_breaks_between_words_within_the_width() {
        let label = "inter-node send/receive (pipeline, context-parallel ring)";
        let lines = wrap(label, LEGEND_CHARS);
        assert_eq!(
            lines,
            [
                "inter-node send/receive (pipeline,",
                "context-parallel ring)"
            ]
        );
        assert!(lines.iter().all(|l| l.chars().count() <= LEGEND_CHARS));
        assert_eq!(wrap("compute", LEGEND_CHARS), ["compute"]);
    }

    #[test]
    fn exact_numbers_read_back() {
        assert_eq!(
            exact(&Value::String("7/3".into())),
            Some(Rational::new(7.into(), 3.into()))
        );
        assert_eq!(exact(&Value::String("1/0".into())), None);
        assert_eq!(exact(&Value::String("x".into())), None);
    }

    /// Whether the labels of `ticks` on an axis `width` pixels wide keep [`TICK_GAP`] apart.
    fn apart(ticks: &[f64], lo: f64, hi: f64, width: f64, seconds: bool) -> bool {
        ticks.windows(2).all(|w| {
            let gap = width * (axis_share(w[1], lo, hi, true) - axis_share(w[0], lo, hi, true));
            let chars = tick_label(w[0], seconds).chars().count()
                + tick_label(w[1], seconds).chars().count();
            gap >= chars as f64 * CHAR_PX / 2.0 + TICK_GAP
        })
    }

    #[test]
    fn a_narrow_range_of_seconds_gets_labelled_ticks() {
        // Simulated steps of 11.0 to 13.5 s hold no 1, 2 or 5 times a power of ten: evenly
        // spaced ticks instead, labelled without trailing zeros.
        let label = |x: f64| tick_label(x, true);
        let t = ticks((11.0, 13.5), 876.0, (72.0, 12.0), true, &label);
        assert!(t.len() >= 3, "{t:?}");
        assert!(t.iter().all(|x| (11.0..=13.5).contains(x)));
        assert!(apart(&t, 11.0, 13.5, 876.0, true), "{t:?}");
        assert_eq!(tick_label(11.5, true), "11.5");
        assert_eq!(tick_label(12.0, true), "12");
    }

    #[test]
    fn a_wide_range_of_costs_gets_round_ticks_that_do_not_collide() {
        let (lo, hi) = (4.9e15, 1.5e17);
        let label = |x: f64| tick_label(x, false);
        let t = ticks((lo, hi), 876.0, (72.0, 12.0), true, &label);
        assert!(t.len() >= 3 && t.len() <= MAX_TICKS, "{t:?}");
        assert!(apart(&t, lo, hi, 876.0, false), "{t:?}");
        assert!(t.contains(&1e16) && t.contains(&1e17), "{t:?}");
        assert_eq!(tick_label(2e16, false), "20 PFLOP");
        assert_eq!(tick_label(5.75e15, false), "5.75 PFLOP");
        // No range, no ticks (rather than a panic).
        assert!(ticks((1.0, 1.0), 876.0, (0.0, 0.0), true, &label).is_empty());
        assert!(ticks((f64::NAN, 1.0), 876.0, (0.0, 0.0), true, &label).is_empty());
    }

    #[test]
    fn a_round_tick_at_the_canvas_edge_is_dropped_not_its_whole_set() {
        // The frontier of `rank gpt3-175b --devices 1024` after full recomputation's collectives
        // were counted again: 5.69 to 43.8 PFLOP, drawn 4.94 to 50.4. Its 1–2–5 ticks end at
        // 50 PFLOP, whose label would end 9 px past the canvas: that tick goes, 5, 10 and 20
        // stay (before, every set holding 50 was refused and only 20 and 40 were left).
        let (lo, hi) = (5.686e15 / 1.15, 43.84e15 * 1.15);
        let label = |x: f64| tick_label(x, false);
        let t = ticks((lo, hi), 876.0, (72.0, 12.0), true, &label);
        assert!(t.len() >= 3, "{t:?}");
        assert!(
            t.contains(&1e16) && t.contains(&2e16) && !t.contains(&5e16),
            "{t:?}"
        );
        assert!(apart(&t, lo, hi, 876.0, false), "{t:?}");
    }

    #[test]
    fn labels_of_points_on_top_of_each_other_take_free_places_or_none() {
        // Nine points at one place: eight places around it, so the ninth goes unlabelled.
        let points = vec![(100, 100); 9];
        let labels: Vec<String> = (1..=9).map(|i| i.to_string()).collect();
        let placed = place_labels(&points, &labels, 10.0);
        assert!(placed[..8].iter().all(Option::is_some));
        assert_eq!(placed[8], None);
        let boxes: Vec<(i32, i32)> = placed.iter().flatten().copied().collect();
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                // One character is 6 px wide and 10 px high.
                assert!(
                    (a.0 - b.0).abs() >= 6 || (a.1 - b.1).abs() >= 10,
                    "{a:?} {b:?}"
                );
            }
        }
        // Points far apart keep their labels on their right.
        let placed = place_labels(&[(10, 10), (200, 10)], &labels[..2], 10.0);
        assert_eq!(placed, [Some((16, 5)), Some((206, 5))]);
    }
}
