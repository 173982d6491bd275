//! Loading from disk (regular files of at most 1 MiB, the files and programs a config
//! names), serde's errors at their edges, the store URLs and password files, and `max_lag`.

use super::*;

/// Runs `load` on a thread, so that a test of something that could block (a fifo)
/// fails instead of hanging.
fn load_within(path: &Path) -> Result<Config, ConfigError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(load(&path));
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("load did not return within 20s")
}

#[test]
fn load_reads_only_a_regular_file_of_at_most_1_mib() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert_eq!(
        load_within(&fifo).unwrap_err().to_string(),
        format!(
            "cannot read {}: it is a fifo, not a regular file",
            fifo.display()
        )
    );
    assert_eq!(
        load_within(Path::new("/dev/zero")).unwrap_err().to_string(),
        "cannot read /dev/zero: it is a character device, not a regular file"
    );
    assert_eq!(
        load_within(dir.path()).unwrap_err().to_string(),
        format!(
            "cannot read {}: it is a directory, not a regular file",
            dir.path().display()
        )
    );
    // Padded with comments to exactly 1 MiB it loads; one byte more is refused.
    let path = dir.path().join("warden.toml");
    let mut text = on_disk(BASE);
    while text.len() < MAX_CONFIG_BYTES as usize {
        let room = MAX_CONFIG_BYTES as usize - text.len();
        let line = "#".repeat(room.min(100) - 1) + "\n";
        text.push_str(&line);
    }
    assert_eq!(text.len() as u64, MAX_CONFIG_BYTES);
    std::fs::write(&path, &text).unwrap();
    load_within(&path).unwrap();
    text.push('#');
    std::fs::write(&path, &text).unwrap();
    assert_eq!(
        load_within(&path).unwrap_err().to_string(),
        format!(
            "cannot read {}: it is 1.0 MiB, larger than the 1 MiB this file may be",
            path.display()
        )
    );
    std::fs::write(&path, b"\xff\xfe").unwrap();
    assert!(load_within(&path)
        .unwrap_err()
        .to_string()
        .ends_with("it is not UTF-8 text"));
}

#[test]
fn files_the_config_names_must_be_regular_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = ssh_config(dir.path(), 0o600);
    load_within(&path).unwrap();
    let known = dir.path().join("known_hosts");
    std::fs::remove_file(&known).unwrap();
    std::fs::create_dir(&known).unwrap();
    assert_eq!(
        load_within(&path).unwrap_err().to_string(),
        format!(
            "{}:15:15: `fence[0].known_hosts`: cannot read {}: it is a directory, not a \
             regular file",
            path.display(),
            known.display()
        )
    );
    std::fs::remove_dir(&known).unwrap();
    nix::unistd::mkfifo(&known, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let m = load_within(&path).unwrap_err().to_string();
    assert!(m.ends_with("it is a fifo, not a regular file"), "{m}");
    std::fs::remove_file(&known).unwrap();
    std::fs::write(&known, "").unwrap();

    let key = dir.path().join("id_ed25519");
    std::fs::remove_file(&key).unwrap();
    nix::unistd::mkfifo(&key, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let m = load_within(&path).unwrap_err().to_string();
    assert!(
        m.contains("`fence[0].identity_file`: cannot read")
            && m.ends_with("it is a fifo, not a regular file"),
        "{m}"
    );

    // An auth file: a fifo, or a file far larger than one line of credentials.
    let auth = dir.path().join("zk.auth");
    nix::unistd::mkfifo(&auth, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let text = with(
        "connect = ",
        &format!(
            "auth_file = \"{}\"\nacl = \"creator\"\nconnect = ",
            auth.display()
        ),
    );
    std::fs::write(&path, on_disk(&text)).unwrap();
    let m = load_within(&path).unwrap_err().to_string();
    assert!(
        m.contains("`coordination.zookeeper.auth_file`: cannot read")
            && m.ends_with("it is a fifo, not a regular file"),
        "{m}"
    );
    std::fs::remove_file(&auth).unwrap();
    std::fs::write(&auth, "digest:w:".to_string() + &"x".repeat(100_000)).unwrap();
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o600)).unwrap();
    let m = load_within(&path).unwrap_err().to_string();
    assert!(
        m.ends_with("it is 97.7 KiB, larger than the 64 KiB this file may be")
            || m.contains("larger than the 64 KiB"),
        "{m}"
    );
}

