//! Three wardens of one cluster on the ensemble, each talking to one server alone, each
//! with a fence chain whose first method is a script the test steers through a control
//! file (`ok`: it fences for real, killing the target's warden and service group;
//! `fail`: exit 1; `hang`: sleeps until the method's timeout kills it), optionally
//! followed by `signal`.

use crate::common::*;
use crate::ensemble::net::Firewall;
use crate::ensemble::zk::Ensemble;
use serde_json::Value;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the steerable fence script may run before warden kills it.
pub const CTL_FENCE_TIMEOUT: Duration = Duration::from_millis(1500);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceMode {
    Ok,
    Fail,
    Hang,
}

impl FenceMode {
    pub fn word(self) -> &'static str {
        match self {
            FenceMode::Ok => "ok",
            FenceMode::Fail => "fail",
            FenceMode::Hang => "hang",
        }
    }
}

pub struct Trio {
    pub cluster: Cluster,
    /// n1, n2, n3.
    pub nodes: Vec<Node>,
    /// The server (1-based id) each node talks to.
    pub server_of: Vec<usize>,
    /// Whether each node's chain ends with `signal`.
    pub signal_fallback: Vec<bool>,
    pub wardens: Vec<Option<Warden>>,
    /// A `status` config per server (index id-1), to ask through a server that serves.
    probes: Vec<PathBuf>,
    ctl: Vec<PathBuf>,
    ctl_calls: PathBuf,
    _reaper: PidFileReaper,
}

impl Trio {
    /// Writes the configs of n1..n3: node `i` talks to server `server_of[i]` alone; its
    /// chain is the steerable script, then `signal` if `signal_fallback[i]`. Session
    /// timeout 4s (lease 2s): generous on a loaded 2-core machine.
    pub fn new(ens: &Ensemble, server_of: [usize; 3], signal_fallback: [bool; 3]) -> Trio {
        let mut cluster = Cluster::with_connect(&ens.connect_all());
        cluster.session_timeout = secs(4);
        let hang_pids = cluster.dir().join("fence-hang-pids");
        let ctl_calls = cluster.dir().join("fence-ctl-calls");
        let reaper = PidFileReaper {
            file: hang_pids.clone(),
            marker: "sleep 600".into(),
        };
        let marker = cluster.dir().display().to_string();
        let mut nodes = Vec::new();
        let mut ctl = Vec::new();
        for (i, (&server, &signal)) in server_of.iter().zip(&signal_fallback).enumerate() {
            let id = format!("n{}", i + 1);
            let ctl_file = cluster.dir().join(format!("fence-ctl-{id}"));
            fs::write(&ctl_file, "ok\n").expect("write a fence control file");
            let script = cluster.script(
                &format!("fence-ctl-{id}.sh"),
                &ctl_script(&ctl_file, &ctl_calls, &hang_pids, &marker),
            );
            let mut fences = vec![script_fence(
                &[&script.display().to_string()],
                CTL_FENCE_TIMEOUT,
            )];
            if signal {
                fences.push(signal_fence());
            }
            cluster.connect = ens.peer(server).connect_string();
            nodes.push(cluster.node_with(
                &id,
                NodeOptions {
                    fences: Some(fences),
                    ..Default::default()
                },
            ));
            ctl.push(ctl_file);
        }
        let mut probes = Vec::new();
        for p in &ens.peers {
            cluster.connect = p.connect_string();
            let probe = cluster.node_with(
                &format!("probe-s{}", p.id),
                NodeOptions {
                    fences: Some(vec![signal_fence()]),
                    ..Default::default()
                },
            );
            probes.push(probe.config);
        }
        cluster.connect = ens.connect_all();
        Trio {
            cluster,
            nodes,
            server_of: server_of.to_vec(),
            signal_fallback: signal_fallback.to_vec(),
            wardens: vec![None, None, None],
            probes,
            ctl,
            ctl_calls,
            _reaper: reaper,
        }
    }

    pub fn id(&self, i: usize) -> &str {
        &self.nodes[i].id
    }

