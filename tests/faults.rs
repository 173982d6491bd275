//! Faults of SPEC §9 on a real ZooKeeper (issue 3, "Show it works" 2, 3, 6, 7, 8 and the
//! garbage breadcrumb of 10): the old active is fenced or steps down by itself before
//! anyone else promotes, and nothing promotes when fencing cannot be done.
//!
//! Every multi-node test ends with `cluster.assert_safe()`: from the services' own
//! journals, no two ran at once and every promotion saw a greater `WARDEN_EPOCH`.

mod common;

use common::*;

/// Scenario 2: `kill -9` of the active's warden: its service dies with it (parent-death
/// signal); the standby fences the dead incarnation once the session expires and takes
/// over with a greater epoch.
#[test]
fn kill9_of_active_warden_hands_over_after_session_expiry() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();

    let kill_ns = mono_now_ns();
    wardens[0].kill9();
    wardens[0].wait_exit(secs(5));
    wait_until(secs(3), "n1's service died with its warden", || {
        !process_alive(old.pid)
    });
    let old = n1.last_run().unwrap();
    assert!(
        old.last_ns < kill_ns + nanos(ms(500)),
        "n1's service ran on {:?} after its warden was killed",
        ns(old.last_ns.saturating_sub(kill_ns))
    );

    let status = wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let new = wait_for(secs(5), "n2's service started", || n2.last_run());
    assert_eq!(new.node, "n2");
    assert_eq!(
        new.epoch,
        active_epoch(&status),
        "WARDEN_EPOCH differs from status"
    );
    assert!(new.epoch > old.epoch, "{old} then {new}");
    // The lock was held until the session expired: no instant takeover.
    assert!(
        ns(new.start_ns - kill_ns) > cluster.session_timeout / 2,
        "n2 took over {:?} after the kill, before n1's session could expire",
        ns(new.start_ns - kill_ns)
    );
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "n2 promoted without fencing n1's incarnation: {:?}",
        cluster.fence_calls()
    );
    cluster.assert_safe();
}

/// Scenario 3: SIGSTOP of the active's warden past the session timeout, its service still
/// running: the standby fences the old incarnation (the service group and the frozen
/// warden) with `signal` before its own service starts; nothing of it acts again.
#[test]
fn frozen_active_warden_is_fenced_before_standby_promotes() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();

    let freeze_ns = mono_now_ns();
    wardens[0].sigstop();
    wait_until(
        secs(5),
        "n1's service keeps running with its warden frozen",
        || {
            n1.last_run()
                .is_some_and(|r| r.last_ns > freeze_ns + nanos(ms(300)))
        },
    );

    // n1's warden stays frozen: that is the fault. The standby must fence it and take over.
    let status = wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let new = wait_for(secs(5), "n2's service started", || n2.last_run());
    let old_after = n1.last_run().unwrap();
    assert_eq!(old_after.pid, old.pid);
    assert!(
        old_after.last_ns < new.start_ns,
        "the old service ticked at {} after the new one started at {}",
        old_after.last_ns,
        new.start_ns
    );
    assert!(
        !process_alive(old.pid),
        "the old service {} was not fenced",
        old.pid
    );
    // The fence killed the frozen warden too (the test never sent it SIGKILL).
    let exit = wardens[0].wait_exit(secs(5));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&exit),
        Some(9),
        "the frozen warden was not killed by the fence: {exit}"
    );
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "no fencing attempt on n1: {:?}",
        cluster.fence_calls()
    );
    assert_eq!(new.epoch, active_epoch(&status));
    assert!(new.epoch > old.epoch, "{old} then {new}");

    // Nothing of the old incarnation acts again while the new service runs on.
    let ticks = new.ticks;
    wait_until(secs(10), "n2's service runs on for 30 ticks", || {
        n2.last_run().is_some_and(|r| r.ticks >= ticks + 30)
    });
    assert_eq!(
        n1.runs(),
        vec![old_after],
        "n1's journal changed after it was fenced"
    );
    cluster.assert_safe();
}

