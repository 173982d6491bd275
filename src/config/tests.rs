use super::*;

mod load;
mod values;

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
