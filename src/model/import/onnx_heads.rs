//! Attention heads written as symbols. An exported transformer holds its feature sizes as
//! numbers (768, 2304, 3072, 12, 64), and the split search cuts only symbols: a graph whose
//! hidden size is a number has no feature it could split over tensor-parallel devices. When the
//! graph reshapes a hidden vector into heads (`[…, H]` → `[…, NH, D]`, H = NH·D a size the
//! graph's weights use), the import writes the hidden size and the head count as the symbols `H`
//! and `NH`: a multiple k·H of the hidden size becomes `k*H` (the fused query-key-value
//! projection 3·H, the MLP's 4·H), a multiple of NH beside the batch or sequence becomes a
//! multiple of `NH` (`12*B` → `NH*B`), the head count alone becomes `NH` and the head size
//! `H/NH`, as the shipped families write them. The split search then decomposes `H`
//! heads-major into `NH` and `H/NH`, so a cut of the hidden size by heads is a cut of the heads.
//! The values are unchanged; only the search's view of them is.

use super::onnx_map::Emit;
use crate::sym::{Monomial, Poly, Rational};
use num_traits::ToPrimitive;

/// The head count and head size, where the graph reshapes a hidden size it uses into heads.
pub(super) struct Heads {
    /// Attention heads.
    pub heads: i64,
    /// The size of one head.
    pub head_dim: i64,
    /// The operator whose reshape shows them.
    pub seen: String,
}

fn constant(p: &Poly) -> Option<i64> {
    p.as_constant()
        .filter(|c| c.is_integer())
        .and_then(|c| c.to_integer().to_i64())
}

/// The most frequent head reshape of `ops` whose hidden size (heads × head size) some weight
/// of the graph uses as an input dimension (a linear's or matmul's `k`), if any.
pub(super) fn find(ops: &[Emit]) -> Option<Heads> {
    let hidden: Vec<i64> = ops
        .iter()
        .filter(|e| matches!(e.rule, "linear" | "matmul"))
        .filter_map(|e| bind(e, "k").as_ref().and_then(constant))
        .collect();
    let mut seen: Vec<((i64, i64), usize, String)> = Vec::new();
    for e in ops.iter().filter(|e| e.rule == "reshape") {
        let get = |name: &str| bind(e, name).as_ref().and_then(constant);
        let (Some(n), Some(d)) = (get("n"), get("d")) else {
            continue;
        };
        if n < 2 || d < 2 || !hidden.contains(&(n * d)) {
            continue;
        }
        match seen.iter_mut().find(|(k, _, _)| *k == (n, d)) {
            Some(x) => x.1 += 1,
            None => seen.push(((n, d), 1, e.name.clone())),
        }
    }
    let ((heads, head_dim), _, seen) = seen.into_iter().max_by_key(|(_, c, _)| *c)?;
    Some(Heads {
        heads,
        head_dim,
        seen,
    })
}

/// `p` with the hidden size and head count written as the symbols `[hidden, nh]` (see the
/// module documentation). Each term is rewritten by its integer coefficient alone.
pub(super) fn rewrite(p: &Poly, h: &Heads, [hidden_sym, nh]: [&str; 2]) -> Poly {
    let hidden = h.heads * h.head_dim;
    let mut out = Poly::zero();
    for (m, c) in p.terms() {
        let Some(c_int) = c.is_integer().then(|| c.to_integer().to_i64()).flatten() else {
            out.add_term(m.clone(), c.clone());
            continue;
        };
        let (k, extra): (i64, Vec<(&str, i32)>) = if c_int != 0 && c_int % hidden == 0 {
            (c_int / hidden, vec![(hidden_sym, 1)])
        } else if c_int % h.heads == 0 && c_int != 0 && (!m.is_one() || c_int == h.heads) {
            (c_int / h.heads, vec![(nh, 1)])
        } else if c_int == h.head_dim && m.is_one() {
            (1, vec![(hidden_sym, 1), (nh, -1)])
        } else {
            out.add_term(m.clone(), c.clone());
            continue;
        };
        let mono = m.mul(&Monomial::from_exponents(extra));
        out.add_term(mono, Rational::from_integer(k.into()));
    }
    if out.is_zero() && !p.is_zero() {
        return p.clone();
    }
    out
}

/// Every size `ops` bind written with the symbols `syms` ([`rewrite`]), but the rows of a
/// table (vocabulary, positions), which are no feature whatever their size.
pub(super) fn symbolize(ops: &mut [Emit], h: &Heads, syms: [&str; 2]) {
    for e in ops {
        let table = e.rule == "embedding";
        for (k, v) in &mut e.bind {
            if !(table && *k == "v") {
                *v = rewrite(v, h, syms);
            }
        }
    }
}

