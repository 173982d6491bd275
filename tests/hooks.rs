//! Hooks mode (SPEC §6, issue 5 "Show it works" 3): the service always runs and warden
//! changes its role with `promote` and `demote` hooks, under `hook_timeout`.
//!
//! The hooks append `<promote|demote> <CLOCK_REALTIME ns> <node> <WARDEN_ROLE>
//! <WARDEN_EPOCH>` to one shared file, so the order of role changes across nodes is read
//! from the hooks' own records.

mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};

/// One line of the hooks' record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HookCall {
    what: String,
    at_ns: u128,
    node: String,
    role: String,
    epoch: String,
}

fn calls(path: &Path) -> Vec<HookCall> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(HookCall {
                what: f.first()?.to_string(),
                at_ns: f.get(1)?.parse().ok()?,
                node: f.get(2)?.to_string(),
                role: f.get(3)?.to_string(),
                epoch: f.get(4).unwrap_or(&"-").to_string(),
            })
        })
        .collect()
}

/// Rewrites a harness config into hooks mode with the given hooks.
fn hooks_mode(node: &Node, promote: &Path, demote: &Path, hook_timeout: &str) {
    let text = fs::read_to_string(&node.config).unwrap();
    let start = text.find("[service]").unwrap();
    let end = text.find("[health]").unwrap();
    let service = format!(
        "[service]\nmode = \"hooks\"\npromote = [{p}]\ndemote = [{d}]\nhook_timeout = \"{hook_timeout}\"\n\n",
        p = toml_str(&promote.display().to_string()),
        d = toml_str(&demote.display().to_string()),
    );
    fs::write(
        &node.config,
        format!("{}{service}{}", &text[..start], &text[end..]),
    )
    .unwrap();
}

/// Gives a node's record a service port (`cluster.port`), which hooks are told.
fn with_port(node: &Node, port: u16) {
    let text = fs::read_to_string(&node.config).unwrap().replacen(
        "host = \"127.0.0.1\"\n",
        &format!("host = \"127.0.0.1\"\nport = {port}\n"),
        1,
    );
    fs::write(&node.config, text).unwrap();
}

/// The lines a hook appended to `path` (none while it does not exist).
fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Sets `health.standby_command` to `check`, checked every 200 ms, with `more` settings
/// of `[health]`.
fn with_standby_command(node: &Node, check: &Path, more: &str) {
    let text = fs::read_to_string(&node.config).unwrap().replace(
        "[health]\nkind = \"none\"\n",
        &format!(
            "[health]\nkind = \"none\"\nstandby_command = [{}]\ninterval = \"200ms\"\n{more}",
            toml_str(&check.display().to_string())
        ),
    );
    fs::write(&node.config, text).unwrap();
}

/// A hook that records its call and then runs `then` (shell).
fn with_follow(node: &Node, follow: &Path) {
    let text = fs::read_to_string(&node.config).unwrap().replacen(
        "[service]\n",
        &format!(
            "[service]\nfollow = [{}]\n",
            toml_str(&follow.display().to_string())
        ),
        1,
    );
    fs::write(&node.config, text).unwrap();
}

