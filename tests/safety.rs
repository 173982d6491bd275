//! Safety fixes of issue 10 against a real ZooKeeper and real processes:
//!
//! - the lease follows the session timeout the server *granted*, not the configured one
//!   (SPEC §4 "The lease", §9): an active cut off from ZooKeeper is down before its real
//!   session can expire, even when the standby's fence does nothing;
//! - a member znode of our node id held by another session: a fast reboot of this machine
//!   waits for that session, another machine's warden is refused (SPEC §4.9);
//! - a fence abandoned because warden stops is killed with its whole process group (§5);
//! - a breadcrumb of our node id from another machine is fenced by the whole chain, our
//!   own dead leftovers on this boot by `signal` alone (§5);
//! - a node is `active` only once its service's identity is in the breadcrumb (§4.3d).
//!
//! Every multi-node test ends with `cluster.assert_safe()`: from the services' own
//! journals, no two ran at once and every promotion saw a greater `WARDEN_EPOCH`.

mod common;
mod ensemble;

use common::*;
use ensemble::net::Firewall;
use ensemble::zk::Ensemble;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

// ---------------------------------------------------------------------------------------
// This machine's identity, and identities that are not this machine's

/// `/etc/machine-id`.
fn machine_id() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .expect("read /etc/machine-id (systemd-machine-id-setup writes it)")
        .trim()
        .to_string()
}

/// `/proc/sys/kernel/random/boot_id`.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .expect("read the boot id")
        .trim()
        .to_string()
}

