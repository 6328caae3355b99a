//! A Gantt chart of a timeline as SVG: one lane per device and stream, time left to right.
//! Neighbouring events of one kind and micro-batch that would be narrower than a pixel apart are
//! drawn as one bar, so that large pipelines stay readable.

use super::plan::TimingPlan;
use super::schedule::Pass;
use super::sim::{Event, Simulation, Stream, What};
use std::fmt::Write as _;

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 200.0;
const LANE: f64 = 14.0;
const TOP: f64 = 48.0;

/// Every colour a bar can have and what it shows, in the legend's order.
const KINDS: [(&str, &str); 10] = [
    ("#4e79a7", "forward"),
    ("#59a14f", "backward"),
    ("#f28e2b", "recompute"),
    ("#b07aa1", "tensor-parallel collective"),
    ("#e15759", "gradient reduction"),
    ("#ff9da7", "parameter all-gather"),
    ("#9c9c9c", "pipeline send"),
    ("#edc948", "expert all-to-all"),
    ("#76b7b2", "context-parallel ring"),
    ("#444444", "optimizer"),
];

/// The index in [`KINDS`] of an event's colour.
fn kind(e: &Event) -> usize {
    match (e.stream, &e.what, e.pass) {
        (_, What::Optimizer, _) => 9,
        (_, What::GradSum, _) => 4,
        (
            _,
            What::Op {
                recompute: true, ..
            },
            _,
        ) => 2,
        (Stream::Compute, _, Pass::Forward) => 0,
        (Stream::Compute, _, Pass::Backward | Pass::Weight) => 1,
        (Stream::TpComm, _, _) => 3,
        (Stream::DpComm, What::ParamGather, _) => 5,
        (Stream::DpComm, _, _) => 4,
        (Stream::P2p, _, _) => 6,
        (Stream::EpComm, _, _) => 7,
        (Stream::CpComm, _, _) => 8,
    }
}

fn colour(e: &Event) -> (&'static str, &'static str) {
    KINDS[kind(e)]
}

/// Approximate width in pixels of legend text at 10 px.
fn text_width(s: &str) -> f64 {
    6.5 * s.chars().count() as f64
}