/// Scenario 6: every fence method fails (a script that exits 1, one that hangs past its
/// timeout): the standby never promotes while the old service lives, keeps trying, kills
/// the hung script at its timeout, and its log says what failed and what to do.
#[test]
fn failed_fencing_never_promotes_while_old_service_lives() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let calls = cluster.dir().join("fail-calls");
    let hang_pids = cluster.dir().join("hang-pids");
    let fail = cluster.script(
        "fence-fail.sh",
        &format!(
            "echo \"$WARDEN_TARGET_NODE_ID\" >> '{}'\necho 'fence-fail: the PDU refused' >&2\nexit 1\n",
            calls.display()
        ),
    );
    let hang = cluster.script(
        "fence-hang.sh",
        &format!("echo $$ >> '{}'\nexec sleep 600\n", hang_pids.display()),
    );
    // A hung script in flight when the test ends would outlive its killed warden.
    let _reaper = PidFileReaper {
        file: hang_pids.clone(),
        marker: "sleep 600".into(),
    };
    let n1 = cluster.node("n1");
    let n2 = cluster.node_with(
        "n2",
        NodeOptions {
            fences: Some(vec![
                script_fence(&[&fail.display().to_string()], secs(5)),
                script_fence(&[&hang.display().to_string()], secs(1)),
            ]),
            ..Default::default()
        },
    );
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();

    // n1's warden hangs with its service running, and stays so: that is the fault.
    wardens[0].sigstop();
    let lines = |p: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    wait_until(secs(60), "n2 has tried to fence n1 three times", || {
        lines(&calls).len() >= 3
    });
    assert!(
        lines(&calls).iter().all(|t| t == "n1"),
        "targets: {:?}",
        lines(&calls)
    );

    // The third attempt began after the second ended, so both hung scripts were killed.
    let hung: Vec<u32> = lines(&hang_pids)
        .iter()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(
        hung.len() >= 2,
        "the hanging method was not tried each time: {hung:?}"
    );
    for pid in &hung[..2] {
        assert!(
            !process_alive(*pid),
            "hung fence script {pid} was not killed at its timeout"
        );
    }

    assert!(
        n2.runs().is_empty(),
        "n2 promoted although fencing failed: {:?}",
        n2.runs()
    );
    assert!(
        process_alive(old.pid),
        "the old service died: the test lost its premise"
    );
    assert!(
        n1.last_run().unwrap().last_ns > mono_now_ns() - nanos(ms(500)),
        "the old service stopped ticking: the test lost its premise"
    );
    let status = status_json(&n2.config);
    assert_ne!(active_id(&status).as_deref(), Some("n2"), "{status:#}");
    assert!(
        wardens[1].is_running(),
        "n2's warden exited:\n{}",
        wardens[1].log()
    );

    let log = wardens[1].log();
    for needle in ["fence-fail", "fence-hang", "fence --confirm"] {
        assert!(
            log.contains(needle),
            "n2's log does not mention {needle:?} (what failed, what the operator can do)"
        );
    }
    cluster.assert_safe();
}