/// The inode of this process's pid namespace (`/proc/self/ns/pid` reads `pid:[N]`).
fn pid_ns() -> u64 {
    let link = std::fs::read_link("/proc/self/ns/pid").expect("read /proc/self/ns/pid");
    let link = link.to_string_lossy();
    link.strip_prefix("pid:[")
        .and_then(|s| s.strip_suffix(']'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected /proc/self/ns/pid: {link}"))
}

/// A 32-digit hex id that is neither this machine's id nor this boot's: a machine id or
/// boot id of "somewhere else". `salt` tells several apart.
fn other_id(salt: u64) -> String {
    let id = format!(
        "{:016x}{:016x}",
        0x0dd0_0000_0000_0000 | salt,
        mono_now_ns() ^ u64::from(std::process::id())
    );
    assert_ne!(id, machine_id().replace('-', ""));
    assert_ne!(id, boot_id().replace('-', ""));
    id
}

/// A uid of no account for a warden of its own (no passwd entry needed), distinct per test
/// process (nextest runs each test in its own) and from the ensemble's servers' uids.
fn spare_uid() -> u32 {
    2_100_000_000 + std::process::id() % 1_000_000
}

/// A process that existed on this boot and is gone now: its pid and start time, as a
/// killed warden or service leaves them in a record. It led its own process group.
fn dead_process() -> (u32, u64) {
    let mut child = Command::new("sleep")
        .arg("1000")
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .expect("run sleep");
    let pid = child.id();
    let start_time = proc_stat(pid)
        .expect("a running child has a stat")
        .start_time;
    child.kill().expect("kill the child");
    child.wait().expect("reap the child");
    assert!(!process_alive(pid));
    (pid, start_time)
}

// ---------------------------------------------------------------------------------------
// Small helpers of these tests

/// The status code of `GET path` from warden's HTTP face, or `None` if nothing answers.
fn http_status(addr: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    reply.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// The real uid of a process (`Uid:` in `/proc/PID/status`).
fn process_uid(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The JSON of a znode.
fn znode_json(client: &ZkClient, path: &str) -> Option<Value> {
    client.get(path).map(|data| {
        serde_json::from_slice(&data)
            .unwrap_or_else(|e| panic!("{path} holds no JSON ({e}): {data:?}"))
    })
}

/// The lines of `log` that mention every one of `words` (ignoring case).
fn lines_with<'a>(log: &'a str, words: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|l| {
            let l = l.to_lowercase();
            words.iter().all(|w| l.contains(&w.to_lowercase()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// 1. The lease follows the granted session timeout

/// ZooKeeper grants 2s where warden asks for 20s. Both wardens say so and publish "2s";
/// when the active's warden alone (its own uid) is cut off from ZooKeeper, its service is
/// down before the standby's starts, although the standby's fence reports *fenced*
/// without touching anything. (Against one server this does not isolate the lease: the
/// server closes a silent connection after a session timeout and then gives the session
/// another full timeout to reconnect, so the cut-off client gives its session up, and
/// warden stops the service, before the server expires it, whatever the lease. The next
/// test isolates it.)
#[test]
fn lease_follows_granted_session_timeout_when_active_is_cut_off() {
    let zk = ZkServer::start_with_config("maxSessionTimeout=2000\n");
    let mut cluster = Cluster::new(&zk);
    cluster.session_timeout = secs(20);
    // A fence that fences nothing: the old active must stop its service by itself.
    let no_op_fence = cluster.no_op_fence();
    let opts = NodeOptions {
        fences: Some(vec![no_op_fence]),
        ..Default::default()
    };
    let (n1, n2) = (
        cluster.node_with("n1", opts.clone()),
        cluster.node_with("n2", opts),
    );

    // n1 runs under a uid of its own, so that a firewall rule can cut off its traffic
    // alone; it reads its config and writes its journal in the cluster's dir.
    let uid = spare_uid();
    std::os::unix::fs::chown(cluster.dir(), Some(uid), Some(uid)).expect("chown the test dir");
    std::fs::set_permissions(&n1.config, std::fs::Permissions::from_mode(0o644))
        .expect("chmod n1's config");
    let mut fw = Firewall::new();

    let mut w1 = n1.start_as(uid);
    assert_eq!(
        process_uid(w1.pid()),
        Some(uid),
        "n1's warden does not run under its own uid"
    );
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    let old = wait_for(secs(10), "n1's service runs", || {
        n1.last_run().filter(|r| process_alive(r.pid))
    });
    let mut w2 = n2.start();
    let status = wait_for_status(
        &n1.config,
        secs(30),
        "n2 is a standby and both members publish a session timeout",
        |s| {
            member_role(s, "n2").as_deref() == Some("standby")
                && ["n1", "n2"]
                    .iter()
                    .all(|n| member(s, n).is_some_and(|m| !m["session_timeout"].is_null()))
        },
    );
    for (node, w) in [("n1", &w1), ("n2", &w2)] {
        assert_eq!(
            member(&status, node).unwrap()["session_timeout"],
            "2s",
            "{node} does not publish the granted session timeout: {status:#}"
        );
        let log = w.log();
        let warned = lines_with(&log, &["warn", "granted", " 2s", " 20s"]);
        assert!(
            !warned.is_empty(),
            "{node} did not warn that ZooKeeper granted 2s instead of the configured 20s:\n{log}"
        );
    }
    assert_eq!(
        Journal::read(&n1.journal).len(),
        1,
        "n1's service (uid {uid}) did not journal"
    );

    // The fault: n1's warden (and only it: its service writes a file, n2 and the test
    // reach ZooKeeper as before) loses ZooKeeper.
    fw.cut_owner(uid, "127.0.0.1", zk.port());
    wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let new = wait_for(secs(10), "n2's service started", || n2.last_run());
    assert!(
        !process_alive(old.pid),
        "n1's service {} still runs after n2's started",
        old.pid
    );
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "n2 promoted without running its (no-op) fence on n1: {:?}",
        cluster.fence_calls()
    );
    assert!(new.epoch > old.epoch, "{old} then {new}");
    assert!(w2.is_running(), "n2's warden exited:\n{}", w2.log());
    // n1 may have been fenced or may still run cut off: either way its service is gone.
    let _ = w1.try_exit();
    cluster.assert_safe();
    fw.heal();
}

/// The same where only the lease can tell: n1's server is cut off from the leader and
/// keeps answering n1's pings (until `syncLimit`, longer than the session) while the
/// leader expires n1's 2s session, and n2, on the leader, takes over with a fence that
/// does nothing. n1's client does not see its session end in time; its renewals (writes)
/// fail, so its service must be down by the end of a lease of 1s (half the granted 2s),
/// not 10s (half the configured 20s), before n2's starts. With the lease computed from
/// the configured timeout, the journals overlap.
#[test]
fn lease_follows_granted_session_timeout_when_active_server_loses_the_leader() {
    let mut fw = Firewall::new();
    let ens = Ensemble::start_with_config("maxSessionTimeout=2000\n");
    let leader = wait_for(secs(30), "one server leads", || ens.leader());
    let follower = (1..=3).find(|&id| id != leader).expect("three servers");
    let mut cluster = Cluster::with_connect(&ens.peer(follower).connect_string());
    cluster.session_timeout = secs(20);
    let opts = NodeOptions {
        fences: Some(vec![cluster.no_op_fence()]),
        ..Default::default()
    };
    let n1 = cluster.node_with("n1", opts.clone());
    cluster.connect = ens.peer(leader).connect_string();
    let n2 = cluster.node_with("n2", opts);
    let wardens = start_active_then_standbys(&n1, &[&n2]);
    for (node, w) in ["n1", "n2"].iter().zip(&wardens) {
        assert!(
            !lines_with(&w.log(), &["warn", "granted", " 2s", " 20s"]).is_empty(),
            "{node} did not warn that ZooKeeper granted 2s instead of the configured 20s:\n{}",
            w.log()
        );
    }
    let old = n1.last_run().expect("n1's service runs");
    assert_eq!(
        ens.peer(follower).mode().as_deref(),
        Some("follower"),
        "premise: n1's server follows"
    );

    fw.cut_peers(ens.peer(follower), ens.peer(leader));
    let new = wait_for(secs(40), "n2's service started", || n2.last_run());
    fw.heal();
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "n2 promoted without running its (no-op) fence on n1: {:?}",
        cluster.fence_calls()
    );
    assert!(new.epoch > old.epoch, "{old} then {new}");
    cluster.assert_safe();
}

// ---------------------------------------------------------------------------------------
// 2. A member znode of our node id held by another session (SPEC §4.9)

/// A member record of node `id` as another warden process would have written it.
fn member_record(id: &str, host: &str, machine: &str, boot: &str) -> Vec<u8> {
    let (pid, start_time) = dead_process();
    serde_json::to_vec(&json!({
        "node_id": id,
        "host": host,
        "boot_id": boot,
        "machine_id": machine,
        "pid_ns": pid_ns(),
        "pid": pid,
        "start_time": start_time,
        "incarnation": "00000000deadbeef",
        "since": "2026-01-01T00:00:00Z",
        "role": "active",
        "health": "healthy",
    }))
    .unwrap()
}

/// A fast reboot: the member znode of n1 is held by a session of the previous boot of
/// this machine (same machine id, another boot id). The new warden waits for it, saying
/// so, instead of exiting 2, and registers and promotes once that session is gone.
#[test]
fn fast_reboot_waits_for_the_old_session_instead_of_exiting() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let member_path = cluster.znode("members/n1");
    let old_session = ZkClient::connect(&zk.connect_string());
    old_session.create_ephemeral(
        &member_path,
        &member_record("n1", "127.0.0.1", &machine_id(), &other_id(1)),
    );

    let mut warden = n1.start();
    wait_until(
        secs(30),
        "n1 logs that it waits for the old session",
        || !lines_with(&warden.log(), &["wait", "session"]).is_empty() || !warden.is_running(),
    );
    assert!(
        warden.is_running(),
        "n1 exited instead of waiting for the old session: {:?}\n{}",
        warden.try_exit(),
        warden.log()
    );
    let checker = ZkClient::connect(&zk.connect_string());
    assert_eq!(
        checker.get(&member_path),
        old_session.get(&member_path),
        "n1 replaced the old session's member record while it was alive"
    );
    assert!(n1.runs().is_empty(), "n1 promoted: {:?}", n1.runs());

    // The old session ends (as its expiry would): n1 registers and promotes.
    old_session.close();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
            && json_u64(&member(s, "n1").unwrap()["pid"]) == Some(warden.pid() as u64)
    });
    wait_until(secs(10), "n1's service runs", || {
        n1.last_run().is_some_and(|r| process_alive(r.pid))
    });
    assert!(warden.is_running(), "n1 exited:\n{}", warden.log());
    cluster.assert_safe();
}

/// The converse: the member znode of n1 names another machine (another machine id): a
/// second warden with the same node id elsewhere. The new one refuses, exit 2, naming
/// that host, and leaves the other's member record alone.
#[test]
fn same_node_id_on_another_machine_exits_2_naming_it() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let member_path = cluster.znode("members/n1");
    let other = ZkClient::connect(&zk.connect_string());
    let record = member_record("n1", "rm9.elsewhere.example", &other_id(2), &other_id(3));
    other.create_ephemeral(&member_path, &record);

    let mut warden = n1.start();
    let exit = warden.wait_exit(secs(30));
    assert_eq!(exit.code(), Some(2), "{exit}\n{}", warden.log());
    assert!(
        warden.log_mentions("rm9.elsewhere.example"),
        "the refusal does not name the other host:\n{}",
        warden.log()
    );
    assert_eq!(
        other.get(&member_path).as_deref(),
        Some(&record[..]),
        "the refused warden touched the other's member record"
    );
    assert!(n1.runs().is_empty(), "n1 promoted: {:?}", n1.runs());
}

// ---------------------------------------------------------------------------------------
// 3. An abandoned fence dies with its process group

/// The breadcrumb names "ghost", another machine. The only fence is a script that hangs
/// (a shell waiting on a `sleep` child, both in the script's group) with a long timeout.
/// SIGTERM to warden while it fences: warden exits 0 at once, and neither the script nor
/// its child survives it; the service never started.
#[test]
fn hung_fence_script_is_killed_when_the_fencing_node_is_stopped() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    client.put(
        &cluster.znode("breadcrumb"),
        &serde_json::to_vec(&json!({
            "node_id": "ghost",
            "host": "ghost.elsewhere.example",
            "boot_id": other_id(4),
            "machine_id": other_id(5),
            "pid": 4242,
            "start_time": 1,
            "incarnation": "0000000000005057",
            "epoch": 1,
        }))
        .unwrap(),
    );
    let pids = cluster.dir().join("fence-hang.pids");
    let hang = cluster.script(
        "fence-hang.sh",
        &format!(
            "sleep 60 &\n\
             printf '%s\\n%s\\n' $$ $! > '{p}.tmp' && mv '{p}.tmp' '{p}'\n\
             wait\n\
             exit 0\n",
            p = pids.display()
        ),
    );
    // Whatever the outcome, neither may outlive the test.
    let _reap_script = PidFileReaper {
        file: pids.clone(),
        marker: "fence-hang.sh".into(),
    };
    let _reap_sleep = PidFileReaper {
        file: pids.clone(),
        marker: "sleep 60".into(),
    };
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            fences: Some(vec![script_fence(
                &[&hang.display().to_string()],
                secs(120),
            )]),
            ..Default::default()
        },
    );

    let mut warden = n1.start();
    let (script, sleep) = wait_for(secs(30), "the fence script and its child run", || {
        let text = std::fs::read_to_string(&pids).ok()?;
        let p: Vec<u32> = text.lines().filter_map(|l| l.parse().ok()).collect();
        (p.len() == 2 && p.iter().all(|p| process_alive(*p))).then(|| (p[0], p[1]))
    });
    wait_for_status(&n1.config, secs(10), "n1 reports fencing", |s| {
        member_role(s, "n1").as_deref() == Some("fencing")
    });

    warden.sigterm();
    let exit = warden.wait_exit(secs(30));
    assert_eq!(exit.code(), Some(0), "{exit}\n{}", warden.log());
    wait_until(
        secs(10),
        "the abandoned fence script and its child are gone",
        || !process_alive(script) && !process_alive(sleep),
    );
    assert!(
        n1.runs().is_empty(),
        "a service started although fencing never succeeded: {:?}",
        n1.runs()
    );
    let breadcrumb = znode_json(&client, &cluster.znode("breadcrumb")).unwrap();
    assert_eq!(breadcrumb["node_id"], "ghost", "{breadcrumb:#}");
}

