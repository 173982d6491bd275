//! Which host is this (SPEC §5), when identities collide (issue 30, points 13 and 14),
//! against the real binary and a real ZooKeeper:
//!
//! - machines cloned from one image share `/etc/machine-id`: a warden whose machine id is
//!   carried by another *live* member with another boot id refuses to start (exit 2,
//!   naming both hosts and `/etc/machine-id`);
//! - a breadcrumb that looks like "this machine before a reboot" while a live member still
//!   runs that boot is not a reboot: the whole chain fences it, `signal` does not call it
//!   fenced;
//! - hooks mode: a `service.pidfile` whose process lives in another pid namespace, or that
//!   holds a pid as a container sees it, is refused at start (exit 2).
//!
//! Other machines and boots are written into the store as their wardens would write them:
//! a live member is an ephemeral znode held by a session of the test.

mod common;

use common::*;
use serde_json::json;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `/etc/machine-id`.
fn machine_id() -> String {
    fs::read_to_string("/etc/machine-id")
        .expect("read /etc/machine-id (systemd-machine-id-setup writes it)")
        .trim()
        .to_string()
}

/// `/proc/sys/kernel/random/boot_id`.
fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .expect("read the boot id")
        .trim()
        .to_string()
}

/// A boot id that is not this boot's: the boot of a clone, or of this machine before a
/// reboot.
fn other_boot() -> String {
    let id = format!(
        "{:016x}{:016x}",
        0x0b00_7000_0000_0000u64 | u64::from(std::process::id()),
        mono_now_ns()
    );
    assert_ne!(id, boot_id().replace('-', ""));
    id
}

/// A member record of node `id` on `host`, as a warden there would have written it.
fn member_record(id: &str, host: &str, machine: &str, boot: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "node_id": id,
        "host": host,
        "boot_id": boot,
        "machine_id": machine,
        "pid_ns": 4026531836u64,
        "pid": 4242,
        "start_time": 1,
        "incarnation": "00000000c10e0001",
        "since": "2026-01-01T00:00:00Z",
        "role": "standby",
        "health": "healthy",
    }))
    .unwrap()
}

// ---------------------------------------------------------------------------------------
// Point 14: cloned machine ids

/// A clone of this machine (same machine id, another boot id) runs a live warden "clone"
/// on host rm9. A warden started here is a second machine with the same id: it refuses,
/// exit 2, naming both hosts and `/etc/machine-id`, and never promotes.
#[test]
fn a_live_member_with_this_machine_id_and_another_boot_makes_start_exit_2() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let clone = ZkClient::connect(&zk.connect_string());
    let path = cluster.znode("members/clone");
    let record = member_record("clone", "rm9.clone.example", &machine_id(), &other_boot());
    clone.create_ephemeral(&path, &record);

    let mut warden = n1.start();
    let exit = wait_for(secs(30), "n1 exits or promotes", || {
        if let Some(exit) = warden.try_exit() {
            return Some(Ok(exit));
        }
        n1.last_run().map(Err)
    });
    let exit = exit.unwrap_or_else(|run| {
        panic!(
            "n1 promoted ({run:?}) next to a live member with its machine id:\n{}",
            warden.log()
        )
    });
    assert_refused_naming(
        &warden,
        exit,
        &["rm9.clone.example", "127.0.0.1", "/etc/machine-id"],
    );
    assert_eq!(
        clone.get(&path).as_deref(),
        Some(&record[..]),
        "the refused warden touched the clone's member record"
    );
    assert!(
        !ZkClient::connect(&zk.connect_string()).exists(&cluster.znode("members/n1")),
        "the refused warden left its member record behind"
    );
    assert!(n1.runs().is_empty(), "n1 promoted: {:?}", n1.runs());
}

/// A clone of this machine runs a live warden with the very same node id (its config was
/// cloned too). On its face that is this machine's warden before a fast reboot, whose
/// session will expire (SPEC §4.9); but it does not expire. Once it outlives a session
/// timeout and a half, the new warden refuses, exit 2, naming `/etc/machine-id`, instead
/// of waiting for ever.
#[test]
fn a_clone_with_the_same_node_id_is_refused_once_its_session_outlives_the_timeout() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let clone = ZkClient::connect(&zk.connect_string());
    let path = cluster.znode("members/n1");
    let record = member_record("n1", "rm9.clone.example", &machine_id(), &other_boot());
    clone.create_ephemeral(&path, &record);

    let mut warden = n1.start();
    // Generous: the refusal comes after 1.5 session timeouts (2s here).
    let exit = wait_for(secs(30), "n1 exits", || warden.try_exit());
    assert_refused_naming(&warden, exit, &["rm9.clone.example", "/etc/machine-id"]);
    assert_eq!(
        clone.get(&path).as_deref(),
        Some(&record[..]),
        "the refused warden touched the clone's member record"
    );
    assert!(n1.runs().is_empty(), "n1 promoted: {:?}", n1.runs());
}

