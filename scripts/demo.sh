#!/usr/bin/env bash
# warden demo: a local ZooKeeper, two nodes managing a small service, and two failovers
# with fencing. Installs what it needs on a fresh Debian machine, builds warden, and
# cleans up everything it started, even on Ctrl-C.
#
#   scripts/demo.sh            # run it
#   scripts/demo.sh redis      # the same story on real Redis servers (examples/redis)
#   KEEP=1 scripts/demo.sh     # keep the temp dir (configs, logs, journals) afterwards
#
# It stops with an error (exit 1) when something it shows does not happen: no new
# active, a frozen active's service left running, a service started with an epoch not
# above the last one.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
if [ "${1:-}" = redis ]; then
  exec "$here/scripts/demo-redis.sh"
fi

. "$here/scripts/demo-common.sh"

# --- 1. What the demo needs ------------------------------------------------------------
mapfile -t need < <(missing_base_packages)
ensure_packages "${need[@]}"

build_bins warden warden-journal-service
warden="$bindir/warden"
service="$bindir/warden-journal-service"

# --- 2. A scratch dir, and cleanup of everything we start ------------------------------
dir=$(mktemp -d /tmp/warden-demo.XXXXXX)
pids=()
cleanup() {
  local status=$?
  set +e
  for p in "${pids[@]}"; do
    kill -CONT "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  # The services die with their wardens (parent-death signal); make sure anyway.
  pkill -KILL -f "$dir/n[12].journal" 2>/dev/null
  # A failed demo keeps its logs: the message that failed it points there.
  if [ "${KEEP:-0}" = 1 ] || [ "$status" != 0 ]; then
    echo "kept $dir"
  else
    rm -rf "$dir"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 3. ZooKeeper ----------------------------------------------------------------------
say "Starting a local ZooKeeper (standalone, on loopback)"
start_zookeeper
note "ZooKeeper listens on 127.0.0.1:$zkport"
note "configs and logs go to $dir (removed at the end; KEEP=1 keeps them)"

# --- 4. Two nodes ----------------------------------------------------------------------
for n in n1 n2; do
  cat >"$dir/$n.toml" <<EOF
[cluster]
name = "demo"
node_id = "$n"
host = "127.0.0.1"

[coordination.zookeeper]
connect = "127.0.0.1:$zkport"
session_timeout = "2s"      # a dead node is noticed after this; its lease is 1s
connect_timeout = "1s"

[election]
rejoin_delay = "500ms"

[service]
mode = "spawn"              # warden starts the service on the active node only
command = ["$service", "--journal", "$dir/$n.journal", "--tick", "200ms"]
stop_timeout = "500ms"

[[fence]]                   # both nodes share this host, so a local signal can fence
kind = "signal"
signal = "SIGKILL"
timeout = "5s"
EOF
done

start() { # node -> starts its warden, logging to $dir/node.log
  RUST_LOG=info "$warden" -c "$dir/$1.toml" run >>"$dir/$1.log" 2>&1 &
  pids+=($!)
  eval "pid_$1=$!"
  disown $!  # no "Killed" notices from bash when the demo kills it
}
status() { "$warden" -c "$dir/n1.toml" status | sed 's/^/   /'; }
active() { # the active node's id, or nothing
  "$warden" -c "$dir/n1.toml" status --json 2>/dev/null | grep -o '"active":{[^}]*}' | grep -o '"node_id":"[^"]*"' | cut -d'"' -f4 || true
}
wait_active() { # [not-this-node]
  for _ in $(seq 1 200); do
    a=$(active)
    if [ -n "$a" ] && [ "$a" != "${1:-}" ]; then echo "$a"; return; fi
    sleep 0.1
  done
  echo "no active node after 20s; see $dir/*.log" >&2
  exit 1
}
wait_role() { # node role
  for _ in $(seq 1 200); do
    "$warden" -c "$dir/n1.toml" status | grep -qE "^$1 +$2 " && return
    sleep 0.1
  done
  echo "$1 is not $2 after 20s; see $dir/*.log" >&2
  exit 1
}
show_log() { # node pattern
  grep -E "$2" "$dir/$1.log" | sed -E 's/\x1b\[[0-9;]*m//g; s/^[^ ]+ +//' | tail -n "${3:-6}" | sed "s/^/   [$1] /"
}

say "Starting warden on n1, then on n2"
note "Each warden joins the election in ZooKeeper; the winner starts the service."
start n1
first=$(wait_active)
start n2
wait_role n2 standby
status
note "The service writes its own journal: $dir/$first.journal"
note "It was started with WARDEN_EPOCH, the fencing token: $(grep -m1 start "$dir/$first.journal" | grep -o 'epoch=[0-9]*')"

# --- 5. Act one: the active dies hard --------------------------------------------------
say "Act 1: kill -9 the active warden ($first)"
note "Its service dies with it (parent-death signal). ZooKeeper notices only when the"
note "session times out (2s); then the standby fences what is left and takes over."
eval "kill -KILL \$pid_$first"
t0=$(date +%s%N)
second=$(wait_active "$first")
t1=$(date +%s%N)
note "new active: $second after $(( (t1 - t0) / 1000000 )) ms"
show_log "$second" "transition|fenc" 5
status

# --- 6. Act two: the active freezes, its service keeps running -------------------------
say "Restarting $first: it comes back as a standby"
start "$first"
wait_role "$first" standby
status

say "Act 2: freeze the active warden ($second) with SIGSTOP"
note "This is the dangerous case: a hung machine whose service still runs. The frozen"
note "warden cannot stop it. The standby must kill it (fence) BEFORE it starts its own."
svc=$(grep start "$dir/$second.journal" | tail -n1 | grep -o 'pid=[0-9]*' | cut -d= -f2)
note "$second's service (pid $svc) is still running: $(alive "$svc" && echo yes || echo no)"
eval "kill -STOP \$pid_$second"
third=$(wait_active "$second")
note "new active: $third"
show_log "$third" "transition|fenc" 6
alive "$svc" && broken "$second's service (pid $svc) still runs after $third took over"
note "$second's service (pid $svc) still running? no: it was fenced"
status

say "What the services wrote (start lines; epochs only grow, runs never overlap)"
grep -h '^start' "$dir"/n1.journal "$dir"/n2.journal | sort -k2 -n | sed 's/^/   /'
starts=$(grep -h '^start' "$dir"/n1.journal "$dir"/n2.journal | wc -l)
[ "$starts" -eq 3 ] || broken "the services started $starts times, not 3"
grep -h '^start' "$dir"/n1.journal "$dir"/n2.journal | sort -k2 -n |
  awk '{ e = $5; sub(/^epoch=/, "", e); if (NR > 1 && e + 0 <= last) exit 1; last = e + 0 }' ||
  broken "a service started with an epoch not above the one before it"

say "Done. Cleaning up."