/// Starts n1 and waits until it is active, then n2 until it is a standby (hooks mode: no
/// service of warden's own to wait for).
fn start_n1_active_then_n2(n1: &Node, n2: &Node) -> (Warden, Warden) {
    let w1 = n1.start();
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");
    let w2 = n2.start();
    wait_for_status(&n1.config, secs(30), "n2 is a standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    (w1, w2)
}

/// A demote hook that appends `NODE SUCCESSOR_NODE SUCCESSOR_HOST SUCCESSOR_PORT` (each
/// `unset` when not given) to `env`.
fn successor_recording_demote(cluster: &Cluster, record: &Path, env: &Path) -> PathBuf {
    hook(
        cluster,
        "demote.sh",
        record,
        "demote",
        &format!(
            "echo \"$WARDEN_NODE_ID ${{WARDEN_SUCCESSOR_NODE:-unset}} \
             ${{WARDEN_SUCCESSOR_HOST:-unset}} ${{WARDEN_SUCCESSOR_PORT:-unset}}\" >> '{}'",
            env.display()
        ),
    )
}

fn hook(cluster: &Cluster, name: &str, record: &Path, what: &str, then: &str) -> PathBuf {
    cluster.script(
        name,
        &format!(
            "echo \"{what} $(date +%s%N) $WARDEN_NODE_ID $WARDEN_ROLE ${{WARDEN_EPOCH:--}}\" >> '{}'\n{then}\n",
            record.display()
        ),
    )
}

/// A promote hook that records its call and then, while the shell test `when` holds, hangs
/// in `sleep 600`; the reaper ends every such hang when the test ends.
fn hanging_promote(cluster: &Cluster, record: &Path, when: &str) -> (PathBuf, PidFileReaper) {
    let hung = cluster.dir().join("hung-pids");
    let hook = hook(
        cluster,
        "promote-hangs.sh",
        record,
        "promote",
        &format!(
            "if {when}; then echo $$ >> '{}'; exec sleep 600; fi",
            hung.display()
        ),
    );
    let reaper = PidFileReaper {
        file: hung,
        marker: "sleep 600".into(),
    };
    (hook, reaper)
}

/// A hooks-mode node's always-running service: a `sleep` named by the node's
/// `service.pidfile`, which warden pins at promotion and records in its breadcrumb
/// (SPEC §4.3c) so that another node can fence it. Killed when dropped.
struct PinnedService {
    child: std::process::Child,
}

impl PinnedService {
    fn start(cluster: &Cluster, node: &Node) -> PinnedService {
        let child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let pidfile = cluster.dir().join(format!("{}-service.pid", node.id));
        fs::write(&pidfile, format!("{}\n", child.id())).unwrap();
        let text = fs::read_to_string(&node.config).unwrap().replacen(
            "mode = \"hooks\"\n",
            &format!(
                "mode = \"hooks\"\npidfile = {}\n",
                toml_str(&pidfile.display().to_string())
            ),
            1,
        );
        fs::write(&node.config, text).unwrap();
        PinnedService { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs (a fence by signal ends it).
    fn runs(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for PinnedService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn hooks_run_in_order_on_a_clean_handover() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = hook(&cluster, "demote.sh", &record, "demote", "exit 0");
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    hooks_mode(&n1, &promote, &demote, "2s");
    hooks_mode(&n2, &promote, &demote, "2s");
    let check = cli(&n1.config, &["check-config"]);
    assert_eq!(check.status.code(), Some(0), "{}", describe(&check));

    let mut wardens = vec![n1.start()];
    let (active, epoch1) = wait_for_active(&n1.config, secs(30));
    assert_eq!(active, "n1");
    wardens.push(n2.start());
    wait_for_status(&n1.config, secs(30), "n2 is a standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });

    // SIGTERM: n1 demotes with its hook, deletes its breadcrumb, releases; n2 promotes.
    wardens[0].sigterm();
    let exit = wardens[0].wait_exit(secs(30));
    assert_eq!(exit.code(), Some(0), "{}", wardens[0].log());
    let status = wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let epoch2 = active_epoch(&status).unwrap();
    assert!(epoch2 > epoch1);

    let c = calls(&record);
    let seq: Vec<(&str, &str, &str)> = c
        .iter()
        .map(|h| (h.what.as_str(), h.node.as_str(), h.role.as_str()))
        .collect();
    assert_eq!(
        seq,
        vec![
            ("promote", "n1", "active"),
            ("demote", "n1", "standby"),
            ("promote", "n2", "active")
        ],
        "{c:?}"
    );
    assert!(
        c[1].at_ns < c[2].at_ns,
        "n2 promoted before n1 demoted: {c:?}"
    );
    assert_eq!(c[0].epoch, epoch1.to_string());
    assert_eq!(c[2].epoch, epoch2.to_string());
    assert!(
        cluster.fence_calls().is_empty(),
        "a clean handover needs no fencing: {:?}",
        cluster.fence_calls()
    );
}

#[test]
fn a_hanging_promote_hook_is_killed_at_hook_timeout_and_the_promotion_fails() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let (hanging, _reaper) = hanging_promote(&cluster, &record, "true");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = hook(&cluster, "demote.sh", &record, "demote", "exit 0");
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    hooks_mode(&n1, &hanging, &demote, "500ms");
    hooks_mode(&n2, &promote, &demote, "2s");
    // n1's always-running service: without it, n1's promoted record would name no service
    // and no method could verify it down (SPEC §5).
    let mut service = PinnedService::start(&cluster, &n1);

    let mut w1 = n1.start();
    wait_until(secs(20), "n1 runs its promote hook", || {
        calls(&record).iter().any(|c| c.node == "n1")
    });
    let w2 = n2.start();
    // n1's promotion fails at hook_timeout; its breadcrumb stays, so n2 fences n1 (the
    // signal method kills n1's warden on this shared host) and promotes.
    let _ = wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let hook_pid: u32 = fs::read_to_string(cluster.dir().join("hung-pids"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !process_alive(hook_pid),
        "the hung promote hook {hook_pid} is still running"
    );
    assert!(
        w1.log_mentions("promote hook failed") && w1.log_mentions("did not finish within"),
        "n1's log does not say the hook timed out:\n{}",
        w1.log()
    );
    // The failed promotion was followed by a demote on n1, before n2 promoted.
    let c = calls(&record);
    let n1_demote = c
        .iter()
        .position(|h| h.node == "n1" && h.what == "demote")
        .unwrap_or_else(|| panic!("n1 never demoted after its failed promotion: {c:?}"));
    let n2_promote = c
        .iter()
        .position(|h| h.node == "n2" && h.what == "promote")
        .unwrap();
    assert!(n1_demote < n2_promote, "{c:?}");
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "n2 promoted without fencing n1, whose promotion failed: {:?}",
        cluster.fence_calls()
    );
    // n2's signal method killed n1's service by the pinned pid from the breadcrumb.
    wait_until(secs(10), "n1's service is fenced", || !service.runs());
    let _ = w1.try_exit();
    drop(w2);
}

/// A demoted node's health starts over (issue 15): right after a planned switchover the
/// old active does not claim "healthy" on the strength of checks of the service in its
/// old role; it says `unknown` until `rise` checks of the demoted service pass.
#[test]
fn a_demoted_node_does_not_claim_health_its_checks_do_not_know() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = hook(&cluster, "demote.sh", &record, "demote", "exit 0");
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    for n in [&n1, &n2] {
        hooks_mode(n, &promote, &demote, "1s");
        // Checks every 3s, two to rise: "healthy" takes one interval after a start.
        let text = fs::read_to_string(&n.config).unwrap();
        let text = text.replace(
            "[health]\nkind = \"none\"\n",
            "[health]\nkind = \"exec\"\ncommand = [\"/bin/true\"]\ninterval = \"3s\"\nrise = 2\nfall = 3\n",
        );
        fs::write(&n.config, text).unwrap();
    }
    let _w1 = n1.start();
    let (active, _) = wait_for_active(&n1.config, secs(30));
    assert_eq!(active, "n1");
    let _w2 = n2.start();
    wait_for_status(&n1.config, secs(30), "n2 is a standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    wait_for_status(&n1.config, secs(30), "n1 is healthy", |s| {
        member_health(s, "n1").as_deref() == Some("healthy")
    });
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    let s = status_json(&n1.config);
    assert_eq!(active_id(&s).as_deref(), Some("n2"), "{s:#}");
    assert_ne!(
        member_health(&s, "n1").as_deref(),
        Some("healthy"),
        "n1 claims health no check of its demoted service has shown: {s:#}"
    );
    wait_for_status(&n1.config, secs(30), "n1 is healthy again", |s| {
        member_health(s, "n1").as_deref() == Some("healthy")
    });
}

/// SPEC §6: a demote in a planned switchover to a named node is told the successor
/// (`WARDEN_SUCCESSOR_NODE/HOST/PORT`, from its member record). (`failover` without `--to`
/// names one: SPEC §6a.3, below; a SIGTERM names the best-placed standby: §6b, below.)
#[test]
fn a_planned_switchover_tells_the_demote_hook_its_successor() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let env = cluster.dir().join("demote-env");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = successor_recording_demote(&cluster, &record, &env);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    for (n, port) in [(&n1, 7001), (&n2, 7002)] {
        hooks_mode(n, &promote, &demote, "2s");
        with_port(n, port);
    }
    let (mut w1, _w2) = start_n1_active_then_n2(&n1, &n2);
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(lines(&env), ["n1 n2 127.0.0.1 7002"]);
    wait_for_status(&n1.config, secs(30), "n1 is a standby", |s| {
        member_role(s, "n1").as_deref() == Some("standby")
    });
    let out = cli(&n1.config, &["failover", "--to", "n1", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        lines(&env),
        ["n1 n2 127.0.0.1 7002", "n2 n1 127.0.0.1 7001"]
    );
    w1.sigterm();
    assert_eq!(w1.wait_exit(secs(30)).code(), Some(0));
}

/// SPEC §6b: a node that steps down by itself (here SIGTERM) names the best-placed
/// standby as its successor, as `failover` does, so that its demote can hand over without
/// loss: n3, ahead of n2 at the same priority by its position (n2 would win on its node
/// id alone); and n3 is the one that takes over.
#[test]
fn a_node_stepping_down_by_itself_names_the_best_placed_standby_to_its_demote() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let env = cluster.dir().join("demote-env");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = successor_recording_demote(&cluster, &record, &env);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    for (n, port, position) in [(&n1, 7001, 0), (&n2, 7002, 100), (&n3, 7003, 500)] {
        hooks_mode(n, &promote, &demote, "2s");
        with_port(n, port);
        let check = cluster.script(&format!("{}-check.sh", n.id), &format!("echo {position}\n"));
        with_standby_command(n, &check, "");
    }
    let (mut w1, w2) = start_n1_active_then_n2(&n1, &n2);
    let w3 = n3.start();
    // Every view settled: each standby may take the lock (SPEC §3a), n2 has seen n3
    // placed above it, and n1 knows n3 is the best-placed.
    for w in [&w2, &w3] {
        w.wait_for_log("this node may take the lock", secs(60));
    }
    w2.wait_for_log(
        "standbys placed above this one (priority 100, position 100): n3",
        secs(60),
    );
    w1.wait_for_log(
        "the best-placed standby besides this node is now n3 (priority 100, position 500)",
        secs(60),
    );
    w1.sigterm();
    assert_eq!(w1.wait_exit(secs(30)).code(), Some(0));
    assert_eq!(lines(&env), ["n1 n3 127.0.0.1 7003"]);
    wait_for_status(&n2.config, secs(60), "n3 is active", |s| {
        active_id(s).as_deref() == Some("n3")
    });
}

/// SPEC §6 "What hooks are told": `standby_command` gets the cluster, the node, its role,
/// the newest epoch and `WARDEN_ACTIVE_NODE/HOST/PORT` of the active to follow, current at
/// each run (a new active after a switchover included); `promote` gets no
/// `WARDEN_ACTIVE_*`.
#[test]
fn standby_command_and_promote_are_told_the_active() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let promoted = cluster.dir().join("promote-env");
    let checked = cluster.dir().join("check-env");
    let promote = hook(
        &cluster,
        "promote.sh",
        &record,
        "promote",
        &format!(
            "echo \"$WARDEN_NODE_ID ${{WARDEN_ACTIVE_NODE-unset}}\" >> '{}'",
            promoted.display()
        ),
    );
    let demote = hook(&cluster, "demote.sh", &record, "demote", "exit 0");
    let check = cluster.script(
        "check.sh",
        &format!(
            "echo \"$WARDEN_CLUSTER $WARDEN_NODE_ID $WARDEN_ROLE ${{WARDEN_EPOCH-unset}} \
             ${{WARDEN_ACTIVE_NODE-unset}} ${{WARDEN_ACTIVE_HOST-unset}} \
             ${{WARDEN_ACTIVE_PORT-unset}}\" >> '{}'",
            checked.display()
        ),
    );
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    for (n, port) in [(&n1, 7001), (&n2, 7002)] {
        hooks_mode(n, &promote, &demote, "2s");
        with_port(n, port);
        with_standby_command(n, &check, "");
    }
    let name = cluster.name.clone();
    let _w1 = n1.start();
    let (first, epoch1) = wait_for_active(&n1.config, secs(30));
    assert_eq!(first, "n1");
    let _w2 = n2.start();
    let told = format!("{name} n2 standby {epoch1} n1 127.0.0.1 7001");
    wait_until(
        secs(30),
        "n2's standby_command is told n1 is active",
        || lines(&checked).contains(&told),
    );
    wait_for_status(&n1.config, secs(30), "n2 is a standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    let (second, epoch2) = wait_for_active(&n1.config, secs(30));
    assert_eq!(second, "n2");
    assert!(epoch2 > epoch1);
    let told = format!("{name} n1 standby {epoch2} n2 127.0.0.1 7002");
    wait_until(
        secs(30),
        "n1's standby_command is told n2 is active",
        || lines(&checked).contains(&told),
    );
    // Before any active, a node's check is told none; nobody's check ever names itself.
    for l in lines(&checked) {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f.len(), 7, "{l}");
        assert_ne!(
            f[1], f[4],
            "a check was told its own node is the active: {l}"
        );
    }
    assert_eq!(lines(&promoted), ["n1 unset", "n2 unset"]);
}

