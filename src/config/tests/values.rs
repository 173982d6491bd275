//! Values at their edges: durations' bounds and units, signals, hosts, NULs, pidfiles,
//! and messages that stay one line whatever a value holds.

use super::*;

#[test]
fn every_duration_has_an_upper_bound() {
    // (table, key, dotted key, the longest accepted, the shortest refused)
    let cases = [
        (
            "[coordination.zookeeper]",
            "session_timeout",
            "coordination.zookeeper.session_timeout",
            "1h",
            "1h 1ms",
        ),
        (
            "[coordination.zookeeper]",
            "connect_timeout",
            "coordination.zookeeper.connect_timeout",
            "10m",
            "10m 1s",
        ),
        (
            "[election]",
            "rejoin_delay",
            "election.rejoin_delay",
            "30s",
            "31s",
        ),
        (
            "[service]",
            "stop_timeout",
            "service.stop_timeout",
            "1h",
            "61m",
        ),
        (
            "[service]",
            "hook_timeout",
            "service.hook_timeout",
            "1h",
            "2h",
        ),
        ("[health]", "interval", "health.interval", "1h", "2h"),
        ("[health]", "timeout", "health.timeout", "1h", "2h"),
        (
            "[health]",
            "start_grace",
            "health.start_grace",
            "1day",
            "25h",
        ),
        ("[[fence]]", "timeout", "fence[0].timeout", "1h", "2h"),
    ];
    for (table, key, dotted, longest, refused) in cases {
        let text = |v: &str| {
            if table == "[[fence]]" {
                format!("{BASE}{key} = \"{v}\"\n")
            } else {
                in_table(table, &format!("{key} = \"{v}\""))
            }
        };
        ok(&text(longest));
        for v in [refused, "18446744073709551615s", "584542046090years"] {
            let m = msg(&text(v));
            assert!(
                m.contains(&format!("`{dotted}` = "))
                    && m.contains(" is too long: it must be at most "),
                "{v}: {m}"
            );
            assert!(m.starts_with("/etc/warden/warden.toml:"), "{m}");
        }
    }
    // The location is the value's, and the bound and its reason are named.
    let m = msg(&with(
        "[service]\n",
        "[service]\nstop_timeout = \"18446744073709551615s\"\n",
    ));
    assert!(
        m.starts_with("/etc/warden/warden.toml:9:16: `service.stop_timeout` = 584542046090years")
            && m.contains("is too long: it must be at most 1h (a stop or hook that hangs"),
        "{m}"
    );
    let m = msg(&with(
        "connect = ",
        "session_timeout = \"18446744073709551615s\"\nconnect = ",
    ));
    assert!(
        m.contains(":6:19: `coordination.zookeeper.session_timeout` = ")
            && m.contains("it must be at most 1h"),
        "{m}"
    );
}

#[test]
fn sub_millisecond_durations_are_refused_and_shown_with_their_unit() {
    let health = |line: &str| msg(&format!("{BASE}\n[health]\n{line}\n"));
    assert_eq!(
        health("interval = \"1ns\""),
        "/etc/warden/warden.toml:16:12: `health.interval` = 1ns is too short: it must be at \
         least 10ms (checks more often than that keep the service and the host busy \
         answering them)"
    );
    assert!(health("interval = \"9ms\"").contains("= 9ms is too short"));
    assert!(health("timeout = \"999us\"")
        .contains("`health.timeout` = 999us is too short: it must be at least 1ms"));
    ok(&with(
        "[service]\n",
        "[service]\nstop_timeout = \"1ms 500us\"\n",
    ));
    let m = msg(&format!("{BASE}timeout = \"1us\"\n"));
    assert!(
        m.contains("`fence[0].timeout` = 1us is too short: it must be at least 1ms"),
        "{m}"
    );
    let m = msg(&in_table("[election]", "rejoin_delay = \"0s\""));
    assert!(
        m.contains("`election.rejoin_delay` must be longer than 0: at least 1ms"),
        "{m}"
    );
    // A start grace of 0 means none, and is fine.
    assert_eq!(
        ok(&format!("{BASE}\n[health]\nstart_grace = \"0s\"\n"))
            .health
            .start_grace,
        Duration::ZERO
    );
    ok(&format!(
        "{BASE}\n[health]\ninterval = \"10ms\"\ntimeout = \"1ms\"\n"
    ));
    assert_eq!(fmt_duration(Duration::from_nanos(1)), "1ns");
    assert_eq!(fmt_duration(Duration::from_micros(1500)), "1ms 500us");
    assert_eq!(fmt_duration(Duration::ZERO), "0s");
    assert_eq!(fmt_computed(Duration::from_nanos(333_333_333)), "333ms");
    assert_eq!(
        fmt_computed(Duration::from_nanos(1_666_666_666)),
        "1s 666ms"
    );
    assert_eq!(fmt_computed(Duration::from_nanos(999_999)), "999us 999ns");
    assert_eq!(
        fmt_duration(Duration::from_nanos(1_666_666_666)),
        "1s 666ms"
    );
    assert_eq!(
        fmt_duration(Duration::from_secs(u64::MAX)),
        humantime::format_duration(Duration::from_secs(u64::MAX)).to_string()
    );
}

