//! Issue 10, items 1 and 2, end to end on a real ZooKeeper: the service is everything it
//! started, not only its main process.
//!
//! The main service is a shell wrapper around the journal service; a second journal
//! service (the "helper") writes to a side journal. The helper is what a wrapper script
//! or a master process leaves behind: when the main process exits, or when the node's
//! warden is killed and the standby fences it, the helper must be gone before the
//! standby's service starts. Proved from the journals: the helper's last line comes
//! before the standby's first.

mod common;

use common::*;
use std::fs;
use std::path::Path;

/// Replaces node's `command = [...]` with `sh -c script` (the journal service's path and
/// the node's journal are substituted for `$SERVICE` and `$JOURNAL`).
fn wrap_service(node: &Node, script: &str) {
    let text = fs::read_to_string(&node.config).unwrap();
    let start = text.find("command = [").unwrap();
    let end = start + text[start..].find('\n').unwrap();
    let script = script
        .replace("$SERVICE", JOURNAL_SERVICE)
        .replace("$JOURNAL", &node.journal.display().to_string());
    let command = toml_array(&["/bin/sh".to_string(), "-c".to_string(), script]);
    fs::write(
        &node.config,
        format!("{}command = {command}{}", &text[..start], &text[end..]),
    )
    .unwrap();
}

/// Kills whatever helper is left when the test ends, pass or fail.
struct HelperReaper(std::path::PathBuf);

impl Drop for HelperReaper {
    fn drop(&mut self) {
        kill_journal_services(&self.0);
    }
}

/// The helper's side journal next to the node's journal.
fn side_journal(node: &Node) -> std::path::PathBuf {
    node.journal.with_extension("helper")
}

/// The helper's runs ended before `other` started anything.
fn assert_helper_gone_before(helper: &Path, other: &Node) {
    let helpers = Journal::read(helper);
    assert!(
        !helpers.is_empty(),
        "the helper never ran: {}",
        helper.display()
    );
    let first = Journal::read(&other.journal)
        .into_iter()
        .map(|r| r.start_ns)
        .min()
        .expect("the standby's service ran");
    for h in &helpers {
        assert!(
            h.last_ns < first,
            "the helper (pid {}) still ran {:?} after {}'s service started",
            h.pid,
            ns(h.last_ns - first),
            other.id
        );
        assert!(!process_alive(h.pid), "the helper {} is still alive", h.pid);
    }
}

#[test]
fn a_service_whose_main_process_exits_is_stopped_whole_before_the_handover() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let helper = side_journal(&n1);
    let _reaper = HelperReaper(helper.clone());
    // The wrapper starts the helper in its process group, runs a while, and exits: the
    // helper runs on.
    wrap_service(
        &n1,
        &format!(
            "\"$SERVICE\" --journal '{}' & \"$SERVICE\" --journal \"$JOURNAL\" --exit-after 1s",
            helper.display()
        ),
    );
    let _w1 = n1.start();
    wait_for_status(&n1.config, secs(20), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    let _w2 = n2.start();
    wait_until(secs(30), "n2's service ran", || !n2.runs().is_empty());
    assert_helper_gone_before(&helper, &n2);
    // A clean handover: n1 stopped all of it, deleted its breadcrumb, nobody fenced.
    assert!(
        cluster.fence_calls().is_empty(),
        "{:?}",
        cluster.fence_calls()
    );
    cluster.assert_safe();
}

#[test]
fn a_helper_that_escaped_with_setsid_is_fenced_with_its_service_after_kill_9() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let helper = side_journal(&n1);
    let _reaper = HelperReaper(helper.clone());
    // A double-forked helper in a session of its own: out of the process group, so only
    // the service's cgroup still holds it.
    wrap_service(
        &n1,
        &format!(
            "setsid sh -c '\"$0\" --journal \"$1\" & exit 0' \"$SERVICE\" '{}'; exec \"$SERVICE\" --journal \"$JOURNAL\"",
            helper.display()
        ),
    );
    let w1 = n1.start();
    wait_for_status(&n1.config, secs(20), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    wait_until(secs(10), "the helper runs", || {
        Journal::read(&helper).iter().any(|r| r.ticks > 0)
    });
    let _w2 = n2.start();
    w1.kill9();
    wait_until(secs(30), "n2's service ran", || !n2.runs().is_empty());
    assert_helper_gone_before(&helper, &n2);
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "n2 took over without fencing n1: {:?}",
        cluster.fence_calls()
    );
    cluster.assert_safe();
}
