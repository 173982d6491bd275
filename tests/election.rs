//! The election end to end on a real ZooKeeper (issue 3, "Show it works" 1, 4, 5 and 9):
//! one active, handovers without fencing, back-off, and one daemon per node id.
//!
//! Every multi-node test ends with `cluster.assert_safe()`: from the services' own
//! journals, no two ran at once and every promotion saw a greater `WARDEN_EPOCH`.

mod common;

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Scenario 1: three nodes, exactly one active, the service only there, status names it.
#[test]
fn three_nodes_elect_exactly_one_active() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let nodes: Vec<Node> = ["n1", "n2", "n3"].map(|id| cluster.node(id)).into();
    let mut wardens: Vec<Warden> = nodes.iter().map(Node::start).collect();

    let status = wait_for_status(
        &nodes[0].config,
        secs(30),
        "one node is active and two are standbys",
        |s| {
            let roles: Vec<Option<String>> = nodes.iter().map(|n| member_role(s, &n.id)).collect();
            let count = |role: &str| roles.iter().filter(|r| r.as_deref() == Some(role)).count();
            active_id(s).is_some() && count("active") == 1 && count("standby") == 2
        },
    );
    let active = active_id(&status).unwrap();
    let epoch = active_epoch(&status).expect("the active has an epoch");
    assert_eq!(
        member_role(&status, &active).as_deref(),
        Some("active"),
        "{status:#}"
    );

    // The shape of SPEC §7.
    for key in [
        "cluster",
        "backend",
        "paused",
        "active",
        "breadcrumb",
        "failover",
        "members",
    ] {
        assert!(
            status.get(key).is_some(),
            "status --json lacks {key:?}: {status:#}"
        );
    }
    assert_eq!(status["cluster"], cluster.name.as_str());
    assert_eq!(status["backend"], "zookeeper");
    assert_eq!(status["paused"], false);
    assert!(status["failover"].is_null(), "{status:#}");
    assert!(status["active"].get("since").is_some(), "{status:#}");
    assert_eq!(
        status["breadcrumb"]["node_id"],
        active.as_str(),
        "{status:#}"
    );
    assert_eq!(
        json_u64(&status["breadcrumb"]["epoch"]),
        Some(epoch),
        "{status:#}"
    );
    assert_eq!(member_ids(&status), ["n1", "n2", "n3"]);
    for (node, warden) in nodes.iter().zip(&wardens) {
        let m = member(&status, &node.id).unwrap();
        for key in ["node_id", "role", "health", "host", "port", "pid", "since"] {
            assert!(
                m.get(key).is_some(),
                "member {} lacks {key:?}: {m:#}",
                node.id
            );
        }
        assert_eq!(json_u64(&m["pid"]), Some(warden.pid() as u64), "{m:#}");
    }

    // The service runs on the active only, with the epoch status shows.
    let active_node = nodes.iter().find(|n| n.id == active).unwrap();
    wait_until(
        secs(10),
        "the active's service has run for 30 ticks",
        || active_node.last_run().is_some_and(|r| r.ticks >= 30),
    );
    let runs = active_node.runs();
    assert_eq!(runs.len(), 1, "the active's service restarted: {runs:?}");
    assert!(process_alive(runs[0].pid));
    assert_eq!(runs[0].node, active);
    assert_eq!(
        runs[0].epoch,
        Some(epoch),
        "WARDEN_EPOCH differs from status"
    );
    for node in nodes.iter().filter(|n| n.id != active) {
        assert!(
            node.runs().is_empty(),
            "standby {} ran the service",
            node.id
        );
    }

    // Every node's config reads the same cluster; the text form names the active too.
    for node in &nodes {
        let s = status_json(&node.config);
        assert_eq!(active_id(&s).as_deref(), Some(active.as_str()));
    }
    let out = cli(&nodes[2].config, &["status"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&active),
        "{}",
        describe(&out)
    );

    for w in &mut wardens {
        assert!(w.is_running(), "a warden exited: {}", w.log());
    }
    cluster.assert_safe();
}

