//! The schema: which keys exist, their types, which are required; a typo gets the nearest key.

use super::*;

/// The type of a value in the file. The schema mirrors the serde structs above (a test
/// checks that the key names match) and adds what serde cannot say well: units on
/// durations, the expected choices, which key of which table was wrong.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Str,
    Int {
        min: i64,
        max: i64,
    },
    Duration,
    Signal,
    Choice(&'static [&'static str]),
    StrList,
    StrMap,
    SocketAddr,
    Table(&'static [Field]),
    /// The `[[fence]]` array: each table's `kind` selects its schema.
    Fences,
}

#[derive(Clone, Copy)]
pub(super) struct Field {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    pub(super) required: bool,
}

pub(super) const fn req(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: true,
    }
}

pub(super) const fn opt(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: false,
    }
}

pub(super) const PORT: Kind = Kind::Int { min: 1, max: 65535 };
pub(super) const COUNT: Kind = Kind::Int {
    min: 1,
    max: u32::MAX as i64,
};

pub(super) const ROOT: &[Field] = &[
    req("cluster", Kind::Table(CLUSTER)),
    req("coordination", Kind::Table(COORDINATION)),
    opt("election", Kind::Table(ELECTION)),
    req("service", Kind::Table(SERVICE)),
    opt("health", Kind::Table(HEALTH)),
    opt("fence", Kind::Fences),
    opt("api", Kind::Table(API)),
    opt("log", Kind::Table(LOG)),
];
pub(super) const CLUSTER: &[Field] = &[
    req("name", Kind::Str),
    req("node_id", Kind::Str),
    opt("host", Kind::Str),
    opt("port", PORT),
];
pub(super) const COORDINATION: &[Field] = &[
    opt("backend", Kind::Choice(&["zookeeper", "mysql", "redis"])),
    opt("zookeeper", Kind::Table(ZOOKEEPER)),
    opt("mysql", Kind::Table(MYSQL)),
    opt("redis", Kind::Table(REDIS)),
];
pub(super) const MYSQL: &[Field] = &[
    req("url", Kind::Str),
    opt("password_file", Kind::Str),
    opt("session_timeout", Kind::Duration),
    opt("poll_interval", Kind::Duration),
    opt("connect_timeout", Kind::Duration),
    opt("table_prefix", Kind::Str),
];
pub(super) const REDIS: &[Field] = &[
    req("url", Kind::Str),
    opt("password_file", Kind::Str),
    opt("session_timeout", Kind::Duration),
    opt("poll_interval", Kind::Duration),
    opt("connect_timeout", Kind::Duration),
    opt("key_prefix", Kind::Str),
];
pub(super) const ZOOKEEPER: &[Field] = &[
    req("connect", Kind::Str),
    opt("root", Kind::Str),
    opt("session_timeout", Kind::Duration),
    opt("connect_timeout", Kind::Duration),
    opt("auth", Kind::Str),
    opt("auth_file", Kind::Str),
    opt("acl", Kind::Choice(&["open", "creator"])),
];
pub(super) const ELECTION: &[Field] = &[
    opt("rejoin_delay", Kind::Duration),
    opt("priority", Kind::Int { min: 0, max: 1000 }),
];
pub(super) const SERVICE: &[Field] = &[
    opt("mode", Kind::Choice(&["spawn", "hooks"])),
    opt("command", Kind::StrList),
    opt("stop_signal", Kind::Signal),
    opt("stop_timeout", Kind::Duration),
    opt("promote", Kind::StrList),
    opt("demote", Kind::StrList),
    opt("follow", Kind::StrList),
    opt("hook_timeout", Kind::Duration),
    opt("pidfile", Kind::Str),
];
pub(super) const HEALTH: &[Field] = &[
    opt("kind", Kind::Choice(&["exec", "tcp", "http", "none"])),
    opt("address", Kind::Str),
    opt("url", Kind::Str),
    opt("ca_file", Kind::Str),
    opt("command", Kind::StrList),
    opt("interval", Kind::Duration),
    opt("timeout", Kind::Duration),
    opt("fall", COUNT),
    opt("rise", COUNT),
    opt("start_grace", Kind::Duration),
    opt("standby_command", Kind::StrList),
];
pub(super) const API: &[Field] = &[req("listen", Kind::SocketAddr)];
pub(super) const LOG: &[Field] = &[
    opt("level", Kind::Str),
    opt("format", Kind::Choice(&["text", "json"])),
];
pub(super) const FENCE_KINDS: &[&str] = &["ssh", "signal", "script"];
pub(super) const FENCE_SSH: &[Field] = &[
    req("kind", Kind::Choice(FENCE_KINDS)),
    req("user", Kind::Str),
    opt("port", PORT),
    req("identity_file", Kind::Str),
    req("known_hosts", Kind::Str),
    opt("timeout", Kind::Duration),
    opt("command", Kind::Str),
    opt("nodes", Kind::StrList),
];
pub(super) const FENCE_SIGNAL: &[Field] = &[
    req("kind", Kind::Choice(FENCE_KINDS)),
    opt("signal", Kind::Signal),
    opt("timeout", Kind::Duration),
    opt("nodes", Kind::StrList),
];
pub(super) const FENCE_SCRIPT: &[Field] = &[
    req("kind", Kind::Choice(FENCE_KINDS)),
    req("command", Kind::StrList),
    opt("protocol", Kind::Choice(&["env", "fence-agent"])),
    opt("options", Kind::StrMap),
    opt("timeout", Kind::Duration),
    opt("nodes", Kind::StrList),
];

