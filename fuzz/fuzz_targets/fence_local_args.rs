//! `warden fence-local`'s arguments on arbitrary input: they arrive over ssh, written by
//! another node from a breadcrumb anybody could have written. The input is one argument
//! per line (`\n`-separated, bytes that need not be UTF-8), parsed and validated by
//! `FenceLocalArgs::parse_from_args`, the same clap definition and checks that
//! `warden fence-local` runs.
//!
//! Beyond "no panic": what is accepted is within the bounds fence-local promises
//! (`--timeout` at most `FENCE_LOCAL_MAX_TIMEOUT`, a boot id that parses, no pid
//! namespace 0), and the ssh method's argument list for the accepted record
//! (`warden_fencing::fence_local_args`) parses back to the same record, so both ends
//! agree on every record either can hold.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;
use warden::ops::fence_local::FenceLocalArgs;
use warden_fencing::{fence_local_args, process, FENCE_LOCAL_MAX_TIMEOUT};

fuzz_target!(|data: &[u8]| {
    let argv: Vec<OsString> = if data.is_empty() {
        Vec::new()
    } else {
        data.split(|b| *b == b'\n')
            .map(|arg| OsString::from_vec(arg.to_vec()))
            .collect()
    };
    let Ok(args) = FenceLocalArgs::parse_from_args(argv) else {
        return;
    };
    assert!(
        args.timeout <= FENCE_LOCAL_MAX_TIMEOUT,
        "--timeout {:?} accepted, over {FENCE_LOCAL_MAX_TIMEOUT:?}",
        args.timeout
    );
    assert!(process::parse_boot_id(&args.boot_id).is_some());
    assert_ne!(args.pid_ns, Some(0));

    let target = args.target();
    let sent = fence_local_args(&target, args.timeout);
    match FenceLocalArgs::parse_from_args(&sent) {
        Ok(again) => {
            assert_eq!(again.target(), target, "{sent:?}");
            // The ssh method writes whole milliseconds.
            let ms = Duration::from_millis(args.timeout.as_millis() as u64);
            assert_eq!(again.timeout, ms, "{sent:?}");
        }
        Err(e) => {
            panic!("fence-local refuses what the ssh method sends for {target:?}: {sent:?}: {e}")
        }
    }
});
