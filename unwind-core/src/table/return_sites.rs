//! A module's return sites ([`ReturnSites`]), made with its table when the table scans
//! (see [`crate::scan`]), and how well a stack word fits a frame ([`CallFit`]).

use alloc::vec::Vec;

use super::TableError;

/// The return sites of one module: file addresses just after a call instruction, sorted, each
/// with the function its call calls when that is known (a direct call within the module), and
/// the module's known function starts. On ARM a Thumb site has bit 0 set, as the return address
/// a Thumb `bl` leaves in LR; callees and starts have it clear.
///
/// The callees let a scan refuse most stale return addresses: a word left on the stack by a
/// call that has returned names a call to some other function than the one the frame being
/// unwound is in ([`ReturnSites::call_from`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReturnSites {
    base: u64,
    /// Sites relative to `base`, sorted, without duplicates.
    sites: Vec<u32>,
    /// For each site, the start of the function its call calls, relative to `base`, or
    /// [`UNKNOWN_CALLEE`].
    callees: Vec<u32>,
    /// Function starts relative to `base`, sorted.
    starts: Vec<u32>,
}

/// The callee of an indirect call, or of a call through a PLT stub (into another module).
const UNKNOWN_CALLEE: u32 = u32::MAX;

/// Whether a stack word is the return address of a call that made a given frame
/// ([`ReturnSites::call_from`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallFit {
    /// No: not a return site, or its call calls another function.
    No,
    /// Perhaps: a return site whose call's callee is not known.
    Maybe,
    /// Yes: the site of a direct call to the frame's function.
    Yes,
}

impl ReturnSites {
    /// The sites (file addresses, each with the file address of the function its call calls if
    /// known) and function starts of a module whose code starts at file address `base`; sites
    /// may repeat (a site found twice with different callees keeps none), starts outside the
    /// 4 GiB above `base` are dropped. [`TableError::RangeTooLarge`] if a site or callee is
    /// outside them.
    pub fn new(
        base: u64,
        mut sites: Vec<(u64, Option<u64>)>,
        starts: Vec<u64>,
    ) -> Result<Self, TableError> {
        let rel = |a: u64| {
            a.checked_sub(base)
                .and_then(|r| u32::try_from(r).ok())
                .filter(|&r| r != UNKNOWN_CALLEE)
        };
        sites.sort_unstable();
        let mut out = ReturnSites {
            base,
            ..ReturnSites::default()
        };
        for (site, callee) in sites {
            let site = rel(site).ok_or(TableError::RangeTooLarge)?;
            let callee = match callee {
                Some(c) => rel(c).ok_or(TableError::RangeTooLarge)?,
                None => UNKNOWN_CALLEE,
            };
            if out.sites.last() == Some(&site) {
                if let Some(last) = out.callees.last_mut() {
                    if *last != callee {
                        *last = UNKNOWN_CALLEE;
                    }
                }
                continue;
            }
            out.sites.push(site);
            out.callees.push(callee);
        }
        out.starts = starts.into_iter().filter_map(rel).collect();
        out.starts.sort_unstable();
        out.starts.dedup();
        Ok(out)
    }

    /// The start of the function containing file address `svma`, as far as the known starts
    /// tell (the greatest one not above it).
    #[inline]
    pub fn function_start(&self, svma: u64) -> Option<u64> {
        let rel = u32::try_from(svma.checked_sub(self.base)?).ok()?;
        let i = self.starts.partition_point(|&s| s <= rel).checked_sub(1)?;
        self.starts
            .get(i)
            .map(|&s| self.base.wrapping_add(u64::from(s)))
    }

    /// Whether file address `ret` is a return site whose call could have made the frame at
    /// file address `callee_pc` of the same module (`None`: of another module).
    #[inline]
    pub fn call_from(&self, ret: u64, callee_pc: Option<u64>) -> CallFit {
        let site = ret
            .checked_sub(self.base)
            .and_then(|r| u32::try_from(r).ok())
            .and_then(|r| self.sites.binary_search(&r).ok());
        let Some(callee) = site.and_then(|i| self.callees.get(i).copied()) else {
            return CallFit::No;
        };
        if callee == UNKNOWN_CALLEE {
            return CallFit::Maybe;
        }
        let callee = self.base.wrapping_add(u64::from(callee));
        if callee_pc.is_some_and(|pc| self.function_start(pc) == Some(callee)) {
            CallFit::Yes
        } else {
            CallFit::No
        }
    }

    /// How many sites.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// Heap bytes.
    pub fn bytes(&self) -> usize {
        (self.sites.len() + self.callees.len() + self.starts.len()) * 4
    }
}
