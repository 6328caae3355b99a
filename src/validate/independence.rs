//! Whether a validation file's measurements are independent of the calibration numbers they
//! judge. A row whose publication also supplied a number of its machine's table (a kernel's
//! rate measured in the same paper, say) tests nothing that number has not already seen: it is
//! printed, but left out of the headline figures.
//!
//! A file says so itself (`independent: false`, with what it shares in `shares:`). The check
//! here keeps the declaration honest: the publication identifiers of the file's `source`
//! (arXiv numbers, DOIs, GitHub repositories) are looked up among the sources of every number
//! of the table, and a file that shares one but declares itself independent is refused.

use crate::calib::Calibration;
use std::collections::BTreeSet;

/// A number of a calibration table whose source cites a publication the validation source
/// cites too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    /// The identifier both cite (`arXiv:2307.08691`, `github.com/owner/repo`, `doi:10.…`).
    pub identifier: String,
    /// Where the number sits in the table (`device.efficiency.attention`).
    pub number: String,
}

/// The publication identifiers `text` cites, normalised: arXiv numbers without their version
/// (`arXiv:2307.08691`), DOIs (`doi:10.1145/…`, lower-case) and GitHub repositories
/// (`github.com/owner/repo`, lower-case).
pub fn identifiers(text: &str) -> BTreeSet<String> {
    let lower = text.to_ascii_lowercase();
    let mut out = BTreeSet::new();
    for (at, _) in lower.match_indices("arxiv:") {
        let rest = lower[at + "arxiv:".len()..].trim_start();
        let id: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let id = id.trim_end_matches('.');
        if id.contains('.') && id.len() >= 9 {
            out.insert(format!("arXiv:{id}"));
        }
    }
    for (at, _) in lower.match_indices("github.com/") {
        let rest = &lower[at + "github.com/".len()..];
        let parts: Vec<&str> = rest
            .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
            .next()
            .unwrap_or("")
            .split('/')
            .take(2)
            .map(|s| s.trim_end_matches('.'))
            .collect();
        if parts.len() == 2 && parts.iter().all(|p| !p.is_empty()) {
            out.insert(format!("github.com/{}/{}", parts[0], parts[1]));
        }
    }
    for (at, _) in lower.match_indices("10.") {
        // A DOI: `10.` then a registrant code of digits, `/`, a suffix up to a space.
        let before = lower[..at].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '.') {
            continue;
        }
        let rest = &lower[at..];
        let doi: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace() && !matches!(c, ')' | ',' | ';' | '"'))
            .collect();
        let doi = doi.trim_end_matches('.');
        let registrant = doi[3..].split('/').next().unwrap_or("");
        if doi.contains('/')
            && registrant.len() >= 4
            && registrant.chars().all(|c| c.is_ascii_digit())
        {
            out.insert(format!("doi:{doi}"));
        }
    }
    out
}

/// Every `source` of `calib`'s numbers, with where it sits (`device.peak_flops.bf16`).
fn sources(calib: &Calibration) -> Vec<(String, String)> {
    fn walk(v: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    if k == "source" {
                        if let serde_json::Value::String(s) = x {
                            out.push((path.join("."), s.clone()));
                        }
                        continue;
                    }
                    path.push(k.clone());
                    walk(x, path, out);
                    path.pop();
                }
            }
            serde_json::Value::Array(a) => {
                for x in a {
                    walk(x, path, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_json::to_value(calib) {
        walk(&v, &mut Vec::new(), &mut out);
    }
    out
}

/// The numbers of `calib` whose sources cite a publication that `source` (a validation file's
/// source of its measurements) cites too.
pub fn shared_with(source: &str, calib: &Calibration) -> Vec<Shared> {
    let ids = identifiers(source);
    if ids.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (number, text) in sources(calib) {
        for identifier in identifiers(&text).intersection(&ids) {
            out.push(Shared {
                identifier: identifier.clone(),
                number: number.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_normalised() {
        let ids = identifiers(
            "Dao 2023, FlashAttention-2 (arXiv:2307.08691v1), Table 1; github.com/Dao-AILab/flash-attention/training, doi:10.1145/3458817.3476209.",
        );
        let want: BTreeSet<String> = [
            "arXiv:2307.08691",
            "github.com/dao-ailab/flash-attention",
            "doi:10.1145/3458817.3476209",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(ids, want);
    }

    #[test]
    fn numbers_and_ratios_are_not_identifiers() {
        // Version numbers, rates and fractions look like neither.
        assert!(identifiers("NeMo 24.12, 10.5 % at 1/2 of 989e12 FLOP/s, GB/s").is_empty());
    }

    #[test]
    fn the_flash_attention_2_table_shares_the_a100_attention_curve() {
        let calib = Calibration::resolve("a100-80gb").unwrap();
        let shared = shared_with("Dao 2023 (arXiv:2307.08691v1), Table 1", &calib);
        assert!(
            shared
                .iter()
                .any(|s| s.identifier == "arXiv:2307.08691" && s.number.contains("attention")),
            "{shared:?}"
        );
        // The Megatron-LM paper supplies no number of the table.
        assert!(shared_with("Narayanan et al. 2021 (arXiv:2104.04473)", &calib).is_empty());
    }
}
