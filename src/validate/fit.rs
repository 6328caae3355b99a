//! Fitting a stack profile from measured step times (`symshard calibrate --from-runs`).
//!
//! The fit set is declared: a validation file (every row that measures step seconds), or a
//! fit-set file naming validation files and, for each, the rows. Each parameter of the profile
//! adds seconds at a named place of the timeline, so a row's step time is close to linear in
//! them: the fit is a least-squares fit of the relative errors, linearised by finite
//! differences of the timeline itself and solved exactly over the signs (no parameter is
//! negative), three Gauss–Newton rounds from zero. The reported errors come from the timeline
//! with the fitted values, never from the linearisation: in sample, and with each source (each
//! row, when there is one source) left out of the fit and predicted by the rest.

use super::{run_file_with, Measure};
use crate::calib::stack::{
    FitRows, FitSummary, Param, ParamEntry, ProfileFile, StackProfile, SupportsFile,
};
use crate::diag::Source;
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// A fit-set file: which rows, which parameters, and what the profile is.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FitSetFile {
    /// The profile's name.
    name: String,
    /// What stack, which versions, where the runs come from.
    doc: String,
    /// The validation label the profile applies to.
    #[serde(default)]
    label: Option<String>,
    /// The parameters to fit (default: every one).
    #[serde(default)]
    parameters: Option<Vec<String>>,
    /// The rows.
    fit_set: Vec<FitRows>,
    /// The layouts the stack runs, copied into the profile (absent: every layout).
    #[serde(default)]
    supports: Option<SupportsFile>,
}

/// One validation file of a fit set, loaded.
struct FitFile {
    /// Its stem: the source's name.
    stem: String,
    source: Source,
    /// The rows fitted (`None`: every row that measures step seconds).
    rows: Option<Vec<String>>,
    /// How the fit set names it.
    named: String,
    /// Its item's place in the fit-set file's `fit_set` (an error about its rows points
    /// there); `None` for a validation file fitted whole.
    item: Option<usize>,
}

/// A fit set: what to fit, on which rows.
pub struct FitSet {
    name: String,
    doc: String,
    label: Option<String>,
    params: Vec<Param>,
    files: Vec<FitFile>,
    /// The layouts the stack runs, as the fit-set file states them (checked).
    supports: Option<SupportsFile>,
    /// The fit-set file, where one names the files (`None`: a validation file fitted whole).
    src: Option<Source>,
}

/// One fitted row.
#[derive(Debug, Clone)]
pub struct FitRow {
    /// Its source (the validation file's stem).
    pub source: String,
    /// Its name.
    pub name: String,
    /// Published seconds per step.
    pub published: f64,
    /// Predicted without a profile.
    pub profile_free: f64,
    /// Predicted with the fitted profile.
    pub fitted: f64,
}

/// One source left out.
#[derive(Debug, Clone)]
pub struct LeftOut {
    /// The source (or row, with one source) left out.
    pub left_out: String,
    /// The profile fitted without it.
    pub values: BTreeMap<Param, f64>,
    /// Its rows' published and predicted seconds.
    pub rows: Vec<(f64, f64)>,
    /// How many rows the refit without it had.
    pub kept: usize,
}

impl LeftOut {
    /// Whether the refit without it had fewer rows than `params` parameters: then the rows do
    /// not determine the profile, and the values are one of many that fit them equally well.
    pub fn underdetermined(&self, params: usize) -> bool {
        self.kept < params
    }
}

/// A fit's outcome.
pub struct Fit {
    /// The profile file to write.
    pub file: ProfileFile,
    /// The rows.
    pub rows: Vec<FitRow>,
    /// Each source (or row) left out in turn.
    pub left_out: Vec<LeftOut>,
    /// Whether leaving out is by row (a fit set of one source).
    pub by_row: bool,
    /// The parameters fitted.
    pub params: Vec<Param>,
}

