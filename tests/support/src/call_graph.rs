//! The known call graphs of the test programs (tests/programs/workload.c and its library, the
//! C++ workload tests/programs/workload.cpp, and the Rust workload
//! tests/agent/src/bin/rust_workload.rs), and how a stack is checked against one: seen outermost first, with frames outside the program's own modules collapsed to
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
/// frames outside the program's modules (`own`) and PLT stubs collapsed to `[ext]`, program
/// frames named by `name` (`[nosym]` for `?+...`), and glibc's aliases of its thread and signal
/// entries unified.
pub fn tokens(
    frames: &[(&str, &str)],
    own: &dyn Fn(&str) -> bool,
    name: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for &(module, function) in frames.iter().rev() {
        let f = function.split('.').next().unwrap_or(function);
        // qemu-user's aarch64 signal trampoline page, which the runtime names so.
        let f = if module == "[sigreturn]" {
            "__kernel_rt_sigreturn"
        } else {
            f
        };
        let f = match f {
            "__clone3" | "clone3" | "__clone" => "clone",
            // glibc's ARM signal return trampoline, and aarch64's (the vdso's; qemu-user's
            // page, which the runtime names after it).
            "__default_rt_sa_restorer" | "__default_sa_restorer" | "__kernel_rt_sigreturn" => {
                "__restore_rt"
            }
            f => f,
        };
        let t = if KEEP.contains(&f) {
            f.to_string()
        } else if function.ends_with("@plt") {
            // A PLT stub (named `NAME@plt`) is the way out of the module to the function it
            // names: a sample there is in that call, as one in the function itself would be.
            "[ext]".to_string()
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

/// The C workload's call graph where glibc's thread entry has no symbol, so that stacks may
/// start at the collapsed `[ext]`: armv7 (armhf glibc's entry points, `__libc_start_main`,
/// `start_thread` and `pthread_kill`, are EXIDX_CANTUNWIND and unnamed) and aarch64 (Debian's
/// arm64 cross glibc names neither `thread_start` nor `start_thread`; the kernel's signal
/// trampoline is named `__restore_rt` as everywhere, see [`tokens`]). There is no asm phase
/// (frames.S is x86_64).
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

/// The Rust workload's call graph where glibc's thread and process entries have no names and
/// are `[ext]` (Debian's armhf and arm64 cross libraries).
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

/// Edges of the C++ workload (tests/programs/workload.cpp) on every architecture: its own
/// functions by name ([`cpp_name`]), the template code instantiated in it (`std::sort`'s
/// helpers, `std::function`'s invoker, `std::thread`'s state) as `[std]`, libstdc++ and the
/// other libraries as `[ext]`. Exceptions are thrown and caught inside libstdc++ and libgcc_s:
/// nothing there calls back into the program. `std::thread`'s `_M_run` may tail-call the
/// thread's function (its frame is then gone: `[ext]>cpp_worker`).
pub const CPP_EDGES: &str = "_start>[ext] [ext]>main clone>start_thread start_thread>[ext]
    [ext]>[std] [std]>[ext] [std]>cpp_worker [ext]>cpp_worker
    main>cpp_catch main>cpp_format main>now main>[std] main>[ext] now>[ext]
    cpp_catch>cpp_thrower cpp_catch>[ext] cpp_thrower>[ext]
    cpp_format>[ext] cpp_format>[std]
    cpp_worker>cpp_recurse cpp_worker>cpp_format cpp_worker>now cpp_worker>[std]
    cpp_worker>[ext]
    cpp_recurse>cpp_recurse cpp_recurse>[std] [std]>lambda [std]>cpp_sort lambda>cpp_sort
    cpp_sort>[std] cpp_sort>by_digits cpp_sort>[ext] [std]>by_digits";

/// The C++ workload's call graph (threads start in libstdc++'s trampoline, `[ext]`).
pub fn cpp_graph() -> Graph {
    Graph::new(&["_start", "clone", "[ext]"], CPP_EDGES)
}

/// Edges of the throw-heavy C++ program (tests/programs/throws.cpp): `catcher` catches what
/// `thrower` (called through `between`) throws, on the main thread and on a `std::thread`
/// worker; the throw runs in libstdc++ and libgcc_s (`[ext]`), which call nothing back.
pub const THROW_EDGES: &str = "_start>[ext] [ext]>main clone>start_thread start_thread>[ext]
    [ext]>[std] [std]>[std] [std]>worker [ext]>worker
    main>catcher main>now main>[ext] main>[std] now>[ext] now>[std] worker>catcher worker>now
    worker>[ext]
    catcher>between catcher>[ext] between>thrower between>[ext] thrower>[ext] thrower>[std]";

/// The throw-heavy program's call graph (threads start in libstdc++'s trampoline, `[ext]`).
pub fn throw_graph() -> Graph {
    Graph::new(&["_start", "clone", "[ext]"], THROW_EDGES)
}

/// The C++ workload's function names as its graph has them: the name before its parameters
/// (`cpp_format[abi:cxx11](unsigned long)` is `cpp_format`), lambdas as `lambda`, the standard
/// library's templates instantiated in the program as `[std]`.
pub fn cpp_name(f: &str) -> String {
    // (A name the symbolizer could not demangle stays mangled: `_ZNSt6chrono13duration_cast...`,
    // whose `enable_if` return type holds an expression, at -O0.)
    if f.starts_with("std::")
        || f.starts_with("__gnu_cxx::")
        || f.starts_with("void std::")
        || f.starts_with("_ZNSt")
        || f.starts_with("_ZSt")
    {
        return "[std]".into();
    }
    if f.contains("{lambda") {
        return "lambda".into();
    }
    let end = f.find(['(', '[', '<']).unwrap_or(f.len());
    f[..end].to_string()
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
        // A sample in the program's PLT stub of a libc function, called from `now` inlined into
        // `thread_main` (-O3): the stub is the way into libc, as a sample in libc would be.
        let plt = [
            ("workload", "clock_gettime@plt"),
            ("workload", "thread_main"),
            ("libc.so.6", "start_thread"),
            ("libc.so.6", "__clone3"),
        ];
        let t = tokens(&plt, &own, &id);
        assert_eq!(t.join(">"), "clone>start_thread>thread_main>[ext]");
        assert_eq!(g.check(&t), Ok(()));
    }

    #[test]
    fn cpp_names_and_graph() {
        assert_eq!(
            cpp_name("cpp_format[abi:cxx11](unsigned long)"),
            "cpp_format"
        );
        assert_eq!(cpp_name("cpp_catch(unsigned long)"), "cpp_catch");
        assert_eq!(
            cpp_name("_ZNSt6chrono13duration_castINS_8durationIdSt5ratioILl1ELl1EEEElS2_ILl1ELl1000000000EEEENSt9enable_ifIXsrNS_13__is_durationIT_EE5valueES8_E4typeERKNS1_IT0_T1_EE"),
            "[std]"
        );
        assert_eq!(cpp_name("main"), "main");
        assert_eq!(
            cpp_name("cpp_worker(unsigned long)::{lambda(unsigned long)#1}::operator()(unsigned long) const"),
            "lambda"
        );
        assert_eq!(
            cpp_name("void std::__introsort_loop<unsigned long*, long, __gnu_cxx::__ops::_Iter_comp_iter<bool (*)(unsigned long, unsigned long)> >(unsigned long*, unsigned long*, long, __gnu_cxx::__ops::_Iter_comp_iter<bool (*)(unsigned long, unsigned long)>)"),
            "[std]"
        );
        let own = |m: &str| m == "workload-cpp";
        let frames = [
            ("workload-cpp", "by_digits(unsigned long, unsigned long)"),
            ("workload-cpp", "void std::__insertion_sort<unsigned long*>(unsigned long*)"),
            ("workload-cpp", "cpp_sort(unsigned long)"),
            ("workload-cpp", "std::_Function_handler<unsigned long (unsigned long), cpp_worker(unsigned long)::{lambda(unsigned long)#1}>::_M_invoke(std::_Any_data const&, unsigned long&&)"),
            ("workload-cpp", "cpp_recurse(int, unsigned long, std::function<unsigned long (unsigned long)> const&)"),
            ("workload-cpp", "cpp_recurse(int, unsigned long, std::function<unsigned long (unsigned long)> const&)"),
            ("workload-cpp", "cpp_worker(unsigned long)"),
            ("workload-cpp", "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)(unsigned long), unsigned long> > >::_M_run()"),
            ("libstdc++.so.6", "execute_native_thread_routine"),
            ("libc.so.6", "start_thread"),
            ("libc.so.6", "clone3"),
        ];
        let t = tokens(&frames, &own, &cpp_name);
        assert_eq!(
            t.join(">"),
            "clone>start_thread>[ext]>[std]>cpp_worker>cpp_recurse>cpp_recurse>[std]>cpp_sort>[std]>by_digits"
        );
        assert_eq!(cpp_graph().check(&t), Ok(()));
        // A skipped frame: the thrower called from main.
        let t = tokens(
            &[
                ("workload-cpp", "cpp_thrower(unsigned long)"),
                ("workload-cpp", "main"),
            ],
            &own,
            &cpp_name,
        );
        assert!(cpp_graph().check_steps(&t).is_err());
    }
}
