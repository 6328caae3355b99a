//! Amounts as the terminal tables print them: FLOPs and bytes with decimal SI prefixes (1 GB =
//! 10⁹ bytes, as the calibration tables state capacities; 1 PFLOP = 10¹⁵ FLOP), counts with
//! thousands separators. Rounding is done exactly on the rational amount (half away from zero),
//! so an amount is never shown larger or smaller than it rounds to.
//!
//! Each quantity has one formatter here, and every table, message and the HTML report print that
//! quantity through it: FLOPs ([`flops`]), bytes ([`bytes`]), counts ([`count`]), shares of a
//! whole such as the pipeline bubble ([`percent`]).
//!
//! JSON never goes through here: it keeps exact integers and fractions. `--exact` makes every
//! function below print the exact integer or fraction instead, for auditing — except bytes, which
//! are whole bytes everywhere a person reads them, and percentages, which are rounded shares of
//! amounts `--exact` prints exactly.

use crate::sym::Rational;
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};
use std::cell::Cell;

thread_local! {
    /// Whether tables print exact amounts (`--exact`).
    static EXACT: Cell<bool> = const { Cell::new(false) };
}

/// Whether `--exact` is in force.
pub fn exact() -> bool {
    EXACT.with(Cell::get)
}

/// Runs `f` with `--exact` on or off, restoring the previous setting afterwards.
pub fn with_exact<T>(on: bool, f: impl FnOnce() -> T) -> T {
    let before = EXACT.with(|e| e.replace(on));
    let out = f();
    EXACT.with(|e| e.set(before));
    out
}

/// Significant digits of FLOP amounts.
const FLOP_DIGITS: u32 = 4;
/// Significant digits of byte amounts.
const BYTE_DIGITS: u32 = 3;
/// Decimal prefixes, one per factor of 1000.
const PREFIXES: [&str; 11] = ["", "k", "M", "G", "T", "P", "E", "Z", "Y", "R", "Q"];

/// The legend line of the units the tables use.
pub const UNITS_LEGEND: &str =
    "units are decimal: 1 GB = 10⁹ bytes, 1 TFLOP = 10¹² FLOP, 1 PFLOP = 10¹⁵, 1 EFLOP = 10¹⁸; --exact prints exact numbers";

/// An amount exactly: an integer, or a fraction `p/q` in lowest terms.
pub fn exact_text(r: &Rational) -> String {
    if r.is_integer() {
        r.to_integer().to_string()
    } else {
        r.to_string()
    }
}

fn pow10(n: u32) -> BigInt {
    num_traits::pow(BigInt::from(10), n as usize)
}

/// `a` (positive) rounded to `sig` significant digits: `(m, e)` with `a ≈ m × 10^(e − sig + 1)`
/// and `10^(sig−1) ≤ m < 10^sig`; `e` is the decimal exponent of the rounded amount.
fn round_sig(a: &Rational, sig: u32) -> (BigInt, i64) {
    let ten = Rational::from_integer(10.into());
    let one = Rational::one();
    // The exponent e with 10^e ≤ a < 10^(e+1).
    let mut e: i64 = 0;
    if a >= &one {
        e = a.to_integer().to_string().len() as i64 - 1;
    } else {
        let mut x = a.clone();
        while x < one {
            x *= &ten;
            e -= 1;
        }
    }
    let shift = sig as i64 - 1 - e;
    let scaled = if shift >= 0 {
        a * Rational::from_integer(pow10(shift as u32))
    } else {
        a / Rational::from_integer(pow10((-shift) as u32))
    };
    let mut m = scaled.round().to_integer();
    if m == pow10(sig) {
        m = pow10(sig - 1);
        e += 1;
    }
    (m, e)
}

