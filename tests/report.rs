//! `symshard report`: one self-contained HTML file whose numbers are the commands' own, and the
//! command line's errors for bad input.

use assert_cmd::Command;
use predicates::prelude::*;
use std::collections::BTreeSet;

fn symshard() -> Command {
    Command::cargo_bin("symshard").unwrap()
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = symshard()
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn report_shows_the_ranking_and_the_top_strategys_numbers_and_fetches_nothing() {
    let dir = tempfile_dir();
    let path = dir.join("r.html");
    symshard()
        .args(["report", "llama2-7b", "--devices", "16", "--top", "5", "-o"])
        .arg(&path)
        .assert()
        .success();
    let html = std::fs::read_to_string(&path).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<figure class=\"chart\"").count(), 4);
    // Three charts drawn here, the Gantt chart embedded compressed.
    assert_eq!(html.matches("<svg").count(), 3);
    assert!(html.contains("data-zlib=\""));
    for bad in ["<link", "<script src", "<img", "@import", "url("] {
        assert!(!html.contains(bad), "{bad}");
    }
    let refs: Vec<&str> = html
        .match_indices("http")
        .map(|(i, _)| &html[i..i + 26])
        .collect();
    assert!(
        refs.iter()
            .all(|r| r.starts_with("http://www.w3.org/2000/svg")),
        "{refs:?}"
    );

    let rank = json(&["rank", "llama2-7b", "--devices", "16", "--top", "5"]);
    let rows = rank["strategies"].as_array().unwrap();
    assert_eq!(html.matches("<tr><td data-v=").count(), rows.len());
    let top = &rows[0];
    // The table says micro-batch size and layout as `rank` does, and so does the top row's
    // label.
    assert!(html.contains("<th title=\"click to sort\">mbs</th>"));
    assert!(html.contains("<th title=\"click to sort\">layout</th>"));
    // What overlapping the data-parallel traffic saves has its column, and the components chart
    // hatches it inside the bars (which end at the total) of the rows that hide some.
    assert!(html.contains("<th title=\"click to sort\">hidden</th>"));
    let hides = rows.iter().any(|r| r["relative"]["hidden"] != "0");
    assert!(hides, "{rows:?}");
    assert!(
        html.contains("\nhatched: data-parallel traffic\n</text>"),
        "the legend of what overlap hides"
    );
    assert!(!html.contains("micro-batches</th>"));
    let label = format!("dp={} tp={} pp={}", top["dp"], top["tp"], top["pp"]);
    assert!(
        html.contains(&format!("{label} mbs={}", top["micro_batch_size"])),
        "{label}"
    );
    assert!(html.contains(&format!(
        "<td data-v=\"{}\">{}</td>",
        top["layout"].as_str().unwrap(),
        top["layout"].as_str().unwrap()
    )));
    // The exact relative cost and the memory in whole bytes of every row, as `rank --exact`
    // prints them.
    for r in rows {
        let cost = r["relative_cost"].as_str().unwrap();
        assert!(html.contains(&format!("title=\"{cost}\"")), "{cost}");
        let mem = whole_bytes(r["memory_per_device"].as_str().unwrap());
        assert!(html.contains(&format!("title=\"{mem} bytes\"")), "{mem}");
    }
    // The top strategy's exact per-device FLOPs, as `cost` prints them under its knobs.
    let mut knobs = vec!["cost".to_string(), "llama2-7b".into()];
    for k in ["dp", "tp", "pp", "microbatches", "chunks", "zero", "ep"] {
        knobs.extend([format!("--{k}"), top[k].to_string()]);
    }
    if top["schedule"] != "none" {
        knobs.extend([
            "--schedule".into(),
            top["schedule"].as_str().unwrap().into(),
        ]);
    }
    knobs.extend([
        "--recompute".into(),
        top["recompute"].as_str().unwrap().into(),
    ]);
    if top["sequence_parallel"] == true {
        knobs.push("--sequence-parallel".into());
    }
    let args: Vec<&str> = knobs.iter().map(String::as_str).collect();
    let cost = json(&args);
    let flops = cost["per_device"]["flops"].as_str().unwrap();
    assert!(html.contains(&format!("data-exact=\"{flops}\"")), "{flops}");
}

/// An exact amount of bytes (`"7/2"`) as the whole bytes it occupies, rounded up (`"4"`).
fn whole_bytes(exact: &str) -> String {
    let r: symshard::sym::Rational = exact.parse().unwrap();
    r.ceil().to_integer().to_string()
}

