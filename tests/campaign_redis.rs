//! The fault campaign (issue 32, point 4) on the shipped Redis recipe (`examples/redis`):
//! three real redis-server processes, each under its warden with the shipped
//! `warden-redis` hooks, one ZooKeeper, a client writing to and reading from every node all
//! the time, and seeded rounds of faults. What is checked, and how, is said in
//! `tests/common/campaign.rs`.
//!
//! The client's write is one script: the server's `TIME`, then `RPUSH log <value>`; a
//! replica answers `READONLY`, a demoted primary `NOREPLICAS`, a paused one waits. Each
//! server has a `redis.conf` of its own that the hooks' `CONFIG REWRITE` keeps, and one
//! killed (or fenced) comes back as `examples/redis`'s systemd drop-in starts it: refusing
//! writes, replicating the primary it last followed.
//!
//! ```sh
//! cargo test --test campaign_redis -- --nocapture                      # 20 rounds
//! WARDEN_CAMPAIGN_SEED=42 cargo test --test campaign_redis -- --nocapture   # replay
//! scripts/campaign.sh 1000                                              # the long run
//! ```

mod common;

use common::campaign::{self, Campaign, Conn, Connect, Recipe};
use common::redis::RedisServer;
use common::redis_setup::Setup;
use common::*;
use std::time::Duration;

/// The client's write: the server's clock, then the value appended to the log.
const WRITE: &str = "local t = redis.call('TIME') \
     local n = redis.call('RPUSH', KEYS[1], ARGV[1]) \
     return {tonumber(t[1]) * 1000000 + tonumber(t[2]), n}";

struct RedisConn(::redis::Connection);

fn lost(e: &::redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}

impl Conn for RedisConn {
    fn write(&mut self, value: u64) -> Result<i64, (bool, String)> {
        ::redis::cmd("EVAL")
            .arg(WRITE)
            .arg(1)
            .arg("log")
            .arg(value)
            .query::<(i64, i64)>(&mut self.0)
            .map(|(us, _)| us)
            .map_err(|e| (lost(&e), e.to_string()))
    }

    fn read(&mut self, value: u64) -> Result<bool, (bool, String)> {
        // The writer of this node is the only one that writes here: the last element is
        // the value just acknowledged (unless the server became a replica in between).
        ::redis::cmd("LINDEX")
            .arg("log")
            .arg(-1)
            .query::<Option<u64>>(&mut self.0)
            .map(|v| v == Some(value))
            .map_err(|e| (lost(&e), e.to_string()))
    }
}

struct RedisRecipe {
    s: Setup,
    password: String,
}

impl Recipe for RedisRecipe {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn nodes(&self) -> &[Node] {
        &self.s.nodes
    }

    fn cluster(&self) -> &Cluster {
        &self.s.cluster
    }

    fn zk(&mut self) -> &mut ZkServer {
        &mut self.s.zk
    }

    fn port(&self, i: usize) -> u16 {
        self.s.redis[i].port()
    }

    fn server_pid(&self, i: usize) -> Option<u32> {
        self.s.redis[i].pid()
    }

    fn server_exited(&mut self, i: usize) -> bool {
        self.s.redis[i].exited()
    }

    fn kill_server(&mut self, i: usize) {
        self.s.redis[i].kill();
    }

    fn restart_server(&mut self, i: usize) {
        self.s.redis[i].kill();
        self.s.redis[i].start_as_the_drop_in_does();
    }

    fn freeze_server(&mut self, i: usize) {
        if !self.s.redis[i].exited() {
            self.s.redis[i].freeze();
        }
    }

    fn thaw_server(&mut self, i: usize) {
        if let Some(pid) = self.s.redis[i].pid() {
            thaw_pid(pid);
        }
    }

    fn values(&self, i: usize) -> Result<Vec<u64>, String> {
        let mut c = redis_setup_connect(self.port(i), &self.password)
            .ok_or_else(|| format!("n{}'s Redis does not answer", i + 1))?;
        ::redis::cmd("LRANGE")
            .arg("log")
            .arg(0)
            .arg(-1)
            .query::<Vec<u64>>(&mut c)
            .map_err(|e| e.to_string())
    }

    fn follows(&self, i: usize, primary: usize) -> bool {
        common::redis_setup::linked_to(&self.s.redis[i], self.port(primary))
    }

