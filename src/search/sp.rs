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

use super::problem::{facilities, AxisPlace, Choice, Facility, Priced, Problem};
use crate::calib::Calibration;
use crate::model::Model;
use crate::sym::{Bindings, Rational};
use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{One, ToPrimitive, Zero};
use std::collections::{BTreeMap, HashMap};

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
    pub fn par(&self, other: &Table) -> Result<Table, String> {
        if self.rows != other.rows || self.cols != other.cols {
            return Err("parallel tables need the same boundary placements".into());
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
    masks: Vec<(usize, u64)>,
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
    free: Vec<Vec<u64>>,
    /// Per operator, per output placement: terminal cost.
    terminal: Vec<Vec<i128>>,
    /// Remaining consumers of each operator at each step (after it).
    has_consumers: Vec<bool>,
}

fn lcm_den(acc: &mut BigInt, r: &Rational) {
    *acc = acc.lcm(r.denom());
}

fn to_int(r: &Rational, scale: &BigInt) -> Result<i128, String> {
    let v = r.numer() * (scale / r.denom());
    v.to_i128()
        .filter(|x| x.abs() < (1i128 << 118))
        .ok_or_else(|| "costs too large for the exact solver".to_string())
}

/// Topological order keeping few tensors live: among ready operators, the one that ends the
/// most tensors' lives, then the one that starts none.
fn order(p: &Problem) -> Result<Vec<usize>, String> {
    let n = p.ops.len();
    let consumers = p.consumers();
    let mut remaining: Vec<usize> = consumers.iter().map(Vec::len).collect();
    let mut missing: Vec<usize> = p
        .ops
        .iter()
        .map(|o| {
            let mut f: Vec<usize> = o.inputs.iter().filter_map(|i| i.from).collect();
            f.sort();
            f.dedup();
            f.len()
        })
        .collect();
    let mut done = vec![false; n];
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let mut best: Option<(i64, usize)> = None;
        for v in 0..n {
            if done[v] || missing[v] > 0 {
                continue;
            }
            let mut prods: Vec<usize> = p.ops[v].inputs.iter().filter_map(|i| i.from).collect();
            prods.sort();
            prods.dedup();
            let kills = prods
                .iter()
                .filter(|&&q| {
                    remaining[q] == p.ops[v].inputs.iter().filter(|i| i.from == Some(q)).count()
                })
                .count() as i64;
            let score = 2 * kills - i64::from(!consumers[v].is_empty());
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, v));
            }
        }
        let (_, v) = best.ok_or("the operators form a cycle")?;
        done[v] = true;
        out.push(v);
        for i in &p.ops[v].inputs {
            if let Some(q) = i.from {
                remaining[q] -= 1;
            }
        }
        // `missing` counts distinct producers not yet placed.
        for &(c, _) in &consumers[v] {
            let mut f: Vec<usize> = p.ops[c]
                .inputs
                .iter()
                .filter_map(|i| i.from)
                .filter(|q| !done[*q])
                .collect();
            f.sort();
            f.dedup();
            missing[c] = f.len();
        }
    }
    Ok(out)
}

/// Every valid choice of every operator, priced.
pub(crate) fn price_all(p: &Problem) -> Result<Vec<Vec<(Choice, Priced)>>, String> {
    (0..p.ops.len())
        .map(|v| {
            p.choices(v)
                .into_iter()
                .map(|c| p.price(v, &c).map(|pr| (c, pr)))
                .collect()
        })
        .collect()
}

