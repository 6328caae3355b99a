//! [`Spelling`]: how a caller names the options it passes, so that a refusal quotes the option
//! as its caller wrote it — `--set B=x` on the command line, `symbols` in the Python package.

/// Who passed the options a message refuses: the command line, with its flags (`--set`,
/// `--with`, `--gpus-per-node`), or the Python package, with its keywords (`symbols`,
/// `what_if`, `gpus_per_node`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Spelling {
    /// The command line's flags.
    #[default]
    CommandLine,
    /// The Python package's keyword arguments.
    Python,
}

/// An option of the typed API that the command line and the Python package name differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionName {
    /// Symbol bindings (`--set B=8`; Python's `symbols` and keyword symbols).
    Set,
    /// Fixed knobs (`--fix`).
    Fix,
    /// Capped knobs (`--max`).
    Max,
    /// Device memory (`--memory`).
    Memory,
    /// Memory kept free (`--headroom`).
    Headroom,
    /// A what-if machine's edits (`--with`; Python's `what_if`).
    With,
    /// Samples per micro-batch (`--micro-batch-size`; Python's `micro_batch_size`).
    MicroBatchSize,
    /// Micro-batches per step (`--microbatches`).
    Microbatches,
    /// Devices per node (`--gpus-per-node`; Python's `gpus_per_node`).
    GpusPerNode,
    /// Rows a ranking shows (`--top`).
    Top,
    /// The most micro-batches a ranking tries (`--max-microbatches`).
    MaxMicrobatches,
    /// The most model chunks a ranking tries (`--max-chunks`).
    MaxChunks,
    /// The devices a ranking spreads over (`--devices`).
    Devices,
    /// The pipeline schedule (`--schedule`).
    Schedule,
    /// The symbol a crossover varies (`--in`; Python's `symbol`).
    In,
    /// The first value a crossover examines (`--from`; Python's `start`).
    From,
    /// The last value a crossover examines (`--to`; Python's `stop`).
    To,
    /// The step between the values a crossover examines (`--step`).
    Step,
}

impl OptionName {
    /// Every option.
    pub const ALL: [OptionName; 18] = {
        use OptionName::*;
        [
            Set,
            Fix,
            Max,
            Memory,
            Headroom,
            With,
            MicroBatchSize,
            Microbatches,
            GpusPerNode,
            Top,
            MaxMicrobatches,
            MaxChunks,
            Devices,
            Schedule,
            In,
            From,
            To,
            Step,
        ]
    };

    /// The command line's flag and the Python package's keyword.
    fn names(self) -> (&'static str, &'static str) {
        use OptionName::*;
        match self {
            Set => ("--set", "symbols"),
            Fix => ("--fix", "fix"),
            Max => ("--max", "max"),
            Memory => ("--memory", "memory"),
            Headroom => ("--headroom", "headroom"),
            With => ("--with", "what_if"),
            MicroBatchSize => ("--micro-batch-size", "micro_batch_size"),
            Microbatches => ("--microbatches", "microbatches"),
            GpusPerNode => ("--gpus-per-node", "gpus_per_node"),
            Top => ("--top", "top"),
            MaxMicrobatches => ("--max-microbatches", "max_microbatches"),
            MaxChunks => ("--max-chunks", "max_chunks"),
            Devices => ("--devices", "devices"),
            Schedule => ("--schedule", "schedule"),
            In => ("--in", "symbol"),
            From => ("--from", "start"),
            To => ("--to", "stop"),
            Step => ("--step", "step"),
        }
    }
}

impl Spelling {
    /// The option as this caller writes it.
    pub fn name(self, option: OptionName) -> &'static str {
        let (flag, keyword) = option.names();
        match self {
            Spelling::CommandLine => flag,
            Spelling::Python => keyword,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_names_no_option_with_dashes_and_the_command_line_every_one() {
        for o in OptionName::ALL {
            assert!(Spelling::CommandLine.name(o).starts_with("--"), "{o:?}");
            let p = Spelling::Python.name(o);
            assert!(
                p.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{o:?}: {p}"
            );
        }
    }
}
