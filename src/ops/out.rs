//! What operator commands print (SPEC §9): standard output that cannot be written never
//! panics a command. A closed pipe (EPIPE: `warden status | head -1`) ends the output
//! quietly, as SIGPIPE would end a C program, and the command goes on to finish what it
//! was doing; any other write error (ENOSPC on `/dev/full`) is remembered, the output
//! stops there, and `main` says it once on stderr ([`failure`]). Lines on stderr are best
//! effort: a closed stderr drops them.
//!
//! Use [`outln!`](crate::outln), [`out!`](crate::out) and [`errln!`](crate::errln)
//! instead of `println!`, `print!` and `eprintln!`, which panic on a write error.

use std::fmt;
use std::io::{self, Write};
use std::sync::Mutex;

/// What became of standard output so far.
enum State {
    Open,
    /// The reader went away: nothing more is written, and that is no error.
    Closed,
    /// Another write error: nothing more is written; `main` reports it.
    Failed(io::Error),
}

static STATE: Mutex<State> = Mutex::new(State::Open);

/// Writes `bytes` to standard output, flushed, unless an earlier write failed.
pub fn write_bytes(bytes: &[u8]) {
    // A poisoned lock only means a thread panicked while holding it; the state is still
    // one of the three.
    let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if !matches!(*state, State::Open) {
        return;
    }
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        *state = if e.kind() == io::ErrorKind::BrokenPipe {
            State::Closed
        } else {
            State::Failed(e)
        };
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

/// Why standard output could not be written, if it failed other than by a closed pipe:
/// "No space left on device (os error 28)".
pub fn failure() -> Option<String> {
    match &*STATE.lock().unwrap_or_else(|p| p.into_inner()) {
        State::Failed(e) => Some(e.to_string()),
        State::Open | State::Closed => None,
    }
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
