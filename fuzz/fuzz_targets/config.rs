//! The config loader on arbitrary input: `warden::config::parse` on any text (bytes that
//! are not UTF-8 as `String::from_utf8_lossy` makes them), and `warden::config::load` on
//! the raw bytes as a file where that tells something `parse` cannot (not UTF-8; the
//! file checks of a config that parses).
//!
//! Beyond "no panic": a config that parses keeps every duration inside the range its key
//! publishes (issue 11: out-of-range durations passed and later panicked), can be shown by
//! `check-config` (`warnings`, `render_masked`), and renders back to an equal config when
//! no secret was masked, as `render_masked` promises.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden::config::{self, Config, DurationRange};
use warden_fencing::FenceMethod;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = config::parse(&text, Path::new("fuzz.toml"));
    let utf8 = std::str::from_utf8(data).is_ok();
    if let Ok(cfg) = &parsed {
        accepted(cfg);
    }
    let plain = parsed.as_ref().map_or(true, names_only_plain_files);
    if !utf8 || (parsed.is_ok() && plain) {
        let loaded = load(data);
        if !utf8 {
            assert!(loaded.is_err(), "load accepted a config that is not UTF-8");
        } else if let (Ok(loaded), Ok(parsed)) = (&loaded, &parsed) {
            assert_eq!(loaded, parsed, "load and parse disagree on the same text");
        }
    }
});

/// What must hold of every config that `parse` accepts.
fn accepted(cfg: &Config) {
    let within = |key: &str, d: Duration, range: &DurationRange| {
        assert!(
            range.min <= d && d <= range.max,
            "{key} = {d:?} accepted, outside {:?}..={:?}",
            range.min,
            range.max
        );
    };
    within(
        "coordination.zookeeper.session_timeout",
        cfg.coordination.zookeeper.session_timeout,
        &config::SESSION_TIMEOUT_RANGE,
    );
    within(
        "coordination.zookeeper.connect_timeout",
        cfg.coordination.zookeeper.connect_timeout,
        &config::CONNECT_TIMEOUT_RANGE,
    );
    within(
        "election.rejoin_delay",
        cfg.election.rejoin_delay,
        &config::REJOIN_DELAY_RANGE,
    );
    within(
        "service.stop_timeout",
        cfg.service.stop_timeout,
        &config::GRACEFUL_STOP_RANGE,
    );
    within(
        "service.hook_timeout",
        cfg.service.hook_timeout,
        &config::GRACEFUL_STOP_RANGE,
    );
    within(
        "health.interval",
        cfg.health.interval,
        &config::HEALTH_INTERVAL_RANGE,
    );
    within(
        "health.timeout",
        cfg.health.timeout,
        &config::HEALTH_TIMEOUT_RANGE,
    );
    within(
        "health.start_grace",
        cfg.health.start_grace,
        &config::START_GRACE_RANGE,
    );
    for method in &cfg.fence {
        within(
            "fence.timeout",
            method.timeout(),
            &config::FENCE_TIMEOUT_RANGE,
        );
    }
    // Ids go into znode paths, `fence --confirm NODE` and fence agents' `plug=` lines.
    let mut ids = vec![&cfg.cluster.name, &cfg.cluster.node_id];
    // Signals that cannot end a process (issue 11: SIGSTOP and SIGCONT were accepted).
    let mut signals = vec![cfg.service.stop_signal.0];
    for method in &cfg.fence {
        ids.extend(method.nodes().unwrap_or_default());
        if let FenceMethod::Signal(m) = method {
            signals.push(m.signal.0);
        }
    }
    for id in ids {
        assert!(config::is_valid_id(id), "id {id:?} accepted");
    }
    for signal in signals {
        let name = signal.as_str();
        let harmless = [
            "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGCONT", "SIGCHLD",
        ];
        assert!(
            !harmless.contains(&name),
            "{name} accepted to end a process"
        );
    }

    // What the daemon derives from it at start.
    let _ = (cfg.demote_grace(), cfg.renewal_interval(), cfg.lease());

    // What `check-config` prints.
    let _ = cfg.warnings();
    let rendered = cfg.render_masked();
    if !rendered.contains("****") {
        match config::parse(&rendered, Path::new("rendered.toml")) {
            Ok(again) => assert_eq!(&again, cfg, "the rendered config parses to another"),
            Err(e) => panic!("the rendered config does not parse: {e}\n{rendered}"),
        }
    }
}

/// Whether the files `load` reads for this config (auth file, ssh identity and known_hosts,
/// health CA file) are outside `/proc`, `/sys` and `/dev`: a fuzzed config may name `/proc/kmsg`, a regular
/// file of mode 0400 that the loader would read, consuming the host's kernel log.
fn names_only_plain_files(cfg: &Config) -> bool {
    let mut files: Vec<&Path> = cfg
        .coordination
        .zookeeper
        .auth_file
        .iter()
        .map(PathBuf::as_path)
        .collect();
    files.extend(cfg.health.ca_file.as_deref());
    for method in &cfg.fence {
        if let FenceMethod::Ssh(m) = method {
            files.push(&m.identity_file);
            files.push(&m.known_hosts);
        }
    }
    files.iter().all(|file| match std::fs::canonicalize(file) {
        Ok(real) => !["/proc", "/sys", "/dev"]
            .iter()
            .any(|d| real.starts_with(d)),
        Err(_) => true,
    })
}

/// `config::load` on `data` as a file: one file per fuzzing process, removed after.
fn load(data: &[u8]) -> Result<Config, config::ConfigError> {
    let path: PathBuf =
        std::env::temp_dir().join(format!("warden-fuzz-config-{}.toml", std::process::id()));
    std::fs::write(&path, data).expect("write the fuzz input to a temporary file");
    let loaded = config::load(&path);
    let _ = std::fs::remove_file(&path);
    loaded
}
