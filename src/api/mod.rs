//! The library's typed interface: requests built in Rust (a [`Model`] with its sizes and
//! settings, a [`Strategy`], a [`Machine`]) and results that carry exact numbers as
//! [`Rational`](crate::sym::Rational) and seconds as `f64`. The command line parses its
//! arguments into these requests once and prints the results; other languages call the same
//! functions.

mod catalog;
mod compare;
mod cost;
mod crossover;
mod machine;
mod model;
mod rank;
mod ranked;
mod strategy;
mod timeline;

pub use crate::error::spelling::{OptionName, Spelling};
pub use catalog::{
    explain, machine_sources, machines, models, ExplainedBytes, ExplainedFlops, Explanation,
    MachineEntry, ModelEntry, SourcedNumber,
};
pub use compare::{
    compare, CompareRequest, CompareSide, ComparedStrategy, Comparison, Part, StepSeconds,
};
pub use cost::{cost, Cost, CostRequest, DeviceCost, DeviceOp, Flops, OpCost, Pass, Quantity};
pub use crossover::{
    crossover, CrossoverBoundary, CrossoverRequest, CrossoverResult, CrossoverSpec,
};
pub use machine::Machine;
pub use model::{Model, ModelSource};
pub use rank::{
    rank, AutoNote, EngineNote, Headroom, Knob, PartialDomains, RankOptions, RankOptionsBuilder,
    RankResult, RankRow, StackSupports, DEFAULT_MAX_MICROBATCHES,
};
pub use ranked::{rank_with, Ranked};
pub use strategy::Strategy;
pub use timeline::{timeline, Timeline, TimelineInput, TimelineRequest};

pub(crate) use catalog::rule_set;
pub(crate) use compare::{compare_loaded, comparison, evaluate_knobs, Evaluated};
pub(crate) use cost::{assumed_sizes, cost_in_full, document as cost_document, Asked, CostDetail};
pub(crate) use crossover::{crossover_loaded, memory_at as crossover_memory_at, winners_line};
pub(crate) use model::Loaded;
pub(crate) use rank::{
    nothing_fits_line, rank_loaded, refused_as_none, search_options, Document as RankDocument,
    PointSearch, RankDetail,
};
pub(crate) use ranked::ranked_loaded;
pub(crate) use strategy::{machine_error, Resolved};
pub(crate) use timeline::{plan_of, timeline_in_full};
