//! What travels on a session's socket: the messages (little-endian `u64` words, then bytes), one
//! descriptor at most with each, and the socket calls both sides make.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::profile::Module;

/// The largest message: one module's path and build id (paths are at most `PATH_MAX`). A longer
/// one arrives truncated, and is refused.
pub const MAX_MESSAGE: usize = 8192;

/// The run's key, which every process presents in its [`Message::Hello`]: `record` makes it and
/// passes it in [`super::KEY_VAR`], so only the processes of the run know it.
pub type Key = [u8; 16];

/// What a process tells `record`. Encoded as little-endian `u64` words, then bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// The process starts (with its [`ProcessRecord`](crate::sampler::ProcessRecord)'s
    /// descriptor), or, with `rejoin`, comes back after the program closed its connection (with
    /// no descriptor: `record` has its record).
    Hello {
        /// Its process id, as it sees it (`record` goes by the socket's peer credentials).
        pid: u32,
        /// The run's key.
        key: Key,
        /// A process of the run already: a new connection for the same process image.
        rejoin: bool,
        /// Its executable's path.
        program: String,
    },
    /// A thread record (with its descriptor): the record at `index` of the process.
    Thread {
        /// The record's index in the process.
        index: u64,
    },
    /// The modules of the rule table from now on: `count` of them, the first ones here, the
    /// rest in [`Message::Module`]s.
    Modules {
        /// How many.
        count: u64,
        /// The first ones (as many as fit with the count: [`pack_modules`]).
        first: Vec<Module>,
    },
    /// Modules of a [`Message::Modules`] list, in its order: as many as fit in one message
    /// ([`pack_modules`]).
    Module(Vec<Module>),
    /// The snapshot signal arrived: write the profile so far.
    Snapshot,
    /// Functions the process's JIT compilers named through the GDB JIT interface
    /// ([`unwind_in_process::jit_functions`]), as many as fit in one message
    /// ([`pack_jit_functions`]).
    JitFunctions(Vec<unwind_in_process::JitFunction>),
}

const HELLO: u64 = 1;
const THREAD: u64 = 2;
const MODULES: u64 = 3;
const MODULE: u64 = 4;
pub(super) const SNAPSHOT: u64 = 5;
const JIT_FUNCTIONS: u64 = 6;

/// The longest JIT function name sent (longer ones are cut, at a character boundary).
pub const MAX_JIT_NAME: usize = 512;

impl Message {
    /// The message as bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut word = |w: u64| out.extend_from_slice(&w.to_le_bytes());
        match self {
            Message::Hello {
                pid,
                key,
                rejoin,
                program,
            } => {
                word(HELLO);
                word(u64::from(*pid));
                word(u64::from(*rejoin));
                out.extend_from_slice(key);
                out.extend_from_slice(program.as_bytes());
            }
            Message::Thread { index } => {
                word(THREAD);
                word(*index);
            }
            Message::Modules { count, first } => {
                word(MODULES);
                word(*count);
                for m in first {
                    out.extend_from_slice(&encode_module(m));
                }
            }
            Message::Snapshot => word(SNAPSHOT),
            Message::JitFunctions(functions) => {
                word(JIT_FUNCTIONS);
                for f in functions {
                    out.extend_from_slice(&encode_jit_function(f));
                }
            }
            Message::Module(modules) => {
                word(MODULE);
                for m in modules {
                    out.extend_from_slice(&encode_module(m));
                }
            }
        }
        out
    }

    /// Decodes a message, or `None` if it is not one.
    pub fn decode(bytes: &[u8]) -> Option<Message> {
        let word = |i: usize| -> Option<u64> {
            let b = bytes.get(i * 8..i * 8 + 8)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        };
        let text = |from: usize| -> Option<String> {
            Some(String::from_utf8_lossy(bytes.get(from..)?).into_owned())
        };
        match word(0)? {
            HELLO => Some(Message::Hello {
                pid: u32::try_from(word(1)?).ok()?,
                rejoin: match word(2)? {
                    0 => false,
                    1 => true,
                    _ => return None,
                },
                key: bytes.get(24..40)?.try_into().ok()?,
                program: text(40)?,
            }),
            THREAD => Some(Message::Thread { index: word(1)? }),
            MODULES => Some(Message::Modules {
                count: word(1)?,
                first: decode_modules(bytes.get(16..)?)?,
            }),
            SNAPSHOT => Some(Message::Snapshot),
            MODULE => {
                let modules = decode_modules(bytes.get(8..)?)?;
                (!modules.is_empty()).then_some(Message::Module(modules))
            }
            JIT_FUNCTIONS => {
                let mut rest = bytes.get(8..)?;
                let mut functions = Vec::new();
                while !rest.is_empty() {
                    let (f, used) = decode_jit_function(rest)?;
                    functions.push(f);
                    rest = rest.get(used..)?;
                }
                (!functions.is_empty()).then_some(Message::JitFunctions(functions))
            }
            _ => None,
        }
    }
}