/// Scenario 4: the active's service crashes; the standby takes over at once, without
/// fencing (the crashed node deleted its breadcrumb), and the crashed node stays a standby.
#[test]
fn crashed_service_hands_over_without_fencing() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();

    // The crash: the service dies of SIGKILL, on its own as far as warden can tell.
    let crash_ns = mono_now_ns();
    kill(Pid::from_raw(old.pid as i32), Signal::SIGKILL).unwrap();

    let status = wait_for_status(&n1.config, secs(20), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let new = wait_for(secs(5), "n2's service started", || n2.last_run());
    let took = ns(new.start_ns - crash_ns);
    assert!(
        took < cluster.session_timeout,
        "handover took {took:?}, not faster than session_timeout {:?}: it waited for an \
         expiry instead of a released lock",
        cluster.session_timeout
    );
    assert_eq!(new.epoch, active_epoch(&status));
    assert!(new.epoch > old.epoch, "{old} then {new}");
    assert!(
        cluster.fence_calls().is_empty(),
        "a clean handover fenced: {:?}",
        cluster.fence_calls()
    );

    // The crashed node keeps its warden and comes back as a standby after rejoin_delay.
    wait_for_status(&n1.config, secs(20), "n1 is a standby again", |s| {
        member_role(s, "n1").as_deref() == Some("standby")
    });
    assert!(wardens[0].is_running(), "n1's warden exited");
    assert_eq!(n1.runs().len(), 1, "n1 restarted its service in place");
    cluster.assert_safe();
}

/// Scenario 5: SIGTERM to the active: its service is stopped with stop_signal, it releases
/// the lock, exits 0, and the standby takes over at once without fencing.
/// The review of stop 48: a standby that saw the active commit, then had its link with
/// ZooKeeper made again within its session (a dropped connection: a ZooKeeper restart, a
/// network blip), published that active as a commit the store may have forgotten until
/// the next promotion, since the breadcrumb was confirmed once per epoch and session.
/// Once history stopped vouching for the active's own epoch, a clean SIGTERM step-down
/// then had the winner write its breadcrumb back and fence it. The standby reads the
/// breadcrumb again in the new link and confirms the active there: nothing is fenced.
#[test]
fn a_clean_step_down_after_a_standbys_reconnection_fences_nobody() {
    let zk = ZkServer::start();
    let mut cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let link = common::proxy::TcpProxy::start(zk.port());
    cluster.connect = format!("127.0.0.1:{}", link.port());
    let n2 = cluster.node("n2");
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let epoch = n1.last_run().and_then(|r| r.epoch).expect("n1's epoch");
    wait_for_status(&n1.config, secs(10), "n2 has seen n1's epoch", |s| {
        member(s, "n2").is_some_and(|m| json_u64(&m["epoch_seen"]) == Some(epoch))
    });
    link.reset();
    wardens[1].wait_for_log("re-established within the session", secs(20));
    wardens[1].wait_for_log(
        &format!("the breadcrumb still names n1 at epoch {epoch} in this node's new link"),
        secs(10),
    );
    wardens[0].sigterm();
    let exit = wardens[0].wait_exit(secs(10));
    assert_eq!(exit.code(), Some(0), "warden n1 exit: {exit}");
    wait_for_status(&n1.config, secs(20), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    assert!(
        cluster.fence_calls().is_empty(),
        "a clean step-down after a reconnection fenced: {:?}\n{}",
        cluster.fence_calls(),
        wardens[1].log()
    );
}

#[test]
fn sigterm_to_active_hands_over_cleanly_and_exits_0() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);

    let term_ns = mono_now_ns();
    wardens[0].sigterm();
    let exit = wardens[0].wait_exit(secs(10));
    assert_eq!(exit.code(), Some(0), "warden n1 exit: {exit}");
    let old = n1.last_run().unwrap();
    assert!(
        old.stopped,
        "n1's service was not stopped with SIGTERM: {old}"
    );
    assert!(!process_alive(old.pid));

    wait_for_status(&n2.config, secs(20), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let new = wait_for(secs(5), "n2's service started", || n2.last_run());
    let took = ns(new.start_ns - term_ns);
    assert!(
        took < cluster.session_timeout,
        "handover took {took:?}: the lock was not released, the standby waited for an expiry"
    );
    assert!(
        cluster.fence_calls().is_empty(),
        "a clean handover fenced: {:?}",
        cluster.fence_calls()
    );
    wait_for_status(&n2.config, secs(10), "n1 left the members", |s| {
        member_ids(s) == ["n2"]
    });
    cluster.assert_safe();
}

