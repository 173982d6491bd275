//! `[election] priority` (issue 15, SPEC §6) with real daemons on a real ZooKeeper: when
//! the lock is free a standby of higher priority wins; priority 0 is a standby that never
//! takes the lock by itself, `failover` without `--to` passes it over, `--to` names it.
//! "Never two actives" from the services' own journals.

mod common;

use common::*;

fn with_priority(cluster: &Cluster, id: &str, priority: u16) -> Node {
    let node = cluster.node(id);
    set_priority(&node, priority);
    node
}

#[test]
fn a_free_lock_goes_to_the_healthy_standby_of_higher_priority() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let n2 = with_priority(&cluster, "n2", 50);
    let n3 = with_priority(&cluster, "n3", 900);
    let wardens = start_active_then_standbys(&n1, &[&n2, &n3]);
    let s = status_json(&n1.config);
    assert_eq!(
        member(&s, "n3").map(|m| &m["priority"]),
        Some(&serde_json::json!(900)),
        "{s:#}"
    );
    // n2 has seen n3 (its look at the members runs once a session timeout).
    wardens[1].wait_for_log(
        "standbys placed above this one (priority 50, position unknown): n3",
        secs(30),
    );
    let old = n1.last_run().unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let s = wait_for_status(&n1.config, secs(30), "another node is active", |s| {
        matches!(active_id(s).as_deref(), Some("n2" | "n3"))
    });
    assert_eq!(active_id(&s).as_deref(), Some("n3"), "{s:#}");
    cluster.assert_safe();
}

#[test]
fn priority_0_is_a_standby_only_failover_to_can_name() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let n2 = with_priority(&cluster, "n2", 0);
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let s = status_json(&n1.config);
    assert_eq!(member_role(&s, "n2").as_deref(), Some("standby"), "{s:#}");
    let refused = cli(&n1.config, &["failover", "--timeout", "10s"]);
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("priority 0"),
        "{}",
        describe(&refused)
    );
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(active_id(&status_json(&n1.config)).as_deref(), Some("n2"));
    cluster.assert_safe();
}

/// The active dies and only a priority-0 standby is left: nobody takes the free lock by
/// itself, `failover` without `--to` says to name one, and `failover --to` it makes it the
/// active (after it fenced the dead one).
#[test]
fn with_only_priority_0_left_the_lock_stays_free_until_the_operator_names_a_node() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let n2 = with_priority(&cluster, "n2", 0);
    let wardens = start_active_then_standbys(&n1, &[&n2]);
    wardens[0].kill9();
    wait_for_status(&n2.config, secs(30), "n1's session is gone", |s| {
        member(s, "n1").is_none() && active_id(s).is_none()
    });
    // "Never by itself" as far as a test can watch: three session timeouts.
    holds_for(cluster.session_timeout * 3, "n2 stays a standby", || {
        let s = status_json(&n2.config);
        match (active_id(&s), member_role(&s, "n2")) {
            (None, Some(role)) if role == "standby" => Ok(()),
            _ => Err(format!("priority 0 took the lock: {s:#}")),
        }
    });
    let refused = cli(&n2.config, &["failover", "--timeout", "10s"]);
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains("priority 0") && why.contains("failover --to"),
        "{}",
        describe(&refused)
    );
    let out = cli(&n2.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(active_id(&status_json(&n2.config)).as_deref(), Some("n2"));
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "n2 did not fence n1 first: {:?}",
        cluster.fence_calls()
    );
    cluster.assert_safe();
}

/// Each session's paths in a four-letter listing of ZooKeeper's (`wchc`: the watches by
/// session; `dump`: the ephemeral znodes by session): a line `0x...` opens a session, the
/// indented paths below it are its.
fn by_session(listing: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in listing.lines() {
        let t = line.trim();
        if t.starts_with("0x") {
            out.push((t.trim_end_matches(':').to_string(), Vec::new()));
        } else if t.starts_with('/') && line.starts_with(char::is_whitespace) {
            if let Some(last) = out.last_mut() {
                last.1.push(t.to_string());
            }
        }
    }
    out
}

/// What each node's session watches, by node id (the session that owns its member znode),
/// as ZooKeeper holds it: `lock`, or `members/ID` for a member, besides `control` and the
/// breadcrumb, which every node watches.
fn watches(zk: &ZkServer) -> std::collections::BTreeMap<String, Vec<String>> {
    let dump = zk.four_letter("dump").unwrap_or_default();
    let wchc = zk.four_letter("wchc").unwrap_or_default();
    let watched: std::collections::HashMap<String, Vec<String>> =
        by_session(&wchc).into_iter().collect();
    let mut out = std::collections::BTreeMap::new();
    for (session, ephemerals) in by_session(&dump) {
        let Some(id) = ephemerals
            .iter()
            .find_map(|p| p.split("/members/").nth(1).map(str::to_string))
        else {
            continue;
        };
        let mut w: Vec<String> = watched
            .get(&session)
            .into_iter()
            .flatten()
            .filter_map(|p| {
                if p.ends_with("/lock") {
                    Some("lock".to_string())
                } else {
                    p.split("/members/").nth(1).map(|m| format!("members/{m}"))
                }
            })
            .collect();
        w.sort();
        out.insert(id, w);
    }
    out
}

