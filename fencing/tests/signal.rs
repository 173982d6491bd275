//! `kind = "signal"` against real processes on this host.

mod common;

use common::*;
use nix::sys::signal::Signal;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;
use warden_fencing::process;
use warden_fencing::{FenceChain, FenceMethod, Outcome, SignalFence, SignalName};

fn signal_chain(signal: Signal, timeout: Duration) -> FenceChain {
    FenceChain::new(
        vec![FenceMethod::Signal(SignalFence {
            signal: SignalName(signal),
            timeout,
            nodes: None,
        })],
        ctx(),
    )
}

fn sigkill_chain() -> FenceChain {
    signal_chain(Signal::SIGKILL, Duration::from_secs(5))
}

/// A stand-in for the old warden process, recorded in every target that needs one.
fn old_warden() -> Group {
    Group::spawn("exec sleep 1000")
}

fn with_warden(target: warden_fencing::Target, warden: &Group) -> warden_fencing::Target {
    warden_fencing::Target {
        pid: Some(warden.pid),
        start_time: Some(warden.start_time()),
        ..target
    }
}

/// The record of an incarnation whose service is `service` (leading its own group) and
/// whose warden is `warden`.
fn incarnation(service: &Group, warden: &Group) -> warden_fencing::Target {
    with_warden(
        warden_fencing::Target {
            service_pid: Some(service.pid),
            service_pgid: Some(service.pid),
            service_start_time: Some(service.start_time()),
            ..local_target()
        },
        warden,
    )
}

#[tokio::test]
async fn signal_kills_the_service_group_and_a_stopped_warden_before_answering_fenced() {
    // The service: a shell leading two grandchildren, all in one group.
    let mut service = Group::spawn("sleep 1000 & sleep 1000 & wait");
    let members = service.wait_members(3);
    // The old warden, frozen as by SIGSTOP.
    let mut warden = Group::spawn("exec sleep 1000");
    stop(&warden);

    let target = incarnation(&service, &warden);
    let report = sigkill_chain().fence(&target).await;

    assert!(report.is_fenced(), "{}", report.summary());
    assert_eq!(report.fenced_by(), Some("signal"));
    assert_killed(&mut service, members, &mut warden);
}

#[tokio::test]
async fn signal_leaves_alone_a_pid_whose_start_time_differs_from_the_record() {
    let mut stranger = Group::spawn("exec sleep 1000");
    let real = stranger.start_time();
    // A record of an earlier process that had the same pid: its start time differs.
    let target = warden_fencing::Target {
        pid: Some(stranger.pid),
        start_time: Some(real + 1),
        service_pid: Some(stranger.pid),
        service_pgid: Some(stranger.pid),
        service_start_time: Some(real.saturating_sub(1)),
        ..local_target()
    };
    let report = sigkill_chain().fence(&target).await;

    // The recorded processes are gone (their pid was recycled): fenced, and the process
    // that now has the pid was not touched.
    assert!(report.is_fenced(), "{}", report.summary());
    assert!(stranger.alive(), "a process with a recycled pid was killed");
    assert!(process::is_running(stranger.pid, Some(real)));
}

#[tokio::test]
async fn signal_kills_leftovers_of_a_group_whose_leader_is_gone() {
    // The leader exits at once and is reaped; its background child stays in the group.
    let mut leader = Group::spawn("sleep 1000 & exit 0");
    let leader_start = leader.start_time();
    assert!(leader.reap().success());
    let leftovers = wait_for("the leftover to be alone in the group", || {
        let m = process::group_members(leader.pid);
        (m.len() == 1).then_some(m)
    });

    let warden = old_warden();
    let target = with_warden(
        warden_fencing::Target {
            service_pid: Some(leader.pid),
            service_pgid: Some(leader.pid),
            service_start_time: Some(leader_start),
            ..local_target()
        },
        &warden,
    );
    let report = sigkill_chain().fence(&target).await;

    assert!(report.is_fenced(), "{}", report.summary());
    assert!(!process::is_running(leftovers[0], None));
}

#[tokio::test]
async fn signal_sigterm_also_ends_a_stopped_process() {
    // SIGTERM stays pending in a stopped process until it is continued; the method
    // continues it.
    let mut warden = Group::spawn("exec sleep 1000");
    stop(&warden);
    // A node that was never promoted (no epoch) ran no service as active: its warden is
    // all there is to stop. (A promoted record needs its service named too.)
    let target = warden_fencing::Target {
        pid: Some(warden.pid),
        start_time: Some(warden.start_time()),
        epoch: None,
        ..local_target()
    };
    let report = signal_chain(Signal::SIGTERM, Duration::from_secs(5))
        .fence(&target)
        .await;
    assert!(report.is_fenced(), "{}", report.summary());
    assert_eq!(warden.reap().signal(), Some(libc::SIGTERM));
}

