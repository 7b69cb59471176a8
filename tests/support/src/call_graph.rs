//! The known call graphs of the test programs (tests/programs/workload.c and its library, and
//! the Rust workload tests/agent/src/bin/rust_workload.rs), and how a stack is checked against
//! one: seen outermost first, with frames outside the program's own modules collapsed to
//! `[ext]` (named exceptions: `_start`, `__restore_rt`, `start_thread`, `clone`), every step
//! must be an edge of the graph.
//!
//! Used by tests/programs.rs (every stack the agent unwound in the sampled process) and by the
//! Breakpad validation (which of two differing walks is right).

use std::collections::HashSet;

/// A call graph: allowed `caller>callee` steps, outermost first.
#[derive(Clone, Debug)]
pub struct Graph {
    /// Where a complete stack may start.
    pub roots: HashSet<&'static str>,
    /// Allowed steps.
    pub edges: HashSet<(&'static str, &'static str)>,
}

impl Graph {
    /// A graph from its roots and its edges written `a>b`, separated by white space.
    pub fn new(roots: &[&'static str], edges: &'static str) -> Self {
        let edges = edges
            .split_whitespace()
            .filter_map(|e| e.split_once('>'))
            .collect();
        Graph {
            roots: roots.iter().copied().collect(),
            edges,
        }
    }

    /// A graph whose edges are built at run time (leaked: a handful of short strings for a
    /// test's duration).
    pub fn from_string(roots: &[&'static str], edges: String) -> Self {
        Graph::new(roots, Box::leak(edges.into_boxed_str()))
    }

    /// Checks a complete stack (`tokens` from [`tokens`]): it starts at a root, and every step
    /// down to the innermost program function is an edge; below it only foreign frames remain.
    pub fn check(&self, tokens: &[String]) -> Result<(), String> {
        let body = body(tokens);
        let first = body.first().ok_or("no program frame")?;
        if !self.roots.contains(first.as_str()) {
            return Err(format!("starts at {first}, not at a root"));
        }
        self.check_steps(body)
    }

    /// Checks the steps of a stack that may be incomplete (a walk that stopped early): every
    /// step down to the innermost program function is an edge, wherever it starts.
    pub fn check_steps(&self, tokens: &[String]) -> Result<(), String> {
        for w in body(tokens).windows(2) {
            if !self.edges.contains(&(w[0].as_str(), w[1].as_str())) {
                return Err(format!("no edge {}>{}", w[0], w[1]));
            }
        }
        Ok(())
    }
}

/// `tokens` down to the innermost program (not `[...]`) token.
fn body(tokens: &[String]) -> &[String] {
    let len = tokens
        .iter()
        .rposition(|t| !t.starts_with('['))
        .map_or(0, |i| i + 1);
    &tokens[..len]
}

/// Frames kept by name wherever they are.
const KEEP: [&str; 4] = ["_start", "__restore_rt", "start_thread", "clone"];

/// The tokens of a stack given innermost first as `(module, function)`, outermost first, with
/// frames outside the program's modules (`own`) collapsed to `[ext]`, program frames named by
/// `name` (`[nosym]` for `?+...`), and glibc's aliases of its thread and signal entries unified.
pub fn tokens(
    frames: &[(&str, &str)],
    own: &dyn Fn(&str) -> bool,
    name: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for &(module, function) in frames.iter().rev() {
        let f = function.split('.').next().unwrap_or(function);
        let f = match f {
            "__clone3" | "clone3" | "__clone" => "clone",
            // glibc's ARM signal return trampoline.
            "__default_rt_sa_restorer" | "__default_sa_restorer" => "__restore_rt",
            f => f,
        };
        let t = if KEEP.contains(&f) {
            f.to_string()
        } else if own(module) {
            if f.starts_with("?+") {
                "[nosym]".to_string()
            } else {
                name(f)
            }
        } else {
            "[ext]".to_string()
        };
        if out.last().is_some_and(|l| l == &t && t.starts_with('[')) {
            continue;
        }
        out.push(t);
    }
    out
}

/// Edges of the C workload on every architecture.
pub const C_EDGES: &str = "_start>[ext] [ext]>main clone>start_thread start_thread>thread_main
    thread_main>top_a main>top_a main>via_alloca main>phase_plt main>phase_signal
    top_a>mid_b mid_b>leaf_c leaf_c>spin via_alloca>leaf_c
    phase_plt>shlib_entry shlib_entry>shlib_inner shlib_inner>cb_from_lib cb_from_lib>leaf_c
    phase_signal>[ext] [ext]>__restore_rt __restore_rt>on_usr1 on_usr1>sig_a sig_a>leaf_c
    main>now thread_main>now";

/// The asm phase (frames.S, x86_64 only).
pub const C_ASM_EDGES: &str = "main>phase_asm phase_asm>asm_frame asm_frame>asm_fp_frame
    asm_fp_frame>cb_from_asm cb_from_asm>spin";

/// The C workload's call graph on x86_64 (with the asm phase of frames.S).
pub fn c_graph() -> Graph {
    Graph::from_string(&["_start", "clone"], format!("{C_EDGES} {C_ASM_EDGES}"))
}

/// The C workload's call graph on armv7. armhf glibc's entry points (`__libc_start_main`,
/// `start_thread`) and `pthread_kill` are EXIDX_CANTUNWIND and have no symbols, so stacks may
/// start at the collapsed `[ext]`; there is no asm phase (frames.S is x86_64).
pub fn c_graph_arm() -> Graph {
    Graph::from_string(
        &["_start", "clone", "[ext]"],
        format!("{C_EDGES} [ext]>thread_main"),
    )
}

/// Edges of the Rust workload on every architecture (std's frames collapsed to `[std]` by
/// [`rust_name`]).
pub const RUST_EDGES: &str = "_start>[ext] [ext]>main main>[std] [std]>rw::main
    rw::main>rw_recurse rw_recurse>rw_recurse rw_recurse>rw_leaf
    clone>start_thread start_thread>[std] [std]>rw_thread
    rw_thread>rw_recurse rw_thread>rw_sort";

/// The Rust workload's call graph: its own functions by name, std's frames collapsed to `[std]`.
pub fn rust_graph() -> Graph {
    Graph::new(&["_start", "clone"], RUST_EDGES)
}

/// The Rust workload's call graph on armv7 (glibc's thread and process entries as `[ext]`).
pub fn rust_graph_arm() -> Graph {
    Graph::from_string(
        &["_start", "clone", "[ext]"],
        format!("{RUST_EDGES} [ext]>[std]"),
    )
}

/// The Rust workload's function names as its graph has them.
pub fn rust_name(f: &str) -> String {
    match f.strip_prefix("rust_workload::") {
        Some("main") => "rw::main".into(),
        Some(rest) if rest.starts_with("main::") => "rw::main::closure".into(),
        Some(rest) => rest.to_string(),
        None if f == "main" => "main".into(),
        None => "[std]".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_checked_against_the_graph() {
        let g = c_graph();
        let own = |m: &str| m == "workload";
        let id = |f: &str| f.to_string();
        let frames = [
            ("workload", "spin"),
            ("workload", "leaf_c"),
            ("workload", "mid_b"),
            ("workload", "top_a"),
            ("workload", "main"),
            ("libc.so.6", "__libc_start_call_main"),
            ("libc.so.6", "__libc_start_main_impl"),
            ("workload", "_start"),
        ];
        let t = tokens(&frames, &own, &id);
        assert_eq!(t.join(">"), "_start>[ext]>main>top_a>mid_b>leaf_c>spin");
        assert_eq!(g.check(&t), Ok(()));
        // Stopped early: the steps are right, the stack is not complete.
        assert_eq!(g.check_steps(&t[3..]), Ok(()));
        assert!(g.check(&t[3..]).is_err());
        // A made-up caller.
        let wrong = tokens(&[frames[0], frames[1], frames[4]], &own, &id);
        assert_eq!(
            g.check_steps(&wrong),
            Err("no edge main>leaf_c".to_string())
        );
    }
}
