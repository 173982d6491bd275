//! Reading files that someone else may have put in place (a config, a pidfile, a
//! `known_hosts`) without ever blocking or reading without end: only regular files, with a
//! size limit. A fifo would block `open` until a writer comes, and `/dev/zero` never ends;
//! both have been handed to warden by mistake.

use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// An I/O error as a short lower-case reason: "no such file or directory",
/// "connection refused".
pub fn io_reason(e: &io::Error) -> String {
    let text = match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_string(),
        None => e.to_string(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// What a file that is not a regular file is, for messages: `it is a fifo`.
pub fn file_type_name(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "it is a directory"
    } else if t.is_fifo() {
        "it is a fifo"
    } else if t.is_socket() {
        "it is a socket"
    } else if t.is_char_device() {
        "it is a character device"
    } else if t.is_block_device() {
        "it is a block device"
    } else {
        "it is of another type"
    }
}

/// The refusal of a file that is not a regular file: `it is a fifo, not a regular file`.
fn not_regular(t: std::fs::FileType) -> io::Error {
    io::Error::other(format!("{}, not a regular file", file_type_name(t)))
}

/// `1 MiB`, `64 KiB`, `123 bytes`.
fn fmt_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Opens `file` for reading only if it is a regular file, without ever blocking: a fifo
/// would block `open` until a writer comes (forever, for a config), and a device such as
/// `/dev/zero` never ends. The type is checked before opening (opening some devices has
/// effects of its own) and again on the opened descriptor, which is what is read, so a
/// file swapped in between is caught too.
pub fn open_regular_file(file: &Path) -> io::Result<(std::fs::File, std::fs::Metadata)> {
    let before = std::fs::metadata(file)?;
    if !before.is_file() {
        return Err(not_regular(before.file_type()));
    }
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(file)?;
    let meta = opened.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    Ok((opened, meta))
}

/// The content of the regular file `file`, refused when over `limit` bytes (checked on the
/// size and again while reading, since a file can grow in between). Never blocks: a fifo,
/// a device or a directory is refused with `it is a fifo, not a regular file`. For every
/// file warden reads that someone else may have put in place (a pidfile, say).
pub fn read_regular_file(file: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let (opened, meta) = open_regular_file(file)?;
    read_opened(opened, &meta, limit)
}

/// Reads a file opened by [`open_regular_file`], at most `limit` bytes of it.
pub fn read_opened(
    opened: std::fs::File,
    meta: &std::fs::Metadata,
    limit: u64,
) -> io::Result<Vec<u8>> {
    let too_big = |size: u64| {
        io::Error::other(format!(
            "it is {}, larger than the {} this file may be",
            fmt_size(size),
            fmt_size(limit)
        ))
    };
    if meta.len() > limit {
        return Err(too_big(meta.len()));
    }
    let mut content = Vec::with_capacity(meta.len() as usize);
    opened.take(limit + 1).read_to_end(&mut content)?;
    if content.len() as u64 > limit {
        return Err(too_big(content.len() as u64));
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("warden-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = read_regular_file(&fifo, 1024).unwrap_err();
        assert!(
            e.to_string().contains("it is a fifo, not a regular file"),
            "{e}"
        );
        let e = read_regular_file(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let e = read_regular_file(&dir, 1024).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        let big = dir.join("big");
        std::fs::write(&big, vec![b'1'; 2048]).unwrap();
        let e = read_regular_file(&big, 1024).unwrap_err();
        assert!(e.to_string().contains("larger than the 1 KiB"), "{e}");
        assert_eq!(read_regular_file(&big, 2048).unwrap().len(), 2048);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
