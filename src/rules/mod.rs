//! Operator rules: the law table, rule files, and the split tables derived from them.

pub mod law;
mod load;
pub mod rule;
mod set;
pub(crate) mod spec;
pub mod split;

pub use law::{CollectiveKind, IndexKind, Law, ReduceOp, LAWS};
pub use load::{load_rule, load_rule_file, RESERVED};
pub use rule::{Dtype, FlopClass, Flops, GemmIndices, Index, OpRule, Role, Tensor};
pub use set::RuleSet;
pub use split::{derive, split_table, AxisSplit, Placement, SplitEntry, SplitTable};
