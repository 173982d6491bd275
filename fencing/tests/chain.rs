//! The chain: order, `nodes` binding, an ssh method that cannot work here, dry-run plans.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use warden_fencing::{
    FenceChain, FenceMethod, Outcome, ScriptFence, ScriptProtocol, SshFence, Target,
};

fn script(command: &[&str], nodes: Option<&[&str]>) -> FenceMethod {
    FenceMethod::Script(ScriptFence {
        command: command.iter().map(|s| s.to_string()).collect(),
        protocol: ScriptProtocol::Env,
        options: BTreeMap::new(),
        timeout: Duration::from_secs(10),
        nodes: nodes.map(|n| n.iter().map(|s| s.to_string()).collect()),
    })
}

/// A script that records that it ran by creating `marker`, then exits 0.
fn touch(marker: &Path, nodes: Option<&[&str]>) -> FenceMethod {
    script(
        &["/bin/sh", "-c", &format!("touch {}", marker.display())],
        nodes,
    )
}

/// An ssh method whose known_hosts file does not exist: it fails before touching the
/// network.
fn ssh() -> FenceMethod {
    FenceMethod::Ssh(SshFence {
        user: "warden".into(),
        port: 22,
        identity_file: "/etc/warden/ssh/id_ed25519".into(),
        known_hosts: "/etc/warden/ssh/known_hosts".into(),
        timeout: Duration::from_secs(15),
        command: None,
        nodes: None,
    })
}

#[tokio::test]
async fn chain_stops_at_the_first_method_that_fences() {
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never");
    let chain = FenceChain::new(
        vec![
            ssh(),
            script(&["/bin/false"], None),
            script(&["/bin/true"], None),
            touch(&never, None),
        ],
        ctx(),
    );
    let report = chain.fence(&local_target()).await;

    assert_eq!(report.fenced_by(), Some("script:true"));
    let methods: Vec<&str> = report.attempts.iter().map(|a| a.method.as_str()).collect();
    assert_eq!(methods, ["ssh", "script:false", "script:true"]);
    assert!(
        matches!(&report.attempts[0].outcome,
            Outcome::Failed(r) if r.starts_with("cannot read known_hosts /etc/warden/ssh/known_hosts")),
        "{:?}",
        report.attempts[0]
    );
    assert!(matches!(report.attempts[1].outcome, Outcome::Failed(_)));
    assert!(!never.exists(), "a method after the winner ran");
    let summary = report.summary();
    assert!(
        summary.starts_with("fenced by script:true: ssh: failed (cannot read known_hosts"),
        "{summary}"
    );
    assert!(
        summary.contains("script:false: failed (/bin/false exited with status 1)"),
        "{summary}"
    );
}

#[tokio::test]
async fn method_bound_to_other_nodes_does_not_apply_and_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let chain = FenceChain::new(vec![touch(&marker, Some(&["rm3"]))], ctx());

    let report = chain.fence(&local_target()).await;
    assert!(
        matches!(&report.attempts[0].outcome, Outcome::NotApplicable(r) if r.contains("rm1 is not in its nodes list [rm3]")),
        "{}",
        report.summary()
    );
    assert!(!report.is_fenced());
    assert!(!marker.exists(), "a method outside its nodes list ran");

    // An unreadable breadcrumb has no node id: a bound method cannot know it applies.
    let unknown = Target {
        node_id: None,
        ..local_target()
    };
    let report = chain.fence(&unknown).await;
    assert!(
        matches!(report.attempts[0].outcome, Outcome::NotApplicable(_)),
        "{}",
        report.summary()
    );
    assert!(!marker.exists());
}

#[tokio::test]
async fn method_bound_to_the_target_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let chain = FenceChain::new(vec![touch(&marker, Some(&["rm3", "rm1"]))], ctx());
    let report = chain.fence(&local_target()).await;
    assert!(report.is_fenced(), "{}", report.summary());
    assert!(marker.exists());
}

#[tokio::test]
async fn chain_where_nothing_fences_reports_every_reason() {
    let chain = FenceChain::new(vec![ssh(), script(&["/bin/false"], Some(&["rm9"]))], ctx());
    let report = chain.fence(&local_target()).await;
    assert!(!report.is_fenced());
    assert_eq!(report.fenced_by(), None);
    let summary = report.summary();
    assert!(summary.starts_with("NOT fenced: ssh: failed"), "{summary}");
    assert!(
        summary.contains("script:false: not applicable (rm1 is not in its nodes list [rm9])"),
        "{summary}"
    );
}

#[test]
fn plan_describes_every_method_without_running_any() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let chain = FenceChain::new(
        vec![ssh(), touch(&marker, None), touch(&marker, Some(&["rm3"]))],
        ctx(),
    );
    let plan = chain.plan(&local_target());
    assert_eq!(plan.len(), 3, "{plan:?}");
    assert!(
        plan[0].starts_with("ssh: would connect to warden@rm1.test:22, check its host key against /etc/warden/ssh/known_hosts"),
        "{plan:?}"
    );
    assert!(plan[1].starts_with("script:sh: would run"), "{plan:?}");
    assert!(plan[1].contains("WARDEN_TARGET_NODE_ID=rm1"), "{plan:?}");
    assert!(plan[2].starts_with("script:sh: not applicable"), "{plan:?}");
    assert!(!marker.exists(), "plan ran a method");
}
