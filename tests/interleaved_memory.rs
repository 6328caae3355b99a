//! The activations an interleaved rank holds: at the fullest moment of Megatron-LM's order, each
//! chunk's micro-batches at that chunk's own size. Every rank runs `(p − s − 1)·2 + (v − 1)·p`
//! forwards before its first backward (Megatron-Core, megatron/core/pipeline_parallel/schedules.py,
//! `get_pp_rank_microbatches`), all of them where that count reaches them all; so the last rank
//! holds (v − 1)·p + 1 chunk micro-batches, not Narayanan et al.'s first-stage
//! (1 + (p − 1)/(p·v)) scaled by its 1F1B count (SC'21, §2.2).

mod common;
use num_rational::BigRational as Rational;

/// gpt3-125m's 12 layers over pp = 2 with 2 chunks each: rank 0 holds chunk 0 (the embedding
/// and layers 0–2) and chunk 2 (layers 6–8); rank 1 chunk 1 (layers 3–5) and chunk 3 (layers
/// 9–11 and the head). Per micro-batch, activations c0, c2 on rank 0 and c1, c3 on rank 1.
fn activations(m: u64) -> Vec<Rational> {
    let (m, b) = (m.to_string(), format!("B={m}"));
    common::stage_activations(&[
        "gpt3-125m",
        "--pp",
        "2",
        "--schedule",
        "interleaved-1f1b",
        "--chunks",
        "2",
        "--microbatches",
        &m,
        "--set",
        &b,
    ])
}

/// With m = p = 2 rank 0's warm-up, 2 + 2, reaches all 4 chunk micro-batches: it holds both its
/// chunks' 2 micro-batches. With m = 4 it holds (4, 1) or (3, 2) of its (first, second) chunks
/// (the program walked by hand). Rank 1, the last, warms up with 2 forwards at any m (before
/// Megatron-Core 0.10 it ran all its forwards first at m = p) and holds 2 of its first chunk
/// and 1 of its last, the head's, at m = 2 as at m = 4. Past 3p micro-batches the ranks hold
/// what they hold at 4.
#[test]
fn each_chunk_is_held_as_often_as_megatron_runs_it() {
    let q = |n: i64| Rational::from_integer(n.into());
    let (two, four, ten) = (activations(2), activations(4), activations(10));
    assert_eq!(four, ten);
    // m = 2: rank 0 holds 2·(c0 + c2); m = 4: 4·c0 + c2 (c0 carries the embedding).
    let c0 = (&four[0] - &two[0] / q(2)) / q(3);
    let c2 = &two[0] / q(2) - &c0;
    assert!(c2 > q(0), "{c2}");
    assert!(c0 > c2, "the embedding's chunk holds more");
    // Rank 1 holds 2·c1 + c3 at either count (c3 the head's chunk): a cap, not all at m = p.
    assert_eq!(
        two[1], four[1],
        "the last rank's warm-up does not grow to all at m = p"
    );
    // Chunk 1 is three plain layers, as chunk 2 is: what is left of rank 1's is the head's.
    let c3 = &four[1] - &c2 * q(2);
    assert!(c3 > c2, "the head's chunk holds the logits");
    // Rank 1 holds its first chunk's p micro-batches and one of its last: more than the
    // first-stage formula scaled by rank 1's 1F1B count, (1 + 1/4)·(c1 + c3).
    let narayanan = (&c2 + &c3) * Rational::new(5.into(), 4.into());
    assert!(four[1] > narayanan, "{} against {narayanan}", four[1]);
}
