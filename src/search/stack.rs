//! Which software stack a ranked row assumes, and how far `symshard validate` finds that
//! stack's predictions from published step times: a lead smaller than that is a tie, not a
//! ranking.

pub use crate::calib::stack::Stack;
use serde::Serialize;

/// Why a row's place behind the first is not significant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tie {
    /// How much slower than the first row, as a fraction of its seconds.
    pub behind: f64,
    /// The stack whose validation error the lead falls within (the larger of the two rows').
    pub stack: Stack,
    /// That stack's mean |error|, as a fraction.
    pub error: f64,
    /// Whether the rows were priced on their stacks' profiles (the error is then the profile's
    /// test rows', as `validate --stack auto` measures it).
    pub per_row: bool,
}

impl std::fmt::Display for Tie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} % behind #1, within the {:.1} % mean |error| {} for {}",
            self.behind * 100.0,
            self.error * 100.0,
            if self.per_row {
                "validate --stack auto measures"
            } else {
                "validate measures"
            },
            self.stack.label()
        )
    }
}

/// Whether a row of `seconds` on `stack` ties with the first row (`first_seconds` on
/// `first_stack`): it is behind by less than the larger mean |error| of the two stacks, as the
/// rows were priced (`per_row`: each on its stack's profile; [`Stack::error_as_priced`]).
pub fn tie(
    first_seconds: f64,
    first_stack: Stack,
    seconds: f64,
    stack: Stack,
    per_row: bool,
) -> Option<Tie> {
    let (first_error, own) = (
        first_stack.error_as_priced(per_row),
        stack.error_as_priced(per_row),
    );
    let (worse, error) = if own > first_error {
        (stack, own)
    } else {
        (first_stack, first_error)
    };
    let behind = (seconds - first_seconds) / first_seconds;
    (first_seconds > 0.0 && behind < error).then_some(Tie {
        behind: behind.max(0.0),
        stack: worse,
        error,
        per_row,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lead_inside_the_larger_error_is_a_tie() {
        // 0.5 % behind: inside FSDP's 13.9 %, and inside Megatron's 4.2 %.
        let t = tie(18.2, Stack::PytorchFsdp, 18.29, Stack::Megatron, false).unwrap();
        assert_eq!(t.stack, Stack::PytorchFsdp);
        assert!(tie(10.0, Stack::Megatron, 10.3, Stack::Megatron, false).is_some());
        // 6 % behind two Megatron rows is outside 4.2 %, inside DDP's 8.8 %.
        assert!(tie(10.0, Stack::Megatron, 10.6, Stack::Megatron, false).is_none());
        assert!(tie(10.0, Stack::Megatron, 10.6, Stack::PytorchDdp, false).is_some());
    }
}
