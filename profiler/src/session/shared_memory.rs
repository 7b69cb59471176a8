//! The memory a process shares with `record`: `memfd`s whose size is sealed before they are
//! handed over, so that `record` can read them for as long as it likes, whatever the process
//! (or whoever holds a copy of the descriptor) does to them afterwards.
//!
//! A mapping of a file that shrinks under it raises `SIGBUS` at the next read past the new end;
//! a `memfd` sealed with `F_SEAL_SHRINK` cannot shrink. `record` maps only a descriptor that is
//! a `memfd` of the kernel's shared memory (tmpfs: not hugetlbfs, whose pages can fail to
//! materialise with `SIGBUS` too), sealed against shrinking and growing, of the size it
//! expects, and refuses anything else.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The seals every shared region carries: its size is final, and no seal can be added (a
/// write seal would make `record`'s writable mapping fail).
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A `memfd` of `bytes` zeroed bytes, closed on `exec`, sealed at that size ([`SEALS`]), and
/// mapped shared; the mapping is never unmapped. Fails without trying past the process's file
/// size limit, where `ftruncate` would raise `SIGXFSZ`, whose default action ends the program.
pub(super) fn create(bytes: usize) -> io::Result<(OwnedFd, *mut u8)> {
    if bytes as u64 > file_size_limit() {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    }
    // SAFETY: a NUL-terminated name.
    let fd = unsafe {
        libc::memfd_create(
            c"unwind-profiler".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain system calls on our descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), bytes as libc::off_t) } != 0
        || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    let p = map(&fd, bytes)?;
    Ok((fd, p))
}

/// The process's file size limit (`RLIMIT_FSIZE`) in bytes, `u64::MAX` if none.
fn file_size_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes into a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return u64::MAX;
    }
    // `rlim_t` is 32 bits wide on 32-bit ARM.
    #[allow(clippy::unnecessary_cast)]
    let most = limit.rlim_cur as u64;
    most
}

/// Maps `bytes` of `fd` shared, readable and writable.
fn map(fd: &OwnedFd, bytes: usize) -> io::Result<*mut u8> {
    // SAFETY: a new mapping of our descriptor, placed by the kernel.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// Whether `fs` is the kernel's shared memory (`f_type` and the constant differ in type from one
/// architecture to another).
#[allow(clippy::unnecessary_cast)]
fn is_tmpfs(fs: &libc::statfs) -> bool {
    fs.f_type as i64 == libc::TMPFS_MAGIC as i64
}

/// Why a descriptor a process handed over was not mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not a `memfd` of the kernel's shared memory (a file, a pipe, a device, hugetlbfs).
    NotSharedMemory,
    /// Its size is not sealed: the process could shrink it under `record`.
    NotSealed,
    /// Not the size its contents call for.
    WrongSize,
    /// The kernel refused the mapping (a write seal, no address space).
    NotMapped,
}

impl Refused {
    /// What was wrong, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Refused::NotSharedMemory => "a descriptor that is not shared memory",
            Refused::NotSealed => "shared memory whose size is not sealed",
            Refused::WrongSize => "shared memory of the wrong size",
            Refused::NotMapped => "shared memory that could not be mapped",
        }
    }
}

/// A region a process shared, checked and mapped for the rest of `record`'s life.
pub(super) struct Region {
    /// Its start (page-aligned).
    pub start: *const u8,
    /// Its size in bytes.
    pub size: usize,
    /// The `memfd`'s inode: the process maps it as long as it runs the image that made it.
    pub inode: u64,
}

/// Maps the region of `fd` if it is a sealed `memfd` (see the module docs) whose size `fits`.
pub(super) fn map_checked(
    fd: &OwnedFd,
    fits: impl FnOnce(usize) -> bool,
) -> Result<Region, Refused> {
    map_region(fd, check(fd, fits)?)
}

/// Maps the region of `fd` that [`check`] found to be `(size, inode)`.
pub(super) fn map_region(fd: &OwnedFd, (size, inode): (usize, u64)) -> Result<Region, Refused> {
    let start = map(fd, size).map_err(|_| Refused::NotMapped)?;
    Ok(Region { start, size, inode })
}

/// The size and inode of the region of `fd` if it is a sealed `memfd` (see the module docs)
/// whose size `fits`; nothing is mapped.
pub(super) fn check(
    fd: &OwnedFd,
    fits: impl FnOnce(usize) -> bool,
) -> Result<(usize, u64), Refused> {
    // SAFETY: zeroed stat and statfs are valid; fstat and fstatfs fill them.
    let (mut st, mut fs): (libc::stat, libc::statfs) = unsafe { std::mem::zeroed() };
    // SAFETY: as above, on our descriptor.
    let stat_ok = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0
        && unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) } == 0;
    if !stat_ok || st.st_mode & libc::S_IFMT != libc::S_IFREG || !is_tmpfs(&fs) {
        return Err(Refused::NotSharedMemory);
    }
    // SAFETY: fcntl on our descriptor; F_GET_SEALS fails on files that are not memfds.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0
        || seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
            != libc::F_SEAL_SHRINK | libc::F_SEAL_GROW
    {
        return Err(Refused::NotSealed);
    }
    let size = usize::try_from(st.st_size).map_err(|_| Refused::WrongSize)?;
    if size == 0 || !fits(size) {
        return Err(Refused::WrongSize);
    }
    // `ino_t` is 32 bits wide on 32-bit ARM.
    #[allow(clippy::unnecessary_cast)]
    let inode = st.st_ino as u64;
    Ok((size, inode))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `create` makes is taken; a memfd that can still shrink, a plain file and a pipe are
    /// refused, each for its reason; and what is mapped survives a truncation attempt.
    #[test]
    fn only_sealed_shared_memory_is_mapped() {
        let (fd, _) = create(8192).unwrap();
        let region = map_checked(&fd, |n| n == 8192).expect("a sealed memfd");
        assert_eq!(region.size, 8192);
        assert!(map_checked(&fd, |n| n == 4096).is_err_and(|r| r == Refused::WrongSize));
        // SAFETY: ftruncate on our descriptor; the seal refuses it.
        assert_ne!(unsafe { libc::ftruncate(fd.as_raw_fd(), 0) }, 0);
        // SAFETY: the region is mapped and 8192 bytes long.
        assert_eq!(unsafe { *region.start.add(8191) }, 0);

        // SAFETY: memfd_create with a NUL-terminated name; the descriptor is then ours.
        let unsealed = unsafe {
            OwnedFd::from_raw_fd(libc::memfd_create(c"plain".as_ptr(), libc::MFD_CLOEXEC))
        };
        // SAFETY: plain system call on our descriptor.
        assert_eq!(unsafe { libc::ftruncate(unsealed.as_raw_fd(), 8192) }, 0);
        assert_eq!(
            map_checked(&unsealed, |_| true).err(),
            Some(Refused::NotSealed)
        );

        let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(
            map_checked(&OwnedFd::from(file), |_| true).err(),
            Some(Refused::NotSharedMemory)
        );
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors we then own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: just made, ours.
        let (r, _w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        assert_eq!(
            map_checked(&r, |_| true).err(),
            Some(Refused::NotSharedMemory)
        );
    }
}