/// The breadcrumb names "clone" with this machine's id and another boot id: on its face,
/// this machine before a reboot, which `signal` would call fenced without signalling. But
/// a live member still runs that very boot (the clone's warden restarted there): it was
/// not a reboot, so `signal` does not apply and the rest of the chain runs (here a
/// recorder that fails), and n1 does not promote.
#[test]
fn a_reboot_that_a_live_member_contradicts_is_fenced_by_the_whole_chain() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    // signal first: today it answers "rebooted, fenced" and the recorder never runs.
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            fences: Some(vec![signal_fence(), cluster.recorder_fence()]),
            ..Default::default()
        },
    );
    let store = ZkClient::connect(&zk.connect_string());
    // The test's session holds the lock, so n1 stands by until the stage is set.
    let holder = ZkClient::connect(&zk.connect_string());
    holder.create_ephemeral(&cluster.znode("lock"), b"{\"node_id\":\"holder\"}");
    let mut warden = n1.start();
    wait_until(secs(30), "n1 registers", || {
        store.exists(&cluster.znode("members/n1"))
    });

    let clone_boot = other_boot();
    store.put(
        &cluster.znode("breadcrumb"),
        &serde_json::to_vec(&json!({
            "node_id": "clone",
            "host": "rm9.clone.example",
            "boot_id": clone_boot,
            "machine_id": machine_id(),
            "pid_ns": 4026531836u64,
            "pid": 4242,
            "start_time": 1,
            "service_pid": 4243,
            "service_pgid": 4243,
            "service_start_time": 2,
            "incarnation": "00000000c10e0000",
            "epoch": 1,
        }))
        .unwrap(),
    );
    let clone = ZkClient::connect(&zk.connect_string());
    clone.create_ephemeral(
        &cluster.znode("members/clone"),
        &member_record("clone", "rm9.clone.example", &machine_id(), &clone_boot),
    );
    holder.close();

    let outcome = wait_for(secs(30), "n1 fences clone or promotes", || {
        if let Some(run) = n1.last_run() {
            return Some(Err(run));
        }
        let calls = cluster.fence_calls();
        (!calls.is_empty()).then_some(Ok(calls))
    });
    let calls = outcome.unwrap_or_else(|run| {
        panic!(
            "n1 promoted ({run:?}) after taking clone's breadcrumb for a reboot of this \
             machine while clone runs that boot:\n{}",
            warden.log()
        )
    });
    assert_eq!(calls[0], "n1 clone", "{calls:?}");
    wait_until(secs(10), "n1 logs that fencing failed", || {
        warden.log_mentions("fencing failed") || warden.log_mentions("fence failed")
    });
    assert!(n1.runs().is_empty(), "n1 promoted: {:?}", n1.runs());
    assert!(warden.is_running(), "n1 exited:\n{}", warden.log());

    // The operator's `warden fence --dry-run` reads the same members and says so.
    let out = cli(&n1.config, &["fence", "clone", "--dry-run"]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("share this machine id") && !text.contains("rebooted since"),
        "the dry run does not say that signal does not apply:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------
// Point 13: a hooks pidfile across pid namespaces

/// Node `id` in hooks mode (`/bin/true` for every hook) whose service is `pidfile`'s.
fn hooks_node(cluster: &Cluster, id: &str, pidfile: &Path) -> Node {
    let node = cluster.node(id);
    let text = fs::read_to_string(&node.config).unwrap();
    let start = text.find("[service]").unwrap();
    let end = text.find("[health]").unwrap();
    let service = format!(
        "[service]\nmode = \"hooks\"\npromote = [\"/bin/true\"]\ndemote = [\"/bin/true\"]\n\
         hook_timeout = \"300ms\"\npidfile = {}\n\n",
        toml_str(&pidfile.display().to_string()),
    );
    fs::write(
        &node.config,
        format!("{}{service}{}", &text[..start], &text[end..]),
    )
    .unwrap();
    node
}

/// A container on this kernel: `unshare --pid --fork --mount-proc` running `script` in
/// `sh` (pid 1 in its namespace), killed with its process group when dropped.
struct Container(Child);

impl Container {
    fn start(script: &str) -> Container {
        assert!(
            Path::new("/usr/bin/unshare").exists(),
            "these tests need unshare (util-linux)"
        );
        let child = {
            use std::os::unix::process::CommandExt;
            Command::new("/usr/bin/unshare")
                .args(["--pid", "--fork", "--mount-proc", "/bin/sh", "-c", script])
                .process_group(0)
                .stdin(Stdio::null())
                .spawn()
                .expect("run unshare")
        };
        Container(child)
    }

    /// The host pid of the process whose pid inside the container is `inner`.
    fn host_pid(&self, inner: u32) -> u32 {
        let unshare = self.0.id();
        wait_for(secs(10), "the process inside the container", || {
            let ns = pid_ns_of(unshare)?;
            fs::read_dir("/proc")
                .ok()?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .find(|&pid| {
                    pid_ns_of(pid).is_some_and(|n| n != ns)
                        && ns_pids(pid).is_some_and(|p| p.len() == 2 && p[1] == inner)
                        && process_tree_has(pid, unshare)
                })
        })
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.0.wait();
    }
}

/// The inode of process `pid`'s pid namespace.
fn pid_ns_of(pid: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|m| m.ino())
}