/// One module's record in a [`Message::Module`]: its start, end, bias, file offset, whether
/// generated, the lengths of its build id and path (little-endian words), then those bytes.
fn encode_module(m: &Module) -> Vec<u8> {
    let mut out = Vec::with_capacity(56 + m.build_id.len() + m.path.len());
    for w in [
        m.start,
        m.end,
        m.bias,
        m.file_offset,
        u64::from(m.generated),
        m.build_id.len() as u64,
        m.path.len() as u64,
    ] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(m.build_id.as_bytes());
    out.extend_from_slice(m.path.as_bytes());
    out
}

/// The module records that make up `bytes`; `None` if they do not.
fn decode_modules(mut bytes: &[u8]) -> Option<Vec<Module>> {
    let mut modules = Vec::new();
    while !bytes.is_empty() {
        let (m, used) = decode_module(bytes)?;
        modules.push(m);
        bytes = bytes.get(used..)?;
    }
    Some(modules)
}

/// The module record at the start of `bytes`, and its length; `None` if it is not one.
fn decode_module(bytes: &[u8]) -> Option<(Module, usize)> {
    let word = |i: usize| -> Option<u64> {
        let b = bytes.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    };
    let id_len = usize::try_from(word(5)?).ok()?;
    let path_len = usize::try_from(word(6)?).ok()?;
    let id_end = 56usize.checked_add(id_len)?;
    let end = id_end.checked_add(path_len)?;
    let module = Module {
        start: word(0)?,
        end: word(1)?,
        bias: word(2)?,
        file_offset: word(3)?,
        generated: word(4)? != 0,
        build_id: String::from_utf8_lossy(bytes.get(56..id_end)?).into_owned(),
        path: String::from_utf8_lossy(bytes.get(id_end..end)?).into_owned(),
    };
    Some((module, end))
}

/// `modules` as a list: a [`Message::Modules`] with the first of them, then
/// [`Message::Module`]s, each of at most [`MAX_MESSAGE`] bytes, in order (one message for the
/// lists of most programs; a module too long for a message of its own, which no path of
/// `PATH_MAX` is, makes one alone, which the receiver refuses).
pub fn pack_modules(modules: Vec<Module>) -> Vec<Message> {
    let count = modules.len() as u64;
    let mut batches: Vec<Vec<Module>> = vec![Vec::new()];
    let mut bytes = 16;
    for m in modules {
        let len = 56 + m.build_id.len() + m.path.len();
        if bytes + len > MAX_MESSAGE && batches.last().is_some_and(|b| !b.is_empty()) {
            batches.push(Vec::new());
            bytes = 8;
        }
        bytes += len;
        if let Some(b) = batches.last_mut() {
            b.push(m);
        }
    }
    let mut batches = batches.into_iter();
    let first = batches.next().unwrap_or_default();
    std::iter::once(Message::Modules { count, first })
        .chain(batches.map(Message::Module))
        .collect()
}

