//! The language of distributed tensor programs: operator applications by rule name, placements
//! (`shard`, `replicate`, `partial`), collectives, point-to-point transfers, `seq` and `repeat`.
//!
//! Every value is an SPMD value on a device mesh: each device holds a local tensor, and the value's
//! placement on each mesh axis (the e-class analysis, [`super::analysis`]) says which global
//! tensor the local pieces stand for. Operator nodes carry the *global* extents of their rule's
//! indices; what one device computes follows from its inputs' placements and the law table.
//!
//! Attributes are leaves so that patterns can match them with variables: sizes ([`Extents`]),
//! statistic and halo splits ([`Marks`]), input shapes ([`ShapeLit`]), dimension maps
//! ([`DimMap`]), dimension numbers, repeat counts and names (rules, tensors, mesh axes).

use crate::sym::Poly;
use egg::{define_language, Id, Symbol};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

define_language! {
    /// A distributed tensor program. The forms, in s-expression syntax:
    ///
    /// | form | meaning |
    /// |---|---|
    /// | `(op RULE {i=SIZE,..} <i@axis,..> x..)` | apply operator rule `RULE`; `<..>` lists the stat / window indices split with their statistics or halo exchanged on an axis |
    /// | `(tensor NAME [D,..])` | a whole tensor on every device (`[D]:8` for 8-byte elements) |
    /// | `(view x [D,..] \|d>e,..\|)` | the same elements in another layout; a shard of dimension `d` becomes one of `e` |
    /// | `(shard x DIM AXIS)` | keep this device's block of dimension `DIM` of a whole tensor |
    /// | `(replicate x AXIS)` | `x`, asserted whole on every device of `AXIS` |
    /// | `(partial x AXIS)` | `x` on the first device of `AXIS`, zeros elsewhere: a partial sum |
    /// | `(all_reduce x AXIS)`, `(all_reduce_max x AXIS)` | finish partial sums (maxima) |
    /// | `(reduce_scatter x DIM AXIS)` | finish partial sums, keeping one block of `DIM` |
    /// | `(all_gather x DIM AXIS)` | concatenate the blocks of `DIM` |
    /// | `(all_to_all x FROM TO AXIS)` | re-shard from dimension `FROM` to `TO` |
    /// | `(send x AXIS)`, `(recv x AXIS)` | a point-to-point transfer to the next stage of `AXIS` |
    /// | `(seq a b)` | run `a`, then `b`; the value is `b` |
    /// | `(repeat N body)` | `body` applied `N` times, its `(tensor in ..)` being the previous result |
    #[allow(missing_docs)]
    pub enum Dist {
        "op" = Op(Box<[Id]>),
        "tensor" = Tensor([Id; 2]),
        "view" = View([Id; 3]),
        "shard" = Shard([Id; 3]),
        "replicate" = Replicate([Id; 2]),
        "partial" = Partial([Id; 2]),
        "all_reduce" = AllReduce([Id; 2]),
        "all_reduce_max" = AllReduceMax([Id; 2]),
        "reduce_scatter" = ReduceScatter([Id; 3]),
        "all_gather" = AllGather([Id; 3]),
        "all_to_all" = AllToAll([Id; 4]),
        "send" = Send([Id; 2]),
        "recv" = Recv([Id; 2]),
        "seq" = Seq([Id; 2]),
        "repeat" = Repeat([Id; 2]),
        Num(u64),
        Extents(Extents),
        Marks(Marks),
        Shape(ShapeLit),
        Layout(DimMap),
        Name(Symbol),
    }
}

impl Dist {
    /// Whether this node is an attribute leaf rather than a tensor-valued form.
    pub fn is_leaf(&self) -> bool {
        matches!(
            self,
            Dist::Num(_)
                | Dist::Extents(_)
                | Dist::Marks(_)
                | Dist::Shape(_)
                | Dist::Layout(_)
                | Dist::Name(_)
        )
    }
}

/// A size formula usable as a leaf: printed without spaces or parentheses, ordered by its terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Dim(pub Poly);

impl Ord for Dim {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.terms().cmp(other.0.terms())
    }
}

