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

/// SPEC §6a.3 and §6b: `failover` without `--to` names the best-placed standby, at one
/// priority the one with the greater position (n3, though n2's node id is smaller);
/// `failover --to` refuses, naming both positions, a target behind it by more than
/// `election.max_lag`, and `--force` lets it through.
#[test]
fn failover_names_the_standby_with_the_most_data_and_refuses_one_too_far_behind() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    for (n, position) in [(&n1, 1_000), (&n2, 100), (&n3, 500)] {
        let check = cluster.script(&format!("{}-check.sh", n.id), &format!("echo {position}\n"));
        with_standby_command(n, &check);
        let text = fs::read_to_string(&n.config).unwrap().replacen(
            "[election]\n",
            "[election]\nmax_lag = 300\n",
            1,
        );
        fs::write(&n.config, text).unwrap();
    }
    let _wardens = start_active_then_standbys(&n1, &[&n2, &n3]);
    wait_for_status(&n1.config, secs(30), "n2 and n3 show positions", |s| {
        member(s, "n2").is_some_and(|m| json_u64(&m["position"]) == Some(100))
            && member(s, "n3").is_some_and(|m| json_u64(&m["position"]) == Some(500))
    });
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("n2 is at position 100, 400 behind n3 at position 500")
            && said.contains("election.max_lag = 300")
            && said.contains("--force"),
        "{said}"
    );
    // Refused before anything was written.
    let status = status_json(&n1.config);
    assert!(status["failover"].is_null(), "{status:#}");
    assert_eq!(active_id(&status).as_deref(), Some("n1"));

    let out = cli(&n1.config, &["failover", "--timeout", "30s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("n1 -> n3"),
        "{}",
        describe(&out)
    );
    assert_eq!(active_id(&status_json(&n1.config)).as_deref(), Some("n3"));

    // n1, now a standby at position 1000, is best-placed; n2 may still be forced.
    wait_for_status(&n1.config, secs(30), "n1 is a healthy standby", |s| {
        member_role(s, "n1").as_deref() == Some("standby")
            && member(s, "n1").is_some_and(|m| json_u64(&m["position"]) == Some(1_000))
    });
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let out = cli(
        &n1.config,
        &["failover", "--to", "n2", "--force", "--timeout", "30s"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(active_id(&status_json(&n1.config)).as_deref(), Some("n2"));
    cluster.assert_safe();
}
