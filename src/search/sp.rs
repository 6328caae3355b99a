//! The exact solver.
//!
//! **Across blocks** a sub-graph between a boundary tensor `x` and a boundary tensor `y` is
//! summarised by a [`Table`]: the least cost for each (placement of `x`, placement of `y`).
//! Sequential composition is the (min,+) matrix product ([`Table::then`]); two sub-graphs
//! between the same boundaries whose costs are independent given the boundary placements add
//! ([`Table::par`]). The product is associative, so `L` identical layers compose by repeated
//! squaring in `O(log L)` products ([`Table::repeat`]).
//!
//! **Inside a block** (residual connections, attention's three projections) the structure is a
//! general DAG, and edge costs are not separable: consumers that read a tensor in the same
//! placement share one conversion, and partial gradients are summed before one reduction. The
//! block is solved by dynamic programming over a topological order whose state is, for every
//! live tensor (produced, with consumers still to place), its placement and the set of
//! conversions already paid for it. Every operator's choice is tried in every state; the state
//! keeps the cheapest way to reach it. This is exact: the cost of the rest of the graph depends
//! on the past only through that state. The order is chosen greedily to keep few tensors live;
//! the work grows with the number of placements to the power of the live width, which is small
//! for one mesh axis and grows quickly with more. An optional upper bound (a known layout's
//! cost) prunes states that cannot beat it, using the cheapest choice of every operator still
//! to place as a lower bound on the rest.
//!
//! Costs are scaled to exact integers by the least common denominator of every price, so the
//! search runs on `i128`; results are returned as exact rationals.

use super::error::SearchError;
use super::problem::{facilities, AxisPlace, Choice, Facility, Priced, Problem};
use crate::calib::Calibration;
use crate::model::Model;
use crate::sym::{Bindings, Rational};
use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{One, ToPrimitive, Zero};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// A fast multiplicative hash for the solver's own keys (states, placements); not resistant to
/// chosen collisions, which its inputs cannot be.
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl Fx {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(i.into());
    }
    fn write_u16(&mut self, i: u16) {
        self.add(i.into());
    }
    fn write_u32(&mut self, i: u32) {
        self.add(i.into());
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_u128(&mut self, i: u128) {
        self.add(i as u64);
        self.add((i >> 64) as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// An optimal layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    /// Its exact cost in FLOP-equivalents.
    pub cost: Rational,
    /// A choice for every operator.
    pub assignment: Vec<Choice>,
}

/// Least cost per (input placement, output placement) of a sub-graph; `None` is impossible.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Row labels: placements of the input boundary.
    pub rows: Vec<String>,
    /// Column labels: placements of the output boundary.
    pub cols: Vec<String>,
    /// `cost[r][c]`.
    pub cost: Vec<Vec<Option<Rational>>>,
}

fn add(a: &Option<Rational>, b: &Option<Rational>) -> Option<Rational> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    }
}

fn min_into(slot: &mut Option<Rational>, v: Option<Rational>) {
    if let Some(v) = v {
        match slot {
            Some(s) if *s <= v => {}
            _ => *slot = Some(v),
        }
    }
}

impl Table {
    /// The (min,+) identity over `labels`: zero on the diagonal.
    pub fn identity(labels: &[String]) -> Table {
        let n = labels.len();
        Table {
            rows: labels.to_vec(),
            cols: labels.to_vec(),
            cost: (0..n)
                .map(|r| (0..n).map(|c| (r == c).then(Rational::zero)).collect())
                .collect(),
        }
    }

    /// Sequential composition: `self` then `next`, matching `self`'s columns with `next`'s rows
    /// by label (the (min,+) matrix product).
    pub fn then(&self, next: &Table) -> Table {
        let rows_of: HashMap<&str, usize> = next
            .rows
            .iter()
            .enumerate()
            .map(|(i, l)| (l.as_str(), i))
            .collect();
        let link: Vec<Option<usize>> = self
            .cols
            .iter()
            .map(|l| rows_of.get(l.as_str()).copied())
            .collect();
        let mut cost = vec![vec![None; next.cols.len()]; self.rows.len()];
        for (r, row) in self.cost.iter().enumerate() {
            for (m, a) in row.iter().enumerate() {
                let (Some(a), Some(mi)) = (a, link[m]) else {
                    continue;
                };
                for (c, b) in next.cost[mi].iter().enumerate() {
                    if let Some(b) = b {
                        min_into(&mut cost[r][c], Some(a + b));
                    }
                }
            }
        }
        Table {
            rows: self.rows.clone(),
            cols: next.cols.clone(),
            cost,
        }
    }

    /// Parallel composition of two sub-graphs between the same boundaries whose costs are
    /// independent given the boundary placements: entries add (labels must agree).
    pub fn par(&self, other: &Table) -> Result<Table, SearchError> {
        if self.rows != other.rows || self.cols != other.cols {
            return Err(SearchError::TableBoundaries);
        }
        let cost = self
            .cost
            .iter()
            .zip(&other.cost)
            .map(|(a, b)| a.iter().zip(b).map(|(x, y)| add(x, y)).collect())
            .collect();
        Ok(Table {
            rows: self.rows.clone(),
            cols: self.cols.clone(),
            cost,
        })
    }

    /// The same table over the union of its row and column labels (rows first), so that it
    /// maps a placement set to itself; new entries are impossible.
    pub fn square(&self) -> Table {
        let mut labels = self.rows.clone();
        for c in &self.cols {
            if !labels.contains(c) {
                labels.push(c.clone());
            }
        }
        let col_of: HashMap<&str, usize> = self
            .cols
            .iter()
            .enumerate()
            .map(|(i, l)| (l.as_str(), i))
            .collect();
        let cost = labels
            .iter()
            .enumerate()
            .map(|(r, _)| {
                labels
                    .iter()
                    .map(|c| {
                        let row = self.cost.get(r)?;
                        row[*col_of.get(c.as_str())?].clone()
                    })
                    .collect()
            })
            .collect();
        Table {
            rows: labels.clone(),
            cols: labels,
            cost,
        }
    }

    /// `count` copies in sequence, by repeated squaring: `O(log count)` products (over the
    /// union of the row and column placements, see [`Table::square`]).
    pub fn repeat(&self, count: u64) -> Table {
        let base0 = self.square();
        let mut result = Table::identity(&base0.rows);
        let mut base = base0;
        let mut n = count;
        while n > 0 {
            if n & 1 == 1 {
                result = result.then(&base);
            }
            n >>= 1;
            if n > 0 {
                base = base.then(&base);
            }
        }
        result
    }

    /// The entry at (row label, column label).
    pub fn get(&self, row: &str, col: &str) -> Option<Rational> {
        let r = self.rows.iter().position(|l| l == row)?;
        let c = self.cols.iter().position(|l| l == col)?;
        self.cost[r][c].clone()
    }

    /// The least entry.
    pub fn min(&self) -> Option<Rational> {
        let mut best = None;
        for row in &self.cost {
            for v in row {
                min_into(&mut best, v.clone());
            }
        }
        best
    }

    /// The least entry with equal row and column labels (a layer feeding itself).
    pub fn min_cycle(&self) -> Option<Rational> {
        let mut best = None;
        for (r, l) in self.rows.iter().enumerate() {
            if let Some(c) = self.cols.iter().position(|x| x == l) {
                min_into(&mut best, self.cost[r][c].clone());
            }
        }
        best
    }
}