#[test]
fn report_takes_rank_constraints_and_splits_communication_by_collective() {
    let dir = tempfile_dir();
    let path = dir.join("steered.html");
    let steer = [
        "--fix",
        "tp=2",
        "--no-sp",
        "--max",
        "pp=2",
        "--headroom",
        "10%",
        "--max-microbatches",
        "64",
    ];
    symshard()
        .args(["report", "gpt3-1.3b", "--devices", "16", "--top", "4"])
        .args(steer)
        .arg("-o")
        .arg(&path)
        .assert()
        .success();
    let html = std::fs::read_to_string(&path).unwrap();
    let mut args = vec!["rank", "gpt3-1.3b", "--devices", "16", "--top", "4"];
    args.extend(steer);
    let rank = json(&args);
    let rows = rank["strategies"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert_eq!(html.matches("<tr><td data-v=").count(), rows.len());
    for r in rows {
        assert_eq!(r["tp"], 2, "{r}");
        assert_eq!(r["sequence_parallel"], false, "{r}");
        let cost = r["relative_cost"].as_str().unwrap();
        assert!(html.contains(&format!("title=\"{cost}\"")), "{cost}");
    }
    // 72 GB usable of the reference machine's 80 GB.
    assert_eq!(rank["memory_limit"], "72000000000");
    assert!(html.contains("fit in 72.0 GB"));
    assert!(
        html.contains("--fix tp=2"),
        "the command shown names the constraints"
    );
    // Tensor parallelism without sequence parallelism all-reduces inside a node: the stacked
    // bars have a segment, and a legend entry, for it.
    let chart = html
        .split("id=\"components\"")
        .nth(1)
        .and_then(|c| c.split("</figure>").next())
        .unwrap();
    for label in ["compute", "intra-node all-reduce"] {
        assert!(chart.contains(&format!("\n{label}\n</text>")), "{label}");
    }
    // A bubble has its legend entry where some row has a pipeline.
    let pipelined = rows.iter().any(|r| r["pp"].as_u64() > Some(1));
    assert_eq!(
        chart.contains("\nbubble (pipeline fill and drain)\n</text>"),
        pipelined
    );
    // A bad constraint is rank's error.
    symshard()
        .args([
            "report",
            "gpt3-1.3b",
            "--devices",
            "16",
            "--fix",
            "tq=2",
            "-o",
        ])
        .arg(dir.join("bad.html"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("tq"));
    assert!(!dir.join("bad.html").exists());
}

#[test]
fn report_rejects_bad_input_with_the_commands_errors() {
    let dir = tempfile_dir();
    symshard()
        .args(["report", "no-such-model", "--devices", "8", "-o"])
        .arg(dir.join("x.html"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no-such-model"));
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "family: gpt\nsymbols:\n  L: {value: oops}\n").unwrap();
    symshard()
        .args(["report"])
        .arg(&bad)
        .args(["--devices", "8", "-o"])
        .arg(dir.join("y.html"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!("{}:", bad.display())));
    symshard()
        .args(["report", "llama2-7b", "--devices", "8", "--top", "0", "-o"])
        .arg(dir.join("z.html"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--top must be at least 1"));
    symshard()
        .args(["report", "llama2-7b", "--devices", "8", "-o"])
        .arg(dir.join("no-such-dir").join("r.html"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no-such-dir"));
    assert!(!dir.join("x.html").exists());
}

/// The chart of one figure of a report.
fn figure<'a>(html: &'a str, id: &str) -> &'a str {
    html.split(&format!("id=\"{id}\""))
        .nth(1)
        .and_then(|c| c.split("</figure>").next())
        .unwrap()
}

/// The memory chart draws the ranking's own Pareto frontier (`rank --pareto`, over every strategy
/// that fits, not only the rows shown), and its caption and axis name what the x axis is: relative
/// cost without `--calib`, simulated seconds with it.
#[test]
fn report_draws_ranks_pareto_frontier_and_names_its_axis() {
    let dir = tempfile_dir();
    for (model, devices, calib) in [
        ("gpt3-175b", "1024", None),
        ("llama2-7b", "16", Some("h100-sxm")),
    ] {
        let path = dir.join(format!("{model}.html"));
        let mut cmd = symshard();
        cmd.args(["report", model, "--devices", devices, "--top", "5"]);
        let mut rank = vec![
            "rank",
            model,
            "--devices",
            devices,
            "--top",
            "5",
            "--pareto",
        ];
        if let Some(c) = calib {
            cmd.args(["--calib", c]);
            rank.extend(["--calib", c]);
        }
        cmd.arg("-o").arg(&path).assert().success();
        let html = std::fs::read_to_string(&path).unwrap();
        let chart = figure(&html, "frontier");
        let pareto = json(&rank)["pareto"].as_array().unwrap().len();
        // More frontier points than rows shown: the frontier is not the shown rows'.
        assert!(pareto > 5, "{model}: {pareto}");
        assert_eq!(
            chart
                .matches("r=\"2\" opacity=\"1\" fill=\"#000000\"")
                .count(),
            pareto,
            "{model}"
        );
        assert!(
            chart.contains(&format!("({pareto} strategies, rank --pareto)")),
            "{model}"
        );
        let (caption, axis) = if calib.is_some() {
            (
                "versus simulated seconds per step",
                "simulated seconds per step",
            )
        } else {
            (
                "versus relative cost per step",
                "relative cost per step (FLOP-equivalents",
            )
        };
        assert!(chart.contains(caption), "{model}: {caption}");
        assert!(chart.contains(axis), "{model}: {axis}");
        if calib.is_none() {
            assert!(!chart.contains("time per step"), "{model}");
        }
    }
}

/// Every text of an SVG drawn by `plotters` lies inside its canvas, judging each character as
/// 0.6 em wide (wider than sans-serif's average): (x, y, anchor, font size, text).
fn texts_fit(svg: &str) -> Result<(), String> {
    let attr = |tag: &str, name: &str| -> String {
        let at = tag.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        tag[at..at + tag[at..].find('"').unwrap()].to_string()
    };
    let head = &svg[..svg.find('>').unwrap()];
    let width: f64 = attr(head, "width").parse().unwrap();
    let height: f64 = attr(head, "height").parse().unwrap();
    let mut seen = 0;
    for chunk in svg.split("<text").skip(1) {
        let tag = &chunk[..chunk.find('>').unwrap()];
        let body = chunk[tag.len() + 1..chunk.find("</text>").unwrap()].trim();
        let x: f64 = attr(tag, "x").parse().unwrap();
        let y: f64 = attr(tag, "y").parse().unwrap();
        let size: f64 = attr(tag, "font-size").parse().unwrap();
        let w = 0.6 * size * body.chars().count() as f64;
        let right = match attr(tag, "text-anchor").as_str() {
            "middle" => x + w / 2.0,
            "end" => x,
            _ => x + w,
        };
        if right > width || y + size > height {
            return Err(format!(
                "{body:?} at ({x}, {y}) leaves the {width}×{height} canvas"
            ));
        }
        seen += 1;
    }
    assert!(seen > 0);
    Ok(())
}

/// The cost-components chart's legend fits its canvas: the longest label (send/receive of the
/// pipeline and the context-parallel ring, between nodes) wraps instead of running off the edge.
#[test]
fn report_components_legend_fits_the_chart() {
    let html = report_html(
        "legend.html",
        &["gpt3-175b", "--devices", "1024", "--top", "5"],
    );
    let chart = figure(&html, "components");
    let chart = &chart[chart.find("<svg").unwrap()..];
    // The label that used to be clipped is there, in two lines.
    assert!(chart.contains("\ninter-node send/receive (pipeline,\n</text>"));
    assert!(chart.contains("\ncontext-parallel ring)\n</text>"));
    texts_fit(chart).unwrap();
}

/// `rank`'s top row of GPT-3 175B on 1024 devices and the report of that ranking.
fn gpt3_report(file: &str) -> (serde_json::Value, String) {
    let html = report_html(file, &["gpt3-175b", "--devices", "1024", "--top", "3"]);
    let rank = json(&["rank", "gpt3-175b", "--devices", "1024", "--top", "1"]);
    (rank["strategies"][0].clone(), html)
}

/// The HTML of `report ARGS`, written to `file` in the tests' folder.
fn report_html(file: &str, args: &[&str]) -> String {
    let path = tempfile_dir().join(file);
    symshard()
        .arg("report")
        .args(args)
        .arg("-o")
        .arg(&path)
        .assert()
        .success();
    std::fs::read_to_string(&path).unwrap()
}

/// The #1 row's per-device amounts are shown as the formulas `compare` derives for that strategy,
/// each with its exact value; the amounts without a formula (the relative cost among them) say so.
#[test]
fn report_shows_the_top_rows_per_device_formulas() {
    let (top, html) = gpt3_report("formulas.html");
    let table = html
        .split("id=\"per-device\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap();
    let mut knobs = vec![];
    for k in [
        "dp",
        "tp",
        "pp",
        "microbatches",
        "chunks",
        "zero",
        "ep",
        "cp",
    ] {
        knobs.push(format!("{k}={}", top[k]));
    }
    knobs.push(format!("schedule={}", top["schedule"].as_str().unwrap()));
    knobs.push(format!("recompute={}", top["recompute"].as_str().unwrap()));
    if top["sequence_parallel"] == true {
        knobs.push("sp".into());
    }
    let knobs = knobs.join(" ");
    let cmp = json(&["compare", "gpt3-175b", &knobs, &knobs]);
    let components = cmp["components"].as_array().unwrap();
    let mut with_formula = 0;
    for c in components {
        let value = c["a"].as_str().unwrap();
        // Every formula `compare` prints is the report's; the report has more (the relative
        // cost's, with the calibration's balances), checked below.
        let row = match c["formula_a"].as_str() {
            Some(f) => {
                with_formula += 1;
                format!("<td><code>{f}</code></td><td data-exact=\"{value}\">")
            }
            None => format!("</td><td data-exact=\"{value}\">"),
        };
        assert!(table.contains(&row), "{}: {row}", c["name"]);
    }
    // FLOPs, collectives and model-state memory have formulas in the model's symbols.
    assert!(with_formula >= 8, "{with_formula}");
    assert!(table.contains("*B*F*H*S"));
    // The relative cost of the #1 row (a pipeline) is exact, and says why it has no formula.
    assert!(top["pp"].as_u64().unwrap() > 1, "{top}");
    let total = top["relative_cost"].as_str().unwrap();
    assert!(table.contains(&format!(
        "no formula: the bubble is the slowest stage's time × (pp − 1)/(m·v), and which stage is slowest is a maximum over the pipeline partition's stages, not a polynomial</span></td><td data-exact=\"{total}\">"
    )));
}

/// Under ZeRO the collectives table names the data-parallel gradient traffic as the stacked bars
/// do (reduce-scatter and all-gather), not as the all-reduce it replaces.
#[test]
fn report_collectives_agree_with_the_bars_under_zero() {
    let (top, html) = gpt3_report("zero.html");
    assert!(top["zero"].as_u64().unwrap() >= 1, "{top}");
    assert!(top["dp"].as_u64().unwrap() > 1, "{top}");
    let table = html
        .split("id=\"collectives\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap();
    assert!(!table.contains("<td>all-reduce</td><td>dp</td>"));
    assert!(table.contains("<td>reduce-scatter</td><td>dp</td><td>inter</td>"));
    assert!(table.contains("<td>all-gather</td><td>dp</td><td>inter</td>"));
    let bars = figure(&html, "components");
    assert!(bars.contains("\ninter-node reduce-scatter\n</text>"));
    assert!(bars.contains("\ninter-node all-gather\n</text>"));
    assert!(!bars.contains("\ninter-node all-reduce\n</text>"));
    let parts = html
        .split("id=\"comm-parts\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap();
    assert!(parts.contains("<td>reduce-scatter</td><td>inter</td>"));
    assert!(parts.contains("<td>all-gather</td><td>inter</td>"));
    assert!(!parts.contains("<td>all-reduce</td><td>inter</td>"));
}

/// The fills of a Gantt chart's bars (each bar carries a `<title>`) and of its legend's swatches,
/// with the legend's labels.
fn gantt_colours(svg: &str) -> (BTreeSet<String>, Vec<(String, String)>) {
    let fill_before = |i: usize| {
        let at = svg[..i].rfind("fill=\"#").unwrap() + 6;
        svg[at..at + 7].to_string()
    };
    let bars = svg
        .match_indices("\"><title>")
        .map(|(i, _)| fill_before(i + 1))
        .collect();
    let legend = svg
        .match_indices("width=\"10\" height=\"10\" fill=\"")
        .map(|(i, m)| {
            let fill = svg[i + m.len()..i + m.len() + 7].to_string();
            let text = &svg[i + svg[i..].find("<text").unwrap()..];
            let label = &text[text.find('>').unwrap() + 1..text.find("</text>").unwrap()];
            (fill, label.to_string())
        })
        .collect();
    (bars, legend)
}

/// The Gantt chart's legend has an entry for every colour its bars use and none for a colour they
/// do not: expert parallelism draws the expert all-to-all, context parallelism the ring.
#[test]
fn gantt_legend_lists_exactly_the_colours_drawn() {
    let dir = tempfile_dir();
    let cases: [(&str, &[&str], &str, &str); 2] = [
        (
            "ep.svg",
            &[
                "mixtral-8x7b",
                "--dp",
                "8",
                "--ep",
                "8",
                "--microbatches",
                "1",
            ],
            "#edc948",
            "expert all-to-all",
        ),
        (
            "cp.svg",
            &["llama3-8b", "--dp", "2", "--cp", "4", "--microbatches", "2"],
            "#76b7b2",
            "context-parallel ring",
        ),
    ];
    for (file, args, colour, label) in cases {
        let path = dir.join(file);
        symshard()
            .arg("timeline")
            .args(args)
            .arg("--svg")
            .arg(&path)
            .assert()
            .success();
        let svg = std::fs::read_to_string(&path).unwrap();
        let (bars, legend) = gantt_colours(&svg);
        let swatches: BTreeSet<String> = legend.iter().map(|(f, _)| f.clone()).collect();
        assert_eq!(swatches.len(), legend.len(), "{file}: {legend:?}");
        assert_eq!(bars, swatches, "{file}: {legend:?}");
        assert!(
            legend.contains(&(colour.to_string(), label.to_string())),
            "{file}: {legend:?}"
        );
        // Neither run pipelines, recomputes or shards parameters: no legend entry says so.
        for absent in ["pipeline send", "recompute", "parameter all-gather"] {
            assert!(!legend.iter().any(|(_, l)| l == absent), "{file}: {absent}");
        }
    }
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "symshard-report-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The per-device table of the report, up to its end.
fn per_device(html: &str) -> &str {
    html.split("id=\"per-device\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap()
}

/// When the #1 row runs the auto tensor-parallel layout, the report prices it with that layout:
/// its per-device FLOPs and memory are `cost`'s under the row's placements (a strategy file's
/// `splits`), and its relative cost is the row's, not the annotated layout's.
#[test]
fn report_prices_an_auto_layout_row_with_its_placements() {
    let steer = ["--layouts", "auto", "--fix", "tp=2"];
    let mut args = vec!["rank", "gpt2-124m", "--devices", "8", "--top", "1"];
    args.extend(steer);
    let rank = json(&args);
    let top = &rank["strategies"][0];
    assert_eq!(top["layout"], "auto", "{top}");
    let dir = tempfile_dir();
    let mut yaml = String::from("splits:\n");
    for (op, index) in top["placements"].as_object().unwrap() {
        yaml.push_str(&format!("  {op}: \"{}\"\n", index.as_str().unwrap()));
    }
    let file = dir.join("auto-layout.yaml");
    std::fs::write(&file, yaml).unwrap();
    let mut knobs = vec!["cost".to_string(), "gpt2-124m".into()];
    for k in [
        "dp",
        "tp",
        "pp",
        "microbatches",
        "chunks",
        "zero",
        "ep",
        "cp",
    ] {
        knobs.extend([format!("--{k}"), top[k].to_string()]);
    }
    knobs.extend([
        "--recompute".into(),
        top["recompute"].as_str().unwrap().into(),
    ]);
    if top["sequence_parallel"] == true {
        knobs.push("--sequence-parallel".into());
    }
    let annotated_args: Vec<&str> = knobs.iter().map(String::as_str).collect();
    let annotated = json(&annotated_args);
    knobs.extend(["--strategy".into(), file.display().to_string()]);
    let auto_args: Vec<&str> = knobs.iter().map(String::as_str).collect();
    let auto = json(&auto_args);
    let flops = |c: &serde_json::Value| c["per_device"]["flops"].as_str().unwrap().to_string();
    let memory = |c: &serde_json::Value| {
        c["per_device"]["memory"]["total"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The layouts differ in FLOPs and memory, so the check below can tell them apart.
    assert_ne!(flops(&auto), flops(&annotated));
    assert_ne!(memory(&auto), memory(&annotated));

    let path = dir.join("auto.html");
    symshard()
        .args(["report", "gpt2-124m", "--devices", "8", "--top", "3"])
        .args(steer)
        .arg("-o")
        .arg(&path)
        .assert()
        .success();
    let html = std::fs::read_to_string(&path).unwrap();
    let table = per_device(&html);
    for want in [flops(&auto), memory(&auto)] {
        assert!(table.contains(&format!("data-exact=\"{want}\"")), "{want}");
    }
    for not in [flops(&annotated), memory(&annotated)] {
        assert!(!table.contains(&format!("data-exact=\"{not}\"")), "{not}");
    }
    let total = top["relative_cost"].as_str().unwrap();
    assert!(
        table.contains(&format!("data-exact=\"{total}\"")),
        "{total}"
    );
    // Without a pipeline the relative cost's compute has a formula in the symbols, the row's
    // number at the model's values; its kernel term, read from the table's curves, has none,
    // and so neither has the total, which says why.
    assert_eq!(top["pp"], 1);
    let values = symbols_of(&auto);
    let rows = formula_rows(table);
    let compute = top["relative"]["compute"].as_str().unwrap();
    let (_, formula, _) = rows
        .iter()
        .find(|(n, f, v)| n == "compute" && v == compute && f.is_some())
        .unwrap_or_else(|| panic!("no formula for the compute {compute}"));
    let formula = formula.as_ref().unwrap();
    assert_eq!(value_of(formula, &values), compute.parse().unwrap());
    assert!(rows
        .iter()
        .any(|(n, f, v)| n == "total" && f.is_none() && v == total));
    assert!(table.contains(&format!(
        "no formula: the kernel term is each kernel's time read from the calibration table's efficiency curves (interpolated in log size), tiling and launch time, not a polynomial</span></td><td data-exact=\"{total}\">"
    )));
}

/// The rows of a per-device table: (amount, formula if any, exact value).
fn formula_rows(table: &str) -> Vec<(String, Option<String>, String)> {
    let cell = |x: &str, open: &str, close: &str| -> Option<String> {
        let from = x.find(open)? + open.len();
        Some(x[from..from + x[from..].find(close)?].to_string())
    };
    table
        .split("<tr><th>")
        .skip(1)
        .filter(|r| !r.starts_with("amount<") && r.contains("</th><td>"))
        .map(|r| {
            let name = r[..r.find("</th>").unwrap()].to_string();
            // The formula cell, then the value cell with its exact amount in `data-exact`.
            let formula_cell = cell(r, "</th><td>", "</td>").unwrap();
            let formula = cell(&formula_cell, "<code>", "</code>");
            let value = cell(r, "data-exact=\"", "\"").unwrap();
            (name, formula, value)
        })
        .collect()
}

/// The symbols' values of a JSON document's `symbols`.
fn symbols_of(doc: &serde_json::Value) -> symshard::sym::Bindings {
    doc["symbols"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().parse().unwrap()))
        .collect()
}

/// A formula the report prints, evaluated at `values`.
fn value_of(formula: &str, values: &symshard::sym::Bindings) -> symshard::sym::Rational {
    let html = formula.replace("&amp;", "&");
    symshard::sym::Poly::parse(&html)
        .unwrap_or_else(|e| panic!("{formula}: {e}"))
        .eval(values)
        .unwrap()
}

/// GPT-3 175B on 1024 devices (an interleaved pipeline): the HBM traffic, point-to-point bytes,
/// bubble fraction, the relative cost's compute and intra- and inter-node communication, the
/// activations and the memory total of the #1 row have formulas, and each evaluates at the
/// model's values to the number `rank` and `compare` print; the bubble and the total say why they
/// have none.
#[test]
fn report_relative_cost_formulas_evaluate_to_the_rankings_numbers() {
    let (top, html) = gpt3_report("relative.html");
    let table = per_device(&html);
    let knobs = format!(
        "dp={} tp={} pp={} microbatches={} chunks={} zero={} ep={} cp={} schedule={} recompute={}{}",
        top["dp"],
        top["tp"],
        top["pp"],
        top["microbatches"],
        top["chunks"],
        top["zero"],
        top["ep"],
        top["cp"],
        top["schedule"].as_str().unwrap(),
        top["recompute"].as_str().unwrap(),
        if top["sequence_parallel"] == true { " sp" } else { "" }
    );
    let cmp = json(&["compare", "gpt3-175b", &knobs, &knobs]);
    let values = symbols_of(&cmp);
    let rows = formula_rows(table);
    for (name, formula, value) in &rows {
        if let Some(f) = formula {
            assert_eq!(value_of(f, &values), value.parse().unwrap(), "{name}: {f}");
        }
    }
    let component = |group: &str, name: &str| {
        cmp["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["group"] == group && c["name"] == name)
            .unwrap()["a"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let relative = &top["relative"];
    let memory = &top["memory"];
    let want = [
        (
            "HBM traffic (FLOP-equivalents)",
            component("compute", "HBM traffic (FLOP-equivalents)"),
        ),
        (
            "point-to-point bytes/step",
            component("communication", "point-to-point bytes/step"),
        ),
        (
            "bubble ÷ slowest stage's time, (pp − 1)/(m·v)",
            component("pipeline", "bubble fraction"),
        ),
        ("compute", relative["compute"].as_str().unwrap().to_string()),
        (
            "intra-node communication",
            relative["comm_intra"].as_str().unwrap().to_string(),
        ),
        (
            "inter-node communication",
            relative["comm_inter"].as_str().unwrap().to_string(),
        ),
        (
            "activations",
            memory["activations"].as_str().unwrap().to_string(),
        ),
        ("total", memory["total"].as_str().unwrap().to_string()),
    ];
    for (name, number) in want {
        let (_, formula, _) = rows
            .iter()
            .find(|(n, f, v)| n == name && *v == number && f.is_some())
            .unwrap_or_else(|| panic!("no formula for {name} = {number}"));
        let f = formula.as_ref().unwrap();
        assert_eq!(value_of(f, &values), number.parse().unwrap(), "{name}");
    }
    assert!(rows.iter().any(|(n, f, v)| n == "total"
        && f.is_none()
        && *v == top["relative_cost"].as_str().unwrap()));
}

/// The body rows of a report table: each cell's shown text, markup removed.
fn html_rows(html: &str, id: &str) -> Vec<Vec<String>> {
    let table = html
        .split(&format!("id=\"{id}\""))
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap();
    let body = table.split("<tbody>").nth(1).unwrap();
    let strip = |cell: &str| {
        let mut out = String::new();
        let mut inside = false;
        for c in cell.chars() {
            match c {
                '<' => inside = true,
                '>' => inside = false,
                c if !inside => out.push(c),
                _ => {}
            }
        }
        out
    };
    body.split("<tr>")
        .skip(1)
        .map(|r| {
            r.split("<td")
                .skip(1)
                .map(|c| strip(&c[c.find('>').unwrap() + 1..c.find("</td>").unwrap()]))
                .collect()
        })
        .collect()
}

/// One figure per quantity: each row's bubble is shown once, in the ranking table, as `rank`
/// prints it (a share of the row's relative cost); the per-device bubble of #1 (in
/// FLOP-equivalents) is that share of its total; the timeline of #1 shows no second, simulated
/// bubble; and the schedule's (pp − 1)/(m·v) is not called a bubble fraction.
#[test]
fn the_report_shows_one_bubble_figure_per_row() {
    let (_, html) = gpt3_report("bubble.html");
    let out = symshard()
        .args(["rank", "gpt3-175b", "--devices", "1024", "--top", "3"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    // rank, dp, tp, pp, ep, cp, mbs, schedule, sp, recompute, zero, layout, cost and its unit,
    // compute, intra, inter, bubble.
    let printed: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("rank "))
        .skip(1)
        .take(3)
        .map(|l| l.split_whitespace().nth(17).unwrap().to_string())
        .collect();
    let head = html.split("id=\"ranking\"").nth(1).unwrap();
    let head = &head[..head.find("</thead>").unwrap()];
    let column = head
        .split("<th ")
        .skip(1)
        .position(|h| h.contains(">bubble</th>"))
        .unwrap();
    let shown: Vec<String> = html_rows(&html, "ranking")
        .iter()
        .map(|r| r[column].clone())
        .collect();
    assert_eq!(shown, printed);
    assert!(shown[0].ends_with('%') && shown[0] != "0.0%", "{shown:?}");
    // The per-device bubble and total of #1 give the same share.
    let rows = formula_rows(per_device(&html));
    let value = |name: &str| -> symshard::sym::Rational {
        rows.iter()
            .find(|r| r.0 == name)
            .unwrap()
            .2
            .parse()
            .unwrap()
    };
    assert_eq!(
        symshard::cli::units::percent(&value("bubble"), &value("total")),
        shown[0]
    );
    let timeline = html.split("<h2>Timeline of #1").nth(1).unwrap();
    let timeline = &timeline[..timeline.find("</table>").unwrap()];
    assert!(!timeline.contains("bubble"), "{timeline}");
    assert!(!html.contains("bubble fraction"));
    assert!(html.contains("<th>bubble ÷ slowest stage's time, (pp − 1)/(m·v)</th>"));
}

/// A ranking without a pipeline shows no bubble: `-` in every row, and no bubble in the
/// components chart's legend.
#[test]
fn a_report_without_a_pipeline_shows_no_bubble() {
    let path = tempfile_dir().join("no-pipeline.html");
    symshard()
        .args([
            "report",
            "llama2-7b",
            "--devices",
            "16",
            "--top",
            "4",
            "--fix",
            "pp=1",
            "-o",
        ])
        .arg(&path)
        .assert()
        .success();
    let html = std::fs::read_to_string(&path).unwrap();
    let rows = html_rows(&html, "ranking");
    assert_eq!(rows.len(), 4);
    // rank, dp, tp, pp, ep, cp, mbs, schedule, sp, recompute, zero, layout, cost, compute,
    // intra, inter, bubble.
    assert!(rows.iter().all(|r| r[3] == "1" && r[16] == "-"), "{rows:?}");
    assert!(!figure(&html, "components").contains("bubble"));
}

/// Every byte amount a person reads in the report is whole bytes: gpt3-125m under ZeRO 3 over
/// 7 data-parallel ranks holds a total of sevenths of a byte (JSON keeps the fraction), shown
/// with units and, on hover, as the whole bytes `--exact` prints.
#[test]
fn the_report_never_shows_a_fraction_of_a_byte() {
    let args = [
        "gpt3-125m",
        "--devices",
        "7",
        "--set",
        "B=7",
        "--fix",
        "dp=7,zero=3",
        "--top",
    ];
    let html = report_html("bytes.html", &[&args[..], &["3"]].concat());
    let rank = json(&[&["rank"], &args[..], &["1"]].concat());
    let top = &rank["strategies"][0];
    assert!(top["memory"]["total"].as_str().unwrap().ends_with("/7"));
    let rows = formula_rows(per_device(&html));
    let memory = top["memory"]["total"].as_str().unwrap();
    let total = rows
        .iter()
        .find(|r| r.0 == "total" && r.2 == memory)
        .expect("the exact amount is kept for checks");
    let shown = |html: &str, exact: &str| {
        let at = html.find(&format!("data-exact=\"{exact}\"")).unwrap();
        let cell = &html[at..];
        cell[..cell.find("</td>").unwrap()].to_string()
    };
    let cell = shown(&html, &total.2);
    let whole = whole_bytes(&total.2);
    assert!(
        cell.contains(&format!("title=\"{whole} bytes\">4.16 GB</span>")),
        "{cell}"
    );
    // No title, and no text outside the formulas and their data, holds a fraction of a byte.
    for (i, _) in html.match_indices(" bytes\"") {
        let title = &html[html[..i].rfind('"').unwrap() + 1..i];
        assert!(title.parse::<u128>().is_ok(), "{title}");
    }
    let visible = html_rows(&html, "collectives");
    assert!(visible
        .iter()
        .all(|r| r[3].ends_with('B') && !r[3].contains('/')));
}

/// A text's box on its canvas (left, top, right, bottom) and what it says.
type TextBox = ((f64, f64, f64, f64), String);

/// A text of an SVG drawn by `plotters`: its box (left, top, right, bottom, judging each
/// character 0.6 em wide) and what it says; rotated texts (the y axes' names) are left out.
fn text_boxes(svg: &str) -> Vec<TextBox> {
    let attr = |tag: &str, name: &str| -> Option<String> {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(tag[at..at + tag[at..].find('"')?].to_string())
    };
    svg.split("<text")
        .skip(1)
        .filter_map(|chunk| {
            let tag = &chunk[..chunk.find('>')?];
            if tag.contains("rotate(") {
                return None;
            }
            let body = chunk[tag.len() + 1..chunk.find("</text>")?]
                .trim()
                .to_string();
            let x: f64 = attr(tag, "x")?.parse().ok()?;
            let y: f64 = attr(tag, "y")?.parse().ok()?;
            let size: f64 = attr(tag, "font-size")?.parse().ok()?;
            let w = 0.6 * size * body.chars().count() as f64;
            let left = match attr(tag, "text-anchor").as_deref() {
                Some("middle") => x - w / 2.0,
                Some("end") => x - w,
                _ => x,
            };
            Some(((left, y, left + w, y + size), body))
        })
        .collect()
}

/// The memory-versus-cost chart, with and without `--calib`: both its panels (the frontier and
/// the rows shown close up) have labelled ticks on both axes, the close-up labels every row it
/// has room for and lists the others, and no two labels overlap.
#[test]
fn the_frontier_chart_labels_every_axis_without_overlap() {
    let dir = tempfile_dir();
    for (model, devices, calib) in [
        ("gpt3-175b", "1024", None),
        ("llama2-7b", "16", Some("h100-sxm")),
    ] {
        let path = dir.join(format!("ticks-{model}.html"));
        let mut cmd = symshard();
        cmd.args(["report", model, "--devices", devices]);
        if let Some(c) = calib {
            cmd.args(["--calib", c]);
        }
        cmd.arg("-o").arg(&path).assert().success();
        let html = std::fs::read_to_string(&path).unwrap();
        let chart = figure(&html, "frontier");
        let svg = &chart[chart.find("<svg").unwrap()..];
        texts_fit(svg).unwrap();
        let boxes = text_boxes(svg);
        // The two panels, above and below 420 px.
        for panel in [0.0..420.0, 420.0..f64::MAX] {
            let inside: Vec<&TextBox> =
                boxes.iter().filter(|(b, _)| panel.contains(&b.1)).collect();
            let numeric = |t: &str| t.split(' ').next().unwrap().parse::<f64>().is_ok();
            // x ticks lie on one row under the plot; y ticks end at the axis.
            let bottom = inside
                .iter()
                .filter(|(_, t)| numeric(t))
                .map(|(b, _)| b.1)
                .fold(0.0, f64::max);
            let x_ticks = inside
                .iter()
                .filter(|(b, t)| b.1 == bottom && numeric(t))
                .count();
            let y_ticks = inside
                .iter()
                .filter(|(b, t)| b.1 < bottom && numeric(t) && b.2 <= 72.0)
                .count();
            assert!(x_ticks >= 3, "{model}: {x_ticks} x ticks: {inside:?}");
            assert!(y_ticks >= 3, "{model}: {y_ticks} y ticks");
        }
        for (i, (a, s)) in boxes.iter().enumerate() {
            for (b, t) in &boxes[i + 1..] {
                let apart = a.2 <= b.0 || b.2 <= a.0 || a.3 <= b.1 || b.3 <= a.1;
                assert!(apart, "{model}: {s:?} {a:?} overlaps {t:?} {b:?}");
            }
        }
        // Every row is labelled with its rank in the close-up, or listed as unlabelled.
        let rows = html_rows(&html, "ranking").len();
        let labelled = boxes
            .iter()
            .filter(|(b, t)| {
                b.1 >= 420.0
                    && t.strip_prefix('#')
                        .is_some_and(|r| r.parse::<usize>().is_ok())
            })
            .count();
        let listed = boxes
            .iter()
            .find(|(_, t)| t.starts_with("not labelled"))
            .map_or(0, |(_, t)| t.matches('#').count());
        assert_eq!(labelled + listed, rows, "{model}");
        assert!(
            labelled * 2 > rows,
            "{model}: {labelled} of {rows} labelled"
        );
    }
}

/// The Gantt chart has a lane for each stream its devices use, and none left empty: no expert
/// or context-parallel lane without expert or context parallelism, none for tensor-parallel
/// collectives at tp = 1.
#[test]
fn the_gantt_chart_has_a_lane_only_for_streams_it_uses() {
    let dir = tempfile_dir();
    // (file, timeline arguments, lanes drawn, lanes not drawn)
    type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);
    let cases: [Case; 3] = [
        (
            "pp.svg",
            &["gpt3-125m", "--dp", "2", "--pp", "2", "--microbatches", "2"],
            &["dp_comm", "p2p"],
            &["tp_comm", "ep_comm", "cp_comm"],
        ),
        (
            "ep.svg",
            &[
                "mixtral-8x7b",
                "--dp",
                "8",
                "--ep",
                "8",
                "--microbatches",
                "1",
            ],
            &["ep_comm"],
            &["cp_comm", "p2p"],
        ),
        (
            "cp.svg",
            &["llama3-8b", "--dp", "2", "--cp", "4", "--microbatches", "2"],
            &["cp_comm"],
            &["ep_comm", "p2p"],
        ),
    ];
    for (file, args, present, absent) in cases {
        let path = dir.join(format!("lanes-{file}"));
        symshard()
            .arg("timeline")
            .args(args)
            .arg("--svg")
            .arg(&path)
            .assert()
            .success();
        let svg = std::fs::read_to_string(&path).unwrap();
        let lanes: Vec<&str> = svg
            .split("text-anchor=\"end\">")
            .skip(1)
            .map(|t| t[..t.find('<').unwrap()].rsplit(" · ").next().unwrap())
            .collect();
        assert!(lanes.contains(&"compute"), "{file}: {lanes:?}");
        for s in present {
            assert!(lanes.contains(s), "{file}: {s} in {lanes:?}");
        }
        for s in absent {
            assert!(!lanes.contains(s), "{file}: {s} in {lanes:?}");
        }
    }
}

/// The collectives table tells a layer norm's two weight gradients apart: GPT-3's `ln1` and
/// `ln2` each reduce a gamma and a beta gradient, listed as `(dgamma)` and `(dbeta)` rows, and
/// no two rows of the table read the same.
#[test]
fn the_collectives_table_labels_the_gamma_and_beta_gradients_apart() {
    let (_, html) = gpt3_report("gamma-beta.html");
    let rows = html_rows(&html, "collectives");
    assert!(!rows.is_empty());
    // collective, axis, tier, bytes per call, calls per step, where.
    for norm in ["ln1", "ln2"] {
        for grad in ["dgamma", "dbeta"] {
            let site = format!("{norm} ({grad})");
            assert!(
                rows.iter().any(|r| r[5] == site),
                "no row for {site}: {rows:?}"
            );
        }
        let unlabelled = rows.iter().filter(|r| r[5] == norm).count();
        assert_eq!(unlabelled, 0, "{norm}: a weight gradient without its name");
    }
    let distinct: BTreeSet<&Vec<String>> = rows.iter().collect();
    assert_eq!(
        distinct.len(),
        rows.len(),
        "rows that read the same: {rows:?}"
    );
}

/// A collective over a group of one device moves nothing and is not listed: at tp = 1 the
/// report's collectives table (as `cost`'s) has no tensor-parallel row of 0 bytes, while the
/// data-parallel gradient traffic is listed.
#[test]
fn a_tp1_report_lists_no_tensor_parallel_collective_of_zero_bytes() {
    let html = report_html(
        "tp1.html",
        &[
            "llama2-7b",
            "--devices",
            "16",
            "--top",
            "3",
            "--fix",
            "tp=1",
        ],
    );
    let ranking = html_rows(&html, "ranking");
    // rank, dp, tp, …
    assert_eq!(ranking[0][2], "1", "{:?}", ranking[0]);
    let rows = html_rows(&html, "collectives");
    assert!(rows.iter().any(|r| r[1] == "dp"), "{rows:?}");
    // collective, axis, tier, bytes per call, calls per step, where.
    let empty: Vec<&Vec<String>> = rows
        .iter()
        .filter(|r| r[3] == "0 B" || (r[1] == "tp" && r[3].starts_with("0 ")))
        .collect();
    assert!(empty.is_empty(), "collectives that move nothing: {empty:?}");
    assert!(rows.iter().all(|r| r[1] != "tp"), "{rows:?}");
}

/// The drawn shapes (`<rect>` and `<polyline>`) of the components chart's bars, one group a bar
/// from left to right (the ranking's order), as their topmost pixel row: shapes are grouped by
/// the x span of the bar they lie within, so the outline, hatching or marker of a bar counts as
/// part of it.
fn bar_tops(svg: &str, plot_right: f64) -> Vec<f64> {
    let attr = |tag: &str, name: &str| -> Option<f64> {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        tag[at..at + tag[at..].find('"')?].parse().ok()
    };
    // Each rect's (left, top, right).
    let rects: Vec<(f64, f64, f64)> = svg
        .split("<rect")
        .skip(1)
        .filter_map(|chunk| {
            let tag = &chunk[..chunk.find('>')?];
            let (x, y, w) = (attr(tag, "x")?, attr(tag, "y")?, attr(tag, "width")?);
            (x + w <= plot_right && w < 100.0).then_some((x, y, x + w))
        })
        .collect();
    // Bars: rects clustered by their centre.
    let mut spans: Vec<(f64, f64, f64)> = vec![];
    let mut by_centre = rects.clone();
    by_centre.sort_by(|a, b| (a.0 + a.2).partial_cmp(&(b.0 + b.2)).unwrap());
    for (l, t, r) in by_centre {
        match spans.last_mut() {
            Some(s) if ((l + r) / 2.0 - (s.0 + s.2) / 2.0).abs() <= 4.0 => {
                *s = (s.0.min(l), s.1.min(t), s.2.max(r));
            }
            _ => spans.push((l, t, r)),
        }
    }
    // Polylines (hatching, outlines, markers) within a bar's span raise its top where they
    // reach higher.
    for chunk in svg.split("<polyline").skip(1) {
        let tag = &chunk[..chunk.find('>').unwrap()];
        let at = tag.find(" points=\"").unwrap() + 9;
        let points: Vec<(f64, f64)> = tag[at..at + tag[at..].find('"').unwrap()]
            .split_whitespace()
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        for s in spans.iter_mut() {
            if points.iter().all(|(x, _)| s.0 <= *x && *x <= s.2) {
                s.1 = points.iter().map(|p| p.1).fold(s.1, f64::min);
            }
        }
    }
    spans.iter().map(|s| s.1).collect()
}

/// In the components chart #1 never looks like the worst row: no shape of #1's bar (what overlap
/// hides included) reaches above the bar of any row whose total is larger. On an A100 table
/// GPT-3 175B on 1,024 devices ranks first a ZeRO-3 row that hides much of its data-parallel
/// traffic (its bar with that traffic stacked on top was nearly the tallest of the 20).
#[test]
fn the_components_chart_never_draws_row_1_above_a_costlier_row() {
    for calib in [Some("a100-80gb"), None] {
        let mut args = vec!["gpt3-175b", "--devices", "1024", "--top", "20"];
        if let Some(c) = calib {
            args.extend(["--calib", c]);
        }
        let file = format!("tallest-{}.html", calib.unwrap_or("none"));
        let html = report_html(&file, &args);
        let rank = json(&[&["rank"][..], &args].concat());
        let rows = rank["strategies"].as_array().unwrap();
        assert_eq!(rows.len(), 20);
        assert_ne!(rows[0]["relative"]["hidden"], "0", "{calib:?}: {}", rows[0]);
        // The bars' totals: the relative cost, also where seconds rank the rows.
        let totals: Vec<symshard::sym::Rational> = rows
            .iter()
            .map(|r| r["relative_cost"].as_str().unwrap().parse().unwrap())
            .collect();
        assert!(
            totals.iter().skip(1).any(|t| *t > totals[0]),
            "{calib:?}: no row costs more than #1: {totals:?}"
        );
        let chart = figure(&html, "components");
        let svg = &chart[chart.find("<svg").unwrap()..];
        // The plot lies left of the legend, which starts at 780 px.
        let tops = bar_tops(svg, 780.0);
        assert_eq!(tops.len(), rows.len(), "{calib:?}: {tops:?}");
        for (j, total) in totals.iter().enumerate().skip(1) {
            if *total > totals[0] {
                // SVG's y grows downwards: a taller shape has a smaller top.
                assert!(
                    tops[0] >= tops[j],
                    "{calib:?}: #1 (total {}) reaches y = {} px, above #{} (total {total}) at {} px",
                    totals[0],
                    tops[0],
                    j + 1,
                    tops[j]
                );
            }
        }
    }
}

/// Ranked by seconds, the report says which stack profiles the seconds include, as `rank` does:
/// none by default, each row's own with `--stack auto` (and the #1's in its timeline summary).
#[test]
fn a_report_by_seconds_names_its_stack_profiles() {
    let base = ["gpt3-1.3b", "--devices", "16", "--calib", "a100-80gb"];
    let free = report_html("stack-free.html", &base);
    assert!(
        free.contains("stack profile: none, profile-free"),
        "no profile-free line"
    );
    let mut auto = base.to_vec();
    auto.extend(["--stack", "auto"]);
    let auto = report_html("stack-auto.html", &auto);
    assert!(auto.contains("stack profile: per row (--stack auto): "));
    assert!(auto.contains("<tr><th>stack profile</th><td>"));
    // Ranked by relative cost there are no seconds to qualify.
    let relative = report_html("stack-relative.html", &base[..3]);
    assert!(!relative.contains("stack profile"));
}

/// With `--calib`, the simulated #1's MFU is labelled with what it is of, and the note under
/// it gives the definition (under FP8 and FP4 it can pass 100 %).
#[test]
fn report_says_what_mfu_is_of() {
    let html = report_html(
        "mfu.html",
        &[
            "gpt3-1.3b",
            "--devices",
            "8",
            "--calib",
            "a100-80gb",
            "--top",
            "2",
        ],
    );
    assert!(
        html.contains("<th>MFU (of the bf16 peak)</th>"),
        "no MFU label"
    );
    assert!(
        html.contains(symshard::units::MFU_MEANS),
        "no MFU definition"
    );
    assert!(!html.contains("<th>MFU</th>"));
}
