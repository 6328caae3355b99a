//! Strategies: a device mesh and the knobs of hybrid parallelism.

#[cfg(test)]
mod error_tests;
mod file;
mod knobs;
mod mesh;
pub mod schedule;

pub use crate::error::strategy::{
    partial_node_size, NotDivisible, StrategyError, Unsupported, MAX_DEVICES, MAX_GPUS_PER_NODE,
};
pub use file::{
    check_fills_nodes, check_gpus_per_node, check_knobs, check_nodes, check_schedule_microbatches,
    load_strategy, parse_strategy, StrategyArgs, StrategyFile,
};
pub use knobs::{
    Fp8Bytes, Knobs, Overlap, PipelineSplit, Precision, Recompute, Schedule, WEIGHT_BYTES,
};
pub use mesh::{block_placement, AxisKind, Mesh, MeshAxis, Tier};
