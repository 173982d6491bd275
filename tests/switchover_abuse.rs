//! Issue 11, item 2: a switchover request that would hold the cluster without an active
//! (a deadline far in the future from a skewed operator clock, a target that is gone) has
//! a way out, and the commands that refuse because of it say what that way is.

mod common;

use common::*;
use std::time::Duration;

/// A request from the active to a node that does not exist, lapsing in 30 years.
fn plant_far_request(cluster: &Cluster, zk: &ZkServer) {
    let control = serde_json::json!({
        "paused": false,
        "reason": null,
        "failover": {"from": "n1", "to": "n9", "by": "op@skewed-clock", "deadline": "2056-01-01T00:00:00Z"},
    });
    ZkClient::connect(&zk.connect_string())
        .put(&cluster.znode("control"), control.to_string().as_bytes());
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_far_future_switchover_request_is_withdrawn_by_failover_cancel() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);

    plant_far_request(&cluster, &zk);
    // n1 steps down for n9, which never comes; n2 is not the target and stays out.
    wait_for_status(&n1.config, secs(10), "n1 stepped down", |s| {
        active_id(s).is_none()
    });

    // The refusals name the way out.
    let pause = cli(&n2.config, &["pause", "--reason", "maintenance"]);
    assert_eq!(pause.status.code(), Some(1), "{}", text(&pause));
    assert!(
        text(&pause).contains("failover --cancel"),
        "{}",
        text(&pause)
    );
    let again = cli(&n2.config, &["failover", "--to", "n2"]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    let resume = cli(&n2.config, &["resume"]);
    assert_eq!(resume.status.code(), Some(0), "{}", text(&resume));
    assert!(
        text(&resume).contains("failover --cancel"),
        "resume must not just say nothing to do: {}",
        text(&resume)
    );

    // The way out.
    let cancel = cli(&n2.config, &["failover", "--cancel"]);
    assert_eq!(cancel.status.code(), Some(0), "{}", text(&cancel));
    assert!(
        text(&cancel).contains("withdrew the switchover request n1 -> n9"),
        "{}",
        text(&cancel)
    );
    wait_for_status(
        &n1.config,
        secs(20),
        "the cluster has an active again",
        |s| active_id(s).is_some(),
    );
    let none = cli(&n2.config, &["failover", "--cancel"]);
    assert_eq!(none.status.code(), Some(0), "{}", text(&none));
    assert!(
        text(&none).contains("nothing to withdraw"),
        "{}",
        text(&none)
    );
    cluster.assert_safe();
}

#[test]
fn failover_cancel_cannot_be_combined_with_a_target() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let out = cli(&n1.config, &["failover", "--cancel", "--to", "n2"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let _ = Duration::ZERO;
}
