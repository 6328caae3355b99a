//! `symshard port MODEL --devices N --calib A --calib B …`: one model ported across machines.
//! On each machine the layout `rank --calib` finds fastest (the same search, `--top 1`), timed;
//! where a machine's best layout differs from the previous machine's, the previous best is timed
//! here too, stream by stream, so the table says why the choice changes.

use super::output::print_json;
use super::timeline::PortArgs;
use super::units;
use crate::api::PointSearch;
use crate::calib::{Calibration, MachineRef};
use crate::error::Error;
use crate::model::Model;
use crate::parallel::Evaluation;
use crate::parallel::Layout;
use crate::search::RankOptions;
use crate::strategy::Knobs;
use crate::sym::{Bindings, Rational};
use crate::timeline::{plan_strategy, time_summary, Stream, Summary, TimingPlan};
use serde::Serialize;

/// The best layout found on one machine.
#[derive(Debug, Clone, Serialize)]
pub struct MachineBest {
    /// The machine's name (a what-if machine's ends in `+what-if(…)`).
    pub calibration: String,
    /// The fastest layout that fits, as `rank` writes it; absent where none fits.
    pub strategy: Option<String>,
    /// Why there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its timeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// The previous machine's best layout timed on this machine, where it differs from this
    /// machine's best.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_best: Option<PreviousBest>,
    /// On a machine whose node (NVLink domain) is not a power of two: the fastest layout on the
    /// largest power of two of each domain, timed (as `rank`'s `partial_domains`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial_domains: Option<PartialBest>,
    #[serde(skip)]
    knobs: Option<(Knobs, Layout)>,
}

/// The fastest layout on part of each NVLink domain.
#[derive(Debug, Clone, Serialize)]
pub struct PartialBest {
    /// Devices used of each domain.
    pub gpus_per_domain: u64,
    /// Devices of each domain.
    pub domain_size: u64,
    /// Domains the job spans this way.
    pub domains: u64,
    /// The layout.
    pub strategy: String,
    /// Its timeline.
    pub summary: Summary,
}

impl MachineBest {
    fn none(calib: &Calibration, reason: String) -> MachineBest {
        MachineBest {
            calibration: calib.name.clone(),
            strategy: None,
            reason: Some(reason),
            summary: None,
            previous_best: None,
            partial_domains: None,
            knobs: None,
        }
    }
}

/// The previous machine's best layout, timed on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct PreviousBest {
    /// The machine it was best on.
    pub machine: String,
    /// The layout.
    pub strategy: String,
    /// Its timeline here; absent where it cannot run here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// Why it cannot run here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Ports `args.analysis`, a model, across the machines of `--calib`.
pub fn run_model(args: &PortArgs) -> Result<(), Error> {
    let Some(devices) = args.devices else {
        return Err(Error::Usage(format!(
            "port {}: a model needs --devices (the analysis of `symshard analyze -o` fixes them; a model is searched on each machine)",
            args.analysis.display()
        )));
    };
    let name = args.analysis.to_string_lossy().to_string();
    let model = args.symbols.loader()?.resolve(&name)?;
    let search = PointSearch {
        model: &name,
        devices,
        set: args.symbols.set.clone(),
        fix: args.fix.clone(),
        max: Vec::new(),
        headroom: None,
    };
    let mut out: Vec<MachineBest> = Vec::new();
    // The stack profiles, as every machine's table takes them from `--stack`.
    let mut stack = None;
    // Where a machine's table borrows the GEMM curve of its best layout's precision.
    let mut borrowed: Vec<String> = Vec::new();
    for c in &args.calib {
        let calib = Calibration::resolve(c)?.with_stack(args.stack.as_deref())?;
        stack = calib.stack_text();
        let best = match search.options(&model, &calib).and_then(|(values, opts)| {
            let at = At {
                model: &model,
                values: &values,
                calib: &calib,
                opts: &opts,
            };
            let mut best = at.best()?;
            if let Some(per) = crate::strategy::partial_node_size(devices, opts.gpus_per_node) {
                best.partial_domains = crate::api::refused_as_none(at.partial(per))?.flatten();
            }
            let previous = out
                .iter()
                .rev()
                .find_map(|m| Some((m.calibration.as_str(), m.knobs.as_ref()?)));
            if let (Some((machine, (pk, pl))), Some((k, _))) = (previous, &best.knobs) {
                if pk != k {
                    best.previous_best = Some(at.previous(machine, pk, pl)?);
                }
            }
            Ok(best)
        }) {
            Ok(b) => b,
            // A machine the devices do not suit (a node size that does not divide them, a
            // precision it lacks) is a row that says so; the others are still ported. Where
            // its whole nodes cannot hold them but the largest power of two of each can (1,024
            // devices on 72-GPU racks), that placement is still timed.
            Err(e @ (Error::Usage(_) | Error::Strategy(_))) => {
                let mut none = MachineBest::none(&calib, e.to_string());
                if let Some(per) =
                    crate::strategy::partial_node_size(devices, calib.gpus_per_node())
                {
                    let partial =
                        search
                            .options_on(&model, &calib, Some(per))
                            .and_then(|(values, opts)| {
                                At {
                                    model: &model,
                                    values: &values,
                                    calib: &calib,
                                    opts: &opts,
                                }
                                .partial_best(calib.gpus_per_node())
                            });
                    none.partial_domains = crate::api::refused_as_none(partial)?.flatten();
                }
                none
            }
            Err(e) => return Err(e),
        };
        if let Some((k, _)) = &best.knobs {
            borrowed.extend(calib.borrowed_gemm_curve(k.precision));
        }
        out.push(best);
    }
    if args.format == super::Format::Json {
        return print_json(&out);
    }
    print_table(&model, devices, &out, stack.as_deref(), &borrowed);
    Ok(())
}