/// One JIT function's record in a [`Message::JitFunctions`]: its start, end and the length of
/// its name (little-endian words), then the name (at most [`MAX_JIT_NAME`] bytes).
fn encode_jit_function(f: &unwind_in_process::JitFunction) -> Vec<u8> {
    let mut cut = f.name.len().min(MAX_JIT_NAME);
    while !f.name.is_char_boundary(cut) {
        cut -= 1;
    }
    let name = &f.name.as_bytes()[..cut];
    let mut out = Vec::with_capacity(24 + name.len());
    for w in [f.start, f.end, name.len() as u64] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(name);
    out
}

/// The JIT function record at the start of `bytes`, and its length; `None` if it is not one.
fn decode_jit_function(bytes: &[u8]) -> Option<(unwind_in_process::JitFunction, usize)> {
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?,
        ))
    };
    let len = usize::try_from(word(2)?)
        .ok()
        .filter(|&n| n <= MAX_JIT_NAME)?;
    let end = 24usize.checked_add(len)?;
    let f = unwind_in_process::JitFunction {
        start: word(0)?,
        end: word(1)?,
        name: String::from_utf8_lossy(bytes.get(24..end)?).into_owned(),
    };
    (f.start < f.end).then_some((f, end))
}

/// `functions` as [`Message::JitFunctions`], each of at most [`MAX_MESSAGE`] bytes.
pub fn pack_jit_functions(functions: Vec<unwind_in_process::JitFunction>) -> Vec<Message> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut bytes = 8;
    for f in functions {
        let len = 24 + f.name.len().min(MAX_JIT_NAME);
        if bytes + len > MAX_MESSAGE && !batch.is_empty() {
            out.push(Message::JitFunctions(std::mem::take(&mut batch)));
            bytes = 8;
        }
        bytes += len;
        batch.push(f);
    }
    if !batch.is_empty() {
        out.push(Message::JitFunctions(batch));
    }
    out
}

/// The socket address of the abstract name `name`, and its length.
pub(super) fn address(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    // The first byte stays 0: the abstract namespace.
    if bytes.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "session name too long",
        ));
    }
    for (to, &from) in addr.sun_path[1..].iter_mut().zip(bytes) {
        *to = from as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((addr, len as libc::socklen_t))
}

