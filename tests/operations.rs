//! The operator commands on a real ZooKeeper (issue 5, "Show it works" 1 and 2; issue 4,
//! item 6): planned switchover, pause/resume, manual fencing and confirmation, history.
//!
//! The commands are called as library functions (`warden::ops::...`) with the node's
//! loaded config, as `main.rs` calls them: the exit code comes from the same function,
//! and the typed results show the reasons of refusals.
//!
//! Every multi-node test ends with `cluster.assert_safe()`: from the services' own
//! journals, no two ran at once and every promotion saw a greater `WARDEN_EPOCH`.

mod common;

use common::*;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};
use warden::config::Config;
use warden::coord::configured::Configured;
use warden::coord::zookeeper::ZkConnector;
use warden::ops::failover::{self, FailoverArgs};
use warden::ops::fence::{self, FenceArgs};
use warden::ops::history::{self, HistoryArgs};
use warden::ops::operator::OpError;
use warden::ops::pause::{self, Change, PauseArgs, ResumeArgs};
use warden::record::{History, HistoryEntry};

// ---------------------------------------------------------------------------------------
// Helpers

/// Runs one command's future on a fresh runtime; its ZooKeeper session ends with it.
fn block<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("build a tokio runtime")
        .block_on(f)
}

/// The node's ZooKeeper, as `main.rs` hands it to the commands.
fn store(cfg: &Config) -> ZkConnector {
    match Configured::from_config(cfg).expect("the store's settings") {
        Configured::Zookeeper(c) => *c,
        _ => panic!("these tests run on ZooKeeper"),
    }
}

fn config(node: &Node) -> Config {
    warden::config::load(&node.config).unwrap_or_else(|e| panic!("{}: {e}", node.config.display()))
}

fn to(node: &str, timeout: Duration) -> FailoverArgs {
    FailoverArgs {
        force: false,
        to: Some(node.to_string()),
        timeout,
        cancel: false,
    }
}

fn any_standby(timeout: Duration) -> FailoverArgs {
    FailoverArgs {
        force: false,
        to: None,
        timeout,
        cancel: false,
    }
}

/// `warden failover` as the CLI runs it: the exit code.
fn failover_code(cfg: &Config, args: &FailoverArgs) -> i32 {
    exit_code(block(failover::failover(cfg, &store(cfg), args)))
}

/// A switchover through the library: the request, then the wait.
fn switch_over(cfg: &Config, args: &FailoverArgs) -> Result<failover::Switched, OpError> {
    block(async {
        let zk = warden::ops::operator::session(&store(cfg)).await?;
        let req = failover::request(&zk, cfg, args).await?;
        failover::await_switch(&store(cfg), zk, &req).await
    })
}

/// Only the request, as a `failover` killed right after writing it leaves it.
fn request_only(cfg: &Config, args: &FailoverArgs) -> Result<failover::Requested, OpError> {
    block(async {
        let zk = warden::ops::operator::session(&store(cfg)).await?;
        failover::request(&zk, cfg, args).await
    })
}

fn set_paused(cfg: &Config, reason: Option<&str>) -> Result<Change, OpError> {
    block(async {
        let zk = warden::ops::operator::session(&store(cfg)).await?;
        pause::set_paused(&zk, reason).await
    })
}

fn clear_paused(cfg: &Config) -> Result<Change, OpError> {
    block(async {
        let zk = warden::ops::operator::session(&store(cfg)).await?;
        pause::clear_paused(&zk).await
    })
}

fn read_history(cfg: &Config) -> Vec<HistoryEntry> {
    block(async {
        let zk = store(cfg).connect().await.expect("a session");
        zk.read_history().await.expect("history reads").entries
    })
}

/// `warden history`'s text for these entries.
fn history_text(cfg: &Config, entries: &[HistoryEntry]) -> String {
    let history = History {
        entries: entries.to_vec(),
        ..History::default()
    };
    history::to_text(&cfg.cluster.name, &history, &[])
}

