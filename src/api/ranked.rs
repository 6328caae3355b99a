//! A ranking with what the command line prints after it: the top row as a launch
//! configuration (`rank --emit`) and #1 against #2 (`rank --why`). What `symshard rank` prints
//! and what the Python package's `rank` returns.

use super::{RankDetail, RankOptions, RankResult};
use crate::calib::Calibration;
use crate::emit::Emit;
use crate::error::Error;
use crate::search::LayoutKind;
use crate::strategy::Knobs;

/// A ranking as `rank` computes it, before it is printed: the typed result, with `--emit`'s
/// configuration and `--why`'s comparison.
pub struct Ranked {
    /// The ranking.
    pub result: RankResult,
    pub(crate) emitted: Option<crate::emit::Emitted>,
    pub(crate) why: Option<super::Comparison>,
    pub(crate) batch_and_sequence: String,
    pub(crate) calib: Calibration,
}

impl Ranked {
    /// The ranking as `rank --format json` prints it.
    pub fn json(&self) -> Result<serde_json::Value, Error> {
        serde_json::to_value(self.document())
            .map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))
    }

    pub(crate) fn document(
        &self,
    ) -> super::RankDocument<'_, &serde_json::Value, &super::Comparison> {
        self.result
            .document(self.emitted.as_ref().map(|e| &e.json), self.why.as_ref())
    }
}

/// [`crate::rank`] with `--emit`'s configuration and `--why`'s comparison: what the
/// Python package calls. Warnings and notes are kept in the result's `warnings`.
pub fn rank_with(
    model: &super::Model,
    opts: &RankOptions,
    emit: Option<Emit>,
    why: bool,
) -> Result<Ranked, Error> {
    let (out, notes) = crate::diag::capture_notes(|| {
        let loaded = model.load()?;
        ranked_loaded(&loaded, opts, emit, why, &mut |_, _| {})
    });
    let mut r = out?;
    r.result.warnings = notes;
    Ok(r)
}

/// [`rank_with`] on a loaded model, `progress` told how many of the mesh shapes are ranked.
pub(crate) fn ranked_loaded(
    loaded: &super::Loaded,
    opts: &RankOptions,
    emit: Option<Emit>,
    why: bool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Ranked, Error> {
    let (result, detail) = super::rank_loaded(loaded, opts, progress)?;
    let top = Top {
        emit,
        why,
        detail: &detail,
    };
    let emitted = top.emitted()?;
    let why = top.why()?;
    Ok(Ranked {
        emitted,
        why,
        batch_and_sequence: crate::units::batch_and_sequence(&detail.model, &detail.values),
        calib: detail.calib,
        result,
    })
}

/// What a ranking hands to `--emit` and `--why`.
struct Top<'a> {
    emit: Option<Emit>,
    why: bool,
    detail: &'a RankDetail,
}

impl Top<'_> {
    /// A row priced again on its own, as `compare` prices it.
    fn price(
        &self,
        k: &Knobs,
        seconds: bool,
        layout: &crate::search::RowLayout,
    ) -> Result<super::Evaluated, Error> {
        let d = self.detail;
        let on = crate::calib::MachineRef::new(&d.calib, d.search.gpus_per_node, &d.search.memory);
        super::evaluate_knobs(&d.model, &d.values, k, on, seconds, &layout.overrides())
    }

    /// `--emit`: per-operator placements carry any layout; Megatron-LM's and torchtitan's
    /// flags express only the annotated one, so they describe the best row that uses it.
    fn emitted(&self) -> Result<Option<crate::emit::Emitted>, Error> {
        let (Some(emit), Some(top)) = (self.emit, self.detail.result.rows.first()) else {
            return Ok(None);
        };
        if emit == Emit::Json {
            return crate::emit::emit(
                Emit::Json,
                &self.detail.model,
                &self.detail.values,
                &top.evaluation,
                &top.layout.overrides(),
            )
            .map(Some);
        }
        let Some(r) = self
            .detail
            .result
            .rows
            .iter()
            .find(|r| r.layout.kind == LayoutKind::Annotated || r.evaluation.knobs.tp == 1)
        else {
            return Err(Error::Usage(
                "--emit: no row shown uses the annotated layout, which is all Megatron-LM's and torchtitan's flags express; use --emit json for the auto layout's placements, or --layouts annotated".into(),
            ));
        };
        // A grouped row's other members, priced again when the row's own knobs are ones the
        // target cannot run.
        let reprice = |k: &Knobs| self.price(k, false, &r.layout).map(|e| e.evaluation);
        let mut e =
            crate::emit::emit_ranked(emit, &self.detail.model, &self.detail.values, r, &reprice)?;
        if r.rank != top.rank {
            e.text = format!(
                "# row {} (the best row with the annotated layout: the flags cannot express the auto layout of row {})\n{}",
                r.rank, top.rank, e.text
            );
        }
        Ok(Some(e))
    }

    /// `--why`: #1 against #2, component by component.
    fn why(&self) -> Result<Option<super::Comparison>, Error> {
        let rows = &self.detail.result.rows;
        let (true, Some(first), Some(second)) = (self.why, rows.first(), rows.get(1)) else {
            return Ok(None);
        };
        let seconds = self.detail.search.seconds;
        let a = self.price(&first.evaluation.knobs, seconds, &first.layout)?;
        let b = self.price(&second.evaluation.knobs, seconds, &second.layout)?;
        Ok(Some(super::comparison(
            &self.detail.model,
            &self.detail.values,
            &self.detail.calib,
            &a,
            &b,
        )))
    }
}
