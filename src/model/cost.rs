//! A model's cost without parallelism: parameters, FLOPs forward and backward (matmul-like and
//! other), and bytes of activations saved for backward — exact formulas in the model's symbols.

use super::graph::{Model, OpNode};
use crate::rules::rule::tensor_bytes;
use crate::rules::FlopClass;
use crate::sym::Poly;
use serde::Serialize;
use std::collections::BTreeSet;

/// FLOPs of one pass, split as PyTorch's FLOP counter would see them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FlopSplit {
    /// Matmul, batched matmul, convolution.
    pub matmul: Poly,
    /// Elementwise, normalisation, softmax, everything else.
    pub other: Poly,
}

impl FlopSplit {
    /// Both together.
    pub fn total(&self) -> Poly {
        &self.matmul + &self.other
    }

    fn add(&mut self, other: &FlopSplit, times: &Poly) {
        self.matmul += times * &other.matmul;
        self.other += times * &other.other;
    }
}

/// What a whole model costs on one device, as formulas.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ModelCost {
    /// Trained parameters (elements; tied parameters once).
    pub params: Poly,
    /// Forward FLOPs.
    pub forward: FlopSplit,
    /// Backward FLOPs.
    pub backward: FlopSplit,
    /// Bytes of activations kept for the backward pass.
    pub activations: Poly,
}

/// The cost of one operator application, in the model's symbols.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpCost {
    /// The operator.
    pub name: String,
    /// Its rule.
    pub rule: String,
    /// Copies (the block's repeat count).
    pub repeat: Poly,
    /// Parameters it owns (elements).
    pub params: Poly,
    /// Forward FLOPs of one copy.
    pub forward: FlopSplit,
    /// Backward FLOPs of one copy.
    pub backward: FlopSplit,
    /// FLOP class.
    pub class: FlopClass,
    /// Saved bytes of one copy.
    pub activations: Poly,
}

fn split(op: &super::graph::OpNode, (mm, other): (Poly, Poly)) -> FlopSplit {
    FlopSplit {
        matmul: op.model_formula(&mm),
        other: op.model_formula(&other),
    }
}

/// The per-operator costs (each block's operators once, with the block's repeat count). A tensor
/// several operators of a block keep for the backward (an input read by several, an output its
/// producer keeps and a reader keeps again) is counted once, with the first that keeps it, as
/// autograd keeps one reference.
pub fn op_costs(model: &Model) -> Vec<OpCost> {
    let mut out = Vec::new();
    for (bi, block) in model.blocks.iter().enumerate() {
        let mut kept: BTreeSet<String> = BTreeSet::new();
        for &n in &block.order {
            let op = &block.graph[n];
            let mut saved = Poly::zero();
            for t in &op.rule.saved {
                let key = if t.name == op.rule.output.name {
                    Some(OpNode::output_key(bi, n))
                } else {
                    op.rule
                        .inputs
                        .iter()
                        .position(|i| i.name == t.name)
                        .and_then(|k| op.input_key(k))
                };
                if key.is_some_and(|k| !kept.insert(k)) {
                    continue;
                }
                saved += &op.model_formula(&tensor_bytes(t, model.dtype_bytes));
            }
            let params: Poly = (0..op.rule.inputs.len())
                .filter(|&k| op.owns_param(k))
                .map(|k| op.elements(&op.rule.inputs[k]))
                .sum();
            out.push(OpCost {
                name: op.name.clone(),
                rule: op.rule.name.clone(),
                repeat: block.repeat.clone(),
                params,
                forward: split(op, op.rule.forward_flops_split()),
                backward: split(op, op.rule.backward_flops_split()),
                class: op.rule.class,
                activations: saved,
            });
        }
    }
    out
}

/// The whole model's cost: each block analysed once and multiplied by its repeat count.
pub fn model_cost(model: &Model) -> ModelCost {
    let mut c = ModelCost::default();
    for op in op_costs(model) {
        let r = &op.repeat;
        c.params += r * &op.params;
        c.forward.add(&op.forward, r);
        c.backward.add(&op.backward, r);
        c.activations += r * &op.activations;
    }
    c
}
