//! `symshard timeline` and `symshard port`: a strategy timed on one machine or several.

use super::output::print_json;
use super::strategy_args::StrategyFlags;
use super::units;
use super::{Format, SymbolArgs};
use crate::api::{TimelineInput, TimelineRequest};
use crate::calib::Calibration;
use crate::error::Error;
use crate::timeline::{time_summary, write_chrome_trace, Summary, TimingPlan, TraceDetail};
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `timeline`.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// A model (a file or a shipped name), or an analysis saved by `symshard analyze -o`.
    pub input: String,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    #[command(flatten)]
    pub strategy: StrategyFlags,
    /// Write a Chrome trace (chrome://tracing, Perfetto) of the step.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// How much the trace shows: one event per layer, pass and micro-batch on each stream
    /// (`layer`), or one per operator and collective (`op`, several times larger).
    #[arg(long, value_enum, default_value_t = TraceDetail::Layer, requires = "trace")]
    pub trace_detail: TraceDetail,
    /// Write an SVG Gantt chart of the step.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Arguments of `port`.
#[derive(Debug, Args)]
pub struct PortArgs {
    /// An analysis saved by `symshard analyze -o` (its strategy timed on each machine), or a
    /// model (a file or a shipped name) with `--devices`: the fastest layout on each machine,
    /// and why it changes from one machine to the next.
    pub analysis: PathBuf,
    /// Devices, for a model: each machine's search runs on this many.
    #[arg(long)]
    pub devices: Option<u64>,
    /// For a model: knobs fixed on every machine, as `rank --fix` takes them.
    #[arg(long, value_name = "KNOB=VALUE")]
    pub fix: Vec<String>,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// Machines to time it on (files or shipped names; `TABLE@KERNEL` times fused attention with
    /// one of the table's `attention_kernels`; `TABLE+what-if(NAME=VALUE,…)` is a what-if
    /// machine, changed as `--with` changes it, named as symshard prints it), in the order to
    /// show them.
    #[arg(long, value_name = "FILE", required = true)]
    pub calib: Vec<String>,
    /// A software stack's profile (a file or a shipped name, `stacks/`) added on every machine;
    /// default: `none`, profile-free; `auto` times each strategy on the shipped profile of the
    /// stack it is assumed to run on (ZeRO 2–3 PyTorch FSDP, other model parallelism Megatron,
    /// plain data parallelism PyTorch DDP).
    #[arg(long, value_name = "NAME|FILE")]
    pub stack: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Whether an input names a saved analysis rather than a model.
pub fn is_analysis(input: &str) -> bool {
    input.ends_with(".json")
}

/// The typed request of the command line's input: a saved analysis, or a model and strategy.
fn input_of(
    input: &str,
    symbols: &SymbolArgs,
    strategy: &StrategyFlags,
) -> Result<TimelineInput, Error> {
    if is_analysis(input) {
        if strategy.given() || !symbols.set.is_empty() || strategy.gpus_per_node.is_some() {
            return Err(Error::Usage(
                "a saved analysis already fixes the strategy and symbols: only --calib applies"
                    .into(),
            ));
        }
        return Ok(TimelineInput::Analysis(PathBuf::from(input)));
    }
    Ok(TimelineInput::Model {
        model: symbols.model(input),
        strategy: strategy.strategy()?,
    })
}

/// The plan of the command line's input: a saved analysis, or a model and strategy.
pub fn plan_of(
    input: &str,
    symbols: &SymbolArgs,
    strategy: &StrategyFlags,
) -> Result<TimingPlan, Error> {
    let input = input_of(input, symbols, strategy)?;
    crate::api::plan_of(&input, &strategy.machine()?)
}

/// Runs `timeline`.
pub fn run(args: TimelineArgs) -> Result<(), Error> {
    let req = TimelineRequest {
        input: input_of(&args.input, &args.symbols, &args.strategy)?,
        machine: args.strategy.machine()?,
        svg: args.svg.is_some(),
    };
    let input = Path::new(&args.input);
    for p in args.trace.iter().chain(&args.svg) {
        super::output::check_output(p, &[input])?;
    }
    let (out, plan, tl) = crate::api::timeline_in_full(&req, args.trace.is_some())?;
    if let (Some(p), Some(tl)) = (&args.trace, &tl) {
        let io = |source| Error::Io {
            path: p.to_path_buf(),
            source,
        };
        let mut w = std::io::BufWriter::new(std::fs::File::create(p).map_err(io)?);
        write_chrome_trace(&tl.plan, &tl.sim, args.trace_detail, &mut w).map_err(io)?;
        std::io::Write::flush(&mut w).map_err(io)?;
    }
    if let (Some(p), Some(svg)) = (&args.svg, &out.svg) {
        super::output::write_output(p, svg.as_bytes(), &[input])?;
    }
    match args.format {
        Format::Json => print_json(&out.summary),
        Format::Table => {
            print_summary(&out.summary, &plan, req.machine.calibration());
            Ok(())
        }
    }
}

/// `" (B = 512, S = 2048)"`: the global batch and sequence length a plan was analysed at,
/// found by the model's `batch` and `sequence` roles (by the names `B` and `S` in analyses saved
/// before the roles were recorded).
fn plan_batch_and_sequence(plan: &TimingPlan) -> String {
    let recorded = [
        plan.batch_symbol.as_deref(),
        plan.sequence_symbol.as_deref(),
    ];
    let names: Vec<&str> = if recorded.iter().any(Option::is_some) {
        recorded.into_iter().flatten().collect()
    } else {
        vec!["B", "S"]
    };
    crate::units::named_values(names, |k| plan.symbols.get(k).cloned())
}

/// Devices per node a plan runs with on a machine: the plan's own, or the machine's.
fn per_node(plan: &TimingPlan, calib: &Calibration) -> u64 {
    plan.gpus_per_node.unwrap_or_else(|| calib.gpus_per_node())
}

/// Bytes given as a float (a summary's memory), rounded for a table.
fn float_bytes(b: f64) -> String {
    crate::sym::Rational::from_float(b)
        .map_or_else(|| format!("{b} B"), |r| units::bytes_rounded(&r))
}

/// A float rounded to an integer, with thousands separators.
fn float_count(x: f64) -> String {
    crate::sym::Rational::from_float(x.round())
        .map_or_else(|| format!("{x:.0}"), |r| units::grouped(&r.to_integer()))
}

/// A simulated step's bubble as `rank` prints a row's: a share of the step, `-` without a
/// pipeline.
fn bubble(s: &Summary, knobs: &crate::strategy::Knobs) -> String {
    if knobs.pp == 1 {
        "-".into()
    } else {
        units::percent_float(s.bubble_fraction)
    }
}

/// The legend of the per-stream columns.
const STREAM_LEGEND: &str = "streams: compute; tp_comm, dp_comm, ep_comm: tensor-, data- and expert-parallel collectives; cp_comm: the context-parallel ring of keys and values; p2p: pipeline sends and receives";

fn print_summary(s: &Summary, plan: &TimingPlan, calib: &Calibration) {
    println!(
        "timeline {}{} — {} on {} ({} devices, {} per node)",
        s.model,
        plan_batch_and_sequence(plan),
        s.strategy,
        s.calibration,
        s.device_count,
        per_node(plan, calib)
    );
    if let Some(w) = &calib.what_if {
        println!("{}", w.line());
    }
    if let Some(line) = units::settings_line(&s.settings) {
        println!("{line}");
    }
    println!("{}", units::stack_line(s.stack_profile.as_deref()));
    if let Some(line) = calib.borrowed_gemm_curve(plan.knobs.precision) {
        println!("{line}");
    }
    println!();
    println!("  iteration               {:.4} s", s.iteration_seconds);
    println!("  samples per second      {:.2}", s.samples_per_second);
    println!(
        "  tokens per second       {}",
        float_count(s.tokens_per_second)
    );
    println!("  model TFLOP/s / device  {:.1}", s.model_tflops_per_device);
    // MFU is of the bf16 peak whatever the precision (`Summary::mfu`); under FP8 or FP4 it may
    // pass 100 %, so the line says which peak.
    if plan.knobs.precision.is_fp8() {
        println!("  MFU (of the bf16 peak)  {}", units::percent_float(s.mfu));
    } else {
        println!("  MFU                     {}", units::percent_float(s.mfu));
    }
    println!("  bubble                  {}", bubble(s, &plan.knobs));
    if s.slowest_device_pace > 1.0 {
        println!(
            "  slowest device          compute × {:.4} (the slowest of {} devices; the table's pace_spread)",
            s.slowest_device_pace, s.device_count
        );
    }
    if let (Some(fits), Some(m)) = (s.fits, s.memory_per_device) {
        println!(
            "  memory per device       {} ({} in the {} usable)",
            float_bytes(m),
            if fits { "fits" } else { "does NOT fit" },
            float_bytes(s.memory_limit)
        );
    }
    println!();
    println!("  {} (busy seconds per stream)", s.representative);
    // The expert stream only where a mixture-of-experts layer uses it.
    let ep = s.devices.iter().any(|d| d.busy.ep_comm > 0.0);
    // And the context-parallel ring's only under context parallelism.
    let cp = s.devices.iter().any(|d| d.busy.cp_comm > 0.0);
    let extra = |on: bool, v: String| {
        if on {
            format!(" {v:>11}")
        } else {
            String::new()
        }
    };
    println!(
        "  {:>8} {:>6} {:>11} {:>11} {:>11} {:>11}{}{}",
        "device",
        "stage",
        "compute",
        "tp_comm",
        "dp_comm",
        "p2p",
        extra(ep, "ep_comm".into()),
        extra(cp, "cp_comm".into()),
    );
    for d in &s.devices {
        println!(
            "  {:>8} {:>6} {:>11.4} {:>11.4} {:>11.4} {:>11.4}{}{}",
            d.id,
            d.stage,
            d.busy.compute,
            d.busy.tp_comm,
            d.busy.dp_comm,
            d.busy.p2p,
            extra(ep, format!("{:.4}", d.busy.ep_comm)),
            extra(cp, format!("{:.4}", d.busy.cp_comm)),
        );
    }
    println!("  busy seconds per stream; {STREAM_LEGEND}");
    println!("  {}", units::BUBBLE_MEANS);
    println!("  {}", units::UNITS_LEGEND);
}

/// The lines above `port`'s table of a saved analysis: the model and strategy, its settings,
/// the stack profile (the same `--stack` on every machine) and each machine's borrowed GEMM
/// curve.
fn print_port_header(plan: &TimingPlan, rows: &[Summary], machines: &[Calibration]) {
    println!(
        "{}{} — {} on {} devices",
        plan.model,
        plan_batch_and_sequence(plan),
        plan.knobs,
        plan.knobs.devices()
    );
    if let Some(line) = units::settings_line(&plan.settings) {
        println!("{line}");
    }
    println!("{}", units::stack_line(rows[0].stack_profile.as_deref()));
    for line in machines
        .iter()
        .filter_map(|m| m.borrowed_gemm_curve(plan.knobs.precision))
    {
        println!("{line}");
    }
    println!();
}

/// Runs `port`.
pub fn run_port(args: PortArgs) -> Result<(), Error> {
    if !is_analysis(&args.analysis.to_string_lossy()) {
        return super::port::run_model(&args);
    }
    if args.devices.is_some() || !args.fix.is_empty() || !args.symbols.set.is_empty() {
        return Err(Error::Usage(format!(
            "{}: a saved analysis already fixes the devices, knobs and symbols: only --calib and --stack apply",
            args.analysis.display()
        )));
    }
    let plan = TimingPlan::load(&args.analysis)?;
    let mut rows = Vec::new();
    let mut machines = Vec::new();
    for c in &args.calib {
        let calib = Calibration::resolve(c)?.with_stack(args.stack.as_deref())?;
        rows.push(time_summary(&plan, &calib)?);
        machines.push(calib);
    }
    if args.format == Format::Json {
        return print_json(&rows);
    }
    print_port_header(&plan, &rows, &machines);
    let w = 14;
    let mut head = format!("  {:<24}", "");
    for r in &rows {
        head += &format!(" {:>w$}", r.calibration);
    }
    println!("{head}");
    let line = |name: &str, f: &dyn Fn(&Summary) -> String| {
        let mut l = format!("  {name:<24}");
        for r in &rows {
            l += &format!(" {:>w$}", f(r));
        }
        println!("{l}");
    };
    line("devices per node", &|r| {
        let m = machines.iter().find(|m| m.name == r.calibration);
        m.map_or("-".into(), |m| per_node(&plan, m).to_string())
    });
    line("iteration (s)", &|r| format!("{:.4}", r.iteration_seconds));
    line("samples per second", &|r| {
        format!("{:.2}", r.samples_per_second)
    });
    line("tokens per second", &|r| float_count(r.tokens_per_second));
    line("model TFLOP/s / device", &|r| {
        format!("{:.1}", r.model_tflops_per_device)
    });
    line("MFU", &|r| units::percent_float(r.mfu));
    line("bubble", &|r| bubble(r, &plan.knobs));
    line("slowest device pace", &|r| {
        format!("× {:.4}", r.slowest_device_pace)
    });
    line("memory per device", &|r| {
        r.memory_per_device.map_or("unknown".into(), float_bytes)
    });
    line("fits", &|r| match r.fits {
        Some(true) => "yes".into(),
        Some(false) => "NO".into(),
        None => "unknown".into(),
    });
    for r in rows.iter().filter(|r| r.fits == Some(false)) {
        eprintln!(
            "warning: on {} the strategy does not fit in memory: the times are of a step that cannot run",
            r.calibration
        );
    }
    let busiest = |r: &Summary, f: fn(&crate::timeline::Busy) -> f64| {
        r.devices.iter().map(|d| f(&d.busy)).fold(0.0, f64::max)
    };
    line("compute busy (max, s)", &|r| {
        format!("{:.4}", busiest(r, |b| b.compute))
    });
    line("tp_comm busy (max, s)", &|r| {
        format!("{:.4}", busiest(r, |b| b.tp_comm))
    });
    line("dp_comm busy (max, s)", &|r| {
        format!("{:.4}", busiest(r, |b| b.dp_comm))
    });
    line("p2p busy (max, s)", &|r| {
        format!("{:.4}", busiest(r, |b| b.p2p))
    });
    line("ep_comm busy (max, s)", &|r| {
        format!("{:.4}", busiest(r, |b| b.ep_comm))
    });
    if plan.knobs.cp > 1 {
        line("cp_comm busy (max, s)", &|r| {
            format!("{:.4}", busiest(r, |b| b.cp_comm))
        });
    }
    println!("  busy (max, s): the most seconds any one device's stream is busy; {STREAM_LEGEND}");
    println!("  {}", units::BUBBLE_MEANS);
    println!("  {}", units::MFU_MEANS);
    println!("  {}", units::UNITS_LEGEND);
    Ok(())
}