fn fence_args(node: Option<&str>) -> FenceArgs {
    FenceArgs {
        node: node.map(str::to_string),
        ..Default::default()
    }
}

/// The reason of a refusal; anything else fails the test.
fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, OpError>) -> String {
    match r {
        Err(OpError::Refused(why)) => why,
        other => {
            dump_logs();
            panic!("{what}: expected a refusal, got {other:?}")
        }
    }
}

/// The recorder fence never ran: nobody attempted to fence anybody.
fn assert_nobody_fenced(cluster: &Cluster) {
    let calls = cluster.fence_calls();
    assert!(calls.is_empty(), "fencing was attempted: {calls:?}");
}

/// `fence NODE --dry-run` through the library: the plan, or why not.
fn plan(cfg: &Config, node: &str, force: bool) -> Result<fence::Plan, OpError> {
    block(async {
        let zk = warden::ops::operator::session(&store(cfg)).await?;
        fence::plan(&zk, cfg, node, force).await
    })
}

/// `fence NODE` through the library: the report, or why it was refused.
fn fence_node(cfg: &Config, node: &str, force: bool) -> Result<fence::Fenced, OpError> {
    block(async {
        let zk = warden::ops::operator::session(&store(cfg)).await?;
        fence::fence_node(&zk, cfg, node, force).await
    })
}

fn assert_mentions(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "{text:?} does not mention {n:?}");
    }
}

/// Writes `control` directly: `{"paused": false, "failover": {...}}` with a deadline
/// `in_` from now, as a command that wrote it and died would leave it.
fn plant_request(cluster: &Cluster, zk: &ZkServer, from: &str, to: &str, in_: Duration) {
    let deadline = warden::record::rfc3339(SystemTime::now() + in_);
    let control = serde_json::json!({
        "paused": false,
        "reason": null,
        "failover": {"from": from, "to": to, "by": "test@killed-command", "deadline": deadline},
    });
    ZkClient::connect(&zk.connect_string())
        .put(&cluster.znode("control"), control.to_string().as_bytes());
}

fn clear_control(cluster: &Cluster, zk: &ZkServer) {
    ZkClient::connect(&zk.connect_string()).put(
        &cluster.znode("control"),
        br#"{"paused": false, "reason": null, "failover": null}"#,
    );
}

// ---------------------------------------------------------------------------------------
// failover

/// Issue 5, scenario 1: `failover --to n2` on three nodes: n2 becomes active, n1 stands
/// by, nobody fenced anybody, the services never overlapped; then `failover` with no
/// target moves the active to some other healthy standby.
#[test]
fn failover_to_n2_hands_over_cleanly_without_fencing() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    let _wardens = start_active_then_standbys(&n1, &[&n2, &n3]);
    let (_, first_epoch) = wait_for_active(&n1.config, secs(10));
    let cfg = config(&n1);

    assert_eq!(failover_code(&cfg, &to("n2", secs(30))), 0);
    let status = status_json(&n1.config);
    assert_eq!(active_id(&status).as_deref(), Some("n2"), "{status:#}");
    let second_epoch = active_epoch(&status).unwrap();
    assert!(second_epoch > first_epoch, "{status:#}");
    wait_for_status(&n1.config, secs(20), "n1 stands by again", |s| {
        member_role(s, "n1").as_deref() == Some("standby")
            && member_role(s, "n3").as_deref() == Some("standby")
            && s["failover"].is_null()
    });
    assert!(
        cluster.fence_calls().is_empty(),
        "a planned switchover fenced: {:?}",
        cluster.fence_calls()
    );
    let n1_run = n1.last_run().unwrap();
    assert!(
        n1_run.stopped,
        "n1's service was not stopped cleanly: {n1_run}"
    );
    assert_eq!(n2.runs().len(), 1);

    // Any healthy standby: n1 or n3 takes over from n2; the result names it and the time.
    let done = switch_over(&cfg, &any_standby(secs(30))).unwrap();
    assert_eq!(done.from, "n2");
    assert!(done.to == "n1" || done.to == "n3", "{done:?}");
    assert!(done.epoch.is_some_and(|e| e > second_epoch), "{done:?}");
    assert!(done.took < secs(30), "{done:?}");
    let status = wait_for_status(&n1.config, secs(20), "n2 stands by", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    assert_eq!(active_id(&status), Some(done.to.clone()), "{status:#}");
    assert_nobody_fenced(&cluster);
    cluster.assert_safe();
}