pub(super) fn fence_schema(kind: &str) -> Option<&'static [Field]> {
    match kind {
        "ssh" => Some(FENCE_SSH),
        "signal" => Some(FENCE_SIGNAL),
        "script" => Some(FENCE_SCRIPT),
        _ => None,
    }
}

/// Every table of the schema with the words that name it in a message, so that a key
/// written in the wrong table can be pointed to the right one.
pub(super) fn all_tables() -> Vec<(String, &'static [Field])> {
    let mut out = Vec::new();
    fn walk(label: String, fields: &'static [Field], out: &mut Vec<(String, &'static [Field])>) {
        out.push((label.clone(), fields));
        for f in fields {
            if let Kind::Table(sub) = f.kind {
                let name = if label.is_empty() {
                    f.name.to_string()
                } else {
                    format!(
                        "{}.{}",
                        label.trim_matches(|c| c == '[' || c == ']'),
                        f.name
                    )
                };
                walk(format!("[{name}]"), sub, out);
            }
        }
    }
    walk(String::new(), ROOT, &mut out);
    for kind in FENCE_KINDS {
        if let Some(fields) = fence_schema(kind) {
            out.push((format!("a [[fence]] of kind = \"{kind}\""), fields));
        }
    }
    out
}

impl Kind {
    pub(super) fn describe(&self) -> String {
        match self {
            Kind::Str => "a string".into(),
            Kind::Int { min, max } => format!("an integer {}", int_range(*min, *max)),
            Kind::Duration => "a duration with a unit, such as \"5s\" or \"250ms\"".into(),
            Kind::Signal => "a signal name such as \"SIGTERM\"".into(),
            Kind::Choice(choices) => format!("one of {}", quoted_list(choices)),
            Kind::StrList => "an array of strings".into(),
            Kind::StrMap => "a table of strings".into(),
            Kind::SocketAddr => "an address and port such as \"127.0.0.1:7232\"".into(),
            Kind::Table(_) => "a table".into(),
            Kind::Fences => "an array of tables, written [[fence]]".into(),
        }
    }
}

/// `from 1 to 65535`, or `at least 1` where the maximum is the type's own (noise).
pub(super) fn int_range(min: i64, max: i64) -> String {
    if max >= i64::from(u32::MAX) {
        format!("at least {min}")
    } else {
        format!("from {min} to {max}")
    }
}

pub(super) fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.join(""),
    }
}

pub(super) fn type_name(value: &DeValue<'_>) -> String {
    match value {
        DeValue::Integer(_) => "an integer".into(),
        DeValue::Array(_) => "an array".into(),
        other => format!("a {}", other.type_str()),
    }
}

