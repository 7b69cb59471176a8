//! The structure the Firefox Profiler reads from a processed profile, checked (shared by the
//! output and demo tests). fxprof-processed-profile 0.8 has no validation of its own (it only
//! builds and serializes): this checks the version fields, every table's columns as long as its
//! `length`, every index in range, prefixes before their stacks.

use std::collections::BTreeMap;

use serde_json::Value;

/// Checks the structure the Firefox Profiler reads from a processed profile and returns every
/// thread's samples as (tid, root-first stack) with counts, and the threads' JSON.
/// `cpu_delta_us` is every sample's expected CPU delta, if known.
pub fn check_firefox(
    json: &Value,
    cpu_delta_us: Option<u64>,
) -> (BTreeMap<(i64, String), i64>, Vec<Value>) {
    let meta = &json["meta"];
    assert!(
        meta["version"].is_u64(),
        "meta.version: {}",
        meta["version"]
    );
    assert!(meta["preprocessedProfileVersion"].is_u64());
    assert!(meta["startTime"].is_f64() || meta["startTime"].is_u64());
    assert!(meta["categories"].as_array().is_some_and(|c| !c.is_empty()));
    let threads = json["threads"].as_array().expect("threads").clone();
    let mut stacks = BTreeMap::new();
    let len = |table: &Value| table["length"].as_u64().expect("length") as usize;
    let column = |table: &Value, name: &str| -> Vec<Value> {
        let column = table[name]
            .as_array()
            .unwrap_or_else(|| panic!("column {name}"))
            .clone();
        assert_eq!(column.len(), len(table), "column {name}");
        column
    };
    let index = |v: &Value, bound: usize, what: &str| -> usize {
        let i = v.as_u64().unwrap_or_else(|| panic!("{what}: {v}")) as usize;
        assert!(i < bound, "{what} {i} out of range (< {bound})");
        i
    };
    for thread in &threads {
        // The crate tells apart threads of one tid (a process that `exec`ed: one thread per
        // program image) as "TID.N".
        let tid = thread["tid"].as_str().expect("tid");
        let tid: i64 = tid.split('.').next().unwrap().parse().unwrap_or_else(|_| {
            panic!("tid {tid:?} is not a number or a number.N");
        });
        let strings = thread["stringArray"].as_array().expect("stringArray");
        let funcs = &thread["funcTable"];
        let func_names: Vec<String> = column(funcs, "name")
            .iter()
            .map(|n| {
                strings[index(n, strings.len(), "func name")]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let frames = &thread["frameTable"];
        let frame_funcs: Vec<usize> = column(frames, "func")
            .iter()
            .map(|f| index(f, func_names.len(), "frame func"))
            .collect();
        for name in ["address", "category", "inlineDepth", "nativeSymbol", "line"] {
            column(frames, name);
        }
        let stack_table = &thread["stackTable"];
        let stack_frames: Vec<usize> = column(stack_table, "frame")
            .iter()
            .map(|f| index(f, frame_funcs.len(), "stack frame"))
            .collect();
        let prefixes = column(stack_table, "prefix");
        for (i, prefix) in prefixes.iter().enumerate() {
            if !prefix.is_null() {
                index(prefix, i, "stack prefix (must precede its stack)");
            }
        }
        let samples = &thread["samples"];
        let n = len(samples);
        for name in ["timeDeltas", "weight", "threadCPUDelta"] {
            column(samples, name);
        }
        for delta in column(samples, "threadCPUDelta") {
            assert!(delta.is_u64(), "CPU delta in µs: {delta}");
            if let Some(want) = cpu_delta_us {
                assert_eq!(delta.as_u64(), Some(want), "CPU delta in µs");
            }
        }
        for stack in column(samples, "stack").iter().take(n) {
            let mut names = Vec::new();
            let mut s =
                (!stack.is_null()).then(|| index(stack, stack_frames.len(), "sample stack"));
            while let Some(i) = s {
                names.push(func_names[frame_funcs[stack_frames[i]]].as_str());
                s = prefixes[i].as_u64().map(|p| p as usize);
            }
            names.reverse();
            *stacks.entry((tid, names.join(";"))).or_insert(0) += 1;
        }
    }
    (stacks, threads)
}