/// SPEC §6: `standby_command` applies in hooks mode too (a replication-lag check): a node
/// whose standby_command fails is ineligible and never takes the lock; once it passes, the
/// node is eligible and, alone, becomes active.
#[test]
fn standby_command_decides_eligibility_in_hooks_mode() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = hook(&cluster, "demote.sh", &record, "demote", "exit 0");
    let caught_up = cluster.dir().join("caught-up");
    let checks = cluster.dir().join("checks");
    let check = cluster.script(
        "lag-check.sh",
        &format!(
            "echo x >> '{}'\ntest -e '{}' || {{ echo 'replica is 12 MB behind' >&2; exit 1; }}",
            checks.display(),
            caught_up.display()
        ),
    );
    let checks_run = || {
        fs::read_to_string(&checks)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let n1 = cluster.node("n1");
    hooks_mode(&n1, &promote, &demote, "1s");
    with_standby_command(&n1, &check, "rise = 1\nfall = 1\n");
    let check_config = cli(&n1.config, &["check-config"]);
    assert!(
        !String::from_utf8_lossy(&check_config.stderr).contains("is ignored"),
        "{}",
        describe(&check_config)
    );
    let _w = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is ineligible", |s| {
        member_role(s, "n1").as_deref() == Some("ineligible")
            && member_health(s, "n1").as_deref() != Some("healthy")
    });
    // Three more checks fail: still nobody active, the promote hook never ran.
    let seen = checks_run();
    wait_until(secs(30), "three more lag checks ran", || {
        checks_run() >= seen + 3
    });
    let s = status_json(&n1.config);
    assert_eq!(active_id(&s), None, "{s:#}");
    assert!(
        !record.exists(),
        "promoted while its standby_command failed"
    );
    fs::write(&caught_up, "").unwrap();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
}

