//! The fault campaign (issue 32, point 4) on the shipped PostgreSQL recipe
//! (`examples/postgresql`): three real PostgreSQL 15 servers (one initialized, two cloned
//! with `pg_basebackup`), each under its warden with the shipped `warden-postgresql` hooks,
//! one ZooKeeper, a client writing to and reading from every node all the time, and
//! seeded rounds of faults. What is checked, and how, is said in
//! `tests/common/campaign.rs`.
//!
//! The client's write is `INSERT INTO t VALUES (<value>) RETURNING` the server's
//! `clock_timestamp()`, over one kept `psql` session per node; a standby refuses it (a
//! read-only transaction). A server that the campaign killed, or that stayed down for
//! [`RESTART_AFTER`] (fenced by a warden), is started again as the shipped drop-in starts
//! it: as a standby. A server down for a shorter time is left alone: the hooks stop and
//! start it themselves (a switchover's demote, a follow's `pg_rewind`). A standby whose
//! `pg_rewind` failed for good (the hook says to clone it again) is cloned again with
//! `pg_basebackup`, as the recipe's README tells the operator.
//!
//! The hooks start postmasters with `pg_ctl`, which orphans them; this sandbox's pid 1
//! does not reap orphans, and a killed postmaster left a zombie would look alive to
//! `pg_ctl` and to the next postmaster's lock-file check. So the test process is a child
//! subreaper and reaps the postmasters it adopts (only processes named `postgres`: every
//! other child has an owner that waits for it).
//!
//! ```sh
//! cargo test --test campaign_postgresql -- --nocapture                       # 20 rounds
//! WARDEN_CAMPAIGN_SEED=42 cargo test --test campaign_postgresql -- --nocapture   # replay
//! scripts/campaign.sh 1000                                                    # the long run
//! ```

mod common;

use common::campaign::{self, Campaign, Conn, Connect, Recipe};
use common::pg_pair::{freeze_server, thaw_server, Trio};
use common::postgres::{sql_at, PgServer, PsqlSession};
use common::*;
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// A server down this long (fenced by a warden, or a hook's start that failed) is started
/// again, as systemd's `Restart=` would; a shorter stop is a hook's own (demote, rewind).
const RESTART_AFTER: Duration = Duration::from_secs(10);

struct PgConn(PsqlSession);

impl Conn for PgConn {
    fn write(&mut self, value: u64) -> Result<i64, (bool, String)> {
        let sql = format!(
            "INSERT INTO t VALUES ({value}) RETURNING (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
        );
        match self.0.run(&sql, Duration::from_secs(2)) {
            Ok(out) if out.iter().any(|l| l == "INSERT 0 1") => out
                .iter()
                .find_map(|l| l.parse::<i64>().ok())
                .ok_or((false, format!("no clock in {out:?}"))),
            Ok(out) => Err((false, format!("{out:?}"))),
            Err(e) => Err((!self.0.alive(), e)),
        }
    }

    fn read(&mut self, value: u64) -> Result<bool, (bool, String)> {
        match self.0.run(
            &format!("SELECT count(*) FROM t WHERE v = {value}"),
            Duration::from_secs(2),
        ) {
            Ok(out) => Ok(out.first().map(String::as_str) == Some("1")),
            Err(e) => Err((!self.0.alive(), e)),
        }
    }
}

struct PgRecipe {
    pg: Vec<PgServer>,
    nodes: Vec<Node>,
    cluster: Cluster,
    zk: ZkServer,
    /// Killed by the campaign: started again at the next look.
    killed: Vec<bool>,
    /// Since when each server has been seen down.
    down_since: RefCell<Vec<Option<Instant>>>,
    /// The processes of each frozen server.
    frozen: Vec<Vec<u32>>,
}

impl PgRecipe {
    fn running(&self, i: usize) -> bool {
        self.pg[i].pid().is_some_and(process_alive)
    }
}

impl Recipe for PgRecipe {
    fn name(&self) -> &'static str {
        "postgresql"
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    fn zk(&mut self) -> &mut ZkServer {
        &mut self.zk
    }

    fn port(&self, i: usize) -> u16 {
        self.pg[i].port()
    }

    fn server_pid(&self, i: usize) -> Option<u32> {
        self.pg[i].pid().filter(|&p| process_alive(p))
    }

    fn server_exited(&mut self, i: usize) -> bool {
        if self.running(i) {
            self.down_since.borrow_mut()[i] = None;
            return false;
        }
        let since = *self.down_since.borrow_mut()[i].get_or_insert_with(Instant::now);
        self.killed[i] || since.elapsed() >= RESTART_AFTER
    }

    fn kill_server(&mut self, i: usize) {
        self.pg[i].kill9();
        self.killed[i] = true;
    }

