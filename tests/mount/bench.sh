#!/usr/bin/env bash
# `kvfs bench --quick`: the benchmark builds its own store, mounts it with its
# own daemon, reads every page back four ways (checking each one) and cleans
# up. It must succeed and report all four methods; the conc and meta cases
# too.
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
# The conc case: engine processes at once, against the raw reader and writer,
# with metadata probes under load. Every phase reports positive throughput,
# and the probes ran (stat of unseen names, listings of the 1,000-page layer)
"$KVFS" bench --quick --sizes 64K --cases conc --engines 2 --streams 2 --json \
	--dir "$T/bench" > "$T/conc" 2> "$T/err" ||
	{ cat "$T/err" >&2; fail "kvfs bench --cases conc"; }
python3 - "$T/conc" <<'PY' || fail "bad conc output: $(cat "$T/conc")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
conc = {r["phase"]: r for r in rows if r["event"] == "conc"}
assert set(conc) == {"fast-read", "raw-read", "fast-write", "raw-write"}, conc.keys()
for r in conc.values():
    assert r["engines"] == 2 and r["streams"] == 2, r
    assert r["gbps"] > 0 and r["calls"] > 0, r
    assert r["stats"] > 0 and r["readdirs"] > 0, r
    assert 0 < r["stat_p50_ms"] <= r["stat_p99_ms"], r
    assert 0 < r["readdir_p50_ms"] <= r["readdir_p99_ms"], r
    assert r["readdir_entries"] == 1000, r
    # 4 streams leave FUSE workers free: a generous bound, not a target
    assert r["stat_p99_ms"] < 2000 and r["readdir_p99_ms"] < 5000, r
ratio = [r for r in rows if r["event"] == "conc_ratio"]
assert len(ratio) == 1 and ratio[0]["read_fast_raw"] > 0 and ratio[0]["write_fast_raw"] > 0
PY
[ ! -e "$T/bench" ] || fail "bench left $T/bench behind: $(ls -A "$T/bench")"

# The meta case at 4,000 pages in 4 layers: creating them, the daemon's RAM,
# a remount (with a new page written after it), a cold ls, prefix LOOKUPs of every page (4 calls of 1,024) and
# fsck. Every figure is there and positive; the per-page RAM deltas only
# need to be numbers (a few MB of buffers and noise over 4,000 pages).
"$KVFS" bench --cases meta --meta-pages 4000 --meta-layer-pages 1000 --meta-batch 1024 \
	--json --dir "$T/bench" > "$T/meta" 2> "$T/err" ||
	{ cat "$T/err" >&2; fail "kvfs bench --cases meta"; }
python3 - "$T/meta" <<'PY' || fail "bad meta output: $(cat "$T/meta")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
meta = [r for r in rows if r["event"] == "meta"]
assert len(meta) == 1, rows
m = meta[0]
assert (m["pages"], m["layers"], m["blocks"]) == (4000, 4, 1000), m
for k in ("create_s", "create_pages_per_s", "create_max_call_s", "rss_before_bytes", "rss_created_bytes",
          "hwm_created_bytes", "rss_mounted_bytes", "hwm_mounted_bytes", "mount_s",
          "first_lookup_s", "first_write_s", "mount_s_per_10m_pages", "loaded_s", "loaded_s_per_10m_pages",
          "ls_s", "lookup_s",
          "lookup_keys_per_s", "lookup_call_p50_ms", "lookup_call_p99_ms", "fsck_s",
          "fsck_pages_per_s"):
    assert isinstance(m[k], (int, float)) and m[k] > 0, (k, m)
for k in ("ram_bytes_per_page", "mounted_ram_bytes_per_page"):
    assert isinstance(m[k], (int, float)), (k, m)
assert m["first_lookup_s"] >= m["mount_s"], m
assert m["first_write_s"] >= m["first_lookup_s"], m
assert m["loaded_s"] >= m["first_lookup_s"], m
assert m["create_max_call_s"] <= m["create_s"], m
assert m["ls_entries"] == 1000 and m["lookup_keys"] == 4000, m
assert m["lookup_calls"] == 4 and m["lookup_batch"] == 1024, m
assert m["fsck_pages"] == 4001, m   # and the page written after the remount
PY
[ ! -e "$T/bench" ] || fail "bench left $T/bench behind: $(ls -A "$T/bench")"

# conc and meta options: refused with a reason, not ignored
for bad in "--engines 0 --cases conc" "--engines 64 --streams 8 --cases conc" \
	   "--streams 2" "--cases conc --conc-ops scan" "--meta-pages 100" \
	   "--cases meta --meta-pages 0" "--cases meta --meta-size 32" \
	   "--cases meta --meta-pages 10M --meta-layer-pages 10" \
	   "--cases meta --meta-threads 65" "--cases meta --meta-batch 2M"; do
	rc=0
	# shellcheck disable=SC2086
	"$KVFS" bench --quick $bad --dir "$T/bench" > /dev/null 2> "$T/err" || rc=$?
	[ $rc = 2 ] || fail "kvfs bench $bad: status $rc, want 2"
	grep -q '^kvfs bench: --' "$T/err" || fail "kvfs bench $bad: no reason given: $(head -3 "$T/err")"
done
[ ! -e "$T/bench" ] || fail "a refused kvfs bench left $T/bench behind"
echo PASS
