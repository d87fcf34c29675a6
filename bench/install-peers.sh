#!/usr/bin/env bash
# Installs the peer tools `hetch-lab bench` (and bench/core.sh) compares hetch against, with
# apt-get: rsync and scp over OpenSSH, rclone (sftp), GridFTP (globus-gridftp-server +
# globus-url-copy), XRootD (xrootd + xrdcp), and iperf3 as the memory-to-memory limit.
# Idempotent: packages already present are left alone, and `apt-get update` runs at
# most once (only when something is missing). Needs root (or sudo).
set -euo pipefail

PKGS=(iperf3 fio rsync openssh-server openssh-client time procps psmisc python3 openssl coreutils tar util-linux
    iproute2 rclone awscli globus-gridftp-server-progs globus-gass-copy-progs xrootd-server xrootd-client)

# xrootd refuses to run as root; the bench runs it as this user (Debian's package does
# not create one).
XRD_USER=xrootd

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

ensure_xrootd_user() {
    if ! id -u "$XRD_USER" >/dev/null 2>&1; then
        echo "install-peers: creating system user $XRD_USER"
        $SUDO useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$XRD_USER"
    fi
}

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed'; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    ensure_xrootd_user
    echo "install-peers: all present: ${PKGS[*]}"
    exit 0
fi

echo "install-peers: installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# iperf3 asks whether to start a system daemon: no (the bench starts its own).
echo "iperf3 iperf3/start_daemon boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
$SUDO apt-get update -q
# policy-rc.d keeps package scripts from starting system services (sshd, iperf3,
# xrootd, gridftp) in containers; the bench runs its own instances on spare ports.
restore_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    restore_policy=1
fi
trap '[ "$restore_policy" = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d' EXIT
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
ensure_xrootd_user
echo "install-peers: done"