/// `r` with `sig` significant digits and a decimal prefix before `unit` (`"1.129 EFLOP"`,
/// `"80.0 GB"`); an integer below 1000 prints as itself (`"512 B"`, `"0 FLOP"`). Beyond the
/// largest prefix the amount is written with an exponent.
pub fn si(r: &Rational, sig: u32, unit: &str) -> String {
    let sep = if unit.is_empty() { "" } else { " " };
    if r.is_zero() {
        return format!("0{sep}{unit}");
    }
    let sign = if r.is_negative() { "-" } else { "" };
    let a = r.abs();
    if a.is_integer() && a < Rational::from_integer(1000.into()) {
        return format!("{sign}{}{sep}{unit}", a.to_integer());
    }
    let (m, e) = round_sig(&a, sig);
    let digits = m.to_string();
    let group = if e < 0 { 0 } else { e / 3 };
    if group as usize >= PREFIXES.len() {
        let (head, tail) = digits.split_at(1);
        let dot = if tail.is_empty() { "" } else { "." };
        return format!("{sign}{head}{dot}{tail}e{e} {unit}");
    }
    let prefix = PREFIXES[group as usize];
    let shift = e - 3 * group;
    let number = if shift >= 0 {
        let (int, frac) = digits.split_at(((shift + 1) as usize).min(digits.len()));
        let pad = "0".repeat((shift + 1) as usize - int.len());
        if frac.is_empty() {
            format!("{int}{pad}")
        } else {
            format!("{int}.{frac}")
        }
    } else {
        format!("0.{}{digits}", "0".repeat((-shift - 1) as usize))
    };
    let sep = if unit.is_empty() && prefix.is_empty() {
        ""
    } else {
        " "
    };
    format!("{sign}{number}{sep}{prefix}{unit}")
}

/// FLOPs: `"3.387 PFLOP"` (four significant digits); the exact amount with `--exact`.
pub fn flops(r: &Rational) -> String {
    if exact() {
        return exact_text(r);
    }
    si(r, FLOP_DIGITS, "FLOP")
}

/// An amount of bytes as the whole bytes it occupies: its magnitude rounded up. A fraction of a
/// byte comes from an average over the schedule (interleaved 1F1B's activations in flight, a
/// ring's share of a tensor), and no device stores or sends part of a byte; rounding up also
/// keeps a shown footprint within a capacity, a whole number of bytes, exactly when the amount
/// is.
pub fn whole_bytes(r: &Rational) -> Rational {
    let up = r.abs().ceil();
    if r.is_negative() {
        -up
    } else {
        up
    }
}

/// Bytes: `"80.0 GB"`, `"1.23 TB"` (three significant digits, decimal prefixes) of the
/// [`whole_bytes`]; the whole bytes exactly with `--exact` (JSON keeps the exact fraction).
pub fn bytes(r: &Rational) -> String {
    if exact() {
        return exact_text(&whole_bytes(r));
    }
    bytes_rounded(r)
}

/// Bytes rounded as [`bytes`] rounds them, even under `--exact` (a machine's capacity in a
/// header, not an amount to audit).
pub fn bytes_rounded(r: &Rational) -> String {
    si(&whole_bytes(r), BYTE_DIGITS, "B")
}

/// The definition of MFU, for the legends of the tables that show it.
pub const MFU_MEANS: &str = "MFU: model FLOPs per second per device (no recomputation) over the device's dense bf16 peak, also under FP8 and FP4, where it can pass 100 %";

/// The definition of the bubble every command and the report show, for their legends.
pub const BUBBLE_MEANS: &str = "bubble: the share of the step that the busiest device idles while the pipeline fills and drains (- without a pipeline, pp = 1)";

/// `part` as a share of `whole`, in per cent with one decimal (`"4.4%"`), rounded exactly (half
/// away from zero); `"-"` when `whole` is zero. The same under `--exact`: the amounts it divides
/// are what `--exact` prints exactly.
pub fn percent(part: &Rational, whole: &Rational) -> String {
    if whole.is_zero() {
        return "-".into();
    }
    let tenths = (part / whole * Rational::from_integer(1000.into()))
        .round()
        .to_integer();
    let sign = if tenths.is_negative() { "-" } else { "" };
    let t = tenths.abs();
    let (int, frac): (BigInt, BigInt) = (&t / 10, &t % 10);
    format!("{sign}{int}.{frac}%")
}

/// A share computed in floating point (a simulated step's MFU or bubble) as [`percent`] prints
/// one; `"-"` when it is not a number.
pub fn percent_float(x: f64) -> String {
    Rational::from_float(x).map_or_else(|| "-".into(), |r| percent(&r, &Rational::one()))
}

/// A relative change of time as `"4.9% faster"` (negative) or `"10.1% slower"`.
pub fn faster_or_slower(change: f64) -> String {
    if change < 0.0 {
        format!("{} faster", percent_float(-change))
    } else {
        format!("{} slower", percent_float(change))
    }
}

/// An integer with thousands separators: `"174,604,259,328"`.
pub fn grouped(i: &BigInt) -> String {
    let digits = i.abs().to_string();
    let mut out = String::new();
    for (k, c) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if i.is_negative() {
        format!("-{out}")
    } else {
        out
    }
}