fn compile(p: &Problem) -> Result<Compiled, String> {
    let n = p.ops.len();
    let priced = price_all(p)?;
    let consumers = p.consumers();
    let mut places: Vec<Vec<Vec<AxisPlace>>> = vec![Vec::new(); n];
    for v in 0..n {
        for (_, pr) in &priced[v] {
            if !places[v].contains(&pr.out) {
                places[v].push(pr.out.clone());
            }
        }
    }
    // Facilities of each producer, from every consumer choice.
    let mut facs: Vec<Vec<Facility>> = vec![Vec::new(); n];
    for (v, list) in priced.iter().enumerate() {
        for (_, pr) in list {
            for (k, needs) in pr.needs.iter().enumerate() {
                let (Some(needs), Some(q)) = (needs, p.ops[v].inputs[k].from) else {
                    continue;
                };
                for f in facilities(needs) {
                    if !facs[q].contains(&f) {
                        facs[q].push(f);
                    }
                }
            }
        }
    }
    if let Some(q) = facs.iter().position(|f| f.len() > 64) {
        return Err(format!(
            "`{}` has too many distinct conversions for the exact solver (axes: {})",
            p.ops[q].name,
            p.axes.len()
        ));
    }
    let mut scale = BigInt::one();
    let mut fac_r: Vec<Vec<Vec<Rational>>> = Vec::new();
    let mut term_r: Vec<Vec<Rational>> = Vec::new();
    for v in 0..n {
        for (_, pr) in &priced[v] {
            lcm_den(&mut scale, &pr.cost);
        }
        let fr: Vec<Vec<Rational>> = places[v]
            .iter()
            .map(|x| facs[v].iter().map(|f| p.facility_cost(v, x, *f)).collect())
            .collect();
        let tr: Vec<Rational> = places[v].iter().map(|x| p.terminal_cost(v, x)).collect();
        for r in fr.iter().flatten().chain(&tr) {
            lcm_den(&mut scale, r);
        }
        fac_r.push(fr);
        term_r.push(tr);
    }
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
            let out = places[v].iter().position(|x| *x == pr.out).unwrap_or(0) as u16;
            let mut masks = Vec::new();
            for (k, needs) in pr.needs.iter().enumerate() {
                let (Some(needs), Some(q)) = (needs, p.ops[v].inputs[k].from) else {
                    continue;
                };
                let mut m = 0u64;
                for f in facilities(needs) {
                    if let Some(b) = facs[q].iter().position(|g| *g == f) {
                        m |= 1 << b;
                    }
                }
                masks.push((q, m));
            }
            cs.push(CChoice {
                choice: c.clone(),
                cost: to_int(&pr.cost, &scale)?,
                out,
                masks,
            });
        }
        bound += worst;
        for r in fac_r[v].iter().flatten().chain(&term_r[v]) {
            bound += r;
        }
        choices.push(cs);
        let fc: Vec<Vec<i128>> = fac_r[v]
            .iter()
            .map(|row| row.iter().map(|r| to_int(r, &scale)).collect())
            .collect::<Result<_, _>>()?;
        free.push(
            fc.iter()
                .map(|row| {
                    row.iter()
                        .enumerate()
                        .filter(|(_, c)| **c == 0)
                        .fold(0u64, |m, (b, _)| m | (1 << b))
                })
                .collect(),
        );
        fac_cost.push(fc);
        terminal.push(
            term_r[v]
                .iter()
                .map(|r| to_int(r, &scale))
                .collect::<Result<_, _>>()?,
        );
    }
    // Every partial sum stays below 2^120: no overflow anywhere.
    to_int(&bound, &scale)?;
    Ok(Compiled {
        scale,
        order: order(p)?,
        choices,
        places,
        fac_cost,
        free,
        terminal,
        has_consumers: consumers.iter().map(|c| !c.is_empty()).collect(),
    })
}

/// The most states one step of the programme may hold before the search gives up.
pub const MAX_STATES: usize = 400_000;

/// One DP entry: cost, parent entry in the previous layer, choice taken.
#[derive(Clone, Copy)]
struct Entry {
    cost: i128,
    parent: u32,
    choice: u32,
}

type State = Vec<(u16, u64)>;