/// `NSpid` of `/proc/PID/status`: the pid in each pid namespace, outermost first.
fn ns_pids(pid: u32) -> Option<Vec<u32>> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line["NSpid:".len()..]
        .split_whitespace()
        .map(|p| p.parse().ok())
        .collect()
}

/// Whether `ancestor` is `pid` or one of its ancestors.
fn process_tree_has(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        if pid == ancestor {
            return true;
        }
        let Some(ppid) = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let rest = s.get(s.rfind(')')? + 1..)?.to_string();
                rest.split_whitespace().nth(1)?.parse::<u32>().ok()
            })
        else {
            return false;
        };
        if ppid <= 1 {
            return false;
        }
        pid = ppid;
    }
    false
}

/// The pid a container's service writes to `pidfile`, once it has.
fn pid_written_to(pidfile: &Path) -> u32 {
    wait_for(secs(10), "the container writes its pidfile", || {
        fs::read_to_string(pidfile)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
    })
}

/// Asserts that `warden` exited (`exit`) with 2 and that its log names every one of
/// `needles`.
fn assert_refused_naming(
    warden: &Warden,
    exit: std::process::ExitStatus,
    needles: &[impl AsRef<str>],
) {
    assert_eq!(exit.code(), Some(2), "{exit}\n{}", warden.log());
    for needle in needles {
        let needle = needle.as_ref();
        assert!(
            warden.log_mentions(needle),
            "the refusal does not name {needle}:\n{}",
            warden.log()
        );
    }
}

/// Premise of the stale-pidfile tests: the container whose process has host pid `pid`
/// does not see `pidfile` (its directory is a tmpfs of the container's own there).
fn assert_container_cannot_see(pid: u32, pidfile: &Path) {
    assert!(
        !Path::new(&format!("/proc/{pid}/root{}", pidfile.display())).exists(),
        "premise: the container must not see the pidfile"
    );
}

/// SPEC §9: a stale pidfile naming `pid` is logged as stale, with its pid.
fn assert_logged_as_stale(warden: &Warden, pid: u32) {
    assert!(
        warden.log_mentions("stale") && warden.log_mentions(&pid.to_string()),
        "the stale pidfile (pid {pid}) is not logged:\n{}",
        warden.log()
    );
}

/// Starts `node`'s warden and waits (30s at most) until it exits or its member record
/// appears in the store: `Err` with the exit status if it exited first, `Ok` if it
/// registered.
fn start_until_exit_or_registered(
    zk: &ZkServer,
    cluster: &Cluster,
    node: &Node,
) -> (Warden, Result<(), std::process::ExitStatus>) {
    let mut warden = node.start();
    let store = ZkClient::connect(&zk.connect_string());
    let member = cluster.znode(&format!("members/{}", node.id));
    let outcome = wait_for(secs(30), "warden exits or registers", || {
        if let Some(exit) = warden.try_exit() {
            return Some(Err(exit));
        }
        store.exists(&member).then_some(Ok(()))
    });
    (warden, outcome)
}

