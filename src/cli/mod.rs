//! The `symshard` command line: one file per subcommand, argument handling and printing only.

mod analyze;
pub mod audit;
mod calibrate;
mod compare;
mod cost;
mod crossover;
pub mod explain;
mod import;
mod layout;
mod machines;
mod models;
mod optimize;
mod output;
mod port;
pub mod progress;
pub mod rank;
mod report;
mod stack_fit;
mod strategy_args;
pub mod sweep;
mod timeline;
pub use crate::units;
mod validate;

use crate::error::Error;
use clap::{Parser, Subcommand};

/// Rank parallel training layouts by exact symbolic cost.
#[derive(Debug, Parser)]
#[command(name = "symshard", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Print exact integers and fractions in tables instead of rounded amounts with units
    /// (GB, PFLOP) and thousands separators. JSON is always exact.
    #[arg(long, global = true)]
    pub exact: bool,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show an operator rule: its indices and laws, FLOPs, and derived split table.
    Explain(explain::ExplainArgs),
    /// Parameters, FLOPs (matmul-like and other) and activation memory of a model.
    Cost(Box<cost::CostArgs>),
    /// Check every derived split cost against brute-force counting on small shapes.
    Audit(audit::AuditArgs),
    /// Time one training step of a strategy on a machine: per-device timelines, throughput, MFU.
    Timeline(Box<timeline::TimelineArgs>),
    /// Save a strategy's analysis (exact, machine-independent) for `timeline` and `port`.
    Analyze(Box<analyze::AnalyzeArgs>),
    /// Time a saved analysis on several machines side by side.
    Port(timeline::PortArgs),
    /// Fit a calibration table from microbenchmarks, or a stack profile from measured step times.
    Calibrate(calibrate::CalibrateArgs),
    /// Write a model file from a Hugging Face config.json or an ONNX graph.
    Import(import::ImportArgs),
    /// Find cheaper communication for a tensor-parallel layer by e-graph rewriting.
    Optimize(optimize::OptimizeArgs),
    /// Compare a layer's tensor-parallel layouts: annotated, exact optimum, D-Rec.
    Layout(layout::LayoutArgs),
    /// Rank hybrid-parallel strategies of a model on N devices.
    Rank(Box<rank::RankArgs>),
    /// Two strategies side by side, component by component, with exact differences.
    Compare(Box<compare::CompareArgs>),
    /// Where strategy A stops beating strategy B as one model symbol grows, solved exactly.
    Crossover(Box<crossover::CrossoverArgs>),
    /// List the shipped models and families.
    Models(models::ModelsArgs),
    /// List the shipped machines (calibration tables) with their peaks, memory and links; with
    /// a name, every number of its table and where it comes from.
    Machines(machines::MachinesArgs),
    /// Write a self-contained HTML report: ranking, cost components, memory versus time, the top
    /// strategy's timeline, memory and formulas.
    Report(Box<report::ReportArgs>),
    /// Predict every shipped published measurement and print the errors (exit 1 when one grows
    /// beyond its recorded bound).
    Validate(validate::ValidateArgs),
    /// Find the fastest layout at every point of a grid of models, machines (shipped or
    /// what-if), device counts, precisions, batch sizes and sequence lengths; write Parquet and
    /// CSV.
    Sweep(Box<sweep::SweepArgs>),
}

/// `--set SYM=VALUE`, shared by every command that takes a model.
#[derive(Debug, Clone, clap::Args)]
pub struct SymbolArgs {
    /// Bind model symbols (`--set B=16,S=2048`, or `--set B=16 --set S=2048`).
    #[arg(long = "set", value_name = "SYM=VALUE", value_delimiter = ',')]
    pub set: Vec<String>,
    /// How attention runs: eager (S×S scores in memory), flash (one fused kernel) or
    /// flash-causal (fused, skipping the masked half); default: the model's setting.
    #[arg(long, value_enum)]
    pub attention: Option<crate::model::AttentionMode>,
    /// How the loss over the vocabulary runs in timelines: fp32 (separate fp32 passes over the
    /// logits, as Megatron-LM, PyTorch autocast and Hugging Face models run it) or fused (one
    /// kernel, as flash-attn's CrossEntropyLoss runs it).
    #[arg(long, value_enum, default_value = "fp32")]
    pub loss: crate::model::LossMode,
    /// Evaluations of the loss as a training metric per micro-batch, each one more unfused fp32
    /// pass over the logits in timelines (Composer's trainer computes its model's training
    /// metrics after every micro-batch: 2 for LLM Foundry's MPT); 0 to 16.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=crate::model::MAX_TRAIN_METRICS as i64))]
    pub train_metrics: u32,
    /// Whether dropout runs: `off` takes the graph's dropout operators out (probability 0: no
    /// kernel, no mask kept for the backward); default: the model file's `dropout`, else on.
    #[arg(long, value_name = "on|off", value_parser = clap::builder::BoolishValueParser::new())]
    pub dropout: Option<bool>,
    /// What selective recomputation (`--recompute selective`) recomputes, as Megatron-Core's
    /// `--recompute-modules` names the submodules (comma-separated): `core_attn` the attention
    /// core (the default), and, where the model's family declares them, `layernorm` (the input
    /// and pre-MLP norms), `mla_up_proj` (multi-head latent attention's up-projections and
    /// rotary embedding), `moe_act` (the experts' activation), `mlp` (a dense layer's MLP) and
    /// `shared_experts` (an MoE layer's shared experts). `layernorm`, `mla_up_proj` and
    /// `moe_act` discard their outputs: the copies the next operators save are recomputed, not
    /// kept.
    #[arg(long, value_delimiter = ',', value_name = "MODULE,…",
          value_parser = crate::model::RecomputeModule::parse)]
    pub recompute_modules: Option<Vec<crate::model::RecomputeModule>>,
    /// Also load the operator rules in this directory (they replace shipped rules of the same
    /// name, so a model can use a rule of your own).
    #[arg(long, value_name = "DIR")]
    pub rules: Option<std::path::PathBuf>,
}

