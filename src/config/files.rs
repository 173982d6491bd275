//! The files the config names (keys, auth files, CA files), checked at load.

use super::*;

/// What is wrong with a file the config names.
pub(super) enum FileProblem {
    Unreadable(io::Error),
    Insecure(u32),
}

/// The largest config file read. The reference config, every comment included, is about
/// 10 KiB; a megabyte is a hundred times that, and bounds what a wrong `-c` (a log file, a
/// disk image) costs before it is refused.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The largest `auth_file`: it holds one `scheme:credentials` line.
pub(super) const MAX_AUTH_FILE_BYTES: u64 = 64 << 10;

/// The largest ssh `identity_file`: an OpenSSH RSA key of 16384 bits is about 13 KiB.
pub(super) const MAX_IDENTITY_FILE_BYTES: u64 = 1 << 20;

pub use warden_fencing::files::read_regular_file;
use warden_fencing::files::{file_type_name, open_regular_file, read_opened};

/// Opens a file that holds a secret, refusing it (as OpenSSH refuses a private key) when
/// group or others have any access to it, and returns its content (at most `limit` bytes).
pub(super) fn read_private_file(file: &Path, limit: u64) -> Result<Vec<u8>, FileProblem> {
    let (opened, meta) = open_regular_file(file).map_err(FileProblem::Unreadable)?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(FileProblem::Insecure(mode));
    }
    read_opened(opened, &meta, limit).map_err(FileProblem::Unreadable)
}

pub(super) fn file_error(
    problem: FileProblem,
    at: Option<Location>,
    key: &KeyPath,
    file: &Path,
) -> ConfigError {
    match problem {
        FileProblem::Unreadable(error) => ConfigError::UnreadableFile {
            at,
            key: key.to_string(),
            file: file.to_path_buf(),
            error,
        },
        FileProblem::Insecure(mode) => ConfigError::InsecureFile {
            at,
            key: key.to_string(),
            file: file.to_path_buf(),
            mode,
        },
    }
}

/// The file checks of [`load`].
pub(super) fn check_files(c: &Config, source: &Source<'_>) -> Result<(), ConfigError> {
    if let Some(file) = c.store().and_then(|s| s.password_file) {
        let key = KeyPath::of(&[
            "coordination",
            c.coordination.backend.as_str(),
            "password_file",
        ]);
        let content = read_private_file(file, MAX_AUTH_FILE_BYTES)
            .map_err(|p| file_error(p, Some(source.at(&key)), &key, file))?;
        // Refused here (exit 2, the key named), not by the driver at connect, where it
        // was an "unreachable" store (exit 3) or a password with a line break sent as is.
        if let Err(reason) = store_password(content) {
            return Err(source.invalid(
                &key,
                format!("names {}, whose content {reason}", shown_path(file)),
            ));
        }
    }
    if let Some(file) = &c.coordination.zookeeper.auth_file {
        let key = KeyPath::of(&["coordination", "zookeeper", "auth_file"]);
        let content = read_private_file(file, MAX_AUTH_FILE_BYTES)
            .map_err(|p| file_error(p, Some(source.at(&key)), &key, file))?;
        let text = String::from_utf8_lossy(&content);
        if let Err(reason) = check_auth(text.trim()) {
            return Err(source.invalid(
                &key,
                format!("names {}, whose content {reason}", shown_path(file)),
            ));
        }
    }
    let service = KeyPath::of(&["service"]);
    let health = KeyPath::of(&["health"]);
    let mut programs: Vec<(KeyPath, &[String])> = Vec::new();
    match c.service.mode {
        ServiceMode::Spawn => {
            programs.push((service.key("command"), &c.service.command));
            programs.push((health.key("standby_command"), &c.health.standby_command));
        }
        ServiceMode::Hooks => {
            programs.push((service.key("promote"), &c.service.promote));
            programs.push((service.key("demote"), &c.service.demote));
            programs.push((service.key("follow"), &c.service.follow));
        }
    }
    if c.health.kind == HealthKind::Exec {
        programs.push((health.key("command"), &c.health.command));
    }
    if let Some(file) = &c.health.ca_file {
        let key = health.key("ca_file");
        crate::http_url::read_ca_file(file).map_err(|e| match e {
            crate::http_url::CaFileError::Unreadable(error) => ConfigError::UnreadableFile {
                at: Some(source.at(&key)),
                key: key.to_string(),
                file: file.clone(),
                error,
            },
            invalid => source.invalid(&key, format!("names {}, which {invalid}", shown_path(file))),
        })?;
    }
    for (i, method) in c.fence.iter().enumerate() {
        let p = KeyPath::of(&["fence"]).index(i);
        match method {
            FenceMethod::Ssh(m) => {
                let key = p.key("identity_file");
                read_private_file(&m.identity_file, MAX_IDENTITY_FILE_BYTES)
                    .map_err(|e| file_error(e, Some(source.at(&key)), &key, &m.identity_file))?;
                // Opened, not read: the fence reads it when it runs, and it may be long.
                let key = p.key("known_hosts");
                open_regular_file(&m.known_hosts).map_err(|error| ConfigError::UnreadableFile {
                    at: Some(source.at(&key)),
                    key: key.to_string(),
                    file: m.known_hosts.clone(),
                    error,
                })?;
            }
            FenceMethod::Script(m) => programs.push((p.key("command"), &m.command)),
            FenceMethod::Signal(_) => {}
        }
    }
    for (key, command) in programs {
        check_program(command, &key.index(0), source)?;
    }
    Ok(())
}