/// Starts `node`'s warden and waits until it exits or registers; panics if it registers.
fn assert_start_refused(zk: &ZkServer, cluster: &Cluster, node: &Node, needles: &[String]) {
    let (warden, outcome) = start_until_exit_or_registered(zk, cluster, node);
    let Err(exit) = outcome else {
        panic!(
            "{} started and registered with a pidfile in another pid namespace:\n{}",
            node.id,
            warden.log()
        );
    };
    assert_refused_naming(&warden, exit, needles);
}

/// The pidfile names (by its pid here) a process that runs in another pid namespace, a
/// container on this kernel: refused at start, exit 2, naming the pidfile, the pid and
/// both namespaces.
#[test]
fn a_pidfile_naming_a_process_in_another_pid_namespace_is_refused_at_start() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let container = Container::start("sleep 1000 & wait");
    let sleep = container.host_pid(2);
    let pidfile = cluster.dir().join("service.pid");
    fs::write(&pidfile, format!("{sleep}\n")).unwrap();
    let n1 = hooks_node(&cluster, "n1", &pidfile);
    let theirs = pid_ns_of(sleep).unwrap().to_string();
    let ours = pid_ns_of(std::process::id()).unwrap().to_string();
    assert_ne!(theirs, ours);
    assert_start_refused(
        &zk,
        &cluster,
        &n1,
        &[
            pidfile.display().to_string(),
            sleep.to_string(),
            theirs,
            ours,
        ],
    );
}

/// The service wrote its pidfile inside a container: the pid is the one it has in there,
/// which names no process here. Not "the service may still be starting": a process of
/// another pid namespace has that pid there, so the start is refused, exit 2, naming the
/// pidfile, the pid, the process's pid here and its namespace.
#[test]
fn a_pidfile_written_inside_a_container_is_refused_at_start() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let pidfile = cluster.dir().join("service.pid");
    // A pid free here, given to the container's service through its own ns_last_pid.
    let pid_max: u32 = fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let inner = (pid_max - 1000 - std::process::id() % 500..pid_max - 100)
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .expect("a free pid");
    let container = Container::start(&format!(
        "echo {} > /proc/sys/kernel/ns_last_pid; sleep 1000 & echo $! > {}; wait",
        inner - 1,
        pidfile.display()
    ));
    let written = pid_written_to(&pidfile);
    assert_eq!(
        written, inner,
        "the container's service did not get pid {inner}"
    );
    let outer = container.host_pid(inner);
    assert!(
        !Path::new(&format!("/proc/{inner}")).exists(),
        "premise: pid {inner} is free here"
    );
    let n1 = hooks_node(&cluster, "n1", &pidfile);
    assert_start_refused(
        &zk,
        &cluster,
        &n1,
        &[
            pidfile.display().to_string(),
            inner.to_string(),
            outer.to_string(),
            pid_ns_of(outer).unwrap().to_string(),
        ],
    );
}

