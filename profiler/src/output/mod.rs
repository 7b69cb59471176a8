//! The output formats, each written from a [`crate::profile::Profile`].