    fn connect(&self, i: usize) -> Connect {
        let (port, password) = (self.port(i), self.password.clone());
        Box::new(move || {
            common::redis_setup::connect(port, &password)
                .map(|c| Box::new(RedisConn(c)) as Box<dyn Conn>)
        })
    }
}

/// A connection with room for a long `LRANGE`.
fn redis_setup_connect(port: u16, password: &str) -> Option<::redis::Connection> {
    let c = common::redis_setup::connect(port, password)?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    Some(c)
}

/// Seeded rounds of faults on the Redis recipe: never two writable copies, nothing lost in
/// a planned switchover, nothing lost that the new active held, epochs only grow; every
/// round comes back to one active that takes writes.
#[test]
fn redis_recipe_survives_a_seeded_fault_campaign() {
    let (seed, rounds) = campaign::settings();
    eprintln!("campaign redis: seed {seed}, {rounds} rounds (WARDEN_CAMPAIGN_SEED={seed} replays)");
    let password = format!("pw{:016x}", common::mariadb::rand_u64());
    let redis: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_replicable_with_conf(&password))
        .collect();
    // As the systemd drop-in starts them: every server refuses writes until warden
    // promotes it (or it follows the primary).
    for r in &redis {
        r.cli(&["CONFIG", "SET", "min-replicas-max-lag", "10"]);
        r.cli(&["CONFIG", "SET", "min-replicas-to-write", "1000000"]);
    }
    let s = Setup::with(redis);
    let c = Campaign::start(RedisRecipe { s, password }, seed);
    let stats = c.run(rounds);
    assert_eq!(stats.lost_planned, 0);
}

/// The checker sees two writable copies when there are some: two Redis servers that both
/// take writes (no warden, both primaries), written to by the campaign's client, give
/// windows; one of them refusing writes (as a demoted primary does) gives none.
#[test]
fn the_checker_sees_two_writable_copies_made_by_hand() {
    let password = format!("pw{:016x}", common::mariadb::rand_u64());
    let redis: Vec<RedisServer> = (0..2)
        .map(|_| RedisServer::start_replicable(&password))
        .collect();
    let connects = |redis: &[RedisServer]| -> Vec<Connect> {
        redis
            .iter()
            .map(|r| {
                let (port, password) = (r.port(), password.clone());
                Box::new(move || {
                    common::redis_setup::connect(port, &password)
                        .map(|c| Box::new(RedisConn(c)) as Box<dyn Conn>)
                }) as Connect
            })
            .collect()
    };
    let mut client = campaign::Client::start(connects(&redis));
    wait_until(secs(30), "both servers took 50 writes", || {
        let acks = client.acks();
        (0..2).all(|i| acks.iter().filter(|a| a.node == i).count() >= 50)
    });
    client.stop();
    let windows = campaign::two_writable_windows(&client.acks(), 2);
    assert!(
        !windows.is_empty(),
        "two primaries took writes side by side and the checker saw nothing"
    );
    eprintln!("{} windows, e.g. {}", windows.len(), windows[0]);

    redis[1].cli(&["CONFIG", "SET", "min-replicas-max-lag", "10"]);
    redis[1].cli(&["CONFIG", "SET", "min-replicas-to-write", "1000000"]);
    let mut client = campaign::Client::start(connects(&redis));
    wait_until(secs(30), "the primary took 100 writes", || {
        client.acks().len() >= 100
    });
    client.stop();
    let acks = client.acks();
    assert!(
        acks.iter().all(|a| a.node == 0),
        "the refusing server took a write"
    );
    assert_eq!(
        campaign::two_writable_windows(&acks, 2),
        Vec::<String>::new()
    );
}

/// The epoch check fires: a promotion below an earlier one, or at the same epoch on
/// another node; the same epoch again on the same node (a called-off switchover) passes.
#[test]
fn the_checker_sees_an_epoch_that_went_back() {
    let p = |at: &str, node: &str, epoch: u64| {
        (
            at.to_string(),
            node.to_string(),
            epoch,
            format!("{at} {node} promote: is the primary (epoch {epoch})"),
        )
    };
    let fine = [p("t1", "n1", 5), p("t2", "n1", 5), p("t3", "n2", 9)];
    assert!(campaign::epochs_that_went_back(&fine).is_empty());
    let back = [p("t1", "n1", 5), p("t2", "n2", 4)];
    assert_eq!(campaign::epochs_that_went_back(&back).len(), 1);
    let twice = [p("t1", "n1", 5), p("t2", "n2", 5)];
    assert_eq!(campaign::epochs_that_went_back(&twice).len(), 1);
}