/// Scenario 7: ZooKeeper freezes (SIGSTOP): the active's renewals fail and its service is
/// down by the end of its lease, before its session could expire; ZooKeeper comes back
/// within the session, and the same daemon promotes again with the same epoch, unfenced.
#[test]
fn zookeeper_freeze_demotes_active_by_lease_end_and_same_node_repromotes() {
    let mut zk = ZkServer::start();
    let mut cluster = Cluster::new(&zk);
    // 4s: lease 2s, and the thaw below comes well before the session could expire.
    cluster.session_timeout = secs(4);
    let lease = cluster.session_timeout / 2;
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();
    let epoch = old.epoch;

    let freeze_ns = mono_now_ns();
    zk.freeze();
    // The freeze is the fault; it lasts until the service is gone, at most 3/4 of the
    // session, so that the session itself survives.
    let thaw_by = freeze_ns + nanos(cluster.session_timeout * 3 / 4);
    while process_alive(old.pid) && mono_now_ns() < thaw_by {
        std::thread::sleep(ms(10));
    }
    let down = !process_alive(old.pid);
    zk.thaw();
    let thaw_ns = mono_now_ns();

    let old = n1.runs().into_iter().next().unwrap();
    let ran_on = ns(old.last_ns.saturating_sub(freeze_ns));
    assert!(
        down,
        "n1's service still ran {:?} after ZooKeeper froze (lease {lease:?})",
        ns(thaw_ns - freeze_ns)
    );
    assert!(
        ran_on < cluster.session_timeout,
        "n1's service ran on {ran_on:?} after the freeze: past the session timeout"
    );
    // The lease ends session_timeout/2 after the send of the last acknowledged renewal,
    // which was before the freeze; 200ms for scheduling on a loaded machine.
    assert!(
        ran_on < lease + ms(200),
        "n1's service ran on {ran_on:?} after the freeze, past its lease of {lease:?}"
    );

    // ZooKeeper is back within the session: the same daemon re-promotes, same epoch.
    let status = wait_for_status(&n1.config, secs(30), "n1 is active again", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    let runs = wait_for(secs(10), "n1's service started again", || {
        let runs = n1.runs();
        (runs.len() >= 2).then_some(runs)
    });
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        runs[1].epoch, epoch,
        "a re-promotion under the same lock keeps its epoch"
    );
    assert_eq!(active_epoch(&status), epoch);
    assert!(
        wardens[0].is_running(),
        "n1's warden exited:\n{}",
        wardens[0].log()
    );
    assert_eq!(
        json_u64(&member(&status, "n1").unwrap()["pid"]),
        Some(wardens[0].pid() as u64),
        "the active is not the same warden process"
    );
    assert!(n2.runs().is_empty(), "n2 ran the service: {:?}", n2.runs());
    assert_eq!(member_role(&status, "n2").as_deref(), Some("standby"));
    assert!(
        cluster.fence_calls().is_empty(),
        "fencing was attempted: {:?}",
        cluster.fence_calls()
    );
    for w in &wardens {
        assert!(!w.log_mentions("fenced"), "a fence is logged:\n{}", w.log());
    }
    assert!(
        wardens[0].log_mentions("neutral"),
        "n1 did not log its neutral role (lease in doubt)"
    );
    cluster.assert_safe();
}

/// Scenario 8: ZooKeeper down when `run` starts: the daemon keeps retrying, says so, and
/// joins once ZooKeeper is up.
#[test]
fn run_keeps_retrying_until_zookeeper_comes_up() {
    let mut zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    zk.stop();
    let n1 = cluster.node("n1");
    let mut warden = n1.start();

    wait_until(secs(20), "n1 logs two retries of ZooKeeper", || {
        warden.log_count("retr") >= 2
    });
    assert!(warden.is_running(), "run gave up:\n{}", warden.log());
    assert!(
        warden.log_mentions(&zk.connect_string()),
        "the retries do not name the ZooKeeper address {}",
        zk.connect_string()
    );
    assert!(n1.runs().is_empty());

    zk.restart();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    wait_until(secs(5), "n1's service runs", || {
        n1.last_run().is_some_and(|r| process_alive(r.pid))
    });
    assert!(warden.is_running());
}

/// Scenario 10 (second half): a breadcrumb holding garbage is an unknown old active.
/// With only the `signal` method, which cannot act on an unknown target, nobody promotes
/// and the log points to `fence --confirm`; `init --force` refuses while a member exists
/// and clears the breadcrumb once none does, after which the node promotes.
#[test]
fn garbage_breadcrumb_blocks_promotion_until_cleared() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    let breadcrumb = cluster.znode("breadcrumb");
    client.put(&breadcrumb, b"\xff\xfe{ this is not a node record");
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            fences: Some(vec![signal_fence()]),
            ..Default::default()
        },
    );
    let mut warden = n1.start();

    warden.wait_for_log("fence --confirm", secs(30));
    let status = status_json(&n1.config);
    assert_eq!(active_id(&status), None, "{status:#}");
    let refused = cli(&n1.config, &["init", "--force"]);
    assert_eq!(
        refused.status.code(),
        Some(1),
        "init --force with a member:\n{}",
        describe(&refused)
    );
    assert!(
        client.exists(&breadcrumb),
        "init --force deleted the breadcrumb while refusing"
    );
    assert!(
        n1.runs().is_empty(),
        "n1 promoted past an unknown old active: {:?}",
        n1.runs()
    );
    assert!(warden.is_running(), "n1's warden exited:\n{}", warden.log());

    // Not active: SIGTERM just leaves.
    warden.sigterm();
    assert_eq!(warden.wait_exit(secs(10)).code(), Some(0));
    wait_for_status(&n1.config, secs(10), "no members are left", |s| {
        member_ids(s).is_empty()
    });
    let cleared = cli(&n1.config, &["init", "--force"]);
    assert!(cleared.status.success(), "{}", describe(&cleared));
    assert!(
        !client.exists(&breadcrumb),
        "init --force left the breadcrumb"
    );

    let _warden = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    wait_until(secs(5), "n1's service runs", || n1.last_run().is_some());
    cluster.assert_safe();
}

