#!/usr/bin/env bash
# Installs the peer tools bench/core.sh compares hetch against, with apt-get.
# Idempotent: packages already present are left alone, and `apt-get update` runs at
# most once (only when something is missing). Needs root (or sudo).
set -euo pipefail

PKGS=(iperf3 fio rsync openssh-server openssh-client time procps psmisc python3 openssl coreutils tar util-linux)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed'; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-peers: all present: ${PKGS[*]}"
    exit 0
fi

echo "install-peers: installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# iperf3 asks whether to start a system daemon: no (core.sh starts its own).
echo "iperf3 iperf3/start_daemon boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
$SUDO apt-get update -q
# policy-rc.d keeps package scripts from starting system services (sshd, iperf3) in
# containers; core.sh runs its own instances on spare ports.
restore_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    restore_policy=1
fi
trap '[ "$restore_policy" = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d' EXIT
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-peers: done"
