#!/usr/bin/env bash
# Installs the Debian packages some test tiers need (listed one per line in
# tools/test-system-packages.txt; '#' starts a comment). The README's test
# command runs this first, so a fresh machine needs nothing done by hand.
# Does nothing when every package is already installed; otherwise it needs
# root (or sudo) and apt-get, and says exactly what to install if it has neither.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/test-system-packages.txt" | grep -v '^$' || true)
[ ${#wanted[@]} -eq 0 ] && exit 0
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "muser tests need these system packages (no apt-get here): ${missing[*]}" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then sudo="sudo"; else
    echo "muser tests need these system packages; run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
echo "installing system packages for the tests: ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