/// SPEC §4.8 / §9: a service that crashes on every node does not flap the lock: each node
/// stays out for rejoin_delay, doubled on each further failure in a row.
#[test]
fn service_crashing_on_every_node_backs_off() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let crashing = || NodeOptions {
        service_args: ["--exit-after", "300ms", "--exit-code", "3"]
            .map(String::from)
            .into(),
        ..Default::default()
    };
    let (n1, n2) = (
        cluster.node_with("n1", crashing()),
        cluster.node_with("n2", crashing()),
    );
    let _wardens = [n1.start(), n2.start()];

    wait_until(secs(60), "n1 has run its crashing service 4 times", || {
        n1.runs().len() >= 4
    });
    let runs = n1.runs();
    for (k, pair) in runs.windows(2).take(3).enumerate() {
        let gap = ns(pair[1].start_ns - pair[0].last_ns);
        let backoff = cluster.rejoin_delay * 2u32.pow(k as u32);
        assert!(
            gap >= backoff,
            "after failure {} in a row n1 came back after {gap:?}, before its back-off of \
             {backoff:?}:\n  {}\n  {}",
            k + 1,
            pair[0],
            pair[1]
        );
    }
    cluster.assert_safe();
}

/// Scenario 9: a second daemon with the same node_id refuses to start (exit 2); a daemon
/// restarted right after `kill -9` waits for its old session to expire, then joins.
#[test]
fn one_daemon_per_node_id_and_restart_after_kill9_waits_for_expiry() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let mut wardens = start_active_then_standbys(&n1, &[]);
    let first_epoch = active_epoch(&status_json(&n1.config)).unwrap();

    let mut second = Warden::start(&n1.config);
    let exit = second.wait_exit(secs(15));
    assert_eq!(
        exit.code(),
        Some(2),
        "a second daemon for n1: {exit}\n{}",
        second.log()
    );
    assert!(
        second.log_mentions("n1"),
        "the refusal does not name the node:\n{}",
        second.log()
    );
    assert!(wardens[0].is_running(), "the first daemon was disturbed");
    let status = status_json(&n1.config);
    assert_eq!(active_id(&status).as_deref(), Some("n1"));
    assert_eq!(active_epoch(&status), Some(first_epoch));
    assert_eq!(n1.runs().len(), 1, "the service was restarted");

    // kill -9, then restart at once: the old session (and its member znode) still lives.
    wardens[0].kill9();
    wardens[0].wait_exit(secs(5));
    let mut restarted = n1.start();
    restarted.wait_for_log("expire", secs(10));
    assert!(
        restarted.is_running(),
        "the restart exited:\n{}",
        restarted.log()
    );

    wait_for_status(&n1.config, secs(30), "the restarted n1 is active", |s| {
        active_id(s).as_deref() == Some("n1") && active_epoch(s) > Some(first_epoch)
    });
    let runs = wait_for(secs(5), "n1's second service run", || {
        let runs = n1.runs();
        (runs.len() == 2).then_some(runs)
    });
    assert!(
        runs[1].epoch > runs[0].epoch,
        "{} then {}",
        runs[0],
        runs[1]
    );
    assert!(restarted.is_running());
    cluster.assert_safe();
}
