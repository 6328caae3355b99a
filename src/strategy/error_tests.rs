//! The refusals of strategy checks: which rule failed, and what the message names.

use crate::error::strategy::*;
use crate::strategy::{check_knobs, check_nodes, Knobs, Schedule};
use crate::sym::{Poly, Rational};

fn knobs(dp: u64, tp: u64, pp: u64) -> Knobs {
    Knobs {
        tp,
        pp,
        ..Knobs::data_parallel(dp)
    }
}

#[test]
fn knob_checks_say_which_rule_failed() {
    let e = |k: Knobs| check_knobs(&k).unwrap_err();
    assert_eq!(e(knobs(0, 1, 1)), StrategyError::Zero { knob: "dp" });
    assert_eq!(
        e(knobs(1, MAX_DEVICES + 1, 1)),
        StrategyError::Absurd {
            knob: "tp",
            value: MAX_DEVICES + 1
        }
    );
    assert_eq!(
        e(Knobs {
            ep: 3,
            ..knobs(8, 1, 1)
        }),
        StrategyError::EpDividesDp {
            ep: 3,
            dp: 8,
            cp: 1
        }
    );
    assert_eq!(
        e(Knobs {
            sequence_parallel: true,
            ..knobs(2, 1, 1)
        }),
        StrategyError::Unsupported(Unsupported::SequenceParallelOneRank)
    );
    assert_eq!(
        e(Knobs {
            schedule: Schedule::Interleaved,
            chunks: 2,
            microbatches: 3,
            ..knobs(1, 1, 2)
        }),
        StrategyError::InterleavedMicrobatches {
            microbatches: 3,
            pp: 2
        }
    );
    assert_eq!(
        check_nodes(&knobs(8, 1, 1), 3).unwrap_err(),
        StrategyError::PartNodes {
            gpus_per_node: 3,
            devices: 8
        }
    );
}

#[test]
fn messages_name_the_knob_and_the_sizes() {
    let cases: [(StrategyError, &str); 8] = [
        (
            StrategyError::Zero { knob: "cp" },
            "`cp` must be at least 1",
        ),
        (
            StrategyError::EpDividesDp { ep: 3, dp: 8, cp: 1 },
            "`ep` = 3 must divide dp × cp = 8 × 1: expert-parallel groups are drawn from the data- and context-parallel ranks (an expert tensor-parallel size below tp, with which Megatron-Core's expert layers re-slice the tp × dp ranks, is not modelled)",
        ),
        (
            Unsupported::ZeroOneReplica { zero: 2 }.into(),
            "`zero` = 2 needs dp > 1 or cp > 1: ZeRO shards over the data- and context-parallel ranks, and one rank has nothing to shard",
        ),
        (
            StrategyError::InterleavedLayers {
                schedule: Schedule::Interleaved.name(),
                chunks: 3,
                layers: 32,
                pp: 4,
                extra: 0,
            },
            "interleaved-1f1b with 3 chunks needs the 32 layers divisible by pp × chunks = 12",
        ),
        (
            StrategyError::CpSequence {
                cp: 3,
                symbol: "S".into(),
                sequence: Rational::from_integer(8192.into()),
            },
            "cp = 3: 2·cp = 6 does not divide the sequence length S = 8192 (causal load balancing cuts each sequence into 2·cp chunks)",
        ),
        (
            StrategyError::NotDivisible(Box::new(NotDivisible {
                axis: "tp",
                degree: 7,
                op: "v_proj".into(),
                index: "n".into(),
                formula: Poly::symbol("H"),
                size: Rational::from_integer(12288.into()),
            })),
            "tp = 7 does not divide `v_proj` index `n` = H = 12288",
        ),
        (
            StrategyError::FileMicroBatchSize {
                size: 0,
                source: Box::new(StrategyError::MicroBatchSizeZero),
            },
            "`micro_batch_size` = 0: the micro-batch size must be at least 1",
        ),
        (StrategyError::Nothing("stages"), "no stages"),
    ];
    for (e, says) in cases {
        assert_eq!(e.to_string(), says);
    }
}

#[test]
fn devices_over_one_node_must_fill_nodes_and_the_refusal_names_the_counts_that_do() {
    use crate::strategy::{check_fills_nodes, check_gpus_per_node};
    // Up to one node: one node partly used.
    assert_eq!(check_fills_nodes(7, 8), Ok(()));
    assert_eq!(check_fills_nodes(16, 8), Ok(()));
    let e = check_fills_nodes(14, 8).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`gpus_per_node` = 8 does not divide the 14 devices: nodes would be partly used (8 or 16 devices fill whole nodes; nodes of another size: set `gpus_per_node`)"
    );
    assert!(check_fills_nodes(97, 8)
        .unwrap_err()
        .to_string()
        .contains("(96 or 104 devices fill whole nodes;"));
    // The range is checked first, by the one check every caller uses.
    for g in [0, MAX_GPUS_PER_NODE + 1] {
        let range = StrategyError::GpusPerNodeRange { gpus_per_node: g };
        assert_eq!(check_gpus_per_node(g), Err(range.clone()));
        assert_eq!(check_fills_nodes(14, g), Err(range));
    }
    assert_eq!(
        check_gpus_per_node(MAX_GPUS_PER_NODE),
        Ok(MAX_GPUS_PER_NODE)
    );
}

#[test]
fn the_library_error_keeps_the_message_and_refuses_with_exit_code_2() {
    let e = StrategyError::EpNoExperts {
        ep: 2,
        model: "gpt2-124m".into(),
    };
    let lib: crate::Error = e.clone().into();
    assert_eq!(lib.to_string(), e.to_string());
    assert_eq!(lib.exit_code(), 2);
    assert!(matches!(lib, crate::Error::Strategy(b) if *b == e));
}

#[test]
fn strategy_files_point_at_the_knob() {
    assert_eq!(StrategyError::Zero { knob: "pp" }.knob(), Some("pp"));
    assert_eq!(
        StrategyError::from(Unsupported::TpCommOverlap).knob(),
        Some("overlap")
    );
    assert_eq!(
        StrategyError::from(Unsupported::SequenceParallelOneRank).knob(),
        Some("sequence_parallel")
    );
    assert_eq!(StrategyError::AbsurdDevices { devices: 1 }.knob(), None);
}
