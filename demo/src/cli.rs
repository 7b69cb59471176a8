//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use crate::plugin::DEFAULT_PLUGIN_PATH;

/// The usage text (`--help`).
pub const USAGE: &str = "\
usage: demo-workload [--threads N] [--seconds S] [--plugin PATH] [--churn] [--verbose]

  --threads N     Rust worker threads besides the main thread and the plugin's C thread
                  (default 4)
  --seconds S     wall-clock run time (default 3)
  --plugin PATH   the plugin to dlopen (default: the one build.rs built)
  --churn         also start and end threads, dlclose/dlopen a second plugin, fork and exec
  --verbose       print when the plugin is loaded and the CPU time each phase got
";

/// The options of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Rust worker threads.
    pub threads: usize,
    /// Wall-clock run time.
    pub duration: Duration,
    /// The plugin to `dlopen`.
    pub plugin: PathBuf,
    /// Whether to run the churn thread.
    pub churn: bool,
    /// Whether to print the run's details.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 4,
            duration: Duration::from_secs(3),
            plugin: PathBuf::from(DEFAULT_PLUGIN_PATH),
            churn: false,
            verbose: false,
        }
    }
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Run the workload.
    Run(Options),
    /// Print [`USAGE`].
    Help,
}

/// Parses the arguments (without the program name); `--flag value` and `--flag=value` both
/// work.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut options = Options::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs {what}"))
        };
        match flag.as_str() {
            "--threads" => {
                options.threads = value("a thread count")?
                    .parse()
                    .map_err(|e| format!("--threads: {e}"))?;
            }
            "--seconds" => {
                let seconds: f64 = value("a number of seconds")?
                    .parse()
                    .map_err(|e| format!("--seconds: {e}"))?;
                options.duration =
                    Duration::try_from_secs_f64(seconds).map_err(|e| format!("--seconds: {e}"))?;
            }
            "--plugin" => options.plugin = PathBuf::from(value("a path")?),
            "--churn" => options.churn = true,
            "--verbose" | "-v" => options.verbose = true,
            "--help" | "-h" => return Ok(Command::Help),
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    Ok(Command::Run(options))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn defaults_and_flags() {
        assert_eq!(parse_strs(&[]), Ok(Command::Run(Options::default())));
        let Ok(Command::Run(o)) = parse_strs(&[
            "--threads",
            "2",
            "--seconds=0.5",
            "--plugin",
            "/x.so",
            "--churn",
            "-v",
        ]) else {
            panic!("parse failed");
        };
        assert_eq!(o.threads, 2);
        assert_eq!(o.duration, Duration::from_millis(500));
        assert_eq!(o.plugin, PathBuf::from("/x.so"));
        assert!(o.churn && o.verbose);
        assert_eq!(parse_strs(&["--help"]), Ok(Command::Help));
        assert!(parse_strs(&["--threads"]).is_err());
        assert!(parse_strs(&["--seconds", "-1"]).is_err());
        assert!(parse_strs(&["--bogus"]).is_err());
    }
}