/// Issue 5, scenario 1, refusals: an unknown or active target, a pending request, a
/// paused cluster, no healthy standby, no active: exit 1 with the reason, and nothing
/// moves. ZooKeeper unreachable: exit 3.
#[test]
fn failover_refusals_say_why_and_change_nothing() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let cfg = config(&n2);

    let why = refused("--to n9", request_only(&cfg, &to("n9", secs(5))));
    assert_mentions(&why, &["n9 is not a member", "n1, n2"]);
    assert_eq!(failover_code(&cfg, &to("n9", secs(5))), 1);
    let why = refused("--to n1", request_only(&cfg, &to("n1", secs(5))));
    assert_mentions(&why, &["n1 is already the active node"]);

    // Another request pending (from a node that is not active, so nothing moves).
    plant_request(&cluster, &zk, "ghost", "ghost2", secs(60));
    let why = refused("pending", request_only(&cfg, &any_standby(secs(5))));
    assert_mentions(&why, &["another switchover is pending", "ghost -> ghost2"]);
    let why = refused("pause while pending", set_paused(&cfg, Some("x")));
    assert_mentions(&why, &["a switchover is pending", "ghost -> ghost2"]);
    clear_control(&cluster, &zk);

    // Paused.
    assert_eq!(
        set_paused(&cfg, Some("kernel upgrade")).unwrap(),
        Change::Done {
            reason: Some("kernel upgrade".into())
        }
    );
    let why = refused("paused", request_only(&cfg, &to("n2", secs(5))));
    assert_mentions(&why, &["paused", "kernel upgrade", "warden resume"]);
    assert_eq!(failover_code(&cfg, &to("n2", secs(5))), 1);
    assert!(matches!(clear_paused(&cfg), Ok(Change::Done { .. })));

    let status = status_json(&n1.config);
    assert_eq!(active_id(&status).as_deref(), Some("n1"), "{status:#}");
    assert!(status["failover"].is_null(), "{status:#}");
    assert_eq!(n1.runs().len(), 1, "the active's service was restarted");

    // No healthy standby: a cluster of one.
    let solo = Cluster::new(&zk);
    let s1 = solo.node("s1");
    let _solo_warden = s1.start();
    wait_for_active(&s1.config, secs(30));
    let why = refused("solo", request_only(&config(&s1), &any_standby(secs(5))));
    assert_mentions(&why, &["no standby is healthy", "s1 stays active"]);
    assert_eq!(failover_code(&config(&s1), &any_standby(secs(5))), 1);

    // No active: a cluster with no warden running.
    let empty = Cluster::new(&zk);
    let e1 = empty.node("e1");
    let why = refused("empty", request_only(&config(&e1), &any_standby(secs(5))));
    assert_mentions(&why, &["has no active node"]);

    // ZooKeeper unreachable: exit 3 within connect_timeout, for every command.
    let down = Cluster::with_connect(&format!("127.0.0.1:{}", free_port()));
    let d1 = config(&down.node("d1"));
    assert_eq!(failover_code(&d1, &any_standby(secs(5))), 3);
    assert_eq!(
        exit_code(block(pause::pause(&d1, &store(&d1), &PauseArgs::default()))),
        3
    );
    assert_eq!(
        exit_code(block(pause::resume(
            &d1,
            &store(&d1),
            &ResumeArgs::default()
        ))),
        3
    );
    assert_eq!(
        exit_code(block(history::history(
            &d1,
            &store(&d1),
            &HistoryArgs::default()
        ))),
        3
    );
    assert_eq!(
        exit_code(block(fence::fence(
            &d1,
            &store(&d1),
            &fence_args(Some("n1"))
        ))),
        3
    );

    assert_nobody_fenced(&cluster);
    cluster.assert_safe();
    solo.assert_safe();
}