    /// The index of node `id` (`n2` -> 1).
    pub fn index(&self, id: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// Sets what node `i`'s steerable fence script does from now on.
    pub fn set_fence(&self, i: usize, mode: FenceMode) {
        fs::write(&self.ctl[i], format!("{}\n", mode.word())).expect("write a control file");
    }

    /// The lines `<fencer> <target> <mode>` of every run of a steerable fence script.
    pub fn ctl_calls(&self) -> Vec<String> {
        fs::read_to_string(&self.ctl_calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Starts node `i`'s warden (dropping the handle of an exited one first: its `Drop`
    /// kills whatever of that node's journal services still run, which must not meet the
    /// new warden's service).
    pub fn start(&mut self, i: usize) {
        if let Some(mut old) = self.wardens[i].take() {
            assert!(
                !old.is_running(),
                "start {} while its warden runs",
                self.nodes[i].id
            );
        }
        self.wardens[i] = Some(self.nodes[i].start());
    }

    /// Node `i`'s warden, which must have been started.
    pub fn warden(&mut self, i: usize) -> &mut Warden {
        self.wardens[i].as_mut().expect("the warden was started")
    }

    /// Whether node `i`'s warden process runs (a stopped one runs).
    pub fn running(&mut self, i: usize) -> bool {
        self.wardens[i].as_mut().is_some_and(|w| w.is_running())
    }

    /// Starts again every warden that exited (killed by the test or fenced by a peer);
    /// returns their ids.
    pub fn restart_dead(&mut self) -> Vec<String> {
        let mut restarted = Vec::new();
        for i in 0..self.nodes.len() {
            if !self.running(i) {
                self.start(i);
                restarted.push(self.nodes[i].id.clone());
            }
        }
        restarted
    }

    /// `status --json` through a server that serves and is not cut off (or, failing
    /// that, through any other).
    pub fn status(&self, ens: &Ensemble, fw: &Firewall) -> Result<Value, String> {
        let mut order: Vec<usize> = (1..=ens.peers.len()).collect();
        order.sort_by_key(|&id| (fw.touches(id), !ens.peer(id).is_running()));
        let mut last = Err("no server runs".to_string());
        for id in order {
            if !ens.peer(id).is_running() {
                continue;
            }
            last = try_status_json(&self.probes[id - 1]);
            if last.is_ok() {
                return last;
            }
        }
        last
    }

    /// The active node and epoch once `status` names one whose own service runs and saw
    /// that epoch; `None` at `timeout`.
    pub fn wait_active(
        &self,
        ens: &Ensemble,
        fw: &Firewall,
        timeout: Duration,
    ) -> Option<(usize, u64, Run)> {
        let start = Instant::now();
        loop {
            if let Ok(s) = self.status(ens, fw) {
                if let (Some(id), Some(epoch)) = (active_id(&s), active_epoch(&s)) {
                    let i = self.index(&id);
                    if let Some(run) = self.nodes[i].last_run() {
                        if process_alive(run.pid) && run.epoch == Some(epoch) {
                            return Some((i, epoch, run));
                        }
                    }
                }
            }
            if start.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(ms(200));
        }
    }

    /// The journal services alive right now, with their node.
    pub fn live_services(&self) -> Vec<Run> {
        self.nodes
            .iter()
            .flat_map(|n| {
                let needle = n.journal.display().to_string();
                n.runs().into_iter().filter(move |r| {
                    process_alive(r.pid)
                        && process_cmdline(r.pid).is_some_and(|c| c.contains(&needle))
                })
            })
            .collect()
    }

    /// The roles of the three nodes in a status (`-` when absent).
    pub fn roles(&self, status: &Value) -> String {
        self.nodes
            .iter()
            .map(|n| {
                format!(
                    "{}={}",
                    n.id,
                    member_role(status, &n.id).unwrap_or_else(|| "-".into())
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The steerable fence script of one node.
fn ctl_script(
    ctl: &std::path::Path,
    calls: &std::path::Path,
    hang_pids: &std::path::Path,
    marker: &str,
) -> String {
    let q = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    format!(
        r#"# Steered by the test through {ctl_d}: ok | fail | hang.
mode=$(cat {ctl} 2>/dev/null || echo ok)
echo "$WARDEN_NODE_ID $WARDEN_TARGET_NODE_ID $mode" >> {calls}
case "$mode" in
  fail) echo "fence-ctl: told to fail" >&2; exit 1 ;;
  hang) echo $$ >> {hang}; exec sleep 600 ;;
esac
# ok: fence for real, as the signal method does, but only processes of this test (a
# zombie's command line is empty: it counts as gone).
ours() {{ tr '\0' ' ' < /proc/$1/cmdline 2>/dev/null | grep -q -F {marker}; }}
pg="$WARDEN_TARGET_SERVICE_PGID"
case "$pg" in ''|*[!0-9]*) ;; *) if ours "$pg"; then kill -KILL -- "-$pg" 2>/dev/null; fi ;; esac
for pid in "$WARDEN_TARGET_SERVICE_PID" "$WARDEN_TARGET_PID"; do
  case "$pid" in ''|*[!0-9]*) continue ;; esac
  if ours "$pid"; then kill -KILL "$pid" 2>/dev/null; fi
done
i=0
while [ $i -lt 50 ]; do
  left=
  for pid in "$WARDEN_TARGET_SERVICE_PID" "$WARDEN_TARGET_PID"; do
    case "$pid" in ''|*[!0-9]*) continue ;; esac
    if ours "$pid"; then left="$left $pid"; fi
  done
  if [ -z "$left" ]; then echo "fence-ctl: $WARDEN_TARGET_NODE_ID fenced"; exit 0; fi
  sleep 0.02
  i=$((i+1))
done
echo "fence-ctl: still running:$left" >&2
exit 1
"#,
        ctl_d = ctl.display(),
        ctl = q(&ctl.display().to_string()),
        calls = q(&calls.display().to_string()),
        hang = q(&hang_pids.display().to_string()),
        marker = q(marker),
    )
}
