//! The example script `scripts/fence-by-port` against a real sshd started here, on
//! 127.0.0.1, with its own host key, client key and known_hosts.

mod common;

use common::sshd::{listener, Sshd};
use common::*;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;
use warden_fencing::{FenceChain, FenceMethod, Outcome, ScriptFence, ScriptProtocol, Target};

/// `scripts/fence-by-port` against `sshd`, trusting the host keys in `known_hosts`.
fn fence_method(sshd: &Sshd, known_hosts: &Path) -> FenceMethod {
    FenceMethod::Script(ScriptFence {
        command: vec![
            format!("{}/scripts/fence-by-port", env!("CARGO_MANIFEST_DIR")),
            sshd.user.clone(),
            sshd.path("client_key").display().to_string(),
            known_hosts.display().to_string(),
            sshd.port.to_string(),
        ],
        protocol: ScriptProtocol::Env,
        options: BTreeMap::new(),
        timeout: Duration::from_secs(20),
        nodes: None,
    })
}

fn target(port: u16) -> Target {
    Target {
        host: Some("127.0.0.1".into()),
        port: Some(port),
        ..local_target()
    }
}

#[tokio::test]
async fn fence_by_port_kills_the_listener_over_ssh_and_verifies() {
    require("/usr/bin/fuser", "psmisc");
    let sshd = Sshd::start();
    let (mut service, port) = listener();

    let chain = FenceChain::new(vec![fence_method(&sshd, &sshd.path("known_hosts"))], ctx());
    let report = chain.fence(&target(port)).await;

    assert!(report.is_fenced(), "{}", report.summary());
    assert_eq!(service.reap().signal(), Some(libc::SIGKILL));
    assert!(warden_fencing::process::listeners_on_port(port).is_empty());
}

#[tokio::test]
async fn fence_by_port_fails_on_an_unknown_host_key() {
    let sshd = Sshd::start();
    let (mut service, port) = listener();

    let chain = FenceChain::new(
        vec![fence_method(&sshd, &sshd.path("empty_known_hosts"))],
        ctx(),
    );
    let report = chain.fence(&target(port)).await;

    match &report.attempts[0].outcome {
        Outcome::Failed(r) => assert!(r.contains("Host key verification failed"), "{r}"),
        other => panic!("expected failed, got {other:?}"),
    }
    assert!(
        service.alive(),
        "the service was killed without a trusted host key"
    );
}