/// SPEC §6 `follow`: each standby runs it when a new active is promoted, with
/// `WARDEN_ACTIVE_NODE/HOST/PORT` and the active's epoch (the old active of a switchover
/// too, once it is a standby); a standby whose follow failed is ineligible, says why in
/// `status`, and is eligible again once a retry succeeds.
#[test]
fn standbys_follow_each_new_active_and_a_failed_follow_makes_them_ineligible() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let follows = cluster.dir().join("follows");
    let broken = cluster.dir().join("follow-broken");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = hook(&cluster, "demote.sh", &record, "demote", "exit 0");
    let follow = cluster.script(
        "follow.sh",
        &format!(
            "test -e '{broken}-'\"$WARDEN_NODE_ID\" && {{ echo 'REPLICAOF refused' >&2; exit 1; }}\n\
             echo \"$WARDEN_NODE_ID $WARDEN_ACTIVE_NODE $WARDEN_ACTIVE_HOST $WARDEN_ACTIVE_PORT \
             $WARDEN_EPOCH\" >> '{}'\n",
            follows.display(),
            broken = broken.display(),
        ),
    );
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    for (n, port) in [(&n1, 7001), (&n2, 7002)] {
        hooks_mode(n, &promote, &demote, "2s");
        with_port(n, port);
        with_follow(n, &follow);
    }
    let _w1 = n1.start();
    let (_, e1) = wait_for_active(&n1.config, secs(30));
    let _w2 = n2.start();
    wait_until(secs(30), "n2 followed n1", || !lines(&follows).is_empty());
    assert_eq!(lines(&follows), [format!("n2 n1 127.0.0.1 7001 {e1}")]);
    let s = wait_for_status(&n1.config, secs(30), "n2 is a current standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    let follow_of = |s: &serde_json::Value, node: &str| {
        member(s, node).and_then(|m| m["follow"].as_str().map(str::to_string))
    };
    wait_for_status(&n1.config, secs(30), "n2's follow is current", |s| {
        follow_of(s, "n2").is_some_and(|f| f.starts_with("current"))
    });
    let _ = s;

    // n1's follow will fail: after the switchover it is ineligible and says why.
    fs::write(format!("{}-n1", broken.display()), "").unwrap();
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    let s = wait_for_status(
        &n1.config,
        secs(30),
        "n1 is ineligible: its follow failed",
        |s| {
            member_role(s, "n1").as_deref() == Some("ineligible")
                && follow_of(s, "n1").is_some_and(|f| f.contains("REPLICAOF refused"))
        },
    );
    let e2 = active_epoch(&s).unwrap();
    assert!(e2 > e1);
    let text = cli(&n1.config, &["status"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("n1: follow failed:"),
        "{}",
        describe(&text)
    );
    // An ineligible node is refused as a target, unless the operator says --force.
    let refused = cli(&n1.config, &["failover", "--to", "n1", "--timeout", "20s"]);
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--force"),
        "{}",
        describe(&refused)
    );
    let forced = cli(
        &n1.config,
        &["failover", "--to", "n1", "--force", "--timeout", "20s"],
    );
    assert!(forced.status.success(), "{}", describe(&forced));
    let s = wait_for_status(&n1.config, secs(30), "n2 follows n1 again", |s| {
        follow_of(s, "n2").is_some_and(|f| f.starts_with("current (n1"))
    });
    let e3 = active_epoch(&s).unwrap();
    assert!(e3 > e2);
    assert_eq!(active_id(&s).as_deref(), Some("n1"));
    assert!(
        lines(&follows).contains(&format!("n2 n1 127.0.0.1 7001 {e3}")),
        "{:?}",
        lines(&follows)
    );
    // n1's follow never succeeded: it was promoted on the operator's word alone.
    assert!(
        !lines(&follows).iter().any(|l| l.starts_with("n1 ")),
        "{:?}",
        lines(&follows)
    );
}

/// A standby that never joins the election (priority 0) still learns each new active and
/// follows it: before, only a node waiting for the lock watched it, so a priority-0
/// replica never followed anyone (found by `tests/examples_redis.rs`).
#[test]
fn a_priority_0_standby_follows_each_new_active() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let follows = cluster.dir().join("follows");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = hook(&cluster, "demote.sh", &record, "demote", "exit 0");
    let follow = cluster.script(
        "follow.sh",
        &format!(
            "echo \"$WARDEN_NODE_ID $WARDEN_ACTIVE_NODE $WARDEN_EPOCH\" >> '{}'\n",
            follows.display()
        ),
    );
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    for (n, port) in [(&n1, 7001), (&n2, 7002), (&n3, 7003)] {
        hooks_mode(n, &promote, &demote, "2s");
        with_port(n, port);
        with_follow(n, &follow);
    }
    set_priority(&n3, 0);
    let _w1 = n1.start();
    let (_, e1) = wait_for_active(&n1.config, secs(30));
    let (_w2, _w3) = (n2.start(), n3.start());
    wait_for_status(&n1.config, secs(30), "n2 is a standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    wait_until(secs(30), "n3 followed n1", || {
        lines(&follows).contains(&format!("n3 n1 {e1}"))
    });
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    let (_, e2) = wait_for_active(&n1.config, secs(30));
    wait_until(secs(30), "n3 followed n2", || {
        lines(&follows).contains(&format!("n3 n2 {e2}"))
    });
}

/// Show-it-works 3 in hooks mode: the active cut off from ZooKeeper (frozen past its
/// lease) runs its demote hook and, its lease renewed after the thaw, promotes again under
/// the same lock. All along its breadcrumb names its pinned service, so when n1 dies in
/// that promotion n2 fences it by signal and the cluster has an active again. (The start
/// again rewrote the breadcrumb without the service: n2's fence of n1 failed forever, "the
/// record names no service process", and no node was active.)
#[test]
fn an_active_cut_off_from_zookeeper_past_its_lease_can_still_be_fenced_by_its_service() {
    let mut zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let slow = cluster.dir().join("n1-promotes-slowly");
    // Once `slow` exists, n1's promote hook hangs: the window between the breadcrumb's
    // rewrite before a start again and that start's own record stays open.
    let (promote, _reaper) = hanging_promote(
        &cluster,
        &record,
        &format!(
            "[ \"$WARDEN_NODE_ID\" = n1 ] && [ -e '{}' ]",
            slow.display()
        ),
    );
    let demote = hook(&cluster, "demote.sh", &record, "demote", "exit 0");
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    // A hook_timeout above the lease: n1's hanging promote outlives the test's look at it.
    hooks_mode(&n1, &promote, &demote, "5s");
    hooks_mode(&n2, &promote, &demote, "5s");
    let mut s1 = PinnedService::start(&cluster, &n1);
    let _s2 = PinnedService::start(&cluster, &n2);
    let w1 = n1.start();
    let (active, epoch) = wait_for_active(&n1.config, secs(30));
    assert_eq!(active, "n1");
    let w2 = n2.start();
    wait_for_status(&n1.config, secs(30), "n2 is a standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    fs::write(&slow, "").unwrap();
    let n1_calls = |what: &str| {
        calls(&record)
            .iter()
            .filter(|c| c.node == "n1" && c.what == what)
            .count()
    };

    zk.freeze();
    wait_until(secs(10), "n1 demotes by its hook at its lease end", || {
        n1_calls("demote") == 1
    });
    zk.thaw();
    wait_until(secs(10), "n1 promotes again under the same lock", || {
        n1_calls("promote") == 2
    });
    let client = ZkClient::connect(&zk.connect_string());
    let breadcrumb: serde_json::Value =
        serde_json::from_slice(&client.get(&cluster.znode("breadcrumb")).unwrap()).unwrap();
    assert_eq!(breadcrumb["node_id"], "n1", "{breadcrumb:#}");
    assert_eq!(
        json_u64(&breadcrumb["epoch"]),
        Some(epoch),
        "{breadcrumb:#}"
    );
    assert_eq!(
        json_u64(&breadcrumb["service_pid"]),
        Some(u64::from(s1.pid())),
        "n1's breadcrumb, rewritten for its start again, no longer names its service: \
         {breadcrumb:#}"
    );

    // n1 dies in that promotion: n2 wins once n1's session expires, and must fence n1.
    w1.kill9();
    let (active, _) = wait_for_active(&n2.config, secs(20));
    assert_eq!(active, "n2", "{}", w2.log());
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "{:?}",
        cluster.fence_calls()
    );
    wait_until(secs(10), "n2's fence ends n1's pinned service", || {
        !s1.runs()
    });
    assert!(!w2.log_mentions("names no service process"), "{}", w2.log());
}

