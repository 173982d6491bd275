#!/usr/bin/env bash
# The packaging test (issue 7): builds the deb and the rpm, then on this machine
#   1. builds both packages (packaging/build.sh);
#   2. installs the deb: files, owners and modes, `warden --version`, the warden user,
#      `systemd-analyze verify` of warden.service and warden@rm.service;
#   3. upgrades twice after editing /etc/warden/warden.toml: to a rebuilt package with a
#      higher revision (same reference config), then to one whose reference config
#      changed too (dpkg --force-confold); the edit must survive both;
#   4. removes and purges it: the package's files, directories and (when nothing of the
#      operator's belongs to it) the warden user go; the operator's files stay;
#   5. inspects the rpm (rpm -qlp, rpm -qp --scripts, rpm -qpc, file flags and owners);
#   6. installs, upgrades and erases the rpm with Debian's rpm, so that the scriptlets run
#      with rpm's arguments.
# One PASS or FAIL line per check, then "N passed, M failed"; exits 1 if any failed.
#
#   packaging/test.sh                 # packages a release build (as build.sh does)
#   packaging/test.sh --profile dev   # packages the debug build instead: no release
#                                     # build, for a CI that built the workspace already
#
# It installs and purges the warden package and creates and deletes the warden user, so
# it must run as root, on a machine (or container) where warden is not installed; it
# refuses otherwise. On a fresh Debian it installs what it needs: rpm, systemd (for
# systemd-analyze), dpkg-dev (dpkg-shlibdeps for the deb's dependencies), and
# cargo-deb and cargo-generate-rpm (compiled by cargo install, a few minutes).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
repo=$PWD

profile=release
while (($# > 0)); do
    case $1 in
    --profile) profile=${2:?--profile needs a cargo profile}; shift 2 ;;
    *) echo "test.sh: unknown argument '$1' (see the top of $0)" >&2; exit 2 ;;
    esac
done

passed=0
failed=0
pass() {
    echo "PASS: $1"
    passed=$((passed + 1))
}
fail() {
    echo "FAIL: $1"
    failed=$((failed + 1))
}
# check DESCRIPTION COMMAND...: PASS if the command succeeds; FAIL with its output if not.
check() {
    local desc=$1 output
    shift
    if output=$("$@" 2>&1); then
        pass "$desc"
    else
        fail "$desc"
        # The end of the output says why (a failed build says a lot before that).
        [[ -n $output ]] && tail -n 40 <<<"$output" | sed 's/^/      /'
    fi
}
summary() {
    echo "$passed passed, $failed failed"
}
die() {
    fail "$1"
    summary
    exit 1
}
step_started=$SECONDS
step() {
    echo
    echo "== $1"
}
elapsed() {
    echo "   ($1: $((SECONDS - step_started))s)"
    step_started=$SECONDS
}

if [[ $(id -u) -ne 0 ]]; then
    die "packaging test: must run as root (it installs and purges the warden package with dpkg and rpm and creates the warden user); run it in a scratch container or VM"
fi

# True while dpkg knows the warden package, installed or with its config files left.
deb_known() {
    local status
    status=$(dpkg-query -W -f='${Status}' warden 2>/dev/null)
    [[ -n $status && $status != *not-installed ]]
}
if deb_known || [[ -e /etc/warden ]] ||
    getent passwd warden >/dev/null || { command -v rpm >/dev/null && rpm -q warden >/dev/null 2>&1; }; then
    die "packaging test: warden is installed here already (package, /etc/warden or the warden user); this test installs and purges it, so it runs only on a machine without: dpkg -P warden, or use a scratch container"
fi

# --- what the test needs ----------------------------------------------------------------