/// Issue 32, the simulation's seed 25694, on a real ZooKeeper and a real hung mount:
/// n1's service crashes and leaves a child stuck in the kernel that no SIGKILL ends. The
/// store then loses n1's breadcrumb (deleted here, as a restore from before the promotion
/// would). n2 wins first and fences the service n1's member record names; n1 wins next,
/// writes its breadcrumb back naming the stuck service and never starts a second copy
/// beside it; nobody promotes until the stuck process is gone.
#[test]
fn a_service_stuck_in_the_kernel_is_never_joined_even_when_the_store_forgets_it() {
    let zk = ZkServer::start();
    let mut cluster = Cluster::new(&zk);
    // Time to take the breadcrumb away between n1's release and its next try.
    cluster.rejoin_delay = secs(3);
    let mut hung = hung_mount::HungMount::new(cluster.dir());
    let n1 = stuck_service_node(&cluster, &hung);
    let n2 = cluster.node("n2");
    let w1 = n1.start();
    let (_, epoch) = wait_for_active(&n1.config, secs(30));
    let stuck = stuck_child(&hung);

    // The crash: the stop cannot end the child, so n1 leaves keeping its breadcrumb.
    let zkc = ZkClient::connect(&zk.connect_string());
    let (breadcrumb, lock) = (cluster.znode("breadcrumb"), cluster.znode("lock"));
    wait_until(
        secs(30),
        "n1 released its lock, keeping its breadcrumb",
        || !zkc.exists(&lock) && zkc.exists(&breadcrumb),
    );
    assert!(
        process_alive(stuck),
        "the stuck child died: the test lost its premise"
    );
    zkc.delete(&breadcrumb);

    // n2 (its session settled before n1's back-off ends) wins first, finds no
    // breadcrumb, and fences the service n1's member record names: in vain.
    let w2 = n2.start();
    wait_until(secs(60), "n2 tried to fence n1's stuck service", || {
        w2.log().contains("The service of n1 outlived its stop")
    });
    assert!(
        cluster.fence_calls().iter().any(|c| c == "n2 n1"),
        "{:?}",
        cluster.fence_calls()
    );
    assert!(n2.runs().is_empty(), "n2 promoted: {:?}", n2.runs());

    // n1 wins again and writes its breadcrumb back: epoch, process group and all.
    let read = |zkc: &ZkClient| -> Option<serde_json::Value> {
        serde_json::from_slice(&zkc.get(&breadcrumb)?).ok()
    };
    let back = wait_for(secs(60), "n1 wrote its breadcrumb back", || {
        read(&zkc).filter(|b| b["node_id"] == "n1")
    });
    let first = n1.runs()[0].clone();
    assert_eq!(json_u64(&back["epoch"]), Some(epoch), "{back:#}");
    assert_eq!(
        json_u64(&back["service_pgid"]),
        Some(first.pid as u64),
        "{back:#}"
    );
    assert!(back["rewrite"].as_u64().is_some(), "{back:#}");
    wait_until(
        secs(30),
        "n1 gave up promoting beside its stuck service",
        || {
            w1.log()
                .contains("The service of this node outlived its stop")
        },
    );
    assert!(
        process_alive(stuck),
        "the stuck child died: the test lost its premise"
    );
    assert!(n2.runs().is_empty(), "n2 promoted: {:?}", n2.runs());
    assert_eq!(
        n1.runs().len(),
        1,
        "n1 started a second copy: {:?}",
        n1.runs()
    );

    // The mount answers at last (the NFS server is back): the child ends, and one node
    // takes over.
    one_active_once_released(&cluster, &mut hung, stuck, &n2, &first);
}