    fn restart_server(&mut self, i: usize) {
        self.killed[i] = false;
        self.down_since.borrow_mut()[i] = None;
        // The backends of a killed postmaster exit by themselves; the port must be free.
        poll_for(secs(30), ms(50), || {
            self.pg[i].try_sql("SELECT 1").is_err().then_some(())
        });
        if let Err(e) = self.pg[i].try_start_as_standby() {
            // A hook may have started it meanwhile: fine when it answers now.
            if !self.running(i) {
                eprintln!("campaign: n{}'s PostgreSQL did not start again: {e}", i + 1);
            }
        }
    }

    fn freeze_server(&mut self, i: usize) {
        if self.running(i) {
            self.frozen[i] = freeze_server(&self.pg[i]);
        }
    }

    fn thaw_server(&mut self, i: usize) {
        let pids = std::mem::take(&mut self.frozen[i]);
        thaw_server(&pids);
    }

    fn values(&self, i: usize) -> Result<Vec<u64>, String> {
        let out = sql_at(self.port(i), "SELECT v FROM t")?;
        Ok(out.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    fn follows(&self, i: usize, primary: usize) -> bool {
        self.pg[i].streams_from().as_deref() == Some(&format!("127.0.0.1 {}", self.port(primary)))
    }

    fn reclone_advice(&self) -> Option<&'static str> {
        // What the shipped follow hook says when pg_rewind failed.
        Some("clone it again with pg_basebackup")
    }

    fn reclone_when(&self, follow: &str) -> bool {
        // pg_rewind's own words for a history it cannot bring back, in the hook's last
        // failure as the node's warden logged it (stop 39's run:
        // "could not find common ancestor of the source and target cluster's timelines",
        // "could not find previous WAL record at ...").
        follow.contains("could not find common ancestor")
            || follow.contains("could not find previous WAL record")
            // pg_rewind's own crash recovery failed (stop 40's third run: "requested
            // timeline 309 does not contain minimum recovery point"): every retry does.
            || follow.contains("postgres --single")
    }

    fn is_primary(&self, i: usize) -> bool {
        self.pg[i].in_recovery() == Some(false)
    }

    fn reclone(&mut self, i: usize, from: usize) -> Result<(), String> {
        self.killed[i] = false;
        self.down_since.borrow_mut()[i] = None;
        self.frozen[i].clear();
        // The backends of a killed postmaster exit by themselves; the port must be free.
        poll_for(secs(30), ms(50), || {
            self.pg[i].try_sql("SELECT 1").is_err().then_some(())
        })
        .ok_or("the killed server still answers")?;
        let port = self.port(from);
        self.pg[i].clone_again_from(port)
    }

    fn connect(&self, i: usize) -> Connect {
        let port = self.port(i);
        Box::new(move || {
            let mut s = PsqlSession::connect(port)?;
            match poll_for(secs(3), ms(5), || s.ready()) {
                Some(true) => Some(Box::new(PgConn(s)) as Box<dyn Conn>),
                _ => None,
            }
        })
    }

    fn first_active(&mut self) {
        wait_until(secs(30), "p1 is a primary", || {
            self.pg[0].in_recovery() == Some(false)
        });
        self.pg[0].sql("CREATE TABLE t (v bigint PRIMARY KEY)");
    }
}

/// Makes this process the child subreaper of what it starts, and reaps the postmasters it
/// adopts (see the module doc).
fn reap_orphaned_postmasters() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
    let me = std::process::id();
    std::thread::spawn(move || loop {
        for pid in common::all_pids() {
            let Some((comm, state, ppid)) = common::postgres::proc_stat(pid) else {
                continue;
            };
            if comm == "postgres" && state == 'Z' && ppid == me {
                // SAFETY: waitpid on one pid, no memory handed over.
                unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
            }
        }
        std::thread::sleep(ms(100));
    });
}

/// Seeded rounds of faults on the PostgreSQL recipe: never two writable copies, nothing
/// lost in a planned switchover, nothing lost that the new active held, epochs only grow;
/// every round comes back to one active that takes writes.
#[test]
fn postgresql_recipe_survives_a_seeded_fault_campaign() {
    let (seed, rounds) = campaign::settings();
    eprintln!(
        "campaign postgresql: seed {seed}, {rounds} rounds (WARDEN_CAMPAIGN_SEED={seed} replays)"
    );
    reap_orphaned_postmasters();
    let Trio {
        pg,
        nodes,
        cluster,
        zk,
    } = Trio::new();
    let recipe = PgRecipe {
        pg,
        nodes,
        cluster,
        zk,
        killed: vec![false; 3],
        down_since: RefCell::new(vec![None; 3]),
        frozen: vec![Vec::new(); 3],
    };
    let c = Campaign::start(recipe, seed);
    let stats = c.run(rounds);
    assert_eq!(stats.lost_planned, 0);
}