step "0. tools"
need=()
command -v rpm >/dev/null || need+=(rpm)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
command -v strip >/dev/null || need+=(binutils)
if ((${#need[@]} > 0)); then
    echo "installing ${need[*]}"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; }; then
        die "apt-get install ${need[*]}"
    fi
fi
# Major versions pinned: their metadata formats are what Cargo.toml is written for.
tools=()
cargo deb --version >/dev/null 2>&1 || tools+=(cargo-deb@^3)
cargo generate-rpm --version >/dev/null 2>&1 || tools+=(cargo-generate-rpm@^0.21)
if ((${#tools[@]} > 0)); then
    echo "cargo install ${tools[*]}"
    cargo install --locked "${tools[@]}" || die "cargo install ${tools[*]}"
fi
elapsed "tools"

work=$(mktemp -d /tmp/warden-packaging-test.XXXXXX)
# Files the test creates in the operator's place; cleanup deletes exactly these.
operator_files=(/etc/warden/ssh/id_ed25519 /etc/warden/ssh/known_hosts /etc/warden/rm.toml)
# Quiet, so that the summary stays the last line.
cleanup() {
    rm -f "${operator_files[@]}"
    if command -v rpm >/dev/null && rpm -q warden >/dev/null 2>&1; then
        rpm -e --nodeps warden || true
    fi
    if deb_known; then
        dpkg -P warden >/dev/null || true
    fi
    # Leftovers of a run that failed half-way (e.g. after a purge that kept the user for
    # the operator's files): the package's own purge logic clears them.
    sh "$repo/packaging/debian/postrm" purge >/dev/null 2>&1 || true
    rm -rf "$work"
} >/dev/null 2>&1
trap cleanup EXIT
# Interrupted (Ctrl-C, CI timeout): exit, so that cleanup still runs.
trap 'exit 1' INT TERM HUP

# --- 1. build ---------------------------------------------------------------------------

step "1. build the packages"
check "build.sh builds the deb and the rpm (revision 1, profile $profile)" \
    packaging/build.sh --profile "$profile" --out "$work/r1"
check "build.sh builds revision 2" packaging/build.sh --profile "$profile" --revision 2 --out "$work/r2"
deb1=$(ls "$work"/r1/*.deb 2>/dev/null | head -n1)
deb2=$(ls "$work"/r2/*.deb 2>/dev/null | head -n1)
rpm1=$(ls "$work"/r1/*.rpm 2>/dev/null | head -n1)
rpm2=$(ls "$work"/r2/*.rpm 2>/dev/null | head -n1)
[[ -f $deb1 && -f $deb2 && -f $rpm1 && -f $rpm2 ]] || die "packages missing in $work/r1 and $work/r2"
version=$(dpkg-deb -f "$deb1" Version)
upstream=${version%-*}
check "deb version is <crate version>-1 ($version)" test "$version" = "$upstream-1"
check "the deb packages no demo binary" bash -c "! dpkg-deb -c '$deb1' | grep -q journal-service"
elapsed "$profile build and packaging"

# The reference config changed in a later release: revision 2 repacked with one more line
# in it, as revision 3.
deb3=$work/warden_${upstream}-3.deb
reference_change="# reference config changed in $upstream-3"
repack() {
    rm -rf "$work/unpack" &&
        dpkg-deb -R "$deb2" "$work/unpack" &&
        echo "$reference_change" >>"$work/unpack/etc/warden/warden.toml" &&
        sed -i "s/^Version: .*/Version: $upstream-3/" "$work/unpack/DEBIAN/control" &&
        (cd "$work/unpack" && if [[ -f DEBIAN/md5sums ]]; then
            sed -i "s|^[0-9a-f]*  etc/warden/warden.toml\$|$(md5sum etc/warden/warden.toml)|" DEBIAN/md5sums
        fi) &&
        dpkg-deb --root-owner-group -b "$work/unpack" "$deb3" >/dev/null
}
check "revision 3 with a changed reference config (repacked)" repack

# --- 2. install -------------------------------------------------------------------------

# Paths the local dpkg config excludes from installation (Docker images drop
# /usr/share/man and /usr/share/doc): checked in the package instead of on disk.
excluded() {
    local path=$1 pattern excluded=1
    while read -r pattern; do
        # shellcheck disable=SC2053 # the pattern is a glob on purpose
        case $pattern in
        path-exclude=*) [[ $path == ${pattern#path-exclude=} ]] && excluded=0 ;;
        path-include=*) [[ $path == ${pattern#path-include=} ]] && excluded=1 ;;
        esac
    done < <(cat /etc/dpkg/dpkg.cfg /etc/dpkg/dpkg.cfg.d/* 2>/dev/null | sed 's/^--//' | grep '^path-')
    return $excluded
}
# expect PATH MODE OWNER:GROUP
expect() {
    local path=$1 mode=$2 owner=$3 got
    if excluded "$path"; then
        check "$path is in the package (dpkg path-exclude keeps it off disk here)" \
            bash -c "dpkg-deb -c '$deb1' | grep -q ' \\.$path\$'"
        return
    fi
    got=$(stat -c '%a %U:%G' "$path" 2>&1)
    check "$path is $mode $owner" test "$got" = "$mode $owner"
    [[ $got == "$mode $owner" ]] || echo "      got: $got"
}
expect_gone() {
    check "$1 is gone" test ! -e "$1"
}

step "2. install the deb ($version)"
check "dpkg -i $version" dpkg -i "$deb1"
check "dpkg reports warden $version installed" \
    test "$(dpkg-query -W -f='${Status} ${Version}' warden)" = "install ok installed $version"
units=/lib/systemd/system
expect /usr/bin/warden 755 root:root
expect /etc/warden 750 root:warden
expect /etc/warden/warden.toml 640 root:warden
expect /etc/warden/ssh 700 warden:warden
expect /var/lib/warden 750 warden:warden
expect $units/warden.service 644 root:root
expect "$units/warden@.service" 644 root:root
expect /usr/lib/warden/fence/fence-by-port 755 root:root
expect /usr/lib/warden/fence/fence-true 755 root:root
expect /usr/lib/warden/redis/warden-redis 755 root:root
expect /usr/lib/warden/postgresql/warden-postgresql 755 root:root
expect /usr/share/bash-completion/completions/warden 644 root:root
expect /usr/share/zsh/vendor-completions/_warden 644 root:root
expect /usr/share/fish/vendor_completions.d/warden.fish 644 root:root
expect /usr/share/man/man1/warden.1.gz 644 root:root
check "/etc/warden/warden.toml is a conffile" \
    bash -c "dpkg-query -W -f='\${Conffiles}' warden | grep -q '^ /etc/warden/warden.toml '"
check "the installed config is the reference config" cmp /etc/warden/warden.toml config/warden.toml
check "warden --version prints '$upstream'" bash -c "/usr/bin/warden --version | grep -qx 'warden $upstream'"
check "the man page is roff naming warden" bash -c "dpkg-deb --fsys-tarfile '$deb1' | tar -xOf - ./usr/share/man/man1/warden.1.gz | zcat | grep -q '^\\.TH warden'"
check "the bash completion parses" bash -n /usr/share/bash-completion/completions/warden
check "the zsh completion is a #compdef for warden" bash -c "head -n1 /usr/share/zsh/vendor-completions/_warden | grep -q '^#compdef warden'"
check "the fish completion completes warden" grep -q 'complete -c warden' /usr/share/fish/vendor_completions.d/warden.fish
check "user warden exists: system uid, home /var/lib/warden, shell /bin/sh" bash -c '
    IFS=: read -r _ _ uid gid _ home shell < <(getent passwd warden)
    [[ $uid -lt 1000 && $home == /var/lib/warden && $shell == /bin/sh ]] &&
        [[ $(getent group warden | cut -d: -f3) == "$gid" ]]'
check "nothing is enabled or started by the package" \
    bash -c '! ls /etc/systemd/system/*.wants/warden* 2>/dev/null | grep -q .'

# A config of the operator's for instance "rm", readable by warden through the package's
# permissions on /etc/warden, with the packaged example fence script.
install -m 0640 -o root -g warden /dev/stdin /etc/warden/rm.toml <<'EOF'
[cluster]
name = "rm"
node_id = "rm1"

[coordination.zookeeper]
connect = "127.0.0.1:2181"

[service]
command = ["/bin/sleep", "infinity"]

[[fence]]
kind = "script"
command = ["/usr/lib/warden/fence/fence-true"]
EOF
check "as user warden, check-config accepts /etc/warden/rm.toml (the units' ExecStartPre)" \
    runuser -u warden -- /usr/bin/warden -c /etc/warden/rm.toml check-config
check "check-config refuses the unedited reference config (exit 2): an unconfigured node cannot start" \
    bash -c 'runuser -u warden -- /usr/bin/warden -c /etc/warden/warden.toml check-config >/dev/null 2>&1; [[ $? -eq 2 ]]'

verify_args=()
if ! command -v man >/dev/null || excluded /usr/share/man/man1/warden.1.gz; then
    verify_args+=(--man=no) # Documentation=man:warden(1) can only be checked with the page
fi
check "systemd-analyze verify warden.service" systemd-analyze verify "${verify_args[@]}" $units/warden.service
check "systemd-analyze verify warden@rm.service (the template, instance rm)" \
    systemd-analyze verify "${verify_args[@]}" "$units/warden@rm.service"
# The template must say what the plain unit says, but for the instance's config.
same_units() {
    diff <(grep -v '^#' $units/warden.service) \
        <(grep -v '^#' "$units/warden@.service" |
            sed -e 's| (%i)$||' -e 's|/etc/warden/%i\.toml|/etc/warden/warden.toml|' \
                -e 's|^RuntimeDirectory=warden/%i$|RuntimeDirectory=warden|')
}
check "warden@.service matches warden.service but for the instance's config" same_units
check "the units keep other processes visible in /proc (no ProtectProc=invisible, ProcSubset, PrivatePIDs, PrivateUsers)" \
    bash -c "! grep -Eq '^(ProtectProc=invisible|ProcSubset=pid|PrivatePIDs=yes|PrivateUsers=yes)' $units/warden.service $units/warden@.service"
elapsed "install"

# --- 3. upgrade -------------------------------------------------------------------------

step "3. upgrade with an edited config"
sed -i 's/^node_id = "rm1"$/node_id = "rm7"   # operator edit/' /etc/warden/warden.toml
check "the operator's edit is in place" grep -q '^node_id = "rm7"   # operator edit$' /etc/warden/warden.toml
# Same reference config in the new package: dpkg keeps the edited file without asking.
check "dpkg -i $upstream-2 (the reference config unchanged)" \
    env DEBIAN_FRONTEND=noninteractive dpkg -i "$deb2" </dev/null
check "warden $upstream-2 is installed" test "$(dpkg-query -W -f='${Version}' warden)" = "$upstream-2"
check "the edit survived the upgrade to $upstream-2" grep -q '^node_id = "rm7"   # operator edit$' /etc/warden/warden.toml
# Both sides changed: dpkg would ask; --force-confdef --force-confold keeps the operator's
# file and puts the new reference beside it as warden.toml.dpkg-dist.
check "dpkg --force-confdef --force-confold -i $upstream-3 (the reference config changed)" \
    env DEBIAN_FRONTEND=noninteractive dpkg --force-confdef --force-confold -i "$deb3" </dev/null
check "warden $upstream-3 is installed" test "$(dpkg-query -W -f='${Version}' warden)" = "$upstream-3"
check "the edit survived the upgrade to $upstream-3" grep -q '^node_id = "rm7"   # operator edit$' /etc/warden/warden.toml
check "the new reference config is beside it as warden.toml.dpkg-dist" \
    grep -qx "$reference_change" /etc/warden/warden.toml.dpkg-dist
expect /etc/warden/warden.toml 640 root:warden
expect /etc/warden 750 root:warden
check "the operator's rm.toml is untouched" grep -q '^node_id = "rm1"$' /etc/warden/rm.toml
elapsed "upgrade"

# --- 4. remove and purge ----------------------------------------------------------------

step "4. remove, then purge"
# What an operator does: enable the unit, put the fencing key and known_hosts in place.
check "systemctl enable warden.service works offline" systemctl enable warden.service
install -m 0600 -o warden -g warden /dev/null /etc/warden/ssh/id_ed25519
echo "-----BEGIN OPENSSH PRIVATE KEY----- (test)" >/etc/warden/ssh/id_ed25519
install -m 0644 -o warden -g warden /dev/null /etc/warden/ssh/known_hosts
mapfile -t package_files < <(dpkg-query -L warden | while read -r f; do [[ -f $f ]] && echo "$f"; done)
check "dpkg -r warden" dpkg -r warden
check "dpkg reports config-files only" \
    test "$(dpkg-query -W -f='${Status}' warden)" = "deinstall ok config-files"
expect_gone /usr/bin/warden
expect_gone $units/warden.service
expect_gone "$units/warden@.service"
check "remove keeps the config" grep -q '^node_id = "rm7"' /etc/warden/warden.toml
check "remove keeps the user warden" getent passwd warden

check "dpkg -P warden" dpkg -P warden
deb_gone() { ! deb_known; }
check "dpkg no longer knows warden" deb_gone
left=()
for f in "${package_files[@]}"; do
    [[ -e $f ]] && left+=("$f")
done
check "none of the package's ${#package_files[@]} files is left" test ${#left[@]} -eq 0
((${#left[@]} == 0)) || printf '      left: %s\n' "${left[@]}"
expect_gone /etc/warden/warden.toml.dpkg-dist
expect_gone /usr/lib/warden
expect_gone /var/lib/warden
check "the dangling enable link is gone" test ! -L /etc/systemd/system/multi-user.target.wants/warden.service
check "the operator's key survives, still 0600 warden:warden" \
    test "$(stat -c '%a %U:%G' /etc/warden/ssh/id_ed25519 2>&1)" = "600 warden:warden"
check "the operator's known_hosts and rm.toml survive" test -f /etc/warden/ssh/known_hosts -a -f /etc/warden/rm.toml
check "only the operator's files are left in /etc/warden" \
    test "$(find /etc/warden -type f | sort | tr '\n' ' ')" = "/etc/warden/rm.toml /etc/warden/ssh/id_ed25519 /etc/warden/ssh/known_hosts "
check "the user warden is kept: it owns the operator's key" getent passwd warden

# Without anything of the operator's, a purge leaves nothing at all.
rm -f "${operator_files[@]}"
check "install again, then purge at once" bash -c "dpkg -i '$deb1' >/dev/null && dpkg -P warden >/dev/null"
expect_gone /etc/warden
expect_gone /var/lib/warden
check "the user warden is gone" bash -c '! getent passwd warden'
check "the group warden is gone" bash -c '! getent group warden'
elapsed "remove and purge"

# --- 5. inspect the rpm -----------------------------------------------------------------

step "5. inspect the rpm ($(basename "$rpm1"))"
rpm_list=$(rpm -qlp "$rpm1" 2>&1)
echo "$rpm_list" | sed 's/^/      /'
for f in /usr/bin/warden /etc/warden/warden.toml /usr/lib/systemd/system/warden.service \
    /usr/lib/systemd/system/warden@.service /usr/lib/warden/fence/fence-by-port \
    /usr/lib/warden/fence/fence-true /usr/lib/warden/redis/warden-redis \
    /usr/lib/warden/postgresql/warden-postgresql \
    /usr/share/bash-completion/completions/warden \
    /usr/share/zsh/site-functions/_warden /usr/share/fish/vendor_completions.d/warden.fish \
    /usr/share/man/man1/warden.1.gz; do
    check "rpm -qlp lists $f" grep -qx "$f" <<<"$rpm_list"
done
check "the rpm packages no demo binary" bash -c "! grep -q journal-service <<<'$rpm_list'"
check "rpm -qpc lists exactly /etc/warden/warden.toml" test "$(rpm -qpc "$rpm1" 2>&1)" = /etc/warden/warden.toml
check "the config is %config(noreplace)" bash -c "rpm -qp --qf '[%{FILENAMES} %{FILEFLAGS:fflags}\n]' '$rpm1' | grep -qx '/etc/warden/warden.toml cn'"
check "the config is 0640 root:warden in the rpm" bash -c "rpm -qp --qf '[%{FILENAMES} %{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME}\n]' '$rpm1' | grep -qx '/etc/warden/warden.toml -rw-r----- root:warden'"
rpm_scripts=$(rpm -qp --scripts "$rpm1" 2>&1)
for s in preinstall postinstall preuninstall postuninstall; do
    check "rpm -qp --scripts has a $s scriptlet" grep -q "^$s scriptlet" <<<"$rpm_scripts"
done
check "the scriptlets are the deb's maintainer scripts" bash -c '
    for s in preinst postinst prerm postrm; do
        grep -qF "$(sed -n 2p packaging/debian/$s)" <<<"$1" || exit 1
    done' _ "$rpm_scripts"
check "rpm version is $upstream-1" test "$(rpm -qp --qf '%{VERSION}-%{RELEASE}' "$rpm1")" = "$upstream-1"
elapsed "rpm inspection"

# --- 6. the rpm's scriptlets, for real ---------------------------------------------------

step "6. install, upgrade and erase the rpm (Debian's rpm, --nodeps)"
# Debian's rpm keeps its own database and knows none of dpkg's packages, hence --nodeps;
# --force-debian: it refuses to install on Debian otherwise.
rpm_i() {
    rpm "$@" --nodeps --force-debian
}
check "rpm -i $upstream-1" rpm_i -i "$rpm1"
expect /usr/bin/warden 755 root:root
expect /etc/warden 750 root:warden
expect /etc/warden/warden.toml 640 root:warden
expect /etc/warden/ssh 700 warden:warden
expect /var/lib/warden 750 warden:warden
check "user warden exists" getent passwd warden
sed -i 's/^node_id = "rm1"$/node_id = "rm7"   # operator edit/' /etc/warden/warden.toml
check "rpm -U $upstream-2" rpm_i -U "$rpm2"
check "rpm reports $upstream-2" test "$(rpm -q --qf '%{VERSION}-%{RELEASE}' warden)" = "$upstream-2"
check "the edit survived the rpm upgrade" grep -q '^node_id = "rm7"   # operator edit$' /etc/warden/warden.toml
check "the user warden survived the rpm upgrade" getent passwd warden
check "rpm -e warden" rpm -e warden
expect_gone /usr/bin/warden
expect_gone /usr/lib/warden
check "the edited config is kept as warden.toml.rpmsave" grep -q 'operator edit' /etc/warden/warden.toml.rpmsave
check "the user warden is kept: the .rpmsave belongs to its group" getent passwd warden
rm -f /etc/warden/warden.toml.rpmsave
check "rpm -i, then rpm -e at once" bash -c "rpm -i --nodeps --force-debian '$rpm1' && rpm -e warden"
expect_gone /etc/warden
expect_gone /var/lib/warden
expect_gone /usr/lib/warden
check "the user warden is gone" bash -c '! getent passwd warden'
elapsed "rpm install"

cleanup
trap - EXIT
echo
echo "packaging test: $((SECONDS))s in all"
summary
((failed == 0))