/// A new `SOCK_SEQPACKET` Unix socket, closed on `exec`.
pub(super) fn seqpacket(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain system call.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | flags,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `message` on `socket`, with `fd` if given.
pub(super) fn send(socket: RawFd, message: &Message, fd: Option<RawFd>) -> io::Result<()> {
    let bytes = message.encode();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // Room for one descriptor, aligned for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic; the control buffer holds one descriptor's
        // message (CMSG_SPACE(4) is at most 24 bytes), and CMSG_FIRSTHDR of a msghdr with that
        // buffer points into it.
        unsafe {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
    }
    loop {
        // SAFETY: a valid msghdr; MSG_NOSIGNAL: a gone `record` gives EPIPE, not SIGPIPE.
        let n = unsafe { libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One message received.
pub(super) enum Received {
    /// Nothing is waiting.
    Nothing,
    /// The connection ended.
    End,
    /// A message of this many bytes of the buffer, with the descriptor it carried.
    Message(usize, Option<OwnedFd>),
    /// A message longer than the buffer, or with more descriptors than fit: not one a process
    /// of the run sends.
    Truncated,
}

/// Receives one message from `socket` without blocking. Any descriptor past the first of a
/// message is closed.
pub(super) fn receive(socket: RawFd, buffer: &mut [u8]) -> io::Result<Received> {
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: a valid msghdr whose buffers outlive the call.
    let n = unsafe {
        libc::recvmsg(
            socket,
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Received::Nothing),
            _ => Err(e),
        };
    }
    let mut fd = None;
    // SAFETY: the kernel filled the control buffer; CMSG_FIRSTHDR/NXTHDR stay within
    // msg_controllen, and an SCM_RIGHTS message's data holds descriptors now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..count {
                    let owned = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    // One descriptor per message: any other is closed.
                    if fd.is_none() {
                        fd = Some(owned);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Ok(Received::Truncated);
    }
    Ok(match n {
        0 => Received::End,
        n => Received::Message(n as usize, fd),
    })
}

/// The process id and user id of the process at the other end of `socket`, as the kernel
/// recorded them when it connected (in this process's pid namespace).
pub(super) fn peer(socket: &OwnedFd) -> io::Result<(u32, u32)> {
    // SAFETY: a zeroed ucred is valid; getsockopt writes at most `len` bytes into it.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: as above, on our socket.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((u32::try_from(cred.pid).unwrap_or(0), cred.uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        let messages = [
            Message::Hello {
                pid: 42,
                key: *b"0123456789abcdef",
                rejoin: false,
                program: "/usr/bin/python3.11".into(),
            },
            Message::Hello {
                pid: 43,
                key: [7; 16],
                rejoin: true,
                program: String::new(),
            },
            Message::Thread { index: 7 },
            Message::Modules {
                count: 3,
                first: Vec::new(),
            },
            Message::Module(vec![Module {
                path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
                start: 0x7f00_0002_8000,
                end: 0x7f00_001b_d000,
                bias: 0x7f00_0000_0000,
                file_offset: 0x28000,
                build_id: "c289da5071a3399de893d2af81d6a30c62646e1e".into(),
                generated: false,
            }]),
            Message::Module(vec![
                Module {
                    path: "[anon]".into(),
                    start: 0x7f00_1000_0000,
                    end: 0x7f00_1004_0000,
                    bias: 0,
                    file_offset: 0,
                    build_id: String::new(),
                    generated: true,
                },
                Module {
                    path: "/usr/bin/python3.11".into(),
                    start: 0x40_0000,
                    end: 0x80_0000,
                    bias: 0,
                    file_offset: 0x1000,
                    build_id: "ab".into(),
                    generated: false,
                },
            ]),
            Message::Snapshot,
        ];
        for m in &messages {
            assert_eq!(Message::decode(&m.encode()).as_ref(), Some(m));
        }
        assert_eq!(Message::decode(&[]), None);
        assert_eq!(Message::decode(&99u64.to_le_bytes()), None);
        // A module whose build id runs past the message, and one cut short.
        let mut bad = messages[4].encode();
        bad[48..56].copy_from_slice(&1000u64.to_le_bytes());
        assert_eq!(Message::decode(&bad), None);
        let whole = messages[5].encode();
        assert_eq!(Message::decode(&whole[..whole.len() - 1]), None);
        assert_eq!(Message::decode(&4u64.to_le_bytes()), None);
        // A hello whose rejoin flag is neither.
        let mut bad = messages[0].encode();
        bad[16..24].copy_from_slice(&2u64.to_le_bytes());
        assert_eq!(Message::decode(&bad), None);
        // Truncated anywhere: never a panic, and a hello without its whole key is none.
        for m in &messages {
            let bytes = m.encode();
            for n in 0..bytes.len() {
                let _ = Message::decode(&bytes[..n]);
            }
        }
        assert_eq!(Message::decode(&messages[0].encode()[..39]), None);
    }

    /// JIT functions' names travel in batches within the limit, long names cut at a character
    /// boundary; a record whose name runs past the message, or is empty of code, is refused.
    #[test]
    fn jit_functions_travel_in_batches() {
        let long = "é".repeat(400);
        let functions: Vec<unwind_in_process::JitFunction> = (0..300u64)
            .map(|i| unwind_in_process::JitFunction {
                start: 0x1000 * (i + 1),
                end: 0x1000 * (i + 1) + 0x80,
                name: if i == 7 {
                    long.clone()
                } else {
                    format!("int Main.f{i}(int)")
                },
            })
            .collect();
        let messages = pack_jit_functions(functions.clone());
        assert!(messages.len() > 1);
        let mut back = Vec::new();
        for m in &messages {
            let bytes = m.encode();
            assert!(bytes.len() <= MAX_MESSAGE);
            match Message::decode(&bytes) {
                Some(Message::JitFunctions(f)) => back.extend(f),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(back.len(), functions.len());
        assert_eq!(back[3], functions[3]);
        assert!(back[7].name.len() <= MAX_JIT_NAME && long.starts_with(&back[7].name));
        let one = pack_jit_functions(functions[..1].to_vec())
            .remove(0)
            .encode();
        let mut bad = one.clone();
        bad[24..32].copy_from_slice(&100u64.to_le_bytes());
        assert_eq!(Message::decode(&bad), None);
        let mut empty = one.clone();
        empty.copy_within(8..16, 16);
        assert_eq!(Message::decode(&empty), None);
        assert_eq!(Message::decode(&one[..one.len() - 1]), None);
    }

    /// Modules are packed into as few messages as fit, in order, each within the limit.
    #[test]
    fn module_lists_are_packed_in_order_within_the_limit() {
        let modules: Vec<Module> = (0..300u64)
            .map(|i| Module {
                path: format!(
                    "/usr/lib/x86_64-linux-gnu/lib{i}.so.{}",
                    "x".repeat(i as usize % 90)
                ),
                start: i << 20,
                end: (i << 20) + 0x1000,
                bias: i << 20,
                file_offset: 0,
                build_id: "c289da5071a3399de893d2af81d6a30c62646e1e".into(),
                generated: false,
            })
            .collect();
        let messages = pack_modules(modules.clone());
        assert!(
            messages.len() > 1 && messages.len() < 20,
            "{}",
            messages.len()
        );
        let mut back = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let bytes = m.encode();
            assert!(bytes.len() <= MAX_MESSAGE);
            match Message::decode(&bytes) {
                Some(Message::Modules { count, first }) if i == 0 => {
                    assert_eq!(count, 300);
                    back.extend(first);
                }
                Some(Message::Module(list)) if i > 0 => back.extend(list),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(back, modules);
        // A short list is one message; none is a list of none.
        assert_eq!(pack_modules(modules[..5].to_vec()).len(), 1);
        assert_eq!(
            pack_modules(Vec::new()),
            [Message::Modules {
                count: 0,
                first: Vec::new()
            }]
        );
    }

    /// A message longer than the buffer is reported as truncated, not taken for a shorter one.
    #[test]
    fn a_long_message_is_truncated_not_cut() {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors we then own.
        assert_eq!(
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) },
            0
        );
        // SAFETY: just made, ours.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let long = Message::Hello {
            pid: 1,
            key: [0; 16],
            rejoin: false,
            program: "x".repeat(MAX_MESSAGE),
        };
        send(a.as_raw_fd(), &long, None).unwrap();
        send(a.as_raw_fd(), &Message::Snapshot, None).unwrap();
        let mut buffer = vec![0u8; MAX_MESSAGE];
        assert!(matches!(
            receive(b.as_raw_fd(), &mut buffer).unwrap(),
            Received::Truncated
        ));
        assert!(matches!(
            receive(b.as_raw_fd(), &mut buffer).unwrap(),
            Received::Message(8, None)
        ));
        assert!(matches!(
            receive(b.as_raw_fd(), &mut buffer).unwrap(),
            Received::Nothing
        ));
        drop(a);
        assert!(matches!(
            receive(b.as_raw_fd(), &mut buffer).unwrap(),
            Received::End
        ));
        // SAFETY: getpid has no preconditions.
        assert_eq!(peer(&b).unwrap().0, unsafe { libc::getpid() } as u32);
    }
}
