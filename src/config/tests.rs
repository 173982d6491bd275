use super::*;

const PATH: &str = "/etc/warden/warden.toml";

/// The smallest valid config; tests append to it or replace parts of it.
const BASE: &str = r#"[cluster]
name = "rm"
node_id = "rm1"

[coordination.zookeeper]
connect = "zk1:2181,zk2:2181"

[service]
command = ["/usr/bin/my-service"]

[[fence]]
kind = "script"
command = ["/bin/true"]
"#;

fn ok(text: &str) -> Config {
    match parse(text, Path::new(PATH)) {
        Ok(c) => c,
        Err(e) => panic!("expected a valid config, got: {e}\n{text}"),
    }
}

fn err(text: &str) -> ConfigError {
    match parse(text, Path::new(PATH)) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e,
    }
}

fn msg(text: &str) -> String {
    err(text).to_string()
}

/// `text` for [`load`], which checks that the programs it names exist: BASE's service
/// program is made up.
fn on_disk(text: &str) -> String {
    text.replace("/usr/bin/my-service", "/bin/true")
}

/// BASE with `from` replaced by `to`, which must occur in it.
fn with(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from:?} is not in BASE");
    BASE.replacen(from, to, 1)
}

fn mysql(table: &str) -> String {
    with(
        "[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181\"\n",
        &format!("[coordination]\nbackend = \"mysql\"\n\n[coordination.mysql]\n{table}\n"),
    )
}

#[test]
fn a_mysql_backend_needs_only_its_own_table() {
    let c = ok(&mysql("url = \"mysql://warden@db1:3306/warden\""));
    assert_eq!(c.coordination.backend, Backend::Mysql);
    let m = c.mysql().expect("the mysql table");
    assert_eq!(m.table_prefix, "warden_");
    assert_eq!(c.session_timeout(), Duration::from_secs(10));
    assert_eq!(c.poll_interval(), Some(Duration::from_millis(250)));
    assert_eq!(c.lease(), Duration::from_secs(5));
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    let m = msg(&with(
        "[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181\"\n",
        "[coordination]\nbackend = \"mysql\"\n",
    ));
    assert!(m.contains("needs a [coordination.mysql] table"), "{m}");
}

/// SPEC 10a: a URL parameter the build cannot honour, or that would silently change
/// what warden relies on, is a config error naming it; so is one the driver ignores.
#[test]
fn store_url_parameters_are_checked() {
    for (param, says) in [
        ("require_ssl=true", "asks for TLS"),
        ("verify_identity=false", "asks for TLS"),
        ("pool_max=1", "connection pool"),
        ("wait_timeout=28800", "session_timeout"),
        ("client_found_rows=true", "affected"),
        ("prefer_socket=true", "Unix socket"),
        ("sslmode=require", "unknown parameter"),
        ("compression=quick", "is not usable"),
    ] {
        let m = msg(&mysql(&format!(
            "url = \"mysql://warden@db1/warden?{param}\""
        )));
        let name = param.split('=').next().unwrap_or_default();
        assert!(
            m.contains("`coordination.mysql.url`") && m.contains(name) && m.contains(says),
            "{param}: {m}"
        );
    }
    ok(&mysql(
        "url = \"mysql://warden@db1/warden?tcp_keepalive=10000&compression=fast\"",
    ));
    let redis = |url: &str| {
        with(
            "[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181\"\n",
            &format!(
                "[coordination]\nbackend = \"redis\"\n\n[coordination.redis]\nurl = \"{url}\"\n"
            ),
        )
    };
    let m = msg(&redis("redis://db1:6379/0?db=3"));
    assert!(m.contains("unknown parameter \"db\""), "{m}");
    let m = msg(&redis("redis://db1:6379/warden"));
    assert!(m.contains("a Redis database is a number"), "{m}");
    let m = msg(&redis("redis://db1:6379/0?protocol=7"));
    assert!(m.contains("is not usable"), "{m}");
    ok(&redis("rediss://db1:6379/0?protocol=resp2"));
}

#[test]
fn mysql_values_are_checked() {
    let m = msg(&mysql("url = \"mysql://warden:secret@db1/warden\""));
    assert!(
        m.contains("contains a password: put it in password_file"),
        "{m}"
    );
    assert!(!m.contains("secret"), "the password is repeated: {m}");
    let m = msg(&mysql("url = \"redis://db1/warden\""));
    assert!(
        m.contains("`coordination.mysql.url`") && m.contains("scheme"),
        "{m}"
    );
    let m = msg(&mysql("url = \"mysql://warden@db1:3306\""));
    assert!(m.contains("names no database"), "{m}");
    let m = msg(&mysql(
        "url = \"mysql://warden@db1/warden\"\nsession_timeout = \"2s\"\npoll_interval = \"1s\"",
    ));
    assert!(m.contains("less than half of session_timeout"), "{m}");
    let m = msg(&mysql(
        "url = \"mysql://warden@db1/warden\"\ntable_prefix = \"w-\"",
    ));
    assert!(
        m.contains("table_prefix") && m.contains("letters, digits or '_'"),
        "{m}"
    );
    let m = msg(&mysql(
        "url = \"mysql://warden@db1/warden\"\npoll_intervall = \"1s\"",
    ));
    assert!(
        m.contains("poll_interval"),
        "the nearest key is suggested: {m}"
    );
    let c = ok(&mysql(
        "url = \"mysql://warden@db1/warden\"\nsession_timeout = \"2s\"\npoll_interval = \"900ms\"",
    ));
    let w = c.warnings().join("\n");
    assert!(
        w.contains("poll_interval") && w.contains("session_timeout = 2s"),
        "{w}"
    );
}

