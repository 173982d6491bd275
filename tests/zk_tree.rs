//! The simulation's znode tree (`tests/sim/ztree.rs`, issue 32 point 3) against a real
//! ZooKeeper: the same steps (the kinds of calls the ZooKeeper backend makes: creates,
//! conditional writes and deletes, multi-ops that fail at an index, reads, children, an
//! ephemeral's end with its session) run on both, and every answer must be the same:
//! the error, or the stat's version, data, ephemeral owner (which session), child count,
//! and its zxids by rank (real zxids also count session creations, which the tree's do
//! not; their order is what the backend reads: a lock's czxid against the counter's
//! mzxid).

mod common;

#[path = "sim/ztree.rs"]
#[allow(dead_code)]
mod ztree;

use common::ZkServer;
use std::collections::BTreeSet;
use std::time::Duration;
use zookeeper_client as zk;
use ztree::{Tree, TreeOp};

#[derive(Clone, Debug)]
enum Step {
    /// A call of session 1 or 2.
    Call(u8, Call),
    /// Session 2 ends (its client is dropped): its ephemerals go.
    End2,
}

#[derive(Clone, Debug)]
enum Call {
    Create(&'static str, &'static [u8], bool),
    Set(&'static str, &'static [u8], Option<i32>),
    Delete(&'static str, Option<i32>),
    Get(&'static str),
    Children(&'static str),
    Multi(Vec<TreeOp>),
}

/// A stat as compared: version, data length, which session owns it (0: none), children,
/// czxid and mzxid (raw; ranked before comparing).
type Seen = (i32, i32, u8, i32, i64, i64);

#[derive(Debug, PartialEq)]
enum Answer {
    Err(String),
    Stat(Seen),
    Data(Vec<u8>, Seen),
    Children(Vec<String>),
    Multi(Vec<Option<Seen>>),
    MultiFailed(usize, String),
    Done,
}

fn err(e: &zk::Error) -> String {
    format!("{e:?}")
}

fn seen(s: &zk::Stat, owners: &[i64; 2]) -> Seen {
    let owner = match s.ephemeral_owner {
        0 => 0,
        o if o == owners[0] => 1,
        o if o == owners[1] => 2,
        _ => 9,
    };
    (
        s.version,
        s.data_length,
        owner,
        s.num_children,
        s.czxid,
        s.mzxid,
    )
}

fn multi_seen(r: &zk::MultiWriteResult, owners: &[i64; 2]) -> Option<Seen> {
    match r {
        zk::MultiWriteResult::SetData { stat } | zk::MultiWriteResult::Create { stat, .. } => {
            Some(seen(stat, owners))
        }
        _ => None,
    }
}

/// A multi-op's result as compared: a create's stat is left out (some servers report it
/// invalid inside a multi-op, ZOOKEEPER-4026; the backend never reads it).
fn multi_stat(r: &zk::MultiWriteResult, owners: &[i64; 2]) -> Option<Seen> {
    match r {
        zk::MultiWriteResult::Create { .. } => None,
        r => multi_seen(r, owners),
    }
}

/// The steps: the backend's shapes (its parents, a floor raised at a version, the join's
/// multi-op that checks the floor, sets the counter and creates the lock, a commit's
/// multi-op, a renewal at a stale version, a delete of a parent with children, a create
/// under an ephemeral, ...).
fn steps() -> Vec<Step> {
    use Call::{Children, Create, Delete, Get, Multi, Set};
    use Step::End2;
    #[allow(non_snake_case)]
    let Call = Step::Call;
    let check = |path: &str, version| TreeOp::Check {
        path: path.into(),
        version,
    };
    let set = |path: &str, data: &[u8], version| TreeOp::SetData {
        path: path.into(),
        data: data.to_vec(),
        version,
    };
    let create = |path: &str, data: &[u8], ephemeral| TreeOp::Create {
        path: path.into(),
        data: data.to_vec(),
        ephemeral,
    };
    let delete = |path: &str, version| TreeOp::Delete {
        path: path.into(),
        version,
    };
    vec![
        Call(1, Create("/w", b"", false)),
        Call(1, Create("/w", b"", false)),
        Call(1, Create("/w/c/x", b"", false)),
        Call(1, Create("/w/c", b"", false)),
        Call(1, Create("/w/c/members", b"", false)),
        Call(1, Get("/w/c/floor")),
        Call(1, Create("/w/c/floor", b"{}", false)),
        Call(1, Set("/w/c/floor", b"{\"n1\":3}", Some(0))),
        Call(2, Set("/w/c/floor", b"{\"n2\":3}", Some(0))),
        Call(1, Create("/w/c/epoch", b"{\"offset\":0}", false)),
        Call(1, Create("/w/c/members/n1", b"m1", true)),
        Call(2, Create("/w/c/members/n2", b"m2", true)),
        Call(2, Create("/w/c/members/n2", b"m2", true)),
        Call(1, Children("/w/c/members")),
        // The join: floor at its version, counter at its version, lock created.
        Call(
            1,
            Multi(vec![
                check("/w/c/floor", 1),
                set("/w/c/epoch", b"{\"offset\":0}", Some(0)),
                create("/w/c/lock", b"n1", true),
            ]),
        ),
        Call(1, Get("/w/c/lock")),
        Call(1, Get("/w/c/epoch")),
        // Another join, on the old versions: fails at the check, nothing applied.
        Call(
            2,
            Multi(vec![
                check("/w/c/floor", 0),
                set("/w/c/epoch", b"{\"offset\":0}", Some(0)),
                create("/w/c/lock", b"n2", true),
            ]),
        ),
        // ... at the counter.
        Call(
            2,
            Multi(vec![
                check("/w/c/floor", 1),
                set("/w/c/epoch", b"{\"offset\":0}", Some(0)),
                create("/w/c/lock", b"n2", true),
            ]),
        ),
        // ... at the lock (NodeExists), the counter's version right.
        Call(
            2,
            Multi(vec![
                check("/w/c/floor", 1),
                set("/w/c/epoch", b"{\"offset\":0}", Some(1)),
                create("/w/c/lock", b"n2", true),
            ]),
        ),
        Call(2, Get("/w/c/epoch")),
        // The commit: control absent (check fails: NoNode), then with control.
        Call(
            1,
            Multi(vec![
                check("/w/c/control", 0),
                set("/w/c/lock", b"n1@e", Some(0)),
                create("/w/c/breadcrumb", b"n1@e", false),
            ]),
        ),
        Call(1, Create("/w/c/control", b"{}", false)),
        Call(
            1,
            Multi(vec![
                check("/w/c/control", 0),
                set("/w/c/lock", b"n1@e", Some(0)),
                create("/w/c/breadcrumb", b"n1@e", false),
            ]),
        ),
        // A renewal at the version held, then at a stale one.
        Call(
            1,
            Multi(vec![
                check("/w/c/lock", 1),
                set("/w/c/members/n1", b"m1'", None),
            ]),
        ),
        Call(
            1,
            Multi(vec![
                check("/w/c/lock", 0),
                set("/w/c/members/n1", b"m1''", None),
            ]),
        ),
        Call(1, Set("/w/c/breadcrumb", b"n1@e'", Some(0))),
        Call(1, Set("/w/c/breadcrumb", b"n1@e''", Some(-1))),
        Call(1, Set("/w/c/breadcrumb", b"x", Some(7))),
        Call(1, Get("/w/c/breadcrumb")),
        Call(1, Create("/w/c/lock/child", b"", false)),
        Call(1, Delete("/w/c", None)),
        Call(1, Delete("/w/c/nothing", None)),
        Call(1, Delete("/w/c/breadcrumb", Some(0))),
        // Release: breadcrumb and lock together, then each at once.
        Call(
            1,
            Multi(vec![
                delete("/w/c/breadcrumb", Some(2)),
                delete("/w/c/lock", Some(1)),
            ]),
        ),
        Call(1, Get("/w/c/lock")),
        Call(1, Children("/w/c")),
        // Session 2 takes the lock, then ends: its lock and member go with it.
        Call(
            2,
            Multi(vec![
                check("/w/c/floor", 1),
                set("/w/c/epoch", b"{\"offset\":0}", Some(1)),
                create("/w/c/lock", b"n2", true),
            ]),
        ),
        Call(1, Get("/w/c/lock")),
        End2,
        Call(1, Get("/w/c/lock")),
        Call(1, Children("/w/c/members")),
        Call(1, Get("/w/c/members/n1")),
        Call(1, Get("/w/c")),
    ]
}

fn on_tree(steps: &[Step]) -> Vec<Answer> {
    let mut t = Tree::default();
    let owners = [1, 2];
    let one = |t: &mut Tree, op: TreeOp, owner: i64| -> Result<zk::MultiWriteResult, zk::Error> {
        t.apply(&[op], owner)
            .map(|(mut r, _)| r.pop().expect("one result"))
            .map_err(|(_, e)| e)
    };
    steps
        .iter()
        .map(|step| match step {
            Step::End2 => {
                t.end_session(2);
                Answer::Done
            }
            Step::Call(who, call) => {
                let owner = i64::from(*who);
                match call.clone() {
                    Call::Create(path, data, ephemeral) => {
                        match one(
                            &mut t,
                            TreeOp::Create {
                                path: path.into(),
                                data: data.to_vec(),
                                ephemeral,
                            },
                            owner,
                        ) {
                            Ok(r) => Answer::Stat(multi_seen(&r, &owners).expect("a stat")),
                            Err(e) => Answer::Err(err(&e)),
                        }
                    }
                    Call::Set(path, data, version) => match one(
                        &mut t,
                        TreeOp::SetData {
                            path: path.into(),
                            data: data.to_vec(),
                            version,
                        },
                        owner,
                    ) {
                        Ok(r) => Answer::Stat(multi_seen(&r, &owners).expect("a stat")),
                        Err(e) => Answer::Err(err(&e)),
                    },
                    Call::Delete(path, version) => match one(
                        &mut t,
                        TreeOp::Delete {
                            path: path.into(),
                            version,
                        },
                        owner,
                    ) {
                        Ok(_) => Answer::Done,
                        Err(e) => Answer::Err(err(&e)),
                    },
                    Call::Get(path) => match t.get(path) {
                        Ok((d, s)) => Answer::Data(d, seen(&s, &owners)),
                        Err(e) => Answer::Err(err(&e)),
                    },
                    Call::Children(path) => match t.children(path) {
                        Ok(mut c) => {
                            c.sort();
                            Answer::Children(c)
                        }
                        Err(e) => Answer::Err(err(&e)),
                    },
                    Call::Multi(ops) => match t.apply(&ops, owner) {
                        Ok((r, _)) => {
                            Answer::Multi(r.iter().map(|r| multi_stat(r, &owners)).collect())
                        }
                        Err((i, e)) => Answer::MultiFailed(i, err(&e)),
                    },
                }
            }
        })
        .collect()
}

async fn on_server(zk: &ZkServer, steps: &[Step]) -> Vec<Answer> {
    let connect = || async {
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(4))
            .connect(&zk.connect_string())
            .await
            .expect("a ZooKeeper session")
    };
    let c1 = connect().await;
    let mut c2 = Some(connect().await);
    let owners = [c1.session_id().0, c2.as_ref().expect("open").session_id().0];
    let acls = zk::Acls::anyone_all();
    let mut out = Vec::new();
    for step in steps {
        let answer = match step {
            Step::End2 => {
                drop(c2.take());
                // The server deletes its ephemerals once the close arrives.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while c1
                    .check_stat("/w/c/members/n2")
                    .await
                    .expect("a read")
                    .is_some()
                {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the closed session's ephemerals stayed"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Answer::Done
            }
            Step::Call(who, call) => {
                let c = if *who == 1 {
                    &c1
                } else {
                    c2.as_ref().expect("session 2 is open")
                };
                match call.clone() {
                    Call::Create(path, data, ephemeral) => {
                        let mode = if ephemeral {
                            zk::CreateMode::Ephemeral
                        } else {
                            zk::CreateMode::Persistent
                        };
                        match c.create(path, data, &mode.with_acls(acls)).await {
                            Ok((s, _)) => Answer::Stat(seen(&s, &owners)),
                            Err(e) => Answer::Err(err(&e)),
                        }
                    }
                    Call::Set(path, data, version) => match c.set_data(path, data, version).await {
                        Ok(s) => Answer::Stat(seen(&s, &owners)),
                        Err(e) => Answer::Err(err(&e)),
                    },
                    Call::Delete(path, version) => match c.delete(path, version).await {
                        Ok(()) => Answer::Done,
                        Err(e) => Answer::Err(err(&e)),
                    },
                    Call::Get(path) => match c.get_data(path).await {
                        Ok((d, s)) => Answer::Data(d, seen(&s, &owners)),
                        Err(e) => Answer::Err(err(&e)),
                    },
                    Call::Children(path) => match c.list_children(path).await {
                        Ok(mut l) => {
                            l.sort();
                            Answer::Children(l)
                        }
                        Err(e) => Answer::Err(err(&e)),
                    },
                    Call::Multi(ops) => {
                        let mut w = c.new_multi_writer();
                        for op in &ops {
                            match op {
                                TreeOp::Check { path, version } => {
                                    w.add_check_version(path, *version)
                                }
                                TreeOp::SetData {
                                    path,
                                    data,
                                    version,
                                } => w.add_set_data(path, data, *version),
                                TreeOp::Create {
                                    path,
                                    data,
                                    ephemeral,
                                } => {
                                    let mode = if *ephemeral {
                                        zk::CreateMode::Ephemeral
                                    } else {
                                        zk::CreateMode::Persistent
                                    };
                                    w.add_create(path, data, &mode.with_acls(acls))
                                }
                                TreeOp::Delete { path, version } => w.add_delete(path, *version),
                            }
                            .expect("a valid operation");
                        }
                        match w.commit().await {
                            Ok(r) => {
                                Answer::Multi(r.iter().map(|r| multi_stat(r, &owners)).collect())
                            }
                            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                                Answer::MultiFailed(index, err(&source))
                            }
                            Err(e) => panic!("the multi-op failed as a whole: {e}"),
                        }
                    }
                }
            }
        };
        out.push(answer);
    }
    out
}

/// Replaces each zxid by its rank among every zxid seen in the run.
fn ranked(mut answers: Vec<Answer>) -> Vec<Answer> {
    let mut zxids = BTreeSet::new();
    let mut note = |s: &Seen| {
        zxids.insert(s.4);
        zxids.insert(s.5);
    };
    for a in &answers {
        match a {
            Answer::Stat(s) | Answer::Data(_, s) => note(s),
            Answer::Multi(r) => r.iter().flatten().for_each(&mut note),
            _ => {}
        }
    }
    let rank = |z: i64| zxids.iter().position(|x| *x == z).unwrap_or(usize::MAX) as i64;
    let fix = |s: &mut Seen| {
        s.4 = rank(s.4);
        s.5 = rank(s.5);
    };
    for a in &mut answers {
        match a {
            Answer::Stat(s) | Answer::Data(_, s) => fix(s),
            Answer::Multi(r) => r.iter_mut().flatten().for_each(fix),
            _ => {}
        }
    }
    answers
}

#[test]
fn the_simulated_znode_tree_answers_as_a_real_zookeeper() {
    let zk = ZkServer::start();
    let steps = steps();
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let real = ranked(rt.block_on(on_server(&zk, &steps)));
    let sim = ranked(on_tree(&steps));
    for (i, ((step, r), s)) in steps.iter().zip(&real).zip(&sim).enumerate() {
        assert_eq!(
            r, s,
            "step {i} ({step:?}): the real ZooKeeper answered {r:?}, the simulated tree {s:?}"
        );
    }
}
