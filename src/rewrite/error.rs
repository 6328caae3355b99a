//! Why a distributed program is not well formed, or cannot be priced or built. Every variant
//! carries the offending node, rule, index or axis; the command line shows the message unchanged.

use crate::rules::{IndexKind, Placement};
use crate::sym::SymError;

/// Why a program node, an operator application or a rewrite is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    /// A formula could not be evaluated or divided.
    #[error(transparent)]
    Sym(#[from] SymError),
    /// An attribute where a tensor belongs.
    #[error("expected a tensor, found the attribute `{0}`")]
    NotATensor(String),
    /// An attribute of another kind than the node needs (a mesh axis, a number, a shape).
    #[error("expected {wanted}, found {found}")]
    Expected {
        /// What the node needs.
        wanted: &'static str,
        /// What it was given.
        found: String,
    },
    /// An axis the mesh does not have.
    #[error("no mesh axis `{0}`")]
    NoAxis(String),
    /// A number beyond the machine's.
    #[error("number {0} out of range")]
    Number(u64),
    /// A placement change that needs another placement first.
    #[error("{what} needs {needs} on axis `{axis}`, found {found}")]
    Retag {
        /// The node (`shard`, `all_reduce`, …).
        what: &'static str,
        /// The placement it needs.
        needs: Placement,
        /// The axis.
        axis: String,
        /// The placement found.
        found: Placement,
    },
    /// An all-to-all between a dimension and itself.
    #[error("all_to_all between a dimension and itself")]
    AllToAllSelf,
    /// An attribute used as a program.
    #[error("`{0}` is an attribute, not a program")]
    NotAProgram(String),
    /// A view without a shape or a dimension map.
    #[error("view needs a shape and a dimension map")]
    ViewArguments,
    /// A view that changes the number of elements.
    #[error("view of {from} elements as {to}")]
    ViewElements {
        /// Elements before.
        from: String,
        /// Elements after.
        to: String,
    },
    /// A view that drops a sharded dimension.
    #[error("view does not say where a shard of dimension {0} goes")]
    ViewShard(usize),
    /// An operator node without its rule, extents or marks.
    #[error("op needs {0}")]
    MalformedOp(&'static str),
    /// A rule the program's rules do not have.
    #[error("unknown rule `{0}`")]
    UnknownRule(String),
    /// A dimension beyond a tensor's rank.
    #[error("dimension {dim} of a rank-{rank} tensor")]
    Rank {
        /// The dimension.
        dim: usize,
        /// The tensor's rank.
        rank: usize,
    },
    /// A dimension sharded on two axes.
    #[error("dimension {0} is already sharded on another axis")]
    ShardedTwice(usize),
    /// An operator given a different number of inputs than its rule takes.
    #[error("`{rule}` takes {expected} inputs, given {given}")]
    InputCount {
        /// The rule.
        rule: String,
        /// Inputs of the rule.
        expected: usize,
        /// Inputs given.
        given: usize,
    },
    /// An operator without the extent of one of its rule's indices.
    #[error("`{rule}` needs the extent of `{index}`")]
    NoExtent {
        /// The rule.
        rule: String,
        /// The index or parameter.
        index: String,
    },
    /// An input of another shape than the rule's.
    #[error("input {k} (`{input}`) of `{rule}` has shape {shape}, the rule wants {wanted}")]
    InputShape {
        /// The input's position.
        k: usize,
        /// The input.
        input: String,
        /// The rule.
        rule: String,
        /// Its shape.
        shape: String,
        /// The rule's shape.
        wanted: String,
    },
    /// A partial input on an axis that splits no index.
    #[error("`{rule}` has a partial input on `{axis}` but no split index")]
    PartialUnsplit {
        /// The rule.
        rule: String,
        /// The axis.
        axis: String,
    },
    /// A mark on an axis on which no input is split.
    #[error("`{rule}` marks `{index}@{axis}` but no input is split on `{axis}`")]
    MarkUnsplit {
        /// The rule.
        rule: String,
        /// The index marked.
        index: String,
        /// The axis.
        axis: String,
    },
    /// A split input dimension the rule's input does not have.
    #[error("`{rule}` input {k} has no dimension {dim}")]
    NoDimension {
        /// The rule.
        rule: String,
        /// The input.
        k: usize,
        /// The dimension.
        dim: usize,
    },
    /// A split of an index the law table does not allow to split.
    #[error("`{index}` of `{rule}` is {kind}: {statement}")]
    Unsplittable {
        /// The index.
        index: String,
        /// The rule.
        rule: String,
        /// Its kind.
        kind: IndexKind,
        /// The law.
        statement: &'static str,
    },
    /// An index split on two axes.
    #[error("`{index}` of `{rule}` is split on two axes")]
    IndexTwice {
        /// The index.
        index: String,
        /// The rule.
        rule: String,
    },
    /// A split of an index that is the inner part of a dimension.
    #[error("`{index}` is not the outer part of dimension {dim} of `{tensor}`: a block of that dimension does not split `{index}`")]
    NotOuter {
        /// The index.
        index: String,
        /// The dimension.
        dim: usize,
        /// The tensor.
        tensor: String,
    },
    /// An input placed otherwise than the split needs.
    #[error(transparent)]
    InputPlacement(Box<Misplaced>),
    /// A split that needs a mark and has none.
    #[error("`{index}` of `{rule}` is {kind}: its split needs `<{index}@{axis}>` ({statement})")]
    NeedsMark {
        /// The index.
        index: String,
        /// The rule.
        rule: String,
        /// Its kind.
        kind: IndexKind,
        /// The axis.
        axis: String,
        /// The law.
        statement: &'static str,
    },
    /// A mark on a split that needs none.
    #[error("`{rule}` marks `{axis}` but splits `{index}` there, a {kind} index")]
    NeedlessMark {
        /// The rule.
        rule: String,
        /// The axis.
        axis: String,
        /// The index.
        index: String,
        /// Its kind.
        kind: IndexKind,
    },
    /// A sharded output of an index that is the inner part of an output dimension.
    #[error("`{index}` is not the outer part of an output dimension of `{rule}`")]
    OutputNotOuter {
        /// The index.
        index: String,
        /// The rule.
        rule: String,
    },
    /// An output dimension split on two axes.
    #[error("output dimension {dim} of `{rule}` is split on two axes")]
    OutputTwice {
        /// The dimension.
        dim: usize,
        /// The rule.
        rule: String,
    },
    /// A split the rule's split table refuses.
    #[error("{0}")]
    Split(String),
    /// A placement change no collective makes.
    #[error("cannot turn {from} into {to}")]
    Unreachable {
        /// The placement.
        from: Placement,
        /// The placement wanted.
        to: Placement,
    },
    /// A pattern variable the match does not bind.
    #[error("unbound {0}")]
    Unbound(String),
    /// A pattern without nodes.
    #[error("empty pattern")]
    EmptyPattern,
    /// An operator input computed after the operator.
    #[error("input `{0}` is computed later")]
    InputLater(String),
    /// An operator input that no operator computes.
    #[error("input `{0}` has no producer")]
    NoProducer(String),
    /// An operator input that cannot be placed as the operator needs.
    #[error("input `{input}`: {why}")]
    Input {
        /// The input.
        input: String,
        /// Why.
        why: Box<RewriteError>,
    },
    /// A rewrite pattern that does not parse.
    #[error("pattern `{pattern}`: {why}")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// Why.
        why: String,
    },
    /// A rewrite the e-graph library refuses (a right-hand side variable the left does not bind).
    #[error("{0}")]
    Rewrite(String),
}

/// An operator input placed otherwise than the split of one of its indices needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("split of `{index}` of `{rule}` on `{axis}` needs `{input}` {needs}, found {found}")]
pub struct Misplaced {
    /// The index.
    pub index: String,
    /// The rule.
    pub rule: String,
    /// The axis.
    pub axis: String,
    /// The input.
    pub input: String,
    /// The placement needed.
    pub needs: Placement,
    /// The placement found.
    pub found: Placement,
}

impl From<RewriteError> for crate::Error {
    fn from(e: RewriteError) -> crate::Error {
        crate::Error::Usage(e.to_string())
    }
}
