//! Google's pprof format: a gzipped protobuf `perftools.profiles.Profile`, as defined by
//! `profile.proto` (<https://github.com/google/pprof/blob/main/proto/profile.proto>), read by
//! `go tool pprof` and `pprof`.
//!
//! The messages are declared in [`proto`] with prost's derive (no protoc, no build script).
//! [`build`] maps the model onto them:
//!
//! - sample types `samples/count` and `cpu/nanoseconds` (`wall/nanoseconds` for a wall-clock
//!   profile), the period type being the second and the period the sampling interval;
//! - one `Mapping` per module, the one whose path is the program first (pprof takes
//!   `mapping[0]` as the main binary), with its code's start, file offset and build id, so that
//!   pprof can symbolize it again from the file (`-symbolize=local:force`);
//! - one `Location` per model location, with one `Line` per frame, innermost first (pprof's
//!   order: the last line is the function the others were inlined into);
//! - one `Function` per distinct (name, file);
//! - one `Sample` per distinct (stack, thread), location ids leaf first, values
//!   `[count, count × period]`, labels `pid` and `process` (the sampled thread's process and
//!   its program's file name, which tell apart the processes of a
//!   [merged](crate::profile::Profile::merge) profile), `thread` (the name) and `thread_id`
//!   (the tid).

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::{Duration, UNIX_EPOCH};

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use super::function_name;
use crate::profile::{Frame, Profile, Total};

/// The messages of `profile.proto` (package `perftools.profiles`) this crate writes, with
/// prost's encoding. Field names and tags follow the `.proto` file; the fields pprof added
/// later for breakdowns (`tick_unit`, `label_set`, `Sample.breakdown`) are left out (a decoder
/// skips unknown fields).
pub mod proto {
    /// A profile: its samples and the tables they refer to.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// What each of a sample's values is: type and unit.
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// The samples.
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// Address ranges and the files mapped there; the first is the main binary.
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// The code locations the samples refer to.
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// The functions the locations' lines refer to.
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// Every string of the profile; entry 0 is always `""`.
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// A regular expression (string index) of frames to drop with their callees.
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        /// A regular expression (string index) of frames kept despite `drop_frames`.
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        /// When collection started, in nanoseconds since the UNIX epoch.
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// How long collection ran, in nanoseconds.
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// What the period counts.
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        /// Events between two samples, in `period_type` units.
        #[prost(int64, tag = "12")]
        pub period: i64,
        /// Free-form comments (string indices).
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// The preferred sample type (string index of its type); 0 means the last one.
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// A type and unit (string indices), such as `cpu`, `nanoseconds`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        /// The type (string index).
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        /// The unit (string index).
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// Values measured at one stack.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// The stack's location ids, leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// One value per `Profile::sample_type`.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// Context, such as the thread.
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// A key with a string or a numeric value.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// The key (string index).
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// A string value (string index), or 0.
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// A numeric value, when `str` is 0.
        #[prost(int64, tag = "3")]
        pub num: i64,
        /// The unit of `num` (string index), or 0.
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// A file mapped into memory, and how far its locations are symbolized.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        /// Unique, nonzero.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Where the mapping starts in memory.
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// One past its end.
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// The file offset mapped at `memory_start`.
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// The file (string index).
        #[prost(int64, tag = "5")]
        pub filename: i64,
        /// Its build id (string index).
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        /// Its locations have function names.
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        /// Its locations have source file names.
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        /// Its locations have line numbers.
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        /// Its locations list inlined functions.
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// A code address and the source lines there.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// Unique, nonzero.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// The mapping holding `address`, or 0 if none does.
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// The run-time address.
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// The functions at `address`, innermost (inlined) first, the function whose code it
        /// is last.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        /// Several symbols share this address (identical code folding).
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    /// A function and a line in it.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        /// The function's id.
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// The source line, or 0 if unknown.
        #[prost(int64, tag = "2")]
        pub line: i64,
        /// The source column, or 0 if unknown.
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    /// A function.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        /// Unique, nonzero.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its human-readable name (string index).
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// Its name as the system knows it, such as a mangled name (string index).
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// Its source file (string index).
        #[prost(int64, tag = "4")]
        pub filename: i64,
        /// The line where it starts, or 0.
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// The string table under construction: index 0 is `""`.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut strings = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        strings.intern("");
        strings
    }

    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// Whether `frame` names a function, rather than being the model's `module+0xOFFSET` fallback
