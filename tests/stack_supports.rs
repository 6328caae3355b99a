//! A stack profile's `supports:` section: `rank --stack NAME` ranks only the layouts that stack
//! runs and says so; a knob fixed outside them is refused with exit code 2; `timeline` on such
//! a layout says its seconds are an extrapolation; `calibrate --from-runs` carries the section
//! from the fit set into the profile; a bad section is refused at its line.

mod common;

use common::{json, refused, refused_in, stdout, temp_dir};
use symshard::calib::stack::StackProfile;
use symshard::diag::Source;

const RANK: [&str; 8] = [
    "rank",
    "gpt3-175b",
    "--devices",
    "1024",
    "--calib",
    "a100-80gb",
    "--top",
    "20",
];

/// `rank`'s JSON document with the flags `extra` added.
fn ranked(extra: &[&str]) -> serde_json::Value {
    json(&[&RANK[..], extra, &["--format", "json"]].concat())
}

#[test]
fn a_named_profile_ranks_only_the_layouts_its_stack_runs() {
    // Profile-free, ZeRO 2–3 rows are among the first 20: the restriction below has work to do.
    let free = ranked(&[]);
    let rows = free["strategies"].as_array().unwrap();
    assert!(
        rows.iter().any(|r| r["zero"].as_u64().unwrap() >= 2),
        "no ZeRO 2–3 row in the profile-free top 20"
    );
    assert!(free.get("stack_supports").is_none());
    let on = ranked(&["--stack", "megatron-lm-2021"]);
    let rows = on["strategies"].as_array().unwrap();
    assert_eq!(rows.len(), 20);
    for r in rows {
        assert!(r["zero"].as_u64().unwrap() <= 1, "{r}");
        assert_eq!(r["cp"], 1, "{r}");
        assert_eq!(r["ep"], 1, "{r}");
        assert_eq!(r["precision"], "bf16", "{r}");
        let s = r["schedule"].as_str().unwrap();
        assert!(
            ["none", "1f1b", "interleaved-1f1b"].contains(&s),
            "{s}: {r}"
        );
    }
    let s = &on["stack_supports"];
    assert_eq!(s["profile"], "megatron-lm-2021");
    assert_eq!(
        s["runs"],
        "cp ≤ 1, ep ≤ 1, zero ≤ 1; schedules 1f1b, interleaved-1f1b; precision bf16"
    );
    assert!(
        s["source"]
            .as_str()
            .unwrap()
            .contains("github.com/NVIDIA/Megatron-LM"),
        "{s}"
    );
    let text = stdout(&[&RANK[..], &["--stack", "megatron-lm-2021"]].concat());
    assert!(
        text.lines().any(|l| l.starts_with(
            "supports: --stack megatron-lm-2021 runs cp ≤ 1, ep ≤ 1, zero ≤ 1; schedules 1f1b, interleaved-1f1b; precision bf16; other layouts are not ranked"
        )),
        "{text}"
    );
    // What it leaves out is counted, with an example, not dropped silently.
    assert!(
        text.contains(
            "rejected: not run by the --stack profile's stack, e.g. megatron-lm-2021 does not run zero = 2 (above 1)"
        ),
        "{text}"
    );
    let rejected = on["rejected"].as_object().unwrap();
    assert!(
        rejected.contains_key("megatron-lm-2021 does not run the gpipe schedule"),
        "{rejected:?}"
    );
    // A profile without the section ranks every layout, as before.
    let fsdp = ranked(&["--stack", "pytorch-fsdp"]);
    assert!(fsdp.get("stack_supports").is_none());
}

#[test]
fn a_fix_outside_what_the_stack_runs_is_refused() {
    for fix in ["zero=3", "schedule=gpipe", "precision=fp8", "cp=2"] {
        let err = refused(&[&RANK[..], &["--stack", "megatron-lm-2021", "--fix", fix]].concat());
        assert!(
            err.contains(&format!(
                "--fix {fix}: the stack profile `megatron-lm-2021` (--stack) does not run it"
            )),
            "{fix}: {err}"
        );
    }
    // A schedule given by `--schedule` is refused under the flag the user typed.
    let err = refused(
        &[
            &RANK[..],
            &["--stack", "megatron-lm-2021", "--schedule", "gpipe"],
        ]
        .concat(),
    );
    assert!(
        err.contains(
            "--schedule gpipe: the stack profile `megatron-lm-2021` (--stack) does not run it"
        ),
        "{err}"
    );
    // Inside the limits, a fix is ranked as asked.
    let doc = ranked(&["--stack", "megatron-lm-2021", "--fix", "zero=1,tp=8"]);
    let rows = doc["strategies"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r["zero"] == 1 && r["tp"] == 8));
}