#[test]
fn programs_named_by_absolute_path_must_be_executable_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warden.toml");
    let sub = dir.path().join("subdir");
    std::fs::create_dir(&sub).unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o700)).unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let load_text = |text: &str| {
        std::fs::write(&path, text).unwrap();
        load_within(&path)
    };
    let service = |program: &Path| {
        with(
            "\"/usr/bin/my-service\"",
            &format!("\"{}\"", program.display()),
        )
    };
    let m = load_text(&service(&sub)).unwrap_err().to_string();
    assert_eq!(
        m,
        format!(
            "{}:9:12: `service.command[0]` = \"{}\" is not an executable file: it is a directory",
            path.display(),
            sub.display()
        )
    );
    let m = load_text(&service(&fifo)).unwrap_err().to_string();
    assert!(
        m.ends_with("is not an executable file: it is a fifo"),
        "{m}"
    );
    let m = load_text(&service(&plain)).unwrap_err().to_string();
    assert!(
        m.ends_with(&format!(
            "is not an executable file: nobody may execute it (mode 0644); run `chmod +x {}`",
            plain.display()
        )),
        "{m}"
    );
    let m = load_text(&service(&dir.path().join("missing")))
        .unwrap_err()
        .to_string();
    assert!(
        m.contains(":9:12: `service.command[0]`: cannot read ")
            && m.ends_with("No such file or directory"),
        "{m}"
    );
    // A bare name is looked up in PATH when it runs: not checked here.
    load_text(&with("\"/usr/bin/my-service\"", "\"my-service\"")).unwrap();

    // Hooks, health checks and fence scripts alike; only the ones that apply.
    let sub_s = sub.display().to_string();
    let hooks = on_disk(&with(
        "command = [\"/usr/bin/my-service\"]",
        &format!("mode = \"hooks\"\npromote = [\"/bin/true\"]\ndemote = [\"{sub_s}\", \"x\"]"),
    ));
    let m = load_text(&hooks).unwrap_err().to_string();
    assert!(
        m.contains(":11:11: `service.demote[0]` = ") && m.ends_with("it is a directory"),
        "{m}"
    );
    let m = load_text(&format!(
        "{}\n[health]\nkind = \"exec\"\ncommand = [\"{sub_s}\"]\n",
        on_disk(BASE)
    ))
    .unwrap_err()
    .to_string();
    assert!(
        m.contains("`health.command[0]` = ") && m.ends_with("it is a directory"),
        "{m}"
    );
    let m = load_text(&format!(
        "{}\n[health]\nstandby_command = [\"{sub_s}\"]\n",
        on_disk(BASE)
    ))
    .unwrap_err()
    .to_string();
    assert!(
        m.contains("`health.standby_command[0]` = ") && m.ends_with("it is a directory"),
        "{m}"
    );
    let m = load_text(&on_disk(&with(
        "[\"/bin/true\"]",
        &format!("[\"{sub_s}\"]"),
    )))
    .unwrap_err()
    .to_string();
    assert!(
        m.contains(":13:12: `fence[0].command[0]` = ") && m.ends_with("it is a directory"),
        "{m}"
    );
    // The service command of spawn mode is not run in hooks mode: not checked.
    let hooks_with_command = on_disk(&with(
        "command = [\"/usr/bin/my-service\"]",
        &format!("command = [\"{sub_s}\"]\nmode = \"hooks\"\npromote = [\"/bin/true\"]\ndemote = [\"/bin/true\"]"),
    ));
    load_text(&hooks_with_command).unwrap();
}

#[test]
fn the_first_error_serde_meets_is_reported_a_missing_key_where_its_table_ends() {
    // [cluster] ends without node_id before [service]'s wrong value is read.
    let m =
        msg(&with("node_id = \"rm1\"\n", "")
            .replace("[service]\n", "[service]\nstop_timeout = 5\n"));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:1:1: missing required key `node_id` in [cluster]"
    );
    // Fixed, the wrong value is next.
    let m = msg(&BASE.replace("[service]\n", "[service]\nstop_timeout = 5\n"));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:9:16: `service.stop_timeout` = 5 has no unit: write a string \
         with a unit, such as \"5s\" or \"250ms\""
    );
}