/// One machine's search: the model's bindings and the search's options there.
struct At<'a> {
    model: &'a Model,
    values: &'a Bindings,
    calib: &'a Calibration,
    opts: &'a RankOptions,
}

impl At<'_> {
    /// `knobs` and `layout` planned on this machine, on the devices per node and the memory
    /// the search used.
    fn plan(&self, knobs: &Knobs, layout: &Layout) -> Result<(TimingPlan, Evaluation), Error> {
        let memory = self.opts.memory.floor();
        let on = MachineRef::new(self.calib, self.opts.gpus_per_node, &memory);
        plan_strategy(self.model, self.values, knobs, layout, on)
    }

    /// The fastest layout on `per` devices of each domain, timed; None where none fits.
    fn partial(&self, per: u64) -> Result<Option<PartialBest>, Error> {
        let opts = RankOptions {
            gpus_per_node: per,
            ..self.opts.clone()
        };
        At {
            opts: &opts,
            ..*self
        }
        .partial_best(self.opts.gpus_per_node)
    }

    /// The fastest layout of this search, whose nodes are part of each domain of
    /// `domain_size` devices, timed; None where none fits.
    fn partial_best(&self, domain_size: u64) -> Result<Option<PartialBest>, Error> {
        let best = self.best()?;
        let (Some(strategy), Some(summary)) = (best.strategy, best.summary) else {
            return Ok(None);
        };
        Ok(Some(PartialBest {
            gpus_per_domain: self.opts.gpus_per_node,
            domain_size,
            domains: self.opts.devices / self.opts.gpus_per_node,
            strategy,
            summary,
        }))
    }

    /// The fastest layout here, timed.
    fn best(&self) -> Result<MachineBest, Error> {
        let result = crate::search::rank(self.model, self.values, self.calib, self.opts)?;
        let batch = self.model.batch_value(self.values);
        let top = match result.rows.first() {
            Some(top) if top.evaluation.feasible => top,
            Some(_) => {
                let one = Rational::from_integer(1.into());
                let why = crate::api::nothing_fits_line(
                    &result,
                    &self.opts.memory,
                    batch.unwrap_or(&one),
                );
                let why = why.unwrap_or_else(|| "no layout fits in memory".into());
                return Ok(MachineBest::none(self.calib, why));
            }
            None => return Ok(MachineBest::none(self.calib, "no strategy to rank".into())),
        };
        let k = top.evaluation.knobs.clone();
        let layout = top.parallel_layout();
        let (plan, _) = self.plan(&k, &layout)?;
        let mut best = MachineBest::none(self.calib, String::new());
        best.reason = None;
        best.strategy = Some(k.describe(batch));
        best.summary = Some(time_summary(&plan, self.calib)?);
        best.knobs = Some((k, layout));
        Ok(best)
    }

    /// `machine`'s best layout timed here, or why it cannot run here.
    fn previous(
        &self,
        machine: &str,
        knobs: &Knobs,
        layout: &Layout,
    ) -> Result<PreviousBest, Error> {
        let mut prev = PreviousBest {
            machine: machine.to_string(),
            strategy: knobs.describe(self.model.batch_value(self.values)),
            summary: None,
            reason: None,
        };
        match self.plan(knobs, layout) {
            Ok((plan, e)) if e.feasible => prev.summary = Some(time_summary(&plan, self.calib)?),
            Ok((_, e)) => {
                prev.reason = Some(e.reason.as_ref().map_or(
                    "it does not fit".into(),
                    crate::parallel::Infeasible::describe,
                ))
            }
            Err(e) => prev.reason = Some(e.to_string()),
        }
        Ok(prev)
    }
}

