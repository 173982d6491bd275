//! Errors: where in the file, and what is wrong with it.

use super::*;

/// A place in a config file. Lines and columns count from 1; columns count characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            shown_path(&self.path),
            self.line,
            self.column
        )
    }
}

/// Why a config was refused. Each displays as one sentence naming the file, line, column
/// and dotted key (`coordination.zookeeper.session_timeout`, `fence[2].timeout`), except
/// [`ConfigError::Read`], which has no line to name, and the file checks of
/// [`Config::read_auth`] at run time, which name the key and the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read {}: {}", shown_path(.path), io_reason(.error))]
    Read { path: PathBuf, error: io::Error },
    /// The text is not valid TOML.
    #[error("{at}: invalid TOML: {message}")]
    Syntax { at: Location, message: String },
    /// A key that no table of the config has.
    #[error("{at}: unknown key `{}` {context}", one_line(.name))]
    UnknownKey {
        at: Location,
        key: String,
        name: String,
        /// Where it was and what was probably meant: `in [coordination.zookeeper]; did you
        /// mean `session_timeout`?`.
        context: String,
    },
    /// A required key or table is absent; `at` is the table that lacks it.
    #[error("{at}: missing required {what}")]
    MissingKey {
        at: Location,
        key: String,
        /// `key `node_id` in [cluster]`, `table [service]`.
        what: String,
    },
    /// A value of the wrong TOML type.
    #[error("{at}: `{key}` must be {expected}, not {found}")]
    WrongType {
        at: Location,
        key: String,
        expected: String,
        found: String,
    },
    /// A value of the right type that is not allowed.
    #[error("{at}: `{key}` {reason}")]
    Invalid {
        at: Location,
        key: String,
        reason: String,
    },
    /// A secret file readable by someone other than its owner (SPEC §9).
    #[error(
        "{}`{key}`: {} can be read or written by group or others (mode {mode:04o}); \
         run `chmod 600 {}`",
        prefix(.at), shown_path(.file), shown_path(.file)
    )]
    InsecureFile {
        at: Option<Location>,
        key: String,
        file: PathBuf,
        mode: u32,
    },
    /// A file the config names that cannot be used.
    #[error("{}`{key}`: cannot read {}: {}", prefix(.at), shown_path(.file), io_reason(.error))]
    UnreadableFile {
        at: Option<Location>,
        key: String,
        file: PathBuf,
        error: io::Error,
    },
}

impl ConfigError {
    /// The dotted key the error is about, if it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Read { .. } | ConfigError::Syntax { .. } => None,
            ConfigError::UnknownKey { key, .. }
            | ConfigError::MissingKey { key, .. }
            | ConfigError::WrongType { key, .. }
            | ConfigError::Invalid { key, .. }
            | ConfigError::InsecureFile { key, .. }
            | ConfigError::UnreadableFile { key, .. } => Some(key),
        }
    }

    /// Where in the config file the error is, if it is in the file.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Syntax { at, .. }
            | ConfigError::UnknownKey { at, .. }
            | ConfigError::MissingKey { at, .. }
            | ConfigError::WrongType { at, .. }
            | ConfigError::Invalid { at, .. } => Some(at),
            ConfigError::InsecureFile { at, .. } | ConfigError::UnreadableFile { at, .. } => {
                at.as_ref()
            }
        }
    }
}

pub(super) fn prefix(at: &Option<Location>) -> String {
    at.as_ref().map(|at| format!("{at}: ")).unwrap_or_default()
}

