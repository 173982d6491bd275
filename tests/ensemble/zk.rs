//! A three-server ZooKeeper ensemble on loopback, each server on its own address
//! (`127.0.0.1`, `127.0.0.2`, `127.0.0.3`) with its own client, quorum and election ports,
//! and each running under its own uid so that [`super::net`] can tell their packets apart
//! (see there for why addresses alone cannot).
//!
//! Ports are picked free at start; all nine are distinct, so a firewall rule naming one
//! of them can only ever touch this ensemble. A server is killed and restarted by pid,
//! keeping its data dir, as an operator's `kill -9` and `systemctl start` would.

use crate::common::{
    check_zookeeper_installed, dump_logs, register_log, secs, zookeeper_java, ZkClient, ZK_INSTALL,
};
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// A JVM on a loaded 2-core machine (other tests' JVMs too) can take long to serve.
pub const ZK_START_TIMEOUT: Duration = Duration::from_secs(60);

/// The ZooKeeper timing of the ensemble, in ticks of [`TICK_MS`].
///
/// `syncLimit` is deliberately longer than the wardens' session timeout (4s): a follower
/// cut off from its leader goes on serving its clients (answering pings and reads, from
/// its own session tracker) until `syncLimit` passes without a word from the leader,
/// while the leader expires the follower's sessions after their timeout. That window,
/// where the active's server still serves but the active's session is already dead in
/// the quorum, is the one only a lease renewed by writes closes. With a short
/// `syncLimit` the follower would drop its clients first, which is the easy case.
pub const TICK_MS: u64 = 100;
pub const INIT_LIMIT: u64 = 50;
pub const SYNC_LIMIT: u64 = 60;

/// One server of the ensemble.
pub struct Peer {
    /// `myid`, 1..=3.
    pub id: usize,
    /// `127.0.0.<id>`.
    pub addr: Ipv4Addr,
    pub client_port: u16,
    pub quorum_port: u16,
    pub election_port: u16,
    /// The uid the server's JVM runs as (no passwd entry needed).
    pub uid: u32,
    dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
}

impl Peer {
    /// `127.0.0.N:PORT`: a connect string naming this server alone.
    pub fn connect_string(&self) -> String {
        format!("{}:{}", self.addr, self.client_port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// A four-letter-word command (`srvr`, `mntr`, `ruok`), bounded by short timeouts.
    pub fn four_letter(&self, cmd: &str) -> std::io::Result<String> {
        let addr = SocketAddr::from((self.addr, self.client_port));
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_millis(1000)))?;
        stream.set_write_timeout(Some(Duration::from_millis(1000)))?;
        stream.write_all(cmd.as_bytes())?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    }

    /// `leader`, `follower` (or `standalone`) from `srvr`; `None` while the server does not
    /// serve (down, unreachable, or looking for a leader).
    pub fn mode(&self) -> Option<String> {
        if !self.is_running() {
            return None;
        }
        let answer = self.four_letter("srvr").ok()?;
        answer
            .lines()
            .find_map(|l| l.strip_prefix("Mode:"))
            .map(|m| m.trim().to_string())
    }