/// One choice compiled to integers.
struct CChoice {
    choice: Choice,
    cost: i128,
    /// Index of its output placement among the operator's distinct placements.
    out: u16,
    /// Per input with a producer in the problem: (producer, facility mask).
    masks: Vec<(usize, u128)>,
}

/// A problem compiled for the dynamic programme.
struct Compiled {
    scale: BigInt,
    order: Vec<usize>,
    choices: Vec<Vec<CChoice>>,
    /// Per operator: its distinct output placements.
    places: Vec<Vec<Vec<AxisPlace>>>,
    /// Per operator, per output placement: cost of each facility (by bit).
    fac_cost: Vec<Vec<Vec<i128>>>,
    /// Per operator, per output placement: facilities that cost nothing.
    free: Vec<Vec<u128>>,
    /// Per operator, per output placement: terminal cost.
    terminal: Vec<Vec<i128>>,
    /// Remaining consumers of each operator at each step (after it).
    has_consumers: Vec<bool>,
}

fn lcm_den(acc: &mut BigInt, r: &Rational) {
    *acc = acc.lcm(r.denom());
}

fn to_int(r: &Rational, scale: &BigInt) -> Result<i128, SearchError> {
    let v = r.numer() * (scale / r.denom());
    v.to_i128()
        .filter(|x| x.abs() < (1i128 << 118))
        .ok_or(SearchError::TooLarge("costs"))
}

/// Topological order keeping few tensors live: among ready operators, the one that ends the
/// most tensors' lives, then the one that starts none (the lowest position among equals).
///
/// The ready operators are kept ordered by that score, and a score is recomputed only when it
/// can change: an operator ends a producer's life exactly when it is the producer's last
/// unplaced consumer, which happens once per producer. The work is linear in the operators and
/// edges (times a logarithm), where scanning every operator at every step was quadratic.
fn order(p: &Problem) -> Result<Vec<usize>, SearchError> {
    use std::cmp::Reverse;
    use std::collections::BTreeSet;
    let n = p.ops.len();
    let consumers = p.consumers();
    // Distinct producers of each operator.
    let producers: Vec<Vec<usize>> = p
        .ops
        .iter()
        .map(|o| {
            let mut f: Vec<usize> = o.inputs.iter().filter_map(|i| i.from).collect();
            f.sort_unstable();
            f.dedup();
            f
        })
        .collect();
    // Distinct consumers of each operator not yet placed.
    let mut open: Vec<usize> = consumers
        .iter()
        .map(|c| {
            let mut f: Vec<usize> = c.iter().map(|&(v, _)| v).collect();
            f.sort_unstable();
            f.dedup();
            f.len()
        })
        .collect();
    let mut missing: Vec<usize> = producers.iter().map(Vec::len).collect();
    let mut done = vec![false; n];
    let score = |v: usize, open: &[usize]| -> i64 {
        let kills = producers[v].iter().filter(|&&q| open[q] == 1).count() as i64;
        2 * kills - i64::from(!consumers[v].is_empty())
    };
    let mut scored: Vec<i64> = vec![0; n];
    let mut ready: BTreeSet<(Reverse<i64>, usize)> = BTreeSet::new();
    for v in (0..n).filter(|&v| missing[v] == 0) {
        scored[v] = score(v, &open);
        ready.insert((Reverse(scored[v]), v));
    }
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let (_, v) = ready.pop_first().ok_or(SearchError::Cycle)?;
        done[v] = true;
        out.push(v);
        for &q in &producers[v] {
            open[q] -= 1;
            if open[q] != 1 {
                continue;
            }
            // The last consumer of q now ends its life: rescore it if it is ready.
            let last = consumers[q].iter().map(|&(c, _)| c).find(|&c| !done[c]);
            if let Some(c) = last.filter(|&c| missing[c] == 0) {
                ready.remove(&(Reverse(scored[c]), c));
                scored[c] = score(c, &open);
                ready.insert((Reverse(scored[c]), c));
            }
        }
        let mut seen: Vec<usize> = consumers[v].iter().map(|&(c, _)| c).collect();
        seen.sort_unstable();
        seen.dedup();
        for c in seen {
            missing[c] -= 1;
            if missing[c] == 0 {
                scored[c] = score(c, &open);
                ready.insert((Reverse(scored[c]), c));
            }
        }
    }
    Ok(out)
}

/// Most operator choices one problem may price (all operators together). The solver holds
/// every valid choice of every operator priced, about 1 KB each, and an operator with c cuts
/// over k axes has up to (c + 1)^k: GPT-3 175B's layer (with 256 heads) has 80,515 over six
/// halvings (190 MB in all), 375,315 over seven (460 MB) and far more over eight (`layout` at
/// tp = 256 took 2.4 GB, at 512 more than 8 GB). A problem beyond this is refused before
/// anything is priced, so a search stays within about 600 MB.
pub const MAX_PRICED_CHOICES: usize = 500_000;

/// Refuses a problem whose operators have more than [`MAX_PRICED_CHOICES`] valid choices in
/// all, counting (not listing) them.
pub fn check_choice_budget(p: &Problem) -> Result<(), SearchError> {
    let mut total = 0usize;
    for v in 0..p.ops.len() {
        match p.count_choices(v, MAX_PRICED_CHOICES - total) {
            Some(n) => total += n,
            None => {
                return Err(SearchError::TooManyChoices {
                    problem: p.name.clone(),
                    axes: p.axes.len(),
                    op: p.ops[v].name.clone(),
                    limit: MAX_PRICED_CHOICES,
                })
            }
        }
    }
    Ok(())
}

/// Every valid choice of every operator, priced (within [`MAX_PRICED_CHOICES`]).
pub(crate) fn price_all(p: &Problem) -> Result<Vec<Vec<(Choice, Priced)>>, SearchError> {
    check_choice_budget(p)?;
    price_each(p)
}

/// [`price_all`] once the budget is checked.
fn price_each(p: &Problem) -> Result<Vec<Vec<(Choice, Priced)>>, SearchError> {
    let mut memo = PriceMemo::new(p);
    (0..p.ops.len())
        .map(|v| {
            p.choices(v)
                .into_iter()
                .map(|c| memo.price(v, &c).map(|pr| (c, pr)))
                .collect()
        })
        .collect()
}

/// [`Problem::cost`] with the prices shared by the operators of one class (see
/// [`PriceMemo`]): the same result, without pricing a graph's identical operators one by one.
pub(crate) fn cost_shared(p: &Problem, a: &[Choice]) -> Result<Rational, SearchError> {
    if a.len() != p.ops.len() {
        return Err(SearchError::ChoiceCount {
            choices: a.len(),
            ops: p.ops.len(),
        });
    }
    let mut memo = PriceMemo::new(p);
    let priced: Vec<Priced> = (0..a.len())
        .map(|v| memo.price(v, &a[v]))
        .collect::<Result<_, _>>()?;
    let refs: Vec<&Priced> = priced.iter().collect();
    p.cost_of(&refs)
}

/// Prices of one problem's choices, shared by the operators of one class (see
/// [`Problem::price_classes`]): identical operators, such as the thousands of a repeat-free
/// export, are priced once.
pub(crate) struct PriceMemo<'a> {
    p: &'a Problem,
    class: Vec<usize>,
    known: FxMap<(usize, Choice), Priced>,
}