impl PartialOrd for Dim {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_atom(f, &self.0)
    }
}

impl FromStr for Dim {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Poly::parse(s).map(Dim).map_err(|e| e.to_string())
    }
}

/// Writes a formula as one atom: `2*B*S*H/t`, `oh-1`; it parses back to the same formula.
fn write_atom(f: &mut fmt::Formatter<'_>, p: &Poly) -> fmt::Result {
    use num_traits::{One, Signed};
    if p.is_zero() {
        return f.write_str("0");
    }
    for (n, (m, c)) in p.sorted_terms().into_iter().enumerate() {
        if c.is_negative() {
            f.write_str("-")?;
        } else if n > 0 {
            f.write_str("+")?;
        }
        let c = c.abs();
        let pos: Vec<(&str, i32)> = m.iter().filter(|(_, e)| *e > 0).collect();
        let neg: Vec<(&str, i32)> = m.iter().filter(|(_, e)| *e < 0).collect();
        let mut first = true;
        if !c.numer().is_one() || pos.is_empty() {
            write!(f, "{}", c.numer())?;
            first = false;
        }
        for (name, e) in pos {
            if !first {
                f.write_str("*")?;
            }
            first = false;
            write_power(f, name, e)?;
        }
        if !c.denom().is_one() {
            write!(f, "/{}", c.denom())?;
        }
        for (name, e) in neg {
            f.write_str("/")?;
            write_power(f, name, -e)?;
        }
    }
    Ok(())
}

fn write_power(f: &mut fmt::Formatter<'_>, name: &str, e: i32) -> fmt::Result {
    if e == 1 {
        f.write_str(name)
    } else {
        write!(f, "{name}^{e}")
    }
}

/// The global extent of each index and size parameter of an operator: `{b=B*S,k=H,n=H}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Extents(pub BTreeMap<String, Dim>);

impl Extents {
    /// The extents as formulas, for substitution into a rule's formulas.
    pub fn polys(&self) -> BTreeMap<String, Poly> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect()
    }
}

impl fmt::Display for Extents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (n, (k, v)) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}={v}")?;
        }
        f.write_str("}")
    }
}

impl FromStr for Extents {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let inner = s
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .ok_or_else(|| format!("`{s}` is not an extent list {{i=SIZE,..}}"))?;
        let mut out = BTreeMap::new();
        for part in inner.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected INDEX=SIZE"))?;
            if out.insert(k.to_string(), v.parse()?).is_some() {
                return Err(format!("index `{k}` given twice"));
            }
        }
        Ok(Extents(out))
    }
}

/// Stat and window indices an operator node splits, each with the mesh axis over which its
/// statistics are combined or its halo exchanged: `<n@a>`; `<>` when none.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Marks(pub BTreeSet<(String, String)>);

impl Marks {
    /// The index split on `axis`, if marked.
    pub fn on_axis(&self, axis: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(_, a)| a == axis)
            .map(|(i, _)| i.as_str())
    }

    /// These marks with `index@axis` added.
    pub fn with(&self, index: &str, axis: &str) -> Marks {
        let mut m = self.clone();
        m.0.insert((index.to_string(), axis.to_string()));
        m
    }
}

impl fmt::Display for Marks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<")?;
        for (n, (i, a)) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{i}@{a}")?;
        }
        f.write_str(">")
    }
}

impl FromStr for Marks {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let inner = s
            .strip_prefix('<')
            .and_then(|s| s.strip_suffix('>'))
            .ok_or_else(|| format!("`{s}` is not a mark list <index@axis,..>"))?;
        let mut out = BTreeSet::new();
        for part in inner.split(',').filter(|p| !p.is_empty()) {
            let (i, a) = part
                .split_once('@')
                .ok_or_else(|| format!("`{part}`: expected INDEX@AXIS"))?;
            out.insert((i.to_string(), a.to_string()));
        }
        Ok(Marks(out))
    }
}

