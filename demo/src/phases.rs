//! The four phases, their CPU shares and call chains, and the per-thread loop that runs them.
//!
//! Each thread repeats [`run_iteration`], which runs every phase for its share of the
//! iteration's CPU time (see [`crate::clock::Budget`]). A phase calls its hot leaf in chunks of
//! a few tens of microseconds and reads the thread's CPU clock between chunks, so its time is
//! spent in the leaf and not in timing code.

use std::ffi::c_void;

use crate::checksum::{self, c_checksum, DATA_LEN, STOP};
use crate::clock::Budget;
use crate::deep;
use crate::plugin::{self, DemoPlugin};
use crate::results::{Results, SLOTS};
use crate::sort::{self, SORT_LEN};

/// A named part of each iteration, with one hot leaf function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `plugin_mandelbrot` in the dlopened plugin (C).
    Mandelbrot,
    /// [`sort::sort_leaf`] (Rust), called through the inlined [`sort::fill_and_sort`].
    Sort,
    /// `c_checksum` (C, in the binary), which calls back into Rust after each pass.
    Checksum,
    /// [`deep::recursion_leaf`] (Rust), at the bottom of a chain and a 42-level recursion.
    Recursion,
}

/// Every phase, in the order each iteration runs them.
pub const PHASES: [Phase; 4] = [
    Phase::Mandelbrot,
    Phase::Sort,
    Phase::Checksum,
    Phase::Recursion,
];

impl Phase {
    /// Its position in [`PHASES`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Its short name.
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Mandelbrot => "mandelbrot",
            Phase::Sort => "sort",
            Phase::Checksum => "checksum",
            Phase::Recursion => "recursion",
        }
    }

    /// Its share of every phase-running thread's CPU time, in percent.
    pub const fn percent(self) -> u32 {
        match self {
            Phase::Mandelbrot => 40,
            Phase::Sort => 30,
            Phase::Checksum => 20,
            Phase::Recursion => 10,
        }
    }

    /// Its hot leaf, named as a profiler symbolizes it (Rust: demangled, without the hash).
    pub fn leaf(self) -> &'static str {
        self.chain()[0]
    }

    /// The leaf, its caller and its caller's caller, as a profiler should show them (inlined
    /// functions count as frames).
    pub fn chain(self) -> [&'static str; 3] {
        use std::any::type_name_of_val as name;
        match self {
            Phase::Mandelbrot => [
                "plugin_mandelbrot",
                name(&mandelbrot_phase),
                name(&run_iteration),
            ],
            Phase::Sort => [
                name(&sort::sort_leaf),
                name(&sort::fill_and_sort),
                name(&sort_phase),
            ],
            Phase::Checksum => ["c_checksum", name(&checksum_phase), name(&run_iteration)],
            Phase::Recursion => {
                let [caller, grandparent] = deep::leaf_callers();
                [name(&deep::recursion_leaf), caller, grandparent]
            }
        }
    }
}

/// Tiles per side of the mandelbrot grid: inputs `0..SLOTS` are its tiles.
const TILES_PER_SIDE: u64 = 4;
/// Pixels per side of a tile.
const TILE_PIXELS: i32 = 24;
/// Escape-time iteration limit.
const MAX_ITER: i32 = 128;
/// The grid covers [-2.0, 0.5] × [-1.25, 1.25].
const GRID_SIZE: f64 = 2.5;
/// Distance between pixels.
const PIXEL_STEP: f64 = GRID_SIZE / (TILES_PER_SIDE as f64 * TILE_PIXELS as f64);

/// The corner of mandelbrot tile `input`.
fn tile_corner(input: u64) -> (f64, f64) {
    let tile = input % SLOTS as u64;
    let size = GRID_SIZE / TILES_PER_SIDE as f64;
    (
        -2.0 + (tile % TILES_PER_SIDE) as f64 * size,
        -1.25 + (tile / TILES_PER_SIDE) as f64 * size,
    )
}