impl<'a> PriceMemo<'a> {
    /// An empty memo for `p`.
    pub(crate) fn new(p: &'a Problem) -> Self {
        PriceMemo {
            p,
            class: p.price_classes(),
            known: FxMap::default(),
        }
    }

    /// [`Problem::price`], from the memo where an operator of the same class was priced.
    pub(crate) fn price(&mut self, v: usize, c: &[Option<usize>]) -> Result<Priced, SearchError> {
        let key = (self.class[v], c.to_vec());
        if let Some(pr) = self.known.get(&key) {
            return Ok(pr.clone());
        }
        let pr = self.p.price(v, c)?;
        if self.p.shares_price(&pr) {
            self.known.insert(key, pr.clone());
        }
        Ok(pr)
    }
}

/// [`price_all`], pricing once the choices that differ only by a permutation of interchangeable
/// axes (equal size and κ, such as the halvings of one link tier) and permuting that price:
/// an operator's cost is symmetric in such axes, and its placements follow the permutation.
pub(crate) fn price_all_shared(p: &Problem) -> Result<Vec<Vec<(Choice, Priced)>>, SearchError> {
    let k = p.axes.len();
    let mut classes: Vec<Vec<usize>> = Vec::new();
    for a in 0..k {
        let same =
            |b: usize| p.axes[b].size == p.axes[a].size && p.axes[b].kappa == p.axes[a].kappa;
        match classes.iter_mut().find(|cl| same(cl[0])) {
            Some(cl) => cl.push(a),
            None => classes.push(vec![a]),
        }
    }
    check_choice_budget(p)?;
    if classes.len() == k {
        return price_each(p);
    }
    let mut memo = PriceMemo::new(p);
    (0..p.ops.len())
        .map(|v| {
            let mut cache: FxMap<Choice, Priced> = FxMap::default();
            let memo = &mut memo;
            p.choices(v)
                .into_iter()
                .map(|c| {
                    // The canonical form sorts each class's cuts; `from[j]` is the axis whose
                    // cut canonical axis `j` holds.
                    let mut canon = c.clone();
                    let mut from: Vec<usize> = (0..k).collect();
                    for cl in &classes {
                        let mut idx = cl.clone();
                        idx.sort_by_key(|&a| (c[a], a));
                        for (j, &a) in idx.iter().enumerate() {
                            canon[cl[j]] = c[a];
                            from[cl[j]] = a;
                        }
                    }
                    let base = match cache.get(&canon) {
                        Some(b) => b.clone(),
                        None => {
                            let b = memo.price(v, &canon)?;
                            cache.insert(canon, b.clone());
                            b
                        }
                    };
                    let mut pr = base.clone();
                    for (&a, x) in from.iter().zip(&base.out) {
                        pr.out[a] = *x;
                    }
                    for (need, b) in pr.needs.iter_mut().zip(&base.needs) {
                        if let (Some(need), Some(b)) = (need.as_mut(), b) {
                            for (&a, x) in from.iter().zip(b) {
                                need[a] = *x;
                            }
                        }
                    }
                    Ok((c, pr))
                })
                .collect()
        })
        .collect()
}

/// Compiles `p`; `shared` prices choices equal up to interchangeable axes once.
fn compile(p: &Problem, shared: bool) -> Result<Compiled, SearchError> {
    let priced = if shared {
        price_all_shared(p)?
    } else {
        price_all(p)?
    };
    let consumers = p.consumers();
    let (places, place_of) = output_places(&priced);
    let (facs, fac_of) = producer_facilities(p, &priced)?;
    let costs = distinct_costs(p, &priced, &places, &facs);
    let ints = integer_costs(p, &priced, &place_of, &facs, &fac_of, &costs)?;
    Ok(Compiled {
        scale: costs.scale,
        order: order(p)?,
        choices: ints.choices,
        places,
        fac_cost: ints.fac_cost,
        free: ints.free,
        terminal: ints.terminal,
        has_consumers: consumers.iter().map(|c| !c.is_empty()).collect(),
    })
}

/// Every operator's choices, priced.
type PricedChoices = Vec<Vec<(Choice, Priced)>>;

/// Per operator: its distinct output placements, and each one's position.
type Places = (Vec<Vec<Vec<AxisPlace>>>, Vec<FxMap<Vec<AxisPlace>, u16>>);

/// Each operator's distinct output placements over its choices, in order of first use.
fn output_places(priced: &PricedChoices) -> Places {
    let n = priced.len();
    let mut places: Vec<Vec<Vec<AxisPlace>>> = vec![Vec::new(); n];
    let mut place_of: Vec<FxMap<Vec<AxisPlace>, u16>> = vec![FxMap::default(); n];
    for v in 0..n {
        for (_, pr) in &priced[v] {
            if !place_of[v].contains_key(&pr.out) {
                place_of[v].insert(pr.out.clone(), places[v].len() as u16);
                places[v].push(pr.out.clone());
            }
        }
    }
    (places, place_of)
}

/// Per producer: the conversions (facilities) its consumers' choices may ask of its output,
/// and each one's position.
type Facilities = (Vec<Vec<Facility>>, Vec<FxMap<Facility, usize>>);

/// Each producer's facilities, from every consumer choice; refuses more than fit a state's
/// 128-bit mask.
fn producer_facilities(p: &Problem, priced: &PricedChoices) -> Result<Facilities, SearchError> {
    let n = priced.len();
    let mut facs: Vec<Vec<Facility>> = vec![Vec::new(); n];
    let mut fac_of: Vec<FxMap<Facility, usize>> = vec![FxMap::default(); n];
    for (v, list) in priced.iter().enumerate() {
        for (_, pr) in list {
            for (k, needs) in pr.needs.iter().enumerate() {
                let (Some(needs), Some(q)) = (needs, p.ops[v].inputs[k].from) else {
                    continue;
                };
                for f in facilities(needs) {
                    if !fac_of[q].contains_key(&f) {
                        fac_of[q].insert(f, facs[q].len());
                        facs[q].push(f);
                    }
                }
            }
        }
    }
    if let Some(q) = facs.iter().position(|f| f.len() > 128) {
        return Err(SearchError::TooManyConversions {
            op: p.ops[q].name.clone(),
            axes: p.axes.len(),
        });
    }
    Ok((facs, fac_of))
}

/// Each operator's distinct facility and terminal costs, the scale that makes every cost an
/// integer, and which distinct value each (placement, facility) and placement's terminal
/// cost is.
struct DistinctCosts {
    scale: BigInt,
    distinct: Vec<Vec<Rational>>,
    fac_ix: Vec<Vec<Vec<u32>>>,
    term_ix: Vec<Vec<u32>>,
}

