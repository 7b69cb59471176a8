//! An interactive SVG flame graph, drawn by inferno from the [folded stacks](super::folded).

use std::io::{self, Write};

use inferno::flamegraph::{self, Options};

use super::{file_name, folded};
use crate::profile::Profile;

/// The flame graph's title: the program's file name and the sample count; for a profile of
/// several processes ([`Profile::is_multi_process`]), `N processes` instead of the program.
pub fn title(profile: &Profile) -> String {
    let samples = profile.sample_count();
    let plural = if samples == 1 { "" } else { "s" };
    let processes = profile.processes().len();
    if processes > 1 {
        format!("{processes} processes: {samples} sample{plural}")
    } else {
        format!("{}: {samples} sample{plural}", file_name(&profile.program))
    }
}

/// Writes the flame graph of `profile` as SVG.
///
/// inferno refuses input without samples; for an empty profile this writes a small SVG with the
/// title and "no samples" instead, so that every run has its flame graph.
pub fn write(profile: &Profile, w: &mut dyn Write) -> io::Result<()> {
    let lines = folded::lines(profile);
    if lines.is_empty() {
        return write_empty(&title(profile), w);
    }
    let mut options = Options::default();
    options.title = title(profile);
    options.subtitle = Some(subtitle(profile));
    options.count_name = "samples".to_string();
    // Colors from the names alone: the same input gives the same file.
    options.hash = true;
    options.deterministic = true;
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), w)
}

/// The heap profile's flame graphs: of the bytes allocated, or of those live at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapGraph {
    /// `alloc_space`: every byte allocated, by where.
    Allocated,
    /// `inuse_space`: the bytes still live, by where they were allocated.
    Live,
}

/// Writes a flame graph of `profile`'s heap profile as SVG, its widths bytes (an empty one,
/// "no samples", without allocations there).
pub fn write_heap(profile: &Profile, graph: HeapGraph, w: &mut dyn Write) -> io::Result<()> {
    let (lines, what) = match graph {
        HeapGraph::Allocated => (
            folded::heap_lines(profile, |s| s.alloc_bytes),
            "bytes allocated",
        ),
        HeapGraph::Live => (
            folded::heap_lines(profile, |s| s.inuse_bytes),
            "bytes live at the end",
        ),
    };
    let total: u64 = profile.heap.as_ref().map_or(0, |h| {
        h.totals()[if graph == HeapGraph::Allocated { 1 } else { 3 }]
    });
    let title = format!("{}: {total} {what}", file_name(&profile.program));
    if lines.is_empty() {
        return write_empty(&title, w);
    }
    let mut options = Options::default();
    options.title = title;
    options.subtitle = Some(format!(
        "{} (pid {}), estimated from one sample per {} bytes allocated on average",
        profile.program,
        profile.pid,
        profile.heap.as_ref().map_or(0, |h| h.interval)
    ));
    options.count_name = "bytes".to_string();
    options.hash = true;
    options.deterministic = true;
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), w)
}

/// The line under the title: what one sample stands for.
fn subtitle(profile: &Profile) -> String {
    let clock = if profile.wall_clock {
        "wall-clock"
    } else {
        "CPU"
    };
    let processes = match profile.processes().len() {
        0 | 1 => String::new(),
        n => format!("{n} processes from "),
    };
    format!(
        "{processes}{} (pid {}), one sample per {:.3} ms of {clock} time per thread",
        profile.program,
        profile.pid,
        profile.interval.as_secs_f64() * 1e3
    )
}

/// A minimal SVG for a profile without samples.
fn write_empty(title: &str, w: &mut dyn Write) -> io::Result<()> {
    write!(
        w,
        concat!(
            r#"<?xml version="1.0" standalone="no"?>"#,
            "\n",
            r#"<svg version="1.1" width="1200" height="80" viewBox="0 0 1200 80" xmlns="http://www.w3.org/2000/svg">"#,
            "\n",
            r#"<text x="600" y="30" text-anchor="middle" font-family="Verdana" font-size="17">{}</text>"#,
            "\n",
            r#"<text x="600" y="60" text-anchor="middle" font-family="Verdana" font-size="12">no samples</text>"#,
            "\n</svg>\n"
        ),
        xml_escape(title)
    )
}

/// `text` with the XML special characters escaped.
fn xml_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            c => escaped.push(c),
        }
    }
    escaped
}
