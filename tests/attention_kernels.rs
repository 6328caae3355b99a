//! Fused-attention kernels by name: `--calib TABLE@KERNEL` times attention with one of the
//! table's `attention_kernels` and everything else as the table; a kernel a table does not list,
//! and a bad entry in a table, are refused with exit code 2 (a bad entry with its file and line).

mod common;

use common::{json, refused, refused_in, temp_dir};
use symshard::calib::Calibration;
use symshard::timeline::{KernelClass, Rates};

/// Seconds of one attention kernel of `flops` FLOPs, without the fixed per-kernel overhead.
fn attention_seconds(r: &Rates, flops: f64) -> f64 {
    r.op_seconds(flops, 0.0, KernelClass::Attention, 1) - r.kernel_overhead
}

#[test]
fn the_named_kernel_replaces_the_attention_curve_and_nothing_else() {
    let base = Calibration::resolve("a100-80gb").unwrap();
    let fa1 = Calibration::resolve("a100-80gb@flash-attention-1").unwrap();
    assert_eq!(fa1.name, "a100-80gb@flash-attention-1");
    assert_eq!(
        fa1.device.efficiency.attention.as_ref(),
        base.device
            .efficiency
            .attention_kernels
            .get("flash-attention-1")
    );
    let mut back = fa1.clone();
    back.name = base.name.clone();
    back.device.efficiency.attention = base.device.efficiency.attention.clone();
    assert_eq!(
        back, base,
        "only the name and the attention curve may change"
    );

    // The shipped A100 curves (calibration/a100-80gb.yaml): FlashAttention-2 50 % at 6.9e10
    // FLOPs per kernel and 65.5 % from 2.2e12; the first FlashAttention 25 % and 40 %.
    let (rb, rk) = (Rates::of(&base), Rates::of(&fa1));
    for (flops, ratio) in [
        (6.9e10, 0.50 / 0.25),
        (1e10, 0.50 / 0.25),
        (2.2e12, 0.655 / 0.40),
        (5e13, 0.655 / 0.40),
    ] {
        let got = attention_seconds(&rk, flops) / attention_seconds(&rb, flops);
        assert!((got - ratio).abs() < 1e-12, "{flops}: {got} vs {ratio}");
        for class in [KernelClass::Matmul, KernelClass::Other] {
            assert_eq!(
                rb.op_seconds(flops, 1e6, class, 1),
                rk.op_seconds(flops, 1e6, class, 1)
            );
        }
    }
}

#[test]
fn every_shipped_alternative_kernel_is_no_faster_than_flash_attention_2() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let table = Calibration::resolve(path.to_str().unwrap()).unwrap();
        let e = &table.device.efficiency;
        for (name, curve) in &e.attention_kernels {
            seen += 1;
            let own = e
                .attention
                .as_ref()
                .expect("kernels beside an attention curve");
            let (own, other) = (own.to_f64(), curve.to_f64());
            for i in 0..=40 {
                let flops = 10f64.powf(9.0 + i as f64 * 0.125);
                assert!(
                    other.at(flops) <= own.at(flops),
                    "{} {name} at {flops}: {} > {}",
                    table.name,
                    other.at(flops),
                    own.at(flops)
                );
            }
            let chosen =
                Calibration::resolve(&format!("{}@{name}", path.to_str().unwrap())).unwrap();
            assert_eq!(chosen.device.efficiency.attention.as_ref(), Some(curve));
        }
    }
    // Two kernels in each of the A100 (40 and 80 GB), H100 (both), DGX H100, H200 and H800 tables.
    assert_eq!(seen, 14);
}

/// Seconds of one step of GPT-3 1.3B on 8 GPUs of `machine`.
fn step_seconds(machine: &str, attention: &str) -> f64 {
    let v = json(&[
        "timeline",
        "gpt3-1.3b",
        "--attention",
        attention,
        "--dp",
        "8",
        "--microbatches",
        "64",
        "--calib",
        machine,
        "--format",
        "json",
    ]);
    v["iteration_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no iteration_seconds in {v}"))
}

#[test]
fn only_fused_attention_runs_slower_on_an_older_kernel() {
    let fa2 = step_seconds("a100-80gb", "flash-causal");
    let triton = step_seconds("a100-80gb@triton-flash-attention", "flash-causal");
    let fa1 = step_seconds("a100-80gb@flash-attention-1", "flash-causal");
    assert!(fa2 < triton && triton < fa1, "{fa2} {triton} {fa1}");
    // Eager attention runs no fused kernel: the kernel chosen does not matter.
    assert_eq!(
        step_seconds("a100-80gb", "eager"),
        step_seconds("a100-80gb@flash-attention-1", "eager")
    );
}

#[test]
fn a_kernel_the_table_does_not_list_is_refused() {
    let args = |m: &'static str| ["timeline", "gpt3-125m", "--dp", "8", "--calib", m];
    let e = refused(&args("a100-80gb@flash-attention-3"));
    assert!(
        e.contains("`a100-80gb` has no attention kernel `flash-attention-3`")
            && e.contains("flash-attention-1, triton-flash-attention"),
        "{e}"
    );
    let e = refused(&args("v100-dgx1@flash-attention-1"));
    assert!(e.contains("it lists none"), "{e}");
    let e = refused(&args("a100-80gb@"));
    assert!(e.contains("no attention kernel ``"), "{e}");
    let e = refused(&args("no-such-table@flash-attention-1"));
    assert!(e.contains("unknown calibration `no-such-table`"), "{e}");
}

#[test]
fn a_validation_file_naming_an_unlisted_kernel_is_refused_at_its_machine_line() {
    let dir = temp_dir("attention-kernel-validation");
    std::fs::write(
        dir.join("v.yaml"),
        "source: test\nmachine: h100-sxm@flash-attention-9\nsettings: none\nbound: 0.5\nruns:\n  - {name: r, model: gpt3-125m, strategy: {dp: 8}, published: 1}\n",
    )
    .unwrap();
    let e = refused_in(&dir, &["validate", "v.yaml"]);
    assert!(
        e.contains("v.yaml:2:") && e.contains("no attention kernel `flash-attention-9`"),
        "{e}"
    );
}

#[test]
fn bad_kernel_entries_are_refused_with_file_and_line() {
    let dir = temp_dir("attention-kernel-tables");
    let table = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/a100-80gb.yaml"),
    )
    .unwrap();
    let line_of = |text: &str, needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .map(|i| i + 1)
            .unwrap()
    };
    let cases = [
        (
            "flash-attention-1: {points: [[6.9e10, 0.25], [2.2e12, 0.40]]",
            "flash-attention-1: {points: [[6.9e10, 0.25], [2.2e12, 1.40]]",
            "flash-attention-1",
            "must be in (0, 1]",
        ),
        (
            "flash-attention-1: {points:",
            "Flash_1: {points:",
            "Flash_1",
            "lowercase letters, digits and dashes",
        ),
    ];
    for (i, (from, to, key, message)) in cases.into_iter().enumerate() {
        assert!(table.contains(from));
        let text = table.replacen(from, to, 1);
        let name = format!("t{i}.yaml");
        std::fs::write(dir.join(&name), &text).unwrap();
        let e = refused_in(
            &dir,
            &["timeline", "gpt3-125m", "--dp", "8", "--calib", &name],
        );
        let at = format!("{name}:{}:", line_of(&text, key));
        assert!(
            e.contains(&at) && e.contains(message),
            "{at} {message}: {e}"
        );
    }
}