#[test]
fn a_table_missing_from_the_top_level_is_reported_once_the_tables_there_read() {
    let no_coordination = with(
        "[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181\"\n",
        "",
    );
    let m = msg(&no_coordination.replace("kind = \"script\"\n", ""));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:9:1: missing required key `kind` in fence[0]: one of \"ssh\", \
         \"signal\" or \"script\""
    );
    let m = msg(&no_coordination);
    assert_eq!(
        m,
        "/etc/warden/warden.toml:1:1: missing required table [coordination]"
    );
}

#[test]
fn a_datetime_is_not_a_table_of_strings() {
    let m = msg(&format!(
        "{BASE}protocol = \"fence-agent\"\noptions = 1979-05-27\n"
    ));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:15:11: `fence[0].options` must be a table of strings, not a \
         datetime"
    );
}

#[test]
fn a_table_written_as_an_array_is_refused_even_when_empty() {
    for table in ["log", "election", "health"] {
        let m = msg(&format!("{table} = []\n{BASE}"));
        assert!(
            m.ends_with(&format!("`{table}` must be a table, not an array")),
            "{m}"
        );
    }
    let m = msg(&format!(
        "fence = [5, {{}}]\n{}",
        BASE.split("[[fence]]").next().unwrap_or_default()
    ));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:1:10: `fence[0]` must be a table, not an integer"
    );
}

#[test]
fn numbers_too_large_for_toml_get_the_message_of_their_key() {
    let big = "9".repeat(45);
    let m = msg(&with(
        "node_id = \"rm1\"\n",
        &format!("node_id = \"rm1\"\nport = {big}\n"),
    ));
    assert_eq!(
        m,
        format!(
            "/etc/warden/warden.toml:4:8: `cluster.port` = {big} is out of range: it must be \
             from 1 to 65535"
        )
    );
    let m = msg(&with("[service]\n", "[service]\nstop_timeout = 1e400\n"));
    assert!(
        m.ends_with("`service.stop_timeout` = 1e400 has no unit: write a string with a unit, such as \"1e400s\" or \"250ms\""),
        "{m}"
    );
    // An integer is shown as toml read it.
    let m = msg(&with(
        "node_id = \"rm1\"\n",
        "node_id = \"rm1\"\nport = 0x10000\n",
    ));
    assert!(
        m.ends_with("`cluster.port` = 10000 is out of range: it must be from 1 to 65535"),
        "{m}"
    );
}

/// Issue 31, class 6: URL parts the drivers act on but warden does not document reach the
/// driver no more. `#insecure` turns off rediss's certificate check (redis crate); any
/// other fragment is refused by the driver at connect (rediss) or ignored (redis, mysql).
#[test]
fn store_url_fragments_are_refused() {
    let redis = |url: &str| {
        with(
            "[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181\"\n",
            &format!(
                "[coordination]\nbackend = \"redis\"\n\n[coordination.redis]\nurl = \"{url}\"\n"
            ),
        )
    };
    let m = msg(&redis("rediss://db1:6379/0#insecure"));
    assert!(
        m.contains("`coordination.redis.url`")
            && m.contains("#insecure")
            && m.contains("certificate")
            && m.contains("remove"),
        "{m}"
    );
    for url in [
        "redis://db1:6379/0#insecure",
        "redis://db1:6379/0#x",
        "rediss://db1/0#",
    ] {
        let m = msg(&redis(url));
        assert!(
            m.contains("`coordination.redis.url`") && m.contains("fragment"),
            "{url}: {m}"
        );
    }
    let m = msg(&mysql("url = \"mysql://warden@db1/warden#insecure\""));
    assert!(
        m.contains("`coordination.mysql.url`") && m.contains("fragment"),
        "{m}"
    );
    // IPv6 hosts and a user name stay usable.
    ok(&redis("redis://warden@[::1]:6379/0"));
    ok(&mysql("url = \"mysql://warden@[::1]:3306/warden\""));
}

