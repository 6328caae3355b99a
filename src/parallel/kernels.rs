//! What kernels cost beyond their FLOPs at the plateau: the relative cost's use of a calibration
//! table's size-dependent efficiencies.
//!
//! The relative cost counts a matmul-like kernel's FLOPs as if it ran at the plateau of the
//! table's matmul curve (the achievable FLOP/s that κ_intra, κ_inter and κ_hbm are ratios of).
//! A small or skinny GEMM runs below it (the curve by its FLOPs, and where the table models
//! tiling, the wave and tile quantization of its sizes), a fused attention kernel runs at its
//! own curve, and every kernel costs the table's fixed launch time. Each kernel's time, as the
//! timeline computes it ([`Rates::gemm_seconds`]), is turned back into FLOP-equivalents at the
//! plateau; what exceeds its FLOPs is its kernel cost. A table without curves, tiling or launch
//! time adds nothing, and FLOPs stay FLOPs.
//!
//! Exactness: the curves are read in floating point (they interpolate in log size, which no
//! rational reproduces), and each kernel cost is rounded to a whole FLOP-equivalent before it
//! enters the exact sums, so the relative cost stays a rational that the same inputs always
//! give.

use super::analysis::{BlockAnalysis, GemmDims, OpAnalysis};
use crate::calib::Calibration;
use crate::machine::{KernelClass, Rates};
use crate::rules::FlopClass;
use crate::strategy::StrategyError;
use crate::sym::{Bindings, Poly, Rational};
use num_traits::{ToPrimitive, Zero};

/// `x` rounded to a whole number, at least zero; Rust's float-to-integer conversion saturates,
/// so a value beyond 2^127 (no kernel takes that many FLOP-equivalents) is held there.
fn whole(x: f64) -> Rational {
    Rational::from_integer((x.max(0.0).round() as i128).into())
}

/// A table's kernel efficiencies as the relative cost prices them.
#[derive(Debug, Clone)]
pub struct KernelEfficiency {
    /// The table's rates (`None`: every kernel at the plateau, no launch cost).
    rates: Option<Rates>,
    /// The share of an FP8 GEMM's FLOPs that running it at the FP8 peak saves:
    /// 1 − bf16 peak ÷ FP8 peak, exactly (zero for a table without an FP8 peak).
    fp8_gain: Rational,
    /// The same at the FP4 peak (NVFP4's GEMMs).
    fp4_gain: Rational,
}

/// What one block's kernels add to its FLOPs for one micro-batch, in FLOP-equivalents.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelCost {
    /// Its forward pass's kernels.
    pub forward: Rational,
    /// Its backward pass's kernels (recomputation inside fused kernels included).
    pub backward: Rational,
    /// The forward kernels of the operators selective recomputation recomputes (what it runs
    /// again).
    pub attention_forward: Rational,
}

impl KernelEfficiency {
    /// The efficiencies of `calib`.
    pub fn of(calib: &Calibration) -> KernelEfficiency {
        let rates = Rates::of(calib);
        let flat = rates.matmul_efficiency.is_constant()
            && rates.attention_efficiency.is_constant()
            && rates.attention_efficiency.max() >= rates.matmul_efficiency.max()
            && rates.tiling.is_none()
            && rates.kernel_overhead <= 0.0;
        let peaks = &calib.device.peak_flops;
        let gain = |key: &str| match (peaks.get("bf16"), peaks.get(key)) {
            (Some(bf16), Some(low)) if low.value > bf16.value => {
                Rational::from_integer(1.into()) - &bf16.value / &low.value
            }
            _ => Rational::zero(),
        };
        KernelEfficiency {
            rates: (!flat).then_some(rates),
            fp8_gain: gain("fp8"),
            fp4_gain: gain("fp4"),
        }
    }

    /// Every kernel at the plateau and no launch cost: FLOPs only.
    pub fn plateau() -> KernelEfficiency {
        KernelEfficiency {
            rates: None,
            fp8_gain: Rational::zero(),
            fp4_gain: Rational::zero(),
        }
    }

    /// The share of an FP8 GEMM's FLOPs (FLOP-equivalents at the bf16 matmul plateau) that
    /// running it at the table's FP8 peak saves: 1 − bf16 peak ÷ FP8 peak. The size-dependent
    /// part of its kernel cost and its launch stay as for bf16: the relative cost prices an
    /// FP8 GEMM below its size's efficiency as bf16 does, where the timeline divides its
    /// whole time by the FP8 peak.
    pub fn fp8_gain(&self) -> &Rational {
        &self.fp8_gain
    }

    /// [`KernelEfficiency::fp8_gain`] at the table's FP4 peak: 1 − bf16 peak ÷ FP4 peak.
    pub fn fp4_gain(&self) -> &Rational {
        &self.fp4_gain
    }

    /// Whether it adds nothing to any kernel.
    pub fn is_plateau(&self) -> bool {
        self.rates.is_none()
    }

    /// The kernel cost of one block for one micro-batch at bindings `b`.
    pub fn block(&self, blk: &BlockAnalysis, b: &Bindings) -> Result<KernelCost, StrategyError> {
        let mut cost = KernelCost::default();
        let Some(r) = &self.rates else {
            return Ok(cost);
        };
        // Launches of memory-bound kernels: forward, backward, the attention core's forward.
        let mut launches = [0u32; 3];
        for op in &blk.ops {
            match op_kernels(r, op, b)? {
                OpKernels::Timed([f, bw]) => {
                    if op.recomputed {
                        cost.attention_forward += &f;
                    }
                    cost.forward += f;
                    cost.backward += bw;
                }
                OpKernels::Launches([f, bw]) => {
                    if op.recomputed {
                        launches[2] += f;
                    }
                    launches[0] += f;
                    launches[1] += bw;
                }
            }
        }
        cost.forward += launched(r, launches[0]);
        cost.backward += launched(r, launches[1]);
        cost.attention_forward += launched(r, launches[2]);
        Ok(cost)
    }
}

