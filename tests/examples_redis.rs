//! `examples/redis` (issue 15): real redis-server processes, one per node, under warden in
//! hooks mode with the shipped `warden-redis` hooks (three nodes where the issue asks for
//! replicas that follow).
//!
//! The checker is what the Redis servers themselves answered: a prober asks every server,
//! in rounds, to `INCR` one counter (then `WAIT <replicas> 100`) and for its
//! `INFO replication`.
//! - Two servers that accept a write in the same round are two primaries taking writes
//!   (split brain).
//! - A counter value handed out twice, or one that goes down over time, is a lost write:
//!   the new primary hands out again a number an old one had accepted. That is allowed
//!   after a crash only for a write some replica had not received (asynchronous
//!   replication), never in a planned switchover.
//! - `role:` (from `INFO replication`) says whether a server calls itself the primary.
//!
//! A round waits on each server in turn, so a paused old primary holds it up: when a
//! server first takes a write is measured by a client of its own per server, as an
//! application connected to it would see it.
//!
//! Timings are printed (`timing:` lines), never asserted; the README's figures come from
//! them.

mod common;

use common::redis::RedisServer;
use common::redis_setup::*;
use common::*;
use std::time::{Duration, Instant};

/// Starts a prober on every Redis of `s` and waits until n1's Redis takes writes (20
/// replicated): the prober, and when it started.
fn probe_n1_writing(s: &Setup) -> (Prober, Instant) {
    let probing = Instant::now();
    let prober = Prober::start(s.ports(), s.redis[0].password());
    wait_until(secs(30), "n1's Redis takes writes", || {
        prober.replicated_on(0) >= 20
    });
    (prober, probing)
}

/// Asserts that no write `prober` saw acknowledged since `probing` was lost, and that no
/// Redis of `s` was asked for its own `FAILOVER`: the handover is warden's, inside the
/// lock (Redis's `FAILOVER` hands the role over before the successor's warden holds it).
fn assert_nothing_lost_and_no_redis_failover(s: &Setup, prober: &Prober, probing: Instant) {
    let lost = prober.lost_between(probing, Instant::now());
    assert!(lost.is_empty(), "writes were lost: {lost:?}");
    for (i, r) in s.redis.iter().enumerate() {
        assert!(
            !r.log().contains("FAILOVER requested"),
            "n{}'s Redis was asked for a FAILOVER",
            i + 1
        );
    }
}

