//! Why a search fails: a steering option that cannot be read, a problem that cannot be built or
//! solved, a comparison that cannot be made. Every variant carries the offending item; the
//! command line shows the message unchanged.

use crate::strategy::StrategyError;
use crate::sym::{ParseError, SymError};

/// Why a `--fix`, `--max`, `--memory` or `--headroom` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SteerError {
    /// A list with an empty item.
    #[error("{flag} `{list}`: an empty item (expected KNOB=VALUE,…)")]
    EmptyItem {
        /// The option.
        flag: String,
        /// The list given.
        list: String,
    },
    /// An item without `=`.
    #[error("{flag} `{item}`: expected KNOB=VALUE")]
    NotAnItem {
        /// The option.
        flag: String,
        /// The item.
        item: String,
    },
    /// A knob the search does not know.
    #[error("{flag}: unknown knob `{name}` (known: {known})")]
    UnknownKnob {
        /// The option.
        flag: String,
        /// The knob named.
        name: String,
        /// The knobs known.
        known: String,
    },
    /// A value the knob does not take.
    #[error("{flag} `{name}={value}`: {why}")]
    BadValue {
        /// The option.
        flag: String,
        /// The knob.
        name: String,
        /// The value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// A fixed value above the maximum given for the same knob.
    #[error("{fix} {name}={fixed} exceeds {max_option} {name}={max}")]
    FixAboveMax {
        /// The option that fixes, as its caller names it (`--fix`, Python's `fix`).
        fix: &'static str,
        /// The option that caps, as its caller names it (`--max`, Python's `max`).
        max_option: &'static str,
        /// The knob.
        name: &'static str,
        /// Its fixed value.
        fixed: u64,
        /// Its maximum.
        max: u64,
    },
    /// A fixed ZeRO stage beyond 3.
    #[error("{fix} zero={zero}: ZeRO stages are 0, 1, 2 and 3")]
    ZeroStage {
        /// The option that fixes, as its caller names it.
        fix: &'static str,
        /// The stage given.
        zero: u64,
    },
    /// Interleaving fixed with fewer than two chunks.
    #[error(
        "{fix} chunks={chunks} with schedule=interleaved-1f1b: interleaving needs at least 2 chunks"
    )]
    InterleavedChunks {
        /// The option that fixes, as its caller names it.
        fix: &'static str,
        /// The chunks given.
        chunks: u64,
    },
    /// Chunks fixed without interleaving.
    #[error("{fix} chunks={chunks} needs schedule=interleaved-1f1b, not {schedule}")]
    ChunksWithoutInterleaving {
        /// The option that fixes, as its caller names it.
        fix: &'static str,
        /// The chunks fixed.
        chunks: u64,
        /// The schedule fixed.
        schedule: String,
    },
    /// Sequence parallelism fixed on with tp fixed to 1.
    #[error("{fix} sp=on needs tp > 1")]
    SequenceParallelOneRank {
        /// The option that fixes, as its caller names it.
        fix: &'static str,
    },
    /// A fixed degree that does not divide the devices.
    #[error("{fix} {name}={degree}: {degree} does not divide the {devices} devices")]
    DegreeDevices {
        /// The option that fixes, as its caller names it.
        fix: &'static str,
        /// The knob.
        name: &'static str,
        /// Its fixed degree.
        degree: u64,
        /// The devices.
        devices: u64,
    },
    /// Fixed degrees whose product does not divide the devices.
    #[error("{fix} {fixed}: dp × tp × pp × cp = {product} does not divide the {devices} devices")]
    ProductDevices {
        /// The option that fixes, as its caller names it.
        fix: &'static str,
        /// The fixed degrees, `dp=4,tp=8`.
        fixed: String,
        /// Their product.
        product: u64,
        /// The devices.
        devices: u64,
    },
    /// All four degrees fixed, their product not the devices.
    #[error("{fix} {fixed}: dp × tp × pp × cp = {product}, not the {devices} devices")]
    ProductNotDevices {
        /// The option that fixes, as its caller names it.
        fix: &'static str,
        /// The fixed degrees.
        fixed: String,
        /// Their product.
        product: u64,
        /// The devices.
        devices: u64,
    },
    /// A memory size that cannot be read.
    #[error(transparent)]
    Memory(#[from] crate::sym::size::MemoryError),
    /// A headroom that is not a percentage.
    #[error("{option} `{text}`: expected a percentage such as 10%")]
    HeadroomPercent {
        /// The option as its caller names it (`--headroom`, Python's `headroom`).
        option: &'static str,
        /// The headroom given.
        text: String,
    },
    /// A headroom of 100 % or more.
    #[error("{option} `{text}` leaves no memory: below 100% please")]
    HeadroomAll {
        /// The option as its caller names it.
        option: &'static str,
        /// The headroom given.
        text: String,
    },
    /// A headroom below zero (a share or an amount).
    #[error("{option} `{text}` is negative: the memory kept free is 0 or more")]
    HeadroomNegative {
        /// The option as its caller names it.
        option: &'static str,
        /// The headroom given.
        text: String,
    },
    /// A headroom size that cannot be read.
    #[error("{option}: {error}")]
    HeadroomMemory {
        /// The option as its caller names it.
        option: &'static str,
        /// Why the size cannot be read.
        error: Box<SteerError>,
    },
    /// A headroom size of the whole device memory or more.
    #[error("{option} `{text}` is all of the {capacity} device memory")]
    HeadroomCapacity {
        /// The option as its caller names it.
        option: &'static str,
        /// The headroom given.
        text: String,
        /// The device memory, as tables print it (`80.0 GB`).
        capacity: String,
    },
    /// A fixed knob outside the layouts the named stack profile runs.
    #[error("{item}: the stack profile `{profile}` (--stack) does not run it; it runs {supports} (its `supports:`). Drop that setting, or rank on another profile (--stack auto, or none)")]
    Unsupported {
        /// The fixed item as the user gave it, `--fix zero=3` or `--schedule zb-h1`.
        item: String,
        /// The profile.
        profile: String,
        /// What it runs.
        supports: String,
    },
}