/// One thread's state for running the phases.
#[derive(Debug)]
pub struct Worker {
    /// Its CPU-time accounting.
    pub budget: Budget,
    /// The results of its leaf calls.
    pub results: Results,
    /// Leaf calls (for the checksum phase: passes) per phase.
    pub calls: [u64; PHASES.len()],
    /// Iterations run.
    pub iterations: u64,
    next_input: [u64; PHASES.len()],
    sort_buf: Box<[u32; SORT_LEN]>,
    checksum_data: Vec<u8>,
}

impl Worker {
    /// A worker whose CPU accounting starts now, on the calling thread.
    pub fn new() -> Self {
        Worker {
            budget: Budget::new(),
            results: Results::default(),
            calls: [0; PHASES.len()],
            iterations: 0,
            next_input: [0; PHASES.len()],
            sort_buf: Box::new([0; SORT_LEN]),
            checksum_data: checksum::make_data(),
        }
    }

    fn next_input(&mut self, phase: Phase) -> u64 {
        let input = self.next_input[phase.index()];
        self.next_input[phase.index()] = (input + 1) % SLOTS as u64;
        input
    }

    fn record(&mut self, phase: Phase, input: u64, value: u64) {
        self.results.record(phase, input, value);
        self.calls[phase.index()] += 1;
    }
}

impl Default for Worker {
    fn default() -> Self {
        Worker::new()
    }
}

/// One iteration: every phase for its share of [`crate::clock::ITERATION`] (the mandelbrot
/// phase only once the plugin is loaded; until then its time is owed and paid back later).
#[inline(never)]
pub fn run_iteration(w: &mut Worker) {
    w.budget.next_iteration();
    if let Some(plugin) = plugin::loaded() {
        mandelbrot_phase(w, plugin);
    }
    sort_phase(w);
    checksum_phase(w);
    recursion_phase(w);
    w.iterations += 1;
}

/// The mandelbrot phase: tiles computed by the plugin's `plugin_mandelbrot`, called through
/// the pointer `dlsym` returned.
#[inline(never)]
pub fn mandelbrot_phase(w: &mut Worker, plugin: &DemoPlugin) {
    if !w.budget.owed(Phase::Mandelbrot) {
        return;
    }
    let mandelbrot = plugin.mandelbrot;
    loop {
        let input = w.next_input(Phase::Mandelbrot);
        let (x0, y0) = tile_corner(input);
        // SAFETY: plugin_mandelbrot only computes (no pointers); the plugin is never unloaded.
        let value = unsafe { mandelbrot(x0, y0, PIXEL_STEP, TILE_PIXELS, MAX_ITER) };
        w.record(Phase::Mandelbrot, input, value);
        if !w.budget.keep_going(Phase::Mandelbrot) {
            break;
        }
    }
}

/// The sort phase: [`sort::sort_leaf`] through the inlined [`sort::fill_and_sort`].
#[inline(never)]
pub fn sort_phase(w: &mut Worker) {
    if !w.budget.owed(Phase::Sort) {
        return;
    }
    loop {
        let input = w.next_input(Phase::Sort);
        let value = sort::fill_and_sort(&mut w.sort_buf, input);
        w.record(Phase::Sort, input, value);
        if !w.budget.keep_going(Phase::Sort) {
            break;
        }
    }
}

/// What [`on_checksum_pass`] needs while `c_checksum` runs.
struct PassContext<'a> {
    budget: &'a mut Budget,
    results: &'a mut Results,
    passes: &'a mut u64,
}

/// The callback `c_checksum` calls after each pass (Rust called from C): records the hash,
/// reads the clock, and returns the next seed or [`STOP`] when the phase's time is spent.
pub extern "C" fn on_checksum_pass(ctx: *mut c_void, seed: u64, hash: u64) -> u64 {
    // SAFETY: `ctx` is the `PassContext` that checksum_phase passed to c_checksum, which calls
    // back only during that call, on this thread; nothing else uses its borrows meanwhile.
    let ctx = unsafe { &mut *ctx.cast::<PassContext>() };
    ctx.results.record(Phase::Checksum, seed, hash);
    *ctx.passes += 1;
    if ctx.budget.keep_going(Phase::Checksum) {
        (seed + 1) % SLOTS as u64
    } else {
        STOP
    }
}