fn distinct_costs(
    p: &Problem,
    priced: &PricedChoices,
    places: &[Vec<Vec<AxisPlace>>],
    facs: &[Vec<Facility>],
) -> DistinctCosts {
    let n = priced.len();
    // A facility's cost depends on the producer's placement only through its placement on the
    // facility's axis and the devices its other axes shard it over: each distinct value is
    // computed once and the entries refer to it.
    let mut scale = BigInt::one();
    let mut distinct: Vec<Vec<Rational>> = Vec::with_capacity(n);
    let mut fac_ix: Vec<Vec<Vec<u32>>> = Vec::with_capacity(n);
    let mut term_ix: Vec<Vec<u32>> = Vec::with_capacity(n);
    // Across operators: a facility's cost depends on its operator only through the output's
    // bytes, so operators of one size (every operator of a repeat-free chain) share it.
    let mut shared: HashMap<(Rational, (Facility, AxisPlace, u64)), Rational> = HashMap::new();
    for v in 0..n {
        for (_, pr) in &priced[v] {
            lcm_den(&mut scale, &pr.cost);
        }
        let mut values: Vec<Rational> = Vec::new();
        let mut seen: HashMap<Rational, u32> = HashMap::new();
        let mut intern = |r: Rational, values: &mut Vec<Rational>| -> u32 {
            *seen.entry(r.clone()).or_insert_with(|| {
                values.push(r);
                (values.len() - 1) as u32
            })
        };
        let mut memo: FxMap<(Facility, AxisPlace, u64), u32> = FxMap::default();
        let mut fr = Vec::with_capacity(places[v].len());
        for x in &places[v] {
            let mut row = Vec::with_capacity(facs[v].len());
            for f in &facs[v] {
                let spread: u64 = x
                    .iter()
                    .enumerate()
                    .filter(|&(b, pl)| b != f.axis && matches!(pl, AxisPlace::Shard(_)))
                    .map(|(b, _)| p.axes[b].size)
                    .fold(1u64, u64::saturating_mul);
                let key = (*f, x[f.axis], spread);
                let i = match memo.get(&key) {
                    Some(&i) => i,
                    None => {
                        let at = (p.ops[v].out_bytes.clone(), key);
                        let cost = match shared.get(&at) {
                            Some(c) => c.clone(),
                            None => {
                                let c = p.facility_cost(v, x, *f);
                                shared.insert(at, c.clone());
                                c
                            }
                        };
                        let i = intern(cost, &mut values);
                        memo.insert(key, i);
                        i
                    }
                };
                row.push(i);
            }
            fr.push(row);
        }
        let tr: Vec<u32> = places[v]
            .iter()
            .map(|x| intern(p.terminal_cost(v, x), &mut values))
            .collect();
        for r in &values {
            lcm_den(&mut scale, r);
        }
        distinct.push(values);
        fac_ix.push(fr);
        term_ix.push(tr);
    }
    DistinctCosts {
        scale,
        distinct,
        fac_ix,
        term_ix,
    }
}

/// The programme's integer costs: each choice's (with the facilities it uses as a mask), each
/// facility's and terminal cost per placement, and which facilities are free.
struct IntegerCosts {
    choices: Vec<Vec<CChoice>>,
    fac_cost: Vec<Vec<Vec<i128>>>,
    free: Vec<Vec<u128>>,
    terminal: Vec<Vec<i128>>,
}

fn integer_costs(
    p: &Problem,
    priced: &PricedChoices,
    place_of: &[FxMap<Vec<AxisPlace>, u16>],
    facs: &[Vec<Facility>],
    fac_of: &[FxMap<Facility, usize>],
    costs: &DistinctCosts,
) -> Result<IntegerCosts, SearchError> {
    let n = priced.len();
    let DistinctCosts {
        scale,
        distinct,
        fac_ix,
        term_ix,
    } = costs;
    let mut bound = Rational::zero();
    let mut choices = Vec::with_capacity(n);
    let mut fac_cost = Vec::with_capacity(n);
    let mut free = Vec::with_capacity(n);
    let mut terminal = Vec::with_capacity(n);
    for v in 0..n {
        let mut cs = Vec::new();
        let mut worst = Rational::zero();
        for (c, pr) in &priced[v] {
            if pr.cost > worst {
                worst = pr.cost.clone();
            }
            let out = place_of[v].get(&pr.out).copied().unwrap_or(0);
            let mut masks = Vec::new();
            for (k, needs) in pr.needs.iter().enumerate() {
                let (Some(needs), Some(q)) = (needs, p.ops[v].inputs[k].from) else {
                    continue;
                };
                let mut m = 0u128;
                for f in facilities(needs) {
                    if let Some(&b) = fac_of[q].get(&f) {
                        m |= 1 << b;
                    }
                }
                masks.push((q, m));
            }
            cs.push(CChoice {
                choice: c.clone(),
                cost: to_int(&pr.cost, scale)?,
                out,
                masks,
            });
        }
        // A producer pays each facility at most once and its terminal cost once: at most
        // (facilities + 1) × its dearest value.
        let dearest = distinct[v]
            .iter()
            .max()
            .cloned()
            .unwrap_or_else(Rational::zero);
        bound += worst + dearest * Rational::from_integer((facs[v].len() + 1).into());
        choices.push(cs);
        let ints: Vec<i128> = distinct[v]
            .iter()
            .map(|r| to_int(r, scale))
            .collect::<Result<_, _>>()?;
        let fc: Vec<Vec<i128>> = fac_ix[v]
            .iter()
            .map(|row| row.iter().map(|&i| ints[i as usize]).collect())
            .collect();
        free.push(
            fc.iter()
                .map(|row| {
                    row.iter()
                        .enumerate()
                        .filter(|(_, c)| **c == 0)
                        .fold(0u128, |m, (b, _)| m | (1 << b))
                })
                .collect(),
        );
        fac_cost.push(fc);
        terminal.push(term_ix[v].iter().map(|&i| ints[i as usize]).collect());
    }
    // Every partial sum stays below 2^120: no overflow anywhere.
    to_int(&bound, scale)?;
    Ok(IntegerCosts {
        choices,
        fac_cost,
        free,
        terminal,
    })
}

/// The most states one step of the programme may hold before the exact search gives up.
pub const MAX_STATES: usize = 400_000;

/// One DP entry: cost, parent entry in the previous layer, choice taken.
#[derive(Clone, Copy)]
struct Entry {
    cost: i128,
    parent: u32,
    choice: u32,
}

type State = Vec<(u16, u128)>;

/// How far the programme may go.
#[derive(Clone, Copy)]
struct Limits<'a> {
    /// Prune states that cannot cost at most this.
    bound: Option<i128>,
    /// Keep at most this many states per step (the cheapest), instead of giving up beyond
    /// [`MAX_STATES`].
    beam: Option<usize>,
    /// A layout (choice position per operator) whose states the beam never drops, so that the
    /// result costs no more than it.
    guide: Option<&'a [usize]>,
}

/// What [`run`] found.
struct Ran {
    /// Per final state: the state and its cost.
    finals: Vec<(State, i128)>,
    /// Per step, per state kept: its entry (to trace a final state's choices back). Only the
    /// entries are kept for every step, not the states, whose vectors would multiply the
    /// memory by the live width.
    entries: Vec<Vec<Entry>>,
    /// The least lower bound of the layouts a beam dropped (cost so far plus the cheapest
    /// choice of every operator still to place); None when the beam dropped nothing.
    dropped: Option<i128>,
}

impl Ran {
    /// The cheapest final state (the first among equals) and its choice positions per
    /// operator, traced back through the entries; only that one is traced, not every final.
    fn best(&self, c: &Compiled) -> Option<(i128, Vec<usize>)> {
        let (si, (_, cost)) = self
            .finals
            .iter()
            .enumerate()
            .min_by_key(|(_, (_, cost))| *cost)?;
        let n = c.order.len();
        let mut picks = vec![0usize; n];
        let mut k = si;
        for step in (0..n).rev() {
            let e = self.entries[step + 1][k];
            picks[c.order[step]] = e.choice as usize;
            k = e.parent as usize;
        }
        Some((*cost, picks))
    }
}