/// Why a per-operator search, a ranking or a comparison fails.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SearchError {
    /// A steering option refused.
    #[error(transparent)]
    Steer(#[from] SteerError),
    /// A formula could not be evaluated (an unbound symbol, a division by zero).
    #[error(transparent)]
    Sym(#[from] SymError),
    /// A formula could not be parsed.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A strategy refused.
    #[error(transparent)]
    Strategy(#[from] StrategyError),
    /// An index extent of an operator could not be bound.
    #[error("extent of `{index}`: {why}")]
    Extent {
        /// The index.
        index: String,
        /// Why.
        why: SymError,
    },
    /// An operator given a different number of inputs than its rule has.
    #[error("`{op}`: {given} inputs given, rule `{rule}` has {expected}")]
    InputCount {
        /// The operator.
        op: String,
        /// Inputs given.
        given: usize,
        /// The rule.
        rule: String,
        /// Inputs of the rule.
        expected: usize,
    },
    /// An operator input from an operator not in the problem.
    #[error("`{op}`: input `{input}` from unknown op {producer}")]
    UnknownProducer {
        /// The operator.
        op: String,
        /// Its input.
        input: String,
        /// The producer's position.
        producer: usize,
    },
    /// A source pinned with a number of labels other than the axes.
    #[error("source `{name}`: {labels} labels")]
    SourceLabels {
        /// The source.
        name: String,
        /// Labels given.
        labels: usize,
    },
    /// A source pinned to a placement its view does not have.
    #[error("source `{name}`: no placement `{label}` in its view")]
    SourcePlacement {
        /// The source.
        name: String,
        /// The placement label.
        label: String,
    },
    /// A choice an operator does not allow.
    #[error("`{op}`: invalid choice {choice}")]
    InvalidChoice {
        /// The operator.
        op: String,
        /// The choice, per axis.
        choice: String,
    },
    /// The split of an operator could not be derived from its rule.
    #[error("`{op}`: {why}")]
    Derive {
        /// The operator.
        op: String,
        /// Why.
        why: String,
    },
    /// A collective on an axis the problem does not have.
    #[error("unknown axis `{0}`")]
    UnknownAxis(String),
    /// An assignment of another length than the operators.
    #[error("{choices} choices for {ops} operators")]
    ChoiceCount {
        /// Choices given.
        choices: usize,
        /// Operators.
        ops: usize,
    },
    /// A repeated block whose input and output are placed differently.
    #[error("the block input and output placements differ")]
    BoundaryDiffers,
    /// A block index beyond the model's blocks.
    #[error("model `{model}` has no block {block}")]
    NoBlock {
        /// The model.
        model: String,
        /// The block index.
        block: usize,
    },
    /// A model without a repeated block.
    #[error("model `{0}` has no repeated layer")]
    NoRepeatedLayer(String),
    /// A model without a layer block.
    #[error("`{0}` has no layer block")]
    NoLayerBlock(String),
    /// An operator reading one placed after it.
    #[error("`{0}` reads an operator not yet placed")]
    NotYetPlaced(String),
    /// A rule name the shipped rules do not have.
    #[error("no shipped rule `{0}`")]
    NoRule(String),
    /// Tables of different boundaries composed in parallel.
    #[error("parallel tables need the same boundary placements")]
    TableBoundaries,
    /// A table boundary beyond the operators.
    #[error("table boundary out of range")]
    TableBoundary,
    /// A number beyond the exact solver's integers.
    #[error("{0} too large for the exact solver")]
    TooLarge(&'static str),
    /// Operators whose order is not a DAG.
    #[error("the operators form a cycle")]
    Cycle,
    /// An operator with more distinct conversions than the solver keeps.
    #[error("`{op}` has too many distinct conversions for the exact solver (axes: {axes})")]
    TooManyConversions {
        /// The operator.
        op: String,
        /// The mesh axes.
        axes: usize,
    },
    /// A pinned position beyond the operators.
    #[error("pinned {0} out of range")]
    PinOutOfRange(&'static str),
    /// A block input placed after its output.
    #[error("the block input is placed after the block output")]
    InputAfterOutput,
    /// The exact search ran out of states.
    #[error("the exact search of `{problem}` needs more than {states} states at `{op}`")]
    TooManyStates {
        /// The problem.
        problem: String,
        /// The limit.
        states: usize,
        /// The operator where it was hit.
        op: String,
    },
    /// A problem too large for its search's work budget even with a beam of one state.
    #[error("the search of `{problem}` was skipped: its {ops} operators, with up to {choices} choices each and {live} tensors live at once, exceed the search's budget of {budget} state entries even keeping one state per operator")]
    OverBudget {
        /// The problem.
        problem: String,
        /// Its operators.
        ops: usize,
        /// The most choices of one operator.
        choices: usize,
        /// The most tensors live at once in the search's order.
        live: usize,
        /// The budget.
        budget: usize,
    },
    /// A problem whose operators have more choices than a search may price.
    #[error("`{problem}` over {axes} axes has more than {limit} operator choices to price (the search's memory budget; passed at `{op}`)")]
    TooManyChoices {
        /// The problem.
        problem: String,
        /// Its mesh axes.
        axes: usize,
        /// The operator at which the count passed the limit.
        op: String,
        /// The limit.
        limit: usize,
    },
    /// A tensor-parallel degree that the family's annotated layout cannot use.
    #[error(transparent)]
    AnnotatedDegree(Box<AnnotatedDegree>),
    /// A tensor-parallel degree that divides no feature dimension of a block.
    #[error("--tp {tp} divides no feature dimension of block `{block}` (hidden, heads, MLP, vocabulary): the tensor-parallel axis would have nothing to cut")]
    NothingToCut {
        /// The degree.
        tp: u64,
        /// The block.
        block: String,
    },
    /// No valid layout.
    #[error("`{0}` has no valid layout")]
    NoLayout(String),
    /// No valid layout at a tensor-parallel degree.
    #[error("`{problem}` has no valid layout at tp = {tp}")]
    NoLayoutAt {
        /// The problem.
        problem: String,
        /// The degree.
        tp: u64,
    },
    /// An operator without any valid choice.
    #[error("`{0}` has an operator without a valid choice")]
    NoChoice(String),
    /// An operator without a valid cut on a D-Rec axis.
    #[error("D-Rec: `{op}` has no valid cut on axis {axis}")]
    NoCut {
        /// The operator.
        op: String,
        /// The axis.
        axis: usize,
    },
    /// Too many combinations to enumerate.
    #[error("{count} combinations: too many to enumerate (limit {limit})")]
    TooManyCombinations {
        /// Combinations.
        count: u128,
        /// The limit.
        limit: u128,
    },
    /// An auto layout asked at one tensor-parallel rank.
    #[error("an auto layout needs a tensor-parallel degree of at least 2")]
    AutoNeedsTp,
    /// A layout comparison asked at one tensor-parallel rank.
    #[error("--tp must be at least 2 to compare layouts")]
    CompareNeedsTp,
    /// A tensor-parallel degree of 0.
    #[error("tp must be at least 1")]
    TpZero,
    /// A starting layout that is not valid.
    #[error("the starting layout is invalid")]
    InvalidStart,
    /// A device count of 0.
    #[error("--devices must be at least 1")]
    NoDevices,
    /// A device count beyond any machine.
    #[error("--devices {devices} is absurd (more than {most})")]
    AbsurdDevices {
        /// The devices asked for.
        devices: u64,
        /// The most allowed.
        most: u64,
    },
    /// No strategy satisfies the steering.
    #[error("no strategy of {devices} devices satisfies {steer}{}", if .rejected.is_empty() { String::new() } else { format!(" (rejected: {})", .rejected) })]
    NoStrategy {
        /// The devices.
        devices: u64,
        /// The steering, as given.
        steer: String,
        /// The commonest rejections, `N× why; …`.
        rejected: String,
    },
    /// A comparison over no values.
    #[error("no values to examine")]
    NoValues,
    /// Too many evaluations for a crossover.
    #[error("more than {limit} evaluations: the costs change formula too often{} — narrow --from/--to or give a --step at which both strategies are valid", .invalid.as_ref().map(|b| format!(", or are invalid at values such as {b}")).unwrap_or_default())]
    TooManyEvaluations {
        /// The limit.
        limit: usize,
        /// A value at which a strategy is invalid, and why.
        invalid: Option<String>,
    },
    /// Two strategies that never both run at the first values.
    #[error("the strategies cannot both run at any of the first {scan} values ({why})")]
    NeverBothRun {
        /// Values examined.
        scan: u64,
        /// The first value at which one cannot, and why.
        why: String,
    },
    /// Two strategies that both run only at every p-th value.
    #[error(transparent)]
    Periodic(Box<Periodic>),
    /// A layout override that the model's operators do not allow.
    #[error("`{op}`: {why}")]
    Override {
        /// The operator.
        op: String,
        /// Why.
        why: String,
    },
    /// A shipped model or rule set that did not load.
    #[error("{0}")]
    Shipped(String),
}

/// A tensor-parallel degree that does not divide what the family's annotated layout cuts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("--tp {tp} does not divide {what}, which the annotated layout of block `{block}` cuts at `{op}` (index `{index}`){}; degrees it can use: {usable}", if *.others > 0 { format!(" and at {} other operators", .others) } else { String::new() })]
pub struct AnnotatedDegree {
    /// The degree.
    pub tp: u64,
    /// The block.
    pub block: String,
    /// The first operator whose annotated cut the degree does not divide.
    pub op: String,
    /// Its annotated index.
    pub index: String,
    /// The atom cut, in words: `the 96 heads (`NH`)`.
    pub what: String,
    /// Other operators whose annotated cuts the degree does not divide.
    pub others: usize,
    /// The degrees every annotated cut allows.
    pub usable: String,
}

/// Two strategies that both run only at every p-th value of the symbol.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("both strategies run only at every {period}th value ({var} = {first}, {second}, …; not {why}): give --from {first} --step {step}")]
pub struct Periodic {
    /// The period.
    pub period: u64,
    /// The symbol.
    pub var: String,
    /// The first value both run at.
    pub first: String,
    /// The second.
    pub second: String,
    /// The first value one cannot run at, and why.
    pub why: String,
    /// The step to give.
    pub step: String,
}

/// Why the ranking set a strategy aside before pricing it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejection {
    /// The global batch does not split over the data-parallel ranks.
    #[error("batch not divisible by dp = {dp}")]
    BatchNotDivisible {
        /// Data-parallel degree.
        dp: u64,
    },
    /// Only auto layouts asked for, and the one of this degree failed.
    #[error("no auto layout at tp = {tp} ({why})")]
    NoAutoLayout {
        /// Tensor-parallel degree.
        tp: u64,
        /// Why the search failed.
        why: Box<SearchError>,
    },
    /// Only auto layouts asked for, and the one of this degree is the annotated layout.
    #[error("no auto layout at tp = {tp} (it is the annotated layout)")]
    AutoIsAnnotated {
        /// Tensor-parallel degree.
        tp: u64,
    },
    /// The named stack profile's stack does not run it (its `supports:`).
    #[error("{profile} does not run {what}")]
    NotRunByStack {
        /// The profile (`--stack NAME`).
        profile: String,
        /// What it does not run: `zero = 3 (above 1)`, `the gpipe schedule`.
        what: String,
    },
    /// The strategy cannot run.
    #[error(transparent)]
    Strategy(#[from] StrategyError),
}

impl Rejection {
    /// The kind of rejection, in words: rejections of one kind differ only in their sizes.
    pub fn kind(&self) -> &'static str {
        match self {
            Rejection::BatchNotDivisible { .. } => "global batch not divisible by dp",
            Rejection::NoAutoLayout { .. } => "auto layout search failed",
            Rejection::AutoIsAnnotated { .. } => "auto layout same as the annotated one",
            Rejection::NotRunByStack { .. } => "not run by the --stack profile's stack",
            Rejection::Strategy(e) => e.kind(),
        }
    }
}

/// Rejections counted by kind ([`Rejection::kind`]) and, within a kind, by message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rejections {
    kinds: std::collections::BTreeMap<&'static str, RejectedKind>,
}

/// The rejections of one kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RejectedKind {
    /// Strategies rejected.
    pub count: usize,
    /// Each distinct message with its count.
    pub messages: std::collections::BTreeMap<String, usize>,
}

impl RejectedKind {
    /// The commonest message (the first in message order among equals): the example shown.
    pub fn example(&self) -> &str {
        let mut best: Option<(&String, usize)> = None;
        for (m, &n) in &self.messages {
            if best.is_none_or(|(_, b)| n > b) {
                best = Some((m, n));
            }
        }
        best.map_or("", |(m, _)| m.as_str())
    }
}

impl Rejections {
    /// Counts one rejection.
    pub fn add(&mut self, why: &Rejection) {
        let k = self.kinds.entry(why.kind()).or_default();
        k.count += 1;
        *k.messages.entry(why.to_string()).or_insert(0) += 1;
    }

    /// Whether nothing was rejected.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The kinds, commonest first (kind name order among equals).
    pub fn by_kind(&self) -> Vec<(&'static str, &RejectedKind)> {
        let mut v: Vec<(&'static str, &RejectedKind)> =
            self.kinds.iter().map(|(k, r)| (*k, r)).collect();
        v.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        v
    }

    /// Every distinct message with its count.
    pub fn by_message(&self) -> std::collections::BTreeMap<String, usize> {
        self.kinds
            .values()
            .flat_map(|k| k.messages.iter().map(|(m, n)| (m.clone(), *n)))
            .collect()
    }
}

impl serde::Serialize for Rejections {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.by_message().serialize(s)
    }
}

impl From<SteerError> for crate::Error {
    fn from(e: SteerError) -> crate::Error {
        crate::Error::Usage(e.to_string())
    }
}

impl From<SearchError> for crate::Error {
    fn from(e: SearchError) -> crate::Error {
        match e {
            SearchError::Strategy(s) => s.into(),
            other => crate::Error::Usage(other.to_string()),
        }
    }
}

impl serde::Serialize for SearchError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Strategies that passed the screen but could not be priced exactly or simulated, counted
/// while the search runs (from any thread), so that nothing on the `rank` path is dropped
/// silently. Each strategy counts once, with its first reason.
#[derive(Debug, Default)]
pub struct FailureLog {
    by_strategy: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

impl FailureLog {
    /// The value of `result`, or `None` after noting its error against `strategy`.
    pub fn keep<T, E: std::fmt::Display>(
        &self,
        strategy: impl FnOnce() -> String,
        result: Result<T, E>,
    ) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.note(strategy(), e.to_string());
                None
            }
        }
    }

    /// Notes that `strategy` failed for `why` (the first reason per strategy is kept).
    pub fn note(&self, strategy: String, why: String) {
        let mut map = self
            .by_strategy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.entry(strategy).or_insert(why);
    }

    /// Notes what `other` noted, keeping the first reason per strategy.
    pub fn merge(&self, other: FailureLog) {
        let theirs = other
            .by_strategy
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (strategy, why) in theirs {
            self.note(strategy, why);
        }
    }

    /// What was noted: how many strategies, and the first in strategy order with its reason.
    pub fn summary(&self) -> Failed {
        let map = self
            .by_strategy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Failed {
            count: map.len(),
            example: map.iter().next().map(|(k, why)| format!("{k}: {why}")),
        }
    }
}

/// Strategies a search could not price or simulate: how many, and one whole example.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Failed {
    /// Strategies that failed.
    pub count: usize,
    /// The first of them (in strategy order) and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

impl Failed {
    /// Whether nothing failed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failure_log_counts_each_strategy_once_with_its_first_reason() {
        let log = FailureLog::default();
        assert_eq!(log.keep(|| "a".into(), Ok::<u8, String>(1)), Some(1));
        assert!(log.summary().is_empty());
        // From several threads, in any order: the summary does not depend on it.
        std::thread::scope(|s| {
            for (k, why) in [("tp=8", "first"), ("dp=2", "x"), ("tp=8", "second")] {
                let log = &log;
                s.spawn(move || log.keep(|| k.into(), Err::<u8, _>(why)));
            }
        });
        let f = log.summary();
        assert_eq!(f.count, 2);
        assert_eq!(f.example.as_deref(), Some("dp=2: x"));
    }
}
