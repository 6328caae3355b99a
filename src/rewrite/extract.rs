//! Extracting the cheapest program from an e-graph, pricing each value once (a DAG), exactly.
//!
//! Tree extraction prices a shared value once per use, which cannot see that two consumers of
//! one sharded value should agree on its layout. The greedy DAG extraction here gives every
//! class the set of classes its best program computes, unions those sets over the children and
//! prices each class once; a local search then takes, class by class from the root down, any
//! other node that lowers the cost of the whole program.

use super::analysis::{DistEGraph, Meta};
use super::cost::{ExactCost, Score, Weights};
use super::lang::Dist;
use crate::sym::{Bindings, Rational};
use egg::{Id, Language, RecExpr};
use std::collections::HashMap;

/// Passes of improvement at most.
const MAX_PASSES: usize = 8;

/// The best node of each class with the classes its program computes and their costs.
struct Best {
    node: Dist,
    set: HashMap<Id, Rational>,
    total: Rational,
}

/// The cheapest program in `root`'s class under `values`, its cost, and each node's class.
pub fn extract(
    egraph: &DistEGraph,
    root: Id,
    values: &Bindings,
    weights: Weights,
) -> (Score, RecExpr<Dist>, Vec<Id>) {
    let root = egraph.find(root);
    let mut cost = ExactCost::new(egraph, values, weights);
    let mut choice = greedy_dag(egraph, &mut cost);
    let mut best = dag_cost(egraph, root, &choice, &mut cost).unwrap_or(Score::Unknown);
    for _ in 0..MAX_PASSES {
        let Some(order) = dag_order(egraph, root, &choice) else {
            break;
        };
        let mut improved = false;
        for class in order.into_iter().rev() {
            for node in &egraph[class].nodes {
                if choice.get(&class) == Some(node) {
                    continue;
                }
                let old = choice.insert(class, node.clone());
                match dag_cost(egraph, root, &choice, &mut cost) {
                    Some(c) if c < best => {
                        best = c;
                        improved = true;
                    }
                    _ => {
                        if let Some(old) = old {
                            choice.insert(class, old);
                        }
                    }
                }
            }
        }
        if !improved {
            break;
        }
    }
    let (expr, classes) = build(egraph, root, &choice);
    (best, expr, classes)
}

/// The union of `kids`' programs (a class priced as the first kid that holds it prices it) and
/// `class` at `own`, with its total. The largest set is copied whole with its total, so that only
/// the classes the others add are summed again.
fn union(kids: &[&Best], class: Id, own: Rational) -> (HashMap<Id, Rational>, Rational) {
    let big = (0..kids.len())
        .max_by_key(|&i| (kids[i].set.len(), std::cmp::Reverse(i)))
        .unwrap_or(0);
    let (mut set, mut total) = match kids.get(big) {
        Some(k) => (k.set.clone(), k.total.clone()),
        None => (HashMap::new(), Rational::from_integer(0.into())),
    };
    let mut claimed: std::collections::HashSet<Id> = std::collections::HashSet::new();
    for (i, k) in kids.iter().enumerate() {
        if i == big {
            continue;
        }
        for (c, v) in &k.set {
            if i > big || !claimed.insert(*c) {
                if let std::collections::hash_map::Entry::Vacant(e) = set.entry(*c) {
                    total += v;
                    e.insert(v.clone());
                }
                continue;
            }
            match set.insert(*c, v.clone()) {
                Some(old) if old != *v => total += v - &old,
                Some(_) => {}
                None => total += v,
            }
        }
    }
    total += &own;
    set.insert(class, own);
    (set, total)
}

fn repeat_count(egraph: &DistEGraph, node: &Dist) -> Option<u64> {
    match node {
        Dist::Repeat([n, _]) => match &egraph[*n].data {
            Meta::Leaf(Dist::Num(n)) => Some(*n),
            _ => None,
        },
        _ => None,
    }
}

