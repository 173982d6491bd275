//! Starting the service directly inside its cgroup: `clone3(CLONE_INTO_CGROUP)` (Linux
//! 5.7 and later), then exec.
//!
//! Why by hand: std's `Command` (and tokio's, built on it) can only fork and let the child
//! move itself into its cgroup by writing `cgroup.procs` before exec. That move is a
//! cgroup migration, and an isolated migration waits for an RCU grace period: on the
//! machine of the failover benchmark (kernel 6.18, 30 isolated starts of `/bin/true`),
//! fork + move + exec took 8.8 ms on average and up to 37 ms, clone3 into the cgroup
//! 1.3 ms and at most 2.2 ms. The failover paid that on every promotion. With
//! `CLONE_INTO_CGROUP` the child is created in the cgroup, so nothing migrates. Neither
//! std, tokio nor nix can spawn with it, and no well-kept crate does the whole job (fork
//! into a cgroup, stdio, exec errors, reaping through a pidfd), so it is written here, as
//! small as it can be.
//!
//! When the kernel refuses clone3 or the flag (older kernels, or a container whose
//! seccomp profile answers ENOSYS), the caller falls back to the fork-and-move path, which
//! also gives the real reason of any other failure.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use nix::fcntl::OFlag;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// `struct clone_args` of `linux/sched.h`, up to `cgroup` (`CLONE_ARGS_SIZE_VER2`). The
/// libc crate does not define it for glibc targets.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` of `linux/sched.h` (a 64-bit flag, only clone3 takes it).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// What to start: all of it made before the clone, because the child may only make
/// async-signal-safe system calls until it execs.
pub(super) struct Plan {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cgroup: OwnedFd,
}

impl Plan {
    /// `argv[0]` resolved like `execvp` would (through `PATH` when it has no slash), the
    /// environment as given, and the cgroup directory opened. `None` when the program is
    /// not found on `PATH` or an argument holds a NUL byte: the caller's fork path then
    /// reports the error in std's words.
    pub(super) fn new(
        argv: &[String],
        env: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
        cgroup_dir: &Path,
    ) -> io::Result<Option<Plan>> {
        let Some(program) = argv.first().and_then(|p| resolve(p)) else {
            return Ok(None);
        };
        let Ok(program) = CString::new(program.as_os_str().as_bytes()) else {
            return Ok(None);
        };
        let Ok(argv) = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
        else {
            return Ok(None);
        };
        let Ok(envp) = env
            .into_iter()
            .map(|(mut k, v)| {
                k.push(b'=');
                k.extend_from_slice(&v);
                CString::new(k)
            })
            .collect::<Result<Vec<_>, _>>()
        else {
            return Ok(None);
        };
        let cgroup = nix::fcntl::open(
            cgroup_dir,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(io::Error::from)?;
        Ok(Some(Plan {
            program,
            argv,
            envp,
            cgroup,
        }))
    }
}

/// Why [`spawn`] did not start the service.
pub(super) enum Error {
    /// clone3 failed: the caller tries the fork-and-move path, which tells why (or works
    /// where this kernel lacks clone3 or `CLONE_INTO_CGROUP`). `unsupported`: the kernel
    /// or a seccomp filter does not offer it at all; no use trying again.
    Clone { error: io::Error, unsupported: bool },
    /// The child was created but could not exec (or set itself up before exec).
    Exec(io::Error),
    /// Making the pipes, or registering them with the runtime, failed.
    Io(io::Error),
}

/// A service started by [`spawn`]: its pid, a pidfd to learn of its exit, and the read
/// ends of its stdout and stderr.
pub(super) struct Child {
    pub pid: u32,
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

impl Child {
    /// Waits for the service's main process to exit and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let Some(pidfd) = &self.pidfd else {
            return Err(io::Error::other("the service was already reaped"));
        };
        let status = wait_for_exit(self.pid, pidfd).await?;
        self.status = Some(status);
        self.pidfd = None;
        Ok(status)
    }
}