impl SymbolArgs {
    /// The model named `arg` (a file or a shipped name) with these bindings and settings.
    pub fn model(&self, arg: &str) -> crate::api::Model {
        let mut m = crate::api::Model::named(arg)
            .attention(self.attention)
            .loss(self.loss)
            .train_metrics(self.train_metrics)
            .dropout(self.dropout)
            .recompute_modules(self.recompute_modules.clone())
            .rules(self.rules.clone());
        for s in &self.set {
            m = m.set_text(s.as_str());
        }
        m
    }

    /// The shipped rules and families, building models with the attention asked for.
    pub fn loader(&self) -> Result<crate::model::ModelLoader, Error> {
        self.model("").loader()
    }

    /// The model's symbol values with the `--set` overrides applied.
    pub fn apply(&self, model: &crate::model::Model) -> Result<crate::sym::Bindings, Error> {
        self.model(&model.name).bind(model)
    }
}

/// Output format of every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Format {
    /// A readable table.
    #[default]
    Table,
    /// JSON for machines.
    Json,
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidUtf8 => {
            eprintln!("error: {}", not_utf8(std::env::args_os()));
            return 2;
        }
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// Which argument is not UTF-8 (clap only says that one is): its position, the option it follows
/// if any, and its text with the bad bytes replaced.
fn not_utf8(args: impl Iterator<Item = std::ffi::OsString>) -> String {
    let args: Vec<std::ffi::OsString> = args.collect();
    let Some(k) = args.iter().position(|a| a.to_str().is_none()) else {
        return "an argument is not valid UTF-8".into();
    };
    let shown = args[k].to_string_lossy();
    let after = args[..k]
        .last()
        .and_then(|a| a.to_str())
        .filter(|a| a.starts_with("--"))
        .map(|a| format!(" (the value of {a})"))
        .unwrap_or_default();
    format!(
        "argument {k}{after}, `{shown}`, is not valid UTF-8: file names and values must be UTF-8 text"
    )
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), Error> {
    units::with_exact(cli.exact, || run_command(cli.command))
}

fn run_command(command: Command) -> Result<(), Error> {
    match command {
        Command::Explain(args) => explain::run(args),
        Command::Cost(args) => cost::run(*args),
        Command::Models(args) => models::run(args),
        Command::Machines(args) => machines::run(args),
        Command::Rank(args) => rank::run(*args),
        Command::Compare(args) => compare::run(*args),
        Command::Crossover(args) => crossover::run(*args),
        Command::Audit(args) => audit::run(args),
        Command::Layout(args) => layout::run(args),
        Command::Optimize(args) => optimize::run(args),
        Command::Import(args) => import::run(args),
        Command::Timeline(args) => timeline::run(*args),
        Command::Analyze(args) => analyze::run(*args),
        Command::Port(args) => timeline::run_port(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Report(args) => report::run(*args),
        Command::Sweep(args) => sweep::run(*args),
    }
}

/// Runs a command line (`args` without the program name) with `--format json` and returns the
/// JSON it would print, as text, in order — one document for most commands. This is how other
/// languages call symshard: the same code path, the same numbers as the command line. Errors are
/// the command line's, including a rejected argument (as [`Error::Usage`]).
pub fn run_json<S: AsRef<str>>(args: &[S]) -> Result<Vec<String>, Error> {
    let mut argv = vec!["symshard".to_string()];
    argv.extend(args.iter().map(|a| a.as_ref().to_string()));
    let mut with_json = argv.clone();
    with_json.extend(["--format".to_string(), "json".to_string()]);
    // Commands without `--format` (`report`) parse only as given; a bad argument is reported as
    // the command line reports it.
    let cli = Cli::try_parse_from(&with_json)
        .or_else(|_| Cli::try_parse_from(&argv))
        .map_err(|e| {
            let text = e.render().to_string();
            Error::Usage(text.trim_end().trim_start_matches("error: ").to_string())
        })?;
    output::capture_json(|| run(cli))
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::{CommandFactory, Parser};

    /// clap's own consistency checks over every subcommand: no two flags with one name (the
    /// machine flags shared by several commands included), every `requires` and `conflicts_with`
    /// naming a flag that exists.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The machine flags are one definition: `rank`, `report` and `compare` take `--calib`,
    /// `--with` and `--stack` alike, and `--with` needs `--calib` on each.
    #[test]
    fn machine_flags_are_shared() {
        for argv in [
            &["symshard", "rank", "gpt3-125m", "--devices", "8"][..],
            &[
                "symshard",
                "report",
                "gpt3-125m",
                "--devices",
                "8",
                "-o",
                "x.html",
            ][..],
            &["symshard", "compare", "gpt3-125m", "dp=8", "dp=4,tp=2"][..],
            &["symshard", "cost", "gpt3-125m"][..],
        ] {
            let mut given: Vec<&str> = argv.to_vec();
            given.extend([
                "--calib",
                "a100-80gb",
                "--with",
                "domain=16",
                "--stack",
                "auto",
            ]);
            assert!(Cli::try_parse_from(&given).is_ok(), "{given:?}");
            let mut without_calib: Vec<&str> = argv.to_vec();
            without_calib.extend(["--with", "domain=16"]);
            let e = Cli::try_parse_from(&without_calib).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{without_calib:?}"
            );
        }
    }
}
