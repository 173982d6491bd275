//! The README's first command, `scripts/demo.sh`, and `scripts/demo.sh redis`, run as a
//! new user runs them (on the binaries of this build): each must end with exit 0, having
//! checked what it shows (a new active after each fault, the old active's service fenced,
//! epochs that only grow), and leave nothing behind.

mod common;

use common::redis::check_redis_installed;
use common::*;
use std::path::Path;
use std::process::Output;

/// Runs `scripts/demo.sh args`; a demo still running after 4 minutes gets SIGTERM, so its
/// own clean-up runs, and the test fails with what it printed.
fn demo(args: &[&str]) -> Output {
    let bin_dir = Path::new(WARDEN).parent().expect("the binaries' dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo.sh");
    let mut argv = vec![
        format!("WARDEN_BIN_DIR={}", bin_dir.display()),
        "timeout".into(),
        "-k".into(),
        "20".into(),
        "240".into(),
        script.display().to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    run_bounded("env", &argv, secs(300))
}

/// The scratch dir the demo named ("configs and logs go to DIR (...").
fn scratch_dir(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("configs and logs go to "))
        .unwrap_or_else(|| panic!("the demo did not name its dir:\n{stdout}"));
    line.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The dir is gone, and no process it started still runs (their command lines name it).
fn assert_cleaned_up(dir: &str) {
    assert!(!Path::new(dir).exists(), "{dir} is still there");
    let left = processes_with(dir);
    assert!(left.is_empty(), "still running: {left:?}");
}

#[test]
fn the_demo_fails_over_twice_with_fencing_and_cleans_up() {
    check_zookeeper_installed();
    let out = demo(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout.contains("still running? no: it was fenced"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        stdout.matches("new active: ").count(),
        2,
        "{}",
        describe(&out)
    );
    assert_cleaned_up(&scratch_dir(&stdout));
}

#[test]
fn the_redis_demo_switches_over_fences_and_cleans_up() {
    check_zookeeper_installed();
    check_redis_installed();
    let out = demo(&["redis"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout.contains("new active: n2") && stdout.contains("n1 replicates n2: role:slave"),
        "{}",
        describe(&out)
    );
    assert!(
        stdout.contains("n2's Redis still running? no: it was fenced"),
        "{}",
        describe(&out)
    );
    assert_cleaned_up(&scratch_dir(&stdout));
}
