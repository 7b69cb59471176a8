//! OpenTelemetry's profiles signal (OTLP, `opentelemetry.proto.profiles.v1development`, as the
//! `opentelemetry-proto` crate generates it: wire-compatible with the Collector's receiver of
//! the v0.161 line): [`request`] maps a profile onto one `ExportProfilesServiceRequest`.
//!
//! - The request's dictionary holds every table; entry 0 of each is its zero value, as the
//!   format requires.
//! - One `ResourceProfiles` per process of the profile: the resource attributes the caller
//!   gives ([`Resource`]: `service.name`, `service.version`, `host.name`, labels), and the
//!   process's own (`process.pid`, `process.executable.name`, `process.executable.path`).
//! - One `Profile` per process, sample type `cpu`/`nanoseconds` (`wall`/`nanoseconds` for a
//!   wall-clock profile), period type the same and period the sampling interval, with its
//!   start time and duration.
//! - One `Mapping` per module (its code's start and end, file offset, path, and its GNU build
//!   id as `process.executable.build_id.gnu`, so that a backend can symbolize it again); one
//!   `Location` per address, with one `Line` per frame, innermost first as pprof has them; one
//!   `Function` per distinct (name, file); one `Stack` per distinct stack, leaf first.
//! - One `Sample` per (thread, stack): its value the CPU (or wall) time the samples stand for,
//!   attributes `thread.name` and `thread.id`.
//! - With allocations sampled, four more profiles in the root process's scope, as the
//!   Collector's pprof receiver makes of a Go heap profile (one OTLP profile per pprof sample
//!   type): `alloc_objects`/`count`, `alloc_space`/`bytes`, `inuse_objects`/`count` and
//!   `inuse_space`/`bytes`, period type `space`/`bytes` and period the mean bytes between
//!   samples, one `Sample` per allocation site.

use std::collections::HashMap;
use std::time::UNIX_EPOCH;

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as otlp;
use opentelemetry_proto::tonic::resource::v1::Resource as OtlpResource;

use super::function_name;
use crate::profile::Profile;

/// What the profiled service is, as resource attributes: given by the user (flags, the
/// `OTEL_*` variables), the same for every process of the profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resource {
    /// `service.name` (the program's name when not given).
    pub service_name: Option<String>,
    /// Other attributes, in order (`service.version`, `deployment.environment.name`, labels).
    pub attributes: Vec<(String, String)>,
}

/// The string table and the other dictionary tables being built.
#[derive(Default)]
struct Tables {
    dictionary: otlp::ProfilesDictionary,
    strings: HashMap<String, i32>,
    functions: HashMap<(i32, i32), i32>,
    attributes: HashMap<(i32, Attribute), i32>,
}

/// An attribute's value, as the table keys it.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Attribute {
    Text(String),
    Int(i64),
}

impl Tables {
    fn new() -> Tables {
        let mut t = Tables::default();
        t.string("");
        let d = &mut t.dictionary;
        d.mapping_table.push(otlp::Mapping::default());
        d.location_table.push(otlp::Location::default());
        d.function_table.push(otlp::Function::default());
        d.link_table.push(otlp::Link::default());
        d.attribute_table.push(otlp::KeyValueAndUnit::default());
        d.stack_table.push(otlp::Stack::default());
        t
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.dictionary.string_table.len() as i32;
        self.dictionary.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    fn function(&mut self, name: &str, file: Option<&str>) -> i32 {
        let name = self.string(name);
        let file = file.map_or(0, |f| self.string(f));
        let table = &mut self.dictionary.function_table;
        *self.functions.entry((name, file)).or_insert_with(|| {
            table.push(otlp::Function {
                name_strindex: name,
                system_name_strindex: name,
                filename_strindex: file,
                start_line: 0,
            });
            (table.len() - 1) as i32
        })
    }

    /// An attribute of string value.
    fn attribute(&mut self, key: &str, value: &str) -> i32 {
        self.attribute_of(key, Attribute::Text(value.to_owned()))
    }

    /// An attribute of integer value (`thread.id`, as the semantic conventions type it).
    fn int_attribute(&mut self, key: &str, value: i64) -> i32 {
        self.attribute_of(key, Attribute::Int(value))
    }

    fn attribute_of(&mut self, key: &str, value: Attribute) -> i32 {
        let key = self.string(key);
        let table = &mut self.dictionary.attribute_table;
        *self
            .attributes
            .entry((key, value.clone()))
            .or_insert_with(|| {
                table.push(otlp::KeyValueAndUnit {
                    key_strindex: key,
                    value: Some(match value {
                        Attribute::Text(s) => string_value(&s),
                        Attribute::Int(i) => AnyValue {
                            value: Some(any_value::Value::IntValue(i)),
                        },
                    }),
                    unit_strindex: 0,
                });
                (table.len() - 1) as i32
            })
    }
}

fn string_value(s: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s.to_owned())),
    }
}