// ---------------------------------------------------------------------------------------
// 4. Our node id from another machine vs our own leftovers

/// The breadcrumb names this node's id, but from another machine (another machine id,
/// boot and incarnation: a cloned machine, a rescheduled pod). It is not our leftovers:
/// the configured chain (a recorder that reports fenced) runs before n1 promotes.
#[test]
fn our_node_id_from_another_machine_is_fenced_by_the_whole_chain() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    client.put(
        &cluster.znode("breadcrumb"),
        &serde_json::to_vec(&json!({
            "node_id": "n1",
            "host": "127.0.0.1",
            "boot_id": other_id(6),
            "machine_id": other_id(7),
            "pid_ns": pid_ns(),
            "pid": 4242,
            "start_time": 1,
            "incarnation": "0000000000c10ed1",
            "epoch": 1,
        }))
        .unwrap(),
    );
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            fences: Some(vec![cluster.no_op_fence(), signal_fence()]),
            ..Default::default()
        },
    );
    let warden = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    let run = wait_for(secs(10), "n1's service started", || n1.last_run());
    assert_eq!(
        cluster.fence_calls(),
        ["n1 n1"],
        "the configured chain did not run once on the other machine's n1"
    );
    assert!(
        run.epoch > Some(1),
        "the new epoch is not above the breadcrumb's: {run}"
    );
    assert!(
        !warden.log_mentions("leftovers"),
        "n1 took another machine's record for its own leftovers:\n{}",
        warden.log()
    );
    cluster.assert_safe();
}

