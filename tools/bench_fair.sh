#!/usr/bin/env bash
# CPU shares between uids on the fast path (tools/bench_fair.py): a fresh
# store under DIR, mounted allow_other by KVFS_BINARY, root's LOOKUPs alone
# and against uid 65534's many threads. Extra arguments go to the script.
# usage: tools/bench_fair.sh KVFS_BINARY DIR [bench_fair.py options]
set -euo pipefail
KVFS=$1 DIR=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
STORE=$DIR/store MNT=$DIR/mnt LOG=$DIR/daemon.log
trap 'fusermount3 -u "$MNT" 2>/dev/null || true' EXIT
mkdir -p "$MNT"
chmod 755 "$DIR"                  # uid 65534 reaches the mount
[ -d "$STORE" ] || "$KVFS" mkfs "$STORE" > /dev/null
"$KVFS" mount "$STORE" "$MNT" -f -o allow_other > "$LOG" 2>&1 &
for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
mountpoint -q "$MNT" || { echo "bench_fair: no mount: $(tail -3 "$LOG")" >&2; exit 1; }
python3 "$HERE/bench_fair.py" "$MNT" "$@"
