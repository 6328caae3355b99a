//! Strategies: a device mesh and the knobs of hybrid parallelism.

mod error;
mod file;
mod knobs;
mod mesh;

pub use error::{NotDivisible, StrategyError, Unsupported};
pub use file::{
    check_fills_nodes, check_gpus_per_node, check_knobs, check_nodes, load_strategy,
    parse_strategy, StrategyArgs, StrategyFile, MAX_DEVICES, MAX_GPUS_PER_NODE,
};
pub use knobs::{Knobs, Overlap, PipelineSplit, Precision, Recompute, Schedule};
pub use mesh::{AxisKind, Mesh, MeshAxis, Tier};