/// Runs the programme. `restrict[v]`, where set, limits operator `v` to those choice
/// positions; `keep` stays live to the end (a table's output boundary). Returns, per final
/// state, its cost and the assignment (choice positions per operator).
fn run(
    p: &Problem,
    c: &Compiled,
    restrict: &BTreeMap<usize, Vec<usize>>,
    keep: Option<usize>,
    bound: Option<i128>,
) -> Result<Vec<(State, i128, Vec<usize>)>, String> {
    let n = p.ops.len();
    let mut remaining: Vec<usize> = vec![0; n];
    for o in &p.ops {
        for i in &o.inputs {
            if let Some(q) = i.from {
                remaining[q] += 1;
            }
        }
    }
    // Lower bound of the rest: cheapest allowed choice of each operator still to place.
    let mut rest = vec![0i128; n + 1];
    for (s, &v) in c.order.iter().enumerate().rev() {
        let cheapest = allowed(c, restrict, v)
            .map(|i| c.choices[v][i].cost)
            .min()
            .unwrap_or(0);
        rest[s] = rest[s + 1] + cheapest;
    }
    let mut live: Vec<usize> = Vec::new();
    let mut entries: Vec<Vec<Entry>> = vec![vec![Entry {
        cost: 0,
        parent: 0,
        choice: 0,
    }]];
    let mut states: Vec<Vec<State>> = vec![vec![Vec::new()]];
    for (step, &v) in c.order.iter().enumerate() {
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
        let stays = c.has_consumers[v] || keep == Some(v);
        let mut next_live: Vec<usize> =
            live.iter().copied().filter(|q| !ends.contains(q)).collect();
        if stays {
            next_live.push(v);
        }
        let slot_of: HashMap<usize, usize> =
            live.iter().enumerate().map(|(i, q)| (*q, i)).collect();
        let keep_slots: Vec<usize> = live
            .iter()
            .enumerate()
            .filter(|(_, q)| !ends.contains(q))
            .map(|(i, _)| i)
            .collect();
        let mut next_map: HashMap<State, usize> = HashMap::new();
        let mut next_entries: Vec<Entry> = Vec::new();
        let mut next_states: Vec<State> = Vec::new();
        let opts: Vec<usize> = allowed(c, restrict, v).collect();
        let last = states.len() - 1;
        for (si, state) in states[last].iter().enumerate() {
            let base = entries[last][si].cost;
            for &ci in &opts {
                let ch = &c.choices[v][ci];
                let mut cost = base + ch.cost;
                let mut st = state.clone();
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
                if !stays {
                    cost += c.terminal[v][ch.out as usize];
                }
                if bound.is_some_and(|b| cost + rest[step + 1] > b) {
                    continue;
                }
                let mut ns: State = keep_slots.iter().map(|&i| st[i]).collect();
                if stays {
                    ns.push((ch.out, 0));
                }
                let e = Entry {
                    cost,
                    parent: si as u32,
                    choice: ci as u32,
                };
                match next_map.get(&ns) {
                    Some(&k) => {
                        if cost < next_entries[k].cost {
                            next_entries[k] = e;
                        }
                    }
                    None => {
                        next_map.insert(ns.clone(), next_entries.len());
                        next_entries.push(e);
                        next_states.push(ns);
                    }
                }
            }
        }
        if next_states.len() > MAX_STATES {
            return Err(format!(
                "the exact search of `{}` needs more than {MAX_STATES} states at `{}`",
                p.name, p.ops[v].name
            ));
        }
        live = next_live;
        entries.push(next_entries);
        states.push(next_states);
    }
    let last = states.len() - 1;
    let mut out = Vec::new();
    for (si, st) in states[last].iter().enumerate() {
        let mut picks = vec![0usize; n];
        let mut k = si;
        for step in (0..n).rev() {
            let e = entries[step + 1][k];
            picks[c.order[step]] = e.choice as usize;
            k = e.parent as usize;
        }
        out.push((st.clone(), entries[last][si].cost, picks));
    }
    Ok(out)
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
pub fn solve(p: &Problem) -> Result<Solution, String> {
    solve_within(p, None)?.ok_or_else(|| format!("`{}` has no valid layout", p.name))
}

/// The exact optimum among layouts costing at most `bound` (None: no layout does).
pub fn solve_within(p: &Problem, bound: Option<&Rational>) -> Result<Option<Solution>, String> {
    let c = compile(p)?;
    let b = match bound {
        Some(r) => {
            // Round up so that a layout costing exactly `bound` survives.
            let scaled = r * Rational::from_integer(c.scale.clone());
            Some(
                scaled
                    .ceil()
                    .to_integer()
                    .to_i128()
                    .ok_or("bound too large")?,
            )
        }
        None => None,
    };
    let mut best: Option<(i128, Vec<usize>)> = None;
    let mut consider = |res: Vec<(State, i128, Vec<usize>)>| {
        for (_, cost, picks) in res {
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, picks));
            }
        }
    };
    match p.cycle {
        Some((s, e)) => {
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
                consider(run(p, &c, &restrict, None, b)?);
            }
        }
        None => consider(run(p, &c, &BTreeMap::new(), None, b)?),
    }
    Ok(best.map(|(cost, picks)| Solution {
        cost: rational(cost, &c.scale),
        assignment: picks
            .iter()
            .enumerate()
            .map(|(v, &i)| c.choices[v][i].choice.clone())
            .collect(),
    }))
}

/// The table of a problem between source `entry` (rows: its placements) and operator `exit`
/// (columns: its output placements; no consumers, its output handed on). The problem's cycle,
/// if any, is ignored: the table is what repeats.
pub fn table(p: &Problem, entry: usize, exit: usize) -> Result<Table, String> {
    if entry >= p.ops.len() || exit >= p.ops.len() {
        return Err("table boundary out of range".into());
    }
    let mut q = p.clone();
    q.cycle = None;
    q.ops[exit].terminal = false;
    let c = compile(&q)?;
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
        for (st, v, _) in run(&q, &c, &restrict, Some(exit), None)? {
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
) -> Result<(BTreeMap<String, Option<String>>, Rational), String> {
    if tp == 0 {
        return Err("tp must be at least 1".into());
    }
    let axes = Problem::tp_axis(tp, gpus_per_node, calib);
    let mut known: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut layout = BTreeMap::new();
    let mut total = Rational::zero();
    for (bi, block) in model.blocks.iter().enumerate() {
        let p = Problem::from_block(model, bi, values, axes.clone(), &known)?;
        let s = solve(&p)?;
        let repeat = block.repeat.eval(values).map_err(|e| e.to_string())?;
        total += repeat * &s.cost;
        for (v, o) in p.ops.iter().enumerate() {
            if o.is_source() {
                continue;
            }
            let pr = p.price(v, &s.assignment[v])?;
            known.insert(
                o.name.clone(),
                pr.out.iter().map(|x| p.place_label(*x)).collect(),
            );
            let index = s.assignment[v]
                .first()
                .copied()
                .flatten()
                .map(|c| o.cuts[c].index.clone());
            layout.insert(o.name.clone(), index);
        }
    }
    Ok((layout, total))
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
pub fn polish(p: &Problem, start: &[Choice]) -> Result<Solution, String> {
    let priced = price_all(p)?;
    let mut pick: Vec<usize> = Vec::with_capacity(p.ops.len());
    for (v, c) in start.iter().enumerate() {
        let i = priced
            .get(v)
            .and_then(|list| list.iter().position(|(x, _)| x == c))
            .ok_or_else(|| format!("invalid choice for `{}`", p.ops[v].name))?;
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
    let mut best = cost_of(&pick).ok_or("the starting layout is invalid")?;
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