#[tokio::test]
async fn signal_fails_naming_the_pids_that_survive_its_timeout() {
    // Ignores SIGTERM (its sleeps inherit the ignored disposition).
    let service = Group::spawn("trap '' TERM; while :; do sleep 0.05; done");
    // Fence only once the shell ignores SIGTERM (SigIgn bit 15 in /proc/PID/status).
    wait_for("the shell to ignore SIGTERM", || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", service.pid)).ok()?;
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))?
            .trim();
        let mask = u64::from_str_radix(mask, 16).ok()?;
        (mask & (1 << (libc::SIGTERM - 1)) != 0).then_some(())
    });
    let warden = old_warden();
    let target = incarnation(&service, &warden);
    let report = signal_chain(Signal::SIGTERM, Duration::from_millis(300))
        .fence(&target)
        .await;
    let reason = match &report.attempts[0].outcome {
        Outcome::Failed(r) => r.clone(),
        other => panic!("expected failed, got {other:?}"),
    };
    assert!(reason.contains("still running"), "{reason}");
    assert!(reason.contains(&service.pid.to_string()), "{reason}");
    assert!(process::is_running(service.pid, None));
}

#[tokio::test]
async fn signal_refuses_a_running_pid_recorded_without_start_time() {
    let mut warden = Group::spawn("exec sleep 1000");
    let target = warden_fencing::Target {
        pid: Some(warden.pid),
        start_time: None,
        ..local_target()
    };
    let report = sigkill_chain().fence(&target).await;
    assert!(!report.is_fenced(), "{}", report.summary());
    assert!(
        report.summary().contains("no start time"),
        "{}",
        report.summary()
    );
    assert!(warden.alive());
}

#[tokio::test]
async fn signal_kills_the_pidfile_process_of_an_earlier_incarnation_of_this_node() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("service.pid");
    let mut service = Group::spawn("exec sleep 1000");
    std::fs::write(&pidfile, format!("{}\n", service.pid)).unwrap();

    let mut ctx = ctx();
    ctx.pidfile = Some(pidfile.clone());
    let chain = |ctx| {
        FenceChain::new(
            vec![FenceMethod::Signal(SignalFence {
                signal: SignalName(Signal::SIGKILL),
                timeout: Duration::from_secs(5),
                nodes: None,
            })],
            ctx,
        )
    };

    // Another node on this host: our pidfile is not its service's. Its record names no
    // service of its own, and it was promoted: killing its warden does not show its
    // service down, so it is not fenced (this test used to expect "fenced" here).
    let warden = old_warden();
    let other = with_warden(local_target(), &warden);
    let report = chain(ctx.clone()).fence(&other).await;
    assert!(!report.is_fenced(), "{}", report.summary());
    assert!(
        report
            .summary()
            .contains("the record names no service process"),
        "{}",
        report.summary()
    );
    assert!(
        service.alive(),
        "another node's fencing killed this node's service"
    );

    // An earlier incarnation of this very node (hooks mode): the pidfile is its service.
    let warden = old_warden();
    let own = with_warden(
        warden_fencing::Target {
            node_id: Some(ctx.node_id.clone()),
            ..local_target()
        },
        &warden,
    );
    let report = chain(ctx).fence(&own).await;
    assert!(report.is_fenced(), "{}", report.summary());
    assert_eq!(service.reap().signal(), Some(libc::SIGKILL));
}

#[tokio::test]
async fn signal_counts_an_old_boot_on_this_host_as_fenced() {
    let ctx = ctx();
    let target = warden_fencing::Target {
        host: Some(ctx.host.clone()),
        boot_id: Some("00000000-0000-0000-0000-000000000000".into()),
        pid: Some(std::process::id()),
        start_time: process::start_time(std::process::id()),
        ..local_target()
    };
    let report = sigkill_chain().fence(&target).await;
    assert_eq!(report.attempts[0].outcome, Outcome::Fenced);
}

#[tokio::test]
async fn signal_does_not_apply_to_another_host() {
    let target = warden_fencing::Target {
        host: Some("elsewhere.test".into()),
        boot_id: Some("00000000-0000-0000-0000-000000000000".into()),
        machine_id: Some(other_machine_id()),
        ..local_target()
    };
    let report = sigkill_chain().fence(&target).await;
    assert!(
        matches!(&report.attempts[0].outcome, Outcome::NotApplicable(r) if r.contains("elsewhere.test")),
        "{}",
        report.summary()
    );
    let unknown_boot = warden_fencing::Target {
        boot_id: None,
        ..target
    };
    let report = sigkill_chain().fence(&unknown_boot).await;
    assert!(
        matches!(report.attempts[0].outcome, Outcome::NotApplicable(_)),
        "{}",
        report.summary()
    );
}