    fn write_config(&self, all: &[Peer], extra: &str) {
        let data = self.dir.join("data");
        fs::create_dir_all(&data).expect("create the ZooKeeper data dir");
        fs::write(data.join("myid"), format!("{}\n", self.id)).expect("write myid");
        // forceSync=no: see tests/common's ZooKeeper (a neighbour's disk writes stalled
        // every write past a 1 s lease).
        let mut cfg = format!(
            "tickTime={TICK_MS}\n\
             forceSync=no\n\
             initLimit={INIT_LIMIT}\n\
             syncLimit={SYNC_LIMIT}\n\
             minSessionTimeout=200\n\
             maxSessionTimeout=60000\n\
             dataDir={}\n\
             clientPort={}\n\
             clientPortAddress={}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr,mntr,stat\n",
            data.display(),
            self.client_port,
            self.addr,
        );
        for p in all {
            cfg.push_str(&format!(
                "server.{}={}:{}:{}\n",
                p.id, p.addr, p.quorum_port, p.election_port
            ));
        }
        cfg.push_str(extra);
        fs::write(self.dir.join("zoo.cfg"), cfg).expect("write zoo.cfg");
        chown_tree(&self.dir, self.uid);
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "server {} already runs", self.id);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("open the ZooKeeper log");
        let mut cmd = zookeeper_java(log);
        cmd.args([
            // No /tmp/hsperfdata_<user>: the uid has no name and no home.
            "-XX:-UsePerfData",
            // A server back from a partition or a restart looks for the quorum again
            // within a second, not after leader election's back-off of up to 60s.
            "-Dzookeeper.fastleader.maxNotificationInterval=1000",
            // Election connections to a peer behind a dropping firewall give up after 1s
            // (default 5s, during which that sender thread waits).
            "-Dzookeeper.cnxTimeout=1000",
        ])
        .arg(format!("-Djava.io.tmpdir={}", self.dir.display()))
        .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
        .arg(self.dir.join("zoo.cfg"))
        .current_dir(&self.dir);
        let uid = self.uid;
        // SAFETY: only async-signal-safe calls between fork and exec. The uid change comes
        // first: a change of credentials clears the parent-death signal, so it is set
        // after, and the server dies with the test's thread even if the test is killed.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self.child = Some(cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot run java for ZooKeeper ({e}); install it with: {ZK_INSTALL}")
        }));
    }

    fn kill_child(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }
}

/// Three servers, one quorum.
pub struct Ensemble {
    dir: TempDir,
    pub peers: Vec<Peer>,
    /// `zoo.cfg` lines after the defaults (a later line overrides an earlier key).
    extra_config: String,
}

impl Ensemble {
    /// Starts the three servers and waits until they serve with one leader.
    pub fn start() -> Ensemble {
        Ensemble::start_with_config("")
    }