#[test]
fn reference_config_parses_without_warnings() {
    let c = ok(include_str!("../../config/warden.toml"));
    assert_eq!(c.fence.len(), 4);
    assert_eq!(c.api.as_ref().map(|a| a.listen.port()), Some(7232));
    assert_eq!(c.cluster.port, Some(8032));
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn reference_config_names_every_key_of_the_schema() {
    // Every key must be documented in the reference, set or commented out.
    let text = include_str!("../../config/warden.toml");
    for (label, fields) in all_tables() {
        for name in fields {
            let documented = text.lines().any(|l| {
                let l = l.trim_start_matches(['#', ' ']);
                l.starts_with(&format!("{} =", name))
                    || l.starts_with(&format!("[{}]", name))
                    || l.contains(&format!("[{}", name))
                    || l.starts_with(&format!("[coordination.{}]", name))
            });
            assert!(
                documented,
                "{label}: `{}` is not in config/warden.toml",
                name
            );
        }
    }
}

#[test]
fn example_configs_parse() {
    let spawn = ok(include_str!("../../config/examples/spawn.toml"));
    assert_eq!(spawn.service.mode, ServiceMode::Spawn);
    assert!(matches!(spawn.fence[0], FenceMethod::Signal(_)));
    assert!(matches!(spawn.fence[1], FenceMethod::Script(_)));
    assert!(spawn.warnings().is_empty(), "{:?}", spawn.warnings());
    let hooks = ok(include_str!("../../config/examples/hooks.toml"));
    assert_eq!(hooks.service.mode, ServiceMode::Hooks);
    assert_eq!(
        hooks.service.pidfile,
        Some(PathBuf::from("/run/my-service.pid"))
    );
    assert!(hooks.warnings().is_empty(), "{:?}", hooks.warnings());
}

#[test]
fn defaults_are_filled_in() {
    let c = ok(BASE);
    let zk = &c.coordination.zookeeper;
    assert_eq!(c.coordination.backend, Backend::Zookeeper);
    assert_eq!(zk.root, "/warden");
    assert_eq!(zk.session_timeout, Duration::from_secs(10));
    assert_eq!(zk.connect_timeout, Duration::from_secs(5));
    assert_eq!(zk.acl, AclMode::Open);
    assert_eq!(c.election.rejoin_delay, Duration::from_secs(1));
    assert_eq!(c.service.mode, ServiceMode::Spawn);
    assert_eq!(c.service.stop_signal.to_string(), "SIGTERM");
    assert_eq!(c.service.stop_timeout, Duration::from_secs(3));
    assert_eq!(c.service.hook_timeout, Duration::from_secs(3));
    assert_eq!(c.health, HealthConfig::default());
    assert_eq!((c.health.fall, c.health.rise), (3, 2));
    assert_eq!(c.api, None);
    assert_eq!(c.log, LogConfig::default());
    assert_eq!(c.renewal_interval(), Duration::from_secs(10) / 6);
    assert_eq!(c.lease(), Duration::from_secs(5));
    assert_eq!(c.demote_grace(), Duration::from_secs(3));
    match &c.fence[0] {
        FenceMethod::Script(s) => {
            assert_eq!(s.protocol, ScriptProtocol::Env);
            assert_eq!(s.timeout, Duration::from_secs(30));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_key_suggests_the_nearest() {
    let text = with("connect = ", "sesion_timeout = \"10s\"\nconnect = ");
    let e = err(&text);
    assert_eq!(
        e.to_string(),
        "/etc/warden/warden.toml:6:1: unknown key `sesion_timeout` in \
         [coordination.zookeeper]; did you mean `session_timeout`?"
    );
    assert_eq!(e.key(), Some("coordination.zookeeper.sesion_timeout"));
}

#[test]
fn unknown_key_in_the_wrong_table_names_the_right_one() {
    let m = msg(&with("[service]\n", "[service]\nrejoin_delay = \"1s\"\n"));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:9:1: unknown key `rejoin_delay` in [service]; \
         `rejoin_delay` belongs in [election]"
    );
}

#[test]
fn unknown_table_is_reported_before_the_missing_one() {
    let m = msg(&with("[service]", "[servce]"));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:8:2: unknown key `servce` at the top level; did you mean `service`?"
    );
}

#[test]
fn unknown_key_in_a_fence_names_its_index() {
    let e = err(&format!("{BASE}timout = \"5s\"\n"));
    assert_eq!(e.key(), Some("fence[0].timout"));
    assert_eq!(
        e.to_string(),
        "/etc/warden/warden.toml:14:1: unknown key `timout` in fence[0] (kind = \"script\"); \
         did you mean `timeout`?"
    );
}

#[test]
fn unknown_key_without_a_near_match_lists_the_valid_ones() {
    let m = msg(&with("[service]\n", "[service]\nbanana = 1\n"));
    assert!(
        m.contains("valid keys here: mode, command, stop_signal"),
        "{m}"
    );
}

#[test]
fn wrong_type_names_expected_and_found() {
    let e = err(&with(
        "node_id = \"rm1\"",
        "node_id = \"rm1\"\nport = \"8032\"",
    ));
    assert_eq!(
        e.to_string(),
        "/etc/warden/warden.toml:4:8: `cluster.port` must be an integer from 1 to 65535, not a string"
    );
    let m = msg(&with(
        "command = [\"/usr/bin/my-service\"]",
        "command = \"/usr/bin/my-service\"",
    ));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:9:11: `service.command` must be an array of strings, not a string"
    );
    let m = msg(&with(
        "command = [\"/usr/bin/my-service\"]",
        "command = [\"/usr/bin/my-service\", 3]",
    ));
    assert!(
        m.contains("`service.command[1]` must be a string, not an integer"),
        "{m}"
    );
}

#[test]
fn missing_required_key_points_at_its_table() {
    let e = err(&with("node_id = \"rm1\"\n", ""));
    assert_eq!(
        e.to_string(),
        "/etc/warden/warden.toml:1:1: missing required key `node_id` in [cluster]"
    );
    assert_eq!(e.key(), Some("cluster.node_id"));
    let e = err(&with("connect = \"zk1:2181,zk2:2181\"\n", ""));
    assert_eq!(
        e.to_string(),
        "/etc/warden/warden.toml:5:1: missing required key `connect` in [coordination.zookeeper]"
    );
}

#[test]
fn missing_required_table_is_named() {
    let m = msg(&with(
        "[service]\ncommand = [\"/usr/bin/my-service\"]\n",
        "",
    ));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:1:1: missing required table [service]"
    );
}