/// Issue 5, scenario 1: a `failover` killed right after writing its request, whose
/// target never takes over: the old active steps down, everybody else stays out until
/// the deadline, and then the cluster elects an active again, without fencing.
#[test]
fn abandoned_failover_request_lapses_and_the_cluster_elects_again() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);

    // The killed command's request names a target that is gone (n9).
    let lapse = secs(4);
    let deadline = std::time::Instant::now() + lapse;
    plant_request(&cluster, &zk, "n1", "n9", lapse);
    wait_for_status(&n1.config, secs(5), "n1 stepped down", |s| {
        active_id(s).is_none()
    });
    let status = wait_for_status(
        &n1.config,
        secs(20),
        "the cluster has an active again",
        |s| active_id(s).is_some(),
    );
    let elected_after = std::time::Instant::now();
    assert!(
        elected_after + ms(200) >= deadline,
        "someone was promoted {:?} before the request lapsed: {status:#}",
        deadline - elected_after
    );
    assert_nobody_fenced(&cluster);
    cluster.assert_safe();
}

/// SPEC §9: the `--to` target dies during the switchover: the command says so and exits
/// 1 when the request lapses, and the cluster then elects normally.
#[test]
fn failover_target_dying_midway_fails_with_the_reason_and_the_cluster_recovers() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    let wardens = start_active_then_standbys(&n1, &[&n2, &n3]);
    let cfg = config(&n3);

    // n2 still looks like a healthy standby, but its warden never acts again.
    wardens[1].sigstop();
    let started = std::time::Instant::now();
    let err = match switch_over(&cfg, &to("n2", secs(5))) {
        Err(OpError::Failed(why)) => why,
        other => panic!("expected a failed switchover, got {other:?}"),
    };
    assert!(started.elapsed() >= secs(4), "returned before the deadline");
    assert_mentions(
        &err,
        &[
            "no new active within 5s",
            "n2 left the cluster",
            "lapses at",
        ],
    );
    let (active, _) = wait_for_active(&n1.config, secs(20));
    assert_ne!(active, "n2");
    assert_nobody_fenced(&cluster);
    cluster.assert_safe();
}

// ---------------------------------------------------------------------------------------
// pause / resume, history