/// A program named by absolute path must be an executable regular file: a missing or
/// broken one would otherwise surface at the worst moment, in the middle of a failover.
/// A bare name is looked up in the PATH it runs with, which this check cannot know.
/// Any execute bit will do: `check-config` may run as another user than the daemon.
pub(super) fn check_program(
    command: &[String],
    key: &KeyPath,
    source: &Source<'_>,
) -> Result<(), ConfigError> {
    let Some(program) = command.first().map(Path::new) else {
        return Ok(());
    };
    if !program.is_absolute() {
        return Ok(());
    }
    // stat, never open: a fifo named here must not block the check.
    let meta = std::fs::metadata(program).map_err(|error| ConfigError::UnreadableFile {
        at: Some(source.at(key)),
        key: key.to_string(),
        file: program.to_path_buf(),
        error,
    })?;
    let why = if !meta.is_file() {
        file_type_name(meta.file_type()).to_string()
    } else if meta.permissions().mode() & 0o111 == 0 {
        format!(
            "nobody may execute it (mode {:04o}); run `chmod +x {}`",
            meta.permissions().mode() & 0o7777,
            shown_path(program)
        )
    } else {
        return Ok(());
    };
    Err(source.invalid(
        key,
        format!(
            "= {} is not an executable file: {why}",
            quoted(&program.display().to_string())
        ),
    ))
}

/// The keys `[coordination.mysql]` and `[coordination.redis]` share, for validation.
pub(crate) struct StoreView<'a> {
    pub url: &'a str,
    pub password_file: Option<&'a PathBuf>,
    pub session_timeout: Duration,
    pub poll_interval: Duration,
    pub connect_timeout: Duration,
    /// `table_prefix` or `key_prefix`.
    pub prefix: Option<&'a String>,
    /// Redis `replicas_ack`; 0 elsewhere.
    pub replicas_ack: u32,
}