#[test]
fn fence_without_kind_or_with_a_bad_kind() {
    let m = msg(&with("kind = \"script\"\n", ""));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:11:1: missing required key `kind` in fence[0]: one of \
         \"ssh\", \"signal\" or \"script\""
    );
    let m = msg(&with("kind = \"script\"", "kind = \"scirpt\""));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:12:8: `fence[0].kind` = \"scirpt\" is not one of \"ssh\", \
         \"signal\" or \"script\"; did you mean \"script\"?"
    );
    let m = msg(&format!(
        "{BASE}\n[[fence]]\nkind = \"ssh\"\nidentity_file = \"/k\"\nknown_hosts = \"/h\"\n"
    ));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:15:1: missing required key `user` in fence[1] (kind = \"ssh\")"
    );
}

#[test]
fn durations_need_a_unit() {
    let text = |v: &str| with("connect = ", &format!("session_timeout = {v}\nconnect = "));
    let e = err(&text("10"));
    assert_eq!(
        e.to_string(),
        "/etc/warden/warden.toml:6:19: `coordination.zookeeper.session_timeout` = 10 has no \
         unit: write a string with a unit, such as \"10s\" or \"250ms\""
    );
    let m = msg(&text("\"10\""));
    assert!(
        m.ends_with("= \"10\" has no unit: add one, such as \"10s\" or \"10ms\""),
        "{m}"
    );
    let m = msg(&text("\"10 parsecs\""));
    assert!(m.contains("is not a duration"), "{m}");
    assert_eq!(
        ok(&text("\"2m\"")).coordination.zookeeper.session_timeout,
        Duration::from_secs(120)
    );
    assert_eq!(
        ok(&text("\"1m 30s\""))
            .coordination
            .zookeeper
            .session_timeout,
        Duration::from_secs(90)
    );
}

#[test]
fn syntax_errors_are_located() {
    let e = err(&with("name = \"rm\"", "name = = \"rm\""));
    assert!(matches!(e, ConfigError::Syntax { .. }));
    assert!(
        e.to_string()
            .starts_with("/etc/warden/warden.toml:2:8: invalid TOML:"),
        "{e}"
    );
}

