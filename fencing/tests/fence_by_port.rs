//! The example script `scripts/fence-by-port` against a real sshd started here, on
//! 127.0.0.1, with its own host key, client key and known_hosts.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tempfile::TempDir;
use warden_fencing::{FenceChain, FenceMethod, Outcome, ScriptFence, ScriptProtocol, Target};

/// An sshd on a free local port, logging to a file that is printed if the test fails.
struct Sshd {
    child: Child,
    dir: TempDir,
    port: u16,
    user: String,
}

impl Sshd {
    fn start() -> Sshd {
        require("/usr/sbin/sshd", "openssh-server");
        require("/usr/bin/ssh", "openssh-client");
        require("/usr/bin/ssh-keygen", "openssh-client");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for key in ["host_key", "client_key"] {
            let out = Command::new("/usr/bin/ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(key))
                .output()
                .unwrap();
            assert!(out.status.success(), "ssh-keygen: {out:?}");
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        // sshd refuses to start as root without its privilege separation directory,
        // which the openssh-server service normally creates.
        if nix::unistd::getuid().is_root() {
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let port = {
            // Ask the kernel for a free port; the tiny window before sshd binds it is
            // acceptable in a test.
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
             AuthorizedKeysFile {d}/authorized_keys\nPidFile none\nStrictModes no\n\
             UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PermitRootLogin prohibit-password\nLogLevel VERBOSE\n",
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
        let log = std::fs::File::create(d.join("sshd.log")).unwrap();
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        let user = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .expect("this user has a passwd entry")
            .name;
        let mut sshd = Sshd {
            child,
            dir,
            port,
            user,
        };
        wait_for("sshd to accept connections", || {
            if let Ok(Some(status)) = sshd.child.try_wait() {
                panic!("sshd exited with {status}:\n{}", sshd.log());
            }
            TcpStream::connect(("127.0.0.1", port)).ok()
        });
        sshd
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("sshd.log")).unwrap_or_default()
    }

    fn fence_method(&self, known_hosts: &Path) -> FenceMethod {
        FenceMethod::Script(ScriptFence {
            command: vec![
                format!("{}/scripts/fence-by-port", env!("CARGO_MANIFEST_DIR")),
                self.user.clone(),
                self.path("client_key").display().to_string(),
                known_hosts.display().to_string(),
                self.port.to_string(),
            ],
            protocol: ScriptProtocol::Env,
            options: BTreeMap::new(),
            timeout: Duration::from_secs(20),
            nodes: None,
        })
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- sshd log ---\n{}", self.log());
        }
    }
}

/// A process listening on a local port, like the old active's service.
fn listener() -> (Group, u16) {
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.args([
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
    .process_group(0);
    require("/usr/bin/python3", "python3");
    let mut child = cmd.spawn().unwrap();
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

fn target(port: u16) -> Target {
    Target {
        host: Some("127.0.0.1".into()),
        port: Some(port),
        ..local_target()
    }
}

#[tokio::test]
async fn fence_by_port_kills_the_listener_over_ssh_and_verifies() {
    require("/usr/bin/fuser", "psmisc");
    let sshd = Sshd::start();
    let (mut service, port) = listener();

    let chain = FenceChain::new(vec![sshd.fence_method(&sshd.path("known_hosts"))], ctx());
    let report = chain.fence(&target(port)).await;

    assert!(report.is_fenced(), "{}", report.summary());
    assert_eq!(service.reap().signal(), Some(libc::SIGKILL));
    assert!(warden_fencing::process::listeners_on_port(port).is_empty());
}

#[tokio::test]
async fn fence_by_port_fails_on_an_unknown_host_key() {
    let sshd = Sshd::start();
    let (mut service, port) = listener();

    let chain = FenceChain::new(
        vec![sshd.fence_method(&sshd.path("empty_known_hosts"))],
        ctx(),
    );
    let report = chain.fence(&target(port)).await;

    match &report.attempts[0].outcome {
        Outcome::Failed(r) => assert!(r.contains("Host key verification failed"), "{r}"),
        other => panic!("expected failed, got {other:?}"),
    }
    assert!(
        service.alive(),
        "the service was killed without a trusted host key"
    );
}