/// The legend of the colours drawn, in [`KINDS`]' order, wrapped to the chart's width: each
/// entry's colour, label and position `(x, row)`.
fn legend(drawn: &[bool; KINDS.len()]) -> Vec<(&'static str, &'static str, f64, usize)> {
    let mut out = vec![];
    let (mut lx, mut row) = (LEFT, 0);
    for (k, &(fill, label)) in KINDS.iter().enumerate() {
        if !drawn[k] {
            continue;
        }
        let w = 14.0 + text_width(label) + 16.0;
        if lx > LEFT && lx + w > WIDTH - 10.0 {
            lx = LEFT;
            row += 1;
        }
        out.push((fill, label, lx, row));
        lx += w;
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The streams that get a lane: compute, and each other stream some event of some length runs
/// on — no empty expert- or context-parallel lanes where neither is used.
fn streams_drawn(sim: &Simulation) -> Vec<Stream> {
    Stream::ALL
        .into_iter()
        .filter(|st| {
            *st == Stream::Compute || sim.events.iter().any(|e| e.stream == *st && e.dur > 0.0)
        })
        .collect()
}

/// The timeline as an SVG document.
pub fn gantt_svg(plan: &TimingPlan, sim: &Simulation, title: &str) -> String {
    let t = sim.iteration.max(1e-12);
    let scale = (WIDTH - LEFT - 20.0) / t;
    let streams = streams_drawn(sim);
    let lanes = sim.busy.len() * streams.len();
    let mut drawn = [false; KINDS.len()];
    // Events of no length on a stream without a lane draw nothing.
    for e in sim.events.iter().filter(|e| streams.contains(&e.stream)) {
        drawn[kind(e)] = true;
    }
    let legend = legend(&drawn);
    let legend_rows = legend.last().map_or(0, |l| l.3 + 1);
    let height = TOP + lanes as f64 * LANE + 42.0 + 18.0 * legend_rows.max(1) as f64;
    // Devices per stage, as the summary numbers them: tensor-, context- and data-parallel ranks.
    let per_stage = plan.knobs.tp * plan.knobs.cp * plan.knobs.dp;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="10">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="16" font-size="13">{}</text>"#,
        esc(title)
    );
    draw_lanes(&mut s, sim.busy.len(), &streams, per_stage);
    draw_bars(&mut s, sim, &streams, scale);
    let axis_y = TOP + lanes as f64 * LANE + 4.0;
    draw_time_axis(&mut s, t, scale, axis_y);
    // The legend: an entry for every colour drawn, none for a colour not drawn.
    for (fill, label, lx, row) in legend {
        let ly = axis_y + 32.0 + 18.0 * row as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="10" height="10" fill="{fill}"/><text x="{}" y="{ly}">{label}</text>"#,
            ly - 9.0,
            lx + 14.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The lane of a device's stream, counted from the top: each device in turn, with a lane for
/// each stream drawn.
fn lane(streams: &[Stream], device: usize, st: Stream) -> usize {
    device * streams.len() + streams.iter().position(|x| *x == st).unwrap_or(0)
}

/// The lanes of `devices` devices (one a pipeline stage), shaded alternately by device, and
/// their labels: the stage, its first device and the stream on a device's first lane, the
/// stream alone on the others.
fn draw_lanes(s: &mut String, devices: usize, streams: &[Stream], per_stage: u64) {
    for d in 0..devices {
        for (k, st) in streams.iter().enumerate() {
            let y = TOP + lane(streams, d, *st) as f64 * LANE;
            let fill = if d % 2 == 0 { "#f4f4f4" } else { "#ffffff" };
            let _ = writeln!(
                s,
                r#"<rect x="{LEFT}" y="{y}" width="{}" height="{LANE}" fill="{fill}"/>"#,
                WIDTH - LEFT - 20.0
            );
            let label = if k == 0 {
                format!(
                    "stage {d} · device {} · {}",
                    d as u64 * per_stage,
                    st.name()
                )
            } else {
                st.name().to_string()
            };
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                y + LANE - 3.0,
                esc(&label)
            );
        }
    }
}

/// The events on the drawn streams as bars, `scale` pixels a second, merged per lane while they
/// are closer than a pixel and alike (same device, stream, micro-batch and kind).
fn draw_bars(s: &mut String, sim: &Simulation, streams: &[Stream], scale: f64) {
    let mut order: Vec<usize> = (0..sim.events.len())
        .filter(|&i| streams.contains(&sim.events[i].stream))
        .collect();
    order.sort_by(|&a, &b| {
        let (ea, eb) = (&sim.events[a], &sim.events[b]);
        (ea.device, ea.stream as usize)
            .cmp(&(eb.device, eb.stream as usize))
            .then(ea.start.total_cmp(&eb.start))
    });
    let mut open: Option<(usize, f64, f64)> = None;
    let flush = |s: &mut String, (i, x0, x1): (usize, f64, f64)| {
        let e: &Event = &sim.events[i];
        let (fill, what) = colour(e);
        let y = TOP + lane(streams, e.device, e.stream) as f64 * LANE + 1.0;
        let mb = e
            .microbatch
            .map(|j| format!(", micro-batch {j}"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            r#"<rect x="{:.2}" y="{y}" width="{:.2}" height="{}" fill="{fill}"><title>{what}{mb}, stage {}</title></rect>"#,
            LEFT + x0,
            (x1 - x0).max(0.5),
            LANE - 2.0,
            e.stage
        );
    };
    for &i in &order {
        let e = &sim.events[i];
        let (x0, x1) = (e.start * scale, e.end() * scale);
        if let Some((j, a, b)) = open {
            let o = &sim.events[j];
            let alike = o.device == e.device
                && o.stream == e.stream
                && o.microbatch == e.microbatch
                && colour(o).1 == colour(e).1;
            if alike && x0 - b < 1.0 {
                open = Some((j, a, x1.max(b)));
                continue;
            }
            flush(s, (j, a, b));
        }
        open = Some((i, x0, x1));
    }
    if let Some(o) = open {
        flush(s, o);
    }
}

/// The time axis at `axis_y`: a grid line and a label at every nice step up to `t` seconds.
fn draw_time_axis(s: &mut String, t: f64, scale: f64, axis_y: f64) {
    let step = nice_step(t / 8.0);
    let mut x = 0.0;
    while x <= t * 1.0001 {
        let px = LEFT + x * scale;
        let _ = writeln!(
            s,
            r##"<line x1="{px:.2}" y1="{TOP}" x2="{px:.2}" y2="{axis_y}" stroke="#cccccc" stroke-width="0.5"/><text x="{px:.2}" y="{}" text-anchor="middle">{}</text>"##,
            axis_y + 12.0,
            seconds(x)
        );
        x += step;
    }
}

fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1e-12).log10().floor());
    let m = raw / p;
    let n = if m < 1.5 {
        1.0
    } else if m < 3.5 {
        2.0
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    };
    n * p
}

fn seconds(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x < 1e-3 {
        format!("{:.0} µs", x * 1e6)
    } else if x < 1.0 {
        format!("{:.1} ms", x * 1e3)
    } else {
        format!("{x:.2} s")
    }
}
