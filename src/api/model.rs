//! [`Model`]: a model as asked for — where it comes from, the sizes to price it at and the
//! settings that change how its operators run.

use crate::diag::Source;
use crate::error::Error;
use crate::model::{AttentionMode, LossMode, ModelLoader};
use crate::rules::RuleSet;
use crate::sym::{Bindings, Rational};
use std::path::{Path, PathBuf};

/// Where a model comes from.
#[derive(Debug, Clone)]
pub enum ModelSource {
    /// A shipped or user model's name, or a model file's path (YAML, a Hugging Face
    /// `config.json`, an ONNX graph), as the command line takes it.
    Named(String),
    /// The text of a model file (YAML); `label` names it in messages.
    Yaml {
        /// The text.
        text: String,
        /// Its name in messages (`file:line:column` point into `text`).
        label: String,
    },
    /// The text of a Hugging Face `config.json`; `label` names it in messages, `name` names the
    /// model.
    HfConfig {
        /// The JSON text.
        text: String,
        /// Its name in messages (`file:line:column` point into `text`).
        label: String,
        /// The model's name.
        name: String,
    },
}

/// One symbol bound to a value.
#[derive(Debug, Clone)]
enum Binding {
    /// An exact value.
    Exact(String, Rational),
    /// `SYM=VALUE` as written (`--set`), read by the model file's rules for values.
    Text(String),
}

impl Binding {
    /// The symbol's name and how the binding reads in messages.
    fn name_and_text(&self) -> (String, String) {
        match self {
            Binding::Exact(n, v) => (n.clone(), format!("{n}={v}")),
            Binding::Text(t) => (
                t.split_once('=')
                    .map_or(t.as_str(), |(k, _)| k.trim())
                    .into(),
                t.clone(),
            ),
        }
    }
}

/// A model as asked for: its source, the symbols bound to other values than its own, and how
/// attention, the loss and dropout run.
#[derive(Debug, Clone)]
pub struct Model {
    source: ModelSource,
    bindings: Vec<Binding>,
    attention: Option<AttentionMode>,
    loss: LossMode,
    train_metrics: u32,
    dropout: Option<bool>,
    recompute_modules: Option<Vec<crate::model::RecomputeModule>>,
    rules: Option<PathBuf>,
    spelling: super::Spelling,
}

/// A model loaded and its symbols' values.
pub(crate) struct Loaded {
    /// The model.
    pub model: crate::model::Model,
    /// Its symbols' values, bindings applied.
    pub values: Bindings,
    /// The rules it was built with.
    pub rules: RuleSet,
    /// The names of the symbols bound (sizes not named are reported as assumed).
    pub bound: Vec<String>,
}

impl Model {
    /// A model from `source` at its own sizes and settings.
    pub fn new(source: ModelSource) -> Model {
        Model {
            source,
            bindings: Vec::new(),
            attention: None,
            loss: LossMode::default(),
            train_metrics: 0,
            dropout: None,
            recompute_modules: None,
            rules: None,
            spelling: super::Spelling::default(),
        }
    }

    /// The model with its refusals of bindings naming the option as `spelling`'s caller
    /// writes it (`--set` on the command line, by default; `symbols` in Python).
    pub fn spelled(mut self, spelling: super::Spelling) -> Model {
        self.spelling = spelling;
        self
    }

    /// A shipped or user model's name, or a model file's path.
    pub fn named(name: impl Into<String>) -> Model {
        Model::new(ModelSource::Named(name.into()))
    }

    /// The model with `symbol` bound to `value`.
    pub fn set(mut self, symbol: impl Into<String>, value: Rational) -> Model {
        self.bindings.push(Binding::Exact(symbol.into(), value));
        self
    }

    /// The model with a binding written `SYM=VALUE` (any value a model file takes).
    pub fn set_text(mut self, binding: impl Into<String>) -> Model {
        self.bindings.push(Binding::Text(binding.into()));
        self
    }

    /// How attention runs; `None`: the model's setting.
    pub fn attention(mut self, mode: Option<AttentionMode>) -> Model {
        self.attention = mode;
        self
    }

    /// How the loss over the vocabulary runs in timelines.
    pub fn loss(mut self, mode: LossMode) -> Model {
        self.loss = mode;
        self
    }

