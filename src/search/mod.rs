//! Searching strategies: per-operator split search (exhaustive enumeration, an exact solver for
//! series-parallel structure, D-Rec), and the ranked knob space around it.

pub mod auto;
pub mod compare;
pub mod drec;
pub mod egraph;
pub mod error;
pub mod exhaustive;
pub mod problem;
pub mod rank;
pub mod sp;
pub mod stack;
pub mod steer;
pub mod versus;

pub use error::{SearchError, SteerError};
pub use rank::{
    rank, rank_with_progress, LayoutKind, Layouts, RankOptions, RankResult, RankedRow, RowLayout,
    DEFAULT_MAX_CHUNKS,
};
pub use sp::best_tp_layout;
pub use steer::Steer;
