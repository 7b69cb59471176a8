//! Reading the profiler's text summary (`STEM.summary.txt`) in tests.

/// The number that follows `label` on the summary line starting with it (leading spaces
/// ignored), or `None` if no line does or the number is unreadable.
pub fn count(summary: &str, label: &str) -> Option<u64> {
    summary.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix(label)?;
        if !rest.starts_with(char::is_whitespace) {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// [`count`], panicking with the summary if the line is missing.
pub fn required(summary: &str, label: &str) -> u64 {
    count(summary, label).unwrap_or_else(|| panic!("no {label:?} line in the summary:\n{summary}"))
}