/// The closest of `candidates` to a misspelt `word`, if one is close enough to be the
/// likely intent.
pub(super) fn nearest<'c>(
    word: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> Option<&'c str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let word_n = norm(word);
    candidates
        .into_iter()
        .map(|c| (strsim::osa_distance(&word_n, &norm(c)), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

impl Source<'_> {
    pub(super) fn check_table(
        &self,
        fields: &'static [Field],
        table: &DeTable<'_>,
        span: std::ops::Range<usize>,
        path: &KeyPath,
        found: &mut Findings,
    ) {
        for (key, value) in table.iter() {
            let name: &str = key.get_ref();
            match fields.iter().find(|f| f.name == name) {
                Some(field) => self.check_value(field.kind, value, &path.key(name), found),
                None => found.push(Rank::Unknown, key.span().start, || {
                    ConfigError::UnknownKey {
                        at: self.location(key.span().start),
                        key: path.key(name).to_string(),
                        name: name.to_string(),
                        context: one_line(&format!(
                            "{}{}",
                            self.table_label(path, table),
                            unknown_key_hint(name, fields)
                        ))
                        .into_owned(),
                    }
                }),
            }
        }
        for field in fields.iter().filter(|f| f.required) {
            if table.get(field.name).is_none() {
                found.push(Rank::Missing, span.start, || {
                    let what = match (field.kind, path.is_root()) {
                        (Kind::Table(_), _) => format!("table [{}]", path.key(field.name)),
                        (_, true) => format!("key `{}`", field.name),
                        (_, false) => {
                            format!("key `{}` {}", field.name, self.table_label(path, table))
                        }
                    };
                    ConfigError::MissingKey {
                        at: self.location(span.start),
                        key: path.key(field.name).to_string(),
                        what,
                    }
                });
            }
        }
    }

    /// `in [coordination.zookeeper]`, `in fence[1] (kind = "ssh")`, `at the top level`.
    pub(super) fn table_label(&self, path: &KeyPath, table: &DeTable<'_>) -> String {
        if path.is_root() {
            return "at the top level".to_string();
        }
        if matches!(path.0.last(), Some(Seg::Index(_))) {
            return match table.get("kind").and_then(|k| k.get_ref().as_str()) {
                Some(kind) => format!("in {path} (kind = {})", quoted(kind)),
                None => format!("in {path}"),
            };
        }
        format!("in [{path}]")
    }

    pub(super) fn check_value(
        &self,
        kind: Kind,
        value: &Spanned<DeValue<'_>>,
        path: &KeyPath,
        found: &mut Findings,
    ) {
        let start = value.span().start;
        let v = value.get_ref();
        let wrong_type = |found: &mut Findings| {
            found.push(Rank::Value, start, || ConfigError::WrongType {
                at: self.location(start),
                key: path.to_string(),
                expected: kind.describe(),
                found: type_name(v),
            })
        };
        // The reason is built only for the error that is reported.
        let invalid = |found: &mut Findings, reason: &dyn Fn() -> String| {
            found.push(Rank::Value, start, || ConfigError::Invalid {
                at: self.location(start),
                key: path.to_string(),
                reason: one_line(&reason()).into_owned(),
            })
        };
        match kind {
            Kind::Str => match v.as_str() {
                // No file name, program, host or argument can hold a NUL, and a C library
                // call would silently cut the value short at it.
                Some(s) if s.contains('\0') => invalid(found, &|| {
                    format!(
                        "= {} contains a NUL character (\\u0000), which no name, path or \
                         argument can hold: remove it",
                        quoted(s)
                    )
                }),
                Some(_) => {}
                None => wrong_type(found),
            },
            Kind::Int { min, max } => match v.as_integer() {
                Some(i) => {
                    let n = i64::from_str_radix(i.as_str(), i.radix()).ok();
                    if !n.is_some_and(|n| (min..=max).contains(&n)) {
                        invalid(found, &|| {
                            format!(
                                "= {} is out of range: it must be {}",
                                i.as_str(),
                                int_range(min, max)
                            )
                        });
                    }
                }
                None => wrong_type(found),
            },
            Kind::Duration => match v {
                DeValue::String(s) => {
                    if let Err(reason) = parse_duration(s) {
                        invalid(found, &|| reason.clone());
                    }
                }
                DeValue::Integer(_) | DeValue::Float(_) => invalid(found, &|| {
                    let written = one_line(&self.text[value.span()]);
                    format!(
                        "= {written} has no unit: write a string with a unit, such as \"{written}s\" \
                         or \"250ms\""
                    )
                }),
                _ => wrong_type(found),
            },
            Kind::Signal => match v.as_str() {
                Some(s) => match SignalName::from_str(s) {
                    Err(reason) => {
                        invalid(found, &|| format!("is not valid: {}", one_line(&reason)))
                    }
                    Ok(signal) => {
                        if let Some(why) = cannot_end_a_process(signal.0) {
                            invalid(found, &|| {
                                format!(
                                    "= {} cannot end a process: {} {why}; use a signal that \
                                     ends it, such as \"SIGTERM\" or \"SIGKILL\"",
                                    quoted(s),
                                    signal.0.as_str()
                                )
                            });
                        }
                    }
                },
                None => wrong_type(found),
            },
            Kind::Choice(choices) => match v.as_str() {
                Some(s) if choices.contains(&s) => {}
                Some(s) => invalid(found, &|| {
                    let hint = match nearest(s, choices.iter().copied()) {
                        Some(near) => format!("; did you mean \"{near}\"?"),
                        None => String::new(),
                    };
                    format!(
                        "= {} is not one of {}{hint}",
                        quoted(s),
                        quoted_list(choices)
                    )
                }),
                None => wrong_type(found),
            },
            Kind::StrList => match v.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.check_value(Kind::Str, item, &path.index(i), found);
                    }
                }
                None => wrong_type(found),
            },
            Kind::StrMap => match v.as_table() {
                Some(t) => {
                    for (k, item) in t.iter() {
                        self.check_value(Kind::Str, item, &path.key(k.get_ref()), found);
                    }
                }
                None => wrong_type(found),
            },
            Kind::SocketAddr => match v.as_str() {
                Some(s) => {
                    if s.parse::<SocketAddr>().is_err() {
                        invalid(found, &|| {
                            format!(
                                "= {} is not an IP address and port such as \"127.0.0.1:7232\" \
                                 (names are not resolved here)",
                                quoted(s)
                            )
                        });
                    }
                }
                None => wrong_type(found),
            },
            Kind::Table(fields) => match v.as_table() {
                Some(t) => self.check_table(fields, t, value.span(), path, found),
                None => wrong_type(found),
            },
            Kind::Fences => match v.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.check_fence(item, &path.index(i), found);
                    }
                }
                None => wrong_type(found),
            },
        }
    }

    pub(super) fn check_fence(
        &self,
        item: &Spanned<DeValue<'_>>,
        path: &KeyPath,
        found: &mut Findings,
    ) {
        let Some(table) = item.get_ref().as_table() else {
            found.push(Rank::Value, item.span().start, || ConfigError::WrongType {
                at: self.location(item.span().start),
                key: path.to_string(),
                expected: "a table".into(),
                found: type_name(item.get_ref()),
            });
            return;
        };
        let schema = table
            .get("kind")
            .and_then(|k| k.get_ref().as_str())
            .and_then(fence_schema);
        match schema {
            Some(fields) => self.check_table(fields, table, item.span(), path, found),
            // An absent or unknown kind is reported through the `kind` field alone: with no
            // schema to check against, the other keys cannot be judged.
            None => match table.get("kind") {
                Some(kind) => {
                    self.check_value(Kind::Choice(FENCE_KINDS), kind, &path.key("kind"), found)
                }
                None => found.push(Rank::Missing, item.span().start, || {
                    ConfigError::MissingKey {
                        at: self.location(item.span().start),
                        key: path.key("kind").to_string(),
                        what: format!("key `kind` in {path}: one of {}", quoted_list(FENCE_KINDS)),
                    }
                }),
            },
        }
    }
}