/// for an address nothing names (or empty).
fn names_a_function(frame: &Frame) -> bool {
    if frame.function.is_empty() {
        return false;
    }
    let fallback = frame.file.is_none()
        && frame
            .function
            .rsplit_once("+0x")
            .is_some_and(|(module, hex)| {
                !module.is_empty() && !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())
            });
    !fallback
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The pprof profile of `profile` (see the [module documentation](self)).
pub fn build(profile: &Profile) -> proto::Profile {
    let mut strings = Strings::new();
    let kind = if profile.wall_clock { "wall" } else { "cpu" };
    let period = nanos(profile.interval);
    let mut value_type = |t: &str, unit: &str| proto::ValueType {
        r#type: strings.intern(t),
        unit: strings.intern(unit),
    };
    let sample_type = vec![
        value_type("samples", "count"),
        value_type(kind, "nanoseconds"),
    ];
    let period_type = Some(value_type(kind, "nanoseconds"));

    let (mapping, location, function) = tables(profile, &mut strings);

    // A sample per (thread, stack) total.
    let thread_key = strings.intern("thread");
    let thread_id_key = strings.intern("thread_id");
    // The process, so that profiles of several processes can be merged and told apart
    // (`go tool pprof -tagfocus process=...`, `-tags`).
    let pid_key = strings.intern("pid");
    let process_key = strings.intern("process");
    let sample = profile
        .totals
        .iter()
        .map(
            |&Total {
                 thread,
                 stack,
                 samples,
                 periods,
             }| {
                let count = i64::try_from(samples).unwrap_or(i64::MAX);
                let periods = i64::try_from(periods).unwrap_or(i64::MAX);
                let location_id = location_ids(profile, stack);
                // The thread's process: in a profile of several processes, not the root's.
                let (pid, process) = profile.process_of(thread);
                let mut label = vec![proto::Label {
                    key: pid_key,
                    num: i64::from(pid),
                    ..Default::default()
                }];
                // An empty string would read as a numeric label.
                if !process.is_empty() {
                    label.push(proto::Label {
                        key: process_key,
                        str: strings.intern(process),
                        ..Default::default()
                    });
                }
                if let Some(thread) = profile.threads.get(thread) {
                    if !thread.name.is_empty() {
                        label.push(proto::Label {
                            key: thread_key,
                            str: strings.intern(&thread.name),
                            ..Default::default()
                        });
                    }
                    // Exited threads merged by name have no id.
                    if thread.tid != 0 {
                        label.push(proto::Label {
                            key: thread_id_key,
                            num: i64::from(thread.tid),
                            ..Default::default()
                        });
                    }
                }
                proto::Sample {
                    location_id,
                    value: vec![count, periods.saturating_mul(period)],
                    label,
                }
            },
        )
        .collect();

    let time_nanos = profile.start.duration_since(UNIX_EPOCH).map_or(0, nanos);
    proto::Profile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos,
        duration_nanos: nanos(profile.duration),
        period_type,
        period,
        comment: Vec::new(),
        default_sample_type: 0,
    }
}

/// The location ids of stack `stack` (location `i` is id `i + 1`), leaf first; an index out of
/// range names nothing.
fn location_ids(profile: &Profile, stack: usize) -> Vec<u64> {
    profile
        .stacks
        .get(stack)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|&&l| l < profile.locations.len())
        .map(|&l| l as u64 + 1)
        .collect()
}

