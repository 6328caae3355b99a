//! A model's cost without parallelism: parameters, FLOPs forward and backward (matmul-like and
//! other), and bytes of activations saved for backward — exact formulas in the model's symbols.

use super::graph::Model;
use crate::rules::FlopClass;
use crate::sym::Poly;
use serde::Serialize;

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

/// The per-operator costs (each block's operators once, with the block's repeat count).
pub fn op_costs(model: &Model) -> Vec<OpCost> {
    let mut out = Vec::new();
    for block in &model.blocks {
        for op in block.ops() {
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
                activations: op.model_formula(&op.rule.saved_bytes(model.dtype_bytes)),
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