fn key_value(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(value),
        ..KeyValue::default()
    }
}

/// The request that carries `profile` with `resource`'s attributes (see the module docs).
pub fn request(profile: &Profile, resource: &Resource) -> ExportProfilesServiceRequest {
    let mut t = Tables::new();
    // Mappings: index = module + 1.
    for m in &profile.modules {
        let filename = t.string(&m.path);
        let attributes = if m.build_id.is_empty() {
            Vec::new()
        } else {
            vec![t.attribute("process.executable.build_id.gnu", &m.build_id)]
        };
        t.dictionary.mapping_table.push(otlp::Mapping {
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.file_offset,
            filename_strindex: filename,
            attribute_indices: attributes,
        });
    }
    // Locations: index = location + 1.
    for l in &profile.locations {
        let lines = l
            .frames
            .iter()
            .map(|f| otlp::Line {
                function_index: t.function(&function_name(f), f.file.as_deref()),
                line: f.line.map_or(0, i64::from),
                column: 0,
            })
            .collect();
        t.dictionary.location_table.push(otlp::Location {
            mapping_index: l.module.map_or(0, |m| m as i32 + 1),
            address: l.address,
            lines,
            attribute_indices: Vec::new(),
        });
    }
    // Stacks: index = stack + 1.
    for s in &profile.stacks {
        t.dictionary.stack_table.push(otlp::Stack {
            location_indices: s.iter().map(|&l| l as i32 + 1).collect(),
        });
    }
    let kind = if profile.wall_clock { "wall" } else { "cpu" };
    let value_type = otlp::ValueType {
        type_strindex: t.string(kind),
        unit_strindex: t.string("nanoseconds"),
    };
    let interval_ns = i64::try_from(profile.interval.as_nanos()).unwrap_or(i64::MAX);
    let start_ns = profile
        .start
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let duration_ns = u64::try_from(profile.duration.as_nanos()).unwrap_or(u64::MAX);
    // One profile per process, in order of first appearance.
    let mut by_pid: Vec<(u32, String, Vec<otlp::Sample>)> = Vec::new();
    for total in &profile.totals {
        let thread = &profile.threads[total.thread];
        let attributes = vec![
            t.attribute("thread.name", &thread.name),
            t.int_attribute("thread.id", i64::from(thread.tid)),
        ];
        let sample = otlp::Sample {
            stack_index: total.stack as i32 + 1,
            attribute_indices: attributes,
            link_index: 0,
            values: vec![i64::try_from(total.periods)
                .unwrap_or(i64::MAX)
                .saturating_mul(interval_ns)],
            timestamps_unix_nano: Vec::new(),
        };
        match by_pid.iter_mut().find(|(pid, _, _)| *pid == thread.pid) {
            Some((_, _, samples)) => samples.push(sample),
            None => by_pid.push((thread.pid, thread.process.clone(), vec![sample])),
        }
    }
    let program = std::path::Path::new(&profile.program)
        .file_name()
        .map_or_else(
            || profile.program.clone(),
            |n| n.to_string_lossy().into_owned(),
        );
    let host = host_name();
    // The heap profiles, in the root process's scope (its sites are of every process).
    let mut heap_profiles = Vec::new();
    if let Some(heap) = &profile.heap {
        if !by_pid.iter().any(|(pid, _, _)| *pid == profile.pid) {
            by_pid.push((profile.pid, program.clone(), Vec::new()));
        }
        let space = otlp::ValueType {
            type_strindex: t.string("space"),
            unit_strindex: t.string("bytes"),
        };
        type Value = fn(&crate::profile::HeapSite) -> u64;
        let types: [(&str, &str, Value); 4] = [
            ("alloc_objects", "count", |s| s.alloc_objects),
            ("alloc_space", "bytes", |s| s.alloc_bytes),
            ("inuse_objects", "count", |s| s.inuse_objects),
            ("inuse_space", "bytes", |s| s.inuse_bytes),
        ];
        for (i, (kind, unit, value)) in types.into_iter().enumerate() {
            let value_type = otlp::ValueType {
                type_strindex: t.string(kind),
                unit_strindex: t.string(unit),
            };
            let samples = heap
                .sites
                .iter()
                .filter(|s| value(s) > 0)
                .map(|s| otlp::Sample {
                    stack_index: s.stack as i32 + 1,
                    attribute_indices: Vec::new(),
                    link_index: 0,
                    values: vec![i64::try_from(value(s)).unwrap_or(i64::MAX)],
                    timestamps_unix_nano: Vec::new(),
                })
                .collect();
            let mut id = profile_id(profile.pid, start_ns);
            if let Some(last) = id.last_mut() {
                *last ^= i as u8 + 1;
            }
            heap_profiles.push(otlp::Profile {
                sample_type: Some(value_type),
                samples,
                time_unix_nano: start_ns,
                duration_nano: duration_ns,
                period_type: Some(space),
                period: i64::try_from(heap.interval).unwrap_or(i64::MAX),
                profile_id: id,
                ..otlp::Profile::default()
            });
        }
    }
    let resource_profiles = by_pid
        .into_iter()
        .map(|(pid, process, samples)| {
            let mut attributes = vec![key_value(
                "service.name",
                string_value(resource.service_name.as_deref().unwrap_or(&program)),
            )];
            attributes.extend(
                resource
                    .attributes
                    .iter()
                    .map(|(k, v)| key_value(k, string_value(v))),
            );
            if !resource.attributes.iter().any(|(k, _)| k == "host.name") {
                if let Some(host) = &host {
                    attributes.push(key_value("host.name", string_value(host)));
                }
            }
            attributes.push(key_value(
                "process.pid",
                AnyValue {
                    value: Some(any_value::Value::IntValue(i64::from(pid))),
                },
            ));
            attributes.push(key_value("process.executable.name", string_value(&process)));
            if pid == profile.pid {
                attributes.push(key_value(
                    "process.executable.path",
                    string_value(&profile.program),
                ));
            }
            otlp::ResourceProfiles {
                resource: Some(OtlpResource {
                    attributes,
                    ..OtlpResource::default()
                }),
                scope_profiles: vec![otlp::ScopeProfiles {
                    scope: Some(InstrumentationScope {
                        name: "unwind-profiler".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..InstrumentationScope::default()
                    }),
                    profiles: std::iter::once(otlp::Profile {
                        sample_type: Some(value_type),
                        samples,
                        time_unix_nano: start_ns,
                        duration_nano: duration_ns,
                        period_type: Some(value_type),
                        period: interval_ns,
                        profile_id: profile_id(pid, start_ns),
                        ..otlp::Profile::default()
                    })
                    .chain(if pid == profile.pid {
                        std::mem::take(&mut heap_profiles)
                    } else {
                        Vec::new()
                    })
                    .collect(),
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }
        })
        .collect();
    ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(t.dictionary),
    }
}

/// This machine's name (`uname`), if it has one.
fn host_name() -> Option<String> {
    // SAFETY: uname fills the zeroed struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    // SAFETY: uname NUL-terminates nodename within its array.
    let name = unsafe { std::ffi::CStr::from_ptr(u.nodename.as_ptr()) };
    Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
}

/// A profile's 16-byte id: its process and start time, mixed (unique enough for a backend to
/// tell profiles apart; the format asks for no more).
fn profile_id(pid: u32, start_ns: u64) -> Vec<u8> {
    let mut id = Vec::with_capacity(16);
    id.extend_from_slice(&start_ns.to_le_bytes());
    id.extend_from_slice(&(u64::from(pid) ^ 0x9e37_79b9_7f4a_7c15).to_le_bytes());
    id
}