/// A planned switchover whose demote hook fails, and whose promote again (the switchover
/// called off, SPEC §6a.2) fails too: the old active releases the lock but keeps its
/// breadcrumb, so the target fences it before it promotes (SPEC §8). The command says so,
/// exit 1: the old active's demote said the handover could not be made. A clean one says
/// nothing of the kind.
#[test]
fn a_switchover_whose_demote_and_promote_again_fail_is_reported_as_a_takeover() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let fail_flag = cluster.dir().join("demote-fails");
    let promote = hook(
        &cluster,
        "promote.sh",
        &record,
        "promote",
        &format!(
            "if [ -e '{}' ] && [ \"$WARDEN_NODE_ID\" = n2 ]; then echo 'promote: refused' >&2; \
             exit 1; fi",
            fail_flag.display()
        ),
    );
    let demote = hook(
        &cluster,
        "demote.sh",
        &record,
        "demote",
        &format!(
            "if [ -e '{}' ]; then echo 'demote: the successor did not confirm the last \
             writes' >&2; exit 1; fi",
            fail_flag.display()
        ),
    );
    // A fence that reports success: this test is about what the command says.
    let opts = || NodeOptions {
        fences: Some(vec![cluster.no_op_fence()]),
        ..Default::default()
    };
    let (n1, n2) = (
        cluster.node_with("n1", opts()),
        cluster.node_with("n2", opts()),
    );
    for n in [&n1, &n2] {
        hooks_mode(n, &promote, &demote, "2s");
    }
    let _wardens = start_n1_active_then_n2(&n1, &n2);

    // A clean switchover: no fencing, no warning.
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "10s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{}",
        describe(&out)
    );
    assert!(
        cluster.fence_calls().is_empty(),
        "{:?}",
        cluster.fence_calls()
    );
    wait_for_status(&n1.config, secs(30), "n1 is a standby", |s| {
        member_role(s, "n1").as_deref() == Some("standby")
    });

    // Its demote fails and so does its promote again: n1 fences n2 first and takes over.
    // The demote said the handover could not be made, so the command never reports it
    // done (review of issue 30): exit 1, naming the line and who took over.
    fs::write(&fail_flag, "").unwrap();
    let out = cli(&n1.config, &["failover", "--to", "n1", "--timeout", "10s"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "switchover called off: demote: the successor did not confirm the last writes"
        ) && stderr.contains("n1 took over"),
        "{}",
        describe(&out)
    );
    wait_for_status(&n1.config, secs(10), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    // (Once, unless a commit conflict made n1 read and fence again.)
    let calls = cluster.fence_calls();
    assert!(
        !calls.is_empty() && calls.iter().all(|c| c == "n1 n2"),
        "{calls:?}"
    );
    // n2 tried to call the switchover off first.
    let history = cli(&n1.config, &["history"]);
    assert!(
        String::from_utf8_lossy(&history.stdout).contains(
            "switchover called off: demote: the successor did not confirm the last writes"
        ),
        "{}",
        describe(&history)
    );
}

/// Replays the hooks' record (`promote`, `demote`, and `demote-failed` once a demote hook
/// gave up, leaving its node's service promoted) and returns the first moment two nodes'
/// services were promoted at once, if any.
fn two_promoted(c: &[HookCall]) -> Option<String> {
    let mut promoted: Vec<&str> = Vec::new();
    for (i, h) in c.iter().enumerate() {
        match h.what.as_str() {
            "promote" | "demote-failed" => {
                if let Some(other) = promoted.iter().find(|n| **n != h.node) {
                    return Some(format!(
                        "call {i} ({h:?}) while {other} was promoted: {c:?}"
                    ));
                }
                if !promoted.contains(&h.node.as_str()) {
                    promoted.push(&h.node);
                }
            }
            "demote" => promoted.retain(|n| *n != h.node),
            _ => {}
        }
    }
    None
}

/// A demote hook that records its call and, while `flag` exists, refuses to hand over:
/// records `demote-failed` and exits 1 with `line` on stderr.
fn refusing_demote(cluster: &Cluster, record: &Path, flag: &Path, line: &str) -> PathBuf {
    hook(
        cluster,
        "demote.sh",
        record,
        "demote",
        &format!(
            "if [ -e '{flag}' ]; then echo \"demote-failed $(date +%s%N) $WARDEN_NODE_ID \
             $WARDEN_ROLE ${{WARDEN_EPOCH:--}}\" >> '{record}'; echo '{line}' >&2; exit 1; fi",
            flag = flag.display(),
            record = record.display(),
        ),
    )
}

/// SPEC §6a.2: a planned switchover whose demote fails (the successor has not caught up)
/// is called off while the old active holds the lock and its lease: it promotes itself
/// again at the same epoch, nobody fences it, history says why, and `failover` exits 1
/// with the hook's line. The hooks' own record never shows two nodes promoted at once.
#[test]
fn a_switchover_whose_demote_fails_is_called_off_and_the_old_active_serves_on() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let flag = cluster.dir().join("demote-refuses");
    let line = "n2 has not caught up: 42 bytes behind";
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = refusing_demote(&cluster, &record, &flag, line);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    for n in [&n1, &n2] {
        hooks_mode(n, &promote, &demote, "2s");
    }
    let _wardens = start_n1_active_then_n2(&n1, &n2);
    let (_, epoch) = wait_for_active(&n1.config, secs(30));

    fs::write(&flag, "").unwrap();
    let started = std::time::Instant::now();
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "10s"]);
    // For the record (not a bound): how long the called-off switchover took.
    eprintln!(
        "failover called off after {:?}:\n{}",
        started.elapsed(),
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr.contains(&format!("switchover called off: {line}")),
        "{}",
        describe(&out)
    );
    // n1 serves on at the same epoch; the request is gone; nobody fenced n1.
    let s = wait_for_status(
        &n1.config,
        secs(30),
        "n1 active, the request cleared",
        |s| active_id(s).as_deref() == Some("n1") && s["failover"].is_null(),
    );
    assert_eq!(active_epoch(&s), Some(epoch), "{s}");
    assert_eq!(member_role(&s, "n2").as_deref(), Some("standby"), "{s}");
    assert!(
        cluster.fence_calls().is_empty(),
        "{:?}",
        cluster.fence_calls()
    );
    let history = cli(&n1.config, &["history"]);
    assert!(
        String::from_utf8_lossy(&history.stdout)
            .contains(&format!("switchover called off: {line}")),
        "{}",
        describe(&history)
    );
    let c = calls(&record);
    assert_eq!(
        c.iter()
            .map(|h| (h.what.as_str(), h.node.as_str(), h.epoch.as_str()))
            .collect::<Vec<_>>(),
        [
            ("promote", "n1", epoch.to_string().as_str()),
            ("demote", "n1", epoch.to_string().as_str()),
            ("demote-failed", "n1", epoch.to_string().as_str()),
            ("promote", "n1", epoch.to_string().as_str()),
        ],
        "{c:?}"
    );
    assert_eq!(two_promoted(&c), None);

    // Once the successor can take everything, the same switchover goes through.
    fs::remove_file(&flag).unwrap();
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "10s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(two_promoted(&calls(&record)), None);
}

