//! A set of rules by name: the shipped ones, plus any the user points at.

use super::load::{load_rule, load_rule_file};
use super::rule::{Flops, OpRule};
use crate::diag::Source;
use crate::embedded;
use crate::error::{Error, Result};
use crate::sym::{Bindings, Poly, Rational};
use num_traits::Signed;
use std::collections::BTreeMap;
use std::path::Path;

/// A rule of a user's `--rules` folder that replaced one already in the set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    /// The rule's name.
    pub rule: String,
    /// The file that replaced it.
    pub file: std::path::PathBuf,
}

impl std::fmt::Display for Replaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "note: `{}` replaces the shipped rule `{}`",
            self.file.display(),
            self.rule
        )
    }
}

/// Rules by name.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: BTreeMap<String, OpRule>,
}

impl RuleSet {
    /// The rules shipped in `operator_rules/`, built into the binary.
    pub fn embedded() -> Result<RuleSet> {
        let mut set = RuleSet::default();
        for (stem, text) in embedded::RULES {
            let src = Source::new(embedded::display_path("operator_rules", stem), *text);
            set.insert(load_rule(&src, Some(stem))?);
        }
        Ok(set)
    }

    /// Adds every `*.yaml` rule in `dir`, replacing rules of the same name; returns the rules
    /// it replaced, so that the caller can say so (a silent replacement would change every
    /// model that uses the rule).
    pub fn add_dir(&mut self, dir: &Path) -> Result<Vec<Replaced>> {
        let rd = std::fs::read_dir(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut paths: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        paths.sort();
        let mut replaced = Vec::new();
        for p in paths
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        {
            let rule = load_rule_file(&p)?;
            check_signs(&rule)?;
            if self.rules.contains_key(&rule.name) {
                replaced.push(Replaced {
                    rule: rule.name.clone(),
                    file: p.clone(),
                });
            }
            self.insert(rule);
        }
        Ok(replaced)
    }

    /// Adds (or replaces) one rule.
    pub fn insert(&mut self, rule: OpRule) {
        self.rules.insert(rule.name.clone(), rule);
    }

    /// The rule called `name`.
    pub fn get(&self, name: &str) -> Option<&OpRule> {
        self.rules.get(name)
    }

    /// All rules, by name.
    pub fn iter(&self) -> impl Iterator<Item = &OpRule> {
        self.rules.values()
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// A rule named on the command line: a path to a rule file, or a rule's name.
    pub fn resolve(&self, arg: &str) -> Result<OpRule> {
        let path = Path::new(arg);
        if arg.ends_with(".yaml") || arg.ends_with(".yml") || path.is_file() {
            let rule = load_rule_file(path)?;
            check_signs(&rule)?;
            return Ok(rule);
        }
        self.get(arg).cloned().ok_or_else(|| {
            let names: Vec<&str> = self.rules.keys().map(String::as_str).collect();
            Error::Usage(format!(
                "unknown rule `{arg}`{} (known: {})",
                crate::suggest::did_you_mean(arg, names.iter().copied()),
                names.join(", ")
            ))
        })
    }
}

/// Refuses a user's rule whose stated FLOPs are negative at some sizes (every size symbol bound
/// to the same value, small to large), before `cost` or `explain` uses it: no count of work can
/// be. `audit` loads rules without this check, so that it can report such a rule as failing.
fn check_signs(rule: &OpRule) -> Result<()> {
    let formulas: Vec<(&str, &Poly)> = match &rule.flops {
        Flops::Explicit { forward, backward } => {
            vec![("flops", forward), ("backward_flops", backward)]
        }
        Flops::Einsum => Vec::new(),
    };
    let recompute = ("recompute_flops", &rule.recompute_flops);
    for (field, f) in formulas.into_iter().chain([recompute]) {
        for v in [1u64, 2, 64, 4096] {
            let b: Bindings = f
                .symbols()
                .into_iter()
                .map(|s| (s, Rational::from_integer(v.into())))
                .collect();
            if f.eval(&b).is_ok_and(|x| x.is_negative()) {
                let message = format!(
                    "rule `{}`: `{field}` = {f} is negative when every size is {v}; FLOPs \
                     cannot be (`symshard audit` shows the rule's checks)",
                    rule.name
                );
                return Err(match Source::read(&rule.file) {
                    Ok(src) => src.error_at(&[field], message),
                    Err(_) => Error::at(&rule.file, 1, 1, message),
                });
            }
        }
    }
    Ok(())
}
