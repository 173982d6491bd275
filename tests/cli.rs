//! The command line of SPEC §7 and the bad input of §9 (issue 3, "Show it works" 8 and
//! 10): exit codes, config errors with file:line:col and the key, `check-config`,
//! `status` with the daemons down or ZooKeeper unreachable, `init`, `--version`.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Instant;

/// A cluster whose ZooKeeper address has nothing listening: offline commands must not
/// need it, and the others must give up within connect_timeout.
fn offline_cluster() -> Cluster {
    Cluster::with_connect(&format!("127.0.0.1:{}", free_port()))
}

/// Replaces the first `from` in the node's config with `to`; returns the 1-based line of
/// `marker` in the new text.
fn rewrite(node: &Node, from: &str, to: &str, marker: &str) -> usize {
    let text = fs::read_to_string(&node.config).unwrap();
    assert!(
        text.contains(from),
        "the harness config lacks {from:?}:\n{text}"
    );
    let text = text.replacen(from, to, 1);
    fs::write(&node.config, &text).unwrap();
    1 + text
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("{marker:?} is not in the config"))
}

/// Both `check-config` and `run` exit 2, naming `file:line:col` (when `line` is given)
/// and every one of `mentions` in stderr, without a panic.
fn assert_config_error(config: &Path, line: Option<usize>, mentions: &[&str]) {
    for command in ["check-config", "run"] {
        let out = cli(config, &[command]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let context = format!(
            "`warden -c {} {command}`\n{}\nconfig:\n{}",
            config.display(),
            describe(&out),
            fs::read_to_string(config).unwrap_or_default()
        );
        assert_eq!(out.status.code(), Some(2), "{context}");
        assert!(!stderr.contains("panicked"), "{context}");
        for m in mentions {
            assert!(
                stderr.contains(m),
                "stderr does not mention {m:?}: {context}"
            );
        }
        if let Some(line) = line {
            let prefix = format!("{}:{line}:", config.display());
            let located = stderr.match_indices(&prefix).any(|(at, _)| {
                stderr[at + prefix.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
            });
            assert!(
                located,
                "stderr does not locate the error as {prefix}COL: {context}"
            );
        }
    }
}

/// The configs every other test runs with are valid, and checking them contacts nothing
/// (nothing listens at their ZooKeeper address).
#[test]
fn the_test_configs_pass_check_config_offline() {
    let cluster = offline_cluster();
    let default = cluster.node("n1");
    let scripts = cluster.node_with(
        "n2",
        NodeOptions {
            fences: Some(vec![script_fence(&["/bin/false"], secs(1))]),
            service_args: vec!["--exit-after".into(), "1s".into()],
            ..Default::default()
        },
    );
    for node in [default, scripts] {
        let out = cli(&node.config, &["check-config"]);
        assert!(
            out.status.success(),
            "{}\nconfig:\n{}",
            describe(&out),
            fs::read_to_string(&node.config).unwrap()
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&node.id),
            "{}",
            describe(&out)
        );
    }
}

#[test]
fn typo_in_a_key_exits_2_naming_it_and_the_nearest_key() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    let line = rewrite(&node, "session_timeout", "sesion_timeout", "sesion_timeout");
    assert_config_error(
        &node.config,
        Some(line),
        &["sesion_timeout", "session_timeout"],
    );
}

#[test]
fn wrong_type_exits_2_naming_the_key() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    let line = rewrite(
        &node,
        "host = \"127.0.0.1\"\n",
        "host = \"127.0.0.1\"\nport = \"eighty\"\n",
        "eighty",
    );
    assert_config_error(&node.config, Some(line), &["port"]);
}

#[test]
fn bad_duration_exits_2_naming_the_key() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    let line = rewrite(
        &node,
        "rejoin_delay = \"200ms\"",
        "rejoin_delay = \"soon\"",
        "soon",
    );
    assert_config_error(&node.config, Some(line), &["rejoin_delay"]);
}

#[test]
fn invalid_node_id_exits_2_naming_the_key() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    let line = rewrite(
        &node,
        "node_id = \"n1\"",
        "node_id = \"bad id!\"",
        "bad id!",
    );
    assert_config_error(&node.config, Some(line), &["node_id"]);
}