    /// Like [`start`](Self::start), with `extra` appended to every server's `zoo.cfg`: a
    /// key given there overrides the default (`maxSessionTimeout=2000`, say).
    pub fn start_with_config(extra: &str) -> Ensemble {
        check_zookeeper_installed();
        let dir = tempfile::Builder::new()
            .prefix("warden-ensemble-")
            .tempdir()
            .expect("create a temp dir");
        // The servers' uids must reach their own dirs inside.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .expect("chmod the ensemble dir");
        let mut ens = Ensemble {
            dir,
            peers: Vec::new(),
            extra_config: extra.to_string(),
        };
        // A port probed free can be taken by another test before the server binds it.
        for attempt in 1..=5 {
            ens.pick_ports();
            for i in 0..3 {
                ens.peers[i].write_config(&ens.peers, &ens.extra_config);
            }
            for p in &mut ens.peers {
                p.spawn();
            }
            match ens.wait_quorum(ZK_START_TIMEOUT) {
                Ok(()) => {
                    eprintln!(
                        "ensemble: {} serving, leader {:?}",
                        ens.describe(),
                        ens.leader()
                    );
                    return ens;
                }
                Err(e)
                    if attempt < 5
                        && ens
                            .peers
                            .iter()
                            .any(|p| p.log().contains("Address already in use")) =>
                {
                    eprintln!("ensemble: a port was taken ({e}), retrying with new ports");
                    for p in &mut ens.peers {
                        p.kill_child();
                    }
                }
                Err(e) => {
                    dump_logs();
                    panic!("the ZooKeeper ensemble did not start: {e}");
                }
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    fn pick_ports(&mut self) {
        // Hold every probe listener until all nine are chosen, so they are distinct.
        let mut held = Vec::new();
        let mut port_on = |addr: Ipv4Addr| -> u16 {
            let l = TcpListener::bind((addr, 0)).expect("bind a loopback port");
            let port = l.local_addr().expect("local addr").port();
            held.push(l);
            port
        };
        let base_uid = uid_base();
        let mut peers = Vec::new();
        for id in 1..=3usize {
            let addr = Ipv4Addr::new(127, 0, 0, id as u8);
            let (client_port, quorum_port, election_port) =
                (port_on(addr), port_on(addr), port_on(addr));
            let pdir = self.dir.path().join(format!("zk{id}"));
            fs::create_dir_all(&pdir).expect("create a server dir");
            let log_path = pdir.join("zookeeper.log");
            if self.peers.is_empty() {
                register_log(&format!("zookeeper {id} ({addr})"), &log_path);
            }
            peers.push(Peer {
                id,
                addr,
                client_port,
                quorum_port,
                election_port,
                uid: base_uid + id as u32,
                dir: pdir,
                log_path,
                child: None,
            });
        }
        drop(held);
        self.peers = peers;
    }

    /// `127.0.0.1:P1,127.0.0.2:P2,127.0.0.3:P3`.
    pub fn connect_all(&self) -> String {
        self.peers
            .iter()
            .map(|p| p.connect_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Server `id` (1-based).
    pub fn peer(&self, id: usize) -> &Peer {
        &self.peers[id - 1]
    }

    /// The one server that says `Mode: leader`, if exactly one does.
    pub fn leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = self
            .peers
            .iter()
            .filter(|p| p.mode().as_deref() == Some("leader"))
            .map(|p| p.id)
            .collect();
        (leaders.len() == 1).then(|| leaders[0])
    }

    /// Every running server serves (leader or follower), exactly one leads, and a client
    /// session can be opened on each (its first write, createSession, went through the
    /// quorum).
    pub fn wait_quorum(&mut self, timeout: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            for p in &mut self.peers {
                if let Some(status) = p.exited() {
                    return Err(format!("server {} exited with {status}", p.id));
                }
            }
            let running: Vec<&Peer> = self.peers.iter().filter(|p| p.is_running()).collect();
            let modes: Vec<Option<String>> = running.iter().map(|p| p.mode()).collect();
            let leaders = modes
                .iter()
                .filter(|m| m.as_deref() == Some("leader"))
                .count();
            if modes.iter().all(|m| m.is_some())
                && leaders == 1
                && running
                    .iter()
                    .all(|p| ZkClient::try_connect(&p.connect_string(), secs(3)).is_ok())
            {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(format!(
                    "not serving after {timeout:?}: modes {:?}",
                    running
                        .iter()
                        .zip(&modes)
                        .map(|(p, m)| format!("{}={}", p.id, m.as_deref().unwrap_or("-")))
                        .collect::<Vec<_>>()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// [`wait_quorum`](Self::wait_quorum), panicking with every log on timeout.
    pub fn wait_serving(&mut self, timeout: Duration) {
        if let Err(e) = self.wait_quorum(timeout) {
            dump_logs();
            panic!("the ensemble does not serve: {e}");
        }
    }

    /// `kill -9` of server `id`; its data dir stays.
    pub fn kill(&mut self, id: usize) {
        self.peers[id - 1].kill_child();
    }

    /// Starts server `id` again (after [`kill`](Self::kill)); does not wait.
    pub fn restart(&mut self, id: usize) {
        let p = &mut self.peers[id - 1];
        p.kill_child();
        p.spawn();
    }

    /// `id=mode` of every server, for messages.
    pub fn describe(&self) -> String {
        self.peers
            .iter()
            .map(|p| {
                format!(
                    "{}@{}:{}={}",
                    p.id,
                    p.addr,
                    p.client_port,
                    if p.is_running() {
                        p.mode().unwrap_or_else(|| "not-serving".into())
                    } else {
                        "down".into()
                    }
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("ensemble at the failure: {}", self.describe());
            dump_logs();
        }
        for p in &mut self.peers {
            p.kill_child();
        }
        if std::thread::panicking() && std::env::var_os("WARDEN_TEST_KEEP").is_some() {
            self.dir.disable_cleanup(true);
            eprintln!("WARDEN_TEST_KEEP: kept {}", self.dir.path().display());
        }
    }
}

/// Uids of no account, distinct per test process and ensemble: high enough to collide
/// with no real user (a collision would still be harmless: every rule also names this
/// ensemble's own ports).
fn uid_base() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let seq = SEQ.fetch_add(1, Ordering::SeqCst) % 16;
    2_000_000_000 + (std::process::id() % 100_000) * 100 + seq * 4
}

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
    if path.is_dir() {
        for entry in fs::read_dir(path).expect("read a server dir") {
            chown_tree(&entry.expect("a dir entry").path(), uid);
        }
    }
}