/// SPEC §6a.3: `failover` without `--to` names the successor itself, the eligible standby
/// with the highest priority, so the demote hook always knows whom to hand over to
/// (`WARDEN_SUCCESSOR_NODE/HOST/PORT`), and that node takes over.
#[test]
fn failover_without_to_names_the_standby_of_highest_priority_as_the_successor() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let env = cluster.dir().join("demote-env");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = successor_recording_demote(&cluster, &record, &env);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    for (n, port, priority) in [(&n1, 7001, 100), (&n2, 7002, 300), (&n3, 7003, 200)] {
        hooks_mode(n, &promote, &demote, "2s");
        with_port(n, port);
        set_priority(n, priority);
    }
    let _w1 = n1.start();
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");
    let _w2 = n2.start();
    let _w3 = n3.start();
    wait_for_status(&n1.config, secs(30), "n2 and n3 are standbys", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
            && member_role(s, "n3").as_deref() == Some("standby")
    });
    let out = cli(&n1.config, &["failover", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("new active: n2"),
        "{}",
        describe(&out)
    );
    assert_eq!(lines(&env), ["n1 n2 127.0.0.1 7002"]);
    let s = wait_for_status(&n1.config, secs(30), "n2 active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    assert_eq!(member_role(&s, "n3").as_deref(), Some("standby"), "{s}");
}

/// SPEC §6 `follow`: a standby never promotes while its `follow` hook runs (the hook
/// repoints its service at the old active; a `promote` beside it would race it). The
/// hooks' record shows each follow's start and end and each promote.
#[test]
fn a_standby_does_not_promote_while_its_follow_hook_runs() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = hook(&cluster, "demote.sh", &record, "demote", "exit 0");
    // Slow: long enough for n1 to step down while n2's first follow runs.
    let follow = hook(
        &cluster,
        "follow.sh",
        &record,
        "follow-start",
        &format!(
            "sleep 3\necho \"follow-end $(date +%s%N) $WARDEN_NODE_ID $WARDEN_ROLE \
             ${{WARDEN_EPOCH:--}}\" >> '{}'",
            record.display()
        ),
    );
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    for n in [&n1, &n2] {
        hooks_mode(n, &promote, &demote, "10s");
        with_follow(n, &follow);
    }
    let mut w1 = n1.start();
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");
    let _w2 = n2.start();
    wait_until(secs(30), "n2's follow started", || {
        calls(&record)
            .iter()
            .any(|h| h.what == "follow-start" && h.node == "n2")
    });
    // n1 steps down (SIGTERM: a clean handover) while n2's follow still runs.
    w1.sigterm();
    assert_eq!(w1.wait_exit(secs(30)).code(), Some(0));
    wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let c = calls(&record);
    let mut following = false;
    for h in c.iter().filter(|h| h.node == "n2") {
        match h.what.as_str() {
            "follow-start" => following = true,
            "follow-end" => following = false,
            "promote" => assert!(!following, "n2 promoted while its follow ran: {c:?}"),
            _ => {}
        }
    }
    assert!(
        c.iter().any(|h| h.what == "promote" && h.node == "n2"),
        "{c:?}"
    );
}

/// Review of issue 30 (SPEC §6a.2, §8): a switchover that the old active called off must
/// never be reported as done. Here n1's demote refuses to hand over to n2 (n2 is behind);
/// n1 calls the switchover off and promotes itself again; while that promote runs, n1 is
/// stopped (SIGTERM: systemd, an operator). Its stop demote has no successor and succeeds,
/// so n1 hands over cleanly; the request, never cleared, still names n2, so n2 takes over
/// without fencing, with what it has. `failover` must say the switchover was called off
/// (exit 1), not "new active: n2" (exit 0): the operator would believe that the handover
/// its demote refused went through without loss.
#[test]
fn a_called_off_switchover_is_never_reported_done_when_the_old_active_stops_meanwhile() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let flag = cluster.dir().join("n2-is-behind");
    let line = "n2 has not caught up: 42 bytes behind";
    // The promote again after the call-off takes a while (a service reopening for writes).
    let promote = hook(
        &cluster,
        "promote.sh",
        &record,
        "promote",
        &format!("if [ -e '{}' ]; then sleep 3; fi", flag.display()),
    );
    // Refuses only a handover to a successor that is behind; a demote without one (a
    // stop) just demotes.
    let demote = hook(
        &cluster,
        "demote.sh",
        &record,
        "demote",
        &format!(
            "if [ -e '{flag}' ] && [ -n \"${{WARDEN_SUCCESSOR_NODE:-}}\" ]; then echo \
             \"demote-failed $(date +%s%N) $WARDEN_NODE_ID $WARDEN_ROLE ${{WARDEN_EPOCH:--}}\" \
             >> '{record}'; echo '{line}' >&2; exit 1; fi",
            flag = flag.display(),
            record = record.display(),
        ),
    );
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    for n in [&n1, &n2] {
        hooks_mode(n, &promote, &demote, "10s");
    }
    let (w1, _w2) = start_n1_active_then_n2(&n1, &n2);

    fs::write(&flag, "").unwrap();
    let config = n1.config.clone();
    let failover =
        std::thread::spawn(move || cli(&config, &["failover", "--to", "n2", "--timeout", "20s"]));
    wait_until(
        secs(20),
        "n1 called the switchover off and promotes again",
        || {
            let c = calls(&record);
            c.iter().any(|h| h.what == "demote-failed")
                && c.iter()
                    .filter(|h| h.what == "promote" && h.node == "n1")
                    .count()
                    == 2
        },
    );
    w1.sigterm();
    let out = failover.join().unwrap();
    let c = calls(&record);
    eprintln!("failover: {}\nhooks: {c:?}", describe(&out));
    assert_eq!(two_promoted(&c), None);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the called-off switchover was reported done: {}",
        describe(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("switchover called off: {line}")),
        "{}",
        describe(&out)
    );
}

