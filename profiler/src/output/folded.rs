//! Brendan Gregg's folded stacks: one line per distinct stack, `root;caller;callee COUNT`.
//!
//! Frames are named by [`frame_name`], root first, with inlined frames expanded (an inlined
//! callee after the function it was inlined into). Stacks are aggregated over threads; the lines
//! are sorted by count, highest first, then by text. `flamegraph.pl`, `inferno-flamegraph` and
//! speedscope read this format.
//!
//! In a profile of several processes ([`Profile::is_multi_process`]) each stack starts with its
//! process's name ([`process_name`], `;` replaced by `:`), as in `cc1;main;...`, and stacks are
//! aggregated over the threads of each process. Processes that share a name (a multiprocessing
//! parent and its workers) are kept apart by their pid, `python3.11-4242`, as pprof and the
//! Firefox profile keep them apart (and inferno's `--pid` names them).

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Write};

use super::{function_name, process_name};
use crate::profile::{Frame, Profile};

/// The single frame of a sample whose stack has no frames (a frame must name something).
pub const NO_FRAMES: &str = "[no frames]";

/// A frame's name in a folded stack: [`function_name`] with `;` (the frame separator) replaced
/// by `:`, as inferno's own collapsers do.
pub fn frame_name(frame: &Frame) -> Cow<'_, str> {
    let name = function_name(frame);
    if name.contains(';') {
        Cow::Owned(name.replace(';', ":"))
    } else {
        name
    }
}

/// Every distinct folded stack (without its count) with its sample count, sorted as the lines
/// are: by count, highest first, then by text.
pub fn stacks(profile: &Profile) -> Vec<(String, u64)> {
    // Two stacks of the model may fold to the same text (same names at other addresses).
    let mut per_text: HashMap<String, u64> = HashMap::new();
    if profile.is_multi_process() {
        // The process as the root frame: stacks are aggregated per (process, stack).
        let mut per_stack: HashMap<((u32, &str), usize), u64> = HashMap::new();
        let mut pids_of: HashMap<&str, std::collections::HashSet<u32>> = HashMap::new();
        for t in &profile.totals {
            let process = profile.process_of(t.thread);
            pids_of.entry(process.1).or_default().insert(process.0);
            *per_stack.entry((process, t.stack)).or_default() += t.periods;
        }
        for (((pid, process), stack), count) in per_stack {
            let name = process_name(process).replace(';', ":");
            let root = if pids_of.get(process).is_some_and(|p| p.len() > 1) {
                format!("{name}-{pid}")
            } else {
                name
            };
            let text = format!("{root};{}", stack_text(profile, stack));
            *per_text.entry(text).or_default() += count;
        }
    } else {
        for (stack, count) in profile.periods_per_stack() {
            *per_text.entry(stack_text(profile, stack)).or_default() += count;
        }
    }
    let mut stacks: Vec<(String, u64)> = per_text.into_iter().collect();
    stacks.sort_by(|(a_text, a), (b_text, b)| b.cmp(a).then_with(|| a_text.cmp(b_text)));
    stacks
}

/// The folded lines of `profile`'s heap profile, `STACK VALUE` (each site's `value`: bytes
/// allocated, say), sorted as [`lines`] are; sites whose value is 0 are left out, and so is
/// everything without a heap profile.
pub fn heap_lines(profile: &Profile, value: fn(&crate::profile::HeapSite) -> u64) -> Vec<String> {
    let mut per_text: HashMap<String, u64> = HashMap::new();
    for site in profile.heap.iter().flat_map(|h| &h.sites) {
        let v = value(site);
        if v > 0 {
            *per_text.entry(stack_text(profile, site.stack)).or_default() += v;
        }
    }
    let mut stacks: Vec<(String, u64)> = per_text.into_iter().collect();
    stacks.sort_by(|(a_text, a), (b_text, b)| b.cmp(a).then_with(|| a_text.cmp(b_text)));
    stacks
        .into_iter()
        .map(|(text, count)| format!("{text} {count}"))
        .collect()
}

/// The folded lines, `STACK COUNT`, without line ends.
pub fn lines(profile: &Profile) -> Vec<String> {
    stacks(profile)
        .into_iter()
        .map(|(text, count)| format!("{text} {count}"))
        .collect()
}

/// Writes the folded lines, each ended by `\n`.
pub fn write(profile: &Profile, w: &mut dyn Write) -> io::Result<()> {
    for line in lines(profile) {
        writeln!(w, "{line}")?;
    }
    Ok(())
}

/// The frames of `stack` joined by `;`, root first.
fn stack_text(profile: &Profile, stack: usize) -> String {
    let mut text = String::new();
    for frame in profile.stack_frames_root_first(stack) {
        if !text.is_empty() {
            text.push(';');
        }
        text.push_str(&frame_name(frame));
    }
    if text.is_empty() {
        text.push_str(NO_FRAMES);
    }
    text
}

/// Reads folded stacks back: each line's frames (root first) and count. Lines that are not
/// `FRAMES COUNT` are skipped.
pub fn parse(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((
                stack.split(';').map(str::to_owned).collect(),
                n.parse().ok()?,
            ))
        })
        .collect()
}
