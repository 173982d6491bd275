//! The entry points: load a file, parse a text.

use super::*;

/// Reads, parses and validates the config at `path`, then checks the files it names: an
/// ssh `identity_file` and the ZooKeeper `auth_file` must exist, be readable and not be
/// accessible by group or others; `known_hosts` must be readable; a script fence given by
/// absolute path must be an executable file. These checks live here rather than in
/// [`parse`] so that a config can be checked on a machine that lacks its files.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let read_error = |error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    };
    let bytes = read_regular_file(path, MAX_CONFIG_BYTES).map_err(read_error)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        read_error(io::Error::new(
            io::ErrorKind::InvalidData,
            "it is not UTF-8 text",
        ))
    })?;
    let source = Source::new(&text, path)?;
    let config = source.build()?;
    check_files(&config, &source)?;
    Ok(config)
}

/// Parses and validates config text; `path` only names the file in errors. Touches no
/// file: see [`load`] for the checks of the files the config names.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    Source::new(text, path)?.build()
}

/// Whether `s` is a valid cluster name or node id: `[A-Za-z0-9._-]{1,64}`. Node ids
/// appear in znode paths and in fence agents' `plug=` lines, so nothing else is allowed.
pub fn is_valid_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}
