//! The law table: one row per kind of index, saying which homomorphism law lets an operator be
//! computed piecewise along that index and what splitting it over `p` devices costs.
//!
//! This table is the single source of truth. Split tables ([`crate::rules::split`]) read it;
//! the brute-force audit and the e-graph rewrites are checks of the same rows.

use crate::sym::Poly;
use serde::Serialize;
use std::fmt;

/// How an index of an operator behaves (DESIGN §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndexKind {
    /// In the output and the inputs: `f(concat xs) = concat f(xs)`.
    Map,
    /// In inputs only, summed: `f(concat xs) = Σ f(xs)`.
    ReduceSum,
    /// In inputs only, maximised: `f(concat xs) = max f(xs)`.
    ReduceMax,
    /// Normalised along (softmax, norms): pieces combine through small statistics.
    Stat,
    /// Sliding window (convolution, pooling): pieces need a halo from their neighbours.
    Window,
    /// No law: the index cannot be split.
    Opaque,
}

impl IndexKind {
    /// All kinds, in table order.
    pub const ALL: [IndexKind; 6] = [
        IndexKind::Map,
        IndexKind::ReduceSum,
        IndexKind::ReduceMax,
        IndexKind::Stat,
        IndexKind::Window,
        IndexKind::Opaque,
    ];

    /// The name used in rule files.
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Map => "map",
            IndexKind::ReduceSum => "reduce-sum",
            IndexKind::ReduceMax => "reduce-max",
            IndexKind::Stat => "stat",
            IndexKind::Window => "window",
            IndexKind::Opaque => "opaque",
        }
    }

    /// Parses a rule file's kind name.
    pub fn from_name(name: &str) -> Option<IndexKind> {
        IndexKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// This kind's row of the law table.
    pub fn law(self) -> &'static Law {
        &LAWS[self as usize]
    }
}

impl fmt::Display for IndexKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The reduction a partial value awaits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReduceOp {
    /// Partial sums.
    Sum,
    /// Partial maxima.
    Max,
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
        })
    }
}

/// The associative combine `⊙` of the law `f(x ++ y) = f(x) ⊙ f(y)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Combine {
    /// Concatenate the pieces along the index.
    Concat,
    /// Add (or take the maximum of) whole-size pieces.
    Reduce(ReduceOp),
    /// Combine partial statistics (max, sum, mean, variance), then finish locally.
    Statistics,
    /// Concatenate pieces computed from inputs widened by a halo.
    ConcatWithHalo,
    /// No combine exists.
    None,
}

/// What the output looks like right after the local computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputLaw {
    /// Sharded along the index (it is in the output).
    Shard,
    /// Whole size on every device, awaiting a reduction.
    Partial(ReduceOp),
    /// Sharded when the index is in the output, replicated otherwise, once the statistics are
    /// combined.
    ShardOrReplicate,
}

/// The collective that finishes an operator split along an index of this kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Finish {
    /// Nothing: the pieces are already the answer.
    Nothing,
    /// All-reduce of the whole output (or reduce-scatter when the consumer wants it sharded).
    AllReduceOutput(ReduceOp),
    /// All-reduce of the statistics tensor (the output without the normalised index).
    AllReduceStatistics,
    /// Exchange of halo rows with neighbours before computing.
    HaloExchange,
}

impl Finish {
    /// Whether the operator must know its index is split (a mark on the split's axis): the
    /// statistics all-reduce and the halo exchange run inside it.
    pub fn needs_mark(self) -> bool {
        matches!(self, Finish::AllReduceStatistics | Finish::HaloExchange)
    }
}

/// One row of the law table.
#[derive(Debug, Clone, Serialize)]
pub struct Law {
    /// The kind this row is for.
    pub kind: IndexKind,
    /// The homomorphism law in words.
    pub statement: &'static str,
    /// The combine operator.
    pub combine: Combine,
    /// Whether the index may be split at all.
    pub splittable: bool,
    /// Whether the local work is `1/p` of the whole.
    pub divides_compute: bool,
    /// The output placement after local work.
    pub output: OutputLaw,
    /// The collective that completes the operator.
    pub finish: Finish,
}

