//! What operator commands print (SPEC §9: "stdout or stderr closed, or full: a command
//! ends quietly (exit as for SIGPIPE)"). `println!` panics on a write error (exit 101: a
//! `failover | head -0` crashed after its switchover). Here the first write to standard
//! output that fails ends the command at once, as SIGPIPE ends a C program: killed by
//! SIGPIPE, which shells show as status 141 and do not report. A closed pipe (`warden
//! status | head -1`) says nothing; any other error (ENOSPC on `/dev/full`) leaves one
//! line on stderr first, when stderr can take it. A change already made stays made (a
//! switchover under way goes on without the command); `warden status` shows the cluster.
//! Lines on stderr are best effort: a closed stderr drops them.
//!
//! Use [`outln!`](crate::outln), [`out!`](crate::out) and [`errln!`](crate::errln)
//! instead of `println!`, `print!` and `eprintln!`.

use std::fmt;
use std::io::{self, Write};

/// Writes `bytes` to standard output, flushed; a write that fails ends the process (see
/// the module's doc).
pub fn write_bytes(bytes: &[u8]) {
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        if e.kind() != io::ErrorKind::BrokenPipe {
            write_err(format_args!(
                "warden: cannot write to standard output: {e}; ending as for SIGPIPE\n"
            ));
        }
        crate::error::end_as_for_sigpipe();
    }
}

/// Writes formatted text to standard output (see [`write_bytes`]).
pub fn write_fmt(args: fmt::Arguments<'_>) {
    match args.as_str() {
        Some(s) => write_bytes(s.as_bytes()),
        None => write_bytes(args.to_string().as_bytes()),
    }
}

/// Writes formatted text to standard error; a write error drops it (there is nowhere
/// else to say anything).
pub fn write_err(args: fmt::Arguments<'_>) {
    let mut stderr = io::stderr().lock();
    let _ = stderr.write_fmt(args).and_then(|()| stderr.flush());
}

/// `println!` to standard output that never panics (see the module's doc).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::ops::out::write_bytes(b"\n")
    };
    ($($arg:tt)*) => {
        $crate::ops::out::write_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` to standard output that never panics (see the module's doc).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::ops::out::write_fmt(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics: a closed stderr drops the line.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::ops::out::write_err(format_args!("{}\n", format_args!($($arg)*)))
    };
}