/// Runs the programme. `restrict[v]`, where set, limits operator `v` to those choice
/// positions; `keep` stays live to the end (a table's output boundary); `pin` = (source,
/// operator) carries the source's placement in the state until the operator is placed, which
/// then must produce the same placement (a layer feeding itself), so one pass covers every
/// placement of the source. `step_done` is called after each operator.
fn run(
    p: &Problem,
    c: &Compiled,
    restrict: &BTreeMap<usize, Vec<usize>>,
    keep: Option<usize>,
    pin: Option<(usize, usize)>,
    limits: Limits<'_>,
    step_done: &mut dyn FnMut(usize, usize),
) -> Result<Ran, SearchError> {
    let n = p.ops.len();
    let mut remaining: Vec<usize> = p.consumers().iter().map(Vec::len).collect();
    let rest = rest_bounds(c, restrict);
    let Pin {
        matches: pin_match,
        from: pin_from,
        to: pin_to,
    } = Pin::of(c, pin)?;
    // Whether the pin is carried in the state after step `s` (as its last element).
    let pinned_after = |s: usize| pin.is_some() && s >= pin_from && s < pin_to;
    let mut dropped: Option<i128> = None;
    let mut live: Vec<usize> = Vec::new();
    let mut entries: Vec<Vec<Entry>> = vec![vec![Entry {
        cost: 0,
        parent: 0,
        choice: 0,
    }]];
    // The states of the last step only (see `Ran::entries`).
    let mut states: Vec<State> = vec![Vec::new()];
    // Per state of the last step: whether the guide's path reaches it.
    let mut guided: Vec<bool> = vec![limits.guide.is_some()];
    // Scratch buffers reused by every expansion: a state is allocated only when it is new.
    let mut st: State = Vec::new();
    let mut ns: State = Vec::new();
    for (step, &v) in c.order.iter().enumerate() {
        let stays = c.has_consumers[v] || keep == Some(v);
        let Liveness {
            next_live,
            slot_of,
            keep_slots,
        } = liveness(p, v, &live, &mut remaining, keep, stays);
        let here = Step {
            c,
            v,
            stays,
            slot_of: &slot_of,
            keep_slots: &keep_slots,
            pinned_before: step > 0 && pinned_after(step - 1),
            pins_now: pin.is_some() && step == pin_from,
            pinned_next: pinned_after(step),
            closes_pin: pin.is_some() && step == pin_to,
            pin_match: &pin_match,
            guide_here: limits.guide.map(|g| g[v]),
            // What a state must cost at most, before the rest, to be kept.
            bound: limits.bound.map(|b| b - rest[step + 1]),
        };
        let opts: Vec<usize> = allowed(c, restrict, v).collect();
        let last = &entries[entries.len() - 1];
        let next = here.expand(&states, last, &guided, &opts, (&mut st, &mut ns));
        let Next {
            entries: mut next_entries,
            states: mut next_states,
            guided: mut next_guided,
            ..
        } = next;
        match limits.beam {
            Some(w) if next_states.len() > w => {
                let step_rest = rest[step + 1];
                let next = (&mut next_entries, &mut next_states, &mut next_guided);
                keep_cheapest(w, next, step_rest, &mut dropped);
            }
            None if next_states.len() > MAX_STATES => {
                return Err(SearchError::TooManyStates {
                    problem: p.name.clone(),
                    states: MAX_STATES,
                    op: p.ops[v].name.clone(),
                });
            }
            _ => {}
        }
        live = next_live;
        guided = next_guided;
        entries.push(next_entries);
        states = next_states;
        step_done(step + 1, n);
    }
    let last = entries.len() - 1;
    let finals = states
        .into_iter()
        .zip(&entries[last])
        .map(|(st, e)| (st, e.cost))
        .collect();
    Ok(Ran {
        finals,
        entries,
        dropped,
    })
}

/// What one step of [`run`] places: operator `v`, what stays live after it, and the pin.
struct Step<'a> {
    c: &'a Compiled,
    v: usize,
    stays: bool,
    slot_of: &'a HashMap<usize, usize>,
    keep_slots: &'a [usize],
    pinned_before: bool,
    pins_now: bool,
    pinned_next: bool,
    closes_pin: bool,
    pin_match: &'a [Vec<bool>],
    guide_here: Option<usize>,
    bound: Option<i128>,
}

impl Step<'_> {
    /// Every state of the last step (`last`: their entries; `guided`: on the guide's path)
    /// extended by each of `opts`, the choices of `v`; `st` and `ns` are scratch buffers reused
    /// for every state.
    fn expand(
        &self,
        states: &[State],
        last: &[Entry],
        guided: &[bool],
        opts: &[usize],
        (st, ns): (&mut State, &mut State),
    ) -> Next {
        let c = self.c;
        let v = self.v;
        let mut next = Next::default();
        for (si, state) in states.iter().enumerate() {
            let base = last[si].cost;
            let held = if self.pinned_before {
                state.last().map(|&(x, _)| x)
            } else {
                None
            };
            for &ci in opts {
                let ch = &c.choices[v][ci];
                if self.closes_pin {
                    let ok = match held {
                        Some(x) => self.pin_match[x as usize][ch.out as usize],
                        // Source and operator are one: nothing to match.
                        None => true,
                    };
                    if !ok {
                        continue;
                    }
                }
                let mut cost = base + ch.cost;
                st.clear();
                st.extend_from_slice(state);
                cost += pay_facilities(c, ch, self.slot_of, st);
                if !self.stays {
                    cost += c.terminal[v][ch.out as usize];
                }
                if self.bound.is_some_and(|b| cost > b) {
                    continue;
                }
                ns.clear();
                ns.extend(self.keep_slots.iter().map(|&i| st[i]));
                if self.stays {
                    ns.push((ch.out, 0));
                }
                if self.pinned_next {
                    match held {
                        Some(x) => ns.push((x, 0)),
                        None if self.pins_now => ns.push((ch.out, 0)),
                        None => {}
                    }
                }
                let e = Entry {
                    cost,
                    parent: si as u32,
                    choice: ci as u32,
                };
                let on_guide = guided[si] && self.guide_here == Some(ci);
                next.offer(ns, e, on_guide);
            }
        }
        next
    }
}

/// What choice `ch` adds for the conversions of its inputs that their producers (at their
/// slots of state `st`) have not yet paid for; marks them paid in `st`.
#[inline]
fn pay_facilities(
    c: &Compiled,
    ch: &CChoice,
    slot_of: &HashMap<usize, usize>,
    st: &mut [(u16, u128)],
) -> i128 {
    let mut cost = 0;
    for &(q, m) in &ch.masks {
        let Some(&slot) = slot_of.get(&q) else {
            continue;
        };
        let (x, paid) = st[slot];
        let useful = m & !c.free[q][x as usize];
        let mut new = useful & !paid;
        while new != 0 {
            let b = new.trailing_zeros() as usize;
            cost += c.fac_cost[q][x as usize][b];
            new &= new - 1;
        }
        st[slot] = (x, paid | useful);
    }
    cost
}

