//! ARM EHABI unwind tables (`.ARM.exidx`, `.ARM.extab`) to `unwind-core` ARM rules.
//!
//! API (to be implemented): [`rows`] reads every index entry and returns one row per function,
//! from its start to the next entry's start (the last one to [`ExidxSections::text_end`]).


/// The EHABI sections of one module, with their file (stated) virtual addresses.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExidxSections<'a> {
    /// `.ARM.exidx` contents.
    pub exidx: &'a [u8],
    /// Its file address (prel31 offsets are relative to each word's address).
    pub exidx_svma: u64,
    /// `.ARM.extab` contents, if the module has them.
    pub extab: Option<&'a [u8]>,
    /// Its file address.
    pub extab_svma: u64,
    /// Where the last function ends (the end of the code), if known.
    pub text_end: Option<u64>,
}
