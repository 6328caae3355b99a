//! Embeds the shipped operator rules, models and calibration tables in the binary, so that it
//! works from any directory without the repository.

use std::fmt::Write as _;
use std::path::Path;

fn embed(out: &mut String, konst: &str, dir: &str) {
    // Read when the script runs, not when it was compiled: cargo may reuse one compiled
    // script for a checkout at another path.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let root = Path::new(&manifest).join(dir);
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    writeln!(out, "/// Files embedded from `{dir}/`: (stem, text).").unwrap();
    writeln!(out, "pub static {konst}: &[(&str, &str)] = &[").unwrap();
    for p in files {
        println!("cargo:rerun-if-changed={}", p.display());
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        writeln!(
            out,
            "    ({stem:?}, include_str!({:?})),",
            p.display().to_string()
        )
        .unwrap();
    }
    writeln!(out, "];").unwrap();
}

fn main() {
    let mut out = String::new();
    embed(&mut out, "RULES", "operator_rules");
    embed(&mut out, "MODELS", "models");
    embed(&mut out, "FAMILIES", "models/families");
    embed(&mut out, "CALIBRATIONS", "calibration");
    embed(&mut out, "VALIDATIONS", "validation");
    embed(&mut out, "STACKS", "stacks");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("embedded.rs");
    std::fs::write(dest, out).unwrap();
}