/// The same store fault while n1 still holds its lock, its stop under way: n1 writes the
/// breadcrumb back before it lets the lock go (its member record goes with its session),
/// so the standby that wins at once fences the stuck service and does not promote.
#[test]
fn a_stuck_service_whose_breadcrumb_the_store_forgot_is_named_again_before_the_lock_goes() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let mut hung = hung_mount::HungMount::new(cluster.dir());
    let n1 = stuck_service_node(&cluster, &hung);
    let n2 = cluster.node("n2");
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let stuck = stuck_child(&hung);
    let first = n1.runs()[0].clone();

    // The crash; SIGKILL is sent and its effect awaited with the lock still held.
    wait_until(secs(30), "n1 sent SIGKILL to its service", || {
        wardens[0]
            .log()
            .contains("sending SIGKILL to every process of it")
    });
    let zkc = ZkClient::connect(&zk.connect_string());
    assert!(
        zkc.exists(&cluster.znode("lock")),
        "n1 let the lock go already"
    );
    zkc.delete(&cluster.znode("breadcrumb"));
    wait_until(
        secs(30),
        "n1 wrote its breadcrumb back on the way out",
        || {
            wardens[0]
                .log()
                .contains("written back before leaving the lock")
        },
    );
    wait_until(secs(30), "n2 tried to fence n1 and gave up", || {
        wardens[1].log().contains("fence --confirm")
    });
    assert!(
        cluster.fence_calls().iter().any(|c| c == "n2 n1"),
        "{:?}",
        cluster.fence_calls()
    );
    assert!(
        process_alive(stuck),
        "the stuck child died: the test lost its premise"
    );
    assert!(n2.runs().is_empty(), "n2 promoted: {:?}", n2.runs());
    assert_eq!(n1.runs().len(), 1, "{:?}", n1.runs());

    one_active_once_released(&cluster, &mut hung, stuck, &n2, &first);
    wardens.clear();
}

/// Node n1 of `cluster`, its service crashing after 2s and leaving a child that reads
/// `hung` (stuck in the kernel once killed).
fn stuck_service_node(cluster: &Cluster, hung: &hung_mount::HungMount) -> Node {
    cluster.node_with(
        "n1",
        NodeOptions {
            service_args: vec![
                "--exit-after".into(),
                "2s".into(),
                "--hang-on".into(),
                hung.file().display().to_string(),
            ],
            ..Default::default()
        },
    )
}

/// The pid of the service's child that reads the hung mount.
fn stuck_child(hung: &hung_mount::HungMount) -> u32 {
    wait_for(
        secs(10),
        "the service's child reading the hung mount",
        || {
            processes_with(&hung.file().display().to_string())
                .into_iter()
                .find(|(_, cmdline)| cmdline.starts_with("stat"))
                .map(|(pid, _)| pid)
        },
    )
}

/// Lets the hung mount go: the stuck child ends, a node takes over with a greater epoch,
/// and no run but `first` started before that.
fn one_active_once_released(
    cluster: &Cluster,
    hung: &mut hung_mount::HungMount,
    stuck: u32,
    node: &Node,
    first: &Run,
) {
    let released = mono_now_ns();
    hung.release();
    wait_until(secs(10), "the stuck child ended", || !process_alive(stuck));
    let (_, new_epoch) = wait_for_active(&node.config, secs(60));
    assert!(new_epoch > first.epoch.unwrap_or_default());
    for run in cluster.runs().iter().filter(|r| r.pid != first.pid) {
        assert!(
            run.start_ns > released,
            "{run} started while the stuck service lived"
        );
    }
    cluster.assert_safe();
}