/// The breadcrumb names this node's id on this machine, boot and pid namespace, with
/// another incarnation whose warden and service are dead (a restart after `kill -9`):
/// our own leftovers, fenced by `signal` alone; the configured recorder is never called.
#[test]
fn own_dead_leftovers_on_this_boot_are_fenced_by_signal_alone() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    let (warden_pid, warden_start) = dead_process();
    let (service_pid, service_start) = dead_process();
    client.put(
        &cluster.znode("breadcrumb"),
        &serde_json::to_vec(&json!({
            "node_id": "n1",
            "host": "127.0.0.1",
            "boot_id": boot_id(),
            "machine_id": machine_id(),
            "pid_ns": pid_ns(),
            "pid": warden_pid,
            "start_time": warden_start,
            "service_pid": service_pid,
            "service_pgid": service_pid,
            "service_start_time": service_start,
            "incarnation": "00000000001ef700",
            "epoch": 1,
        }))
        .unwrap(),
    );
    // The default chain: the recorder (which fails) first, then signal.
    let n1 = cluster.node("n1");
    let _warden = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    wait_for(secs(10), "n1's service started", || n1.last_run());
    assert!(
        cluster.fence_calls().is_empty(),
        "our own leftovers on this boot went through the configured chain: {:?}",
        cluster.fence_calls()
    );
    cluster.assert_safe();
}