/// The most seconds any one device's stream is busy, per stream.
fn streams(s: &Summary) -> Vec<(&'static str, f64)> {
    Stream::ALL
        .iter()
        .map(|&st| {
            let most = s.devices.iter().map(|d| d.busy[st]).fold(0.0, f64::max);
            (st.name(), most)
        })
        .collect()
}

/// Why `prev` loses to `best` here: its step time, and the streams (and bubble) whose busy
/// seconds differ most, largest first.
fn why(prev: &PreviousBest, best: &Summary) -> String {
    let Some(p) = &prev.summary else {
        return format!(
            "it cannot run here: {}",
            prev.reason.as_deref().unwrap_or("unknown")
        );
    };
    let slower = p.iteration_seconds / best.iteration_seconds - 1.0;
    let mut diffs: Vec<(String, f64)> = streams(p)
        .into_iter()
        .zip(streams(best))
        .map(|((n, a), (_, b))| (format!("{n} {a:.3} s → {b:.3} s"), a - b))
        .chain(std::iter::once((
            format!(
                "bubble {} → {}",
                units::percent_float(p.bubble_fraction),
                units::percent_float(best.bubble_fraction)
            ),
            (p.bubble_fraction * p.iteration_seconds
                - best.bubble_fraction * best.iteration_seconds),
        )))
        .filter(|(_, d)| d.abs() >= 1e-4)
        .collect();
    diffs.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    let parts: Vec<String> = diffs.into_iter().take(3).map(|(t, _)| t).collect();
    format!(
        "it takes {:.4} s here ({} slower){}",
        p.iteration_seconds,
        units::percent_float(slower),
        if parts.is_empty() {
            String::new()
        } else {
            format!("; that layout → this one: {}", parts.join(", "))
        }
    )
}

fn print_table(
    model: &Model,
    devices: u64,
    out: &[MachineBest],
    stack: Option<&str>,
    borrowed: &[String],
) {
    println!(
        "port {} on {devices} devices — the fastest layout on each machine (rank --calib … --top 1), timed",
        model.name
    );
    println!("{}", units::stack_line(stack));
    for line in borrowed {
        println!("{line}");
    }
    println!();
    let rows: Vec<Vec<String>> = out
        .iter()
        .map(|m| match &m.summary {
            Some(s) => vec![
                m.calibration.clone(),
                format!("{:.4}", s.iteration_seconds),
                units::percent_float(s.mfu),
                s.memory_per_device
                    .and_then(Rational::from_float)
                    .map_or("unknown".into(), |r| units::bytes_rounded(&r)),
                m.strategy.clone().unwrap_or_default(),
            ],
            None => vec![
                m.calibration.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                m.reason.clone().unwrap_or_default(),
            ],
        })
        .collect();
    let head = ["machine", "iteration (s)", "MFU", "memory", "best layout"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain(std::iter::once(head[i].chars().count()))
            .max()
            .unwrap_or(0)
    };
    let w: Vec<usize> = (0..4).map(width).collect();
    let line = |r: [&str; 5]| {
        println!(
            "  {:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        )
    };
    line(head);
    for r in &rows {
        line([&r[0], &r[1], &r[2], &r[3], &r[4]]);
    }
    let mut any = false;
    for m in out {
        let (Some(prev), Some(best)) = (&m.previous_best, &m.summary) else {
            continue;
        };
        if !any {
            println!();
            println!("why the best layout changes (the previous machine's best, timed here):");
            any = true;
        }
        println!(
            "  on {}: {}'s best ({}) — {}",
            m.calibration,
            prev.machine,
            prev.strategy,
            why(prev, best)
        );
    }
    print_partial(devices, out);
    println!();
    println!("  streams: the most seconds any one device's stream is busy; bubble: the share of the step the busiest device idles while the pipeline fills and drains");
    println!("  {}", units::MFU_MEANS);
    println!("  {}", units::UNITS_LEGEND);
}

/// The machines' fastest layouts on part of each NVLink domain, against their full domains'.
fn print_partial(devices: u64, out: &[MachineBest]) {
    let mut any = false;
    for m in out {
        let Some(p) = &m.partial_domains else {
            continue;
        };
        if !any {
            println!();
            println!("on part of each NVLink domain (rank's partial domains):");
            any = true;
        }
        let verdict = match &m.summary {
            Some(s) => format!(
                "{} than the best on full domains",
                units::faster_or_slower(p.summary.iteration_seconds / s.iteration_seconds - 1.0)
            ),
            None if !devices.is_multiple_of(p.domain_size) => {
                "where whole domains cannot hold the devices".into()
            }
            None => "where nothing fits on full domains".into(),
        };
        println!(
            "  on {}: {} of each {}-device domain ({} domains for {devices} devices), {} takes {:.4} s, {verdict}",
            m.calibration,
            p.gpus_per_domain,
            p.domain_size,
            p.domains,
            p.strategy,
            p.summary.iteration_seconds
        );
    }
}