/// Issue 5, scenario 2: paused, `kill -9` of the active's warden promotes nobody; after
/// `resume` the standby fences the dead incarnation and promotes. Both show in history.
#[test]
fn paused_cluster_promotes_nobody_until_resumed() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let cfg = config(&n2);

    assert_eq!(
        exit_code(block(pause::pause(
            &cfg,
            &store(&cfg),
            &PauseArgs {
                reason: Some("disk swap".into())
            }
        ))),
        0
    );
    assert_eq!(
        set_paused(&cfg, Some("another")).unwrap(),
        Change::AlreadySo {
            reason: Some("disk swap".into())
        },
        "a second pause changes nothing"
    );
    let status = status_json(&n1.config);
    assert_eq!(status["paused"], true, "{status:#}");
    assert_eq!(active_id(&status).as_deref(), Some("n1"), "{status:#}");
    let why = refused(
        "failover while paused",
        request_only(&cfg, &any_standby(secs(5))),
    );
    assert_mentions(&why, &["paused", "disk swap"]);

    wardens[0].kill9();
    wardens[0].wait_exit(secs(5));
    // Twice the session timeout: n1's session has long expired, and nobody moved.
    holds_for(
        cluster.session_timeout * 2 + secs(1),
        "no promotion while paused",
        || match n2.runs().as_slice() {
            [] => Ok(()),
            runs => Err(format!("n2 promoted while paused: {runs:?}")),
        },
    );
    let status = status_json(&n2.config);
    assert_eq!(active_id(&status), None, "{status:#}");
    assert!(
        n2.runs().is_empty(),
        "n2 promoted while paused: {:?}",
        n2.runs()
    );
    assert!(
        cluster.fence_calls().is_empty(),
        "n2 fenced while paused: {:?}",
        cluster.fence_calls()
    );

    assert_eq!(
        exit_code(block(pause::resume(
            &cfg,
            &store(&cfg),
            &ResumeArgs::default()
        ))),
        0
    );
    assert_eq!(
        clear_paused(&cfg).unwrap(),
        Change::AlreadySo { reason: None }
    );
    wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "n2 promoted without fencing n1: {:?}",
        cluster.fence_calls()
    );

    // history: newest first by the order of writes (not by the writers' clocks, which
    // two nodes writing at once may see in the other order: issue 31, 3), the operator's
    // pause and resume among the transitions.
    let entries = read_history(&cfg);
    let find = |from: &str, to: &str| {
        entries
            .iter()
            .position(|e| e.from == from && e.to == to)
            .unwrap_or_else(|| panic!("no {from} -> {to} in history: {entries:#?}"))
    };
    let paused = find("running", "paused");
    let resumed = find("paused", "running");
    assert!(resumed < paused, "resume is not newer than pause");
    assert!(
        entries[paused].node_id.contains('@'),
        "{:?}",
        entries[paused]
    );
    assert_mentions(&entries[paused].reason, &["paused by", "disk swap"]);
    let promoted = entries
        .iter()
        .position(|e| e.node_id == "n2" && e.to == "active")
        .unwrap_or_else(|| panic!("n2's promotion is not in history: {entries:#?}"));
    assert!(promoted < resumed, "n2 promoted before the resume");
    let text = history_text(&cfg, &entries);
    assert_mentions(
        &text,
        &["running → paused", "paused → running", "disk swap"],
    );
    assert_eq!(
        exit_code(block(history::history(
            &cfg,
            &store(&cfg),
            &HistoryArgs { json: true }
        ))),
        0
    );
    assert_eq!(
        exit_code(block(history::history(
            &cfg,
            &store(&cfg),
            &HistoryArgs { json: false }
        ))),
        0
    );
    cluster.assert_safe();
}

// ---------------------------------------------------------------------------------------
// fence