impl Config {
    /// The chosen backend's table when it is MySQL or Redis.
    pub(crate) fn store(&self) -> Option<StoreView<'_>> {
        match self.coordination.backend {
            Backend::Zookeeper => None,
            Backend::Mysql => self.coordination.mysql.as_ref().map(|m| StoreView {
                url: &m.url,
                password_file: m.password_file.as_ref(),
                session_timeout: m.session_timeout,
                poll_interval: m.poll_interval,
                connect_timeout: m.connect_timeout,
                prefix: Some(&m.table_prefix),
                replicas_ack: 0,
            }),
            Backend::Redis => self.coordination.redis.as_ref().map(|r| StoreView {
                url: &r.url,
                password_file: r.password_file.as_ref(),
                session_timeout: r.session_timeout,
                poll_interval: r.poll_interval,
                connect_timeout: r.connect_timeout,
                prefix: Some(&r.key_prefix),
                replicas_ack: r.replicas_ack,
            }),
        }
    }

    /// `[coordination.mysql]`, when the backend is MySQL.
    pub fn mysql(&self) -> Option<&MysqlConfig> {
        match self.coordination.backend {
            Backend::Mysql => self.coordination.mysql.as_ref(),
            _ => None,
        }
    }

    /// `[coordination.redis]`, when the backend is Redis.
    pub fn redis(&self) -> Option<&RedisConfig> {
        match self.coordination.backend {
            Backend::Redis => self.coordination.redis.as_ref(),
            _ => None,
        }
    }

    /// How long the chosen backend waits for a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.store()
            .map_or(self.coordination.zookeeper.connect_timeout, |s| {
                s.connect_timeout
            })
    }

    /// How often standbys read the lock (MySQL, Redis); `None` for ZooKeeper's watches.
    pub fn poll_interval(&self) -> Option<Duration> {
        self.store().map(|s| s.poll_interval)
    }

    /// The MySQL or Redis password: the trimmed content of `password_file` (checked again
    /// here, since the file may have changed since [`load`]); `None` without one.
    pub fn read_store_password(&self) -> Result<Option<String>, ConfigError> {
        let Some(file) = self.store().and_then(|s| s.password_file) else {
            return Ok(None);
        };
        let key = KeyPath::of(&[
            "coordination",
            self.coordination.backend.as_str(),
            "password_file",
        ]);
        let content = read_private_file(file, MAX_AUTH_FILE_BYTES)
            .map_err(|p| file_error(p, None, &key, file))?;
        let password = store_password(content).map_err(|reason| ConfigError::UnreadableFile {
            at: None,
            key: key.to_string(),
            file: file.clone(),
            error: io::Error::new(io::ErrorKind::InvalidData, format!("its content {reason}")),
        })?;
        Ok(Some(password))
    }

    /// The ZooKeeper credentials: `auth`, or the trimmed content of `auth_file` (checked
    /// again here, since the file may have changed since [`load`]); `None` without either.
    pub fn read_auth(&self) -> Result<Option<String>, ConfigError> {
        let zk = &self.coordination.zookeeper;
        if let Some(auth) = &zk.auth {
            return Ok(Some(auth.clone()));
        }
        let Some(file) = &zk.auth_file else {
            return Ok(None);
        };
        let key = KeyPath::of(&["coordination", "zookeeper", "auth_file"]);
        let content = read_private_file(file, MAX_AUTH_FILE_BYTES)
            .map_err(|p| file_error(p, None, &key, file))?;
        let text = String::from_utf8(content).map_err(|_| ConfigError::UnreadableFile {
            at: None,
            key: key.to_string(),
            file: file.clone(),
            error: io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"),
        })?;
        Ok(Some(text.trim().to_string()))
    }
}

/// The password a `password_file` holds: its text without the trailing line break(s), or
/// what makes it no password (the reason completes "its content ..."; it never repeats the
/// content). A NUL or a line break inside would reach the server as part of the password
/// (RESP and MySQL's handshake carry any byte) and fail there as a wrong password, or be
/// cut short by a driver; text that is not UTF-8 cannot be passed to either driver.
pub fn store_password(content: Vec<u8>) -> Result<String, &'static str> {
    let text = String::from_utf8(content).map_err(|_| "is not UTF-8 text")?;
    let password = text.trim_end_matches(['\n', '\r']);
    if password.contains('\0') {
        return Err("holds a NUL byte, which no password can hold");
    }
    if password.contains(['\n', '\r']) {
        return Err(
            "has a line break inside the password: write it on one line (one trailing \
             newline is allowed)",
        );
    }
    Ok(password.to_string())
}
