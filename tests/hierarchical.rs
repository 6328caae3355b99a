//! The relative cost prices a gradient reduction whose group spans nodes as the hierarchical
//! ring it runs as (a ring inside each node over NVLink, then a ring of each device's share
//! across the nodes), as the timeline times it: its communication seconds agree with the
//! simulated data-parallel stream, where one ring over the inter-node links would be several
//! times too slow.

use num_traits::ToPrimitive;
use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::{evaluate_strategy, Layout};
use symshard::strategy::{Knobs, Tier};
use symshard::sym::Rational;

mod common;
use common::json;

/// Pure data parallelism over several nodes: the relative cost's communication (all of it the
/// gradient reduction and, under ZeRO 1, the weight gather), turned into seconds at the
/// table's achievable FLOP/s, against the simulated busy seconds of the data-parallel stream.
#[test]
fn data_parallel_traffic_across_nodes_costs_what_the_timeline_times() {
    let loader = ModelLoader::embedded().unwrap();
    for (model, dp, microbatches, machine) in [
        ("llama3-8b", 64u64, 32u64, "h100-sxm"),
        ("gpt3-1.3b", 16, 32, "a100-80gb"),
    ] {
        for zero in [0u8, 1] {
            let m = loader.resolve(model).unwrap();
            let calib = Calibration::resolve(machine).unwrap();
            let mut k = Knobs::data_parallel(dp);
            k.microbatches = microbatches;
            k.zero = zero;
            let memory = Rational::from_integer(1_000_000_000_000u64.into());
            let (_, e) = evaluate_strategy(
                &m,
                &m.values,
                &k,
                &Layout::default(),
                MachineRef::new(&calib, calib.gpus_per_node(), &memory),
            )
            .unwrap();
            let flops = calib.achievable_flops().to_f64().unwrap();
            let priced = (&e.relative.comm_intra + &e.relative.comm_inter)
                .to_f64()
                .unwrap()
                / flops;
            // The same bytes as one ring over the inter-node links.
            let wire: Rational = e
                .comm
                .iter()
                .map(|c| &c.bytes * Rational::from_integer(c.count.into()))
                .sum();
            let one_ring = (calib.balance(Tier::Inter) * wire).to_f64().unwrap() / flops;
            let t = json(&[
                "timeline",
                model,
                "--dp",
                &dp.to_string(),
                "--microbatches",
                &microbatches.to_string(),
                "--zero",
                &zero.to_string(),
                "--calib",
                machine,
                "--format",
                "json",
            ]);
            let simulated = t["devices"][0]["busy"]["dp_comm"].as_f64().unwrap();
            let ratio = priced / simulated;
            assert!(
                (0.8..1.25).contains(&ratio),
                "{model} dp {dp} zero {zero}: priced {priced} s, simulated {simulated} s"
            );
            assert!(
                one_ring > 3.0 * simulated,
                "{model} dp {dp} zero {zero}: one ring {one_ring} s, simulated {simulated} s"
            );
        }
    }
}
