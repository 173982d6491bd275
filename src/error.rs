//! The one error a `warden` command ends with. Commands return `Result<(), Error>`;
//! `main` prints the error once and maps it to the process's exit code once (SPEC §7:
//! 0 success; 1 the operation failed or was refused; 2 usage or configuration error;
//! 3 coordination service unreachable or auth refused), as ripgrep's `main` does.

use crate::config::ConfigError;
use crate::coord::StoreError;
use crate::record;

/// Exit code: the operation failed or was refused.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: usage or configuration error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the coordination service is unreachable or refused authentication.
pub const EXIT_UNREACHABLE: u8 = 3;

/// Ends an operator command whose output cannot be written "as for SIGPIPE" (SPEC §9):
/// killed by that signal, as a C program writing to a closed pipe is (shells show status
/// 141 and say nothing). Rust ignores SIGPIPE in its own process, so its default comes
/// back first; should the signal not end the process (it cannot be blocked here, but
/// that is the kernel's to say), the exit status is the one a shell would show.
pub fn end_as_for_sigpipe() -> ! {
    use nix::sys::signal::{raise, signal, SigHandler, Signal};
    // SAFETY: SIG_DFL installs no handler of ours; nothing runs between this and the
    // signal's delivery that could rely on the old disposition.
    unsafe {
        let _ = signal(Signal::SIGPIPE, SigHandler::SigDfl);
    }
    let _ = raise(Signal::SIGPIPE);
    std::process::exit(128 + Signal::SIGPIPE as i32)
}

/// A fatal start-up or run-time error of the daemon; its kind is its exit code (SPEC §7).
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    /// The configuration cannot be used, or the store is not one warden can use as it
    /// is: [`EXIT_USAGE`] (systemd does not restart it).
    #[error("{0}")]
    Usage(String),
    /// The store is unreachable or refused authentication: [`EXIT_UNREACHABLE`].
    #[error("{0}")]
    Unreachable(String),
    /// Anything else: [`EXIT_FAILED`].
    #[error("{0}")]
    Failed(String),
}

impl Fatal {
    /// The exit code of SPEC §7.
    pub fn code(&self) -> u8 {
        match self {
            Fatal::Usage(_) => EXIT_USAGE,
            Fatal::Unreachable(_) => EXIT_UNREACHABLE,
            Fatal::Failed(_) => EXIT_FAILED,
        }
    }
}

/// Why an operator command did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// A rule of SPEC §5 or §8 forbids it now; the text says why and what to do.
    #[error("{0}")]
    Refused(String),
    /// It was tried and did not work (a fence that failed, a switchover that timed out).
    #[error("{0}")]
    Failed(String),
    /// The command's arguments cannot be used (a `pause --reason` over its limit): exit 2.
    #[error("{0}")]
    Usage(String),
    /// The coordination service did not answer as needed while doing `doing`.
    #[error("could not {doing}: {source}")]
    Store {
        doing: &'static str,
        source: StoreError,
    },
}

impl OpError {
    /// The coordination error met while doing `doing` (e.g. "read the cluster").
    pub fn store(doing: &'static str) -> impl FnOnce(StoreError) -> OpError {
        move |source| OpError::Store { doing, source }
    }

    /// SPEC §7: 3 when ZooKeeper is unreachable or refused us, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            OpError::Store { source, .. } if source.is_unreachable() => EXIT_UNREACHABLE,
            OpError::Store { source, .. } if source.is_unsuitable() => EXIT_USAGE,
            OpError::Usage(_) => EXIT_USAGE,
            _ => EXIT_FAILED,
        }
    }
}

/// Why a command did not succeed; [`exit_code`](Error::exit_code) is its SPEC §7 code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config file cannot be read or is invalid. (Boxed, as the large variants are:
    /// an `Error` travels up every `?`.)
    #[error(transparent)]
    Config(Box<ConfigError>),
    /// An operator command was refused, failed, or the store failed it.
    #[error(transparent)]
    Op(Box<OpError>),
    /// The coordination store failed a command that has no words of its own for it.
    #[error(transparent)]
    Store(Box<StoreError>),
    /// The daemon could not start, or stopped on a fatal error (the code is in it).
    #[error(transparent)]
    Fatal(#[from] Fatal),
    /// The daemon stopped with a non-zero code and already said why in its log (a second
    /// stop signal).
    #[error("stopped with exit code {0}")]
    Stopped(u8),
    /// Something of this process failed: the async runtime, writing to stdout.
    #[error("{0}")]
    Local(String),
    /// `fence-local` (SPEC §5): not verified fenced (exit 1). Its own prefix, not
    /// `warden:`: the ssh side quotes it.
    #[error("fence-local: {0}")]
    NotFenced(String),
    /// `fence-local` was given arguments it cannot use (exit 2).
    #[error("fence-local: {0}")]
    FenceLocalArguments(String),
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::Config(Box::new(e))
    }
}

impl From<OpError> for Error {
    fn from(e: OpError) -> Error {
        Error::Op(Box::new(e))
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Error {
        Error::Store(Box::new(e))
    }
}

impl Error {
    /// The process's exit code (SPEC §7; `fence-local`'s of SPEC §5).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) | Error::FenceLocalArguments(_) => EXIT_USAGE,
            Error::Op(e) => e.exit_code(),
            Error::Store(e) if e.is_unreachable() => EXIT_UNREACHABLE,
            Error::Store(e) if e.is_unsuitable() => EXIT_USAGE,
            Error::Fatal(f) => f.code(),
            Error::Stopped(code) => *code,
            Error::Store(_) | Error::Local(_) | Error::NotFenced(_) => EXIT_FAILED,
        }
    }

    /// The line `main` prints on stderr, if any. Operator errors quote the store (node
    /// ids, hosts, records' errors), so their line is made printable.
    pub fn report(&self) -> Option<String> {
        match self {
            Error::Stopped(_) => None,
            Error::NotFenced(_) | Error::FenceLocalArguments(_) => Some(self.to_string()),
            Error::Op(e) => Some(format!("warden: {}", record::printable(&e.to_string()))),
            _ => Some(format!("warden: {self}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_error_has_its_spec_exit_code() {
        let unreachable = || StoreError::Unreachable {
            store: "ZooKeeper",
            key: "coordination.zookeeper.connect",
            connect: "127.0.0.1:1".into(),
            timeout: "1s".into(),
            reason: "refused".into(),
        };
        assert_eq!(Error::from(unreachable()).exit_code(), EXIT_UNREACHABLE);
        assert_eq!(
            Error::from(OpError::store("read the cluster")(unreachable())).exit_code(),
            EXIT_UNREACHABLE
        );
        assert_eq!(Error::from(OpError::Refused("no".into())).exit_code(), 1);
        assert_eq!(Error::from(OpError::Usage("no".into())).exit_code(), 2);
        assert_eq!(Error::Local("runtime".into()).exit_code(), 1);
        assert_eq!(Error::NotFenced("x".into()).exit_code(), 1);
        assert_eq!(Error::FenceLocalArguments("x".into()).exit_code(), 2);
        let fatal = Fatal::Usage("bad listen address".into());
        assert_eq!(Error::Fatal(fatal).exit_code(), 2);
        assert_eq!(Error::Stopped(1).report(), None);
        assert_eq!(
            Error::NotFenced("NOT fenced on h".into()).report().unwrap(),
            "fence-local: NOT fenced on h"
        );
    }
}