/// FLOP-equivalents beyond `flops` of one pass of an operator run as `kernels` kernels of
/// `class` (with the sizes `gemms` of its GEMMs, where known), rounded to a whole number.
fn timed(r: &Rates, flops: f64, class: KernelClass, kernels: u32, gemms: &[[f64; 4]]) -> Rational {
    let seconds = r.gemm_seconds(flops, 0.0, class, kernels, gemms);
    whole(seconds * r.matmul_flops - flops.max(0.0))
}

/// FLOP-equivalents of `kernels` launches of kernels whose own time the relative cost already
/// prices (memory-bound ones, at κ_hbm).
fn launched(r: &Rates, kernels: u32) -> Rational {
    whole(kernels as f64 * r.kernel_overhead * r.matmul_flops)
}

/// The kernel cost of one operator at bindings `b`, (forward, backward): a timed kernel's cost,
/// or a memory-bound operator's launches (counted, priced once per block).
fn op_kernels(r: &Rates, op: &OpAnalysis, b: &Bindings) -> Result<OpKernels, StrategyError> {
    let class = KernelClass::of(op.fused_attention, op.class == FlopClass::Matmul);
    if class == KernelClass::Other {
        // A memory-bound operator: its time is its HBM bytes, which κ_hbm prices; a pass that
        // moves or computes anything launches one kernel, and a backward that reduces a vector
        // parameter's gradient a second one of its own.
        let forward = !op.forward.is_zero() || !op.io_bytes.is_zero();
        let backward = !op.backward.is_zero() || !op.backward_io_bytes.is_zero();
        let own = !op.param_grad_bytes[0].is_zero();
        return Ok(OpKernels::Launches([
            forward as u32,
            backward as u32 + own as u32,
        ]));
    }
    let eval =
        |p: &Poly| -> Result<f64, StrategyError> { Ok(p.eval(b)?.to_f64().unwrap_or(f64::MAX)) };
    // The GEMMs' sizes matter only where the table models their tiling.
    let sizes = |shapes: &[GemmDims]| -> Result<Vec<[f64; 4]>, StrategyError> {
        if r.tiling.is_none() {
            return Ok(Vec::new());
        }
        shapes
            .iter()
            .map(|g| {
                Ok([
                    eval(&g.batch)?,
                    eval(&g.rows)?,
                    eval(&g.cols)?,
                    eval(&g.inner)?,
                ])
            })
            .collect()
    };
    let (first, rest) = match op.gemms.split_first() {
        Some((g, rest)) => (sizes(std::slice::from_ref(g))?, sizes(rest)?),
        None => (Vec::new(), Vec::new()),
    };
    let fwd = eval(&op.forward)?;
    let bwd = eval(&op.backward)? + eval(&op.recompute)?;
    Ok(OpKernels::Timed([
        timed(r, fwd, class, class.kernels(false), &first),
        timed(r, bwd, class, class.kernels(true), &rest),
    ]))
}

/// What one operator's kernels cost beyond their FLOPs, forward and backward.
enum OpKernels {
    /// GEMMs or fused attention, timed at their sizes (launch included).
    Timed([Rational; 2]),
    /// Memory-bound kernels launched (their time is their HBM bytes, priced at κ_hbm).
    Launches([u32; 2]),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_rounds_and_holds_to_its_range() {
        let int = |n: i128| Rational::from_integer(n.into());
        assert_eq!(whole(2.5), int(3));
        assert_eq!(whole(-7.0), int(0));
        assert_eq!(whole(f64::NAN), int(0));
        assert_eq!(whole(f64::INFINITY), int(i128::MAX));
        assert_eq!(whole(1e20), int(100_000_000_000_000_000_000));
    }

    #[test]
    fn a_flat_table_adds_nothing() {
        let mut c = Calibration::resolve("a100-80gb").unwrap();
        assert!(!KernelEfficiency::of(&c).is_plateau());
        c.device.kernel_overhead = None;
        c.device.efficiency.matmul = crate::calib::Curve {
            points: vec![(
                Rational::from_integer(1.into()),
                Rational::new(4.into(), 5.into()),
            )],
            constant: true,
            source: "test".into(),
        };
        c.device.efficiency.attention = None;
        c.device.gemm_tiling = None;
        assert!(KernelEfficiency::of(&c).is_plateau());
    }

    #[test]
    fn a_small_gemm_costs_more_than_its_flops_and_a_large_one_its_launch() {
        let c = Calibration::resolve("a100-80gb").unwrap();
        let r = Rates::of(&c);
        let launch = r.kernel_overhead * r.matmul_flops;
        // At the curve's largest point the efficiency is below the plateau (0.768 vs 0.810).
        let big = 1.76e13;
        let extra = timed(&r, big, KernelClass::Matmul, 1, &[])
            .to_f64()
            .unwrap();
        let want = big * (r.matmul_efficiency.max() / r.matmul_efficiency.at(big) - 1.0) + launch;
        assert!((extra - want).abs() <= 1.0, "{extra} vs {want}");
        // At the plateau's own size only the launch remains.
        let at_plateau = 2_199_023_255_552.0;
        let e = timed(&r, at_plateau, KernelClass::Matmul, 1, &[])
            .to_f64()
            .unwrap();
        assert!((e - launch).abs() <= 1.0, "{e} vs {launch}");
        assert_eq!(launched(&r, 3).to_f64().unwrap(), (3.0 * launch).round());
    }
}
