#!/usr/bin/env bash
# warden demo on real Redis (`scripts/demo.sh redis`): a local ZooKeeper, two Redis
# servers, two wardens moving the primary with the hooks of examples/redis, and a client
# that keeps writing to whichever Redis is the primary: through a planned switchover
# (the old primary refuses writes once the new one has them all, then n2's warden
# promotes it: nothing lost) and a kill -9 of the active's warden (its Redis is fenced
# before the other is promoted). Cleans up everything it started, even on Ctrl-C.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

. "$here/scripts/demo-common.sh"

mapfile -t need < <(missing_base_packages)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
ensure_packages "${need[@]}"

build_bins warden
warden="$bindir/warden"
hooks="$here/examples/redis/warden-redis"

dir=$(mktemp -d /tmp/warden-demo-redis.XXXXXX)
pids=()
cleanup() {
  local status=$?
  set +e
  for p in "${pids[@]}"; do
    kill -CONT "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  for n in n1 n2; do
    [ -f "$dir/$n/redis.pid" ] && kill -KILL "$(cat "$dir/$n/redis.pid")" 2>/dev/null
  done
  # A failed demo keeps its logs: the message that failed it points there.
  if [ "${KEEP:-0}" = 1 ] || [ "$status" != 0 ]; then echo "kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "Starting a local ZooKeeper"
start_zookeeper
note "configs and logs go to $dir (removed at the end; KEEP=1 keeps them)"

say "Starting two Redis servers (appendonly, a shared password for replication)"
pw="demo-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
for n in n1 n2; do
  port=$(free_port)
  mkdir -p "$dir/$n"
  printf '%s\n' "$pw" >"$dir/$n/redis.pass"
  chmod 600 "$dir/$n/redis.pass"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir/$n" --save '' --appendonly yes \
    --requirepass "$pw" --masterauth "$pw" --pidfile "$dir/$n/redis.pid" \
    --logfile "$dir/$n/redis.log" --daemonize no --min-replicas-to-write 1000000 --min-replicas-max-lag 10 \
    --repl-diskless-sync-delay 0 &
  pids+=($!)
  disown $!
  eval "port_$n=$port"
  cat >"$dir/$n/redis.env" <<EOF
REDIS_HOST=127.0.0.1
REDIS_PORT=$port
REDIS_PASSWORD_FILE=$dir/$n/redis.pass
REDIS_TIMEOUT=1
EOF
  cat >"$dir/$n.toml" <<EOF
[cluster]
name = "demo-redis"
node_id = "$n"
host = "127.0.0.1"
port = $port                 # this node's Redis: followers replicate host:port

[coordination.zookeeper]
connect = "127.0.0.1:$zkport"
session_timeout = "2s"         # short for the demo; warden warns that with hook_timeout
connect_timeout = "1s"         # 3s one late renewal demotes the active (the shipped
                               # examples/redis/warden.toml uses 10s)

[service]
mode = "hooks"               # Redis always runs; warden moves the primary role
promote = ["$hooks", "promote", "$dir/$n/redis.env"]
demote = ["$hooks", "demote", "$dir/$n/redis.env"]
follow = ["$hooks", "follow", "$dir/$n/redis.env"]
hook_timeout = "3s"
pidfile = "$dir/$n/redis.pid"

[health]
kind = "tcp"                 # the active's Redis answers on its port
address = "127.0.0.1:$port"
standby_command = ["$hooks", "standby-check", "$dir/$n/redis.env"]
interval = "500ms"
timeout = "500ms"

[[fence]]
kind = "signal"
signal = "SIGKILL"
timeout = "3s"
EOF
done
rcli() { REDISCLI_AUTH="$pw" timeout 3 redis-cli --no-auth-warning -h 127.0.0.1 -p "$1" "${@:2}"; }
for n in n1 n2; do
  eval "p=\$port_$n"
  for i in $(seq 1 101); do
    [ "$(rcli "$p" PING 2>/dev/null)" = PONG ] && break
    if [ "$i" = 101 ]; then
      echo "$n's Redis does not answer on port $p after 10s; the end of its log:" >&2
      tail -n 5 "$dir/$n/redis.log" >&2
      exit 1
    fi
    sleep 0.1
  done
done
note "n1's Redis on port $port_n1, n2's on $port_n2; both start refusing writes"

start() {
  RUST_LOG=info "$warden" -c "$dir/$1.toml" run >>"$dir/$1.log" 2>&1 &
  pids+=($!)
  eval "pid_$1=$!"
  disown $!
}
status() { "$warden" -c "$dir/n1.toml" status | sed 's/^/   /'; }
active() { "$warden" -c "$dir/n1.toml" status --json 2>/dev/null | grep -o '"active":{[^}]*}' | grep -o '"node_id":"[^"]*"' | cut -d'"' -f4 || true; }
wait_for() { # description command...
  local what=$1; shift
  for _ in $(seq 1 300); do "$@" && return; sleep 0.1; done
  echo "timed out waiting until $what; see $dir" >&2
  exit 1
}
is_active() { [ "$(active)" = "$1" ]; }
standby() { "$warden" -c "$dir/n1.toml" status | grep -qE "^$1 +standby +healthy"; }
# A healthy standby whose Redis has finished its first sync from the primary.
replica() { # node port
  standby "$1" && rcli "$2" INFO replication 2>/dev/null | tr -d '\r' | grep -q '^master_link_status:up$'
}

say "Starting warden on n1, then on n2"
start n1
wait_for "n1 is active" is_active n1
start n2
wait_for "n2 is a healthy standby with its Redis in sync" replica n2 "$port_n2"
status

say "A client writes a counter to whichever Redis is the primary, every 50 ms"
(
  i=0
  while :; do
    i=$((i + 1))
    for p in $port_n1 $port_n2; do
      if [ "$(rcli "$p" SET last "$i" 2>/dev/null)" = OK ]; then
        rcli "$p" RPUSH writes "$i" >/dev/null 2>&1
        break
      fi
    done
    sleep 0.05
  done
) &
client=$!
pids+=($client)
disown $client
sleep 1

say "Act 1: a planned switchover to n2 (n1 refuses writes once n2 has them all; n2's warden promotes it: nothing lost)"
"$warden" -c "$dir/n1.toml" failover --to n2 | sed 's/^/   /'
wait_for "n1 is a healthy standby with its Redis in sync" replica n1 "$port_n1"
sleep 1
note "writes on n2 (the primary): $(rcli "$port_n2" LLEN writes)"
note "n1 replicates n2: $(rcli "$port_n1" INFO replication | tr -d '\r' | grep -E '^(role|master_port|master_link_status):' | tr '\n' ' ')"

say "Act 2: kill -9 the active warden (n2); its Redis still runs as the primary"
eval "kill -KILL \$pid_n2"
note "n1 fences n2's Redis (by its pidfile) once n2's session expires, then promotes its own"
wait_for "n1 is active" is_active n1
sleep 1
kill -KILL "$client" 2>/dev/null || true
alive "$(cat "$dir/n2/redis.pid")" && broken "n2's Redis still runs after n1 took over"
note "n2's Redis still running? no: it was fenced"
total=$(rcli "$port_n1" LLEN writes)
last=$(rcli "$port_n1" GET last)
note "writes on n1 (the primary again): $total, the last one $last"
missing=$(rcli "$port_n1" LRANGE writes 0 -1 | awk 'NR>1 && $1 != prev + 1 {gap += $1 - prev - 1} {prev = $1} END {print gap + 0}')
note "counter values missing from the list: $missing (writes tried while no Redis took them, during the failovers)"
status

say "Done. Cleaning up."