/// Show-it-works 1 and 2 of issue 15: a planned switchover loses no acknowledged write,
/// the old primary and the other replica follow the new one, and no two servers accept
/// a write in the same round (the old primary still calls itself the primary, refusing
/// every write, from its demote until its follow makes it a replica). Then `kill -9` of the active's warden and
/// its Redis together: a replica is promoted after the session, the other follows it,
/// and the old node, restarted as the systemd drop-in starts it, comes back as a replica.
#[test]
fn switchover_keeps_every_write_and_kill_9_brings_the_old_primary_back_as_a_replica() {
    let mut s = Setup::new(3);
    let check = cli(&s.nodes[0].config, &["check-config"]);
    assert!(check.status.success(), "{}", describe(&check));
    let mut wardens = s.start_with_n1_active();
    let (prober, probing) = probe_n1_writing(&s);

    // 1. A planned switchover: FAILOVER TO, nothing lost, everyone follows n2.
    let asked = Instant::now();
    let out = cli(
        &s.nodes[0].config,
        &["failover", "--to", "n2", "--timeout", "20s"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(role(&s.redis[1]), "master", "r2 is not the primary");
    let first = wait_for(secs(30), "n2's Redis takes writes", || {
        prober.first_alone_on(1, asked)
    });
    let in_rounds = wait_for(secs(30), "n2's Redis takes the rounds' writes", || {
        prober.first_on(1, asked)
    });
    eprintln!(
        "timing: redis switchover to the first write accepted by the new primary: {:?} \
         (in the rounds, which wait on the old primary's pause: {:?})",
        first - asked,
        in_rounds - asked
    );
    for (i, r) in s.redis.iter().enumerate() {
        if i != 1 {
            wait_until(
                secs(30),
                &format!("n{}'s Redis replicates n2's", i + 1),
                || linked_to(r, s.redis[1].port()),
            );
        }
    }
    // The old primary's replication id is the new primary's replid2: it follows with a
    // partial resync (said, not asserted: a replication ping the old primary sends after
    // its pause and before it follows makes it a full one, harmlessly).
    eprintln!(
        "n1 followed n2 with a {} resync",
        if s.redis[0]
            .log()
            .contains("Master accepted a Partial Resynchronization")
        {
            "partial"
        } else {
            "full"
        }
    );
    let two = prober.two_accepting_between(asked, Instant::now());
    assert!(
        two.is_empty(),
        "two primaries took writes during the switchover: {two:?}"
    );
    let lost = prober.lost_between(probing, Instant::now());
    assert!(lost.is_empty(), "the switchover lost writes: {lost:?}");
    s.wait_healthy_standby("n1");
    s.wait_healthy_standby("n3");

    // 2. kill -9 of n2's warden and its Redis together.
    let killed = Instant::now();
    wardens[1].kill9();
    s.redis[1].kill();
    wardens[1].wait_exit(secs(5));
    let (new, _) = wait_for(secs(60), "n1 or n3 is active", || {
        let st = status_json(&s.nodes[0].config);
        active_id(&st)
            .filter(|id| id != "n2")
            .map(|id| (id, st.clone()))
    });
    let (new_i, other_i) = if new == "n1" { (0, 2) } else { (2, 0) };
    let first = wait_for(secs(30), "the new primary takes writes", || {
        prober.first_alone_on(new_i, killed)
    });
    eprintln!(
        "timing: redis kill -9 to the first write accepted by the new primary: {:?} \
         (session_timeout {:?})",
        first - killed,
        s.cluster.session_timeout
    );
    assert!(
        s.cluster.fence_calls().contains(&format!("{new} n2")),
        "{new} did not fence n2: {:?}",
        s.cluster.fence_calls()
    );
    let new_port = s.redis[new_i].port();
    wait_until(
        secs(30),
        "the other replica follows the new primary",
        || linked_to(&s.redis[other_i], new_port),
    );

    // n2 comes back: Redis as the drop-in starts it, then its warden. It must replicate
    // the new primary and never take a write.
    let restarted = Instant::now();
    s.redis[1].start_as_the_drop_in_does();
    wardens[1] = s.nodes[1].start();
    wait_until(secs(30), "n2's Redis replicates the new primary", || {
        linked_to(&s.redis[1], new_port)
    });
    s.wait_healthy_standby("n2");
    let taken = prober.accepted_on(1, restarted);
    assert!(taken.is_empty(), "the restarted n2 took writes: {taken:?}");
    let writes = prober.finish();
    assert!(writes.iter().any(|w| w.node == new_i && w.at > restarted));
    for w in wardens.iter_mut() {
        w.sigterm();
    }
    s.zk.stop();
}

/// Show-it-works 3: the active cut off from the store (ZooKeeper frozen: it answers
/// nothing, its session clocks stop). Its Redis refuses writes by its lease end
/// (session/2 after the last renewal sent before the freeze); after the thaw one node is
/// active again, and no write was ever accepted by two servers.
#[test]
fn an_active_cut_off_from_zookeeper_refuses_writes_by_its_lease_end() {
    let mut s = Setup::new(3);
    let _wardens = s.start_with_n1_active();
    let (prober, _) = probe_n1_writing(&s);

    s.zk.freeze();
    let frozen = Instant::now();
    wait_until(secs(30), "n1's Redis refuses writes", || {
        prober.refused_since(0, frozen)
    });
    let lease = s.cluster.session_timeout / 2;
    let last = prober
        .accepted_on(0, frozen)
        .last()
        .map_or(Duration::ZERO, |w| w.at - frozen);
    eprintln!(
        "timing: redis active cut off from ZooKeeper: last write accepted {last:?} after \
         the freeze (lease {lease:?})"
    );
    // A safety bound, with the slack of a loaded 2-core machine (as in faults_ensemble).
    assert!(
        last <= lease + Duration::from_millis(500),
        "n1's Redis took writes {last:?} after ZooKeeper froze, past its lease of {lease:?}"
    );
    s.zk.thaw();
    let (new, _) = wait_for_active(&s.nodes[0].config, secs(60));
    let new_i: usize = new[1..].parse::<usize>().unwrap() - 1;
    let thawed = Instant::now();
    wait_for(secs(30), "the new active's Redis takes writes", || {
        prober.first_on(new_i, thawed)
    });
    // Fenced (by its pidfile) when another node won: Redis restarts as the drop-in starts
    // it (systemd's Restart=), and follows.
    if new_i != 0 && !process_alive(s.redis[0].pid().unwrap()) {
        s.redis[0].kill();
        s.redis[0].start_as_the_drop_in_does();
    }
    let new_port = s.redis[new_i].port();
    for (i, r) in s.redis.iter().enumerate() {
        if i != new_i {
            wait_until(
                secs(30),
                &format!("n{}'s Redis follows {new}", i + 1),
                || linked_to(r, new_port),
            );
        }
    }
    prober.finish();
}

/// Show-it-works 4: a replica whose follow fails (its Redis cannot authenticate to the
/// primary) is not promoted while a good one exists, even with the higher priority; out
/// of the election, it still learns the new active, and follows it once fixed.
#[test]
fn a_replica_whose_follow_fails_is_not_promoted() {
    let password = format!("pw{:016x}", common::mariadb::rand_u64());
    let mut s = Setup::with(vec![
        RedisServer::start_replicable(&password),
        RedisServer::start_replicable(&password),
        RedisServer::start_replicable_with_masterauth(&password, "not-the-password"),
    ]);
    set_priority(&s.nodes[2], 200);
    let mut wardens = vec![s.nodes[0].start()];
    assert_eq!(wait_for_active(&s.nodes[0].config, secs(30)).0, "n1");
    wardens.push(s.nodes[1].start());
    wardens.push(s.nodes[2].start());
    s.wait_healthy_standby("n2");
    let st = wait_for_status(&s.nodes[0].config, secs(30), "n3's follow failed", |st| {
        member_role(st, "n3").as_deref() == Some("ineligible")
            && follow_of(st, "n3").is_some_and(|f| f.starts_with("failed"))
    });
    let why = follow_of(&st, "n3").unwrap();
    assert!(why.contains("masterauth"), "{why}");

    wardens[0].kill9();
    s.redis[0].kill();
    let (new, _) = wait_for(secs(60), "another node is active", || {
        let st = status_json(&s.nodes[1].config);
        active_id(&st)
            .filter(|id| id != "n1")
            .map(|id| (id, st.clone()))
    });
    assert_eq!(new, "n2", "n3 (follow failed, priority 200) was promoted");
    assert_eq!(role(&s.redis[1]), "master");
    assert_eq!(
        s.redis[1].cli(&["SET", "k", "v"]).trim(),
        "OK",
        "n2's Redis refuses writes"
    );
    assert_ne!(
        role(&s.redis[2]),
        "master",
        "n3's Redis calls itself the primary"
    );

    // n3, out of the election, still learns the new active and retries its follow there;
    // with masterauth fixed the follow succeeds and n3 is a standby again.
    wait_for_status(
        &s.nodes[1].config,
        secs(30),
        "n3 tries to follow n2",
        |st| follow_of(st, "n3").is_some_and(|f| f.contains("primary n2 at")),
    );
    s.redis[2].cli(&["CONFIG", "SET", "masterauth", s.redis[0].password()]);
    wait_until(secs(30), "n3's Redis replicates n2's", || {
        linked_to(&s.redis[2], s.redis[1].port())
    });
    wait_for_status(
        &s.nodes[1].config,
        secs(30),
        "n3 is a healthy standby",
        |st| {
            member_role(st, "n3").as_deref() == Some("standby")
                && follow_of(st, "n3").is_some_and(|f| f.starts_with("current"))
        },
    );
    s.zk.stop();
}

/// Show-it-works 4: a priority-0 node is never promoted by itself. The active dies; its
/// only replica, of priority 0, stays a replica that refuses writes until the operator
/// names it with `failover --to`.
#[test]
fn a_priority_0_replica_is_promoted_only_when_named() {
    let mut s = Setup::new(2);
    set_priority(&s.nodes[1], 0);
    let mut wardens = s.start_with_n1_active();
    let (prober, _) = probe_n1_writing(&s);
    wardens[0].kill9();
    s.redis[0].kill();
    let killed = Instant::now();
    wait_for_status(&s.nodes[1].config, secs(30), "n1's session is gone", |st| {
        member(st, "n1").is_none() && active_id(st).is_none()
    });
    // "Never by itself" as far as a test can watch: three session timeouts.
    holds_for(s.cluster.session_timeout * 3, "nobody is active", || {
        let st = status_json(&s.nodes[1].config);
        match active_id(&st) {
            None => Ok(()),
            Some(_) => Err(format!("priority 0 took the lock: {st:#}")),
        }
    });
    let taken = prober.accepted_on(1, killed);
    assert!(
        taken.is_empty(),
        "n2's Redis took writes by itself: {taken:?}"
    );
    assert_eq!(role(&s.redis[1]), "slave");

    let named = Instant::now();
    let out = cli(
        &s.nodes[1].config,
        &["failover", "--to", "n2", "--timeout", "20s"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    wait_for(secs(30), "n2's Redis takes writes once named", || {
        prober.first_on(1, named)
    });
    prober.finish();
    for w in wardens.iter_mut() {
        w.sigterm();
    }
    s.zk.stop();
}

/// The shipped node config passes `check-config` once the hooks' path is where the
/// package puts them.
#[test]
fn the_example_config_passes_check_config() {
    assert_example_config_passes_check_config("redis", "warden-redis");
}

/// The demote of a planned switchover, run by itself against real servers, never hands
/// over to a successor that lacks what the primary wrote: to a Redis that replicates
/// another history, or to one that does not answer, it fails (issue 30, point 5: warden
/// then calls the switchover off), its last line saying why, as warden quotes it. The
/// primary then refuses writes at once (they are not left paused), and neither server's
/// role changed.
#[test]
fn a_switchover_demote_fails_when_the_successor_lacks_the_writes() {
    let password = format!("pw{:016x}", common::mariadb::rand_u64());
    let primary = RedisServer::start_replicable(&password);
    let stranger = RedisServer::start_replicable(&password);
    primary.cli(&["SET", "k", "written"]);
    let env_file = hooks_env(&primary, "");
    let closed = free_port();
    for (port, why) in [
        (stranger.port(), "(it does not replicate this primary)"),
        (closed, "(it did not answer)"),
    ] {
        let out = run_switchover_demote(&hooks_script(), &env_file.1, port, secs(10));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        assert!(
            last.contains(&format!("n2 (127.0.0.1:{port}) did not receive everything"))
                && last.contains(why),
            "the hook's last line does not say why it did not hand over: {}",
            describe(&out)
        );
        assert_eq!(role(&primary), "master", "the primary handed its role over");
        assert_eq!(role(&stranger), "master", "the stranger's role changed");
        assert_eq!(primary.cli(&["GET", "k"]).trim(), "written");
        // Refused at once, not held by a pause.
        let started = Instant::now();
        let refused = primary.try_cli(&["SET", "k", "late"]);
        assert!(
            refused.as_ref().is_err_and(|e| e.contains("NOREPLICAS"))
                || refused.as_ref().is_ok_and(|o| o.contains("NOREPLICAS")),
            "a write after the demote was not refused: {refused:?}"
        );
        assert!(started.elapsed() < secs(1), "the write waited on a pause");
        primary.cli(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
    }
    // A successor without an address in its record: not handed over, nothing changed.
    let args = [
        "WARDEN_SUCCESSOR_NODE=n2".to_string(),
        hooks_script().display().to_string(),
        "demote".to_string(),
        env_file.1.display().to_string(),
    ];
    let out = run_bounded("env", &args, secs(10));
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("n2 has no host and port"),
        "{}",
        describe(&out)
    );
    assert_eq!(primary.cli(&["SET", "k", "still"]).trim(), "OK");
}

/// An env file for the hooks on `r` (REDIS_TIMEOUT 1), plus `extra` lines.
fn hooks_env(r: &RedisServer, extra: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("hooks.env");
    std::fs::write(
        &env_file,
        format!(
            "REDIS_HOST=127.0.0.1\nREDIS_PORT={}\nREDIS_PASSWORD_FILE={}\nREDIS_TIMEOUT=1\n{extra}",
            r.port(),
            r.password_file().display()
        ),
    )
    .unwrap();
    (dir, env_file)
}

/// Whether a write to `r` is refused with NOREPLICAS.
fn refuses_writes(r: &RedisServer) -> Result<(), String> {
    match r.try_cli(&["SET", "probe", "x"]) {
        Err(e) if e.contains("NOREPLICAS") => Ok(()),
        Ok(o) if o.contains("NOREPLICAS") => Ok(()),
        other => Err(format!("a write was not refused: {other:?}")),
    }
}

/// Issue 30, point 10: Redis ignores `min-replicas-to-write` while
/// `min-replicas-max-lag` is 0, so "refuse writes" must not depend on that setting. A
/// Redis whose lag is 0 (its redis.conf, and redis.env says 0 too) refuses writes after
/// each kind of demote: a plain one, and a switchover's, whose successor has everything
/// (the hook then exits 0). And a Redis started as the shipped systemd drop-in starts
/// it (its arguments read from the file) over a redis.conf with a lag of 0 refuses
/// writes too.
#[test]
fn refusing_writes_works_whatever_min_replicas_max_lag_says() {
    let password = format!("pw{:016x}", common::mariadb::rand_u64());
    let primary = RedisServer::start_replicable(&password);
    let replica = RedisServer::start_replicable(&password);
    replica.cli(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    wait_until(secs(30), "the replica's link is up", || {
        linked_to(&replica, primary.port())
    });
    let env = hooks_env(&primary, "MIN_REPLICAS_MAX_LAG=0\n");
    let script = hooks_script().display().to_string();
    let env_path = env.1.display().to_string();

    // A plain demote (SIGTERM, lease end: no successor).
    primary.cli(&["CONFIG", "SET", "min-replicas-max-lag", "0"]);
    primary.cli(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
    let out = run_bounded(&script, &["demote".to_string(), env_path.clone()], secs(10));
    assert!(out.status.success(), "{}", describe(&out));
    refuses_writes(&primary).unwrap_or_else(|e| panic!("after a plain demote: {e}"));

    // A switchover's demote to a replica that has everything.
    primary.cli(&["CONFIG", "SET", "min-replicas-max-lag", "0"]);
    primary.cli(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
    primary.cli(&["SET", "k", "written"]);
    let out = run_switchover_demote(&hooks_script(), &env.1, replica.port(), secs(10));
    assert!(out.status.success(), "{}", describe(&out));
    refuses_writes(&primary).unwrap_or_else(|e| panic!("after a switchover's demote: {e}"));
    assert_eq!(replica.cli(&["GET", "k"]).trim(), "written");
    assert_eq!(
        role(&replica),
        "slave",
        "the demote made the successor a primary"
    );

    // The drop-in, over a redis.conf whose lag is 0.
    let mut restarted = RedisServer::start_replicable(&password);
    restarted.kill();
    restarted.start_as_the_drop_in_does_over(&["--min-replicas-max-lag", "0"]);
    refuses_writes(&restarted).unwrap_or_else(|e| panic!("as the drop-in starts it: {e}"));
}

/// Issue 30, point 3: a successor whose warden is frozen (SIGSTOP) when the switchover
/// to it starts. The old primary's demote must not make the successor's Redis writable
/// (no `FAILOVER TO`: SPEC §6a.1), so when the request lapses and another node takes
/// over, never do two Redis accept a write at once (from the servers' own answers), and
/// nothing acknowledged is lost. Once thawed, n2 follows the new primary.
#[test]
fn a_frozen_successor_never_leaves_two_redis_taking_writes() {
    let mut s = Setup::new(3);
    let wardens = s.start_with_n1_active();
    let (prober, probing) = probe_n1_writing(&s);

    wardens[1].sigstop();
    let asked = Instant::now();
    let out = cli(
        &s.nodes[0].config,
        &["failover", "--to", "n2", "--timeout", "5s"],
    );
    eprintln!("failover to a frozen n2: {}", describe(&out));
    assert!(!out.status.success(), "{}", describe(&out));
    // The request lapses; n1 or n3 takes over.
    let (new, _) = wait_for(secs(60), "n1 or n3 is active after the deadline", || {
        let st = status_json(&s.nodes[0].config);
        active_id(&st)
            .filter(|id| id != "n2")
            .map(|id| (id, st.clone()))
    });
    let new_i: usize = new[1..].parse::<usize>().unwrap() - 1;
    let seen = Instant::now();
    let taken = wait_for(secs(30), "the new active's Redis takes writes", || {
        prober.first_on(new_i, seen)
    });
    // A few hundred rounds with the new primary taking writes while n2's warden is still
    // frozen: n2's Redis must refuse every one of them.
    let rounds = prober.rounds();
    wait_until(secs(30), "50 more rounds", || {
        prober.rounds() >= rounds + 50
    });
    let on_n2 = prober.accepted_on(1, asked);
    assert!(
        on_n2.is_empty(),
        "n2's Redis took writes while its warden was frozen (new primary {new} since \
         {:?} after the request): {on_n2:?}",
        taken - asked
    );
    assert_ne!(role(&s.redis[1]), "master", "n2's Redis is a primary");

    wardens[1].sigcont();
    let new_port = s.redis[new_i].port();
    for (i, r) in s.redis.iter().enumerate().filter(|(i, _)| *i != new_i) {
        wait_until(
            secs(30),
            &format!("n{}'s Redis follows {new}", i + 1),
            || linked_to(r, new_port),
        );
    }
    assert_nothing_lost_and_no_redis_failover(&s, &prober, probing);
    drop(wardens);
    prober.finish();
    s.zk.stop();
}

/// Issue 30, point 4: the successor's Redis refuses the old primary's `PSYNC`
/// (`ACL SETUSER default -psync`). Redis's own `FAILOVER` would report `slave` while
/// it tried and then make the old primary writable again; with the handover inside the
/// lock, the old primary is never writable once it stepped down, the successor is the
/// only primary, and nothing acknowledged is lost.
#[test]
fn a_successor_that_refuses_psync_never_leaves_two_redis_taking_writes() {
    let mut s = Setup::new(3);
    let wardens = s.start_with_n1_active();
    let (prober, probing) = probe_n1_writing(&s);
    // (The first node's PSYNC is the one refused: n1 follows n2 after the switchover.)
    s.redis[1].cli(&["ACL", "SETUSER", "default", "-psync"]);

    let asked = Instant::now();
    let out = cli(
        &s.nodes[0].config,
        &["failover", "--to", "n2", "--timeout", "20s"],
    );
    eprintln!("failover to n2, which refuses PSYNC: {}", describe(&out));
    wait_for(secs(30), "n2's Redis takes writes", || {
        prober.first_on(1, asked)
    });
    let rounds = prober.rounds();
    wait_until(secs(30), "100 more rounds", || {
        prober.rounds() >= rounds + 100
    });
    let on_n1 = prober.accepted_on(0, prober.first_on(1, asked).unwrap());
    assert!(
        on_n1.is_empty(),
        "n1's Redis took writes after n2's did: {on_n1:?}"
    );
    assert_nothing_lost_and_no_redis_failover(&s, &prober, probing);
    drop(wardens);
    prober.finish();
    s.zk.stop();
}

/// Issue 30, point 5 (needs warden's side, SPEC §6a.2): the successor's Redis stalls
/// (`DEBUG SLEEP`) as a switchover to it starts, under a steady writer. The old
/// primary's demote fails (the successor did not receive everything), warden calls the
/// switchover off and promotes the old primary again: `failover` exits 1 saying so, the
/// old primary takes writes again, and no acknowledged write is lost.
#[test]
fn a_stalled_successor_calls_the_switchover_off() {
    let mut s = Setup::new(3);
    let _wardens = s.start_with_n1_active();
    let (prober, probing) = probe_n1_writing(&s);

    let (port, password) = (s.redis[1].port(), s.redis[0].password().to_string());
    let sleeper = std::thread::spawn(move || {
        let con = connect(port, &password).map(|mut c| {
            c.set_read_timeout(Some(secs(10))).unwrap();
            ::redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(4)
                .query::<String>(&mut c)
        });
        eprintln!("DEBUG SLEEP 4 on n2's Redis: {con:?}");
    });
    // (Seen at once: n2's standby-check fails after a second of it, and `failover`
    // refuses an ineligible target.)
    wait_until(secs(10), "n2's Redis sleeps", || {
        connect(port, s.redis[0].password()).is_none_or(|mut c| {
            c.set_read_timeout(Some(Duration::from_millis(100)))
                .is_err()
                || ::redis::cmd("PING").query::<String>(&mut c).is_err()
        })
    });
    let asked = Instant::now();
    let out = cli(
        &s.nodes[0].config,
        &["failover", "--to", "n2", "--timeout", "20s"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr.contains("called off") && stderr.contains("did not receive everything"),
        "{}",
        describe(&out)
    );
    let st = status_json(&s.nodes[0].config);
    assert_eq!(active_id(&st).as_deref(), Some("n1"), "{st:#}");
    wait_for(secs(30), "n1's Redis takes writes again", || {
        prober.first_on(0, asked)
    });
    sleeper.join().unwrap();
    // (Rounds wait on the sleeping server: enough of them for `finish`.)
    wait_until(secs(60), "60 rounds", || prober.rounds() > 60);
    for i in [1, 2] {
        wait_until(secs(30), &format!("n{}'s Redis follows n1", i + 1), || {
            linked_to(&s.redis[i], s.redis[0].port())
        });
    }
    let lost = prober.lost_between(probing, Instant::now());
    assert!(lost.is_empty(), "writes were lost: {lost:?}");
    prober.finish();
    s.zk.stop();
}

/// Issue 30, point 5: `standby-check` judges a replica's lag by replication offsets (the
/// primary's `master_repl_offset` against the replica's), not by the time of the last
/// I/O. A replica whose link is up and which heard from its primary a moment ago, but
/// lacks 200 kB the primary wrote (its stream held up in a proxy), is not eligible;
/// once the stream flows again and it caught up, it is.
#[test]
fn standby_check_judges_lag_by_replication_offsets() {
    let password = format!("pw{:016x}", common::mariadb::rand_u64());
    let primary = RedisServer::start_replicable(&password);
    let replica = RedisServer::start_replicable(&password);
    let proxy = Proxy::start(primary.port());
    replica.cli(&["REPLICAOF", "127.0.0.1", &proxy.port.to_string()]);
    wait_until(
        secs(30),
        "the replica's link through the proxy is up",
        || linked_to(&replica, proxy.port),
    );
    let env = hooks_env(&replica, "MAX_LAG_BYTES=100000\n");
    let check = || {
        run_standby_hook(
            &hooks_script(),
            "standby-check",
            &env.1,
            primary.port(),
            secs(10),
        )
    };
    let out = check();
    assert!(out.status.success(), "in step: {}", describe(&out));
    // SPEC 6b: its last line on stdout is the replica's position, its received offset.
    let first = printed_position(&out);

    proxy.hold(true);
    // (Two halves: one argument of 200 kB is over the kernel's limit for one.)
    for _ in 0..2 {
        primary.cli(&["APPEND", "big", &"x".repeat(100_000)]);
    }
    let out = check();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a replica 200 kB behind is eligible: {}",
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bytes behind the primary") && stderr.contains("MAX_LAG_BYTES 100000"),
        "{}",
        describe(&out)
    );
    assert!(linked_to(&replica, proxy.port), "the link went down");

    proxy.hold(false);
    wait_until(secs(30), "the caught-up replica is eligible again", || {
        check().status.success()
    });
    assert_eq!(replica.cli(&["STRLEN", "big"]).trim(), "200000");
    let last = printed_position(&check());
    assert!(
        last >= first + 200_000,
        "the position went from {first} to {last} over 200 kB of writes"
    );
}

/// The position a `standby-check` printed as its last line on stdout (SPEC 6b).
fn printed_position(out: &std::process::Output) -> u64 {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no position on stdout: {}", describe(out)))
}

/// Review 2: a numeric setting of redis.env that is not a whole number (REDIS_TIMEOUT=0.5
/// made dash fail with "Illegal number" in the middle of a switchover's demote, so every
/// switchover was called off and every follow failed) is refused at the hook's start,
/// before anything is done: exit 2, with one line naming the setting, its value and the
/// env file. Both a replica's standby-check and a switchover's demote of the primary are
/// refused so, and the primary still takes writes afterwards.
#[test]
fn a_numeric_setting_that_is_not_a_whole_number_is_refused_at_the_hooks_start() {
    let password = format!("pw{:016x}", common::mariadb::rand_u64());
    let primary = RedisServer::start_replicable(&password);
    let replica = RedisServer::start_replicable(&password);
    replica.cli(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    wait_until(secs(30), "the replica's link is up", || {
        linked_to(&replica, primary.port())
    });
    for (name, value) in [
        ("REDIS_TIMEOUT", "0.5"),
        ("REDIS_TIMEOUT", "0"),
        ("FOLLOW_WAIT", "1.5"),
        ("MAX_LAG_BYTES", "1MiB"),
        ("LINK_DOWN_MAX", "60s"),
        ("MIN_REPLICAS_TO_WRITE", "-1"),
        ("MIN_REPLICAS_MAX_LAG", "0.5"),
        ("REDIS_PORT", "63 79"),
    ] {
        let setting = format!("{name}='{value}'\n");
        for (server, hook) in [(&replica, "standby-check"), (&primary, "demote")] {
            let (_dir, env_file) = hooks_env(server, &setting);
            let out = if hook == "demote" {
                run_switchover_demote(&hooks_script(), &env_file, replica.port(), secs(10))
            } else {
                run_standby_hook(&hooks_script(), hook, &env_file, primary.port(), secs(10))
            };
            assert_setting_refused(&out, hook, name, value, &env_file);
            assert_eq!(role(&primary), "master", "{hook} with {name}={value}");
            assert_eq!(primary.cli(&["SET", "k", "v"]).trim(), "OK");
        }
    }
}

/// Issue 33, point 4 (SPEC 6b): three nodes, one replica held behind (its replication
/// stream held up in a proxy while its link stays up, as behind a congested link), the
/// other with every write. `kill -9` of the primary's warden and its Redis together: the
/// advanced replica takes over in every one of 10 runs, half of them with the lagging
/// one's node id placed first by id alone. Then the lagging one takes over only when the
/// advanced one is down too.
#[test]
fn the_replica_with_the_most_data_takes_over_after_a_crash_every_time() {
    let mut s = Setup::new(3);
    let mut wardens = s.start_with_n1_active();
    let mut primary = 0usize;
    // Holds `lagging` behind the primary by 10 kB and waits until every view is settled:
    // both positions published, the lagging one lets the advanced one try first, and the
    // advanced one lets nobody. Returns the proxy (released once the run is over).
    let hold_behind = |s: &Setup, primary: usize, lagging: usize, advanced: usize, key: &str| {
        let proxy = Proxy::start(s.redis[primary].port());
        s.redis[lagging].cli(&["REPLICAOF", "127.0.0.1", &proxy.port.to_string()]);
        wait_until(secs(30), "the lagging replica's link is up", || {
            linked_to(&s.redis[lagging], proxy.port)
        });
        proxy.hold(true);
        s.redis[primary].cli(&["SET", key, &"x".repeat(10_000)]);
        wait_until(secs(30), "the advanced replica has the write", || {
            s.redis[advanced]
                .try_cli(&["STRLEN", key])
                .ok()
                .as_deref()
                .map(str::trim)
                == Some("10000")
        });
        await_placed_first(
            &s.nodes[primary].config,
            &s.nodes[lagging].id,
            &s.nodes[advanced].id,
            10_000,
        );
        assert_eq!(
            s.redis[lagging]
                .try_cli(&["EXISTS", key])
                .ok()
                .as_deref()
                .map(str::trim),
            Some("0"),
            "the lagging replica got the write it was held from"
        );
        proxy
    };
    for run in 0..10 {
        let others: Vec<usize> = (0..3).filter(|i| *i != primary).collect();
        let (lagging, advanced) = if run % 2 == 0 {
            (others[0], others[1])
        } else {
            (others[1], others[0])
        };
        let key = format!("run-{run}");
        let proxy = hold_behind(&s, primary, lagging, advanced, &key);
        let old = s.nodes[primary].id.clone();
        wardens[primary].kill9();
        s.redis[primary].kill();
        wardens[primary].wait_exit(secs(5));
        let (new, _) = wait_for_active_other_than(&s.nodes[advanced].config, &old, secs(60));
        assert_eq!(
            new, s.nodes[advanced].id,
            "run {run}: {new} took over, not {} which had more data",
            s.nodes[advanced].id
        );
        assert_eq!(
            s.redis[advanced].cli(&["STRLEN", &key]).trim(),
            "10000",
            "run {run}: the new primary lacks the last write"
        );
        proxy.hold(false);
        // The old primary comes back as a replica of the new one.
        s.redis[primary].start_as_the_drop_in_does();
        wardens[primary] = s.nodes[primary].start();
        s.await_followers(advanced);
        primary = advanced;
    }

    // The lagging replica takes over only when the advanced one is down too.
    let others: Vec<usize> = (0..3).filter(|i| *i != primary).collect();
    let (lagging, advanced) = (others[0], others[1]);
    let proxy = hold_behind(&s, primary, lagging, advanced, "last");
    let gone = [primary, advanced];
    for i in gone {
        wardens[i].kill9();
        s.redis[i].kill();
    }
    for i in gone {
        wardens[i].wait_exit(secs(5));
    }
    let (new, _) =
        wait_for_active_other_than(&s.nodes[lagging].config, &s.nodes[primary].id, secs(60));
    assert_eq!(new, s.nodes[lagging].id);
    proxy.hold(false);
    wardens[lagging].sigterm();
    s.zk.stop();
}

/// Waits until a node other than `old` is active; its id and the status that showed it.
fn wait_for_active_other_than(
    config: &std::path::Path,
    old: &str,
    timeout: Duration,
) -> (String, serde_json::Value) {
    wait_for(
        timeout,
        &format!("a node other than {old} is active"),
        || {
            let st = status_json(config);
            active_id(&st)
                .filter(|id| id != old)
                .map(|id| (id, st.clone()))
        },
    )
}
