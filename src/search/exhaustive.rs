//! Exhaustive enumeration: every combination of every operator's choices, each priced by
//! [`Problem::cost_of`]. Exponential; the test oracle for tiny graphs.

use super::error::SearchError;
use super::problem::{Priced, Problem};
use super::sp::{price_all, Solution};

/// The most combinations [`exhaustive`] will enumerate.
pub const LIMIT: u128 = 5_000_000;

/// The exact optimum by enumeration, or an error when there are more than [`LIMIT`]
/// combinations. Ties keep the first combination in enumeration order.
pub fn exhaustive(p: &Problem) -> Result<Solution, SearchError> {
    let priced = price_all(p)?;
    let count = priced
        .iter()
        .try_fold(1u128, |acc, c| acc.checked_mul(c.len() as u128))
        .unwrap_or(u128::MAX);
    if count > LIMIT {
        return Err(SearchError::TooManyCombinations {
            count,
            limit: LIMIT,
        });
    }
    if count == 0 {
        return Err(SearchError::NoChoice(p.name.clone()));
    }
    let n = priced.len();
    let mut pick = vec![0usize; n];
    let mut best: Option<Solution> = None;
    loop {
        let refs: Vec<&Priced> = (0..n).map(|v| &priced[v][pick[v]].1).collect();
        // A broken cycle is not a layout.
        if let Ok(cost) = p.cost_of(&refs) {
            if best.as_ref().is_none_or(|b| cost < b.cost) {
                best = Some(Solution {
                    cost,
                    assignment: (0..n).map(|v| priced[v][pick[v]].0.clone()).collect(),
                });
            }
        }
        // Next combination (odometer).
        let mut v = 0;
        loop {
            if v == n {
                return best.ok_or_else(|| SearchError::NoLayout(p.name.clone()));
            }
            pick[v] += 1;
            if pick[v] < priced[v].len() {
                break;
            }
            pick[v] = 0;
            v += 1;
        }
    }
}
