#!/usr/bin/env bash
# The long fault campaign on the shipped recipes (issue 32, point 4): ROUNDS rounds (default
# 1000) per recipe, Redis then PostgreSQL, each printing its table. The default suite runs
# 20 rounds per recipe; this is the long run the README reports.
#
#   scripts/campaign.sh [ROUNDS] [redis|postgresql]
#
# WARDEN_CAMPAIGN_SEED=N replays seed N's plan (printed at the start of each run and in
# every failure). Needs root (cgroups and nftables for the partitions), and the packages
# scripts/test.sh installs (ZooKeeper, Redis, PostgreSQL 15, nftables).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

rounds=${1:-1000}
only=${2:-}
case "$rounds" in
'' | *[!0-9]*)
    echo "campaign.sh: ROUNDS must be a whole number, not '$rounds'" >&2
    exit 2
    ;;
esac

status=0
for recipe in redis postgresql; do
    if [ -n "$only" ] && [ "$only" != "$recipe" ]; then
        continue
    fi
    started=$(date +%s)
    echo "campaign.sh: $recipe, $rounds rounds"
    WARDEN_CAMPAIGN_ROUNDS=$rounds cargo test --release --test "campaign_$recipe" -- --nocapture || status=$?
    echo "campaign.sh: $recipe took $(($(date +%s) - started)) s (exit $status)"
done
exit "$status"
