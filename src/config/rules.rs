//! Rules between values, checked on the typed config.

use super::*;

impl Source<'_> {
    pub(super) fn validate(&self, c: &Config) -> Result<(), ConfigError> {
        self.validate_cluster(c)?;
        match c.coordination.backend {
            Backend::Zookeeper => self.validate_zookeeper(c)?,
            Backend::Mysql | Backend::Redis => self.validate_store(c)?,
        }
        self.check_duration(
            c.election.rejoin_delay,
            &KeyPath::of(&["election", "rejoin_delay"]),
            &REJOIN_DELAY_RANGE,
        )?;
        self.validate_service(c)?;
        self.validate_health(c)?;
        self.validate_fences(c)?;
        self.validate_log(c)?;
        Ok(())
    }

    pub(super) fn check_id(
        &self,
        value: &str,
        path: &KeyPath,
        what: &str,
    ) -> Result<(), ConfigError> {
        if is_valid_id(value) {
            Ok(())
        } else {
            Err(self.invalid(
                path,
                format!(
                    "= \"{value}\" is not a valid {what}: use 1 to 64 letters, digits, '.', '_' or '-'"
                ),
            ))
        }
    }

    /// `d` within `range`; the message names the bound and why it is there.
    pub(super) fn check_duration(
        &self,
        d: Duration,
        path: &KeyPath,
        range: &DurationRange,
    ) -> Result<(), ConfigError> {
        let reason = if d.is_zero() && !range.min.is_zero() {
            format!(
                "must be longer than 0: at least {} ({})",
                fmt_duration(range.min),
                range.short
            )
        } else if d < range.min {
            format!(
                "= {} is too short: it must be at least {} ({})",
                fmt_duration(d),
                fmt_duration(range.min),
                range.short
            )
        } else if d > range.max {
            format!(
                "= {} is too long: it must be at most {} ({})",
                fmt_duration(d),
                fmt_duration(range.max),
                range.long
            )
        } else {
            return Ok(());
        };
        Err(self.invalid(path, reason))
    }

    pub(super) fn check_command(&self, cmd: &[String], path: &KeyPath) -> Result<(), ConfigError> {
        match cmd.first() {
            None => Err(self.invalid(path, "must name a program: it is empty")),
            Some(p) if p.trim().is_empty() => {
                Err(self.invalid(&path.index(0), "must name a program: it is an empty string"))
            }
            Some(_) => Ok(()),
        }
    }

    pub(super) fn validate_cluster(&self, c: &Config) -> Result<(), ConfigError> {
        self.check_id(
            &c.cluster.name,
            &KeyPath::of(&["cluster", "name"]),
            "cluster name",
        )?;
        self.check_id(
            &c.cluster.node_id,
            &KeyPath::of(&["cluster", "node_id"]),
            "node id",
        )?;
        if let Some(host) = &c.cluster.host {
            if let Err(reason) = check_host(host) {
                return Err(self.invalid(
                    &KeyPath::of(&["cluster", "host"]),
                    format!("= {} is not a host name or address: {reason}", quoted(host)),
                ));
            }
        }
        Ok(())
    }

    /// `[coordination.mysql]` or `[coordination.redis]`, whichever `backend` names.
    pub(super) fn validate_store(&self, c: &Config) -> Result<(), ConfigError> {
        let backend = c.coordination.backend;
        let name = backend.as_str();
        let p = |k: &str| KeyPath::of(&["coordination", name, k]);
        let Some(s) = c.store() else {
            return Err(self.invalid(
                &KeyPath::of(&["coordination", "backend"]),
                format!(
                    "= \"{name}\" needs a [coordination.{name}] table with at least `url` \
                     (SPEC 3a)"
                ),
            ));
        };
        if let Err(reason) = check_store_url(backend, s.url) {
            return Err(self.invalid(&p("url"), reason));
        }
        self.check_duration(
            s.session_timeout,
            &p("session_timeout"),
            &STORE_SESSION_RANGE,
        )?;
        self.check_duration(
            s.connect_timeout,
            &p("connect_timeout"),
            &CONNECT_TIMEOUT_RANGE,
        )?;
        self.check_duration(s.poll_interval, &p("poll_interval"), &POLL_INTERVAL_RANGE)?;
        if s.poll_interval >= s.session_timeout / 2 {
            return Err(self.invalid(
                &p("poll_interval"),
                format!(
                    "= {} must be less than half of session_timeout ({}): a standby that \
                     polls less often than that notices a dead active after the lease the \
                     active already gave up",
                    fmt_duration(s.poll_interval),
                    fmt_duration(s.session_timeout)
                ),
            ));
        }
        if let Some(file) = s.password_file {
            if file.as_os_str().is_empty() {
                return Err(self.invalid(&p("password_file"), "must name a file: it is empty"));
            }
        }
        if let Some(prefix) = s.prefix {
            let ok = match backend {
                Backend::Mysql => {
                    (1..=32).contains(&prefix.len())
                        && prefix
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                }
                _ => {
                    (1..=64).contains(&prefix.len())
                        && prefix
                            .bytes()
                            .all(|b| b.is_ascii_graphic() && !b"{}:".contains(&b))
                }
            };
            if !ok {
                let (key, rule) = match backend {
                    Backend::Mysql => (
                        "table_prefix",
                        "use 1 to 32 letters, digits or '_' (it becomes part of table names)",
                    ),
                    _ => (
                        "key_prefix",
                        "use 1 to 64 printable characters without spaces, '{', '}' or ':' \
                         (it becomes part of key names)",
                    ),
                };
                return Err(self.invalid(&p(key), format!("= {} {rule}", quoted(prefix))));
            }
        }
        Ok(())
    }

    pub(super) fn validate_zookeeper(&self, c: &Config) -> Result<(), ConfigError> {
        let zk = &c.coordination.zookeeper;
        let p = |k: &str| KeyPath::of(&["coordination", "zookeeper", k]);
        if zk.connect.is_empty() && !self.has(&KeyPath::of(&["coordination", "zookeeper"])) {
            return Err(self.invalid(
                &KeyPath::of(&["coordination"]),
                "needs a [coordination.zookeeper] table with `connect` (or choose another \
                 backend: backend = \"mysql\" or \"redis\", SPEC 3a)",
            ));
        }
        if let Err(reason) = check_connect(&zk.connect) {
            return Err(self.invalid(&p("connect"), reason));
        }
        if let Err(reason) = check_znode_path(&zk.root) {
            return Err(self.invalid(&p("root"), format!("= \"{}\" {reason}", zk.root)));
        }
        self.check_duration(
            zk.session_timeout,
            &p("session_timeout"),
            &SESSION_TIMEOUT_RANGE,
        )?;
        self.check_duration(
            zk.connect_timeout,
            &p("connect_timeout"),
            &CONNECT_TIMEOUT_RANGE,
        )?;
        if zk.auth.is_some() && zk.auth_file.is_some() {
            return Err(self.invalid(
                &p("auth_file"),
                "cannot be set together with `auth`: keep one of them (auth_file keeps the \
                 secret out of this file)",
            ));
        }
        if let Some(auth) = &zk.auth {
            // The value is a secret: the message never repeats it.
            if let Err(reason) = check_auth(auth) {
                return Err(self.invalid(&p("auth"), reason));
            }
        }
        if let Some(file) = &zk.auth_file {
            if file.as_os_str().is_empty() {
                return Err(self.invalid(&p("auth_file"), "must name a file: it is empty"));
            }
        }
        if zk.acl == AclMode::Creator && zk.auth.is_none() && zk.auth_file.is_none() {
            return Err(self.invalid(
                &p("acl"),
                "= \"creator\" needs credentials: set `auth` or `auth_file` in \
                 [coordination.zookeeper], or use acl = \"open\"",
            ));
        }
        Ok(())
    }

    pub(super) fn validate_service(&self, c: &Config) -> Result<(), ConfigError> {
        let s = &c.service;
        let p = |k: &str| KeyPath::of(&["service", k]);
        self.check_duration(s.stop_timeout, &p("stop_timeout"), &GRACEFUL_STOP_RANGE)?;
        self.check_duration(s.hook_timeout, &p("hook_timeout"), &GRACEFUL_STOP_RANGE)?;
        // Keys of the other mode are ignored, not refused: the SPEC's own sample sets
        // both, and `warnings` tells the operator.
        match s.mode {
            ServiceMode::Spawn => {
                if s.command.is_empty() {
                    return Err(self.invalid(
                        &p("command"),
                        "is required with mode = \"spawn\": name the service's program and its \
                         arguments, such as [\"/usr/bin/my-service\", \"--flag\"]",
                    ));
                }
                self.check_command(&s.command, &p("command"))?;
            }
            ServiceMode::Hooks => {
                for (key, hook) in [("promote", &s.promote), ("demote", &s.demote)] {
                    if hook.is_empty() {
                        return Err(self.invalid(
                            &p(key),
                            format!(
                                "is required with mode = \"hooks\": name the program that \
                                 changes the service's role, such as [\"/usr/lib/my-service/{key}\"]"
                            ),
                        ));
                    }
                    self.check_command(hook, &p(key))?;
                }
                if !s.follow.is_empty() {
                    self.check_command(&s.follow, &p("follow"))?;
                }
                if let Some(file) = &s.pidfile {
                    if file.as_os_str().is_empty() {
                        return Err(self.invalid(&p("pidfile"), "must name a file: it is empty"));
                    }
                    // Relative to what? warden's working directory is not the service's,
                    // and a pidfile read from the wrong place names the wrong process.
                    if !file.is_absolute() {
                        return Err(self.invalid(
                            &p("pidfile"),
                            format!(
                                "= \"{}\" must be an absolute path, such as \"/run/my-service.pid\"",
                                file.display()
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn validate_health(&self, c: &Config) -> Result<(), ConfigError> {
        let h = &c.health;
        let p = |k: &str| KeyPath::of(&["health", k]);
        self.check_duration(h.interval, &p("interval"), &HEALTH_INTERVAL_RANGE)?;
        self.check_duration(h.timeout, &p("timeout"), &HEALTH_TIMEOUT_RANGE)?;
        self.check_duration(h.start_grace, &p("start_grace"), &START_GRACE_RANGE)?;
        let (needs, kind_name) = match h.kind {
            HealthKind::Tcp => ("address", "tcp"),
            HealthKind::Http => ("url", "http"),
            HealthKind::Exec => ("command", "exec"),
            HealthKind::None => ("", "none"),
        };
        // A key of another kind is refused rather than ignored: it usually means `kind`
        // was forgotten, and the operator believes a check runs that does not.
        let set = [
            ("address", h.address.is_some()),
            ("url", h.url.is_some()),
            ("command", !h.command.is_empty()),
        ];
        for (key, is_set) in set {
            if is_set && key != needs {
                return Err(self.invalid(
                    &p(key),
                    format!("does not apply to kind = \"{kind_name}\" (set kind, or remove it)"),
                ));
            }
            if !is_set && key == needs {
                return Err(
                    self.invalid(&p(key), format!("is required with kind = \"{kind_name}\""))
                );
            }
        }
        if let Some(address) = &h.address {
            if let Err(reason) = check_host_port(address) {
                return Err(self.invalid(&p("address"), format!("= \"{address}\" {reason}")));
            }
        }
        let mut https = false;
        if let Some(url) = &h.url {
            match crate::http_url::HttpUrl::parse(url) {
                Ok(parsed) => https = parsed.is_https(),
                Err(reason) => {
                    return Err(self.invalid(&p("url"), format!("= {} {reason}", quoted(url))))
                }
            }
        }
        if let Some(file) = &h.ca_file {
            // Refused rather than ignored, like a key of another kind above: the operator
            // believes the check verifies the service against that CA.
            if !https {
                return Err(self.invalid(
                    &p("ca_file"),
                    "applies only to kind = \"http\" with an https:// url (remove it, or \
                     write the url with https://)",
                ));
            }
            if file.as_os_str().is_empty() {
                return Err(self.invalid(&p("ca_file"), "must name a file: it is empty"));
            }
        }
        if h.kind == HealthKind::Exec {
            self.check_command(&h.command, &p("command"))?;
        }
        if !h.standby_command.is_empty() {
            self.check_command(&h.standby_command, &p("standby_command"))?;
        }
        Ok(())
    }

    pub(super) fn validate_fences(&self, c: &Config) -> Result<(), ConfigError> {
        if c.fence.is_empty() {
            return Err(self.invalid(
                &KeyPath::of(&["fence"]),
                "is missing: warden refuses to start without a way to fence; add a [[fence]] \
                 method (a script running /bin/true if your storage already prevents two writers)",
            ));
        }
        for (i, method) in c.fence.iter().enumerate() {
            let p = KeyPath::of(&["fence"]).index(i);
            self.check_duration(method.timeout(), &p.key("timeout"), &FENCE_TIMEOUT_RANGE)?;
            if let Some(nodes) = method.nodes() {
                if nodes.is_empty() {
                    return Err(self.invalid(
                        &p.key("nodes"),
                        "is empty, so this method would never apply: list the node ids it may \
                         fence, or remove `nodes` to let it act on every node",
                    ));
                }
                for (j, node) in nodes.iter().enumerate() {
                    self.check_id(node, &p.key("nodes").index(j), "node id")?;
                }
            }
            match method {
                FenceMethod::Ssh(m) => {
                    if m.user.trim().is_empty() {
                        return Err(
                            self.invalid(&p.key("user"), "must name the remote user: it is empty")
                        );
                    }
                    for (key, file) in [
                        ("identity_file", &m.identity_file),
                        ("known_hosts", &m.known_hosts),
                    ] {
                        if file.as_os_str().is_empty() {
                            return Err(self.invalid(&p.key(key), "must name a file: it is empty"));
                        }
                    }
                    if m.command.as_ref().is_some_and(|cmd| cmd.trim().is_empty()) {
                        return Err(self.invalid(
                            &p.key("command"),
                            "is empty: remove it to run `warden fence-local` on the target",
                        ));
                    }
                }
                FenceMethod::Signal(_) => {}
                FenceMethod::Script(m) => {
                    self.check_command(&m.command, &p.key("command"))?;
                    match m.protocol {
                        ScriptProtocol::FenceAgent => {
                            if m.command.len() != 1 {
                                return Err(self.invalid(
                                    &p.key("command"),
                                    "must be the fence agent's path alone with protocol = \
                                     \"fence-agent\": its settings go in `options`, such as \
                                     options = { ipaddr = \"10.0.0.9\", username = \"admin\" }",
                                ));
                            }
                            for key in m.options.keys() {
                                if key.is_empty() || key.contains(['=', '\n']) {
                                    return Err(self.invalid(
                                        &p.key("options").key(key),
                                        "is not a valid fence agent option name",
                                    ));
                                }
                            }
                            for (key, value) in &m.options {
                                if value.contains('\n') {
                                    return Err(self.invalid(
                                        &p.key("options").key(key),
                                        "must be one line: the agent reads one key=value per line",
                                    ));
                                }
                            }
                        }
                        ScriptProtocol::Env => {
                            if !m.options.is_empty() {
                                return Err(self.invalid(
                                    &p.key("options"),
                                    "only applies with protocol = \"fence-agent\"; a script of \
                                     protocol \"env\" gets its target in WARDEN_TARGET_* variables",
                                ));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn validate_log(&self, c: &Config) -> Result<(), ConfigError> {
        if let Err(reason) = check_log_level(&c.log.level) {
            return Err(self.invalid(&KeyPath::of(&["log", "level"]), reason));
        }
        Ok(())
    }
}

/// `host:port`, where host may be a name, an IPv4 address or a bracketed IPv6 address.
pub(super) fn check_host_port(s: &str) -> Result<(), String> {
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err("is not host:port: the port is missing".into());
    };
    if !port.parse::<u16>().is_ok_and(|p| p > 0) {
        return Err(format!("has an invalid port \"{port}\""));
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    let ok = match bare {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "has an invalid host \"{host}\" (write an IPv6 address in brackets: \"[::1]:2181\")"
        ))
    }
}

/// `cluster.host`: what peers pass to `connect()` (with the ssh port) to fence this node,
/// so a name or an address alone: no port, no brackets, no path, no spaces. An IPv6
/// address is written bare (`::1`, `fe80::1%eth0`).
pub(super) fn check_host(host: &str) -> Result<(), String> {
    const FIX: &str = "give the name or address alone, such as \"rm1.example.com\", \
                       \"10.0.0.1\" or \"fd00::1\"";
    if host.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    if let Some((addr, scope)) = host.split_once('%') {
        if addr.parse::<std::net::Ipv6Addr>().is_ok()
            && !scope.is_empty()
            && scope
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        {
            return Ok(());
        }
    }
    if host.is_empty() {
        return Err(format!("it is empty; {FIX}"));
    }
    if let Some(bare) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        if bare.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err(format!(
                "write an IPv6 address without brackets, such as {}",
                quoted(bare)
            ));
        }
    }
    if let Some((name, port)) = host.rsplit_once(':') {
        let name = name.trim_start_matches('[').trim_end_matches(']');
        let is_host =
            !name.is_empty() && !name.contains(':') || name.parse::<std::net::Ipv6Addr>().is_ok();
        if is_host && port.parse::<u16>().is_ok() {
            return Err(format!(
                "it has a port; give the host alone, such as {} (the service's port goes in \
                 cluster.port, the ssh port in the ssh [[fence]]'s port)",
                quoted(name)
            ));
        }
    }
    // A DNS name is at most 253 characters of letters, digits, '-' and '.'; '_' appears in
    // some internal names and resolves through /etc/hosts.
    if host.len() > 253
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(format!(
            "a name has at most 253 letters, digits, '.', '-' and '_'; {FIX}"
        ));
    }
    Ok(())
}

/// A znode path: absolute, no trailing or doubled `/`, no `.` or `..` parts.
pub(super) fn check_znode_path(s: &str) -> Result<(), String> {
    if !s.starts_with('/') {
        return Err("must start with '/'".into());
    }
    if s == "/" || s.ends_with('/') {
        return Err("must not end with '/' (use, for example, \"/warden\")".into());
    }
    if s[1..]
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err("must not have empty, \".\" or \"..\" parts".into());
    }
    // ZooKeeper refuses these in a path (they "do not display well"): refused here rather
    // than by every call at run time.
    if s.chars().any(|c| {
        c.is_control()
            || ('\u{e000}'..='\u{f8ff}').contains(&c)
            || ('\u{fff0}'..='\u{ffff}').contains(&c)
    }) {
        return Err(
            "must not hold control or private-use characters: ZooKeeper refuses them".into(),
        );
    }
    Ok(())
}

/// `host:port[,host:port...][/chroot]`.
pub(super) fn check_connect(connect: &str) -> Result<(), String> {
    let (hosts, chroot) = match connect.find('/') {
        Some(i) => (&connect[..i], Some(&connect[i..])),
        None => (connect, None),
    };
    if hosts.trim().is_empty() {
        return Err(format!(
            "= \"{connect}\" names no server: list host:port pairs, such as \"zk1:2181,zk2:2181,zk3:2181\""
        ));
    }
    for server in hosts.split(',') {
        let server = server.trim();
        if let Err(reason) = check_host_port(server) {
            return Err(format!("= \"{connect}\": \"{server}\" {reason}"));
        }
    }
    if let Some(chroot) = chroot {
        if let Err(reason) = check_znode_path(chroot) {
            return Err(format!("= \"{connect}\": the chroot \"{chroot}\" {reason}"));
        }
    }
    Ok(())
}

/// `scheme:credentials`; a digest's credentials are `user:password`. The secret part is
/// never echoed back.
pub(super) fn check_auth(auth: &str) -> Result<(), String> {
    let Some((scheme, credentials)) = auth.split_once(':') else {
        return Err("must be scheme:credentials, such as \"digest:warden:PASSWORD\" (the value is not shown)".into());
    };
    if scheme.is_empty() || credentials.is_empty() {
        return Err("must be scheme:credentials, such as \"digest:warden:PASSWORD\" (the value is not shown)".into());
    }
    if scheme == "digest" {
        match credentials.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {}
            _ => {
                return Err(
                    "uses scheme \"digest\", whose credentials must be user:password (the value is not shown)".into(),
                )
            }
        }
    }
    Ok(())
}

pub(super) const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// A tracing `EnvFilter` directive. A bare word that is not a level is refused although
/// `EnvFilter` would take it as a target name: `level = "inf"` would otherwise quietly
/// log everything from a module called `inf` and nothing else.
pub(super) fn check_log_level(level: &str) -> Result<(), String> {
    if level.trim().is_empty() {
        return Err(
            "is empty: use a level such as \"info\", or directives such as \"info,warden=debug\""
                .into(),
        );
    }
    for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[']);
        let is_level = LEVELS.contains(&directive.to_ascii_lowercase().as_str())
            || directive.parse::<u8>().is_ok_and(|n| n <= 5);
        if bare && !is_level {
            let hint = match nearest(directive, LEVELS.iter().copied()) {
                Some(near) => format!("did you mean \"{near}\"? "),
                None => String::new(),
            };
            return Err(format!(
                "= \"{level}\": \"{directive}\" is not a level; {hint}use one of {}, or \
                 target=level such as \"warden=debug\"",
                quoted_list(LEVELS)
            ));
        }
    }
    match tracing_subscriber::EnvFilter::builder().parse(level) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("= \"{level}\" is not a valid log filter: {e}")),
    }
}
