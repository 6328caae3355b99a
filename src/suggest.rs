//! "Did you mean": the known name nearest to a mistyped one.

/// The candidate nearest to `name` by edit distance, ignoring case, when it is near enough to
/// be a typo (at most a third of the name's length, and at least 1, edits away).
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name = name.to_lowercase();
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (distance(&name, &c.to_lowercase()), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// ` (did you mean `x`?)`, or nothing.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    nearest(name, candidates)
        .map(|c| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// Edit distance in characters, a swap of two neighbours counting as one edit (optimal string
/// alignment): `157b` is one edit from `175b`.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j - 1] + cost)
                .min(d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_nearest_ignoring_case() {
        let names = ["gpt2-124m", "gpt3-175b", "llama3-8b", "llama3-70b"];
        assert_eq!(nearest("GPT3-175B", names), Some("gpt3-175b"));
        assert_eq!(nearest("gpt3-157b", names), Some("gpt3-175b"));
        assert_eq!(nearest("lama3-8b", names), Some("llama3-8b"));
        assert_eq!(nearest("resnet", names), None);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("157b", "175b"), 1);
    }
}