    /// Evaluations of the loss as a training metric per micro-batch (0 to 16).
    pub fn train_metrics(mut self, n: u32) -> Model {
        self.train_metrics = n;
        self
    }

    /// Whether dropout runs; `None`: the model file's `dropout`, else on.
    pub fn dropout(mut self, on: Option<bool>) -> Model {
        self.dropout = on;
        self
    }

    /// What selective recomputation recomputes; `None`: the model file's `recompute_modules`,
    /// else `core_attn` ([`crate::model::RecomputeModule`]).
    pub fn recompute_modules(
        mut self,
        modules: Option<Vec<crate::model::RecomputeModule>>,
    ) -> Model {
        self.recompute_modules = modules;
        self
    }

    /// Also load the operator rules in this directory.
    pub fn rules(mut self, dir: Option<PathBuf>) -> Model {
        self.rules = dir;
        self
    }

    /// Its source.
    pub fn source(&self) -> &ModelSource {
        &self.source
    }

    /// The shipped rules and families, building models with the settings asked for.
    pub(crate) fn loader(&self) -> Result<ModelLoader, Error> {
        if self.train_metrics > crate::model::MAX_TRAIN_METRICS {
            return Err(Error::Usage(format!(
                "train_metrics {}: at most {} evaluations of the loss per micro-batch",
                self.train_metrics,
                crate::model::MAX_TRAIN_METRICS
            )));
        }
        let mut loader = ModelLoader::embedded()?
            .with_attention(self.attention)
            .with_loss(self.loss)
            .with_train_metrics(self.train_metrics)
            .with_dropout(self.dropout)
            .with_recompute_modules(self.recompute_modules.clone());
        if let Some(dir) = &self.rules {
            for r in loader.rules.add_dir(dir)? {
                crate::diag::note(r.to_string());
            }
        }
        Ok(loader)
    }

    /// Loads the model and applies its bindings.
    pub(crate) fn load(&self) -> Result<Loaded, Error> {
        let loader = self.loader()?;
        let model = match &self.source {
            ModelSource::Named(arg) => loader.resolve(arg)?,
            ModelSource::Yaml { text, label } => loader.load(&Source::new(label, text.as_str()))?,
            ModelSource::HfConfig { text, label, name } => {
                let imported =
                    crate::model::import::hf::import_hf_text(Path::new(label), text.clone(), name)?;
                loader.load(&Source::new(label, imported.yaml))?
            }
        };
        let values = self.bind(&model)?;
        let bound = self.bindings.iter().map(|b| b.name_and_text().0).collect();
        Ok(Loaded {
            model,
            values,
            rules: loader.rules,
            bound,
        })
    }

    /// The model's symbol values with the bindings applied.
    pub(crate) fn bind(&self, model: &crate::model::Model) -> Result<Bindings, Error> {
        let mut values = model.values.clone();
        let set = self.spelling.name(super::OptionName::Set);
        for b in &self.bindings {
            let (name, s) = b.name_and_text();
            if let Binding::Text(t) = b {
                if !t.contains('=') {
                    return Err(Error::Usage(format!("{set} `{s}`: expected SYM=VALUE")));
                }
            }
            if !model.symbols.contains_key(&name) {
                let known: Vec<&str> = model.symbols.keys().map(String::as_str).collect();
                return Err(Error::Usage(format!(
                    "{set} `{s}`: model `{}` has no symbol `{name}` (its symbols: {})",
                    model.name,
                    known.join(", ")
                )));
            }
            let v = match b {
                Binding::Exact(_, v) => v.clone(),
                Binding::Text(t) => {
                    let value = t.split_once('=').map_or("", |(_, v)| v);
                    crate::model::symbol_value(&crate::model::spec::SymbolValue {
                        value: value.trim().to_string(),
                        source: None,
                        assumed: false,
                    })
                    .map_err(|m| Error::Usage(format!("{set} `{s}`: {m}")))?
                }
            };
            values.insert(name, v);
        }
        if !self.bindings.is_empty() {
            model
                .check_sizes(&values)
                .map_err(|e| Error::Usage(format!("{set}: {e}")))?;
        }
        Ok(values)
    }
}