/// Review of issue 30 (SPEC §6a, §8): a switchover whose request lapses while the old
/// active's demote is still handing over. n1's demote waits until its named successor n3
/// has everything (4 s here) and then demotes: the service refuses writes and only n3 has
/// all it acknowledged. By then `failover --timeout 2s` has lapsed, so every daemon treats
/// the request as withdrawn; n1 releases without a breadcrumb, and the standby of highest
/// priority, n2, takes over without fencing, with what it has. The active after the
/// switchover must be the successor the demote handed over to (or n1 again), never a
/// node the handover did not wait for.
#[test]
fn a_switchover_that_lapses_during_the_demote_still_hands_over_to_its_successor() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let flag = cluster.dir().join("slow-handover");
    let handed = cluster.dir().join("handed-over-to");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = hook(
        &cluster,
        "demote.sh",
        &record,
        "demote",
        &format!(
            "if [ -e '{}' ] && [ -n \"${{WARDEN_SUCCESSOR_NODE:-}}\" ]; then sleep 4; echo \
             \"$WARDEN_SUCCESSOR_NODE\" >> '{}'; fi",
            flag.display(),
            handed.display()
        ),
    );
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    for (n, priority) in [(&n1, 100), (&n2, 200), (&n3, 50)] {
        hooks_mode(n, &promote, &demote, "10s");
        set_priority(n, priority);
    }
    let _w1 = n1.start();
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");
    let _w2 = n2.start();
    let _w3 = n3.start();
    wait_for_status(&n1.config, secs(30), "n2 and n3 are standbys", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
            && member_role(s, "n3").as_deref() == Some("standby")
    });
    fs::write(&flag, "").unwrap();
    let out = cli(&n1.config, &["failover", "--to", "n3", "--timeout", "2s"]);
    eprintln!("failover: {}", describe(&out));
    let s = wait_for_status(&n1.config, secs(30), "n1 is no longer active", |s| {
        active_id(s).is_some_and(|a| a != "n1")
            || lines(&handed).len() == 1 && active_id(s).as_deref() == Some("n1")
    });
    let c = calls(&record);
    eprintln!("handed over to: {:?}\nhooks: {c:?}", lines(&handed));
    assert_eq!(lines(&handed), ["n3"], "{c:?}");
    let active = active_id(&s);
    assert!(
        matches!(active.as_deref(), Some("n3") | Some("n1")),
        "n1's demote handed over to n3, yet {active:?} took over without what only n3 \
         had: {s:#}"
    );
}

/// SPEC §6a.2 with a service that restarted during its demote: the demote hook kills the
/// pidfile's process, starts another one (a new pid in the pidfile, as the PostgreSQL
/// recipe's immediate shutdown and restart as a standby of nobody does) and fails. The
/// switchover is still called off: n1 pins the process running now, rewrites its
/// breadcrumb to name it before its promote hook runs, and serves on at the same epoch,
/// unfenced. The breadcrumb names the new pid, so when n1's warden later dies, n2's fence
/// finds and ends the process that served.
#[test]
fn a_called_off_switchover_whose_service_restarted_under_another_pid_is_still_called_off() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let flag = cluster.dir().join("demote-restarts");
    let started = cluster.dir().join("restarted-pids");
    let _reaper = PidFileReaper {
        file: started.clone(),
        marker: "sleep 600".into(),
    };
    let line = "n2 stalled during the stop: restarted as a standby of nobody";
    let pidfile = cluster.dir().join("n1-service.pid");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    // Once: the old service process is gone, a new one runs under the pidfile.
    let demote = hook(
        &cluster,
        "demote.sh",
        &record,
        "demote",
        &format!(
            "if [ -e '{flag}' ] && [ \"$WARDEN_NODE_ID\" = n1 ]; then\n\
             rm -f '{flag}'\n\
             old=\"$(head -n1 '{pidfile}')\"\n\
             kill -9 \"$old\"\n\
             while st=\"$(sed 's/.*) //' /proc/$old/stat 2>/dev/null | cut -d' ' -f1)\"; \
             [ -n \"$st\" ] && [ \"$st\" != Z ]; do sleep 0.01; done\n\
             sleep 600 </dev/null >/dev/null 2>&1 &\n\
             echo $! >> '{started}'\n\
             echo $! > '{pidfile}.new' && mv '{pidfile}.new' '{pidfile}'\n\
             echo \"demote-failed $(date +%s%N) $WARDEN_NODE_ID $WARDEN_ROLE \
             ${{WARDEN_EPOCH:--}}\" >> '{record}'\n\
             echo '{line}' >&2\n\
             exit 1\n\
             fi",
            flag = flag.display(),
            pidfile = pidfile.display(),
            started = started.display(),
            record = record.display(),
        ),
    );
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    for n in [&n1, &n2] {
        hooks_mode(n, &promote, &demote, "2s");
    }
    let s1 = PinnedService::start(&cluster, &n1);
    let _s2 = PinnedService::start(&cluster, &n2);
    let (w1, w2) = start_n1_active_then_n2(&n1, &n2);
    let (_, epoch) = wait_for_active(&n1.config, secs(30));
    let old_pid = s1.pid();

    fs::write(&flag, "").unwrap();
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "10s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr.contains(&format!("switchover called off: {line}")),
        "{}",
        describe(&out)
    );
    let new_pid: u32 = fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(new_pid, old_pid);
    // n1 serves on at the same epoch, and its breadcrumb names the process running now.
    let s = wait_for_status(
        &n1.config,
        secs(30),
        "n1 active, the request cleared",
        |s| active_id(s).as_deref() == Some("n1") && s["failover"].is_null(),
    );
    assert_eq!(active_epoch(&s), Some(epoch), "{s}");
    // (`status` does not show the service's pid: read the store.)
    let client = ZkClient::connect(&zk.connect_string());
    let breadcrumb: serde_json::Value =
        serde_json::from_slice(&client.get(&cluster.znode("breadcrumb")).unwrap()).unwrap();
    assert_eq!(breadcrumb["node_id"], "n1", "{breadcrumb:#}");
    assert_eq!(
        json_u64(&breadcrumb["service_pid"]),
        Some(u64::from(new_pid)),
        "{breadcrumb:#}"
    );
    assert!(
        cluster.fence_calls().is_empty(),
        "{:?}",
        cluster.fence_calls()
    );
    let c = calls(&record);
    let e = epoch.to_string();
    assert_eq!(
        c.iter()
            .map(|h| (h.what.as_str(), h.node.as_str(), h.epoch.as_str()))
            .collect::<Vec<_>>(),
        [
            ("promote", "n1", e.as_str()),
            ("demote", "n1", e.as_str()),
            ("demote-failed", "n1", e.as_str()),
            ("promote", "n1", e.as_str()),
        ],
        "{c:?}"
    );
    assert_eq!(two_promoted(&c), None);

    // n1's warden dies: n2 takes over and its fence ends the process that served.
    w1.kill9();
    wait_for_status(&n2.config, secs(20), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "{:?}\n{}",
        cluster.fence_calls(),
        w2.log()
    );
    wait_until(secs(10), "n2's fence ends n1's restarted service", || {
        !process_alive(new_pid)
    });
}