#[test]
fn config_without_a_fence_method_exits_2() {
    let cluster = offline_cluster();
    let node = cluster.node_with(
        "n1",
        NodeOptions {
            fences: Some(Vec::new()),
            ..Default::default()
        },
    );
    assert_config_error(
        &node.config,
        None,
        &[&node.config.display().to_string(), "fence"],
    );
}

#[test]
fn ssh_identity_readable_by_others_exits_2_with_chmod_600() {
    let cluster = offline_cluster();
    let identity = cluster.dir().join("id_ed25519");
    let known_hosts = cluster.dir().join("known_hosts");
    fs::write(&identity, "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
    fs::set_permissions(&identity, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&known_hosts, "").unwrap();
    let ssh = format!(
        "[[fence]]\nkind = \"ssh\"\nuser = \"warden\"\nidentity_file = {}\nknown_hosts = {}\n",
        toml_str(&identity.display().to_string()),
        toml_str(&known_hosts.display().to_string())
    );
    let node = cluster.node_with(
        "n1",
        NodeOptions {
            fences: Some(vec![ssh]),
            ..Default::default()
        },
    );
    assert_config_error(
        &node.config,
        None,
        &[&identity.display().to_string(), "chmod 600"],
    );
}

#[test]
fn zookeeper_auth_file_readable_by_others_exits_2_with_chmod_600() {
    let cluster = offline_cluster();
    let auth = cluster.dir().join("zk.auth");
    fs::write(&auth, "digest:warden:secret\n").unwrap();
    fs::set_permissions(&auth, fs::Permissions::from_mode(0o644)).unwrap();
    let node = cluster.node("n1");
    let connect_timeout = "connect_timeout = \"1s\"\n";
    rewrite(
        &node,
        connect_timeout,
        &format!(
            "{connect_timeout}auth_file = {}\n",
            toml_str(&auth.display().to_string())
        ),
        "auth_file",
    );
    assert_config_error(
        &node.config,
        None,
        &[&auth.display().to_string(), "chmod 600"],
    );
}

#[test]
fn check_config_prints_the_resolved_config_with_secrets_masked() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    let connect_timeout = "connect_timeout = \"1s\"\n";
    rewrite(
        &node,
        connect_timeout,
        &format!("{connect_timeout}auth = \"digest:warden:s3cr3t-pass\"\n"),
        "auth =",
    );
    let out = cli(&node.config, &["check-config"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&cluster.name), "{}", describe(&out));
    // A default the file does not set: the output is the resolved config.
    assert!(
        stdout.contains("hook_timeout"),
        "defaults not shown: {}",
        describe(&out)
    );
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        !all.contains("s3cr3t-pass"),
        "the secret is printed: {}",
        describe(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("stop_timeout"),
        "a warning about stop_timeout for a safe setting: {}",
        describe(&out)
    );
}

/// SPEC §7: `check-config` warns (exit 0) when the graceful stop leaves less than one
/// renewal interval of the lease: session 2s -> lease 1s, renewal every 333ms; a
/// stop_timeout of 900ms leaves 100ms.
#[test]
fn check_config_warns_when_stop_timeout_leaves_no_renewal_interval_of_the_lease() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    rewrite(
        &node,
        "stop_timeout = \"500ms\"",
        "stop_timeout = \"900ms\"",
        "900ms",
    );
    let out = cli(&node.config, &["check-config"]);
    assert!(
        out.status.success(),
        "a warning is not an error: {}",
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let warned = stderr.contains("stop_timeout")
        || stdout.lines().any(|l| {
            let l = l.to_lowercase();
            l.contains("stop_timeout") && l.contains("warn")
        });
    assert!(warned, "no warning about stop_timeout: {}", describe(&out));
}

#[test]
fn version_prints_the_package_version() {
    let out = warden_cmd(&["--version"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")),
        "{}",
        describe(&out)
    );
}

/// Asserts `warden <args>` exits 3 within a loose 3 x connect_timeout, with one clear
/// error on stderr.
fn assert_unreachable(config: &Path, connect_timeout: std::time::Duration, args: &[&str]) {
    let start = Instant::now();
    let out = cli(config, args);
    let took = start.elapsed();
    assert_eq!(
        out.status.code(),
        Some(3),
        "`warden {}`: {}",
        args.join(" "),
        describe(&out)
    );
    assert!(
        took < connect_timeout * 3,
        "`warden {}` took {took:?} to give up; connect_timeout is {connect_timeout:?}",
        args.join(" ")
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.trim().is_empty(),
        "no error message: {}",
        describe(&out)
    );
    assert!(!stderr.contains("panicked"), "{}", describe(&out));
}

/// Scenario 8 (CLI half): nothing listens at the ZooKeeper address.
#[test]
fn cli_exits_3_within_connect_timeout_when_zookeeper_is_down() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    for args in [&["status"][..], &["status", "--json"], &["init"]] {
        assert_unreachable(&node.config, cluster.connect_timeout, args);
    }
}

