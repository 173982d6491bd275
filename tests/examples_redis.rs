//! `examples/redis` (issue 15): two real redis-server processes, one per node, under warden
//! in hooks mode with the shipped `warden-redis` hooks. Writes go to whichever Redis is the
//! primary; a planned switchover hands over with `FAILOVER TO` and loses nothing; `kill -9`
//! of the active's warden fences its Redis (by its pidfile) before the other is promoted.
//! "Never two primaries" is read from the servers' own `INFO replication`.

mod common;

use common::redis::RedisServer;
use common::*;
use std::fs;
use std::path::{Path, PathBuf};

fn hooks_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/redis/warden-redis")
}

/// The role Redis itself reports: `master` or `slave`.
fn role(r: &RedisServer) -> String {
    r.try_cli(&["INFO", "replication"])
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.trim().strip_prefix("role:").map(str::to_string))
        .unwrap_or_default()
}

/// Whether Redis replicates its primary with the link up.
fn linked(r: &RedisServer) -> bool {
    let info = r.try_cli(&["INFO", "replication"]).unwrap_or_default();
    info.contains("role:slave") && info.contains("master_link_status:up")
}

/// Writes `node`'s config for the node of Redis `r`: hooks mode with the shipped hooks,
/// `cluster.port` the Redis port, fencing by signal through the Redis pidfile.
fn redis_node(cluster: &Cluster, id: &str, r: &RedisServer) -> Node {
    example_hooks_node(
        cluster,
        id,
        &hooks_script(),
        &format!(
            "REDIS_HOST=127.0.0.1\nREDIS_PORT={}\nREDIS_PASSWORD_FILE={}\nREDIS_TIMEOUT=1\n",
            r.port(),
            r.password_file().display()
        ),
        r.port(),
        &r.pidfile(),
        ("3s", "200ms"),
    )
}

#[test]
fn redis_primary_moves_with_warden_and_keeps_every_write() {
    let password = format!("pw{:016x}", common::mariadb::rand_u64());
    let (r1, r2) = (
        RedisServer::start_replicable(&password),
        RedisServer::start_replicable(&password),
    );
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (
        redis_node(&cluster, "n1", &r1),
        redis_node(&cluster, "n2", &r2),
    );
    let check = cli(&n1.config, &["check-config"]);
    assert!(check.status.success(), "{}", describe(&check));

    let mut w1 = n1.start();
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");
    let mut w2 = n2.start();
    wait_until(secs(30), "r2 replicates r1", || linked(&r2));
    wait_for_status(&n1.config, secs(30), "n2 is a healthy standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
            && member_health(s, "n2").as_deref() == Some("healthy")
    });
    assert_eq!(role(&r1), "master");
    r1.cli(&["SET", "k1", "written-on-r1"]);
    wait_until(secs(10), "k1 reached r2", || {
        r2.try_cli(&["GET", "k1"])
            .is_ok_and(|v| v.trim() == "written-on-r1")
    });

    // A planned switchover: FAILOVER TO, no write lost, r1 now replicates r2.
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        role(&r2),
        "master",
        "r2 is not the primary after the switchover"
    );
    wait_until(secs(10), "r1 replicates r2", || role(&r1) == "slave");
    r2.cli(&["SET", "k2", "written-on-r2"]);
    wait_until(secs(10), "k2 reached r1", || {
        r1.try_cli(&["GET", "k2"])
            .is_ok_and(|v| v.trim() == "written-on-r2")
    });
    assert!(
        r1.try_cli(&["SET", "k3", "x"]).is_err()
            || r1
                .try_cli(&["GET", "k3"])
                .unwrap_or_default()
                .trim()
                .is_empty(),
        "the demoted r1 took a write"
    );
    wait_until(secs(30), "r1 replicates r2", || linked(&r1));
    wait_for_status(&n1.config, secs(30), "n1 is a healthy standby again", |s| {
        member_role(s, "n1").as_deref() == Some("standby")
            && member_health(s, "n1").as_deref() == Some("healthy")
    });

    // kill -9 of n2's warden: n1 fences r2 (its pidfile) and promotes r1, which has
    // every write.
    let r2_pid: u32 = fs::read_to_string(r2.pidfile())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    w2.kill9();
    w2.wait_exit(secs(5));
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    assert!(
        !process_alive(r2_pid),
        "r2 was not fenced before r1 was promoted"
    );
    assert!(
        cluster.fence_calls().contains(&"n1 n2".to_string()),
        "{:?}",
        cluster.fence_calls()
    );
    assert_eq!(role(&r1), "master");
    assert_eq!(r1.cli(&["GET", "k1"]).trim(), "written-on-r1");
    assert_eq!(r1.cli(&["GET", "k2"]).trim(), "written-on-r2");
    r1.cli(&["SET", "k4", "after-the-failover"]);
    w1.sigterm();
    assert_eq!(w1.wait_exit(secs(30)).code(), Some(0));
}

/// The shipped node config passes `check-config` once the hooks' path is where the
/// package puts them.
#[test]
fn the_example_config_passes_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let text = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/redis/warden.toml"),
    )
    .unwrap()
    .replace(
        "/usr/lib/warden/redis/warden-redis",
        &hooks_script().display().to_string(),
    );
    let config = dir.path().join("warden.toml");
    fs::write(&config, text).unwrap();
    let out = cli(&config, &["check-config"]);
    assert!(out.status.success(), "{}", describe(&out));
}