/// The usual container volume: the host directory holding the pidfile is mounted at
/// another path inside the container (`-v /srv/svc:/data`), and the service writes its
/// pidfile there, with its pid in the container. Whether the container sees warden's
/// pidfile cannot be told by looking at the same path inside it (there it has a tmpfs of
/// its own); it is the same file, reached through the volume. Refused at start, exit 2, as
/// any pidfile written inside a container, not taken for a stale one.
#[test]
fn a_pidfile_written_inside_a_container_through_a_volume_elsewhere_is_refused_at_start() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let volume = cluster.dir().join("volume");
    let inside = cluster.dir().join("inside");
    fs::create_dir_all(&volume).unwrap();
    fs::create_dir_all(&inside).unwrap();
    let pidfile = volume.join("service.pid");
    let pid_max: u32 = fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let inner = (pid_max - 3000 - std::process::id() % 500..pid_max - 2100)
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .expect("a free pid");
    // In the container: the volume at `inside`, its own tmpfs where the host has it.
    let container = Container::start(&format!(
        "mount --bind '{vol}' '{ins}' && mount -t tmpfs none '{vol}' || exit 1; \
         echo {} > /proc/sys/kernel/ns_last_pid; sleep 1000 & echo $! > '{ins}/service.pid'; wait",
        inner - 1,
        vol = volume.display(),
        ins = inside.display(),
    ));
    let written = pid_written_to(&pidfile);
    assert_eq!(
        written, inner,
        "the container's service did not get pid {inner}"
    );
    let outer = container.host_pid(inner);
    assert!(
        !Path::new(&format!("/proc/{inner}")).exists(),
        "premise: pid {inner} is free here"
    );
    assert!(
        !Path::new(&format!("/proc/{outer}/root{}", pidfile.display())).exists(),
        "premise: the container has no pidfile at warden's path"
    );
    let n1 = hooks_node(&cluster, "n1", &pidfile);
    assert_start_refused(
        &zk,
        &cluster,
        &n1,
        &[
            pidfile.display().to_string(),
            inner.to_string(),
            outer.to_string(),
            pid_ns_of(outer).unwrap().to_string(),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Point 13: a recorded service cgroup seen from another cgroup namespace

/// Where the whole cgroup v2 hierarchy is mounted here (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on hybrid hosts).
fn cgroup2_mount() -> std::path::PathBuf {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split_whitespace().collect();
            (right.starts_with("cgroup2 ") && f.get(3) == Some(&"/")).then(|| f[4].into())
        })
        .expect("these tests need a cgroup v2 hierarchy")
}

/// The inode of this process's cgroup namespace.
fn cgroup_ns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self/ns/cgroup").unwrap().ino()
}

/// A cgroup of the test's own, right below the root, removed (its processes killed) on drop.
struct TestCgroup {
    relative: String,
    dir: std::path::PathBuf,
}