#[test]
fn signals_that_cannot_end_a_process_are_refused() {
    for signal in [
        "SIGSTOP", "SIGCONT", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGCHLD", "STOP", "19", "cont",
    ] {
        let m = msg(&with(
            "[service]\n",
            &format!("[service]\nstop_signal = \"{signal}\"\n"),
        ));
        assert!(
            m.starts_with(&format!(
                "/etc/warden/warden.toml:9:15: `service.stop_signal` = \"{signal}\" cannot end a process: "
            )) && m.ends_with("use a signal that ends it, such as \"SIGTERM\" or \"SIGKILL\""),
            "{m}"
        );
        let m = msg(&format!(
            "{BASE}\n[[fence]]\nkind = \"signal\"\nsignal = \"{signal}\"\n"
        ));
        assert!(
            m.contains(":17:10: `fence[1].signal` = ") && m.contains("cannot end a process"),
            "{m}"
        );
    }
    for signal in ["SIGTERM", "SIGKILL", "SIGINT", "SIGQUIT", "TERM", "15"] {
        ok(&with(
            "[service]\n",
            &format!("[service]\nstop_signal = \"{signal}\"\n"),
        ));
        ok(&format!(
            "{BASE}\n[[fence]]\nkind = \"signal\"\nsignal = \"{signal}\"\n"
        ));
    }
    // A service may stop on SIGHUP or SIGUSR1; a warden ignores them, so a fence (which
    // signals the old warden too) never ends it with one (review of issue 31, F2).
    for signal in [
        "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPWR", "HUP", "1",
    ] {
        ok(&with(
            "[service]\n",
            &format!("[service]\nstop_signal = \"{signal}\"\n"),
        ));
        let m = msg(&format!(
            "{BASE}\n[[fence]]\nkind = \"signal\"\nsignal = \"{signal}\"\n"
        ));
        assert!(
            m.contains(":17:10: `fence[1].signal` = ") && m.contains("cannot fence a warden"),
            "{m}"
        );
    }
}

#[test]
fn cluster_host_is_a_name_or_an_address_alone() {
    let host = |h: &str| {
        with(
            "node_id = \"rm1\"\n",
            &format!(
                "node_id = \"rm1\"\nhost = {}\n",
                toml::Value::String(h.into())
            ),
        )
    };
    for good in [
        "rm1",
        "rm1.example.com",
        "rm_1-a",
        "10.0.0.1",
        "::1",
        "fd00::1",
        "fe80::1%eth0",
    ] {
        assert_eq!(ok(&host(good)).cluster.host.as_deref(), Some(good));
    }
    for (bad, says) in [
        (
            "rm1:22",
            "it has a port; give the host alone, such as \"rm1\"",
        ),
        (
            "10.0.0.1:8032",
            "it has a port; give the host alone, such as \"10.0.0.1\"",
        ),
        (
            "[::1]:22",
            "it has a port; give the host alone, such as \"::1\"",
        ),
        (
            "[::1]",
            "write an IPv6 address without brackets, such as \"::1\"",
        ),
        ("rm1/x", "a name has at most 253 letters"),
        ("rm 1", "a name has at most 253 letters"),
        ("rm1\t", "a name has at most 253 letters"),
        ("", "it is empty"),
    ] {
        let m = msg(&host(bad));
        assert!(
            m.starts_with("/etc/warden/warden.toml:4:8: `cluster.host` = ")
                && m.contains("is not a host name or address: ")
                && m.contains(says),
            "{bad:?}: {m}"
        );
        assert!(!m.contains('\n') && !m.contains('\t'), "{m}");
    }
    let m = msg(&host(&"a".repeat(254)));
    assert!(m.contains("a name has at most 253"), "{m}");
    let m = msg(&host("rm1\0"));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:4:8: `cluster.host` = \"rm1\\0\" contains a NUL character \
         (\\u0000), which no name, path or argument can hold: remove it"
    );
}