impl Drop for Child {
    /// A child dropped before it was reaped is reaped by a task, so that it leaves no
    /// zombie (the same promise tokio's `Child` makes). The task holds no `Child`, so
    /// dropping it (a runtime shutting down) ends there.
    fn drop(&mut self) {
        let (Some(pidfd), Ok(handle)) = (self.pidfd.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let pid = self.pid;
        handle.spawn(async move {
            let _ = wait_for_exit(pid, &pidfd).await;
        });
    }
}

/// Waits until the pidfd says the process exited, then reaps it.
async fn wait_for_exit(pid: u32, pidfd: &AsyncFd<OwnedFd>) -> io::Result<ExitStatus> {
    loop {
        let mut ready = pidfd.readable().await?;
        match reap(pid, libc::WNOHANG)? {
            Some(status) => return Ok(status),
            None => ready.clear_ready(),
        }
    }
}

/// `waitpid(pid, flags)`: `None` while it runs (with `WNOHANG`).
fn reap(pid: u32, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes one int through a pointer to a live local.
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, flags) };
        if rc == 0 {
            return Ok(None);
        }
        if rc > 0 {
            return Ok(Some(ExitStatus::from_raw(status)));
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Starts `plan` in its cgroup, in a process group of its own, stdin `/dev/null`, stdout
/// and stderr piped, SIGKILL as its parent-death signal (`parent` is warden's pid), signal
/// mask empty and SIGPIPE at its default. Returns once the child has exec'd (or failed
/// to). Must run inside the tokio runtime (the pidfd and pipes are registered with it).
pub(super) fn spawn(plan: &Plan, parent: libc::pid_t) -> Result<Child, Error> {
    let pipe = || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::Io(io::Error::from(e)));
    let (out_read, out_write) = pipe()?;
    let (err_read, err_write) = pipe()?;
    let (report_read, report_write) = pipe()?;
    let null = nix::fcntl::open(
        "/dev/null",
        OFlag::O_RDWR | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| Error::Io(io::Error::from(e)))?;

    let argv: Vec<*const libc::c_char> = plan
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = plan
        .envp
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let fds = ChildFds {
        null: null.as_raw_fd(),
        stdout: out_write.as_raw_fd(),
        stderr: err_write.as_raw_fd(),
        report: report_write.as_raw_fd(),
    };

    let mut pidfd: libc::c_int = -1;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP | libc::CLONE_PIDFD as u64,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: plan.cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM is a fork: the child gets a copy of this address
    // space, in which `plan`, `argv`, `envp` and `fds` stay valid. The child runs only
    // `child_exec`, which makes async-signal-safe system calls and never returns. The
    // kernel writes the pidfd through a pointer to a live local.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if rc == 0 {
        // SAFETY: see above; in the child.
        unsafe { child_exec(&plan.program, &argv, &envp, &fds, parent) }
    }
    if rc < 0 {
        let error = io::Error::last_os_error();
        let unsupported = matches!(
            error.raw_os_error(),
            Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL)
        );
        return Err(Error::Clone { error, unsupported });
    }
    let pid = rc as u32;
    // SAFETY: the kernel returned a new descriptor, owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop((out_write, err_write, report_write, null));

    // The report pipe is close-on-exec: EOF means the exec happened, four bytes are the
    // errno of the step that failed.
    let mut code = [0u8; 4];
    let mut got = 0;
    while got < code.len() {
        match nix::unistd::read(&report_read, &mut code[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    if got == code.len() {
        let _ = reap(pid, 0);
        return Err(Error::Exec(io::Error::from_raw_os_error(
            i32::from_ne_bytes(code),
        )));
    }

    let receiver = |fd: OwnedFd| pipe::Receiver::from_owned_fd(fd).map_err(Error::Io);
    // SAFETY: an OwnedFd is a valid open descriptor, owned by the AsyncFd from here on,
    // and its as_raw_fd never changes.
    let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1);
    let mut child = Child {
        pid,
        pidfd: None,
        status: None,
        stdout: None,
        stderr: None,
    };
    match pidfd {
        Ok(pidfd) => child.pidfd = Some(pidfd),
        Err(e) => {
            // Cannot learn of its exit: it must not run unwatched.
            kill_group(pid);
            let _ = reap(pid, 0);
            return Err(Error::Io(e));
        }
    }
    match (receiver(out_read), receiver(err_read)) {
        (Ok(out), Ok(err)) => {
            child.stdout = Some(out);
            child.stderr = Some(err);
            Ok(child)
        }
        (Err(e), _) | (_, Err(e)) => {
            // Its output would have no reader: it must not run. Dropping `child` reaps it.
            kill_group(pid);
            Err(e)
        }
    }
}

fn kill_group(pid: u32) {
    // SAFETY: kill(2) has no pointers; a negative pid names the process group.
    unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
}

/// Descriptors the child arranges before exec.
struct ChildFds {
    null: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    report: RawFd,
}

/// In the child: set up and exec, or report the errno and exit 127.
///
/// # Safety
/// Only in the child of a fork-like clone: it makes plain system calls and ends the
/// process.
unsafe fn child_exec(
    program: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    fds: &ChildFds,
    parent: libc::pid_t,
) -> ! {
    // SAFETY: see the function's contract.
    unsafe {
        let fail = |fds: &ChildFds| -> ! {
            let code = io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
                .to_ne_bytes();
            libc::write(fds.report, code.as_ptr().cast(), code.len());
            libc::_exit(127)
        };
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) == -1 {
            fail(fds);
        }
        // Rust ignores SIGPIPE in its own process; an ignored signal stays ignored across
        // exec, and the service must get the default (std's Command resets it too).
        if libc::signal(libc::SIGPIPE, libc::SIG_DFL) == libc::SIG_ERR {
            fail(fds);
        }
        for (from, to) in [(fds.null, 0), (fds.stdout, 1), (fds.stderr, 2)] {
            if libc::dup2(from, to) == -1 {
                fail(fds);
            }
        }
        super::close_inherited_on_exec();
        if libc::setpgid(0, 0) == -1 {
            fail(fds);
        }
        if super::set_parent_death_signal(parent).is_err() {
            fail(fds);
        }
        libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        fail(fds)
    }
}

/// `program` as `execvp` finds it: as given when it has a slash, else the first
/// executable regular file of that name on `PATH`.
fn resolve(program: &str) -> Option<PathBuf> {
    if program.is_empty() {
        return None;
    }
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(OsStr::new(program)))
        .find(|candidate| is_executable_file(candidate))
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
