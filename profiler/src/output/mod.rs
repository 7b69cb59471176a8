//! The output formats, each written from a [`crate::profile::Profile`].

use std::path::{Path, PathBuf};

use crate::profile::Profile;

/// The files written.
pub struct Outputs {
    /// Every file, in the order written.
    pub files: Vec<PathBuf>,
}

/// Writes every output as `DIR/STEM.*`.
pub fn write_all(profile: &Profile, dir: &Path, stem: &str) -> std::io::Result<Outputs> {
    std::fs::create_dir_all(dir)?;
    let mut lines = std::collections::HashMap::<String, u64>::new();
    for s in &profile.samples {
        let mut names: Vec<&str> = Vec::new();
        for &l in profile.stacks[s.stack].iter().rev() {
            for f in profile.locations[l].frames.iter().rev() {
                names.push(&f.function);
            }
        }
        *lines.entry(names.join(";")).or_default() += s.weight;
    }
    let mut text = String::new();
    for (k, v) in lines {
        text.push_str(&format!("{k} {v}\n"));
    }
    let p = dir.join(format!("{stem}.folded"));
    std::fs::write(&p, text)?;
    Ok(Outputs { files: vec![p] })
}
