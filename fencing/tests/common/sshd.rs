//! A real OpenSSH server for the fencing tests: `/usr/sbin/sshd -D` on a free 127.0.0.1
//! port, with its own host key, config and authorized key (key-only), logging to a file
//! that is printed when a test fails, stopped in `Drop`. Also the service stand-in that
//! listens on a port, and the warden binary that the ssh method runs remotely.
//!
//! The process is a [`ServerProcess`] of the root crate's test harness
//! (`tests/common/server.rs`), which both crates' `common` modules include.

use super::{require, wait_for, Group};
use crate::common::server::{free_port, ServerProcess};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;
use warden_fencing::SshFence;

/// How long sshd may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// An sshd on a free local port. Its directory holds `host_key`, `client_key` (authorized
/// for the user running the tests), `known_hosts` (the right entry), `empty_known_hosts`,
/// `sshd.log`, and `bin/`, which is the whole PATH of its sessions besides the system's.
pub struct Sshd {
    server: ServerProcess,
    pub port: u16,
    pub user: String,
}

impl Sshd {
    pub fn start() -> Sshd {
        require("/usr/sbin/sshd", "openssh-server openssh-client");
        require("/usr/bin/ssh", "openssh-server openssh-client");
        require("/usr/bin/ssh-keygen", "openssh-server openssh-client");
        let mut server = ServerProcess::new(tempfile::tempdir().unwrap(), "sshd", "sshd.log");
        let d = server.dir().to_path_buf();
        for key in ["host_key", "client_key"] {
            keygen(&d.join(key));
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        std::fs::create_dir(d.join("bin")).unwrap();
        // sshd refuses to start as root without its privilege separation directory,
        // which the openssh-server service normally creates.
        if nix::unistd::getuid().is_root() {
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        // The tiny window before sshd binds a free port is acceptable in a test.
        let port = free_port();
        // SetEnv overrides the PATH sshd gives sessions, so that `warden` resolves to the
        // binary under test (install_warden) and to nothing else.
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
             AuthorizedKeysFile {d}/authorized_keys\nPidFile none\nStrictModes no\n\
             UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\nPermitRootLogin prohibit-password\n\
             SetEnv PATH={d}/bin:/usr/bin:/bin\nLogLevel VERBOSE\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        let host_pub = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {host_pub}"),
        )
        .unwrap();
        std::fs::write(d.join("empty_known_hosts"), "").unwrap();
        let mut cmd = Command::new("/usr/sbin/sshd");
        cmd.args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .process_group(0);
        server.spawn(cmd, "apt-get install -y openssh-server openssh-client");
        if let Err(e) = server.wait_ready(START_TIMEOUT, Duration::from_millis(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        }) {
            e.fail("sshd did not accept connections");
        }
        let user = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .expect("this user has a passwd entry")
            .name;
        Sshd { server, port, user }
    }

    /// The listening sshd's pid: each connection is served by a child of it.
    pub fn pid(&self) -> u32 {
        self.server.pid().expect("sshd runs")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.server.dir().join(name)
    }

    pub fn log(&self) -> String {
        self.server.log()
    }

    /// Writes a file in sshd's directory and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes an executable shell script in sshd's directory and returns its path.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.write(name, &format!("#!/bin/sh\n{body}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// The host key's SHA256 fingerprint as `ssh-keygen -l` prints it: `SHA256:...`.
    pub fn host_fingerprint(&self) -> String {
        let out = Command::new("/usr/bin/ssh-keygen")
            .args(["-l", "-E", "sha256", "-f"])
            .arg(self.path("host_key.pub"))
            .output()
            .unwrap();
        assert!(out.status.success(), "ssh-keygen -l: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        text.split_whitespace()
            .find(|w| w.starts_with("SHA256:"))
            .unwrap_or_else(|| panic!("no fingerprint in {text:?}"))
            .to_string()
    }

    /// Makes `warden` on the sessions' PATH the warden binary under test.
    pub fn install_warden(&self) {
        let link = self.path("bin/warden");
        if !link.exists() {
            std::os::unix::fs::symlink(warden_binary(), link).unwrap();
        }
    }

    /// An ssh fence method for this server, authenticating with `client_key`.
    pub fn method(&self, known_hosts: &Path, command: Option<&str>, timeout: Duration) -> SshFence {
        SshFence {
            user: self.user.clone(),
            port: self.port,
            identity_file: self.path("client_key"),
            known_hosts: known_hosts.to_path_buf(),
            timeout,
            command: command.map(str::to_string),
            nodes: None,
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.server.kill();
        if std::thread::panicking() {
            eprintln!("--- sshd log ---\n{}", self.log());
        }
    }
}

/// Creates an ed25519 key pair without passphrase at `path` and `path.pub`.
pub fn keygen(path: &Path) {
    let out = Command::new("/usr/bin/ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "ssh-keygen: {out:?}");
}

/// The `warden` binary of this workspace: `$WARDEN_BIN` if set, otherwise built with
/// `cargo build -p warden --bin warden` (a no-op when it is up to date) once per test
/// binary.
pub fn warden_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("WARDEN_BIN") {
            return PathBuf::from(bin);
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new(cargo)
            .args([
                "build",
                "-p",
                "warden",
                "--bin",
                "warden",
                "--message-format=json-render-diagnostics",
            ])
            .current_dir(&workspace)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo to build the warden binary");
        assert!(
            out.status.success(),
            "cargo build -p warden --bin warden failed (see above)"
        );
        let bin = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "warden")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo reported the warden executable");
        assert!(bin.exists(), "{} does not exist", bin.display());
        bin
    })
    .clone()
}

/// A process listening on a local port, like the old active's service, leading its own
/// process group.
pub fn listener() -> (Group, u16) {
    require("/usr/bin/python3", "python3");
    let mut child = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import socket, time\n\
             s = socket.socket()\n\
             s.bind(('127.0.0.1', 0))\n\
             s.listen()\n\
             print(s.getsockname()[1], flush=True)\n\
             time.sleep(1000)\n",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("listener printed {line:?}"));
    let pid = child.id();
    (Group { child, pid }, port)
}

/// Waits until `pid` no longer runs (a zombie counts as gone).
pub fn wait_gone(what: &str, pid: u32) {
    wait_for(&format!("{what} (pid {pid}) to be gone"), || {
        (!warden_fencing::process::is_running(pid, None)).then_some(())
    });
}

/// How long a test allows an ssh attempt beyond its timeout: the chain's own grace.
pub const SSH_SLACK: Duration = Duration::from_secs(2);
