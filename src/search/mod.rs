//! Searching strategies: the ranked knob space around per-operator layouts.

pub mod rank;

pub use rank::{rank, RankOptions, RankResult, RankedRow};