#[test]
fn invalid_ids_are_refused() {
    let m = msg(&with("node_id = \"rm1\"", "node_id = \"rm 1\""));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:3:11: `cluster.node_id` = \"rm 1\" is not a valid node id: \
         use 1 to 64 letters, digits, '.', '_' or '-'"
    );
    let m = msg(&with(
        "name = \"rm\"",
        &format!("name = \"{}\"", "a".repeat(65)),
    ));
    assert!(
        m.contains("`cluster.name`") && m.contains("not a valid cluster name"),
        "{m}"
    );
    let m = msg(&format!("{BASE}nodes = [\"rm1\", \"rm/2\"]\n"));
    assert!(
        m.contains(":14:17: `fence[0].nodes[1]` = \"rm/2\" is not a valid node id"),
        "{m}"
    );
}

#[test]
fn zookeeper_values_are_checked() {
    let connect = |v: &str| msg(&with("\"zk1:2181,zk2:2181\"", v));
    assert!(connect("\"\"").contains("`coordination.zookeeper.connect` = \"\" names no server"));
    assert!(connect("\"zk1\"").contains("\"zk1\" is not host:port"));
    assert!(connect("\"zk1:2181,zk2:x\"").contains("invalid port \"x\""));
    assert!(connect("\"zk1:2181/app/\"").contains("the chroot \"/app/\" must not end with '/'"));
    assert!(
        ok(&with(
            "\"zk1:2181,zk2:2181\"",
            "\"zk1:2181,[::1]:2181/app\""
        ))
        .fence
        .len()
            == 1
    );

    let zk = |line: &str| msg(&with("connect = ", &format!("{line}\nconnect = ")));
    assert_eq!(
        zk("root = \"warden\""),
        "/etc/warden/warden.toml:6:8: `coordination.zookeeper.root` = \"warden\" must start with '/'"
    );
    assert!(zk("root = \"/warden/\"").contains("must not end with '/'"));
    assert!(zk("session_timeout = \"100ms\"").contains(
        "`coordination.zookeeper.session_timeout` = 100ms is too short: it must be at least 200ms"
    ));
    assert!(zk("connect_timeout = \"0s\"")
        .contains("`coordination.zookeeper.connect_timeout` must be longer than 0"));
    assert!(zk("acl = \"creator\"")
        .contains("`coordination.zookeeper.acl` = \"creator\" needs credentials"));
    assert!(zk("acl = \"craetor\"").contains("did you mean \"creator\"?"));
    assert!(
        zk("auth = \"digest:w:s\"\nauth_file = \"/etc/warden/zk.auth\"").contains(
            ":7:13: `coordination.zookeeper.auth_file` cannot be set together with `auth`"
        )
    );
    let m = zk("auth = \"digest:topsecret\"");
    assert!(
        m.contains("`coordination.zookeeper.auth` uses scheme \"digest\""),
        "{m}"
    );
    assert!(!m.contains("topsecret"), "the secret leaked: {m}");
    assert!(zk("auth = \"nocolon\"").contains("must be scheme:credentials"));
    let c = ok(&with(
        "connect = ",
        "auth = \"digest:warden:s3cret\"\nacl = \"creator\"\nconnect = ",
    ));
    assert_eq!(
        c.read_auth().ok().flatten().as_deref(),
        Some("digest:warden:s3cret")
    );
}

#[test]
fn service_modes_require_their_commands() {
    let m = msg(&with("command = [\"/usr/bin/my-service\"]", "command = []"));
    assert!(
        m.contains(":9:11: `service.command` is required with mode = \"spawn\""),
        "{m}"
    );
    let m = msg(&with(
        "command = [\"/usr/bin/my-service\"]",
        "mode = \"hooks\"\npromote = [\"/p\"]",
    ));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:8:1: `service.demote` is required with mode = \"hooks\": name \
         the program that changes the service's role, such as [\"/usr/lib/my-service/demote\"]"
    );
    let m = msg(&with(
        "command = [\"/usr/bin/my-service\"]",
        "command = [\"\"]",
    ));
    assert!(
        m.contains("`service.command[0]` must name a program"),
        "{m}"
    );
    let m = msg(&with("[service]\n", "[service]\nstop_timeout = \"0s\"\n"));
    assert!(
        m.contains(":9:16: `service.stop_timeout` must be longer than 0"),
        "{m}"
    );
    let m = msg(&with("[service]\n", "[service]\nhook_timeout = \"0ms\"\n"));
    assert!(
        m.contains("`service.hook_timeout` must be longer than 0"),
        "{m}"
    );
    let m = msg(&with(
        "[service]\n",
        "[service]\nstop_signal = \"SIGFOO\"\n",
    ));
    assert!(
        m.contains("`service.stop_signal` is not valid: unknown signal"),
        "{m}"
    );
    let hooks = ok(&with(
        "command = [\"/usr/bin/my-service\"]",
        "mode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]\npidfile = \"/run/s.pid\"",
    ));
    assert_eq!(hooks.demote_grace(), Duration::from_secs(3));
}