/// Issue 31, class 6: a `password_file` that is not UTF-8, or holds a NUL or a line break
/// inside the password, passed `check-config` and made every command exit 3 (or sent a
/// password with a newline). `load` refuses it with exit 2, naming the key and the file,
/// without repeating the content; a trailing newline stays allowed.
#[test]
fn a_store_password_file_that_cannot_be_a_password_is_refused_by_load() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("redis.pass");
    let text = with(
        "[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181\"\n",
        &format!(
            "[coordination]\nbackend = \"redis\"\n\n[coordination.redis]\nurl = \
             \"redis://db1:6379/0\"\npassword_file = \"{}\"\n",
            file.display()
        ),
    );
    let path = dir.path().join("warden.toml");
    std::fs::write(&path, on_disk(&text)).unwrap();
    let write = |content: &[u8]| {
        std::fs::write(&file, content).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    for (content, says) in [
        (&b"s3cr\xffet\n"[..], "not UTF-8"),
        (b"s3cr\0et\n", "NUL"),
        (b"s3cr\net\n", "line"),
        (b"s3cret\n\nmore\n", "line"),
        (b"s3cr\ret", "line"),
    ] {
        write(content);
        let e = load(&path).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("`coordination.redis.password_file`")
                && m.contains(&file.display().to_string())
                && m.contains(says),
            "{content:?}: {m}"
        );
        assert!(!m.contains("s3cr"), "{m}");
        assert_eq!(e.key(), Some("coordination.redis.password_file"));
    }
    write(b"s3cret\r\n");
    let c = load(&path).unwrap();
    assert_eq!(c.read_store_password().unwrap().as_deref(), Some("s3cret"));
    // At run time too (the file may have changed since).
    write(b"s3cr\net\n");
    let m = c.read_store_password().unwrap_err().to_string();
    assert!(
        m.contains("`coordination.redis.password_file`") && m.contains("line"),
        "{m}"
    );
}

/// Issue 31, class 6: URL parts the drivers decode their own way. A user name or MySQL
/// database whose percent-encoding is not UTF-8 (mysql_async replaces the bytes, the
/// login then fails: exit 3 at connect) or decodes to a control character, and a MySQL
/// path of more than one segment (the driver silently takes the first) are refused at
/// load, naming the key.
#[test]
fn store_url_users_and_databases_are_checked() {
    for (url, says) in [
        ("mysql://%ff@db1/warden", "user name"),
        ("mysql://war%0Aden@db1/warden", "user name"),
        ("mysql://warden@db1/war%ffden", "database"),
        ("mysql://warden@db1/war%00den", "database"),
        ("mysql://warden@db1/warden/extra", "database"),
    ] {
        let m = msg(&mysql(&format!("url = \"{url}\"")));
        assert!(
            m.contains("`coordination.mysql.url`") && m.contains(says),
            "{url}: {m}"
        );
    }
    let m = msg(&with(
        "[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181\"\n",
        "[coordination]\nbackend = \"redis\"\n\n[coordination.redis]\nurl = \
         \"redis://w%0Ad@db1/0\"\n",
    ));
    assert!(
        m.contains("`coordination.redis.url`") && m.contains("user name"),
        "{m}"
    );
    ok(&mysql("url = \"mysql://war%20den@db1/my%2Ddb\""));
}

#[test]
fn max_lag_is_a_non_negative_integer_and_no_limit_by_default() {
    assert_eq!(ok(BASE).election.max_lag, None);
    let c = ok(&in_table("[election]", "max_lag = 1048576"));
    assert_eq!(c.election.max_lag, Some(1_048_576));
    assert_eq!(ok(&c.render_masked()), c);
    assert!(c.render_masked().contains("max_lag = 1048576"));
    assert_eq!(
        ok(&in_table("[election]", "max_lag = 0")).election.max_lag,
        Some(0)
    );
    let m = msg(&in_table("[election]", "max_lag = -1"));
    assert!(m.contains("`election.max_lag`") && m.contains("-1"), "{m}");
    let m = msg(&in_table("[election]", "max_lag = \"1MB\""));
    assert!(
        m.contains("`election.max_lag`") && m.contains("integer"),
        "{m}"
    );
}