/// ZooKeeper accepts the connection but never answers (a hung server).
#[test]
fn status_exits_3_within_connect_timeout_when_zookeeper_hangs() {
    let mut zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let node = cluster.node("n1");
    zk.freeze();
    assert_unreachable(&node.config, cluster.connect_timeout, &["status", "--json"]);
    zk.thaw();
}

/// `init` creates the cluster's znodes; `status` reads the cluster from ZooKeeper alone,
/// so it works with every daemon down; `init --force` with no lock and no member clears.
#[test]
fn init_creates_the_cluster_and_status_works_with_every_daemon_down() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let node = cluster.node("n1");
    let client = ZkClient::connect(&zk.connect_string());

    let out = cli(&node.config, &["init"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        client.exists(&format!("/warden/{}", cluster.name)),
        "init did not create /warden/{}",
        cluster.name
    );

    let status = status_json(&node.config);
    assert_eq!(status["cluster"], cluster.name.as_str(), "{status:#}");
    assert_eq!(status["backend"], "zookeeper", "{status:#}");
    assert_eq!(status["paused"], false, "{status:#}");
    assert!(status["active"].is_null(), "{status:#}");
    assert!(status["breadcrumb"].is_null(), "{status:#}");
    assert_eq!(member_ids(&status), Vec::<String>::new(), "{status:#}");
    let text = cli(&node.config, &["status"]);
    assert!(text.status.success(), "{}", describe(&text));

    let out = cli(&node.config, &["init", "--force"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = cli(&node.config, &["init"]);
    assert!(
        out.status.success(),
        "init is repeatable: {}",
        describe(&out)
    );
}

// ---------------------------------------------------------------------------------------
// Issue 11: bad input gets one clear answer, never a panic or a hang.

/// `-c` naming a fifo blocked forever, and `-c /dev/zero` read until memory ran out: only
/// a regular file is read. A command that runs past its timeout is killed and fails the
/// test; the address space is capped, so that a regression fails here instead of calling
/// the OOM killer onto the machine.
#[test]
fn a_config_that_is_not_a_regular_file_exits_2_at_once() {
    let cluster = offline_cluster();
    let fifo = cluster.dir().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for (path, what) in [
        (fifo.as_path(), "a fifo"),
        (Path::new("/dev/zero"), "a character device"),
        (cluster.dir(), "a directory"),
    ] {
        for command in ["check-config", "run"] {
            let args: Vec<String> = [
                "-c",
                "ulimit -v 2097152 && exec \"$0\" \"$@\"",
                WARDEN,
                "-c",
                &path.display().to_string(),
                command,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let out = run_bounded("/bin/sh", &args, CLI_TIMEOUT);
            assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
            assert_eq!(
                String::from_utf8_lossy(&out.stderr).trim_end(),
                format!(
                    "warden: cannot read {}: it is {what}, not a regular file",
                    path.display()
                ),
                "{}",
                describe(&out)
            );
        }
    }
}

#[test]
fn a_config_over_1_mib_exits_2() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    let mut text = fs::read_to_string(&node.config).unwrap();
    text.push_str(&format!("# {}\n", "x".repeat(1 << 20)));
    fs::write(&node.config, &text).unwrap();
    let out = cli(&node.config, &["check-config"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("larger than the 1 MiB this file may be"),
        "{}",
        describe(&out)
    );
}

/// `stop_timeout = "18446744073709551615s"` passed `check-config`, then `run` panicked on
/// SIGTERM; as `session_timeout` it panicked at start. Every duration is bounded at load.
#[test]
fn a_duration_past_its_bound_exits_2_naming_the_bound() {
    for (from, to, key, bound) in [
        (
            "stop_timeout = \"500ms\"",
            "stop_timeout = \"18446744073709551615s\"",
            "service.stop_timeout",
            "it must be at most 1h",
        ),
        (
            "session_timeout = \"2s\"",
            "session_timeout = \"18446744073709551615s\"",
            "coordination.zookeeper.session_timeout",
            "it must be at most 1h",
        ),
        (
            "rejoin_delay = \"200ms\"",
            "rejoin_delay = \"1day\"",
            "election.rejoin_delay",
            "it must be at most 30s",
        ),
        (
            "kind = \"none\"",
            "kind = \"none\"\ninterval = \"1ns\"",
            "health.interval",
            "= 1ns is too short: it must be at least 10ms",
        ),
        (
            "timeout = \"3s\"",
            "timeout = \"99999h\"",
            "fence[1].timeout",
            "it must be at most 1h",
        ),
    ] {
        let cluster = offline_cluster();
        let node = cluster.node("n1");
        let marker = to.lines().last().unwrap();
        let line = rewrite(&node, from, to, marker);
        assert_config_error(&node.config, Some(line), &[&format!("`{key}`"), bound]);
    }
}

#[test]
fn a_signal_that_cannot_stop_a_process_exits_2() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    let line = rewrite(
        &node,
        "stop_timeout = \"500ms\"",
        "stop_timeout = \"500ms\"\nstop_signal = \"SIGSTOP\"",
        "SIGSTOP",
    );
    assert_config_error(
        &node.config,
        Some(line),
        &["`service.stop_signal`", "cannot end a process", "SIGTERM"],
    );
    let node = cluster.node("n2");
    let line = rewrite(
        &node,
        "signal = \"SIGKILL\"",
        "signal = \"SIGCONT\"",
        "SIGCONT",
    );
    assert_config_error(
        &node.config,
        Some(line),
        &["`fence[1].signal`", "cannot end a process"],
    );
}

#[test]
fn a_host_with_a_port_exits_2() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    let line = rewrite(
        &node,
        "host = \"127.0.0.1\"",
        "host = \"127.0.0.1:22\"",
        "127.0.0.1:22",
    );
    assert_config_error(
        &node.config,
        Some(line),
        &["`cluster.host`", "it has a port", "\"127.0.0.1\""],
    );
}

/// `check-config` accepted a directory as `known_hosts` and as the service command, and a
/// fifo as `known_hosts` blocked forever.
#[test]
fn a_directory_or_fifo_where_a_file_belongs_exits_2() {
    let cluster = offline_cluster();
    let dir = cluster.dir().join("a-directory");
    fs::create_dir(&dir).unwrap();
    let dir_s = dir.display().to_string();
    let node = cluster.node("n1");
    let line = rewrite(
        &node,
        &format!("command = [{}", toml_str(JOURNAL_SERVICE)),
        &format!("command = [{}", toml_str(&dir_s)),
        &dir_s,
    );
    assert_config_error(
        &node.config,
        Some(line),
        &[
            "`service.command[0]`",
            "is not an executable file: it is a directory",
        ],
    );

    let identity = cluster.dir().join("id_ed25519");
    fs::write(&identity, "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
    fs::set_permissions(&identity, fs::Permissions::from_mode(0o600)).unwrap();
    let fifo = cluster.dir().join("known_hosts.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for (known_hosts, what) in [(&dir, "a directory"), (&fifo, "a fifo")] {
        let ssh = format!(
            "[[fence]]\nkind = \"ssh\"\nuser = \"warden\"\nidentity_file = {}\nknown_hosts = {}\n",
            toml_str(&identity.display().to_string()),
            toml_str(&known_hosts.display().to_string())
        );
        let node = cluster.node_with(
            "n2",
            NodeOptions {
                fences: Some(vec![ssh]),
                ..Default::default()
            },
        );
        let reason = format!("it is {what}, not a regular file");
        assert_config_error(&node.config, None, &["`fence[0].known_hosts`", &reason]);
    }
}

/// 50,000 unknown keys took 15s, 80,000 took 40s: the report was quadratic.
#[test]
fn a_hundred_thousand_unknown_keys_exit_2_at_once() {
    let cluster = offline_cluster();
    let node = cluster.node("n1");
    let mut text = fs::read_to_string(&node.config).unwrap();
    text.push_str("\n[log]\n");
    let first = 1 + text.lines().count();
    for i in 0..100_000 {
        text.push_str(&format!("k{i}=1\n"));
    }
    assert!(text.len() < 1 << 20, "{} bytes", text.len());
    fs::write(&node.config, &text).unwrap();
    let start = Instant::now();
    let out = cli(&node.config, &["check-config"]);
    eprintln!(
        "100,000 unknown keys: check-config took {:?}",
        start.elapsed()
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "warden: {}:{first}:1: unknown key `k0` in [log]; valid keys here: level, format \
             (99999 more unknown keys follow)",
            node.config.display()
        )
    );
}

/// An offline cluster on the `backend` store with `table` as its settings (no server:
/// check-config does not connect).
fn offline_store_cluster(backend: &str, table: &str) -> Cluster {
    let mut cluster = offline_cluster();
    cluster.coordination = Some(format!(
        "[coordination]\nbackend = \"{backend}\"\n\n[coordination.{backend}]\n{table}\n"
    ));
    cluster
}

/// The 1-based line of the first line of `config` containing `marker`.
fn line_of(config: &Path, marker: &str) -> usize {
    fs::read_to_string(config)
        .unwrap()
        .lines()
        .position(|l| l.contains(marker))
        .expect("the marker is in the config")
        + 1
}

#[test]
fn check_config_validates_the_mysql_table() {
    // A good one passes offline, and shows no ZooKeeper table it does not use.
    let cluster = offline_store_cluster("mysql", "url = \"mysql://warden@127.0.0.1:1/warden\"");
    let node = cluster.node("n1");
    let out = cli(&node.config, &["check-config"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[coordination.mysql]") && !stdout.contains("[coordination.zookeeper]"),
        "{}",
        describe(&out)
    );

    // A password in the URL: refused, located, and not repeated.
    let cluster = offline_store_cluster("mysql", "url = \"mysql://warden:s3cr3t@db1/warden\"");
    let node = cluster.node("n1");
    let line = line_of(&node.config, "url =");
    assert_config_error(&node.config, Some(line), &["password_file"]);
    let out = cli(&node.config, &["check-config"]);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("s3cr3t"),
        "the password is repeated: {}",
        describe(&out)
    );

    // A misspelt key: located, with the nearest key.
    let cluster = offline_store_cluster(
        "mysql",
        "url = \"mysql://warden@db1/warden\"\npol_interval = \"1s\"",
    );
    let node = cluster.node("n1");
    let line = line_of(&node.config, "pol_interval");
    assert_config_error(&node.config, Some(line), &["pol_interval", "poll_interval"]);

    // A password file readable by others.
    let dir = tempfile::tempdir().unwrap();
    let pass = dir.path().join("mysql.pass");
    fs::write(&pass, "secret\n").unwrap();
    fs::set_permissions(&pass, fs::Permissions::from_mode(0o644)).unwrap();
    let cluster = offline_store_cluster(
        "mysql",
        &format!(
            "url = \"mysql://warden@db1/warden\"\npassword_file = {}",
            toml_str(&pass.display().to_string())
        ),
    );
    let node = cluster.node("n1");
    assert_config_error(
        &node.config,
        None,
        &[&pass.display().to_string(), "chmod 600"],
    );
}

#[test]
fn check_config_validates_the_redis_table() {
    let redis = |table: &str| offline_store_cluster("redis", table);
    let cluster = redis("url = \"rediss://db1:6380/0\"");
    let node = cluster.node("n1");
    let out = cli(&node.config, &["check-config"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[coordination.redis]"),
        "{}",
        describe(&out)
    );
    let cluster = redis("url = \"redis://:s3cr3t@db1:6379/0\"");
    let node = cluster.node("n1");
    let line = line_of(&node.config, "url =");
    assert_config_error(&node.config, Some(line), &["password_file"]);
    let out = cli(&node.config, &["check-config"]);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("s3cr3t"),
        "{}",
        describe(&out)
    );
    let cluster = redis("url = \"redis://db1:6379/0\"\nkey_prefx = \"w\"");
    let node = cluster.node("n1");
    let line = line_of(&node.config, "key_prefx");
    assert_config_error(&node.config, Some(line), &["key_prefx", "key_prefix"]);
}