#[test]
fn health_kinds_require_their_target() {
    let health = |body: &str| msg(&format!("{BASE}\n[health]\n{body}\n"));
    assert_eq!(
        health("kind = \"tcp\""),
        "/etc/warden/warden.toml:15:1: `health.address` is required with kind = \"tcp\""
    );
    assert!(health("kind = \"tcp\"\naddress = \"localhost\"").contains("is not host:port"));
    assert!(health("kind = \"http\"\nurl = \"ftp://x/\"")
        .contains("`health.url` = \"ftp://x/\" has scheme \"ftp\""));
    assert!(health("kind = \"exec\"").contains("`health.command` is required with kind = \"exec\""));
    assert!(health("address = \"127.0.0.1:80\"")
        .contains(":16:11: `health.address` does not apply to kind = \"none\""));
    assert!(health("fall = 0").contains("`health.fall` = 0 is out of range: it must be at least 1"));
    assert!(health("rise = -1").contains("`health.rise` = -1 is out of range"));
    assert!(health("interval = \"0s\"").contains("`health.interval` must be longer than 0"));
    assert!(health("timeout = \"0s\"").contains("`health.timeout` must be longer than 0"));
    let c = ok(&format!(
        "{BASE}\n[health]\nkind = \"http\"\nurl = \"http://127.0.0.1:8088/ws\"\n"
    ));
    assert_eq!(c.health.kind, HealthKind::Http);
    let c = ok(&format!(
        "{BASE}\n[health]\nkind = \"http\"\nurl = \"https://rm1:8090/ws\"\nca_file = \"/etc/warden/ca.pem\"\n"
    ));
    assert_eq!(c.health.ca_file, Some(PathBuf::from("/etc/warden/ca.pem")));
    assert!(
        health("kind = \"http\"\nurl = \"http://rm1/\"\nca_file = \"/ca.pem\"")
            .contains("`health.ca_file` applies only to kind = \"http\" with an https:// url")
    );
    assert!(
        health("kind = \"tcp\"\naddress = \"rm1:80\"\nca_file = \"/ca.pem\"")
            .contains("`health.ca_file` applies only to kind = \"http\"")
    );
    assert!(
        health("kind = \"http\"\nurl = \"https://rm1/\"\nca_file = \"\"")
            .contains("`health.ca_file` must name a file: it is empty")
    );
}

#[test]
fn a_health_ca_file_must_hold_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let path = dir.path().join("warden.toml");
    std::fs::write(
        &path,
        on_disk(&format!(
            "{BASE}\n[health]\nkind = \"http\"\nurl = \"https://127.0.0.1:8090/\"\nca_file = \"{}\"\n",
            ca.display()
        )),
    )
    .unwrap();
    let m = load(&path).unwrap_err().to_string();
    assert!(
        m.contains(&format!(
            ":18:11: `health.ca_file`: cannot read {}: No such file or directory",
            ca.display()
        )),
        "{m}"
    );
    std::fs::write(&ca, "not a certificate\n").unwrap();
    let m = load(&path).unwrap_err().to_string();
    assert!(
        m.contains(&format!(
            "`health.ca_file` names {}, which holds no certificate",
            ca.display()
        )),
        "{m}"
    );
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    assert_eq!(
        load(&path).unwrap().health.ca_file.as_deref(),
        Some(ca.as_path())
    );
}

#[test]
fn at_least_one_fence_is_required() {
    let text = BASE.split("[[fence]]").next().unwrap_or_default();
    let m = msg(text);
    assert_eq!(
        m,
        "/etc/warden/warden.toml:1:1: `fence` is missing: warden refuses to start without a \
         way to fence; add a [[fence]] method (a script running /bin/true if your storage \
         already prevents two writers)"
    );
    let m = msg(&format!("fence = []\n{text}"));
    assert!(
        m.starts_with("/etc/warden/warden.toml:1:9: `fence` is missing"),
        "{m}"
    );
    let m = msg(&format!("{text}fence = []\n"));
    assert!(
        m.ends_with("unknown key `fence` in [service]; `fence` belongs at the top level, before the first [table]"),
        "{m}"
    );
    let m = msg(&format!("{text}[fence]\nkind = \"signal\"\n"));
    assert!(
        m.contains("`fence` must be an array of tables, written [[fence]], not a table"),
        "{m}"
    );
}

