#!/usr/bin/env bash
# Builds the deb and rpm packages of warden.
#
#   packaging/build.sh                  # target/debian/warden_<version>-1_<arch>.deb
#                                       # target/generate-rpm/warden-<version>-1.<arch>.rpm
#   packaging/build.sh --revision 2 --out /tmp/pkgs
#
# --revision N   the packaging revision: deb version <version>-N, rpm release N (default 1)
# --out DIR      write both packages to DIR instead of the tools' default places
# --profile P    the cargo profile (default release). packaging/test.sh --profile dev
#                packages the debug build the test suite made already, to save a
#                release build in CI; packages for operators are release builds.
#
# Steps: a release build of the warden binary (only that one: the workspace's other
# binaries are tests and demos); the shell completions and the man page, generated from
# the CLI definition by warden's hidden `completions` and `manpage` commands, and a
# stripped copy of the binary for the rpm, into target/packaging/; then
# `cargo deb --no-build` and `cargo generate-rpm`, which take their file lists from
# [package.metadata.deb] and [package.metadata.generate-rpm] in Cargo.toml.
# Needs cargo-deb and cargo-generate-rpm (cargo install cargo-deb cargo-generate-rpm);
# packaging/test.sh installs them.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

revision=1
out=
profile=release
while (($# > 0)); do
    case $1 in
    --revision) revision=${2:?--revision needs a number}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --profile) profile=${2:?--profile needs a cargo profile}; shift 2 ;;
    *) echo "build.sh: unknown argument '$1' (see the top of $0)" >&2; exit 2 ;;
    esac
done

for tool in deb generate-rpm; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
        echo "build.sh: cargo $tool is missing: cargo install cargo-deb cargo-generate-rpm" >&2
        exit 1
    fi
done

cargo build --profile "$profile" -p warden --bin warden

# The binary is where CARGO_TARGET_DIR says (cargo-deb and cargo-generate-rpm know that);
# the generated files always go to ./target/packaging, where Cargo.toml's asset lists
# look for them.
profile_dir=$profile
[[ $profile == dev ]] && profile_dir=debug
warden=${CARGO_TARGET_DIR:-target}/$profile_dir/warden
gen=target/packaging
mkdir -p "$gen"
"$warden" completions bash >"$gen/warden.bash"
"$warden" completions zsh >"$gen/_warden"
"$warden" completions fish >"$gen/warden.fish"
"$warden" manpage | gzip -9n >"$gen/warden.1.gz"
# cargo-deb strips the binary it packages; cargo-generate-rpm takes this stripped copy.
strip -o "$gen/warden" "$warden"

deb_args=(--no-build -p warden --deb-revision "$revision" --profile "$profile")
rpm_args=(--set-metadata "release = \"$revision\"" --profile "$profile")
if [[ -n $out ]]; then
    mkdir -p "$out"
    deb_args+=(--output "$out")
    rpm_args+=(--output "$out")
fi
cargo deb "${deb_args[@]}"
cargo generate-rpm "${rpm_args[@]}"
