//! Repeated identical layers of an imported graph: runs of operators that repeat with the same
//! rules, sizes and wiring, each layer reading only the previous one's output, become one
//! `repeat` block, so that an imported transformer is analysed layer by layer as a shipped one.

use super::onnx_map::Emit;
use std::collections::BTreeMap;

/// A run of `count` identical layers of `period` operators starting at operator `start`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Repeat {
    /// The first operator of the first layer.
    pub start: usize,
    /// Operators per layer.
    pub period: usize,
    /// Layers.
    pub count: usize,
    /// What the first layer reads from before it (a graph input or an earlier operator).
    pub input: String,
}

/// The layer's shape of operator `k` of a layer starting at `from`: its rule, sizes and inputs,
/// an input inside the layer by its offset, the one outside it as `in`; `None` when the
/// operator ties a parameter or reads a second tensor from outside the layer.
fn signature(
    ops: &[Emit],
    at: &BTreeMap<&str, usize>,
    from: usize,
    k: usize,
    outside: &mut Option<String>,
) -> Option<String> {
    let e = &ops[from + k];
    if !e.tied.is_empty() {
        return None;
    }
    let mut s = format!("{}|", e.rule);
    for (name, v) in &e.bind {
        s.push_str(&format!("{name}={v},"));
    }
    s.push('|');
    for (slot, src) in &e.ins {
        match at.get(src.as_str()) {
            Some(&i) if i >= from && i < from + k => s.push_str(&format!("{slot}=@{},", i - from)),
            _ => {
                if outside.as_deref().is_some_and(|o| o != src) {
                    return None;
                }
                *outside = Some(src.clone());
                s.push_str(&format!("{slot}=in,"));
            }
        }
    }
    Some(s)
}

/// The signatures of the layer starting at `from` and what it reads from outside.
fn layer(
    ops: &[Emit],
    at: &BTreeMap<&str, usize>,
    from: usize,
    period: usize,
) -> Option<(Vec<String>, String)> {
    let mut outside = None;
    let sigs = (0..period)
        .map(|k| signature(ops, at, from, k, &mut outside))
        .collect::<Option<Vec<_>>>()?;
    Some((sigs, outside?))
}

/// The longest run of identical layers (most operators saved), if any of at least two layers.
pub(super) fn find(ops: &[Emit]) -> Option<Repeat> {
    let at: BTreeMap<&str, usize> = ops
        .iter()
        .enumerate()
        .map(|(i, e)| (e.name.as_str(), i))
        .collect();
    // Who reads each operator (by input or tie), to keep a layer's inside private.
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); ops.len()];
    for (j, e) in ops.iter().enumerate() {
        let refs = e.ins.iter().map(|(_, s)| s.as_str());
        let ties = e.tied.iter().filter_map(|(_, s)| s.split('.').next());
        for src in refs.chain(ties) {
            if let Some(&i) = at.get(src) {
                readers[i].push(j);
            }
        }
    }
    let mut best: Option<Repeat> = None;
    let n = ops.len();
    for start in 0..n {
        for period in 1..=(n - start) / 2 {
            let saved_max = ((n - start) / period - 1) * period;
            if best
                .as_ref()
                .is_some_and(|b| (b.count - 1) * b.period >= saved_max)
            {
                continue;
            }
            // Cheap first: the next layer's rules and sizes, stopping at the first difference.
            let same = |k: usize| {
                let (a, b) = (&ops[start + k], &ops[start + period + k]);
                a.rule == b.rule && a.bind == b.bind
            };
            if !(0..period).all(same) {
                continue;
            }
            let Some((first, input)) = layer(ops, &at, start, period) else {
                continue;
            };
            let mut count = 1;
            while start + (count + 1) * period <= n {
                let from = start + count * period;
                match layer(ops, &at, from, period) {
                    Some((sigs, reads)) if sigs == first && reads == ops[from - 1].name => {
                        count += 1
                    }
                    _ => break,
                }
            }
            // Trim layers until only the last layer's last operator is read from outside.
            while count >= 2 && !private(&readers, start, period, count) {
                count -= 1;
            }
            if count >= 2
                && best
                    .as_ref()
                    .is_none_or(|b| (count - 1) * period > (b.count - 1) * b.period)
            {
                best = Some(Repeat {
                    start,
                    period,
                    count,
                    input: input.clone(),
                });
            }
        }
    }
    best
}

/// Whether the operators of `count` layers are read only inside their layer, by the next layer
/// (the last operator of a layer), or after the run (the last operator of the last layer).
fn private(readers: &[Vec<usize>], start: usize, period: usize, count: usize) -> bool {
    let end = start + period * count;
    (start..end).all(|i| {
        let layer_end = start + ((i - start) / period + 1) * period;
        let last = i + 1 == layer_end;
        readers[i].iter().all(|&j| {
            let inside = j > i && j < layer_end;
            let next = last && layer_end < end && (layer_end..layer_end + period).contains(&j);
            let after = last && layer_end == end && j >= end;
            inside || next || after
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sym::Poly;

    fn op(name: &str, rule: &'static str, h: i64, x: &str) -> Emit {
        Emit {
            name: name.into(),
            rule,
            bind: vec![("b", Poly::int(4)), ("h", Poly::int(h))],
            ins: vec![("x", x.into())],
            tied: vec![],
            doc: String::new(),
        }
    }

    /// 48 layers of 40 operators: found once, in well under a second even unoptimised.
    #[test]
    fn long_graphs_are_searched_quickly() {
        let mut ops = vec![op("embed", "scale", 8, "x")];
        for l in 0..48 {
            for k in 0..40 {
                let prev = ops.last().map(|e| e.name.clone()).unwrap_or_default();
                let rule = if k % 2 == 0 { "tanh" } else { "relu" };
                ops.push(op(&format!("l{l}_{k}"), rule, 8 + k as i64, &prev));
            }
        }
        let t = std::time::Instant::now();
        let r = find(&ops).unwrap();
        assert_eq!((r.start, r.period, r.count), (1, 40, 48));
        assert!(t.elapsed().as_secs_f64() < 5.0, "{:?}", t.elapsed());
    }

    #[test]
    fn identical_layers_are_found_and_different_ones_are_not() {
        let ops = vec![
            op("a", "scale", 8, "x"),
            op("l0a", "tanh", 8, "a"),
            op("l0b", "relu", 8, "l0a"),
            op("l1a", "tanh", 8, "l0b"),
            op("l1b", "relu", 8, "l1a"),
            op("l2a", "tanh", 8, "l1b"),
            op("l2b", "relu", 8, "l2a"),
            op("out", "scale", 8, "l2b"),
        ];
        let r = find(&ops).unwrap();
        assert_eq!(
            (r.start, r.period, r.count, r.input.as_str()),
            (1, 2, 3, "a")
        );
        // A layer whose sizes differ ends the run.
        let mut ops = ops;
        ops[5].bind[1].1 = Poly::int(16);
        let r = find(&ops).unwrap();
        assert_eq!((r.start, r.period, r.count), (1, 2, 2));
        // Read from outside the run inside a layer: not repeatable.
        ops.push(op("peek", "relu", 8, "l0a"));
        assert_eq!(find(&ops), None);
    }
}