#[test]
fn fence_methods_are_checked() {
    let m = msg(&with("command = [\"/bin/true\"]", "command = []"));
    assert!(
        m.contains(":13:11: `fence[0].command` must name a program: it is empty"),
        "{m}"
    );
    let m = msg(&with(
        "command = [\"/bin/true\"]",
        "protocol = \"fence-agent\"\ncommand = [\"/usr/sbin/fence_ipmilan\", \"--ip=10.0.0.9\"]",
    ));
    assert!(
        m.contains(":14:11: `fence[0].command` must be the fence agent's path alone")
            && m.contains("`options`"),
        "{m}"
    );
    let m = msg(&format!("{BASE}options = {{ ipaddr = \"10.0.0.9\" }}\n"));
    assert!(
        m.contains(":14:11: `fence[0].options` only applies with protocol = \"fence-agent\""),
        "{m}"
    );
    let m = msg(&format!(
        "{BASE}protocol = \"fence-agent\"\noptions = {{ ipaddr = 10 }}\n"
    ));
    assert!(
        m.contains("`fence[0].options.ipaddr` must be a string, not an integer"),
        "{m}"
    );
    let m = msg(&format!("{BASE}nodes = []\n"));
    assert!(
        m.contains("`fence[0].nodes` is empty, so this method would never apply"),
        "{m}"
    );
    let m = msg(&format!("{BASE}timeout = \"0s\"\n"));
    assert!(
        m.contains("`fence[0].timeout` must be longer than 0"),
        "{m}"
    );
    let ssh = |user: &str| {
        format!(
            "{BASE}\n[[fence]]\nkind = \"ssh\"\nuser = \"{user}\"\nidentity_file = \"/k\"\nknown_hosts = \"/h\"\n"
        )
    };
    assert!(msg(&ssh("")).contains(":17:8: `fence[1].user` must name the remote user"));
    let c = ok(&ssh("warden"));
    match &c.fence[1] {
        FenceMethod::Ssh(s) => assert_eq!((s.port, s.timeout), (22, Duration::from_secs(15))),
        other => panic!("{other:?}"),
    }
    let m = msg(&format!(
        "{BASE}\n[[fence]]\nkind = \"signal\"\nsignal = 9\n"
    ));
    assert!(
        m.contains("`fence[1].signal` must be a signal name such as \"SIGTERM\", not an integer"),
        "{m}"
    );
}

#[test]
fn log_and_api_are_checked() {
    let log = |level: &str| msg(&format!("{BASE}\n[log]\nlevel = \"{level}\"\n"));
    let m = log("inf");
    assert!(
        m.contains(":16:9: `log.level` = \"inf\": \"inf\" is not a level; did you mean \"info\"?"),
        "{m}"
    );
    assert!(log("info,warden=verbose").contains("is not a valid log filter"));
    assert!(log("").contains("`log.level` is empty"));
    ok(&format!(
        "{BASE}\n[log]\nlevel = \"info,warden=debug\"\nformat = \"json\"\n"
    ));
    let m = msg(&format!("{BASE}\n[api]\nlisten = \"localhost:7232\"\n"));
    assert!(
        m.contains(":16:10: `api.listen` = \"localhost:7232\" is not an IP address and port"),
        "{m}"
    );
    let m = msg(&format!("{BASE}\n[api]\n"));
    assert_eq!(
        m,
        "/etc/warden/warden.toml:15:1: missing required key `listen` in [api]"
    );
}

#[test]
fn a_missing_config_file_is_one_sentence() {
    let e = match load(Path::new("/nonexistent/warden.toml")) {
        Err(e) => e,
        Ok(_) => panic!("loaded a missing file"),
    };
    assert_eq!(
        e.to_string(),
        "cannot read /nonexistent/warden.toml: No such file or directory"
    );
}

/// A config with one ssh fence whose key and known_hosts live in `dir`.
fn ssh_config(dir: &Path, key_mode: u32) -> PathBuf {
    let key = dir.join("id_ed25519");
    let known = dir.join("known_hosts");
    std::fs::write(&key, "KEY").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(key_mode)).unwrap();
    std::fs::write(&known, "").unwrap();
    let text = with(
        "kind = \"script\"\ncommand = [\"/bin/true\"]\n",
        &format!(
            "kind = \"ssh\"\nuser = \"warden\"\nidentity_file = \"{}\"\nknown_hosts = \"{}\"\n",
            key.display(),
            known.display()
        ),
    );
    let path = dir.join("warden.toml");
    std::fs::write(&path, on_disk(&text)).unwrap();
    path
}

#[test]
fn an_identity_file_readable_by_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = ssh_config(dir.path(), 0o644);
    let e = load(&path).unwrap_err();
    let key = dir.path().join("id_ed25519");
    assert!(
        matches!(e, ConfigError::InsecureFile { mode: 0o644, .. }),
        "{e:?}"
    );
    assert_eq!(e.key(), Some("fence[0].identity_file"));
    assert_eq!(
        e.to_string(),
        format!(
            "{}:14:17: `fence[0].identity_file`: {} can be read or written by group or others \
             (mode 0644); run `chmod 600 {}`",
            path.display(),
            key.display(),
            key.display()
        )
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    load(&path).unwrap();
}

#[test]
fn a_missing_identity_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = ssh_config(dir.path(), 0o600);
    std::fs::remove_file(dir.path().join("id_ed25519")).unwrap();
    let m = load(&path).unwrap_err().to_string();
    assert!(
        m.contains(&format!(
            ":14:17: `fence[0].identity_file`: cannot read {}: No such file or directory",
            dir.path().join("id_ed25519").display()
        )),
        "{m}"
    );
    // parse alone does not look at files.
    parse(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
}