/// Issue 4, item 6: the only fence method always fails, the active's warden is killed,
/// and the standby cannot promote. `fence n1 --dry-run` prints the chain against the
/// breadcrumb's n1 and changes nothing; `fence n1` fails (exit 1); `fence --confirm n1`
/// deletes the breadcrumb, and the standby promotes without fencing. History shows the
/// confirmation. The standby sits out 20 s after its failed fence (`rejoin_delay`), and
/// joins again on seeing the breadcrumb gone, not at the back-off's end (SPEC §4.8).
#[test]
fn confirm_lets_a_stuck_standby_promote_without_fencing() {
    let zk = ZkServer::start();
    let mut cluster = Cluster::new(&zk);
    cluster.rejoin_delay = secs(20);
    let only_recorder = NodeOptions {
        fences: Some(vec![cluster.recorder_fence()]),
        ..Default::default()
    };
    let n1 = cluster.node_with("n1", only_recorder.clone());
    let n2 = cluster.node_with("n2", only_recorder);
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let cfg = config(&n2);
    let client = ZkClient::connect(&zk.connect_string());
    let breadcrumb_path = cluster.znode("breadcrumb");

    wardens[0].kill9();
    wardens[0].wait_exit(secs(5));
    wait_until(secs(30), "n2 tried to fence n1", || {
        !cluster.fence_calls().is_empty()
    });
    wardens[1].wait_for_log("staying out of the election for 20s", secs(30));
    assert!(n2.runs().is_empty(), "n2 promoted although fencing failed");

    // --dry-run: the plan against n1's recorded incarnation; nothing changes.
    let breadcrumb = client.get(&breadcrumb_path).expect("a breadcrumb");
    let n1_plan = plan(&cfg, "n1", false).unwrap();
    assert_eq!(n1_plan.target.node_id, "n1");
    assert_eq!(n1_plan.methods.len(), 1, "{:?}", n1_plan.methods);
    assert_mentions(&n1_plan.methods[0], &["script:fence-recorder.sh"]);
    let dry = FenceArgs {
        dry_run: true,
        ..fence_args(Some("n1"))
    };
    assert_eq!(exit_code(block(fence::fence(&cfg, &store(&cfg), &dry))), 0);
    assert_eq!(client.get(&breadcrumb_path).as_ref(), Some(&breadcrumb));

    // The breadcrumb names n1, not n2.
    let why = refused("fence n2", plan(&cfg, "n2", false));
    assert_mentions(&why, &["the breadcrumb names n1", "not n2"]);
    assert_eq!(
        exit_code(block(fence::fence(
            &cfg,
            &store(&cfg),
            &fence_args(Some("n2"))
        ))),
        1
    );
    let confirm_n2 = FenceArgs {
        confirm: true,
        ..fence_args(Some("n2"))
    };
    assert_eq!(
        exit_code(block(fence::fence(&cfg, &store(&cfg), &confirm_n2))),
        1
    );
    let unreadable = FenceArgs {
        confirm: true,
        unreadable: true,
        ..fence_args(None)
    };
    assert_eq!(
        exit_code(block(fence::fence(&cfg, &store(&cfg), &unreadable))),
        1,
        "the breadcrumb is readable"
    );

    // A real manual fence with this chain fails: exit 1, breadcrumb kept.
    assert_eq!(
        exit_code(block(fence::fence(
            &cfg,
            &store(&cfg),
            &fence_args(Some("n1"))
        ))),
        1
    );
    assert_eq!(client.get(&breadcrumb_path).as_ref(), Some(&breadcrumb));

    // The only fence method always fails, so n2 promoting at all proves it promoted
    // without fencing.
    let confirm = FenceArgs {
        confirm: true,
        ..fence_args(Some("n1"))
    };
    let confirmed_at = Instant::now();
    assert_eq!(
        exit_code(block(fence::fence(&cfg, &store(&cfg), &confirm))),
        0
    );
    wardens[1].wait_for_log("joining the election again now", secs(30));
    wait_for_status(&n2.config, secs(60), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    eprintln!(
        "timing: fence --confirm to the standby active, out of a 20s back-off: {:?}",
        confirmed_at.elapsed()
    );

    let entries = read_history(&cfg);
    let confirmed = entries
        .iter()
        .position(|e| e.to == fence::CONFIRMED_DOWN)
        .unwrap_or_else(|| panic!("no confirmation in history: {entries:#?}"));
    assert_eq!(entries[confirmed].node_id, "n1");
    assert_mentions(&entries[confirmed].reason, &["confirmed down by", "@"]);
    let promoted = entries
        .iter()
        .position(|e| e.node_id == "n2" && e.to == "active")
        .unwrap_or_else(|| panic!("n2's promotion is not in history: {entries:#?}"));
    assert!(
        promoted < confirmed,
        "the promotion is not newer than the confirmation"
    );
    let attempt: Vec<&HistoryEntry> = entries[promoted..]
        .iter()
        .filter(|e| e.node_id == "n2")
        .take_while(|e| e.from != "standby")
        .collect();
    assert!(
        attempt
            .iter()
            .all(|e| e.from != "fencing" && e.to != "fencing"),
        "n2's promotion went through fencing: {attempt:#?}"
    );
    let manual = entries
        .iter()
        .find(|e| e.to == fence::NOT_FENCED)
        .unwrap_or_else(|| panic!("the failed manual fence is not in history: {entries:#?}"));
    assert_eq!(manual.node_id, "n1");
    let text = history_text(&cfg, &entries);
    assert_mentions(
        &text,
        &["breadcrumb → confirmed down", "breadcrumb → not fenced"],
    );

    // Nothing left to confirm.
    assert_eq!(
        exit_code(block(fence::fence(&cfg, &store(&cfg), &confirm))),
        1
    );
    cluster.assert_safe();
}

/// `fence NODE` refuses the lock holder without `--force`; with it, the chain (recorder
/// fails, then `signal`) kills the live active's warden and service, and the standby then
/// takes over.
#[test]
fn manual_fence_refuses_the_lock_holder_unless_forced() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let cfg = config(&n2);
    let service = n1.last_run().unwrap();

    let why = refused("fence the active", fence_node(&cfg, "n1", false));
    assert_mentions(&why, &["n1 holds the lock", "--force"]);
    assert_eq!(
        exit_code(block(fence::fence(
            &cfg,
            &store(&cfg),
            &fence_args(Some("n1"))
        ))),
        1
    );
    let dry = FenceArgs {
        dry_run: true,
        force: true,
        ..fence_args(Some("n1"))
    };
    assert_eq!(exit_code(block(fence::fence(&cfg, &store(&cfg), &dry))), 0);
    assert!(wardens[0].is_running() && process_alive(service.pid));
    assert!(cluster.fence_calls().is_empty(), "the dry run ran a method");

    let fenced = fence_node(&cfg, "n1", true).unwrap();
    assert_eq!(
        fenced.report.fenced_by(),
        Some("signal"),
        "{}",
        fenced.report.summary()
    );
    wardens[0].wait_exit(secs(5));
    wait_until(secs(5), "n1's service is gone", || {
        !process_alive(service.pid)
    });

    wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let entries = read_history(&cfg);
    assert!(
        entries
            .iter()
            .any(|e| e.node_id == "n1" && e.to == fence::FENCED && e.reason.contains("signal")),
        "{entries:#?}"
    );
    cluster.assert_safe();
}