/// A count with thousands separators (`"174,604,259,328"`); a fraction rounded to two
/// decimals and marked `≈`; the exact amount with `--exact`.
pub fn count(r: &Rational) -> String {
    if exact() {
        return exact_text(r);
    }
    if r.is_integer() {
        return grouped(&r.to_integer());
    }
    let hundredths = (r * Rational::from_integer(100.into()))
        .round()
        .to_integer();
    let sign = if hundredths.is_negative() { "-" } else { "" };
    let h = hundredths.abs();
    let cents: BigInt = &h % 100;
    format!("≈{sign}{}.{cents:02}", grouped(&(&h / 100)))
}

/// A ratio such as a machine balance, to four significant digits with thousands separators
/// (`"2,198"`, `"295.4"`); exact with `--exact`.
pub fn ratio(r: &Rational) -> String {
    if exact() {
        return exact_text(r);
    }
    ratio_rounded(r)
}

/// A ratio rounded as [`ratio`] rounds it, even under `--exact` (an amount computed in floating
/// point, which has no exact value to show).
pub fn ratio_rounded(r: &Rational) -> String {
    if r.is_zero() {
        return "0".into();
    }
    let sign = if r.is_negative() { "-" } else { "" };
    let (m, e) = round_sig(&r.abs(), FLOP_DIGITS);
    let lsd = e - FLOP_DIGITS as i64 + 1;
    if lsd >= 0 {
        return format!("{sign}{}", grouped(&(m * pow10(lsd as u32))));
    }
    let d = (-lsd) as u32;
    let int = &m / pow10(d);
    let frac = (&m % pow10(d)).to_string();
    format!(
        "{sign}{}.{}{frac}",
        grouped(&int),
        "0".repeat(d as usize - frac.len())
    )
}

/// A fraction such as a pipeline bubble: exactly (`"1/64"`) when that is short, else rounded as
/// [`ratio`] rounds it and marked `≈`; the exact amount with `--exact`.
pub fn fraction(r: &Rational) -> String {
    let text = exact_text(r);
    if exact() || text.chars().count() <= 12 {
        return text;
    }
    format!("≈{}", ratio_rounded(r))
}

/// The name a [`crate::search::versus::Component`] is shown by. The schedule's
/// `(pp − 1)/(m·v)`, which the comparison's JSON calls the bubble fraction, is the bubble over
/// the slowest stage's time, not the bubble `rank`, `timeline` and the report show
/// ([`BUBBLE_MEANS`], a share of the step), so tables name it for what it is.
pub fn component_name<'a>(group: &str, name: &'a str) -> &'a str {
    match (group, name) {
        ("pipeline", "bubble fraction") => "bubble ÷ slowest stage's time, (pp − 1)/(m·v)",
        _ => name,
    }
}

/// How the amounts of a [`crate::search::versus::Component`] group print: bytes, a fraction, or
/// FLOPs (and FLOP-equivalents).
pub fn component_format(group: &str) -> fn(&Rational) -> String {
    match group {
        "communication" | "memory" => bytes,
        "pipeline" => fraction,
        _ => flops,
    }
}

/// The unit word of a [`crate::search::versus::Component`] group's exact amounts (`" bytes"`
/// after a byte count), for a title that states the exact amount without its prefix.
pub fn component_unit(group: &str) -> &'static str {
    match group {
        "communication" | "memory" => " bytes",
        _ => "",
    }
}

/// A count of things (strategies, checks, rows) with thousands separators; plain with `--exact`.
pub fn tally(n: impl Into<BigInt>) -> String {
    count(&Rational::from_integer(n.into()))
}

/// Why a strategy does not fit, in [`bytes`]: what its fullest device needs against the memory a
/// strategy may fill (the capacity less the headroom).
pub fn fit_text(need: &Rational, usable: &Rational) -> String {
    format!(
        "needs {} per device, more than the {} usable",
        bytes(&need.floor()),
        bytes(&usable.floor())
    )
}

/// A number printed by the exact evaluator (an integer or a fraction), shown by `f`; other text
/// (a formula) unchanged.
pub fn text(s: &str, f: fn(&Rational) -> String) -> String {
    match s.parse::<Rational>() {
        Ok(r) => f(&r),
        Err(_) => s.to_string(),
    }
}