impl FitSet {
    /// Reads a fit set from `path`: a validation file (every step-time row, every parameter,
    /// the profile named `name`), or a fit-set file.
    pub fn read(path: &Path, name: &str) -> Result<FitSet> {
        let src = Source::read(path)?;
        let raw: serde_yaml::Value = src.parse()?;
        if raw.get("runs").is_some() {
            let label = super::file_stack(&src)?;
            let stem = stem_of(path);
            return Ok(FitSet {
                name: name.to_string(),
                doc: format!(
                    "fitted by symshard calibrate --from-runs on every step-time row of {stem}"
                ),
                label,
                params: Param::ALL.to_vec(),
                files: vec![FitFile {
                    stem,
                    source: src,
                    rows: None,
                    named: path.display().to_string(),
                    item: None,
                }],
                supports: None,
                src: None,
            });
        }
        let file: FitSetFile = src.parse()?;
        let mut params = Vec::new();
        for (i, p) in file.parameters.iter().flatten().enumerate() {
            let param = Param::from_name(p).ok_or_else(|| {
                src.error_at(
                    &["parameters", &i.to_string()],
                    format!("unknown parameter `{p}`"),
                )
            })?;
            params.push(param);
        }
        if file.parameters.is_none() {
            params = Param::ALL.to_vec();
        }
        if file.fit_set.is_empty() {
            return Err(src.error_at(&["fit_set"], "a fit set names at least one file"));
        }
        if let Some(s) = &file.supports {
            s.check(&file.name, &src)?;
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut files = Vec::new();
        for (i, f) in file.fit_set.iter().enumerate() {
            let source = validation_source(&f.file, dir)
                .map_err(|e| src.error_at(&["fit_set", &i.to_string(), "file"], e.to_string()))?;
            files.push(FitFile {
                stem: stem_of(Path::new(&f.file)),
                source,
                rows: f.rows.clone(),
                named: f.file.clone(),
                item: Some(i),
            });
        }
        Ok(FitSet {
            name: file.name,
            doc: file.doc,
            label: file.label,
            params,
            files,
            supports: file.supports,
            src: Some(src),
        })
    }

    /// The rows' (source, name, published seconds), checking that every named row exists and
    /// measures step seconds.
    fn rows(&self) -> Result<Vec<(String, String, f64)>> {
        let mut out = Vec::new();
        for f in &self.files {
            let o = run_file_with(&f.stem, &f.source, None)?;
            let steps: Vec<_> = o
                .rows
                .iter()
                .filter(|r| r.measure == Measure::IterationSeconds)
                .collect();
            for name in f.rows.iter().flatten() {
                if !steps.iter().any(|r| &r.name == name) {
                    let message = format!(
                        "{}: no row `{name}` that measures seconds per step",
                        f.named
                    );
                    return Err(match (&self.src, f.item) {
                        (Some(src), Some(i)) => {
                            src.error_at(&["fit_set", &i.to_string(), "rows", name], message)
                        }
                        _ => Error::Usage(message),
                    });
                }
            }
            for r in steps {
                if f.rows.as_ref().is_none_or(|rows| rows.contains(&r.name)) {
                    out.push((f.stem.clone(), r.name.clone(), r.published));
                }
            }
        }
        Ok(out)
    }

    /// Predicted seconds of every fit row under `values`, in the order of [`FitSet::rows`].
    fn predict(&self, values: &BTreeMap<Param, f64>) -> Result<Vec<f64>> {
        let profile = StackProfile::of(&self.name, values.clone());
        let mut out = Vec::new();
        for f in &self.files {
            let o = run_file_with(&f.stem, &f.source, Some(&profile))?;
            for r in o
                .rows
                .iter()
                .filter(|r| r.measure == Measure::IterationSeconds)
            {
                if f.rows.as_ref().is_none_or(|rows| rows.contains(&r.name)) {
                    out.push(r.predicted);
                }
            }
        }
        Ok(out)
    }

    /// Fits the profile and measures it.
    pub fn fit(&self) -> Result<Fit> {
        let rows = self.rows()?;
        let n = rows.len();
        if n == 0 {
            return Err(Error::Usage(
                "the fit set has no row that measures seconds per step".into(),
            ));
        }
        let published: Vec<f64> = rows.iter().map(|r| r.2).collect();
        let all: Vec<usize> = (0..n).collect();
        let mut values: BTreeMap<Param, f64> = BTreeMap::new();
        let mut lin = Linear::default();
        for _ in 0..3 {
            lin = self.linearise(&values, &published)?;
            values = lin.solve(&all).values;
        }
        values = values.into_iter().map(|(p, v)| (p, round_sig(v))).collect();
        let solution = lin.solve(&all);
        let fitted = self.predict(&values)?;
        let profile_free = self.predict(&BTreeMap::new())?;
        let sources: Vec<String> = dedup(rows.iter().map(|r| r.0.clone()));
        let by_row = sources.len() < 2;
        let left_out = self.leave_out(&rows, &sources, by_row, &lin)?;
        let fit_rows: Vec<FitRow> = rows
            .iter()
            .enumerate()
            .map(|(i, (source, name, published))| FitRow {
                source: source.clone(),
                name: name.clone(),
                published: *published,
                profile_free: profile_free[i],
                fitted: fitted[i],
            })
            .collect();
        let in_sample = mean_abs(fit_rows.iter().map(|r| (r.published, r.fitted)));
        let loo = (!left_out.is_empty())
            .then(|| mean_abs(left_out.iter().flat_map(|l| l.rows.iter().copied())));
        let underdetermined = left_out
            .iter()
            .filter(|l| l.underdetermined(self.params.len()))
            .map(|l| l.left_out.clone())
            .collect();
        let summary = FitSummary {
            rows: n,
            sources: sources.len(),
            in_sample_error: round_sig(in_sample),
            leave_one_out_error: loo.map(round_sig),
            underdetermined,
        };
        let file = self.profile_file(&values, &solution.errors, summary);
        Ok(Fit {
            file,
            rows: fit_rows,
            left_out,
            by_row,
            params: self.params.clone(),
        })
    }

    /// The timeline's step times and their slopes in each parameter at `values`.
    fn linearise(&self, values: &BTreeMap<Param, f64>, published: &[f64]) -> Result<Linear> {
        let at = self.predict(values)?;
        let mut slopes = Vec::new();
        for &p in &self.params {
            let mut moved = values.clone();
            *moved.entry(p).or_insert(0.0) += p.probe();
            let t = self.predict(&moved)?;
            slopes.push(
                t.iter()
                    .zip(&at)
                    .map(|(a, b)| (a - b) / p.probe())
                    .collect(),
            );
        }
        Ok(Linear {
            params: self.params.clone(),
            at: values.clone(),
            base: at,
            slopes,
            published: published.to_vec(),
        })
    }

    /// Each source (or row) left out: the profile refitted on the rest (one Gauss–Newton step
    /// from the full fit's linearisation) and the left-out rows predicted by the timeline.
    fn leave_out(
        &self,
        rows: &[(String, String, f64)],
        sources: &[String],
        by_row: bool,
        lin: &Linear,
    ) -> Result<Vec<LeftOut>> {
        let groups: Vec<(String, Vec<usize>)> = if by_row {
            if rows.len() < 2 {
                return Ok(Vec::new());
            }
            rows.iter()
                .enumerate()
                .map(|(i, r)| (r.1.clone(), vec![i]))
                .collect()
        } else {
            sources
                .iter()
                .map(|s| {
                    (
                        s.clone(),
                        (0..rows.len()).filter(|&i| &rows[i].0 == s).collect(),
                    )
                })
                .collect()
        };
        let mut out = Vec::new();
        for (left_out, held) in groups {
            let kept: Vec<usize> = (0..rows.len()).filter(|i| !held.contains(i)).collect();
            let values: BTreeMap<Param, f64> = lin
                .solve(&kept)
                .values
                .into_iter()
                .map(|(p, v)| (p, round_sig(v)))
                .collect();
            let predicted = self.predict(&values)?;
            let rows = held.iter().map(|&i| (rows[i].2, predicted[i])).collect();
            out.push(LeftOut {
                left_out,
                values,
                rows,
                kept: kept.len(),
            });
        }
        Ok(out)
    }

    fn profile_file(
        &self,
        values: &BTreeMap<Param, f64>,
        errors: &BTreeMap<Param, f64>,
        fit: FitSummary,
    ) -> ProfileFile {
        let parameters = self
            .params
            .iter()
            .map(|p| {
                let entry = ParamEntry {
                    value: values.get(p).copied().unwrap_or(0.0),
                    uncertainty: errors.get(p).map(|e| round_sig(*e)),
                    means: Some(p.meaning().to_string()),
                };
                (p.name().to_string(), entry)
            })
            .collect();
        ProfileFile {
            name: self.name.clone(),
            doc: self.doc.clone(),
            label: self.label.clone(),
            fit_set: self
                .files
                .iter()
                .map(|f| FitRows {
                    file: f.stem.clone(),
                    rows: f.rows.clone(),
                })
                .collect(),
            parameters,
            fit: Some(fit),
            supports: self.supports.clone(),
        }
    }
}

/// A validation file named by a fit set: a path (relative to the fit set's folder), or the
/// stem of a shipped one.
fn validation_source(name: &str, dir: &Path) -> Result<Source> {
    let path = dir.join(name);
    if path.is_file() {
        return Source::read(&path);
    }
    super::shipped()
        .into_iter()
        .find(|(stem, _)| stem == name)
        .map(|(_, src)| src)
        .ok_or_else(|| {
            Error::Usage(format!(
                "`{name}`: neither a file (from {}) nor a shipped validation file",
                dir.display()
            ))
        })
}

fn stem_of(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default()
}

fn dedup(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in items {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Mean |predicted ÷ published − 1| of (published, predicted) pairs.
pub fn mean_abs(pairs: impl Iterator<Item = (f64, f64)>) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for (published, predicted) in pairs {
        sum += (predicted / published - 1.0).abs();
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Four significant digits: what a profile file states.
fn round_sig(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let digits = 3 - v.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits);
    (v * scale).round() / scale
}

/// Step times linearised in the parameters around `at`.
#[derive(Default)]
struct Linear {
    params: Vec<Param>,
    at: BTreeMap<Param, f64>,
    /// Step time of each row at `at`.
    base: Vec<f64>,
    /// Per parameter, per row: seconds of step per second of the parameter.
    slopes: Vec<Vec<f64>>,
    published: Vec<f64>,
}

/// A least-squares solution.
struct Solution {
    values: BTreeMap<Param, f64>,
    /// Standard errors of the positive parameters, where the rows leave degrees of freedom.
    errors: BTreeMap<Param, f64>,
}

impl Linear {
    /// The non-negative least-squares fit of the relative errors over `rows`: the best of the
    /// unconstrained fits over each subset of the parameters whose values are all ≥ 0 (exact
    /// for so few parameters).
    fn solve(&self, rows: &[usize]) -> Solution {
        let k = self.params.len();
        // Relative residual: (published − base + Σ slope·at − Σ slope·θ) ÷ published.
        let a: Vec<Vec<f64>> = rows
            .iter()
            .map(|&i| {
                (0..k)
                    .map(|j| self.slopes[j][i] / self.published[i])
                    .collect()
            })
            .collect();
        let b: Vec<f64> = rows
            .iter()
            .map(|&i| {
                let shift: f64 = (0..k)
                    .map(|j| {
                        self.slopes[j][i] * self.at.get(&self.params[j]).copied().unwrap_or(0.0)
                    })
                    .sum();
                (self.published[i] - self.base[i] + shift) / self.published[i]
            })
            .collect();
        let mut best: Option<(f64, usize, Vec<usize>, Vec<f64>)> = None;
        for mask in 0u32..(1 << k) {
            let active: Vec<usize> = (0..k).filter(|j| mask & (1 << j) != 0).collect();
            let Some(theta) = least_squares(&a, &b, &active) else {
                continue;
            };
            if theta.iter().any(|t| *t < 0.0) {
                continue;
            }
            let rss = residual(&a, &b, &active, &theta);
            let better = best.as_ref().is_none_or(|(r, n, _, _)| {
                rss < r * (1.0 - 1e-9) || (rss <= r * (1.0 + 1e-9) && active.len() < *n)
            });
            if better {
                best = Some((rss, active.len(), active, theta));
            }
        }
        let (rss, _, active, theta) = best.unwrap_or((0.0, 0, Vec::new(), Vec::new()));
        let mut values = BTreeMap::new();
        for &p in &self.params {
            values.insert(p, 0.0);
        }
        for (j, t) in active.iter().zip(&theta) {
            values.insert(self.params[*j], *t);
        }
        let errors = standard_errors(&a, &active, rss, rows.len())
            .map(|se| active.iter().map(|&j| self.params[j]).zip(se).collect())
            .unwrap_or_default();
        Solution { values, errors }
    }
}

/// The normal-equations matrix of the columns `active` of `a`.
fn gram(a: &[Vec<f64>], active: &[usize]) -> Vec<Vec<f64>> {
    active
        .iter()
        .map(|&p| {
            active
                .iter()
                .map(|&q| a.iter().map(|row| row[p] * row[q]).sum())
                .collect()
        })
        .collect()
}

/// The least-squares coefficients of columns `active` (`None` when they are collinear).
fn least_squares(a: &[Vec<f64>], b: &[f64], active: &[usize]) -> Option<Vec<f64>> {
    if active.is_empty() {
        return Some(Vec::new());
    }
    let g = gram(a, active);
    let rhs: Vec<f64> = active
        .iter()
        .map(|&p| a.iter().zip(b).map(|(row, y)| row[p] * y).sum())
        .collect();
    solve_scaled(g, rhs)
}

/// Solves `g x = rhs` (symmetric, positive semi-definite) after scaling to a unit diagonal,
/// by elimination with partial pivoting; `None` when singular.
fn solve_scaled(mut g: Vec<Vec<f64>>, mut rhs: Vec<f64>) -> Option<Vec<f64>> {
    let n = g.len();
    let scale: Vec<f64> = (0..n).map(|i| g[i][i].sqrt()).collect();
    if scale
        .iter()
        .any(|s| s.is_nan() || *s <= 0.0 || !s.is_finite())
    {
        return None;
    }
    for i in 0..n {
        for j in 0..n {
            g[i][j] /= scale[i] * scale[j];
        }
        rhs[i] /= scale[i];
    }
    for c in 0..n {
        let pivot = (c..n).max_by(|&x, &y| g[x][c].abs().total_cmp(&g[y][c].abs()))?;
        if g[pivot][c].abs() < 1e-10 {
            return None;
        }
        g.swap(c, pivot);
        rhs.swap(c, pivot);
        let (top, rest) = g.split_at_mut(c + 1);
        let pivot_row = &top[c];
        for (i, row) in rest.iter_mut().enumerate() {
            let f = row[c] / pivot_row[c];
            for (x, p) in row[c..].iter_mut().zip(&pivot_row[c..]) {
                *x -= f * p;
            }
            rhs[c + 1 + i] -= f * rhs[c];
        }
    }
    let mut x = vec![0.0; n];
    for c in (0..n).rev() {
        let s: f64 = (c + 1..n).map(|k| g[c][k] * x[k]).sum();
        x[c] = (rhs[c] - s) / g[c][c];
    }
    Some(x.iter().zip(&scale).map(|(v, s)| v / s).collect())
}

fn residual(a: &[Vec<f64>], b: &[f64], active: &[usize], theta: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(row, y)| {
            let fit: f64 = active.iter().zip(theta).map(|(&j, t)| row[j] * t).sum();
            (y - fit).powi(2)
        })
        .sum()
}

/// Standard errors of the active coefficients: √ of the diagonal of σ² (AᵀA)⁻¹ with σ² the
/// residual variance; `None` without degrees of freedom left.
fn standard_errors(a: &[Vec<f64>], active: &[usize], rss: f64, n: usize) -> Option<Vec<f64>> {
    if active.is_empty() || n <= active.len() {
        return None;
    }
    let sigma2 = rss / (n - active.len()) as f64;
    let g = gram(a, active);
    let mut out = Vec::new();
    for i in 0..active.len() {
        let mut e = vec![0.0; active.len()];
        e[i] = 1.0;
        let col = solve_scaled(g.clone(), e)?;
        out.push((sigma2 * col[i]).max(0.0).sqrt());
    }
    Some(out)
}