/// Why a signal cannot stop a service or fence a process: by default it suspends, resumes
/// or is ignored, so a process that does not handle it keeps running. (SIGKILL after
/// `stop_timeout` would still end a service, but only after a pointless wait.)
pub(super) fn cannot_end_a_process(signal: nix::sys::signal::Signal) -> Option<&'static str> {
    use nix::sys::signal::Signal::*;
    match signal {
        SIGSTOP | SIGTSTP | SIGTTIN | SIGTTOU => Some("only suspends a process"),
        SIGCONT => Some("only resumes a suspended process"),
        // SIGURG and SIGWINCH are ignored by default too, but some services stop on them
        // (Apache httpd's graceful stop is SIGWINCH), and SIGKILL follows anyway: allowed.
        SIGCHLD => Some("is ignored by a process that does not handle it"),
        _ => None,
    }
}

/// `; did you mean `x`?`, `; `x` belongs in [a.b]`, or the list of valid keys.
pub(super) fn unknown_key_hint(name: &str, fields: &[Field]) -> String {
    if let Some(near) = nearest(name, fields.iter().map(|f| f.name)) {
        return format!("; did you mean `{near}`?");
    }
    let elsewhere: Vec<String> = all_tables()
        .into_iter()
        .filter(|(_, fs)| fs.iter().any(|f| f.name == name))
        .map(|(label, _)| {
            if label.is_empty() {
                "at the top level, before the first [table]".to_string()
            } else {
                format!("in {label}")
            }
        })
        .collect();
    if !elsewhere.is_empty() {
        return format!("; `{name}` belongs {}", elsewhere.join(" or "));
    }
    let names: Vec<&str> = fields.iter().map(|f| f.name).collect();
    let agent = if std::ptr::eq(fields, FENCE_SCRIPT) {
        " (a fence agent's settings go in `options = { ... }`)"
    } else {
        ""
    };
    format!("; valid keys here: {}{agent}", names.join(", "))
}

/// A humantime duration that insists on a unit: a bare `"10"` is refused, since nobody
/// can tell whether it meant seconds or milliseconds.
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "= \"{s}\" has no unit: add one, such as \"{t}s\" or \"{t}ms\""
        ));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!(
            "= \"{s}\" is not a duration ({e}): write it with a unit, such as \"5s\" or \"250ms\""
        )
    })
}