// ---------------------------------------------------------------------------------------
// 5. Not active until the service's identity is in the breadcrumb

/// From the first moment n1's HTTP face says `/active` 200, a read of the breadcrumb (on a
/// standalone server, a read issued after an acknowledged write sees it) shows the
/// running service's pid, group and start time; `status --json` agrees.
#[test]
fn active_only_once_the_service_identity_is_in_the_breadcrumb() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let api = format!("127.0.0.1:{}", free_port());
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            extra: format!("[api]\nlisten = {}\n", toml_str(&api)),
            ..Default::default()
        },
    );
    let client = ZkClient::connect(&zk.connect_string());
    let breadcrumb_path = cluster.znode("breadcrumb");
    let warden = n1.start();

    // A tight poll: the window of a node that says active before its record is written
    // is a single ZooKeeper round trip.
    let deadline = std::time::Instant::now() + secs(30);
    while http_status(&api, "/active") != Some(200) {
        if std::time::Instant::now() >= deadline {
            dump_logs();
            panic!("n1's /active never answered 200:\n{}", warden.log());
        }
        std::thread::sleep(ms(1));
    }
    let breadcrumb =
        znode_json(&client, &breadcrumb_path).expect("an active node has written its breadcrumb");
    for key in ["service_pid", "service_pgid", "service_start_time"] {
        assert!(
            json_u64(&breadcrumb[key]).is_some(),
            "/active answered 200 before the breadcrumb named the service ({key} missing): \
             {breadcrumb:#}"
        );
    }

    let run = wait_for(secs(10), "n1's service journals", || n1.last_run());
    let stat = proc_stat(run.pid).expect("the service runs");
    assert_eq!(json_u64(&breadcrumb["service_pid"]), Some(run.pid as u64));
    assert_eq!(
        json_u64(&breadcrumb["service_pgid"]),
        Some(stat.pgid as u64),
        "{breadcrumb:#}"
    );
    assert_eq!(
        json_u64(&breadcrumb["service_start_time"]),
        Some(stat.start_time),
        "{breadcrumb:#}"
    );
    assert_eq!(json_u64(&breadcrumb["epoch"]), run.epoch, "{breadcrumb:#}");

    let status = status_json(&n1.config);
    assert_eq!(active_id(&status).as_deref(), Some("n1"), "{status:#}");
    assert_eq!(member_role(&status, "n1").as_deref(), Some("active"));
    assert_eq!(active_epoch(&status), run.epoch, "{status:#}");
    assert_eq!(
        znode_json(&client, &breadcrumb_path).as_ref(),
        Some(&breadcrumb),
        "the breadcrumb changed while n1 stayed active"
    );
}