#[tokio::test]
async fn signal_plan_names_the_processes_without_touching_them() {
    let mut service = Group::spawn("exec sleep 1000");
    let mut warden = old_warden();
    let target = incarnation(&service, &warden);
    let plan = sigkill_chain().plan(&target);
    assert_eq!(plan.len(), 1);
    assert!(
        plan[0].starts_with(&format!(
            "signal: would send SIGKILL to service group {}",
            service.pid
        )),
        "{plan:?}"
    );
    assert!(
        plan[0].contains(&format!("warden pid {}", warden.pid)),
        "{plan:?}"
    );
    assert!(service.alive());
    assert!(warden.alive());
}

#[test]
fn listeners_on_port_finds_this_process() {
    let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = v4.local_addr().unwrap().port();
    // Contains, not equals: a child that another test forks at this moment holds a copy
    // of the socket until its exec closes it (close-on-exec).
    assert!(
        process::listeners_on_port(port).contains(&std::process::id()),
        "{:?}",
        process::listeners_on_port(port)
    );
    drop(v4);
    wait_for("nobody to listen on the port", || {
        process::listeners_on_port(port).is_empty().then_some(())
    });
}

// --- Which host is this (SPEC §5): boot id, machine id and pid namespace together ---

fn outcome(report: &warden_fencing::FenceReport) -> &Outcome {
    &report.attempts[0].outcome
}

/// A container on this kernel: `unshare --pid --fork --mount-proc` running a shell (pid 1
/// in its namespace) and a `sleep` (pid 2 or so there). Returns the group and the sleep's
/// host pid.
fn container() -> (Group, u32) {
    require("/usr/bin/unshare", "util-linux");
    let g = Group::spawn("exec unshare --pid --fork --mount-proc /bin/sh -c 'sleep 1000 & wait'");
    // unshare -> the namespace's init (sh) -> sleep.
    let init = wait_for("unshare to fork the namespace's init", || {
        children_of(g.pid).first().copied()
    });
    let sleep = wait_for("the sleep inside the namespace", || {
        children_of(init).first().copied()
    });
    let ns = process::pid_ns_of(sleep).expect("read the pid namespace of a child");
    assert_ne!(
        Some(ns),
        process::pid_ns().ok(),
        "unshare --pid made no new pid namespace (this test runs as root)"
    );
    (g, sleep)
}

#[tokio::test]
async fn signal_does_not_fence_a_container_on_this_kernel_in_another_pid_namespace() {
    let (_container, sleep) = container();
    // The record that a warden in that container would write: this boot id and machine
    // id (it shares both), its own pid namespace, and its pid as seen in there.
    let target = warden_fencing::Target {
        pid: Some(pid_in_own_namespace(sleep)),
        start_time: process::start_time(sleep),
        pid_ns: process::pid_ns_of(sleep),
        epoch: None,
        ..local_target()
    };
    let report = sigkill_chain().fence(&target).await;
    // Its pid means another process here, or none: "already gone" would be a lie.
    assert!(
        matches!(outcome(&report), Outcome::NotApplicable(r) if r.contains("another pid namespace")),
        "{}",
        report.summary()
    );
    assert!(
        process::is_running(sleep, None),
        "the container's process was signalled"
    );
}

#[tokio::test]
async fn signal_does_not_apply_to_this_boot_id_on_another_machine() {
    let mut warden = old_warden();
    let target = warden_fencing::Target {
        machine_id: Some(other_machine_id()),
        epoch: None,
        ..with_warden(local_target(), &warden)
    };
    let report = sigkill_chain().fence(&target).await;
    assert!(
        matches!(outcome(&report), Outcome::NotApplicable(r) if r.contains("another machine")),
        "{}",
        report.summary()
    );
    assert!(
        warden.alive(),
        "a process was signalled on behalf of another machine"
    );
}

#[tokio::test]
async fn signal_counts_another_boot_of_this_machine_as_rebooted_whatever_the_host_name() {
    // Host names are not identity: the record's "rm1.test" is not this node's "rm2.test",
    // but the machine id is this machine's, and the boot id is not this boot's.
    let target = warden_fencing::Target {
        boot_id: Some(OTHER_BOOT_ID.into()),
        pid: Some(std::process::id()),
        start_time: process::start_time(std::process::id()),
        ..local_target()
    };
    assert_ne!(target.host.as_deref(), Some(ctx().host.as_str()));
    let report = sigkill_chain().fence(&target).await;
    assert_eq!(outcome(&report), &Outcome::Fenced, "{}", report.summary());
}