/// `settings: attention flash-causal, dropout off, loss fused`: a model's settings that change
/// how its operators run ([`crate::model::Model::settings`]), for a header's second line; `None`
/// when it has none.
pub fn settings_line(settings: &std::collections::BTreeMap<String, String>) -> Option<String> {
    if settings.is_empty() {
        return None;
    }
    let parts: Vec<String> = settings.iter().map(|(k, v)| format!("{k} {v}")).collect();
    Some(format!("settings: {}", parts.join(", ")))
}

/// What the outputs say when no stack profile is given.
pub const PROFILE_FREE: &str =
    "none, profile-free (no software overhead beyond the calibration table's)";

/// The header line naming the stack profiles the seconds include: the one given, each row's
/// (`--stack auto`), or that they are profile-free (the default).
pub fn stack_line(profile: Option<&str>) -> String {
    match profile {
        Some(p) => format!("stack profile: {p}"),
        None => format!(
            "stack profile: {}; --stack auto prices each strategy on the profile of the stack it assumes",
            PROFILE_FREE
        ),
    }
}

/// `" (B = 512, S = 2048)"`: the global batch and sequence length of a model's values, under
/// the model's names for them (its `batch` and `sequence` roles), those it has.
pub fn batch_and_sequence(model: &crate::model::Model, values: &crate::sym::Bindings) -> String {
    named_values(
        [model.batch.as_deref(), model.roles.sequence.as_deref()]
            .into_iter()
            .flatten(),
        |k| values.get(k).map(|v| v.to_string()),
    )
}

