//! Progress bars for long commands: drawn on standard error when it is a terminal, hidden when it
//! is piped or redirected, so that output meant for files and scripts stays clean.

use indicatif::{ProgressBar, ProgressStyle};
use std::borrow::Cow;
use std::io::IsTerminal;

/// A bar of `len` steps labelled `msg`; hidden unless standard error is a terminal.
pub fn bar(len: u64, msg: impl Into<Cow<'static, str>>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({elapsed})")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let pb = ProgressBar::new(len).with_style(style).with_message(msg);
    // Long steps still tick the elapsed time.
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    pb
}

/// Runs `f` with a bar of the mesh shapes a ranking has priced, which `f` hands to the search as
/// its progress (done, of all), and clears the bar when `f` returns.
pub fn ranking<T>(f: impl FnOnce(&mut dyn FnMut(usize, usize)) -> T) -> T {
    let pb = bar(0, "ranking mesh shapes");
    let out = f(&mut |done, all| {
        pb.set_length(all as u64);
        pb.set_position(done as u64);
    });
    pb.finish_and_clear();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_counts_even_when_hidden() {
        let pb = bar(3, "steps");
        pb.inc(2);
        assert_eq!(pb.position(), 2);
        pb.finish_and_clear();
    }
}
