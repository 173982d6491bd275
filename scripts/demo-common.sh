# Sourced by scripts/demo.sh and scripts/demo-redis.sh: what both demos do alike.
# Expects $dir (a scratch dir) and the pids array before start_zookeeper.

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
note() { printf '   %s\n' "$*"; }

# Installs the Debian packages named that are missing; needs cargo to be there already.
ensure_packages() { # package...
  if [ $# -gt 0 ]; then
    say "Installing $* (Debian packages)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is not installed: install Rust (https://rustup.rs or Debian's cargo package) and run this again" >&2
    exit 1
  fi
}

# The packages both demos need that are missing, on stdout.
missing_base_packages() {
  [ -f /usr/share/java/zookeeper.jar ] || echo zookeeper
  command -v java >/dev/null 2>&1 || echo default-jre-headless
  command -v pkg-config >/dev/null 2>&1 || echo pkg-config
  dpkg-query -W -f='${Status}' libssl-dev 2>/dev/null | grep -q "ok installed" || echo libssl-dev
}

# Builds the binaries named (debug) and sets bindir to where they are; with
# WARDEN_BIN_DIR set, uses the ones there instead (the tests run the demos so, on the
# binaries they were built with).
build_bins() { # bin...
  if [ -n "${WARDEN_BIN_DIR:-}" ]; then
    bindir=$WARDEN_BIN_DIR
    return
  fi
  say "Building warden"
  local args=()
  for b in "$@"; do args+=(--bin "$b"); done
  cargo build --quiet "${args[@]}"
  bindir="$here/target/debug"
}

# Whether the process runs (a zombie, killed but not yet reaped, does not).
alive() { # pid
  kill -0 "$1" 2>/dev/null && [ "$(awk '/^State:/{print $2}' "/proc/$1/status" 2>/dev/null)" != Z ]
}

# Says that a claim the demo just made does not hold, and stops it (keeping its logs).
broken() { # what...
  echo "error: $*: this is a bug in warden or in this demo; the logs are in $dir" >&2
  exit 1
}

# A port nothing listens on, outside the kernel's range for outgoing connections: a port
# in that range may be the local end of a connection (to ZooKeeper, say), which no
# connect finds, and then the server's bind fails ("Address already in use").
free_port() {
  local p from=10000 to=32767 low high
  if read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null; then
    if [ "$low" -gt 11000 ]; then to=$((low - 1));
    elif [ "$high" -lt 64000 ]; then from=$((high + 1)) to=65535;
    else from=20000 to=60000; fi
  fi
  while :; do
    p=$(shuf -i "$from-$to" -n 1)
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

# Starts a standalone ZooKeeper on loopback in $dir/zk; sets zkport.
start_zookeeper() {
  zkport=$(free_port)
  mkdir -p "$dir/zk"
  cat >"$dir/zoo.cfg" <<ZOO
tickTime=100
minSessionTimeout=200
maxSessionTimeout=60000
dataDir=$dir/zk
clientPort=$zkport
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
ZOO
  # Without an slf4j binding on the classpath, ZooKeeper logs nothing at all.
  local cp=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar zk
  [ -f /usr/share/java/slf4j-simple.jar ] && cp=$cp:/usr/share/java/slf4j-simple.jar
  # (Each client that closes its socket, as every `warden status` does, would log a
  # stack trace at WARN.)
  java -cp "$cp" -XX:+UseSerialGC -Xmx256m \
    -Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=error \
    org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >"$dir/zk.log" 2>&1 &
  zk=$!
  pids+=($zk)
  disown $zk
  for _ in $(seq 1 150); do
    [ "$(ruok)" = imok ] && return
    kill -0 "$zk" 2>/dev/null || break
    sleep 0.1
  done
  echo "ZooKeeper did not start on port $zkport; the end of its log ($dir/zk.log):" >&2
  tail -n 20 "$dir/zk.log" >&2
  exit 1
}
ruok() { (exec 3<>"/dev/tcp/127.0.0.1/$zkport" && printf ruok >&3 && timeout 1 cat <&3) 2>/dev/null; }
