//! SPEC §6b (issue 33): each node's data position, as its check prints it, in its member
//! record and in `status`, against a real ZooKeeper and real wardens.

mod common;

use common::*;
use std::fs;

/// A standby whose `standby_command` prints a position (its last stdout line) shows it in
/// `status --json` (with when it was read) and in the text table; a new one replaces it,
/// and garbage makes it unknown. The active's comes from its `health.command`.
#[test]
fn a_standbys_position_is_in_its_member_record_and_in_status() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let file = cluster.dir().join("n2-position");
    fs::write(&file, "1000\n").unwrap();
    let check = cluster.script(
        "position.sh",
        &format!("echo looking at the replica\ncat '{}'\n", file.display()),
    );
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    with_standby_command(&n2, &check);
    let health = cluster.script("health.sh", "echo serving\necho 5000\n");
    let text = fs::read_to_string(&n1.config).unwrap().replace(
        "[health]\nkind = \"none\"\n",
        &format!(
            "[health]\nkind = \"exec\"\ncommand = [{}]\ninterval = \"200ms\"\n",
            toml_str(&health.display().to_string())
        ),
    );
    fs::write(&n1.config, text).unwrap();
    let wardens = start_active_then_standbys(&n1, &[&n2]);
    let position = |s: &serde_json::Value| member(s, "n2").map(|m| m["position"].clone());
    let status = wait_for_status(&n1.config, secs(30), "n2's position 1000", |s| {
        position(s).is_some_and(|p| json_u64(&p) == Some(1000))
    });
    let at = member(&status, "n2").unwrap()["position_at"].clone();
    assert!(
        at.as_str()
            .is_some_and(|t| t.ends_with('Z') && t.contains('T')),
        "{status:#}"
    );
    wait_for_status(&n1.config, secs(30), "n1's position 5000", |s| {
        member(s, "n1").is_some_and(|m| json_u64(&m["position"]) == Some(5000))
    });
    fs::write(&file, "2000\n").unwrap();
    wait_for_status(&n1.config, secs(30), "n2's position 2000", |s| {
        position(s).is_some_and(|p| json_u64(&p) == Some(2000))
    });
    let out = cli(&n1.config, &["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("n2 ") && l.split_whitespace().nth(4) == Some("2000")),
        "{text}"
    );
    fs::write(&file, "not a number\n").unwrap();
    wait_for_status(&n1.config, secs(30), "n2's position unknown", |s| {
        position(s).is_some_and(|p| p.is_null())
    });
    wardens[1].wait_for_log("\"not a number\" is not a position", secs(5));
    cluster.assert_safe();
}
