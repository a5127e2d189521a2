#!/usr/bin/env bash
# Page files held open unsealed by uid 65534 (tools/bench_holdopen.py): a
# fresh store under DIR, mounted allow_other by KVFS_BINARY with its
# default write-back budget. Extra arguments go to the script.
# usage: tools/bench_holdopen.sh KVFS_BINARY DIR [bench_holdopen.py options]
set -euo pipefail
KVFS=$1 DIR=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
STORE=$DIR/store MNT=$DIR/mnt LOG=$DIR/daemon.log
rm -rf "$STORE"
mkdir -p "$MNT"
chmod 755 "$DIR"                  # uid 65534 reaches the mount
"$KVFS" mkfs "$STORE" > /dev/null
"$KVFS" mount "$STORE" "$MNT" -f -o allow_other > "$LOG" 2>&1 &
DPID=$!
trap 'fusermount3 -u "$MNT" 2>/dev/null || true; wait $DPID 2>/dev/null || true; rm -rf "$STORE"' EXIT
for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
mountpoint -q "$MNT" || { echo "bench_holdopen: no mount: $(tail -3 "$LOG")" >&2; exit 1; }
python3 "$HERE/bench_holdopen.py" "$MNT" "$DPID" "$@"