/// The law table, indexed by `IndexKind as usize`.
pub static LAWS: [Law; 6] = [
    Law {
        kind: IndexKind::Map,
        statement: "f(concat_d xs) = concat_d f(xs)",
        combine: Combine::Concat,
        splittable: true,
        divides_compute: true,
        output: OutputLaw::Shard,
        finish: Finish::Nothing,
    },
    Law {
        kind: IndexKind::ReduceSum,
        statement: "f(concat_d xs) = sum f(xs)",
        combine: Combine::Reduce(ReduceOp::Sum),
        splittable: true,
        divides_compute: true,
        output: OutputLaw::Partial(ReduceOp::Sum),
        finish: Finish::AllReduceOutput(ReduceOp::Sum),
    },
    Law {
        kind: IndexKind::ReduceMax,
        statement: "f(concat_d xs) = max f(xs)",
        combine: Combine::Reduce(ReduceOp::Max),
        splittable: true,
        divides_compute: true,
        output: OutputLaw::Partial(ReduceOp::Max),
        finish: Finish::AllReduceOutput(ReduceOp::Max),
    },
    Law {
        kind: IndexKind::Stat,
        statement: "f(concat_d xs) = g(concat_d xs, combine(stats(xs)))",
        combine: Combine::Statistics,
        splittable: true,
        divides_compute: true,
        output: OutputLaw::ShardOrReplicate,
        finish: Finish::AllReduceStatistics,
    },
    Law {
        kind: IndexKind::Window,
        statement: "f(concat_d xs) = concat_d f(halo(xs))",
        combine: Combine::ConcatWithHalo,
        splittable: true,
        divides_compute: true,
        output: OutputLaw::Shard,
        finish: Finish::HaloExchange,
    },
    Law {
        kind: IndexKind::Opaque,
        statement: "none: f is not a homomorphism along d",
        combine: Combine::None,
        splittable: false,
        divides_compute: false,
        output: OutputLaw::Shard,
        finish: Finish::Nothing,
    },
];

/// Collective operations, with their per-rank wire bytes under ring conventions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectiveKind {
    /// All-reduce: `2(n−1)/n · S`.
    AllReduce,
    /// Reduce-scatter: `(n−1)/n · S` (S = the input).
    ReduceScatter,
    /// All-gather: `(n−1)/n · S` (S = the gathered result).
    AllGather,
    /// All-to-all: `(n−1)/n · S`.
    AllToAll,
    /// Halo exchange with neighbours: `S` = the halo each rank receives.
    HaloExchange,
    /// Broadcast: `S`.
    Broadcast,
    /// Point-to-point send/receive: `S`.
    SendRecv,
}

impl CollectiveKind {
    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllReduce => "all-reduce",
            CollectiveKind::ReduceScatter => "reduce-scatter",
            CollectiveKind::AllGather => "all-gather",
            CollectiveKind::AllToAll => "all-to-all",
            CollectiveKind::HaloExchange => "halo-exchange",
            CollectiveKind::Broadcast => "broadcast",
            CollectiveKind::SendRecv => "send-recv",
        }
    }

    /// Bytes each rank sends (and receives) on the wire for a tensor of `size` bytes over `n`
    /// ranks (nccl-tests doc/PERFORMANCE.md bus-bandwidth factors).
    pub fn wire_bytes(self, size: &Poly, n: &Poly) -> Poly {
        let one = Poly::one();
        // (n-1)/n = 1 - 1/n; n is a single symbol or constant, so the division is exact.
        let frac = &one
            - &one
                .checked_div(n)
                .expect("axis size is a non-zero monomial");
        match self {
            CollectiveKind::AllReduce => Poly::int(2) * frac * size,
            CollectiveKind::ReduceScatter
            | CollectiveKind::AllGather
            | CollectiveKind::AllToAll => frac * size,
            CollectiveKind::HaloExchange | CollectiveKind::Broadcast | CollectiveKind::SendRecv => {
                size.clone()
            }
        }
    }
}

impl fmt::Display for CollectiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_are_in_kind_order() {
        for kind in IndexKind::ALL {
            assert_eq!(kind.law().kind, kind);
            assert_eq!(IndexKind::from_name(kind.name()), Some(kind));
        }
    }

    #[test]
    fn ring_wire_bytes() {
        // nccl-tests doc/PERFORMANCE.md: all-reduce bus factor 2(n-1)/n, all-gather (n-1)/n.
        let s = Poly::symbol("S");
        let n = Poly::int(4);
        assert_eq!(
            CollectiveKind::AllReduce.wire_bytes(&s, &n),
            Poly::parse("3/2*S").unwrap()
        );
        assert_eq!(
            CollectiveKind::AllGather.wire_bytes(&s, &n),
            Poly::parse("3/4*S").unwrap()
        );
    }
}
