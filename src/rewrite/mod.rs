//! The e-graph engine: distributed tensor programs, the homomorphism laws of the law table as
//! rewrites, and the algebra of collectives (DESIGN §2, `rewrite`).
//!
//! * [`lang`] — the language: operators by rule name, placements, collectives, `seq`, `repeat`.
//! * [`analysis`] — shapes and placements as e-class data; [`opsplit`] — which split an
//!   operator application is, checked against the law table.
//! * [`laws`] — rewrites generated from every rule and the law table; [`collective`] — the
//!   collective algebra. Every rewrite's result is checked before it is added ([`apply`]).
//! * [`cost`] — exact per-device costs and the extraction cost function.
//! * [`explain`] — proofs of a rule's split table; [`optimize`] — communication optimisation of a
//!   tensor-parallel layer (it finds sequence parallelism).
//!
//! ```
//! use symshard::rewrite::{Dist, DistAnalysis, Mesh, Limits, rewrites};
//! use symshard::rules::RuleSet;
//! use symshard::sym::Poly;
//!
//! let rules = RuleSet::embedded().unwrap();
//! let linear = rules.get("linear").unwrap().clone();
//! let mesh = Mesh::new([("a".to_string(), Poly::symbol("p"))]);
//! let mut egraph = egg::EGraph::new(DistAnalysis::new([linear.clone()], mesh, 2));
//! let x = "(tensor x [b,k])";
//! let (w, bias) = ("(tensor w [k,n])", "(tensor bias [n])");
//! let whole: egg::RecExpr<Dist> =
//!     format!("(op linear {{b=b,k=k,n=n}} <> {x} {w} {bias})").parse().unwrap();
//! let row_parallel: egg::RecExpr<Dist> = format!(
//!     "(all_reduce (op linear {{b=b,k=k,n=n}} <> (shard {x} 1 a) (shard {w} 0 a) \
//!      (partial {bias} a)) a)"
//! )
//! .parse()
//! .unwrap();
//! let root = egraph.add_expr(&whole);
//! let runner = Limits::default().runner(egraph).run(&rewrites([&linear]).unwrap());
//! let goal = runner.egraph.lookup_expr(&row_parallel).unwrap();
//! assert_eq!(runner.egraph.find(goal), runner.egraph.find(root));
//! ```

pub mod analysis;
pub mod apply;
pub mod collective;
pub mod cost;
pub mod error;
pub mod explain;
pub mod extract;
pub mod lang;
pub mod laws;
pub mod opsplit;
pub mod optimize;
pub mod program;
pub mod run;

pub use analysis::{DistAnalysis, DistEGraph, Mesh, Meta, TensorMeta};
pub use cost::{ExactCost, NodeCost, Score, Weights};
pub use error::RewriteError;
pub use explain::{explain_why, explain_why_with, Why};
pub use extract::extract;
pub use lang::Dist;
pub use optimize::{optimize_layer, optimize_layer_with, OptimizeOptions, OptimizeReport};
pub use program::{block_analysis, block_program, Program};
pub use run::{rewrites, Limits, RunStats};