/// The states of the next step as they are found: one entry per distinct state, the
/// cheapest way to it, and whether the guide's path reaches it.
#[derive(Default)]
struct Next {
    map: FxMap<State, usize>,
    entries: Vec<Entry>,
    states: Vec<State>,
    guided: Vec<bool>,
}

impl Next {
    /// Offers state `ns` reached by `e`: kept if new or cheaper than the way known.
    #[inline]
    fn offer(&mut self, ns: &State, e: Entry, on_guide: bool) {
        match self.map.get(ns.as_slice()) {
            Some(&k) => {
                if e.cost < self.entries[k].cost {
                    self.entries[k] = e;
                }
                self.guided[k] |= on_guide;
            }
            None => {
                self.map.insert(ns.clone(), self.entries.len());
                self.entries.push(e);
                self.states.push(ns.clone());
                self.guided.push(on_guide);
            }
        }
    }
}

/// Which producers a step keeps in its state: those still live after operator `v` (itself
/// where it `stays`), each live producer's slot, and the slots kept.
struct Liveness {
    next_live: Vec<usize>,
    slot_of: HashMap<usize, usize>,
    keep_slots: Vec<usize>,
}

fn liveness(
    p: &Problem,
    v: usize,
    live: &[usize],
    remaining: &mut [usize],
    keep: Option<usize>,
    stays: bool,
) -> Liveness {
    // Producers whose last consumer is v.
    let mut ends: Vec<usize> = Vec::new();
    for i in &p.ops[v].inputs {
        if let Some(q) = i.from {
            remaining[q] -= 1;
            if remaining[q] == 0 && !ends.contains(&q) && Some(q) != keep {
                ends.push(q);
            }
        }
    }
    let mut next_live: Vec<usize> = live.iter().copied().filter(|q| !ends.contains(q)).collect();
    if stays {
        next_live.push(v);
    }
    let slot_of: HashMap<usize, usize> = live.iter().enumerate().map(|(i, q)| (*q, i)).collect();
    let keep_slots: Vec<usize> = live
        .iter()
        .enumerate()
        .filter(|(_, q)| !ends.contains(q))
        .map(|(i, _)| i)
        .collect();
    Liveness {
        next_live,
        slot_of,
        keep_slots,
    }
}

/// Lower bounds of the rest of a search: from each step on, the cheapest allowed choice of each
/// operator still to place, summed.
fn rest_bounds(c: &Compiled, restrict: &BTreeMap<usize, Vec<usize>>) -> Vec<i128> {
    let mut rest = vec![0i128; c.order.len() + 1];
    for (s, &v) in c.order.iter().enumerate().rev() {
        let cheapest = allowed(c, restrict, v)
            .map(|i| c.choices[v][i].cost)
            .min()
            .unwrap_or(0);
        rest[s] = rest[s + 1] + cheapest;
    }
    rest
}

/// A pin of an operator's output placement to a source's: which placements of the two match,
/// and the steps of the source and the operator (`usize::MAX` without a pin).
struct Pin {
    matches: Vec<Vec<bool>>,
    from: usize,
    to: usize,
}

impl Pin {
    fn of(c: &Compiled, pin: Option<(usize, usize)>) -> Result<Pin, SearchError> {
        let Some((s, e)) = pin else {
            return Ok(Pin {
                matches: Vec::new(),
                from: usize::MAX,
                to: usize::MAX,
            });
        };
        let matches = c.places[s]
            .iter()
            .map(|x| c.places[e].iter().map(|y| x == y).collect())
            .collect();
        let pos = |v: usize| c.order.iter().position(|&u| u == v);
        let from = pos(s).ok_or(SearchError::PinOutOfRange("source"))?;
        let to = pos(e).ok_or(SearchError::PinOutOfRange("operator"))?;
        if from > to {
            return Err(SearchError::InputAfterOutput);
        }
        Ok(Pin { matches, from, to })
    }
}

/// Keeps the `w` cheapest states of a step (and the guide's, whatever its cost), in their
/// order; `dropped` becomes the best cost any dropped state could still reach (`step_rest`:
/// the lower bound of the steps after).
fn keep_cheapest(
    w: usize,
    (entries, states, guided): (&mut Vec<Entry>, &mut Vec<State>, &mut Vec<bool>),
    step_rest: i128,
    dropped: &mut Option<i128>,
) {
    let mut idx: Vec<usize> = (0..states.len()).collect();
    idx.sort_by_key(|&i| (entries[i].cost, i));
    let mut kept: Vec<usize> = idx[..w].to_vec();
    for &i in &idx[w..] {
        if guided[i] {
            kept.push(i);
            continue;
        }
        let lb = entries[i].cost + step_rest;
        if dropped.is_none_or(|d| lb < d) {
            *dropped = Some(lb);
        }
    }
    kept.sort_unstable();
    *guided = kept.iter().map(|&i| guided[i]).collect();
    *entries = kept.iter().map(|&i| entries[i]).collect();
    *states = kept
        .iter()
        .map(|&i| std::mem::take(&mut states[i]))
        .collect();
}

fn allowed<'a>(
    c: &'a Compiled,
    restrict: &'a BTreeMap<usize, Vec<usize>>,
    v: usize,
) -> Box<dyn Iterator<Item = usize> + 'a> {
    match restrict.get(&v) {
        Some(r) => Box::new(r.iter().copied()),
        None => Box::new(0..c.choices[v].len()),
    }
}

fn rational(v: i128, scale: &BigInt) -> Rational {
    Rational::new(BigInt::from(v), scale.clone())
}

/// The exact optimum of a problem (honouring its cycle, if any).
pub fn solve(p: &Problem) -> Result<Solution, SearchError> {
    solve_within(p, None)?.ok_or_else(|| SearchError::NoLayout(p.name.clone()))
}

/// The exact optimum among layouts costing at most `bound` (None: no layout does).
pub fn solve_within(
    p: &Problem,
    bound: Option<&Rational>,
) -> Result<Option<Solution>, SearchError> {
    let r = solve_bounded(
        p,
        &Search {
            bound: bound.cloned(),
            ..Search::default()
        },
        &mut |_, _| {},
    )?;
    Ok(r.solution)
}

/// How [`solve_bounded`] searches.
#[derive(Debug, Clone, Default)]
pub struct Search {
    /// Only layouts costing at most this are wanted (a known layout's cost): states that
    /// cannot beat it are pruned, exactly.
    pub bound: Option<Rational>,
    /// Keep at most this many states per operator, the cheapest so far (a beam). None: exact,
    /// giving up beyond [`MAX_STATES`].
    pub beam: Option<usize>,
    /// A known layout (a choice per operator) whose path the beam always keeps, so that the
    /// result never costs more than it; ignored if any of its choices is invalid.
    pub guide: Option<Vec<Choice>>,
    /// With a beam: the most state entries the whole search may write (expansions times the
    /// entries of a state), so that its time and memory stay bounded however many operators
    /// the problem has. The beam is narrowed to fit (reported in [`Bounded::narrowed`]); a
    /// problem that would not fit even with a beam of one state is refused
    /// ([`SearchError::OverBudget`]). None: no budget beyond the beam.
    pub budget: Option<usize>,
}