/// Greedy DAG extraction to a fixpoint: a node's program is itself plus the union of its
/// children's programs, each class priced once (a `repeat`'s body counted as often as it runs).
fn greedy_dag(egraph: &DistEGraph, cost: &mut ExactCost) -> HashMap<Id, Dist> {
    let mut best: HashMap<Id, Best> = HashMap::new();
    loop {
        let mut changed = false;
        for class in egraph.classes() {
            for node in &class.nodes {
                let Score::Finite(own) = cost.own(node) else {
                    continue;
                };
                let Some(kids) = node
                    .children()
                    .iter()
                    .map(|c| best.get(&egraph.find(*c)))
                    .collect::<Option<Vec<_>>>()
                else {
                    continue;
                };
                let (set, total) = match repeat_count(egraph, node) {
                    Some(n) => {
                        let body = kids[1];
                        let total = &own + &body.total * Rational::from_integer(n.into());
                        (HashMap::from([(class.id, total.clone())]), total)
                    }
                    // A child whose program computes this class already is a cycle
                    // (`x = all_gather(shard(x))`): its set prices this class at the node it
                    // had, so taking the node would count a cheaper program that cannot run.
                    None if kids.iter().any(|k| k.set.contains_key(&class.id)) => continue,
                    None => union(&kids, class.id, own),
                };
                let better = best.get(&class.id).is_none_or(|b| total < b.total);
                if better {
                    best.insert(
                        class.id,
                        Best {
                            node: node.clone(),
                            set,
                            total,
                        },
                    );
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    // Classes no finite program reaches keep any node, so that a choice always exists.
    egraph
        .classes()
        .map(|c| {
            let node = best
                .remove(&c.id)
                .map(|b| b.node)
                .unwrap_or_else(|| c.nodes[0].clone());
            (c.id, node)
        })
        .collect()
}

/// The classes reachable from `root` under `choice`, children before parents; `None` when the
/// choice has a cycle.
fn dag_order(egraph: &DistEGraph, root: Id, choice: &HashMap<Id, Dist>) -> Option<Vec<Id>> {
    // Absent: unseen; false: on the stack; true: done.
    let mut done: HashMap<Id, bool> = HashMap::new();
    let mut order = Vec::new();
    let mut todo = vec![(root, false)];
    while let Some((class, ready)) = todo.pop() {
        if ready {
            done.insert(class, true);
            order.push(class);
            continue;
        }
        match done.get(&class) {
            Some(true) => continue,
            Some(false) => return None,
            None => {}
        }
        done.insert(class, false);
        todo.push((class, true));
        for &c in choice.get(&class)?.children() {
            let c = egraph.find(c);
            match done.get(&c) {
                Some(false) => return None,
                Some(true) => {}
                None => todo.push((c, false)),
            }
        }
    }
    Some(order)
}

/// The cost of the program `choice` picks, each class once per execution.
fn dag_cost(
    egraph: &DistEGraph,
    root: Id,
    choice: &HashMap<Id, Dist>,
    cost: &mut ExactCost,
) -> Option<Score> {
    let order = dag_order(egraph, root, choice)?;
    let mut times: HashMap<Id, u64> = HashMap::from([(root, 1)]);
    let mut total = Score::Finite(Rational::default());
    for &class in order.iter().rev() {
        let node = &choice[&class];
        let here = times.get(&class).copied().unwrap_or(1);
        total = total.add(&cost.own(node).times(here));
        let n = repeat_count(egraph, node);
        for (k, &c) in node.children().iter().enumerate() {
            let m = match (n, k) {
                (Some(n), 1) => here.saturating_mul(n),
                _ => here,
            };
            let slot = times.entry(egraph.find(c)).or_insert(0);
            *slot = (*slot).max(m);
        }
    }
    Some(total)
}

fn build(egraph: &DistEGraph, root: Id, choice: &HashMap<Id, Dist>) -> (RecExpr<Dist>, Vec<Id>) {
    let mut expr = RecExpr::default();
    let mut classes = Vec::new();
    let mut memo: HashMap<Id, Id> = HashMap::new();
    for class in dag_order(egraph, root, choice).unwrap_or_default() {
        let n = choice[&class]
            .clone()
            .map_children(|c| memo[&egraph.find(c)]);
        memo.insert(class, expr.add(n));
        classes.push(class);
    }
    (expr, classes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::analysis::{DistAnalysis, Mesh};
    use crate::rewrite::run::{rewrites, Limits};
    use crate::sym::Poly;
    use egg::EGraph;

    #[test]
    fn the_cheapest_equivalent_is_extracted() {
        let mesh = Mesh::new([("a".to_string(), Poly::int(4))]);
        let mut g = EGraph::new(DistAnalysis::new([], mesh, 2));
        let e: RecExpr<Dist> = "(all_gather (all_to_all (shard (tensor x [8,8]) 0 a) 0 1 a) 1 a)"
            .parse()
            .unwrap();
        let root = g.add_expr(&e);
        let runner = Limits::default().runner(g).run(&rewrites([]).unwrap());
        let (score, best, classes) =
            extract(&runner.egraph, root, &Bindings::new(), Weights::default());
        assert_eq!(best.to_string(), "(tensor x [8,8])");
        assert_eq!(score, Score::Finite(Rational::default()));
        assert_eq!(classes.len(), best.as_ref().len());
    }
}