/// The checksum phase: one call of `c_checksum` (C), which hashes the data pass after pass
/// and calls [`on_checksum_pass`] (Rust) after each until the phase's time is spent.
#[inline(never)]
pub fn checksum_phase(w: &mut Worker) {
    if !w.budget.owed(Phase::Checksum) {
        return;
    }
    let seed = w.next_input(Phase::Checksum);
    let data = &w.checksum_data;
    let mut passes = 0;
    let mut ctx = PassContext {
        budget: &mut w.budget,
        results: &mut w.results,
        passes: &mut passes,
    };
    // SAFETY: `data` is valid for DATA_LEN bytes during the call; the callback has the declared
    // signature and `ctx` points to a PassContext that outlives the call.
    unsafe {
        c_checksum(
            data.as_ptr(),
            DATA_LEN,
            seed,
            on_checksum_pass,
            (&mut ctx as *mut PassContext).cast(),
        )
    };
    // Later passes carry on with the seeds after the last one.
    w.next_input[Phase::Checksum.index()] = (seed + passes) % SLOTS as u64;
    w.calls[Phase::Checksum.index()] += passes;
}

/// The recursion phase: [`deep::chain_one`] down to [`deep::recursion_leaf`].
#[inline(never)]
pub fn recursion_phase(w: &mut Worker) {
    if !w.budget.owed(Phase::Recursion) {
        return;
    }
    loop {
        let input = w.next_input(Phase::Recursion);
        let value = deep::chain_one(input);
        w.record(Phase::Recursion, input, value);
        if !w.budget.keep_going(Phase::Recursion) {
            break;
        }
    }
}

/// `phase`'s result for `input`, computed directly (for inputs no thread reached, and to check
/// forked children). The mandelbrot phase needs the plugin loaded.
pub fn compute_once(phase: Phase, input: u64) -> u64 {
    match phase {
        Phase::Mandelbrot => {
            let plugin = plugin::loaded().expect("the plugin is loaded before results are merged");
            let (x0, y0) = tile_corner(input);
            // SAFETY: as in mandelbrot_phase.
            unsafe { (plugin.mandelbrot)(x0, y0, PIXEL_STEP, TILE_PIXELS, MAX_ITER) }
        }
        Phase::Sort => sort::fill_and_sort(&mut Box::new([0; SORT_LEN]), input),
        Phase::Checksum => checksum::checksum_once(&checksum::make_data(), input),
        Phase::Recursion => deep::chain_one(input),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_100() {
        assert_eq!(PHASES.iter().map(|p| p.percent()).sum::<u32>(), 100);
        for (i, phase) in PHASES.iter().enumerate() {
            assert_eq!(phase.index(), i);
        }
    }

    #[test]
    fn chains_are_named_as_symbolized() {
        assert_eq!(
            Phase::Sort.chain(),
            [
                "unwind_demo_workload::sort::sort_leaf",
                "unwind_demo_workload::sort::fill_and_sort",
                "unwind_demo_workload::phases::sort_phase"
            ]
        );
        assert_eq!(
            Phase::Checksum.chain(),
            [
                "c_checksum",
                "unwind_demo_workload::phases::checksum_phase",
                "unwind_demo_workload::phases::run_iteration"
            ]
        );
        assert_eq!(
            Phase::Mandelbrot.chain()[1],
            "unwind_demo_workload::phases::mandelbrot_phase"
        );
        assert_eq!(
            Phase::Recursion.leaf(),
            "unwind_demo_workload::deep::recursion_leaf"
        );
    }

    #[test]
    fn tiles_cover_the_grid() {
        assert_eq!(tile_corner(0), (-2.0, -1.25));
        let (x, y) = tile_corner(SLOTS as u64 - 1);
        assert!((x + 2.0 - 3.0 * GRID_SIZE / 4.0).abs() < 1e-12);
        assert!((y + 1.25 - 3.0 * GRID_SIZE / 4.0).abs() < 1e-12);
    }
}
