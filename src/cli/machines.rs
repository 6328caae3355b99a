//! `symshard machines [NAME]`: the shipped calibration tables at a glance, or one table's every
//! number with its source.

use super::output::{print_json, print_table};
use super::Format;
use crate::error::Error;
use crate::units;
use clap::Args;

/// Arguments of `machines`.
#[derive(Debug, Args)]
pub struct MachinesArgs {
    /// A machine (a shipped table's name, or a calibration file): list every number of its
    /// table with its source instead of the shipped machines.
    pub name: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `machines`.
pub fn run(args: MachinesArgs) -> Result<(), Error> {
    match &args.name {
        None => list(args.format),
        Some(name) => sources(name, args.format),
    }
}

/// The shipped machines, one line each.
fn list(format: Format) -> Result<(), Error> {
    let rows = crate::api::machines()?;
    if format == Format::Json {
        return print_json(&rows);
    }
    // Rounded with units, or with --exact as the table states them.
    let amount = |v: &crate::sym::Rational, unit: &str| {
        if units::exact() {
            v.to_string()
        } else {
            units::si(v, 4, unit)
        }
    };
    let flops = |r: &crate::api::MachineEntry, k: &str| {
        r.peak_flops
            .get(k)
            .map_or_else(|| "-".to_string(), |v| amount(v, "FLOP/s"))
    };
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.device.clone(),
                flops(r, "bf16"),
                flops(r, "fp8"),
                flops(r, "fp4"),
                amount(&r.memory_bandwidth, "B/s"),
                if units::exact() {
                    r.memory_capacity.to_string()
                } else {
                    units::bytes_rounded(&r.memory_capacity)
                },
                r.gpus_per_node.to_string(),
                amount(&r.intra_bandwidth, "B/s"),
                amount(&r.inter_bandwidth, "B/s"),
                r.inter_algorithm.clone(),
            ]
        })
        .collect();
    let head = [
        "machine",
        "device",
        "bf16",
        "fp8",
        "fp4",
        "HBM",
        "memory",
        "per node",
        "in node",
        "across nodes",
        "all-reduce",
    ];
    print_table("", "<<>>>>>>>><", &head, &table);
    println!();
    println!(
        "bf16, fp8, fp4: dense peak per device (- where the datasheet gives none); HBM: memory \
         bandwidth per device; in node, across nodes: link bandwidth per device and direction as \
         rated (the tables' efficiencies and measured bus bandwidths apply on top); all-reduce: \
         how an all-reduce across nodes runs (nccl: NCCL's ring or tree, whichever its model \
         times faster); `symshard machines NAME` lists every number of a table with its source"
    );
    Ok(())
}

/// Every number of one table with its source.
fn sources(name: &str, format: Format) -> Result<(), Error> {
    let (c, rows) = crate::api::machine_sources(name)?;
    if format == Format::Json {
        return print_json(&rows);
    }
    println!("{} — {}", c.name, c.doc);
    for r in &rows {
        println!();
        println!("{} = {}", r.path, r.value);
        println!("  {}", r.source);
    }
    Ok(())
}
