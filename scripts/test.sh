#!/usr/bin/env bash
# warden's whole test suite, as CI runs it (.ci/run calls this).
#
# On a fresh Debian machine it first installs what the tests need: ZooKeeper, MariaDB, Redis and
# PostgreSQL 15 (the tests
# start their own servers on loopback ports), sshd and the ClusterLabs fence agents (for
# the fencing tests), and OpenSSL headers for the ssh2 crate. Then it builds everything
# and runs every test of the workspace. Extra arguments go to the test runner, e.g.
#   scripts/test.sh election      # only the tests whose name contains "election"
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(zookeeper openssh-server fence-agents libssl-dev pkg-config nftables mariadb-server mariadb-client redis-server postgresql-15)

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]} > 0)); then
    echo "test.sh: installing ${missing[*]}"
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        sudo=(sudo)
    fi
    "${sudo[@]}" apt-get update
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${packages[@]}"
fi

# The stuck-service tests mount a FUSE file system that never answers (tests/common/
# hung_mount.rs): the kernel's fuse module must be loaded.
if [ ! -e /dev/fuse ]; then
    as_root=()
    [ "$(id -u)" -ne 0 ] && as_root=(sudo)
    "${as_root[@]}" modprobe fuse 2>/dev/null ||
        echo "test.sh: /dev/fuse is missing and 'modprobe fuse' failed: the stuck-service tests will fail" >&2
fi

if ! command -v cargo >/dev/null; then
    echo "test.sh: cargo is missing: install Rust 1.85 or later (rustup, or Debian's cargo package)" >&2
    exit 1
fi

cargo build --workspace --all-targets

# Packaging (issue 7): build the deb and rpm, install, upgrade and purge them (needs root;
# it purges what it installed). Only for whole-suite runs; the debug build keeps CI fast
# (the release build is what `packaging/build.sh` ships).
packaging=0
if (($# == 0)); then
    packaging/test.sh --profile dev || packaging=$?
fi

status=0
# Fuzzing (issues 11 and 16): every cargo-fuzz target of fuzz/ for FUZZ_SECONDS (60) each,
# from the committed corpus. Only for whole-suite runs, like packaging; before the tests,
# so that the test runner's summary stays the last line.
if (($# == 0)); then
    scripts/fuzz.sh || status=$?
fi

# The simulation (issue 12): 20,000 seeds of the real daemon in release (the debug build
# of the suite below runs 2,000). Only for whole-suite runs.
if (($# == 0)); then
    cargo test --release --test sim -- simulated_daemons_keep_every_invariant --nocapture || status=$?
fi

# nextest runs every test in its own process and closes with one summary line for the
# whole workspace; without it, cargo test (one "test result" line per test binary).
if cargo nextest --version >/dev/null 2>&1; then
    # nextest does not run doc tests.
    cargo test --workspace --doc
    cargo nextest run --workspace --no-fail-fast "$@" || status=$?
else
    cargo test --workspace --no-fail-fast "$@" || status=$?
fi
if ((packaging != 0)); then
    echo "test.sh: the packaging test failed (exit $packaging); see its output above" >&2
    exit "$packaging"
fi
exit "$status"