/// The work budget of a search for [`Search::budget`]: state entries written in all. A
/// transformer layer (tens of operators, a few tensors live) stays within it at the full beam
/// of [`EXPANSIONS`](super::compare::EXPANSIONS); a repeat-free graph of thousands of
/// operators gets a narrower beam, about a second of search on one core.
pub const MAX_WORK: usize = 64_000_000;

/// How a budget narrowed a beam.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Narrowed {
    /// The beam kept: states per operator.
    pub beam: usize,
    /// The beam asked for.
    pub asked: usize,
    /// Operators of the problem.
    pub ops: usize,
    /// The most tensors live at once in the search's order.
    pub live: usize,
    /// The budget (state entries written).
    pub budget: usize,
}

/// What [`solve_bounded`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounded {
    /// The best layout found within the bound (None: none found).
    pub solution: Option<Solution>,
    /// When the beam dropped states: a proven lower bound on the optimum (the least over the
    /// layouts kept and, for each dropped state, its cost so far plus the cheapest choice of
    /// every operator still to place). None: nothing was dropped, the result is exact.
    pub lower: Option<Rational>,
    /// Where the work budget narrowed the beam: how.
    pub narrowed: Option<Narrowed>,
}

impl Bounded {
    /// Whether the result is the exact optimum (within the bound).
    pub fn exact(&self) -> bool {
        self.lower.is_none()
    }

    /// How much the layout found may exceed the optimum, in percent (0 when exact; None when
    /// nothing was found or the bound is not positive).
    pub fn gap_percent(&self) -> Option<f64> {
        let s = self.solution.as_ref()?;
        let Some(lo) = &self.lower else {
            return Some(0.0);
        };
        if *lo <= Rational::zero() {
            return None;
        }
        ((&s.cost - lo) / lo).to_f64().map(|g| 100.0 * g.max(0.0))
    }
}

/// The optimum of a problem (honouring its cycle) among layouts within `search.bound`, exact
/// or, with a beam, bounded with a proven lower bound. A cycle (a layer feeding itself) is
/// solved in one pass that carries the block input's placement until the block output must
/// match it. `progress` receives (operators placed, operators).
pub fn solve_bounded(
    p: &Problem,
    search: &Search,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Bounded, SearchError> {
    let c = compile(p, true)?;
    let b = scaled_bound(search.bound.as_ref(), &c)?;
    // The guide as choice positions, if every choice of it is one the problem allows.
    let guide: Option<Vec<usize>> = search.guide.as_ref().and_then(|g| {
        (g.len() == c.choices.len())
            .then(|| {
                g.iter()
                    .zip(&c.choices)
                    .map(|(x, cs)| cs.iter().position(|ch| ch.choice == *x))
                    .collect::<Option<Vec<usize>>>()
            })
            .flatten()
    });
    let (beam, narrowed) = budget_beam(p, &c, search)?;
    let limits = Limits {
        bound: b,
        beam,
        guide: guide.as_deref(),
    };
    // Exact: one programme per placement of a cycle's block input (each within the state
    // limit). With a beam: one pass carrying that placement, sharing the work of all of them.
    let (best, dropped) = match (p.cycle, limits.beam) {
        (Some(_), None) => per_placement(p, &c, limits, progress)?,
        _ => {
            let ran = run(p, &c, &BTreeMap::new(), None, p.cycle, limits, progress)?;
            (ran.best(&c), ran.dropped)
        }
    };
    let lower = dropped.map(|d| {
        let lo = match &best {
            Some((cost, _)) => d.min(*cost),
            None => d,
        };
        rational(lo, &c.scale)
    });
    Ok(Bounded {
        solution: best.map(|(cost, picks)| solution(&c, cost, &picks)),
        lower,
        narrowed,
    })
}

/// The beam of `search` narrowed to its work budget: a step writes at most beam × choices
/// states of at most (live tensors + 1) entries, so the beam is the budget over operators ×
/// the most choices × (the most live + 1). The beam never widens.
fn budget_beam(
    p: &Problem,
    c: &Compiled,
    search: &Search,
) -> Result<(Option<usize>, Option<Narrowed>), SearchError> {
    let beam = search.beam.map(|w| w.max(1));
    let (Some(asked), Some(budget)) = (beam, search.budget) else {
        return Ok((beam, None));
    };
    let ops = c.order.len().max(1);
    let choices = c.choices.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let live = max_live(p, c);
    let per_state = ops.saturating_mul(choices).saturating_mul(live + 1);
    let fits = budget / per_state;
    if fits == 0 {
        return Err(SearchError::OverBudget {
            problem: p.name.clone(),
            ops,
            choices,
            live,
            budget,
        });
    }
    if fits >= asked {
        return Ok((Some(asked), None));
    }
    let narrowed = Narrowed {
        beam: fits,
        asked,
        ops,
        live,
        budget,
    };
    Ok((Some(fits), Some(narrowed)))
}

/// The most tensors live at once along the search's order (produced, with consumers still to
/// place), plus one for a pinned block input.
fn max_live(p: &Problem, c: &Compiled) -> usize {
    let mut remaining: Vec<usize> = vec![0; p.ops.len()];
    for o in &p.ops {
        for i in &o.inputs {
            if let Some(q) = i.from {
                remaining[q] += 1;
            }
        }
    }
    let (mut live, mut most) = (0usize, 0usize);
    for &v in &c.order {
        for i in &p.ops[v].inputs {
            if let Some(q) = i.from {
                remaining[q] -= 1;
                if remaining[q] == 0 {
                    live = live.saturating_sub(1);
                }
            }
        }
        if c.has_consumers[v] {
            live += 1;
        }
        most = most.max(live);
    }
    most + usize::from(p.cycle.is_some())
}

fn scaled_bound(bound: Option<&Rational>, c: &Compiled) -> Result<Option<i128>, SearchError> {
    match bound {
        Some(r) => {
            // Round up so that a layout costing exactly `bound` survives.
            let scaled = r * Rational::from_integer(c.scale.clone());
            Ok(Some(
                scaled
                    .ceil()
                    .to_integer()
                    .to_i128()
                    .ok_or(SearchError::TooLarge("the bound"))?,
            ))
        }
        None => Ok(None),
    }
}

fn solution(c: &Compiled, cost: i128, picks: &[usize]) -> Solution {
    Solution {
        cost: rational(cost, &c.scale),
        assignment: picks
            .iter()
            .enumerate()
            .map(|(v, &i)| c.choices[v][i].choice.clone())
            .collect(),
    }
}

/// The exact optimum the plain way, the oracle for [`solve_bounded`]: every choice priced on
/// its own (no sharing between equal axes) and, for a cycle, one programme per placement of
/// the block input.
pub fn solve_reference(p: &Problem) -> Result<Solution, SearchError> {
    let c = compile(p, false)?;
    let limits = Limits {
        bound: None,
        beam: None,
        guide: None,
    };
    let best = match p.cycle {
        Some(_) => per_placement(p, &c, limits, &mut |_, _| {})?.0,
        None => run(p, &c, &BTreeMap::new(), None, None, limits, &mut |_, _| {})?.best(&c),
    };
    best.map(|(cost, picks)| solution(&c, cost, &picks))
        .ok_or_else(|| SearchError::NoLayout(p.name.clone()))
}

/// The cheapest final of a search (its cost and choice positions) and the least lower bound of
/// what a beam dropped.
type Best = (Option<(i128, Vec<usize>)>, Option<i128>);

/// One programme per placement of a cycle's block input, the block output restricted to the
/// same placement; the cheapest final of all of them (the first among equals, in placement
/// order).
fn per_placement(
    p: &Problem,
    c: &Compiled,
    limits: Limits<'_>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Best, SearchError> {
    let mut best: Option<(i128, Vec<usize>)> = None;
    let mut dropped: Option<i128> = None;
    let Some((s, e)) = p.cycle else {
        return Ok((best, dropped));
    };
    for (xi, x) in c.places[s].iter().enumerate() {
        let mut restrict = BTreeMap::new();
        restrict.insert(
            s,
            (0..c.choices[s].len())
                .filter(|&i| c.choices[s][i].out as usize == xi)
                .collect(),
        );
        let ends: Vec<usize> = (0..c.choices[e].len())
            .filter(|&i| c.places[e][c.choices[e][i].out as usize] == *x)
            .collect();
        if ends.is_empty() {
            continue;
        }
        restrict.insert(e, ends);
        let r = run(p, c, &restrict, None, None, limits, progress)?;
        if let Some((cost, picks)) = r.best(c) {
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, picks));
            }
        }
        if let Some(d) = r.dropped {
            dropped = Some(dropped.map_or(d, |a: i128| a.min(d)));
        }
    }
    Ok((best, dropped))
}