#[test]
fn a_nul_in_any_string_is_refused() {
    for (from, to, key) in [
        ("\"/usr/bin/my-service\"", "\"/usr/bin/my\\u0000service\"", "`service.command[0]`"),
        ("connect = ", "auth_file = \"/etc/zk\\u0000\"\nconnect = ", "`coordination.zookeeper.auth_file`"),
        ("[service]\n", "[service]\nmode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]\npidfile = \"/run/a\\u0000b\"\n", "`service.pidfile`"),
    ] {
        let m = msg(&with(from, to));
        assert!(m.contains(key) && m.contains("contains a NUL character"), "{m}");
    }
}

#[test]
fn a_relative_pidfile_is_refused() {
    let hooks = |pidfile: &str| {
        with(
            "command = [\"/usr/bin/my-service\"]",
            &format!(
                "mode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]\npidfile = \"{pidfile}\""
            ),
        )
    };
    assert_eq!(
        msg(&hooks("run/my.pid")),
        "/etc/warden/warden.toml:12:11: `service.pidfile` = \"run/my.pid\" must be an absolute \
         path, such as \"/run/my-service.pid\""
    );
    ok(&hooks("/run/my.pid"));
}

#[test]
fn messages_are_one_line_whatever_the_value_holds() {
    for text in [
        with("[service]\n", "[service]\nmode = \"sp\\nawn\"\n"),
        with(
            "[service]\n",
            "[service]\nstop_signal = \"\\u001b[31mTERM\\n\"\n",
        ),
        with("[service]\n", "[service]\n\"bad\\nkey\" = 1\n"),
        with("node_id = \"rm1\"", "node_id = \"rm\\n1\""),
        with("\"zk1:2181,zk2:2181\"", "\"zk1\\n:2181,zk2:2181\""),
        format!("{BASE}\n[log]\nlevel = \"inf\\no\"\n"),
        format!("{BASE}\n[api]\nlisten = \"\\r\\n\"\n"),
        with("connect = ", "root = \"/a\\n\"\nconnect = "),
        with("[service]\n", "[service]\nstop_timeout = \"1\\nparsec\"\n"),
        format!("{BASE}\n[health]\nkind = \"tcp\"\naddress = \"a\\n:1\"\n"),
    ] {
        let m = msg(&text);
        assert!(
            !m.contains(['\n', '\r', '\u{1b}']),
            "not one line: {m:?}\n{text}"
        );
    }
    // The path of the file, from the command line, is escaped too.
    let e = parse("[cluster\n", Path::new("/tmp/a\nb.toml")).unwrap_err();
    assert!(e.to_string().starts_with("/tmp/a\\nb.toml:1:"), "{e}");
}

#[test]
fn many_unknown_keys_name_the_first_and_count_the_rest() {
    let mut text = format!("{BASE}\n[log]\n");
    for i in 0..100_000 {
        text.push_str(&format!("k{i} = 1\n"));
    }
    let m = msg(&text);
    assert_eq!(
        m,
        "/etc/warden/warden.toml:16:1: unknown key `k0` in [log]; valid keys here: level, \
         format (99999 more unknown keys follow)"
    );
    // On one line too (an inline table): still linear, still the first key.
    let keys: Vec<String> = (0..100_000).map(|i| format!("k{i} = 1")).collect();
    let m = msg(&format!("{BASE}\n[log]\nx = {{ {} }}\n", keys.join(", ")));
    assert!(m.contains("unknown key `x` in [log]"), "{m}");
    let m = msg(&format!(
        "{}\n[log]\nspam = 1\n",
        with("[service]\n", "[service]\nbogus = 2\n")
    ));
    assert!(
        m.starts_with("/etc/warden/warden.toml:9:1: unknown key `bogus` in [service]")
            && m.ends_with(" (1 more unknown key follows)"),
        "{m}"
    );
}