/// A fused projection whose output a view hands to a split into equal pieces along its last
/// dimension, and that nothing else reads (GPT-2's query-key-value `c_attn`, as the TorchScript
/// exporter writes it), is written as one projection per piece, each reading the same input,
/// with the view per piece: the same FLOPs and parameters, and each piece can be split by
/// columns, as the shipped families' separate projections can (a column split of the fused
/// output would cut each piece in strides). The views keep the names of the split's outputs;
/// new names come from `alloc`. Returns how many fused projections were written so.
pub(super) fn unfuse_split_projections(
    ops: &mut Vec<Emit>,
    alloc: &mut dyn FnMut(&str) -> String,
) -> usize {
    let mut done = 0;
    let mut i = 0;
    while i < ops.len() {
        if ops[i].rule != "split" {
            i += 1;
            continue;
        }
        // The pieces of one ONNX Split: consecutive `split` operators of the same node.
        let doc = ops[i].doc.clone();
        let x = input(&ops[i], "x");
        let end = (i..ops.len())
            .take_while(|&j| {
                ops[j].rule == "split" && ops[j].doc == doc && input(&ops[j], "x") == x
            })
            .last()
            .map_or(i + 1, |j| j + 1);
        match unfuse_at(ops, i, end, alloc) {
            Some(next) => {
                done += 1;
                i = next;
            }
            None => i = end,
        }
    }
    done
}

fn input(e: &Emit, slot: &str) -> Option<String> {
    e.ins
        .iter()
        .find(|(k, _)| *k == slot)
        .map(|(_, v)| v.clone())
}

fn bind(e: &Emit, name: &str) -> Option<Poly> {
    e.bind
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.clone())
}

/// `e` with index `name` bound to `size` instead.
fn rebound(e: &Emit, name: &str, size: &Poly) -> Emit {
    let mut out = e.clone();
    for (k, v) in &mut out.bind {
        if *k == name {
            *v = size.clone();
        }
    }
    out
}

/// Unfuses the projection the split pieces `ops[start..end]` read through a view, when the
/// pattern holds; returns where to continue.
fn unfuse_at(
    ops: &mut Vec<Emit>,
    start: usize,
    end: usize,
    alloc: &mut dyn FnMut(&str) -> String,
) -> Option<usize> {
    let pieces = end - start;
    let m = bind(&ops[start], "m")?;
    let b = bind(&ops[start], "b");
    if pieces < 2
        || ops[start..end]
            .iter()
            .any(|e| bind(e, "m").as_ref() != Some(&m) || bind(e, "b") != b)
    {
        return None;
    }
    let readers = |name: &str| {
        ops.iter()
            .filter(|e| e.ins.iter().any(|(_, v)| v == name))
            .count()
    };
    let at = |name: &str| ops.iter().position(|e| e.name == name);
    let view = at(&input(&ops[start], "x")?).filter(|&v| ops[v].rule == "view")?;
    let proj = at(&input(&ops[view], "x")?)?;
    let p = &ops[proj];
    let tied_to_it = ops.iter().any(|e| {
        e.tied
            .iter()
            .any(|(_, t)| t.split('.').next() == Some(p.name.as_str()))
    });
    if !matches!(p.rule, "linear" | "matmul")
        || bind(p, "n")? != &m * &Poly::int(pieces as i64)
        || !p.tied.is_empty()
        || tied_to_it
        || readers(&p.name) != 1
        || readers(&ops[view].name) != pieces
    {
        return None;
    }
    let mut new = Vec::new();
    for (k, piece) in ops[start..end].iter().enumerate() {
        let mut lin = rebound(p, "n", &m);
        lin.name = alloc(&format!("{}_piece{}", p.name, k + 1));
        lin.doc = format!(
            "{}, columns of piece {} of {pieces} (the fused projection written per piece of {})",
            p.doc,
            k + 1,
            piece.doc
        );
        let mut w = rebound(&ops[view], "h", &m);
        w.name = piece.name.clone();
        w.doc = format!(
            "{} (piece {} of {pieces}, a view of its projection)",
            piece.doc,
            k + 1
        );
        w.ins = vec![("x", lin.name.clone())];
        new.push(lin);
        new.push(w);
    }
    // Remove the pieces, the view and the projection (highest positions first), and put the
    // per-piece operators where the projection was.
    let mut gone: Vec<usize> = (start..end).chain([view, proj]).collect();
    gone.sort_unstable();
    for &g in gone.iter().rev() {
        ops.remove(g);
    }
    let added = new.len();
    let before = |i: usize| gone.iter().filter(|&&g| g < i).count();
    let place = proj - before(proj);
    ops.splice(place..place, new);
    Some(start - before(start) + added)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Poly {
        Poly::parse(s).unwrap()
    }

    /// GPT-2's sizes (12 heads of 64): multiples of the hidden size become multiples of `H`,
    /// multiples of the heads beside a symbol multiples of `NH`, the head size `H/NH`; other
    /// numbers (the vocabulary) stay, and the values never change.
    #[test]
    fn sizes_become_symbols_with_the_same_values() {
        let h = Heads {
            heads: 12,
            head_dim: 64,
            seen: "reshape".into(),
        };
        let syms = ["H", "NH"];
        for (from, to) in [
            ("768", "H"),
            ("2304", "3*H"),
            ("3072*B*S", "4*H*B*S"),
            ("12*B", "NH*B"),
            ("12", "NH"),
            ("64", "H/NH"),
            ("50257", "50257"),
            ("B*S", "B*S"),
            ("768*S + 1", "H*S + 1"),
        ] {
            let got = rewrite(&p(from), &h, syms);
            assert_eq!(got, p(to), "{from}");
            let at: std::collections::BTreeMap<String, Poly> = [
                ("H".to_string(), Poly::int(768)),
                ("NH".to_string(), Poly::int(12)),
            ]
            .into_iter()
            .collect();
            assert_eq!(
                got.substitute_all(&at).unwrap(),
                p(from),
                "{from}: the value changed"
            );
        }
    }
}
