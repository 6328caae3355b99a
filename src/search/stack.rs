//! Which software stack a ranked row assumes, and how far `symshard validate` finds that
//! stack's predictions from published step times: a lead smaller than that is a tie, not a
//! ranking.

use crate::strategy::Knobs;
use serde::Serialize;

/// A software stack, named as the validation files' `stack:` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Stack {
    /// Megatron-LM or Megatron-Core (NeMo): tensor, pipeline, context or expert parallelism.
    #[serde(rename = "megatron")]
    Megatron,
    /// PyTorch's DistributedDataParallel: data parallelism alone, gradients not sharded.
    #[serde(rename = "pytorch-ddp")]
    PytorchDdp,
    /// PyTorch's FSDP (FSDP1, FSDP2, torchtitan): gradients and parameters sharded.
    #[serde(rename = "pytorch-fsdp")]
    PytorchFsdp,
}

impl Stack {
    /// The stack a row's knobs are most commonly run on: sharded gradients (ZeRO 2 or 3) as
    /// PyTorch's FSDP, else any model parallelism as Megatron, else plain data parallelism as
    /// DDP. An assumption, printed with every row, not a fact about the row.
    pub fn of(k: &Knobs) -> Stack {
        if k.zero >= 2 {
            Stack::PytorchFsdp
        } else if k.tp > 1 || k.pp > 1 || k.cp > 1 || k.ep > 1 {
            Stack::Megatron
        } else {
            Stack::PytorchDdp
        }
    }

    /// The label validation files use.
    pub fn label(self) -> &'static str {
        match self {
            Stack::Megatron => "megatron",
            Stack::PytorchDdp => "pytorch-ddp",
            Stack::PytorchFsdp => "pytorch-fsdp",
        }
    }

    /// Mean |error| of the shipped validation rows run on this stack, in tenths of a percent,
    /// as `symshard validate` prints it in its "by stack" table (the rows independent of their
    /// machine's calibration numbers) (tests/stack_ties.rs recomputes
    /// it from `validation/`, so it cannot go stale). Those rows are in sample: the error on
    /// runs the model has not seen is larger, so this is the least a lead must exceed.
    pub fn mean_abs_error_permille(self) -> u32 {
        match self {
            Stack::Megatron => 42,
            Stack::PytorchDdp => 88,
            Stack::PytorchFsdp => 139,
        }
    }

    /// [`Stack::mean_abs_error_permille`] as a fraction.
    pub fn mean_abs_error(self) -> f64 {
        f64::from(self.mean_abs_error_permille()) / 1000.0
    }

    /// Every stack.
    pub const ALL: [Stack; 3] = [Stack::Megatron, Stack::PytorchDdp, Stack::PytorchFsdp];
}

/// Why a row's place behind the first is not significant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tie {
    /// How much slower than the first row, as a fraction of its seconds.
    pub behind: f64,
    /// The stack whose validation error the lead falls within (the larger of the two rows').
    pub stack: Stack,
    /// That stack's mean |error|, as a fraction.
    pub error: f64,
}

impl std::fmt::Display for Tie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} % behind #1, within the {:.1} % mean |error| validate measures for {}",
            self.behind * 100.0,
            self.error * 100.0,
            self.stack.label()
        )
    }
}

/// Whether a row of `seconds` on `stack` ties with the first row (`first_seconds` on
/// `first_stack`): it is behind by less than the larger mean |error| of the two stacks.
pub fn tie(first_seconds: f64, first_stack: Stack, seconds: f64, stack: Stack) -> Option<Tie> {
    let worse = if stack.mean_abs_error_permille() > first_stack.mean_abs_error_permille() {
        stack
    } else {
        first_stack
    };
    let behind = (seconds - first_seconds) / first_seconds;
    (first_seconds > 0.0 && behind < worse.mean_abs_error()).then_some(Tie {
        behind: behind.max(0.0),
        stack: worse,
        error: worse.mean_abs_error(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lead_inside_the_larger_error_is_a_tie() {
        // 0.5 % behind: inside FSDP's 13.9 %, and inside Megatron's 4.2 %.
        let t = tie(18.2, Stack::PytorchFsdp, 18.29, Stack::Megatron).unwrap();
        assert_eq!(t.stack, Stack::PytorchFsdp);
        assert!(tie(10.0, Stack::Megatron, 10.3, Stack::Megatron).is_some());
        // 6 % behind two Megatron rows is outside 4.2 %, inside DDP's 8.8 %.
        assert!(tie(10.0, Stack::Megatron, 10.6, Stack::Megatron).is_none());
        assert!(tie(10.0, Stack::Megatron, 10.6, Stack::PytorchDdp).is_some());
    }
}