/// The simulation's seed 339357 (stop 37): `failover --cancel` once the old active's demote
/// has begun is refused, naming why and what to wait for. Withdrawn then, the request no
/// longer kept the other standbys out, and one without the writes the demote handed over
/// took the lock the old active released: acknowledged writes lost in a planned
/// switchover. The switchover ends on its target.
#[test]
fn failover_cancel_during_the_old_actives_demote_is_refused_and_the_target_takes_over() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    // The handover takes a while: the operator's cancel lands while it runs.
    let demote = hook(&cluster, "demote.sh", &record, "demote", "sleep 3");
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    for n in [&n1, &n2, &n3] {
        hooks_mode(n, &promote, &demote, "10s");
    }
    let (_w1, _w2) = start_n1_active_then_n2(&n1, &n2);
    let _w3 = n3.start();
    wait_for_status(&n1.config, secs(30), "n3 is a standby", |s| {
        member_role(s, "n3").as_deref() == Some("standby")
    });
    let config = n1.config.clone();
    let failover =
        std::thread::spawn(move || cli(&config, &["failover", "--to", "n2", "--timeout", "30s"]));
    wait_until(secs(20), "n1's demote hook runs", || {
        calls(&record)
            .iter()
            .any(|c| c.what == "demote" && c.node == "n1")
    });
    let cancel = cli(&n3.config, &["failover", "--cancel"]);
    assert!(!cancel.status.success(), "{}", describe(&cancel));
    let said = describe(&cancel);
    assert!(
        said.contains("too late to cancel: n1 is stepping down for n2")
            && said.contains("warden status"),
        "{said}"
    );
    let out = failover.join().expect("the failover thread");
    assert!(out.status.success(), "{}", describe(&out));
    let s = status_json(&n1.config);
    assert_eq!(active_id(&s).as_deref(), Some("n2"), "{s:#}");
    assert!(
        !calls(&record)
            .iter()
            .any(|c| c.what == "promote" && c.node == "n3"),
        "n3 promoted: {:?}",
        calls(&record)
    );
}

/// The review of stop 45: a successor named by a node stepping down by itself is a chance
/// to hand over, never a reason to leave the service writable: a demote that cannot hand
/// over to it runs again without one, and a clean demote needs no fencing.
#[test]
fn a_demote_that_cannot_hand_over_to_a_self_named_successor_runs_again_without_one() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let env = cluster.dir().join("demote-env");
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let demote = hook(
        &cluster,
        "demote.sh",
        &record,
        "demote",
        &format!(
            "echo \"$WARDEN_NODE_ID ${{WARDEN_SUCCESSOR_NODE:-unset}}\" >> '{}'\n\
             if [ -n \"${{WARDEN_SUCCESSOR_NODE:-}}\" ]; then echo 'not handed over' >&2; \
             exit 1; fi",
            env.display()
        ),
    );
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    for (n, port) in [(&n1, 7001), (&n2, 7002)] {
        hooks_mode(n, &promote, &demote, "2s");
        with_port(n, port);
    }
    let (mut w1, _w2) = start_n1_active_then_n2(&n1, &n2);
    w1.wait_for_log(
        "the best-placed standby besides this node is now n2",
        secs(60),
    );
    w1.sigterm();
    assert_eq!(w1.wait_exit(secs(30)).code(), Some(0));
    assert_eq!(lines(&env), ["n1 n2", "n1 unset"]);
    w1.wait_for_log("could not hand over to n2", secs(5));
    wait_for_status(&n2.config, secs(60), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    assert!(
        cluster.fence_calls().is_empty(),
        "a clean demote was fenced: {:?}",
        cluster.fence_calls()
    );
}

/// The review of issue 34: a second stop signal (exit at once) while a forced demotion's
/// hook still runs kills the pinned service, whose role nobody knows then, before warden
/// exits (SPEC §6: after a forced demotion, a service whose role is unknown must not keep
/// serving). Before, the kill came only from the hook's failure or the lease end, and a
/// warden that exited first left the service running as it was.
#[test]
fn a_second_stop_signal_during_a_forced_demotion_kills_the_service_whose_role_is_unknown() {
    let mut zk = ZkServer::start();
    let mut cluster = Cluster::new(&zk);
    // A lease long enough, and a hook_timeout short enough, that the demote starts well
    // before the lease end: the signals land while it hangs, not after the lease's kill.
    cluster.session_timeout = secs(12);
    let record = cluster.dir().join("hook-calls");
    let hung = cluster.dir().join("hung-pids");
    let demote = hook(
        &cluster,
        "demote-hangs.sh",
        &record,
        "demote",
        &format!("echo $$ >> '{}'; exec sleep 600", hung.display()),
    );
    let _reaper = PidFileReaper {
        file: hung,
        marker: "sleep 600".into(),
    };
    let promote = hook(&cluster, "promote.sh", &record, "promote", "exit 0");
    let n1 = cluster.node("n1");
    hooks_mode(&n1, &promote, &demote, "3s");
    let mut s1 = PinnedService::start(&cluster, &n1);
    let mut w1 = n1.start();
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");

    // Cut off from ZooKeeper: the lease runs out, and the demote is forced.
    zk.freeze();
    wait_until(secs(20), "n1's forced demote hook runs", || {
        calls(&record).iter().any(|c| c.what == "demote")
    });
    // Two signals, the second once the first is seen (two at once may arrive as one).
    w1.sigterm();
    wait_until(secs(2), "n1 sees the first stop signal", || {
        w1.log_mentions("stop requested")
    });
    w1.sigterm();
    w1.wait_exit(secs(10));
    assert!(
        !w1.log_mentions("the lease ended before the demote hook finished"),
        "the lease's kill came first; the test did not reach its case: {}",
        w1.log()
    );
    zk.thaw();
    wait_until(
        secs(5),
        "the service whose role is unknown is killed",
        || !s1.runs(),
    );
    assert!(
        w1.log_mentions("exiting at once during a forced demotion"),
        "{}",
        w1.log()
    );
}
