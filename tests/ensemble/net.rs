//! Network partitions on loopback with nftables, one table per test, removed in `Drop`.
//!
//! # What works on this machine, and why
//!
//! **nftables on `lo`, matching the sending socket's uid, with a conntrack mark** works
//! and is what the tests use. The obvious rule, "drop packets between 127.0.0.2 and
//! 127.0.0.3", does not: ZooKeeper does not bind its outgoing sockets, so every
//! connection a server opens (learner to leader on the quorum port, election
//! connections) leaves from the loopback route's preferred source, `127.0.0.1`, whatever
//! address the server listens on (`ss -tnp` shows `127.0.0.1:47796 -> 127.0.0.3:22883`
//! for server 2 following server 3). Source addresses cannot tell server 1's connection
//! to the leader from server 2's. So each server runs under its own uid
//! ([`super::zk`]), and in the `output` hook (every loopback packet passes it once) a
//! rule matches `meta skuid <uid of A> ip daddr <B> tcp dport {<B's quorum and election
//! ports>}`: the packets A sends on connections it opened to B. Those packets also set a
//! conntrack mark, and a second rule drops every packet carrying that mark, so B's
//! replies on the same connections are dropped too; the same pair of rules the other
//! way covers the connections B opened to A. Cutting a warden off from its server is
//! simpler: the server's client port is unique, so `ip daddr <S> tcp dport <client
//! port>` and its reverse suffice.
//!
//! **iptables** (Debian's is the nft-backed one) could say the same with `-m owner
//! --uid-owner` and `CONNMARK`; nftables is used directly because a test's rules live
//! in a table of their own that is added and deleted whole and atomically, so nothing
//! is left half-removed and parallel tests never touch each other's rules.
//!
//! **A network namespace with a veth pair** also works here (`ip netns add` and `ip link
//! add ... type veth` succeed: the kernel has `CONFIG_NET_NS` and `CONFIG_VETH`), and
//! would give each server a real source address. But the servers would leave loopback:
//! their addresses would sit on veth devices, the wardens in the root namespace would
//! reach them through routes the test must add (and `route_localnet` to keep 127.x
//! addresses), every restart must re-enter the namespace, and a test killed outright
//! would leave namespaces and links behind. It was not needed once the uid match worked.
//!
//! Every rule names this test's own ports (and uids), and the table's name carries the
//! test's pid: a table left by a test process killed outright is deleted by the next
//! preflight that finds its pid dead.

use crate::common::process_alive;
use crate::ensemble::nft::feed_nft;
use crate::ensemble::zk::Peer;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

const NFT_INSTALL: &str = "apt-get install -y nftables";
const TABLE_PREFIX: &str = "warden_ens_";

static SEQ: AtomicU32 = AtomicU32::new(0);

/// What is cut right now, for messages and for choosing which server to ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Clients cut off from server `id` (its client port).
    Client(usize),
    /// Servers `a` and `b` cut off from each other (quorum and election traffic).
    Peers(usize, usize),
    /// The processes of `uid` cut off from one server port (a warden run under its own uid).
    Owner { uid: u32, port: u16 },
}

/// One nftables table of this test: rules are added by the cut methods and all removed
/// by [`heal`](Self::heal) and in `Drop`.
pub struct Firewall {
    table: String,
    mark: u32,
    cuts: Vec<Cut>,
}

impl Firewall {
    /// Checks that nft works (installing Debian's `nftables` if it is missing) and
    /// creates this test's empty table.
    pub fn new() -> Firewall {
        preflight();
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let table = format!("{TABLE_PREFIX}{}_{seq}", std::process::id());
        // Distinct per table: a mark set by this test's rules is dropped by its own only.
        let mark = 0x5700_0000 | ((std::process::id() & 0xfff) << 8) | (seq & 0xff);
        let fw = Firewall {
            table,
            mark,
            cuts: Vec::new(),
        };
        nft_script(&format!(
            "table inet {t} {{\n\
               chain out {{\n\
                 type filter hook output priority filter; policy accept;\n\
               }}\n\
             }}\n",
            t = fw.table
        ))
        .unwrap_or_else(|e| panic!("cannot create the nftables table {}: {e}", fw.table));
        fw
    }

    pub fn cuts(&self) -> &[Cut] {
        &self.cuts
    }

    /// Whether server `id` is cut off from its clients or from a peer.
    pub fn touches(&self, id: usize) -> bool {
        self.cuts.iter().any(|c| match c {
            Cut::Client(s) => *s == id,
            Cut::Peers(a, b) => *a == id || *b == id,
            Cut::Owner { .. } => false,
        })
    }

