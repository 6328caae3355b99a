//! Models: graphs of operators over symbols, families as templates, and their cost.

pub mod cost;
pub mod graph;
pub mod import;
mod load;
pub(crate) mod spec;

pub use cost::{model_cost, op_costs, FlopSplit, ModelCost, OpCost};
pub use graph::{
    AttentionMode, Block, LossMode, Model, OpNode, Producer, RecomputeModule, Roles,
    MAX_TRAIN_METRICS,
};
pub use load::{symbol_value, user_model_dirs, ModelLoader};
