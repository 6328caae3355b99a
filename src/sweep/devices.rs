//! Where the winner changes between two adjacent device counts: each of the two best layouts
//! scaled to the counts between them and timed as the points are, so the change is placed on
//! the device counts both layouts run, not only between the two that were swept.

use super::point::{Point, Row};
use super::spec::Loaded;
use crate::api::PointSearch;

/// The most device counts between two adjacent points that a crossover along the devices times.
pub const MAX_DEVICE_STEPS: usize = 8;

/// A layout's knobs as `--fix` items at `devices` devices: its data-parallel degree and
/// micro-batch count follow the devices (the global batch stays), every other knob as it is.
/// None where the devices do not hold whole copies of its model-parallel group or the batch
/// does not split into whole micro-batches over the data-parallel ranks.
fn scaled(r: &Row, devices: u64) -> Option<String> {
    let (dp, mbs, batch) = (r.dp?, r.micro_batch_size?, r.batch?);
    let group = r.devices.checked_div(dp)?;
    if group == 0 || !devices.is_multiple_of(group) {
        return None;
    }
    let dp = devices / group;
    if dp == 0 || mbs == 0 || !batch.is_multiple_of(dp * mbs) {
        return None;
    }
    let mut fix = format!(
        "dp={dp},tp={},pp={},cp={},ep={},mbs={mbs},microbatches={},zero={},sp={},recompute={}",
        r.tp?,
        r.pp?,
        r.cp?,
        r.ep?,
        batch / (dp * mbs),
        r.zero?,
        if r.sequence_parallel? { "on" } else { "off" },
        r.recompute.as_deref()?.split('|').next()?,
    );
    if r.pp? > 1 {
        fix.push_str(&format!(",schedule={}", r.schedule.as_deref()?));
        if r.schedule.as_deref() == Some("interleaved-1f1b") {
            fix.push_str(&format!(",chunks={}", r.chunks?));
        }
    }
    Some(fix)
}