#[test]
fn a_timeline_outside_what_the_stack_runs_says_so() {
    let run = |zero: &str| {
        stdout(&[
            "timeline",
            "gpt3-125m",
            "--dp",
            "8",
            "--zero",
            zero,
            "--stack",
            "megatron-lm-2021",
        ])
    };
    let outside = run("3");
    assert!(
        outside.contains("this stack does not run this layout (it runs cp ≤ 1, ep ≤ 1, zero ≤ 1;"),
        "{outside}"
    );
    let inside = run("1");
    assert!(!inside.contains("does not run this layout"), "{inside}");
}

#[test]
fn calibrate_carries_supports_from_the_fit_set_into_the_profile() {
    let dir = temp_dir("stack-supports-fit");
    std::fs::write(
        dir.join("runs.yaml"),
        "name: p\ndoc: d\nlabel: megatron\nparameters: [step_overhead]\nfit_set:\n  \
         - file: korthikanti2022-table5\n  - file: megatron-v1-dgx2h\nsupports:\n  \
         source: a changelog\n  max: {zero: 1, tp: 8}\n  schedules: [1f1b]\n",
    )
    .unwrap();
    stdout(&[
        "calibrate",
        "--from-runs",
        dir.join("runs.yaml").to_str().unwrap(),
        "-o",
        dir.join("p.yaml").to_str().unwrap(),
    ]);
    let p = StackProfile::load(&Source::read(&dir.join("p.yaml")).unwrap()).unwrap();
    let s = p.supports.expect("the section is carried over");
    assert_eq!(s.source, "a changelog");
    assert_eq!(s.max, vec![("tp", 8), ("zero", 1)]);
    assert_eq!(s.describe(), "tp ≤ 8, zero ≤ 1; schedules 1f1b");
    // A stack without any ZeRO sharding states `zero: 0`.
    std::fs::write(
        dir.join("zero0.yaml"),
        "name: z\ndoc: d\nparameters: {}\nsupports:\n  source: s\n  max: {zero: 0, cp: 1}\n",
    )
    .unwrap();
    let z = StackProfile::load(&Source::read(&dir.join("zero0.yaml")).unwrap()).unwrap();
    assert_eq!(z.supports.unwrap().describe(), "cp ≤ 1, zero ≤ 0");
    let err = refused_in(
        &dir,
        &[
            "rank",
            "gpt3-125m",
            "--devices",
            "8",
            "--stack",
            "zero0.yaml",
            "--fix",
            "zero=1",
        ],
    );
    assert!(err.contains("--fix zero=1: the stack profile `z`"), "{err}");
    // A bad section in the fit set is refused at its line before anything is fitted.
    std::fs::write(
        dir.join("bad.yaml"),
        "name: p\ndoc: d\nfit_set:\n  - file: korthikanti2022-table5\nsupports:\n  \
         source: s\n  max:\n    mbs: 2\n",
    )
    .unwrap();
    let err = refused_in(
        &dir,
        &["calibrate", "--from-runs", "bad.yaml", "-o", "x.yaml"],
    );
    assert!(err.contains("bad.yaml:8:5: unknown knob `mbs`"), "{err}");
}

#[test]
fn the_report_states_what_the_stack_runs() {
    let dir = temp_dir("stack-supports-report");
    let out = dir.join("r.html");
    stdout(&[
        "report",
        "llama3-8b",
        "--devices",
        "64",
        "--calib",
        "h100-sxm",
        "--stack",
        "megatron-lm-2021",
        "-o",
        out.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(
        html.contains("supports: --stack megatron-lm-2021 runs cp ≤ 1, ep ≤ 1, zero ≤ 1;"),
        "no supports line in the report"
    );
}
