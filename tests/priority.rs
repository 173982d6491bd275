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