fn expect_watches(zk: &ZkServer, what: &str, want: &[(&str, &[&str])]) {
    let want: std::collections::BTreeMap<String, Vec<String>> = want
        .iter()
        .map(|(id, w)| (id.to_string(), w.iter().map(|s| s.to_string()).collect()))
        .collect();
    let deadline = std::time::Instant::now() + secs(30);
    loop {
        let got = watches(zk);
        if want.iter().all(|(id, w)| got.get(id) == Some(w)) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the watches are {got:?}, not {want:?}\nwchc:\n{}\ndump:\n{}",
            zk.four_letter("wchc").unwrap_or_default(),
            zk.four_letter("dump").unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// SPEC §6b, herd-free succession (issue 33, point 3): only the best-placed standby watches
/// the lock; each other watches the standby placed just above it, as ZooKeeper's own watch
/// table shows; the chain moves on after each takeover; and a best-placed standby that
/// cannot take over (frozen) holds the next one up only until its session ends.
#[test]
fn a_free_lock_wakes_only_the_best_placed_standby_and_the_chain_moves_on() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let n2 = with_priority(&cluster, "n2", 400);
    let n3 = with_priority(&cluster, "n3", 300);
    let n4 = with_priority(&cluster, "n4", 200);
    let n5 = with_priority(&cluster, "n5", 100);
    let mut wardens = start_active_then_standbys(&n1, &[&n2, &n3, &n4, &n5]);
    expect_watches(
        &zk,
        "n1 active; n2 best-placed",
        &[
            ("n1", &["lock"]),
            ("n2", &["lock"]),
            ("n3", &["members/n2"]),
            ("n4", &["members/n3"]),
            ("n5", &["members/n4"]),
        ],
    );
    // A crash: n2 takes over, and the chain moves up one. The floor (one znode, SPEC §3a)
    // is written once, by the commit: the four others that see the new epoch find it held
    // there already (each raising its own entry made them conflict, n²/2 writes tried).
    let client = ZkClient::connect(&zk.connect_string());
    let floor = cluster.znode("floor");
    let floor_before = client.version(&floor).expect("the floor exists");
    let old = n1.last_run().unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let s = wait_for_status(
        &n1.config,
        secs(30),
        "another node is active",
        |s| matches!(active_id(s).as_deref(), Some(id) if id != "n1"),
    );
    assert_eq!(active_id(&s).as_deref(), Some("n2"), "{s:#}");
    expect_watches(
        &zk,
        "n2 active; n3 best-placed",
        &[
            ("n2", &["lock"]),
            ("n3", &["lock"]),
            ("n4", &["members/n3"]),
            ("n5", &["members/n4"]),
        ],
    );
    let epoch = s["active"]["epoch"].as_u64().expect("an epoch");
    wait_for_status(
        &n1.config,
        secs(30),
        "every node has seen the new epoch",
        |s| {
            ["n1", "n3", "n4", "n5"]
                .iter()
                .all(|id| member(s, id).is_some_and(|m| m["epoch_seen"].as_u64() == Some(epoch)))
        },
    );
    assert_eq!(client.version(&floor), Some(floor_before + 1));
    // n3, best-placed now, is frozen, and n2 steps down: nothing wakes n4 but n3's end.
    // It takes over once n3's session has ended, not n5, which still waits for n4.
    wardens[2].sigstop();
    wardens[1].sigterm();
    let s = wait_for_status(
        &n1.config,
        secs(60),
        "n4 is active",
        |s| matches!(active_id(s).as_deref(), Some(id) if id != "n2"),
    );
    assert_eq!(active_id(&s).as_deref(), Some("n4"), "{s:#}");
    wardens[2].sigcont();
    let _ = wardens[1].wait_exit(secs(10));
    cluster.assert_safe();
}

/// SPEC §6b: a node waiting out its new session says in its member record how much of
/// that wait is left (`tries_in`: a standby placed below waits for it from then), and
/// writes the record again once the wait is over, without it: a settled node never looks
/// settling to a standby that reads it later.
#[test]
fn a_new_sessions_wait_is_in_the_member_record_until_it_ends() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let n2 = cluster.node("n2");
    let _w1 = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    // n2 joins as a standby and stays one: nothing but the wait's end rewrites its record.
    let _w2 = n2.start();
    let client = ZkClient::connect(&zk.connect_string());
    let path = cluster.znode("members/n2");
    let tries_in = || {
        client
            .get(&path)
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .map(|v| {
                v.get("tries_in")
                    .and_then(|t| t.as_str())
                    .map(str::to_string)
            })
    };
    let left = wait_for(
        secs(30),
        "n2's record says how much of its wait is left",
        || tries_in().flatten(),
    );
    assert!(humantime::parse_duration(&left).is_ok(), "{left}");
    wait_until(secs(30), "n2's record no longer does", || {
        tries_in() == Some(None)
    });
    let s = status_json(&n1.config);
    assert_eq!(
        member(&s, "n2").map(|m| m["role"].clone()),
        Some("standby".into()),
        "{s:#}"
    );
}
