//! elfutils' `debuginfod`, started by a test on loopback over a directory of debug files.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// elfutils' server on a free loopback port over `dir`, until dropped.
pub struct Server {
    child: std::process::Child,
    /// Its address, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `debuginfod` over the files of `dir` and waits until it serves build id `id`.
pub fn serve(dir: &Path, db: &Path, id: &str) -> Server {
    let port = free_port();
    let child = Command::new("debuginfod")
        .arg("-F")
        .arg(dir)
        .arg("-d")
        .arg(db)
        .arg("-p")
        .arg(port.to_string())
        .args(["-t", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let started = Instant::now();
    loop {
        let asked = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("{}/buildid/{id}/debuginfo", server.url))
            .output();
        if asked.is_ok_and(|o| o.stdout == b"200") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "debuginfod did not serve {id} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server
}
