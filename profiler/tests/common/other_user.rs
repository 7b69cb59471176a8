//! A second local user for the tests of what another user can plant or send (`useradd`; the
//! tests run as root).

use std::os::unix::process::CommandExt;
use std::process::Command;

/// The name of the test's second user.
pub const OTHER_USER: &str = "unwind-trust";

/// The second user's uid, made if missing; `None` (failing under CI) unless root.
pub fn other_user() -> Option<u32> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        unwind_test_support::missing("root, to make a second user (useradd)");
        return None;
    }
    let id = || {
        Command::new("id")
            .args(["-u", OTHER_USER])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
    };
    if id().is_none() {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(OTHER_USER)
            .status()
            .is_ok_and(|s| s.success());
        if !made && id().is_none() {
            unwind_test_support::missing("useradd, to make a second user");
            return None;
        }
    }
    id()
}

/// `command` run as the second user, uid `uid` (its own group, no others).
pub fn as_other_user(uid: u32, command: &mut Command) -> &mut Command {
    command.uid(uid).gid(uid_group(uid)).env_clear()
}

/// The primary group of `uid`.
pub fn uid_group(uid: u32) -> u32 {
    // SAFETY: getpwuid returns null or a pointer to a static record we only read.
    let pw = unsafe { libc::getpwuid(uid) };
    if pw.is_null() {
        return uid;
    }
    // SAFETY: as above, not null.
    unsafe { (*pw).pw_gid }
}
