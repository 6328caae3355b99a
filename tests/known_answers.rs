//! Known-answer tests of derived split tables, each against a published source.

use symshard::rules::law::{CollectiveKind, ReduceOp};
use symshard::rules::split::{derive, AxisSplit, Placement};
use symshard::rules::RuleSet;
use symshard::sym::Poly;

fn split(index: &str) -> Vec<AxisSplit> {
    vec![AxisSplit {
        index: index.into(),
        axis: "a".into(),
        size: Poly::symbol("p"),
    }]
}

fn poly(s: &str) -> Poly {
    Poly::parse(s).unwrap()
}

fn rules() -> RuleSet {
    RuleSet::embedded().unwrap()
}

/// Megatron-LM (Shoeybi et al. 2019, §3, Fig. 3a): a column-parallel linear needs no forward
/// communication (operator f is the identity) and an all-reduce of the input gradient in the
/// backward pass (f's backward is an all-reduce).
#[test]
fn column_parallel_linear() {
    let set = rules();
    let rule = set.get("matmul").unwrap();
    let e = derive(rule, &split("n"), 2).unwrap();
    assert!(e.forward.collectives.is_empty());
    assert_eq!(e.forward.compute, poly("2*b*k*n/p"));
    assert_eq!(e.backward.collectives.len(), 1);
    let c = &e.backward.collectives[0];
    assert_eq!(c.kind, CollectiveKind::AllReduce);
    assert_eq!(c.tensor, "dx");
    // Ring all-reduce: 2(p−1)/p × S with S = b·k elements of 2 bytes (nccl-tests PERFORMANCE.md).
    assert_eq!(c.wire_bytes, poly("2*(p-1)/p*2*b*k"));
    // The weight gradient stays sharded: no data moves for it.
    let dw = e
        .backward
        .outputs
        .iter()
        .find(|o| o.tensor == "dw")
        .unwrap();
    assert_eq!(dw.placements, vec![Placement::Shard(1)]);
}

/// Megatron-LM (Shoeybi et al. 2019, §3, Fig. 3a): a row-parallel linear all-reduces its output
/// in the forward pass (operator g) and needs nothing in the backward pass.
#[test]
fn row_parallel_linear() {
    let set = rules();
    let rule = set.get("linear").unwrap();
    let e = derive(rule, &split("k"), 2).unwrap();
    assert_eq!(
        e.forward.outputs[0].placements,
        vec![Placement::Partial(ReduceOp::Sum)]
    );
    assert_eq!(e.forward.collectives.len(), 1);
    let c = &e.forward.collectives[0];
    assert_eq!(c.kind, CollectiveKind::AllReduce);
    assert_eq!(c.wire_bytes, poly("2*(p-1)/p*2*b*n"));
    // The bias is added once, after (or on one rank before) the reduction: not divided by p.
    assert_eq!(e.forward.compute, poly("2*b*k*n/p + b*n"));
    assert!(
        e.backward.collectives.is_empty(),
        "{:?}",
        e.backward.collectives
    );
}

/// Data parallelism is the batch index split: the weight gradient sums over the batch, so it is
/// all-reduced with 2(p−1)/p × weight bytes on the wire per rank (nccl-tests doc/PERFORMANCE.md, bus bandwidth of a ring;
/// PyTorch DDP, Li et al. VLDB 2020).
#[test]
fn data_parallel_linear() {
    let set = rules();
    let rule = set.get("linear").unwrap();
    let e = derive(rule, &split("b"), 2).unwrap();
    assert!(e.forward.collectives.is_empty());
    let dw = e
        .backward
        .collectives
        .iter()
        .find(|c| c.tensor == "dw")
        .unwrap();
    assert_eq!(dw.kind, CollectiveKind::AllReduce);
    assert_eq!(dw.wire_bytes, poly("2*(p-1)/p*(2*k*n)"));
    let db = e
        .backward
        .collectives
        .iter()
        .find(|c| c.tensor == "dbias")
        .unwrap();
    assert_eq!(db.wire_bytes, poly("2*(p-1)/p*(2*n)"));
    assert_eq!(e.backward.collectives.len(), 2);
    assert_eq!(e.backward.compute, poly("(4*b*k*n + b*n)/p"));
}

/// Softmax split along its normalised index: only the statistics cross devices — a max and a sum
/// per row in the forward pass (as in Megatron-LM's vocab-parallel cross-entropy), each an fp32
/// all-reduce of `b` values; the output stays sharded.
#[test]
fn softmax_along_normalised_index() {
    let set = rules();
    let rule = set.get("softmax").unwrap();
    let e = derive(rule, &split("n"), 2).unwrap();
    assert_eq!(e.forward.outputs[0].placements, vec![Placement::Shard(1)]);
    assert_eq!(e.forward.collectives.len(), 1);
    let c = &e.forward.collectives[0];
    assert_eq!(c.count, 2);
    assert_eq!(c.size, poly("4*b"));
    assert_eq!(c.wire_bytes, poly("2*2*(p-1)/p*4*b"));
    // Backward: one statistic (Σ dy·y) per row.
    assert_eq!(e.backward.collectives.len(), 1);
    assert_eq!(e.backward.collectives[0].count, 1);
    // Never the whole b·n tensor.
    assert!(!e.forward.wire_bytes().symbols().contains("n"));
}

/// Splitting the batch of a softmax needs nothing at all.
#[test]
fn softmax_along_rows() {
    let set = rules();
    let e = derive(set.get("softmax").unwrap(), &split("b"), 2).unwrap();
    assert!(e.forward.collectives.is_empty() && e.backward.collectives.is_empty());
    assert_eq!(e.forward.compute, poly("5*b*n/p"));
}

/// Vocab-parallel embedding (Megatron-LM): each device owns a slice of the vocabulary; the
/// lookup leaves partial sums that are all-reduced.
#[test]
fn vocab_parallel_embedding() {
    let set = rules();
    let e = derive(set.get("embedding").unwrap(), &split("v"), 2).unwrap();
    assert_eq!(e.forward.collectives.len(), 1);
    assert_eq!(e.forward.collectives[0].wire_bytes, poly("2*(p-1)/p*2*t*h"));
}

/// Tensor and data parallelism together over two axes: the column-parallel weight gradient is
/// all-reduced over the data axis only, with the tensor-parallel shard of the weight.
#[test]
fn two_axis_split() {
    let set = rules();
    let splits = vec![
        AxisSplit {
            index: "b".into(),
            axis: "dp".into(),
            size: Poly::symbol("d"),
        },
        AxisSplit {
            index: "n".into(),
            axis: "tp".into(),
            size: Poly::symbol("t"),
        },
    ];
    let e = derive(set.get("matmul").unwrap(), &splits, 2).unwrap();
    assert_eq!(e.forward.compute, poly("2*b*k*n/(d*t)"));
    let dw = e
        .backward
        .collectives
        .iter()
        .find(|c| c.tensor == "dw")
        .unwrap();
    assert_eq!(dw.axis, "dp");
    assert_eq!(dw.wire_bytes, poly("2*(d-1)/d*2*k*n/t"));
    let dx = e
        .backward
        .collectives
        .iter()
        .find(|c| c.tensor == "dx")
        .unwrap();
    assert_eq!(dx.axis, "tp");
    assert_eq!(dx.wire_bytes, poly("2*(t-1)/t*2*b*k/d"));
}

/// Opaque indices have no law and are refused.
#[test]
fn opaque_index_is_refused() {
    let set = rules();
    assert!(derive(set.get("rope").unwrap(), &split("d"), 2).is_err());
}