#[tokio::test]
async fn signal_does_not_apply_to_another_boot_of_another_machine_with_this_host_name() {
    // A cloned machine, or a pod rescheduled under this host's name.
    let target = warden_fencing::Target {
        host: Some(ctx().host),
        boot_id: Some(OTHER_BOOT_ID.into()),
        machine_id: Some(other_machine_id()),
        ..local_target()
    };
    let report = sigkill_chain().fence(&target).await;
    assert!(
        matches!(outcome(&report), Outcome::NotApplicable(r) if r.contains("another machine")),
        "{}",
        report.summary()
    );
}

#[tokio::test]
async fn signal_reads_this_boot_id_in_upper_case_as_this_boot_not_a_reboot() {
    let mut warden = old_warden();
    let target = warden_fencing::Target {
        boot_id: Some(process::boot_id().unwrap().to_ascii_uppercase()),
        epoch: None,
        ..with_warden(local_target(), &warden)
    };
    let report = sigkill_chain().fence(&target).await;
    assert!(report.is_fenced(), "{}", report.summary());
    // Fenced by killing it, not by a reboot that never happened.
    assert_eq!(warden.reap().signal(), Some(libc::SIGKILL));
}

#[tokio::test]
async fn signal_does_not_apply_without_machine_id_or_pid_namespace_or_with_a_garbage_boot_id() {
    let mut warden = old_warden();
    let base = warden_fencing::Target {
        epoch: None,
        ..with_warden(local_target(), &warden)
    };
    for (target, missing) in [
        (
            warden_fencing::Target {
                machine_id: None,
                ..base.clone()
            },
            "no machine id",
        ),
        (
            warden_fencing::Target {
                pid_ns: None,
                ..base.clone()
            },
            "no pid namespace",
        ),
        (
            warden_fencing::Target {
                boot_id: Some("not-a-boot-id".into()),
                ..base.clone()
            },
            "is not a UUID",
        ),
        (
            // Unknown pid namespace and another boot: not "rebooted" either.
            warden_fencing::Target {
                pid_ns: None,
                boot_id: Some(OTHER_BOOT_ID.into()),
                ..base.clone()
            },
            "no pid namespace",
        ),
    ] {
        let report = sigkill_chain().fence(&target).await;
        assert!(
            matches!(outcome(&report), Outcome::NotApplicable(r) if r.contains(missing)),
            "{missing}: {}",
            report.summary()
        );
    }
    assert!(warden.alive());
}

// --- A promoted record must name its service ---

#[tokio::test]
async fn signal_does_not_fence_a_promoted_record_that_names_no_service_by_its_warden_alone() {
    let mut warden = old_warden();
    let target = with_warden(local_target(), &warden);
    assert!(target.epoch.is_some() && target.service_pid.is_none());
    let report = sigkill_chain().fence(&target).await;
    match outcome(&report) {
        Outcome::Failed(r) => assert!(
            r.contains(
                "the record names no service process, so warden cannot verify that the old \
                 service is down"
            ),
            "{r}"
        ),
        other => panic!("expected failed, got {other:?}"),
    }
    // The identified warden is still killed: it must not wake up either way.
    assert_eq!(warden.reap().signal(), Some(libc::SIGKILL));
}

// --- A group whose leader is gone: only provable leftovers are killed ---

#[tokio::test]
async fn signal_leaves_a_leaderless_group_alone_when_a_member_is_older_than_the_recorded_service() {
    let mut leader = Group::spawn("sleep 1000 & exit 0");
    let leader_start = leader.start_time();
    assert!(leader.reap().success());
    let leftovers = wait_for("the leftover to be alone in the group", || {
        let m = process::group_members(leader.pid);
        (m.len() == 1).then_some(m)
    });
    let warden = old_warden();
    // The record says the service started later than the process left in the group: that
    // process cannot descend from it, so the group id may name another group now.
    let later = warden_fencing::Target {
        service_pid: Some(leader.pid),
        service_pgid: Some(leader.pid),
        service_start_time: Some(leader_start + 1_000_000),
        ..with_warden(local_target(), &warden)
    };
    let unknown = warden_fencing::Target {
        service_start_time: None,
        ..later.clone()
    };
    for (target, why) in [
        (later, "started before"),
        (unknown, "no service start time"),
    ] {
        let report = sigkill_chain().fence(&target).await;
        assert!(!report.is_fenced(), "{}", report.summary());
        assert!(report.summary().contains(why), "{}", report.summary());
        assert!(
            process::is_running(leftovers[0], None),
            "an unidentified group member was killed"
        );
    }
}