/// The table of a problem between source `entry` (rows: its placements) and operator `exit`
/// (columns: its output placements; no consumers, its output handed on). The problem's cycle,
/// if any, is ignored: the table is what repeats.
pub fn table(p: &Problem, entry: usize, exit: usize) -> Result<Table, SearchError> {
    if entry >= p.ops.len() || exit >= p.ops.len() {
        return Err(SearchError::TableBoundary);
    }
    let mut q = p.clone();
    q.cycle = None;
    q.ops[exit].terminal = false;
    let c = compile(&q, true)?;
    let rows: Vec<String> = c.places[entry].iter().map(|x| q.label(x)).collect();
    let cols: Vec<String> = c.places[exit].iter().map(|x| q.label(x)).collect();
    let mut cost = vec![vec![None; cols.len()]; rows.len()];
    for (xi, row) in cost.iter_mut().enumerate() {
        let mut restrict = BTreeMap::new();
        restrict.insert(
            entry,
            (0..c.choices[entry].len())
                .filter(|&i| c.choices[entry][i].out as usize == xi)
                .collect(),
        );
        let limits = Limits {
            bound: None,
            beam: None,
            guide: None,
        };
        let ran = run(&q, &c, &restrict, Some(exit), None, limits, &mut |_, _| {})?;
        for (st, v) in ran.finals {
            if let Some(&(y, _)) = st.last() {
                min_into(&mut row[y as usize], Some(rational(v, &c.scale)));
            }
        }
    }
    Ok(Table { rows, cols, cost })
}

/// Per-operator tensor-parallel choices for every block of `model` at `values` on `tp` devices
/// (nodes of `gpus_per_node`, κ from `calib`), and their exact cost in FLOP-equivalents per
/// (micro)batch: the sum over blocks of copies × the block's optimum.
///
/// Each block is solved exactly; a repeated block feeds itself (its input placed as its
/// output), and a block reading operators of earlier blocks reads them as those blocks'
/// solutions placed them. Values map operator names to the rule index split (`None`:
/// replicated), usable as [`Layout::tp_overrides`](crate::parallel::Layout) with `none` for
/// `None` (see [`overrides`]).
#[allow(clippy::type_complexity)]
pub fn best_tp_layout(
    model: &Model,
    values: &Bindings,
    tp: u64,
    calib: &Calibration,
    gpus_per_node: u64,
) -> Result<(BTreeMap<String, Option<String>>, Rational), SearchError> {
    if tp == 0 {
        return Err(SearchError::TpZero);
    }
    let axes = Problem::tp_axis(tp, gpus_per_node, calib);
    let mut known: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut layout = BTreeMap::new();
    let mut total = Rational::zero();
    for (bi, block) in model.blocks.iter().enumerate() {
        let p = Problem::from_block(model, bi, values, axes.clone(), &known)?;
        let s = solve(&p)?;
        let repeat = block.repeat.eval(values)?;
        total += repeat * &s.cost;
        layout.extend(block_placements(&p, &s, &mut known)?);
    }
    Ok((layout, total))
}

/// The rule index each operator of a solved block splits over the tp axis (`None`:
/// replicated), recording in `known` how each leaves its output placed, for the blocks that
/// read it.
pub(crate) fn block_placements(
    p: &Problem,
    s: &Solution,
    known: &mut BTreeMap<String, Vec<String>>,
) -> Result<Vec<(String, Option<String>)>, SearchError> {
    let mut out = Vec::new();
    let mut memo = PriceMemo::new(p);
    for (v, o) in p.ops.iter().enumerate() {
        if o.is_source() {
            continue;
        }
        let pr = memo.price(v, &s.assignment[v])?;
        known.insert(
            o.name.clone(),
            pr.out.iter().map(|x| p.place_label(*x)).collect(),
        );
        let index = s.assignment[v]
            .first()
            .copied()
            .flatten()
            .map(|c| o.cuts[c].index.clone());
        out.push((o.name.clone(), index));
    }
    Ok(out)
}

/// A layout from [`best_tp_layout`] as `tp_overrides`: `none` where replicated.
pub fn overrides(layout: &BTreeMap<String, Option<String>>) -> BTreeMap<String, String> {
    layout
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().unwrap_or_else(|| "none".into())))
        .collect()
}

/// Improves a layout one operator at a time: each operator in turn takes its cheapest choice
/// with the others fixed, until no single change helps. The result is a local optimum, a
/// bound for [`solve_within`].
pub fn polish(p: &Problem, start: &[Choice]) -> Result<Solution, SearchError> {
    let priced = price_all(p)?;
    let mut pick: Vec<usize> = Vec::with_capacity(p.ops.len());
    for (v, c) in start.iter().enumerate() {
        let i = priced
            .get(v)
            .and_then(|list| list.iter().position(|(x, _)| x == c))
            .ok_or_else(|| SearchError::InvalidChoice {
                op: p.ops[v].name.clone(),
                choice: "for the polish".into(),
            })?;
        pick.push(i);
    }
    let cost_of = |pick: &[usize]| -> Option<Rational> {
        let refs: Vec<&Priced> = pick
            .iter()
            .enumerate()
            .map(|(v, &i)| &priced[v][i].1)
            .collect();
        p.cost_of(&refs).ok()
    };
    let mut best = cost_of(&pick).ok_or(SearchError::InvalidStart)?;
    loop {
        let mut improved = false;
        for v in 0..pick.len() {
            for i in 0..priced[v].len() {
                if i == pick[v] {
                    continue;
                }
                let old = pick[v];
                pick[v] = i;
                match cost_of(&pick) {
                    Some(c) if c < best => {
                        best = c;
                        improved = true;
                    }
                    _ => pick[v] = old,
                }
            }
        }
        if !improved {
            break;
        }
    }
    Ok(Solution {
        cost: best,
        assignment: pick
            .iter()
            .enumerate()
            .map(|(v, &i)| priced[v][i].0.clone())
            .collect(),
    })
}
