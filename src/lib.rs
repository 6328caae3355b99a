//! symshard ranks the ways of training a neural network across many accelerators — data, tensor,
//! pipeline and hybrid parallelism — by exact symbolic cost, without profiling anything.
//!
//! Each operator's cost is an exact formula (FLOPs, bytes of communication, bytes of memory) under
//! each way of splitting its tensors, derived from the homomorphism law of each of its indices
//! ([`rules::law`]).
#![warn(missing_docs)]

mod api;
pub mod audit;
pub mod calib;
pub mod cli;
pub mod diag;
pub mod embedded;
pub mod emit;
mod error;
pub mod machine;
pub mod model;
pub mod parallel;
mod report;
pub mod rewrite;
pub mod rules;
pub mod search;
pub mod strategy;
mod suggest;
pub mod sweep;
pub mod sym;
pub mod timeline;
pub mod units;
pub mod validate;

pub use api::{
    compare, cost, crossover, explain, machine_sources, machines, models, rank, rank_with,
    timeline, AutoNote, CompareRequest, CompareSide, ComparedStrategy, Comparison, Cost,
    CostRequest, CrossoverBoundary, CrossoverRequest, CrossoverResult, CrossoverSpec, DeviceCost,
    DeviceOp, EngineNote, ExplainedBytes, ExplainedFlops, Explanation, Flops, Headroom, Knob,
    Machine, MachineEntry, Model, ModelEntry, ModelSource, OpCost, OptionName, Part,
    PartialDomains, Pass, Quantity, RankOptions, RankOptionsBuilder, RankResult, RankRow, Ranked,
    SourcedNumber, Spelling, StackSupports, StepSeconds, Strategy, Timeline, TimelineInput,
    TimelineRequest, DEFAULT_MAX_MICROBATCHES,
};
pub use error::{Error, Location, Result};
/// The importers of foreign model formats (Hugging Face configs, ONNX graphs), part of model
/// loading.
pub use model::import;
/// The HTML report of a ranking (`symshard report`).
pub use report::write_report;
/// Constraints on the knobs a ranking searches ([`RankOptionsBuilder::constraints`]).
pub use search::Steer;
/// Which tensor-parallel layouts a ranking prices, and which one a row uses.
pub use search::{LayoutKind, Layouts};
