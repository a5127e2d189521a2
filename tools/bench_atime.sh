#!/usr/bin/env bash
# What the access-time flush costs: mounts an existing store, waits until
# its index is loaded, reads N pages of one layer through the mount (each
# read sets the page's access time), waits for the next flush (the
# committer writes access times when idle, at most every 30 s) and prints
# the CPU time the committer's thread spent meanwhile, with the daemon's
# VmRSS. Run it on a store the meta case of `kvfs bench --keep` left
# (STORE = DIR/store, LAYER = benchm/00), with two binaries, to compare.
#
#   tools/bench_atime.sh STORE LAYER [--reads N] [--kvfs BIN]
# Defaults: 100 reads, build/tools/kvfs. Run as root (FUSE mount). One
# line of results on stdout, as key=value pairs.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
STORE=$1 LAYER=$2
shift 2
READS=100 KVFS=$PWD/build/tools/kvfs
while [ $# -gt 0 ]; do
	case $1 in
	--reads) READS=$2; shift 2 ;;
	--kvfs) KVFS=$2; shift 2 ;;
	*) sed -n '2,12p' "$0" >&2; exit 2 ;;
	esac
done
MNT=$(mktemp -d /tmp/kvfs-bench-atime.XXXXXX)
LOG=$MNT.log
"$KVFS" mount "$STORE" "$MNT" -f -o ram_cache=0 >"$LOG" 2>&1 &
DAEMON=$!
cleanup() {
	"$KVFS" umount "$MNT" 2>/dev/null || fusermount3 -u "$MNT" 2>/dev/null || true
	wait "$DAEMON" 2>/dev/null || true
	rmdir "$MNT" 2>/dev/null || true
	rm -f "$LOG"
}
trap cleanup EXIT
for _ in $(seq 1 3000); do
	grep -q "loaded in the background" "$LOG" && break
	kill -0 "$DAEMON" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
	sleep 0.2
done
grep -q "loaded in the background" "$LOG" || { echo "index not loaded in 600 s" >&2; exit 1; }

# Ticks (1/100 s) the committer's thread ran, user and system.
committer_ticks() {
	local t
	for t in /proc/"$DAEMON"/task/*; do
		if [ "$(cat "$t/comm")" = kvfs-commit ]; then
			awk '{ print $14 + $15 }' "$t/stat"
			return
		fi
	done
	echo "no kvfs-commit thread in $DAEMON" >&2
	exit 1
}

before=$(committer_ticks)
n=0
while read -r name; do
	cat "$MNT/$LAYER/$name" >/dev/null
	n=$((n + 1))
done < <(find "$MNT/$LAYER" -maxdepth 1 -type f -printf '%f\n' | head -n "$READS")
sleep 40                       # one flush, whatever the committer's timer
after=$(committer_ticks)
rss=$(awk '/VmRSS/ { print $2 }' /proc/"$DAEMON"/status)
echo "reads=$n committer_cpu_ms=$(( (after - before) * 10 )) rss_kb=$rss"