/// `s` with its control characters escaped (`\n`, `\u{1b}`), so that a value echoed in a
/// message can neither break it over lines nor reach the terminal as an escape sequence.
pub(super) fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    // Control characters, and the Unicode line separators and direction overrides, which
    // a terminal shows as a line break or uses to reorder the text around them.
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if s.chars().any(unsafe_char) {
        s.chars()
            .map(|c| {
                if unsafe_char(c) {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// A path for a message, on one line.
pub(super) fn shown_path(path: &Path) -> String {
    one_line(&path.display().to_string()).into_owned()
}

/// A value as written in TOML, quoted and escaped: `"rm 1"`, `"a\nb"`.
/// A MySQL or Redis URL warden can use: the backend's scheme, a host, for MySQL a
/// database, and no password (it belongs in `password_file`, mode 0600).
pub fn check_store_url(backend: Backend, text: &str) -> Result<(), String> {
    let url = url::Url::parse(text).map_err(|e| format!("is not a URL ({e})"))?;
    if let Some(fragment) = url.fragment() {
        return Err(url_fragment(backend, fragment));
    }
    if url.password().is_some() {
        return Err(
            "contains a password: put it in password_file (mode 0600) instead, and \
                    remove it from the URL"
                .into(),
        );
    }
    let schemes: &[&str] = match backend {
        Backend::Mysql => &["mysql"],
        _ => &["redis", "rediss"],
    };
    if !schemes.contains(&url.scheme()) {
        return Err(format!(
            "has scheme {:?}: use {}",
            url.scheme(),
            quoted_list(schemes)
        ));
    }
    if !url.username().is_empty() {
        url_text(url.username()).map_err(|why| format!("has a user name that {why}"))?;
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("names no host: write it as in mysql://warden@db1:3306/warden".into());
    }
    if backend == Backend::Mysql && url.path().trim_matches('/').is_empty() {
        return Err(
            "names no database: add it as the path, as in mysql://warden@db1:3306/warden".into(),
        );
    }
    if backend == Backend::Mysql {
        // The driver takes the first segment as the database and drops the rest.
        let path = url.path().trim_start_matches('/');
        if path.contains('/') {
            return Err(format!(
                "names the database {:?}: a MySQL database is one path segment, as in \
                 mysql://warden@db1:3306/warden",
                one_line(path)
            ));
        }
        url_text(path).map_err(|why| format!("names a database that {why}"))?;
        for (name, _) in url.query_pairs() {
            check_mysql_parameter(&name)?;
        }
        // The values too, as the driver reads them (`compression=fast`, not `=quick`).
        mysql_async::Opts::from_url(text).map_err(|e| format!("is not usable: {e}"))?;
    } else {
        // The Redis driver reads `protocol` and ignores any other parameter: one that
        // does nothing is a mistake to say, not to pass over.
        if let Some((name, _)) = url.query_pairs().find(|(name, _)| name != "protocol") {
            return Err(format!(
                "has the unknown parameter {name:?}: warden takes only \"protocol\" in a \
                 Redis URL"
            ));
        }
        let db = url.path().trim_matches('/');
        if !db.is_empty() && db.parse::<u32>().is_err() {
            return Err(format!(
                "names the database {db:?}: a Redis database is a number, as in \
                 redis://db1:6379/0"
            ));
        }
        redis::IntoConnectionInfo::into_connection_info(text)
            .map_err(|e| format!("is not usable: {e}"))?;
    }
    Ok(())
}

/// A percent-encoded part of a URL (user name, database) as the drivers decode it, or why
/// it cannot be one: mysql_async replaces bytes that are not UTF-8 (the login or `USE`
/// then fails at connect, exit 3), and a control character in a name is a mistake.
fn url_text(part: &str) -> Result<String, &'static str> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|b| char::from(*b).to_digit(16));
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(hi), Some(lo)) => {
                // Two hex digits: at most 0xff.
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(u8::MAX));
                i += 3;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    let text = String::from_utf8(out).map_err(|_| "is not UTF-8 once percent-decoded")?;
    if text.chars().any(char::is_control) {
        return Err("holds a control character once percent-decoded");
    }
    Ok(text)
}

/// Why a URL with a `#fragment` is refused. Neither driver documents one for warden's use:
/// the Redis driver takes `#insecure` on a `rediss://` URL as "do not check the server's
/// certificate" (anyone on the path could then pose as the store and hand out the lock),
/// refuses any other at connect, and ignores one on `redis://`; MySQL's ignores it.
fn url_fragment(backend: Backend, fragment: &str) -> String {
    if backend == Backend::Redis && fragment == "insecure" {
        return "ends in the fragment \"#insecure\", which turns off the check of the Redis server's TLS \
                certificate, so that anyone on the network path could pose as the store: \
                remove it, and give the server a certificate that this host's CA roots trust \
                (warden has no TLS settings of its own for Redis yet)"
            .into();
    }
    format!(
        "has the fragment {:?}, which warden does not use: remove it (and the \"#\")",
        format!("#{}", one_line(fragment))
    )
}

/// The parameters of a MySQL URL that warden passes on to its driver (mysql_async), and
/// that change nothing warden relies on.
const MYSQL_PARAMETERS: &[&str] = &[
    "tcp_nodelay",
    "tcp_keepalive",
    "compression",
    "max_allowed_packet",
    "stmt_cache_size",
    "secure_auth",
    "enable_cleartext_plugin",
    "socket",
];

/// A URL parameter warden can honour, or why not. The driver would take the others, but
/// either this build cannot do what they ask (TLS: its connect panicked) or warden sets
/// them itself and would silently override them, or they would change what it relies on.
fn check_mysql_parameter(name: &str) -> Result<(), String> {
    let why = match name {
        _ if MYSQL_PARAMETERS.contains(&name) => return Ok(()),
        "require_ssl" | "verify_ca" | "verify_identity" | "built_in_roots" => {
            "asks for TLS, which this build of warden cannot do with MySQL yet: remove it \
             (and keep the network between warden and MySQL private)"
        }
        "pool_min"
        | "pool_max"
        | "inactive_connection_ttl"
        | "ttl_check_interval"
        | "conn_ttl"
        | "abs_conn_ttl"
        | "abs_conn_ttl_jitter"
        | "reset_connection" => {
            "tunes the connection pool, which warden sizes and ages itself (its connections \
             keep per-session settings and must not outlive the server's wait_timeout): \
             remove it"
        }
        "wait_timeout" => {
            "is set by warden on every connection from session_timeout (SPEC 3a), so that a \
             warden cut off inside a transaction cannot hold the lock row for hours: remove \
             it, and change coordination.mysql.session_timeout instead"
        }
        "client_found_rows" => {
            "changes which rows MySQL counts as affected, which warden's compare-and-set \
             reads: remove it"
        }
        "prefer_socket" => {
            "would let the driver switch to a local server's Unix socket instead of the \
             host in the URL: remove it (name a socket with `socket=/path` if you mean one)"
        }
        _ => {
            return Err(format!(
                "has the unknown parameter {name:?}: warden takes {}",
                quoted_list(MYSQL_PARAMETERS)
            ))
        }
    };
    Err(format!("has the parameter {name:?}, which {why}"))
}

pub(super) fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// `No such file or directory` rather than `No such file or directory (os error 2)`: the
/// number tells an operator nothing.
pub(super) fn io_reason(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_string(),
        None => error.to_string(),
    }
}
