//! A FUSE mount that never answers: a process that reads it waits in the kernel, and once
//! a signal kills it, it waits uninterruptibly (state `D`, in `request_wait_answer`) until
//! the mount is let go. A service stuck on a hung NFS or FUSE mount, for real: SIGKILL
//! cannot end it, and a stop cannot be verified.
//!
//! Hand-written because it is small: the kernel's FUSE protocol needs an answer to
//! `INIT` only; every later request is read and never answered. Letting go closes the
//! device, which aborts the connection: every waiting request fails and its process ends.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

const FUSE_INIT: u32 = 26;

pub struct HungMount {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl HungMount {
    /// Mounts it on a new directory `hung` in `dir`. Needs root and `/dev/fuse`.
    pub fn new(dir: &Path) -> HungMount {
        let path = dir.join("hung");
        std::fs::create_dir_all(&path).expect("create the mount point");
        let dev = CString::new("/dev/fuse").unwrap();
        // SAFETY: a plain open(2) of a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                dev.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        assert!(
            fd >= 0,
            "cannot open /dev/fuse ({}): this test needs FUSE as root (`modprobe fuse`)",
            std::io::Error::last_os_error()
        );
        // SAFETY: `fd` was just opened and is owned here only.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let target = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let opts = CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            fd.as_raw_fd()
        ))
        .unwrap();
        let (source, fstype) = (
            CString::new("warden-hung").unwrap(),
            CString::new("fuse").unwrap(),
        );
        // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                opts.as_ptr().cast(),
            )
        };
        assert!(
            rc == 0,
            "cannot mount FUSE on {} ({}): this test needs FUSE as root",
            path.display(),
            std::io::Error::last_os_error()
        );
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let stop = stop.clone();
            std::thread::spawn(move || serve(fd, &stop))
        };
        HungMount {
            path,
            stop,
            reader: Some(reader),
        }
    }

    /// A file on the mount: reading it hangs.
    pub fn file(&self) -> PathBuf {
        self.path.join("x")
    }

    /// Lets go: every process waiting on the mount ends, and the mount goes.
    pub fn release(&mut self) {
        let Some(reader) = self.reader.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        let _ = reader.join();
        let target = CString::new(self.path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: umount2(2) of a NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        self.release();
    }
}

/// Answers `INIT` and holds every other request, until `stop`; then the device closes.
fn serve(fd: OwnedFd, stop: &AtomicBool) {
    let mut buf = vec![0u8; (1 << 20) + 4096];
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 50) } <= 0 {
            continue;
        }
        // SAFETY: reads into a buffer of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 40 {
            continue;
        }
        let u32_at = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().unwrap());
        let (opcode, unique) = (
            u32_at(4),
            u64::from_le_bytes(buf[8..16].try_into().unwrap()),
        );
        if opcode != FUSE_INIT {
            continue; // held: never answered
        }
        // fuse_out_header, then fuse_init_out (7.31: 64 bytes) with max_readahead as asked.
        let mut out = Vec::with_capacity(80);
        out.extend_from_slice(&80u32.to_le_bytes());
        out.extend_from_slice(&0i32.to_le_bytes());
        out.extend_from_slice(&unique.to_le_bytes());
        out.extend_from_slice(&7u32.to_le_bytes());
        out.extend_from_slice(&31u32.to_le_bytes());
        out.extend_from_slice(&u32_at(48).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes()); // flags
        out.extend_from_slice(&16u16.to_le_bytes()); // max_background
        out.extend_from_slice(&12u16.to_le_bytes()); // congestion_threshold
        out.extend_from_slice(&65536u32.to_le_bytes()); // max_write
        out.extend_from_slice(&1u32.to_le_bytes()); // time_gran
        out.resize(80, 0);
        // SAFETY: writes a buffer of its length.
        unsafe { libc::write(fd.as_raw_fd(), out.as_ptr().cast(), out.len()) };
    }
}
