//! A set of rules by name: the shipped ones, plus any the user points at.

use super::load::{load_rule, load_rule_file};
use super::rule::OpRule;
use crate::diag::Source;
use crate::embedded;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::Path;

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

    /// Adds every `*.yaml` rule in `dir`, replacing shipped rules of the same name.
    pub fn add_dir(&mut self, dir: &Path) -> Result<()> {
        let rd = std::fs::read_dir(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut paths: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        paths.sort();
        for p in paths
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        {
            self.insert(load_rule_file(&p)?);
        }
        Ok(())
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
            return load_rule_file(path);
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