/// The global shape of an input tensor, with its element size when it is not the compute type:
/// `[B*S,H]`, `[B*S]:8`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShapeLit {
    /// Global extents.
    pub dims: Vec<Dim>,
    /// Bytes per element, when fixed (token ids); `None`: the compute type.
    pub elem_bytes: Option<u32>,
    /// The dimension the tensor arrives split on along the mesh's first axis (`@D`: a block
    /// input that the layout hands over in shards); `None`: whole on every device.
    pub shard: Option<usize>,
}

impl fmt::Display for ShapeLit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (n, d) in self.dims.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")?;
        if let Some(b) = self.elem_bytes {
            write!(f, ":{b}")?;
        }
        if let Some(d) = self.shard {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl FromStr for ShapeLit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .strip_prefix('[')
            .ok_or_else(|| format!("`{s}` is not a shape [D,..]"))?;
        let (inner, tail) = rest
            .split_once(']')
            .ok_or_else(|| format!("`{s}`: missing `]`"))?;
        let (tail, shard) = match tail.split_once('@') {
            Some((t, d)) => (
                t,
                Some(
                    d.parse()
                        .map_err(|_| format!("`{s}`: expected `@DIM` after the shape"))?,
                ),
            ),
            None => (tail, None),
        };
        let elem_bytes = match tail {
            "" => None,
            t => Some(
                t.strip_prefix(':')
                    .and_then(|b| b.parse().ok())
                    .ok_or_else(|| format!("`{s}`: expected `:BYTES` after the shape"))?,
            ),
        };
        let dims = inner
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        Ok(ShapeLit {
            dims,
            elem_bytes,
            shard,
        })
    }
}

/// How a view moves sharded dimensions: `|1>0|` turns a shard of dimension 1 into one of
/// dimension 0; `||` when the view is only used on whole tensors.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DimMap(pub BTreeMap<usize, usize>);

impl fmt::Display for DimMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("|")?;
        for (n, (a, b)) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{a}>{b}")?;
        }
        f.write_str("|")
    }
}

impl FromStr for DimMap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let inner = s
            .strip_prefix('|')
            .and_then(|s| s.strip_suffix('|'))
            .ok_or_else(|| format!("`{s}` is not a dimension map |d>e,..|"))?;
        let mut out = BTreeMap::new();
        for part in inner.split(',').filter(|p| !p.is_empty()) {
            let pair = part
                .split_once('>')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
            let (a, b) = pair.ok_or_else(|| format!("`{part}`: expected FROM>TO"))?;
            out.insert(a, b);
        }
        Ok(DimMap(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egg::RecExpr;

    #[test]
    fn leaves_round_trip() {
        for text in ["B*S", "3*x/2/p", "oh-1", "-a^2+2*a*b/p_a^2", "1/t", "0"] {
            let d: Dim = text.parse().unwrap();
            let again: Dim = d.to_string().parse().unwrap();
            assert_eq!(d, again, "{text} printed as {d}");
            assert!(!d.to_string().contains(' '));
        }
        let e: Extents = "{b=B*S,k=H,n=H/NH}".parse().unwrap();
        assert_eq!(e.to_string(), "{b=B*S,k=H,n=H/NH}");
        let m: Marks = "<n@a,h@b>".parse().unwrap();
        assert_eq!(m.on_axis("b"), Some("h"));
        assert_eq!("<>".parse::<Marks>().unwrap(), Marks::default());
        let s: ShapeLit = "[B*S]:8".parse().unwrap();
        assert_eq!(s.elem_bytes, Some(8));
        assert_eq!(s.to_string(), "[B*S]:8");
        assert_eq!("|1>0|".parse::<DimMap>().unwrap().0[&1], 0);
    }

    #[test]
    fn programs_parse_and_print() {
        let text = "(all_reduce (op linear {b=b,k=k,n=n} <> (shard (tensor x [b,k]) 1 a) \
                    (shard (tensor w [k,n]) 0 a) (partial (tensor bias [n]) a)) a)";
        let e: RecExpr<Dist> = text.parse().unwrap();
        let again: RecExpr<Dist> = e.to_string().parse().unwrap();
        assert_eq!(e, again);
        assert!(matches!(e[e.root()], Dist::AllReduce(_)));
    }
}