/// `fence --confirm --unreadable` deletes only a breadcrumb that cannot be parsed; `fence
/// NODE` refuses it and says what to run.
#[test]
fn confirm_unreadable_deletes_only_a_garbage_breadcrumb() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let cfg = config(&n1);
    let client = ZkClient::connect(&zk.connect_string());
    let breadcrumb = cluster.znode("breadcrumb");
    let unreadable = FenceArgs {
        confirm: true,
        unreadable: true,
        ..fence_args(None)
    };

    // Absent: nothing to delete.
    assert_eq!(
        exit_code(block(fence::fence(&cfg, &store(&cfg), &unreadable))),
        1
    );

    client.put(&breadcrumb, b"\xff\xfe{ not a record");
    let why = refused("fence n1 over garbage", plan(&cfg, "n1", true));
    assert_mentions(&why, &["unreadable", "fence --confirm --unreadable"]);
    let confirm_n1 = FenceArgs {
        confirm: true,
        ..fence_args(Some("n1"))
    };
    assert_eq!(
        exit_code(block(fence::fence(&cfg, &store(&cfg), &confirm_n1))),
        1
    );
    assert!(client.exists(&breadcrumb));

    assert_eq!(
        exit_code(block(fence::fence(&cfg, &store(&cfg), &unreadable))),
        0
    );
    assert!(!client.exists(&breadcrumb));
    let entries = read_history(&cfg);
    assert_eq!(entries[0].to, fence::CONFIRMED_DOWN, "{entries:#?}");
    assert_eq!(entries[0].node_id, fence::UNREADABLE_NODE);
    assert_mentions(
        &entries[0].reason,
        &["unreadable breadcrumb", "confirmed down by"],
    );

    // With the breadcrumb gone, n1 promotes without fencing.
    let _warden = n1.start();
    wait_for_active(&n1.config, secs(30));
    assert_nobody_fenced(&cluster);
    cluster.assert_safe();
}