/// `" (B = 512, S = 2048)"`: each of `names` that has a value, with it; empty when none has.
pub fn named_values<'a>(
    names: impl IntoIterator<Item = &'a str>,
    value: impl Fn(&str) -> Option<String>,
) -> String {
    let parts: Vec<String> = names
        .into_iter()
        .filter_map(|k| value(k).map(|v| format!("{k} = {v}")))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(n: i64, d: i64) -> Rational {
        Rational::new(n.into(), d.into())
    }

    fn int(s: &str) -> Rational {
        Rational::from_integer(s.parse().unwrap())
    }

    #[test]
    fn flops_take_four_significant_digits_and_a_decimal_prefix() {
        assert_eq!(flops(&int("1128659346020892672")), "1.129 EFLOP");
        assert_eq!(flops(&int("3387000000000000")), "3.387 PFLOP");
        assert_eq!(flops(&int("12345")), "12.35 kFLOP");
        assert_eq!(flops(&int("123456")), "123.5 kFLOP");
        assert_eq!(flops(&int("1000")), "1.000 kFLOP");
        assert_eq!(flops(&int("512")), "512 FLOP");
    }

    #[test]
    fn bytes_take_three_significant_digits() {
        assert_eq!(bytes(&int("80000000000")), "80.0 GB");
        assert_eq!(bytes(&int("1234567890123")), "1.23 TB");
        assert_eq!(bytes(&int("175000000000")), "175 GB");
        assert_eq!(bytes(&int("999")), "999 B");
        assert_eq!(bytes(&int("1000")), "1.00 kB");
    }

    #[test]
    fn rounding_up_to_the_next_thousand_moves_the_prefix() {
        // 999.95 k rounds to 1000.0 k at four digits: 1.000 M, not 1000.0 k.
        assert_eq!(flops(&int("999950")), "1.000 MFLOP");
        assert_eq!(flops(&int("999949")), "999.9 kFLOP");
        assert_eq!(si(&q(99995, 100), 4, ""), "1.000 k");
        assert_eq!(si(&q(99994, 100), 4, ""), "999.9");
        assert_eq!(bytes(&int("999500")), "1.00 MB");
        assert_eq!(bytes(&int("999499")), "999 kB");
        // Exactly half rounds away from zero, decided on the exact amount, not a float.
        assert_eq!(bytes(&int("1235000")), "1.24 MB");
        assert_eq!(bytes(&int("1234999")), "1.23 MB");
        assert_eq!(flops(&(int("1235000") - q(1, 1_000_000))), "1.235 MFLOP");
        assert_eq!(si(&(int("1235000") - q(1, 1_000_000)), 3, "B"), "1.23 MB");
    }

    #[test]
    fn zero_fractions_and_negative_amounts() {
        assert_eq!(flops(&int("0")), "0 FLOP");
        assert_eq!(bytes(&int("0")), "0 B");
        assert_eq!(bytes(&q(7, 2)), "4 B");
        assert_eq!(bytes(&q(1, 8)), "1 B");
        assert_eq!(bytes(&q(-7, 2)), "-4 B");
        assert_eq!(flops(&q(-7_000_000, 3)), "-2.333 MFLOP");
        assert_eq!(bytes(&int("-512")), "-512 B");
        assert_eq!(
            flops(&(int("1000000000000000000000000000000000"))),
            "1.000e33 FLOP"
        );
    }

    #[test]
    fn counts_group_thousands() {
        assert_eq!(count(&int("174604259328")), "174,604,259,328");
        assert_eq!(count(&int("999")), "999");
        assert_eq!(count(&int("1000")), "1,000");
        assert_eq!(count(&int("-1234567")), "-1,234,567");
        assert_eq!(count(&int("0")), "0");
        assert_eq!(count(&q(123456789, 100)), "≈1,234,567.89");
        assert_eq!(count(&q(-1, 3)), "≈-0.33");
    }

    #[test]
    fn fractions_stay_exact_while_short() {
        assert_eq!(fraction(&q(1, 64)), "1/64");
        assert_eq!(fraction(&int("0")), "0");
        assert_eq!(fraction(&q(1_000_001, 3_000_000)), "≈0.3333");
        assert_eq!(
            with_exact(true, || fraction(&q(1_000_001, 3_000_000))),
            "1000001/3000000"
        );
        assert_eq!(tally(21492u64), "21,492");
        assert_eq!(with_exact(true, || tally(21492u64)), "21492");
    }

    #[test]
    fn ratios_keep_four_digits() {
        assert_eq!(ratio(&q(21984, 10)), "2,198");
        assert_eq!(ratio(&q(295449, 1000)), "295.4");
        assert_eq!(ratio(&int("19780")), "19,780");
        assert_eq!(ratio(&q(1, 20)), "0.05000");
        assert_eq!(ratio(&q(99995, 100)), "1,000");
    }

    #[test]
    fn exact_prints_integers_and_fractions_unrounded() {
        with_exact(true, || {
            assert_eq!(flops(&int("1128659346020892672")), "1128659346020892672");
            assert_eq!(flops(&q(7, 2)), "7/2");
            assert_eq!(count(&int("174604259328")), "174604259328");
        });
        assert!(!exact());
        assert_eq!(text("2*B*S", bytes), "2*B*S");
    }

    #[test]
    fn memory_is_never_printed_in_fractional_bytes() {
        // Interleaved 1F1B's activations of GPT-3 175B (dp 32, tp 4, pp 8, v = 6): 141532835840/3
        // bytes, rounded up to the whole bytes they occupy, with units and with --exact.
        let activations = q(141_532_835_840, 3);
        assert_eq!(bytes(&activations), "47.2 GB");
        assert_eq!(with_exact(true, || bytes(&activations)), "47177611947");
        assert_eq!(text("141532835840/3", bytes), "47.2 GB");
        assert_eq!(with_exact(true, || text("7/2", bytes)), "4");
        assert_eq!(bytes_rounded(&q(2001, 2)), "1.00 kB");
        assert_eq!(bytes(&q(1, 3)), "1 B");
        // A difference rounds its magnitude up, the same either way round.
        assert_eq!(bytes(&q(-1, 3)), "-1 B");
        assert_eq!(whole_bytes(&int("80000000000")), int("80000000000"));
    }

    #[test]
    fn shares_print_in_per_cent_with_one_decimal() {
        // #1 of GPT-3 175B on 1024 devices: its bubble over its relative cost.
        let bubble = q(151_526_087_342_719_040, 603);
        let total: Rational = "85718253080081572544/15075".parse().unwrap();
        assert_eq!(percent(&bubble, &total), "4.4%");
        assert_eq!(with_exact(true, || percent(&bubble, &total)), "4.4%");
        assert_eq!(percent(&int("0"), &int("5")), "0.0%");
        assert_eq!(percent(&int("1"), &int("0")), "-");
        assert_eq!(percent(&q(1, 2000), &int("1")), "0.1%");
        assert_eq!(percent(&q(-1, 3), &int("1")), "-33.3%");
        assert_eq!(percent(&int("1"), &int("1")), "100.0%");
        assert_eq!(percent_float(0.654), "65.4%");
        assert_eq!(percent_float(f64::NAN), "-");
    }
}
