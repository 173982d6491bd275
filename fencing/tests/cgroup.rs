//! The service's cgroup in fencing (SPEC §5, §6): a helper that left the service's
//! process group (`setsid()` after a double fork) is still in its cgroup, and `signal`
//! kills it there through `cgroup.kill`. Real cgroups below the hierarchy's root, created
//! and removed by each test (the tests run as root).

mod common;

use common::*;
use nix::sys::signal::Signal;
use std::time::Duration;
use warden_fencing::process;
use warden_fencing::{FenceChain, FenceMethod, Outcome, SignalFence, SignalName, Target};

fn sigkill_chain() -> FenceChain {
    FenceChain::new(
        vec![FenceMethod::Signal(SignalFence {
            signal: SignalName(Signal::SIGKILL),
            timeout: Duration::from_secs(5),
            nodes: None,
        })],
        ctx(),
    )
}

/// A service in `cgroup`: a shell leading its own group that enters the cgroup, then
/// starts a helper that double-forks and calls `setsid()` (so it is in neither the
/// service's process group nor its session, and its parent is gone), then sleeps.
/// Returns the service and the helper's pid.
fn service_with_escaped_helper(cgroup: &TestCgroup) -> (Group, u32) {
    let dir = tempfile::tempdir().unwrap();
    let helper_pidfile = dir.path().join("helper.pid");
    let service = Group::spawn(&format!(
        "{}; ( setsid sleep 1000 & echo $! > {} ); exec sleep 1000",
        cgroup.enter(),
        helper_pidfile.display()
    ));
    let helper: u32 = wait_for("the helper's pidfile", || {
        std::fs::read_to_string(&helper_pidfile)
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    // setsid(1) execs sleep in the same process once it has its own session.
    wait_for("the helper to lead its own session and group", || {
        let s = process::stat(helper)?;
        (s.pgid == helper
            && std::fs::read_to_string(format!("/proc/{helper}/comm"))
                .ok()?
                .trim()
                == "sleep")
            .then_some(())
    });
    assert_ne!(process::pgid(helper), Some(service.pid));
    wait_for("the service shell to exec its sleep", || {
        (std::fs::read_to_string(format!("/proc/{}/comm", service.pid))
            .ok()?
            .trim()
            == "sleep")
            .then_some(())
    });
    (service, helper)
}

fn record(service: &Group, warden: &Group, cgroup: Option<String>) -> Target {
    Target {
        pid: Some(warden.pid),
        start_time: Some(warden.start_time()),
        service_pid: Some(service.pid),
        service_pgid: Some(service.pid),
        service_start_time: Some(service.start_time()),
        service_cgroup: cgroup,
        ..local_target()
    }
}

#[tokio::test]
async fn signal_kills_a_setsid_double_forked_helper_through_the_service_cgroup() {
    let cgroup = TestCgroup::create("escaped-helper");
    let (mut service, helper) = service_with_escaped_helper(&cgroup);
    let mut warden = Group::spawn("exec sleep 1000");
    let target = record(&service, &warden, Some(cgroup.relative()));

    let report = sigkill_chain().fence(&target).await;

    assert!(report.is_fenced(), "{}", report.summary());
    // Verified before the answer: nothing of the cgroup remains, the helper included.
    assert!(
        !cgroup.is_populated(),
        "the service cgroup still holds processes"
    );
    assert!(
        !process::is_running(helper, None),
        "the setsid helper survived"
    );
    assert!(!service.alive() && !warden.alive());
}

#[tokio::test]
async fn without_the_cgroup_in_the_record_a_setsid_helper_survives_fencing() {
    // Why records carry the cgroup: the process group alone misses the escapee, and the
    // fence still looks verified.
    let cgroup = TestCgroup::create("no-cgroup-recorded");
    let (mut service, helper) = service_with_escaped_helper(&cgroup);
    let warden = Group::spawn("exec sleep 1000");
    let target = record(&service, &warden, None);

    let report = sigkill_chain().fence(&target).await;

    assert!(report.is_fenced(), "{}", report.summary());
    assert!(!service.alive());
    assert!(
        process::is_running(helper, None),
        "the helper is out of the service's group: only its cgroup finds it"
    );
    // TestCgroup's drop kills it.
}

#[tokio::test]
async fn a_recorded_cgroup_that_is_empty_or_removed_counts_as_gone() {
    let warden = Group::spawn("exec sleep 1000");
    let empty = TestCgroup::create("empty");
    for cgroup in [
        empty.relative(),
        format!("{}-never-created", empty.relative()),
    ] {
        let target = Target {
            pid: Some(warden.pid),
            start_time: Some(warden.start_time()),
            service_cgroup: Some(cgroup.clone()),
            epoch: Some(42),
            ..local_target()
        };
        let plan = sigkill_chain().plan(&target);
        assert!(
            plan[0].contains(&format!("service cgroup {cgroup}")),
            "{plan:?}"
        );
        let report = sigkill_chain().fence(&target).await;
        assert!(report.is_fenced(), "{}", report.summary());
    }
}

#[tokio::test]
async fn signal_plan_names_the_cgroup_and_its_processes_without_killing_them() {
    let cgroup = TestCgroup::create("plan");
    let (mut service, helper) = service_with_escaped_helper(&cgroup);
    let warden = Group::spawn("exec sleep 1000");
    let target = record(&service, &warden, Some(cgroup.relative()));

    let plan = sigkill_chain().plan(&target);

    let line = &plan[0];
    assert!(
        line.contains(&format!(
            "would kill every process of service cgroup {}",
            cgroup.relative()
        )),
        "{line}"
    );
    assert!(line.contains(&helper.to_string()), "{line}");
    assert!(line.contains("cgroup.kill"), "{line}");
    assert!(service.alive());
    assert!(process::is_running(helper, None));
}

#[tokio::test]
async fn a_leaderless_group_outside_the_recorded_cgroup_is_not_the_service() {
    // The service's cgroup is empty (the service ended); group `pgid` has a member left
    // that is not in it: not the service's, so it is left alone, and the fence holds.
    let cgroup = TestCgroup::create("leaderless");
    let mut leader = Group::spawn("sleep 1000 & exit 0");
    let leader_start = leader.start_time();
    assert!(leader.reap().success());
    let leftovers = wait_for("the leftover to be alone in the group", || {
        let m = process::group_members(leader.pid);
        (m.len() == 1).then_some(m)
    });
    let warden = Group::spawn("exec sleep 1000");
    let target = Target {
        pid: Some(warden.pid),
        start_time: Some(warden.start_time()),
        service_pid: Some(leader.pid),
        service_pgid: Some(leader.pid),
        service_start_time: Some(leader_start),
        service_cgroup: Some(cgroup.relative()),
        ..local_target()
    };
    let plan = sigkill_chain().plan(&target);
    assert!(plan[0].contains("outside the service's cgroup"), "{plan:?}");
    let report = sigkill_chain().fence(&target).await;
    assert!(report.is_fenced(), "{}", report.summary());
    assert!(
        process::is_running(leftovers[0], None),
        "a process outside the cgroup was killed"
    );
}

#[tokio::test]
async fn a_recorded_cgroup_that_holds_the_fencing_process_is_refused() {
    // The root cgroup holds every process; a record naming it must not kill the host.
    let warden = Group::spawn("exec sleep 1000");
    let own = warden_fencing::cgroup::own().expect("this process's cgroup");
    for cgroup in ["/".to_string(), own] {
        let target = Target {
            pid: Some(warden.pid),
            start_time: Some(warden.start_time()),
            service_cgroup: Some(cgroup.clone()),
            epoch: None,
            ..local_target()
        };
        let report = sigkill_chain().fence(&target).await;
        assert!(
            matches!(&report.attempts[0].outcome, Outcome::Failed(r) if r.contains("refusing")),
            "{cgroup}: {}",
            report.summary()
        );
    }
}
