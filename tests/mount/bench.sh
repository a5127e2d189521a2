#!/usr/bin/env bash
# `kvfs bench --quick`: the benchmark builds its own store, mounts it with its
# own daemon, reads every page back four ways (checking each one) and cleans
# up. It must succeed and report all four methods.
. "$(dirname "$0")/lib.sh"

# bench mounts under its own workspace; detach it should bench die midway
CLEANUP_HOOK='grep -q " $T/bench/mnt fuse" /proc/mounts && fusermount3 -u -z "$T/bench/mnt"'
rc=0
"$KVFS" bench --quick --dir "$T/bench" > "$T/out" 2> "$T/err" || rc=$?
if [ $rc -ne 0 ]; then
	cat "$T/out" "$T/err" >&2
	fail "kvfs bench --quick exited with status $rc"
fi
cat "$T/out"
for m in fast fuse raw files; do
	grep -Eq "^  $m +[0-9.]+ +[0-9]+ " "$T/out" || fail "no result line for method $m"
done
[ "$(grep -c 'fast/raw' "$T/out")" = 4 ] || fail "expected ratios for 4 page sizes"
[ ! -e "$T/bench" ] || fail "bench left $T/bench behind: $(ls -A "$T/bench")"

# --json: one object per line, one read result per size and method
"$KVFS" bench --quick --sizes 64K --json --dir "$T/bench" > "$T/json" 2> "$T/err" ||
	{ cat "$T/err" >&2; fail "kvfs bench --quick --json"; }
python3 - "$T/json" <<'PY' || fail "bad --json output: $(cat "$T/json")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
reads = {r["method"] for r in rows if r["event"] == "read"}
assert reads == {"fast", "fuse", "raw", "files"}, reads
assert all(r["gbps"] > 0 for r in rows if r["event"] == "read")
assert any(r["event"] == "ratio" for r in rows)
PY
echo PASS