/// `fix`'s items but those whose knob `given` (the spec's own `--fix` items) fixes already: the
/// spec's fixes hold at every point, the scaled layout's included, and a knob is fixed once.
fn without_given(fix: &str, given: &[String]) -> String {
    let knob = |item: &str| {
        item.split('=')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let given: Vec<String> = given.iter().flat_map(|f| f.split(',')).map(knob).collect();
    let own: Vec<&str> = fix
        .split(',')
        .filter(|item| !given.contains(&knob(item)))
        .collect();
    own.join(",")
}

/// What a crossover along the devices could not compare: the counts (`unmatched`) where one
/// of the two layouts does not run or fit, and the first where one could not be searched at
/// all, with why; empty where there are none.
fn gaps(lead: &str, unmatched: &[String], failed: &Option<(u64, String)>) -> String {
    let mut out = String::new();
    if !unmatched.is_empty() {
        out.push_str(&format!(
            "; {lead}at {} devices one of the two does not run or fit",
            unmatched.join(", ")
        ));
    }
    if let Some((d, why)) = failed {
        out.push_str(&format!(
            "; at {d} devices a layout could not be searched: {why}"
        ));
    }
    out
}

/// The device counts strictly between `a`'s and `b`'s at which both layouts run, in order,
/// each with the two layouts scaled to it ([`scaled`]).
fn between(a: &Row, b: &Row) -> Vec<(u64, String, String)> {
    let (lo, hi) = (a.devices, b.devices);
    let Some(group) = a.dp.and_then(|dp| a.devices.checked_div(dp)) else {
        return Vec::new();
    };
    if group == 0 {
        return Vec::new();
    }
    // `a`'s counts are whole multiples of its group; of those, the ones both layouts run.
    (lo / group + 1..)
        .map(|k| k * group)
        .take_while(|&d| d < hi)
        .filter_map(|d| Some((d, scaled(a, d)?, scaled(b, d)?)))
        .collect()
}

impl Loaded {
    /// Simulated seconds per step of `fix` at `devices` devices on `p`'s model, machine,
    /// precision, batch and sequence, searched as a point is (the spec's own `fix` and `max`
    /// too); none where that layout does not run or fit there, and why where it could not be
    /// searched at all (as a point's row says why).
    fn seconds_of(
        &self,
        p: &Point,
        row: &Row,
        fix: &str,
        devices: u64,
    ) -> Result<Option<f64>, crate::Error> {
        let model = &self.models[p.at[0]];
        let calib = &self.machines[p.at[1]];
        let mut all = self.fix.clone();
        all.push(format!("precision={}", row.precision));
        all.push(without_given(fix, &self.fix));
        let search = PointSearch {
            model: &row.model,
            devices,
            set: self.sets(p, model)?,
            fix: all,
            max: self.max.clone(),
            headroom: self.spec.headroom.clone(),
        };
        let (values, opts) = search.options(model, calib)?;
        let result = crate::search::rank(model, &values, calib, &opts)?;
        let Some(top) = result.rows.first() else {
            return Ok(None);
        };
        Ok(top.evaluation.feasible.then_some(top.seconds).flatten())
    }

    /// Between two points adjacent along the devices whose best layouts `a` (at `p`) and `b`
    /// differ: both layouts scaled to the counts between them ([`scaled`]) and timed by
    /// simulated seconds as the points are, and the first count where `b`'s is no slower.
    pub(super) fn device_crossover(&self, p: &Point, a: &Row, b: &Row) -> String {
        // In increasing devices, whatever the order the spec lists them in.
        let (a, b) = if a.devices <= b.devices {
            (a, b)
        } else {
            (b, a)
        };
        let (fa, fb) = (
            a.family.as_deref().unwrap_or_default(),
            b.family.as_deref().unwrap_or_default(),
        );
        let counts = between(a, b);
        if counts.is_empty() {
            return format!(
                "no device count between {} and {} runs both layouts (each needs whole copies of its model-parallel group and whole micro-batches of the batch over its data-parallel ranks): the change lies between the two",
                a.devices, b.devices
            );
        }
        let tried = &counts[..counts.len().min(MAX_DEVICE_STEPS)];
        let mut last_a = a.devices;
        let mut unmatched = Vec::new();
        // The first count at which a layout could not be searched, and why.
        let mut failed: Option<(u64, String)> = None;
        for (d, fix_a, fix_b) in tried {
            let d = *d;
            let mut time = |r: &Row, fix: &String| {
                self.seconds_of(p, r, fix, d).unwrap_or_else(|e| {
                    failed.get_or_insert_with(|| (d, e.to_string()));
                    None
                })
            };
            let (ta, tb) = (time(a, fix_a), time(b, fix_b));
            match (ta, tb) {
                (Some(ta), Some(tb)) if tb <= ta => {
                    return format!(
                        "by simulated seconds, each layout scaled to the devices between (its dp and micro-batch count follow them): {fa} is faster up to {last_a} devices, {fb} from {d} ({tb:.3} s against {ta:.3} s){}",
                        gaps("before that, ", &unmatched, &failed)
                    );
                }
                (Some(_), Some(_)) => last_a = d,
                // One of them does not run or fit at `d`: no comparison there.
                _ => unmatched.push(d.to_string()),
            }
        }
        let unmatched = gaps("", &unmatched, &failed);
        let more = if counts.len() > tried.len() {
            format!(
                " (the first {} of {} counts between tried)",
                tried.len(),
                counts.len()
            )
        } else {
            String::new()
        };
        format!(
            "by simulated seconds, each layout scaled to the devices between (its dp and micro-batch count follow them): {fa} is faster up to {last_a} devices{more}, {fb} at {}{unmatched}",
            b.devices
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{gaps, scaled, without_given};
    use crate::sweep::point::Row;

    /// A row read back from a journal, whatever its numbers, scales without a panic: a
    /// micro-batch size or data-parallel degree of 0 scales to nothing.
    #[test]
    fn a_row_of_zeros_scales_to_nothing() {
        let row = |dp: u64, mbs: u64, batch: u64| {
            let floats = [
                "seconds_per_step",
                "tokens_per_second",
                "mfu",
                "gpu_hours_per_trillion_tokens",
                "tdp_watts",
                "energy_per_step_joules",
                "energy_mwh_per_trillion_tokens",
                "price_per_gpu_hour",
                "cost_per_step_dollars",
                "cost_per_trillion_tokens_dollars",
            ];
            let nulls: Vec<String> = floats.iter().map(|f| format!(r#""{f}":null"#)).collect();
            let text = format!(
                r#"{{"point":0,"model":"m","machine":"x","devices":8,"precision":"bf16","feasible":true,{}}}"#,
                nulls.join(",")
            );
            let mut r: Row = serde_json::from_str(&text).unwrap();
            (r.dp, r.micro_batch_size, r.batch) = (Some(dp), Some(mbs), Some(batch));
            (r.tp, r.pp, r.cp, r.ep, r.zero) = (Some(1), Some(1), Some(1), Some(1), Some(0));
            (r.sequence_parallel, r.recompute) = (Some(false), Some("none".into()));
            r
        };
        assert_eq!(scaled(&row(8, 0, 64), 16), None);
        assert_eq!(scaled(&row(8, 0, 0), 16), None);
        assert_eq!(scaled(&row(0, 1, 64), 16), None);
        assert_eq!(
            scaled(&row(8, 1, 64), 16).as_deref(),
            Some("dp=16,tp=1,pp=1,cp=1,ep=1,mbs=1,microbatches=4,zero=0,sp=off,recompute=none")
        );
    }

    /// A count at which a layout could not be searched is reported with why, beside the
    /// counts where one of the two does not run or fit; nothing where all compared.
    #[test]
    fn a_failed_search_is_named_with_its_reason() {
        assert_eq!(gaps("", &[], &None), "");
        let unmatched = vec!["24".to_string(), "40".to_string()];
        assert_eq!(
            gaps("before that, ", &unmatched, &None),
            "; before that, at 24, 40 devices one of the two does not run or fit"
        );
        let failed = Some((40, "tp=8 does not divide 12 heads".to_string()));
        assert_eq!(
            gaps("", &unmatched, &failed),
            "; at 24, 40 devices one of the two does not run or fit; at 40 devices a layout could not be searched: tp=8 does not divide 12 heads"
        );
    }

    #[test]
    fn a_knob_the_spec_fixes_is_not_fixed_again() {
        let given = vec!["zero=1".to_string(), "recompute=full, sp=on".to_string()];
        assert_eq!(
            without_given("dp=4,tp=2,zero=1,sp=on,recompute=full,mbs=1", &given),
            "dp=4,tp=2,mbs=1"
        );
        assert_eq!(without_given("dp=4,tp=2", &[]), "dp=4,tp=2");
    }
}