    /// Drops all traffic between clients and server `p` (its client port, both ways):
    /// the warden that talks to `p` alone is cut off from ZooKeeper.
    pub fn cut_client(&mut self, p: &Peer) {
        self.add(&[
            format!("ip daddr {} tcp dport {} drop", p.addr, p.client_port),
            format!("ip saddr {} tcp sport {} drop", p.addr, p.client_port),
        ]);
        self.cuts.push(Cut::Client(p.id));
    }

    /// Drops quorum and election traffic between servers `a` and `b`, both ways, on
    /// connections either opened, existing ones included. Each keeps serving its clients.
    pub fn cut_peers(&mut self, a: &Peer, b: &Peer) {
        let m = self.mark;
        let opened_by = |from: &Peer, to: &Peer| {
            format!(
                "meta skuid {} ip daddr {} tcp dport {{ {}, {} }} ct mark set {m:#x} drop",
                from.uid, to.addr, to.quorum_port, to.election_port
            )
        };
        self.add(&[
            opened_by(a, b),
            opened_by(b, a),
            format!("ct mark {m:#x} drop"),
        ]);
        self.cuts.push(Cut::Peers(a.id, b.id));
    }

    /// Drops all traffic between the sockets of `uid` and `addr:port`, both ways, on
    /// connections open now or later: one process (run under its own uid) is cut off
    /// from a server that everything else still reaches.
    pub fn cut_owner(&mut self, uid: u32, addr: &str, port: u16) {
        let m = self.mark;
        self.add(&[
            format!("meta skuid {uid} ip daddr {addr} tcp dport {port} ct mark set {m:#x} drop"),
            format!("ct mark {m:#x} drop"),
        ]);
        self.cuts.push(Cut::Owner { uid, port });
    }

    /// Removes every rule of this test (connections marked stay marked, but no rule drops
    /// them any more).
    pub fn heal(&mut self) {
        if self.cuts.is_empty() {
            return;
        }
        nft(&["flush", "chain", "inet", &self.table, "out"])
            .unwrap_or_else(|e| panic!("cannot flush the rules of {}: {e}", self.table));
        self.cuts.clear();
    }

    /// The rules in force, as nft lists them (for reports).
    pub fn listing(&self) -> String {
        nft(&["list", "table", "inet", &self.table]).unwrap_or_else(|e| e)
    }

    fn add(&mut self, rules: &[String]) {
        let mut script = String::new();
        for r in rules {
            script.push_str(&format!("add rule inet {} out {r}\n", self.table));
        }
        nft_script(&script).unwrap_or_else(|e| panic!("cannot add rules:\n{script}{e}"));
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        if let Err(e) = nft(&["delete", "table", "inet", &self.table]) {
            eprintln!("could not delete the nftables table {}: {e}", self.table);
        }
    }
}

fn nft(args: &[&str]) -> Result<String, String> {
    let out = Command::new("nft")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run nft: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "nft {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Applies a script with `nft -f -`: all of it or nothing.
fn nft_script(script: &str) -> Result<(), String> {
    let mut cmd = Command::new("nft");
    cmd.args(["-f", "-"]);
    feed_nft(cmd, script)
}

fn have_nft() -> bool {
    Command::new("nft")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Root (for uids and nftables), nft installed (installing Debian's `nftables` if not),
/// and the kernel accepting a table; deletes tables left by dead test processes.
pub fn preflight() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "these tests need root: they run each ZooKeeper server under its own uid and add \
             nftables rules on lo (CI and the developers' machines run as root)"
        );
    }
    if !have_nft() {
        eprintln!("nft is missing: installing Debian's nftables");
        let install = || {
            Command::new("apt-get")
                .args([
                    "-o",
                    "DPkg::Lock::Timeout=120",
                    "install",
                    "-y",
                    "-q",
                    "nftables",
                ])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdin(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !install() {
            let _ = Command::new("apt-get")
                .args(["-o", "DPkg::Lock::Timeout=120", "update", "-q"])
                .stdin(Stdio::null())
                .status();
            install();
        }
        if !have_nft() {
            panic!("nft is missing and could not be installed; install it with: {NFT_INSTALL}");
        }
    }
    // Tables of test processes that were killed before their Drop ran.
    if let Ok(list) = nft(&["list", "tables"]) {
        for line in list.lines() {
            let Some(name) = line.trim().strip_prefix("table inet ") else {
                continue;
            };
            let Some(rest) = name.strip_prefix(TABLE_PREFIX) else {
                continue;
            };
            let pid: Option<u32> = rest.split('_').next().and_then(|p| p.parse().ok());
            if pid.is_some_and(|p| !process_alive(p)) {
                eprintln!("deleting the stale nftables table {name}");
                let _ = nft(&["delete", "table", "inet", name]);
            }
        }
    }
}