#[test]
fn an_auth_file_is_checked_and_read() {
    let dir = tempfile::tempdir().unwrap();
    let auth = dir.path().join("zk.auth");
    std::fs::write(&auth, "digest:warden:s3cret\n").unwrap();
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o640)).unwrap();
    let text = with(
        "connect = ",
        &format!(
            "auth_file = \"{}\"\nacl = \"creator\"\nconnect = ",
            auth.display()
        ),
    );
    let path = dir.path().join("warden.toml");
    std::fs::write(&path, on_disk(&text)).unwrap();
    let m = load(&path).unwrap_err().to_string();
    assert!(
        m.contains(&format!("run `chmod 600 {}`", auth.display())),
        "{m}"
    );
    assert!(m.contains("`coordination.zookeeper.auth_file`"), "{m}");

    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = load(&path).unwrap();
    assert_eq!(
        c.read_auth().unwrap().as_deref(),
        Some("digest:warden:s3cret")
    );
    assert!(!c.render_masked().contains("s3cret"));

    std::fs::write(&auth, "garbage\n").unwrap();
    let m = load(&path).unwrap_err().to_string();
    assert!(
        m.contains("whose content must be scheme:credentials"),
        "{m}"
    );
    assert!(!m.contains("garbage"), "{m}");

    // At run time the file is checked again.
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o604)).unwrap();
    let m = c.read_auth().unwrap_err().to_string();
    assert!(m.starts_with("`coordination.zookeeper.auth_file`: "), "{m}");
    assert!(m.contains("chmod 600"), "{m}");
}

#[test]
fn a_missing_fence_script_is_refused_by_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warden.toml");
    std::fs::write(&path, on_disk(&with("/bin/true", "/nonexistent/fence"))).unwrap();
    let m = load(&path).unwrap_err().to_string();
    assert!(
        m.contains(":13:12: `fence[0].command[0]`: cannot read /nonexistent/fence"),
        "{m}"
    );
    let script = dir.path().join("fence");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let text = with("/bin/true", &script.display().to_string());
    std::fs::write(&path, on_disk(&text)).unwrap();
    let m = load(&path).unwrap_err().to_string();
    assert!(m.contains("is not an executable file"), "{m}");
}

#[test]
fn a_graceful_stop_longer_than_the_lease_margin_warns() {
    assert!(ok(BASE)
        .warnings()
        .iter()
        .all(|w| !w.contains("late renewal")));
    // lease 5s, renewal every 1.666s: a 4s stop leaves 1s.
    let c = ok(&with("[service]\n", "[service]\nstop_timeout = \"4s\"\n"));
    let w = c.warnings();
    let late: Vec<&String> = w.iter().filter(|w| w.contains("late renewal")).collect();
    assert_eq!(late.len(), 1, "{w:?}");
    assert_eq!(
        late[0],
        "service.stop_timeout = 4s leaves less than one renewal interval (1s 666ms) of the \
         5s lease (half of coordination.zookeeper.session_timeout = 10s), so a single late \
         renewal demotes the active; raise session_timeout or lower service.stop_timeout"
    );
    // hooks mode judges hook_timeout: its default fits the default lease, 10s does not.
    let hooks = ok(&with(
        "command = [\"/usr/bin/my-service\"]",
        "mode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]",
    ));
    assert!(
        hooks.warnings().iter().all(|w| !w.contains("late renewal")),
        "the defaults warn against each other: {:?}",
        hooks.warnings()
    );
    let hooks = ok(&with(
        "command = [\"/usr/bin/my-service\"]",
        "mode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]\nhook_timeout = \"10s\"",
    ));
    assert!(hooks
        .warnings()
        .iter()
        .any(|w| w.starts_with("service.hook_timeout = 10s")));
}

