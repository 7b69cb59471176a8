//! `demo-workload`: see the `unwind_demo_workload` crate's documentation.

fn main() {
    std::process::exit(unwind_demo_workload::main_with_args(
        std::env::args().skip(1),
    ));
}