impl TestCgroup {
    fn new(name: &str) -> TestCgroup {
        let relative = format!("/warden-{name}-{}", std::process::id());
        let dir = cgroup2_mount().join(&relative[1..]);
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        TestCgroup { relative, dir }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("cgroup.kill"), "1");
        let _ = wait_until_quietly(|| {
            fs::read_to_string(self.dir.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
        });
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Polls `f` for up to 10s; whether it held.
fn wait_until_quietly(mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + secs(10);
    while std::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(ms(10));
    }
    false
}

/// A warden process that is gone: its pid and start time, as a record keeps them.
fn dead_process() -> (u32, u64) {
    let mut child = Command::new("sleep").arg("1000").spawn().unwrap();
    let pid = child.id();
    let start_time = proc_stat(pid).unwrap().start_time;
    child.kill().unwrap();
    child.wait().unwrap();
    (pid, start_time)
}

/// `warden fence-local` for a record whose service cgroup is `cgroup` (and, if given,
/// recorded in cgroup namespace `recorded_ns`), run in a cgroup namespace of its own
/// rooted at `fencer` (`unshare --cgroup --mount`, the hierarchy mounted anew, as in a
/// container) or, without `fencer`, right here.
fn fence_local(
    cgroup: &str,
    recorded_ns: Option<u64>,
    fencer: Option<&TestCgroup>,
) -> std::process::Output {
    let (pid, start_time) = dead_process();
    let mut args = vec![
        WARDEN.to_string(),
        "fence-local".into(),
        "--boot-id".into(),
        boot_id(),
        "--machine-id".into(),
        machine_id(),
        "--pid-ns".into(),
        pid_ns_of(std::process::id()).unwrap().to_string(),
        "--pid".into(),
        pid.to_string(),
        "--start-time".into(),
        start_time.to_string(),
        "--service-cgroup".into(),
        cgroup.to_string(),
        "--timeout".into(),
        "2s".into(),
    ];
    if let Some(ns) = recorded_ns {
        args.extend(["--cgroup-ns".into(), ns.to_string()]);
    }
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let mount = cgroup2_mount().display().to_string();
    let script = match fencer {
        Some(f) => format!(
            "echo $$ > '{}/cgroup.procs' && exec unshare --cgroup --mount sh -c \
             \"umount -l '{mount}' && mount -t cgroup2 none '{mount}' && exec {}\"",
            f.dir.display(),
            quoted.join(" ")
        ),
        None => format!("exec {}", quoted.join(" ")),
    };
    Command::new("/bin/sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .output()
        .expect("run fence-local")
}

/// The old service's cgroup still holds a process, but fence-local runs in a cgroup
/// namespace of its own (a container), where the recorded path names no cgroup. That is
/// not "removed, its processes ended": it is unknown, so fence-local does not say fenced,
/// says why, and the service's process runs on untouched. Run as it is given today (the
/// record names no cgroup namespace) and with the namespace the old warden recorded.
#[test]
fn a_service_cgroup_out_of_view_of_the_fencer_is_unknown_never_removed() {
    let victim = TestCgroup::new("victim");
    let fencer = TestCgroup::new("fencer");
    let mut service = Command::new("sleep").arg("1000").spawn().unwrap();
    fs::write(victim.dir.join("cgroup.procs"), service.id().to_string()).unwrap();

    for recorded_ns in [None, Some(cgroup_ns())] {
        let out = fence_local(&victim.relative, recorded_ns, Some(&fencer));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_ne!(
            out.status.code(),
            Some(0),
            "fence-local (record's cgroup namespace {recorded_ns:?}) said fenced while \
             {} still holds pid {}:\n{text}",
            victim.relative,
            service.id()
        );
        assert!(
            text.contains("cgroup namespace") && text.contains(&victim.relative),
            "fence-local does not say that the cgroup cannot be resolved from its cgroup \
             namespace:\n{text}"
        );
        assert!(
            matches!(service.try_wait(), Ok(None)),
            "fence-local killed the service"
        );
    }
    let _ = service.kill();
    let _ = service.wait();

    // Where the fencer shares the recorder's cgroup namespace, a cgroup that is gone is
    // gone: fenced.
    let gone = format!("{}/service-gone", victim.relative);
    let out = fence_local(&gone, Some(cgroup_ns()), None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The service wrote its pidfile inside a container, where it is pid 2; here pid 2 is a
/// kernel thread (kthreadd), never a service. Refused at start, exit 2, naming the
/// container's process, rather than pinning a kernel thread as the service.
#[test]
fn a_container_pid_that_names_a_kernel_thread_here_is_refused_at_start() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let pidfile = cluster.dir().join("service.pid");
    let container = Container::start(&format!(
        "sleep 1000 & echo $! > {}; wait",
        pidfile.display()
    ));
    let written = pid_written_to(&pidfile);
    let flags: u32 = fs::read_to_string(format!("/proc/{written}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.get(s.rfind(')')? + 1..)?.to_string();
            rest.split_whitespace().nth(6)?.parse().ok()
        })
        .expect("premise: the container's pid names a process here");
    assert_ne!(
        flags & 0x0020_0000,
        0,
        "premise: pid {written} is a kernel thread here"
    );
    let outer = container.host_pid(written);
    let n1 = hooks_node(&cluster, "n1", &pidfile);
    assert_start_refused(
        &zk,
        &cluster,
        &n1,
        &[
            pidfile.display().to_string(),
            outer.to_string(),
            "kernel thread".to_string(),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Review of issue 30 (second half): what the pid-namespace checks must not refuse

/// SPEC §9: a stale hooks `pidfile` (its service crashed; the pid names no process now)
/// is never signalled and only logged: warden starts, and the pidfile is read again at
/// promotion. Here the service ran on the host, as warden does, and died with `kill -9`
/// (its pidfile stays). Some unrelated container on this kernel, which cannot even see
/// the pidfile (its own tmpfs over that directory), happens to run a process whose pid in
/// its own namespace is that number: container pids are small and many, so on a host with
/// containers such a namesake is common. That is no evidence the pidfile was written in
/// there, and warden must start, not exit 2.
#[test]
fn a_stale_host_pidfile_is_not_refused_for_a_namesake_in_a_container_that_cannot_see_it() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let pidfile = cluster.dir().join("service.pid");
    let pid_max: u32 = fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The pid the host's service had before it died: free here now.
    let stale = (pid_max - 2000 - std::process::id() % 500..pid_max - 1100)
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .expect("a free pid");
    fs::write(&pidfile, format!("{stale}\n")).unwrap();
    // An unrelated container: the pidfile's directory is not its (a tmpfs of its own over
    // it), and one of its processes has pid `stale` in there.
    let container = Container::start(&format!(
        "mount -t tmpfs none '{}' || exit 1; echo {} > /proc/sys/kernel/ns_last_pid; sleep 1000 & wait",
        cluster.dir().display(),
        stale - 1,
    ));
    let outer = container.host_pid(stale);
    assert!(
        !Path::new(&format!("/proc/{stale}")).exists(),
        "premise: pid {stale} is free here (the service is gone)"
    );
    // Premise: the container cannot see the pidfile.
    assert_container_cannot_see(outer, &pidfile);
    let n1 = hooks_node(&cluster, "n1", &pidfile);
    let (warden, started) = start_until_exit_or_registered(&zk, &cluster, &n1);
    if let Err(exit) = started {
        panic!(
            "a stale pidfile (pid {stale}, no process here) was refused at start ({exit}) \
             because an unrelated container's process {outer} has pid {stale} in its own \
             namespace:\n{}",
            warden.log()
        );
    }
    assert_logged_as_stale(&warden, stale);
}

/// SPEC §9: "stale hooks pidfile (the pid now belongs to another process): never
/// signalled; logged". The service ran on the host and died with `kill -9`; its pid was
/// then reused, as pids are, by a process of some unrelated container (one that cannot
/// see the pidfile). warden must start (it will not signal that process: its start time
/// is checked, and the pid is read again at promotion), not exit 2 calling the pidfile a
/// container's.
#[test]
fn a_stale_host_pidfile_whose_pid_a_container_process_reused_is_not_refused_at_start() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let pidfile = cluster.dir().join("service.pid");
    let container = Container::start(&format!(
        "mount -t tmpfs none '{}' || exit 1; sleep 1000 & wait",
        cluster.dir().display(),
    ));
    // The container's process got, here, the pid the host's service had.
    let reused = container.host_pid(3); // (1 sh, 2 mount, 3 sleep)
    fs::write(&pidfile, format!("{reused}\n")).unwrap();
    assert_container_cannot_see(reused, &pidfile);
    let n1 = hooks_node(&cluster, "n1", &pidfile);
    let (warden, started) = start_until_exit_or_registered(&zk, &cluster, &n1);
    if let Err(exit) = started {
        panic!(
            "a stale pidfile whose pid {reused} a container's process reused was refused at \
             start ({exit}):\n{}",
            warden.log()
        );
    }
    assert!(
        process_alive(reused),
        "the container's process {reused} was signalled"
    );
    assert_logged_as_stale(&warden, reused);
}

/// SPEC §4.9 and §9: after a fast reboot of this machine, the new warden waits for its
/// predecessor's session to expire. That session was opened with the session timeout in
/// force *before* the reboot, which its member record states (`session_timeout`): here
/// 10s, while the config now says 2s (lowered before the reboot; ZooKeeper granted the
/// old 10s, its maxSessionTimeout allowing it). The record goes 10s after the machine
/// went away; the new warden must wait for that, not call this machine a clone and exit 2
/// after 1.5 x its own 2s.
#[test]
fn a_fast_reboot_is_waited_out_even_when_the_old_session_timeout_was_longer() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    // This machine before its reboot: n1's warden held a 10s session (through a link the
    // reboot cuts: the session is not closed, it expires).
    let link = proxy::TcpProxy::start(zk.port());
    let before = ZkClient::connect(&format!("127.0.0.1:{}", link.port()));
    let path = cluster.znode("members/n1");
    let mut record: serde_json::Value = serde_json::from_slice(&member_record(
        "n1",
        "127.0.0.1",
        &machine_id(),
        &other_boot(),
    ))
    .unwrap();
    record["session_timeout"] = json!("10s");
    let record = serde_json::to_vec(&record).unwrap();
    before.create_ephemeral(&path, &record);
    // The reboot: the old warden is gone without a word.
    link.cut();
    let store = ZkClient::connect(&zk.connect_string());
    let mut warden = n1.start();
    let here = boot_id();
    let outcome = wait_for(secs(40), "n1 exits or registers", || {
        if let Some(exit) = warden.try_exit() {
            return Some(Err(exit));
        }
        let mine = store.get(&path).and_then(|d| {
            let v: serde_json::Value = serde_json::from_slice(&d).ok()?;
            (v["boot_id"].as_str()? == here).then_some(())
        });
        mine.map(Ok)
    });
    if let Err(exit) = outcome {
        panic!(
            "n1, restarted after a fast reboot of this machine, was refused ({exit}) while \
             its predecessor's 10s session was still expiring:\n{}",
            warden.log()
        );
    }
    // (The old session's client cannot reach ZooKeeper any more; dropping it could wait.)
    std::mem::forget(before);
}