#[test]
fn other_warnings() {
    let w = ok(BASE).warnings();
    assert!(w.iter().any(|w| w.contains("acl = \"open\"")), "{w:?}");
    let c = ok(&format!("{BASE}\n[api]\nlisten = \"0.0.0.0:7232\"\n"));
    assert!(c
        .warnings()
        .iter()
        .any(|w| w.contains("not a loopback address")));
    let c = ok(&with("[service]\n", "[service]\npromote = [\"/p\"]\n"));
    assert!(c
        .warnings()
        .iter()
        .any(|w| w.starts_with("service.promote is ignored")));
    let c = ok(&with(
        "kind = \"script\"\ncommand = [\"/bin/true\"]",
        "kind = \"signal\"",
    ));
    assert!(c
        .warnings()
        .iter()
        .any(|w| w.contains("only acts on an old active that ran on this host")));
    // A follow hook learns the active's port from the active's own cluster.port.
    let follow = "mode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]\nfollow = [\"/f\"]";
    let c = ok(&with("command = [\"/usr/bin/my-service\"]", follow));
    let w = c.warnings();
    let port: Vec<&String> = w.iter().filter(|w| w.contains("cluster.port")).collect();
    assert_eq!(port.len(), 1, "{w:?}");
    assert_eq!(
        port[0],
        "service.follow is set but cluster.port is not: while this node is active, the \
         other nodes' follow hooks are told no WARDEN_ACTIVE_PORT, and a switchover's \
         demote hook handing over to this node no WARDEN_SUCCESSOR_PORT; a hook that \
         points a replica at the active needs it (set cluster.port to the service's port, \
         as examples/postgresql and examples/redis do)"
    );
    let c = ok(&with("command = [\"/usr/bin/my-service\"]", follow)
        .replace("node_id = \"rm1\"\n", "node_id = \"rm1\"\nport = 5432\n"));
    assert_eq!(c.cluster.port, Some(5432));
    assert!(
        c.warnings()
            .iter()
            .all(|w| !w.contains("cluster.port is not")),
        "{:?}",
        c.warnings()
    );
    // What the server grants is judged at run time, by the granted value.
    let c = ok(&with("connect = ", "session_timeout = \"1s\"\nconnect = "));
    assert!(c
        .warnings()
        .iter()
        .all(|w| !w.contains("minSessionTimeout")));
}

#[test]
fn render_masks_secrets() {
    let c = ok(&format!(
        "{}\n[[fence]]\nkind = \"script\"\nprotocol = \"fence-agent\"\ncommand = [\"/usr/sbin/fence_ipmilan\"]\n\
         options = {{ ipaddr = \"10.0.0.9\", password = \"hunter2\", api_token = \"t0k\", password_script = \"/etc/p\" }}\n",
        with("connect = ", "auth = \"digest:warden:s3cret\"\nacl = \"creator\"\nconnect = ")
    ));
    let out = c.render_masked();
    assert!(out.contains("digest:warden:****"), "{out}");
    for secret in ["s3cret", "hunter2", "t0k"] {
        assert!(!out.contains(secret), "{secret} leaked:\n{out}");
    }
    assert!(out.contains("/etc/p"), "{out}");
    assert!(out.contains("10.0.0.9"), "{out}");
    // Masked output still parses; only the secrets differ.
    let back = ok(&out);
    assert_eq!(
        back.coordination.zookeeper.auth.as_deref(),
        Some("digest:warden:****")
    );
    assert_eq!(back.cluster, c.cluster);
}

#[test]
fn render_round_trips_with_every_default_filled_in() {
    for text in [
        BASE,
        include_str!("../../config/warden.toml"),
        include_str!("../../config/examples/spawn.toml"),
        include_str!("../../config/examples/hooks.toml"),
    ] {
        let c = ok(text);
        let out = c.render_masked();
        assert_eq!(ok(&out), c, "{out}");
    }
    let out = ok(BASE).render_masked();
    for line in [
        "session_timeout = \"10s\"",
        "root = \"/warden\"",
        "stop_signal = \"SIGTERM\"",
        "rejoin_delay = \"1s\"",
        "fall = 3",
        "level = \"info\"",
        "protocol = \"env\"",
    ] {
        assert!(out.contains(line), "{line} missing from:\n{out}");
    }
    assert!(out.contains("# [api] is not set"), "{out}");
    assert!(!out.contains("[fence.options]"), "{out}");
    let reference = ok(include_str!("../../config/warden.toml")).render_masked();
    assert_eq!(
        reference.matches("[fence.options]").count(),
        1,
        "{reference}"
    );
}

#[test]
fn masking_rules() {
    assert_eq!(mask_auth("digest:warden:secret"), "digest:warden:****");
    assert_eq!(mask_auth("digest:secret"), "digest:****");
    assert_eq!(mask_auth("sasl:whatever"), "sasl:****");
    for key in [
        "password",
        "passwd",
        "Secret",
        "api_token",
        "ssh_key",
        "keyfile",
    ] {
        assert!(is_secret_option(key), "{key}");
    }
    for key in ["ipaddr", "username", "password_script", "plug"] {
        assert!(!is_secret_option(key), "{key}");
    }
}

#[test]
fn ids() {
    assert!(is_valid_id("rm1") && is_valid_id("a.b_c-D") && is_valid_id(&"x".repeat(64)));
    assert!(
        !is_valid_id("")
            && !is_valid_id("a b")
            && !is_valid_id("a/b")
            && !is_valid_id(&"x".repeat(65))
    );
}

/// BASE with `line` added to the table whose header is `table`.
fn in_table(table: &str, line: &str) -> String {
    match BASE.find(&format!("{table}\n")) {
        Some(_) => with(&format!("{table}\n"), &format!("{table}\n{line}\n")),
        None => format!("{BASE}\n{table}\n{line}\n"),
    }
}

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
