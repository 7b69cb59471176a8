//! Sending a profile to an OpenTelemetry Collector: OTLP profiles over HTTP, protobuf-encoded
//! ([`crate::output::otlp`]), configured by `record`'s flags and the OpenTelemetry variables
//! (`OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`). The HTTP client is ureq (plain HTTP: a
//! collector is most often a sidecar or agent on the same host).

use std::time::Duration;

use prost::Message;

use crate::config::Config;
use crate::output::otlp::{request, Resource};
use crate::profile::Profile;

/// The path of OTLP/HTTP's profiles signal, added to a base endpoint.
pub const PROFILES_PATH: &str = "/v1development/profiles";

/// OTLP/HTTP's default endpoint.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// How long a send may take, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Where and as what profiles are exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// The URL profiles are posted to (`.../v1development/profiles`).
    pub url: String,
    /// The resource attributes.
    pub resource: Resource,
}

/// Why a profile was not exported.
#[derive(Debug)]
pub enum ExportError {
    /// The collector could not be reached, or did not answer in time.
    Unreachable(String),
    /// It answered with an error status (and its body, cut).
    Refused {
        /// The HTTP status.
        status: u16,
        /// The body's start.
        body: String,
    },
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportError::Unreachable(e) => write!(f, "the collector could not be reached: {e}"),
            ExportError::Refused { status, body } => {
                write!(f, "the collector answered {status}: {body}")
            }
        }
    }
}

impl std::error::Error for ExportError {}

/// `k=v,k2=v2` (`OTEL_RESOURCE_ATTRIBUTES`'s format: values percent-encoded, spaces around
/// keys and values trimmed) as pairs; `None` if an entry has no `=` or an empty key.
pub fn parse_attributes(s: &str) -> Option<Vec<(String, String)>> {
    s.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|entry| {
            let (k, v) = entry.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (percent_decoded(k), percent_decoded(v.trim())))
        })
        .collect()
}

/// `s` with `%XX` escapes decoded (invalid ones left as they are).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The profiles URL for a base endpoint: `PROFILES_PATH` added where it has no path.
fn profiles_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let has_path = trimmed
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains('/'));
    if has_path {
        trimmed.to_owned()
    } else {
        format!("{trimmed}{PROFILES_PATH}")
    }
}

impl Export {
    /// The export `config` and the environment (`var`: a variable's value by name) ask for, if
    /// any (see the module docs and `--export`).
    pub fn configured(config: &Config, var: impl Fn(&str) -> Option<String>) -> Option<Export> {
        let profiles_endpoint =
            var("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT").filter(|v| !v.is_empty());
        let url = match config.export.as_deref() {
            Some("otlp") | None => match profiles_endpoint {
                Some(url) => url,
                None if config.export.is_some() => profiles_url(
                    &var("OTEL_EXPORTER_OTLP_ENDPOINT")
                        .filter(|v| !v.is_empty())
                        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned()),
                ),
                None => return None,
            },
            Some(url) => profiles_url(url),
        };
        let mut attributes: Vec<(String, String)> = var("OTEL_RESOURCE_ATTRIBUTES")
            .and_then(|v| parse_attributes(&v))
            .unwrap_or_default();
        for (k, v) in &config.labels {
            attributes.retain(|(key, _)| key != k);
            attributes.push((k.clone(), v.clone()));
        }
        // service.name is the resource's first attribute, from its own setting.
        let from_attributes = attributes
            .iter()
            .position(|(k, _)| k == "service.name")
            .map(|i| attributes.remove(i).1);
        let service_name = config
            .service
            .clone()
            .or_else(|| var("OTEL_SERVICE_NAME").filter(|v| !v.is_empty()))
            .or(from_attributes);
        Some(Export {
            url,
            resource: Resource {
                service_name,
                attributes,
            },
        })
    }

    /// Sends `profile`; returns the bytes sent.
    pub fn send(&self, profile: &Profile) -> Result<usize, ExportError> {
        let body = request(profile, &self.resource).encode_to_vec();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        let response = agent
            .post(&self.url)
            .header("Content-Type", "application/x-protobuf")
            .send(&body[..])
            .map_err(|e| ExportError::Unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(body.len());
        }
        let mut text = response.into_body().read_to_string().unwrap_or_default();
        text.truncate(200);
        Err(ExportError::Refused { status, body: text })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(list: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            list.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_endpoint_comes_from_the_flag_or_the_otel_variables() {
        let mut c = Config::default();
        assert_eq!(Export::configured(&c, vars(&[])), None);
        assert_eq!(
            Export::configured(
                &c,
                vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318")])
            ),
            None,
            "the generic endpoint alone (set for traces) does not turn profiles on"
        );
        let url = |c: &Config, v: &[(&str, &str)]| Export::configured(c, vars(v)).unwrap().url;
        assert_eq!(
            url(
                &c,
                &[("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "http://c:1/p")]
            ),
            "http://c:1/p"
        );
        c.export = Some("otlp".into());
        assert_eq!(url(&c, &[]), "http://localhost:4318/v1development/profiles");
        assert_eq!(
            url(&c, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:9/")]),
            "http://h:9/v1development/profiles"
        );
        c.export = Some("http://127.0.0.1:4318".into());
        assert_eq!(url(&c, &[]), "http://127.0.0.1:4318/v1development/profiles");
        c.export = Some("http://127.0.0.1:4318/custom/path".into());
        assert_eq!(url(&c, &[]), "http://127.0.0.1:4318/custom/path");
    }

    #[test]
    fn resource_attributes_from_the_variables_then_the_labels() {
        let mut c = Config {
            export: Some("otlp".into()),
            labels: vec![("service.version".into(), "2".into())],
            ..Config::default()
        };
        let e = Export::configured(
            &c,
            vars(&[(
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=from-attrs, service.version=1,team=a%20b",
            )]),
        )
        .unwrap();
        assert_eq!(e.resource.service_name.as_deref(), Some("from-attrs"));
        assert_eq!(
            e.resource.attributes,
            [
                ("team".into(), "a b".into()),
                ("service.version".into(), "2".into())
            ]
        );
        c.service = Some("flag".into());
        let e = Export::configured(&c, vars(&[("OTEL_SERVICE_NAME", "env")])).unwrap();
        assert_eq!(e.resource.service_name.as_deref(), Some("flag"));
        c.service = None;
        let e = Export::configured(&c, vars(&[("OTEL_SERVICE_NAME", "env")])).unwrap();
        assert_eq!(e.resource.service_name.as_deref(), Some("env"));
        assert_eq!(parse_attributes("a=1,=2"), None);
        assert_eq!(parse_attributes("novalue"), None);
    }
}