/// The mappings, locations and functions of `profile`, their strings in `strings`: location
/// `i + 1` is the profile's location `i`.
fn tables(
    profile: &Profile,
    strings: &mut Strings,
) -> (
    Vec<proto::Mapping>,
    Vec<proto::Location>,
    Vec<proto::Function>,
) {
    // Mappings: the program's module first, then the others in model order.
    let mut module_order: Vec<usize> = (0..profile.modules.len()).collect();
    if let Some(main) = profile
        .modules
        .iter()
        .position(|m| m.path == profile.program)
    {
        module_order.remove(main);
        module_order.insert(0, main);
    }
    let mut mapping_id = vec![0u64; profile.modules.len()];
    for (i, &m) in module_order.iter().enumerate() {
        mapping_id[m] = i as u64 + 1;
    }
    // What symbolic information each module's locations have, as pprof's own symbolizer
    // records it: a flag is set if any location has the information.
    let mut symbolized = vec![[false; 4]; profile.modules.len()];
    for location in &profile.locations {
        let Some(flags) = location.module.and_then(|m| symbolized.get_mut(m)) else {
            continue;
        };
        for frame in &location.frames {
            flags[0] |= names_a_function(frame);
            flags[1] |= frame.file.is_some();
            flags[2] |= frame.line.is_some();
        }
        // Several frames at one address are inlined functions; debug information with file
        // names is where the model's symbolizer finds them, so it has looked for them.
        flags[3] |= location.frames.len() > 1 || location.frames.iter().any(|f| f.file.is_some());
    }
    let mapping = module_order
        .iter()
        .map(|&m| {
            let module = &profile.modules[m];
            let [has_functions, has_filenames, has_line_numbers, has_inline_frames] = symbolized[m];
            proto::Mapping {
                id: mapping_id[m],
                memory_start: module.start & !0xfff,
                memory_limit: module.end,
                // The code's mapping as `/proc/PID/maps` shows it (start and file offset down
                // to their page), which tools that symbolize again from the files expect
                // (`go tool pprof -symbolize=local:force`, Parca): they take an address `x` to
                // file offset `x - memory_start + file_offset`, then through the file's
                // program headers to the address its symbols use. (Unaligned, pprof misnames
                // code whose segment's address and offset differ, as lld links them.)
                file_offset: module.file_offset & !0xfff,
                filename: strings.intern(&module.path),
                build_id: strings.intern(&module.build_id),
                has_functions,
                has_filenames,
                has_line_numbers,
                has_inline_frames,
            }
        })
        .collect();

    // Locations (id = model index + 1) and the functions their frames name.
    let mut function = Vec::new();
    let mut function_ids: HashMap<(String, Option<&str>), u64> = HashMap::new();
    let mut location = Vec::with_capacity(profile.locations.len());
    for (i, loc) in profile.locations.iter().enumerate() {
        let line = loc
            .frames
            .iter()
            .map(|frame| {
                let name = function_name(frame).into_owned();
                let key = (name, frame.file.as_deref());
                let function_id = match function_ids.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = function.len() as u64 + 1;
                        function.push(proto::Function {
                            id,
                            name: strings.intern(&key.0),
                            // Left empty: the model has only demangled names, and pprof
                            // would strip a C++ name's parameters and template arguments if
                            // this equalled `name`.
                            system_name: 0,
                            filename: strings.intern(key.1.unwrap_or("")),
                            start_line: 0,
                        });
                        function_ids.insert(key, id);
                        id
                    }
                };
                proto::Line {
                    function_id,
                    line: frame.line.map_or(0, i64::from),
                    column: 0,
                }
            })
            .collect();
        location.push(proto::Location {
            id: i as u64 + 1,
            mapping_id: loc
                .module
                .and_then(|m| mapping_id.get(m).copied())
                .unwrap_or(0),
            address: loc.address,
            line,
            is_folded: false,
        });
    }

    (mapping, location, function)
}

/// The heap profile of `profile`'s sampled allocations, as Go's runtime writes one (`go tool
/// pprof` reads it as it reads a Go program's, `-sample_index=alloc_space` and so on), or
/// `None` if allocations were not sampled:
///
/// - sample types `alloc_objects/count`, `alloc_space/bytes`, `inuse_objects/count` and
///   `inuse_space/bytes` (pprof shows the last by default), the period type `space/bytes` and
///   the period the mean bytes between samples;
/// - one `Sample` per allocation site, its stack the allocating code's frame first, its
///   values the estimates of [`HeapSite`](crate::profile::HeapSite);
/// - the mappings, locations and functions as in [`build`].
pub fn build_heap(profile: &Profile) -> Option<proto::Profile> {
    let heap = profile.heap.as_ref()?;
    let mut strings = Strings::new();
    let mut value_type = |t: &str, unit: &str| proto::ValueType {
        r#type: strings.intern(t),
        unit: strings.intern(unit),
    };
    let sample_type = vec![
        value_type("alloc_objects", "count"),
        value_type("alloc_space", "bytes"),
        value_type("inuse_objects", "count"),
        value_type("inuse_space", "bytes"),
    ];
    let period_type = Some(value_type("space", "bytes"));
    let (mapping, location, function) = tables(profile, &mut strings);
    let value = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let sample = heap
        .sites
        .iter()
        .map(|site| proto::Sample {
            location_id: location_ids(profile, site.stack),
            value: vec![
                value(site.alloc_objects),
                value(site.alloc_bytes),
                value(site.inuse_objects),
                value(site.inuse_bytes),
            ],
            label: Vec::new(),
        })
        .collect();
    Some(proto::Profile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: profile.start.duration_since(UNIX_EPOCH).map_or(0, nanos),
        duration_nanos: nanos(profile.duration),
        period_type,
        period: value(heap.interval),
        comment: Vec::new(),
        default_sample_type: 0,
    })
}

/// Writes the heap profile of `profile` ([`build_heap`]), gzipped; an empty one (no sample
/// types) if allocations were not sampled.
pub fn write_heap(profile: &Profile, w: &mut dyn Write) -> io::Result<()> {
    let mut gz = GzEncoder::new(w, Compression::default());
    gz.write_all(&build_heap(profile).unwrap_or_default().encode_to_vec())?;
    gz.finish()?;
    Ok(())
}

/// Writes the pprof profile of `profile`, gzipped (as pprof stores profiles on disk).
pub fn write(profile: &Profile, w: &mut dyn Write) -> io::Result<()> {
    let mut gz = GzEncoder::new(w, Compression::default());
    gz.write_all(&build(profile).encode_to_vec())?;
    gz.finish()?;
    Ok(())
}
