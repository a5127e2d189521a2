#!/usr/bin/env bash
# Many engines at once (fastload.py): 64 REPLACE writers in one layer while
# 8 threads stat uncached names and list the layer, for FASTLOAD_SECONDS
# (20): no stat or listing stalls for more than 1 s, and every page is
# bit-exact at the end. A mount that deadlocks is cleared with
# `kvfs umount --force` so that the test fails instead of hanging.
. "$(dirname "$0")/lib.sh"

mkfs
mount_kvfs -o max_page=1M
mkdir "$MNT/m" || fail "mkdir"
secs=${FASTLOAD_SECONDS:-20}
# A sanitizer slows the daemon several times over: the stall bound grows
# (a deadlock still fails it), the load is the same.
stall=1.0
if grep -q 'libasan\|libtsan' "/proc/$DPID/maps" 2>/dev/null; then stall=5.0; fi
timeout -s KILL $((secs + 90)) python3 "$(dirname "$0")/fastload.py" "$MNT" "$T" "$secs" "$stall" &
load=$!
if ! wait $load; then
	# A fresh name in the layer: a LOOKUP the daemon must answer.
	probe=0
	timeout -s KILL 5 stat "$MNT/m/0/probe-$$" >/dev/null 2>&1 || probe=$?
	if [ $probe -ge 124 ]; then
		"$KVFS" umount --force "$MNT" >/dev/null 2>&1 || true
		DPID=
		fail "the mount stopped answering under the load (cleared with kvfs umount --force)"
	fi
	fail "fast-path load checks"
fi
umount_kvfs
mount_kvfs
python3 - "$MNT" "$T" <<'PY' || fail "pages after a remount"
import json, os, sys
mnt, tmp = sys.argv[1:3]
for p in range(8):
    last = json.load(open(os.path.join(tmp, 'gens-%d.json' % p)))['last']
    for name, gen in last.items():
        seed = ('%s/%d' % (name, gen)).encode()
        want = (seed * (4096 // len(seed) + 1))[:4096]
        if open(os.path.join(mnt, 'm', '0', name), 'rb').read() != want:
            sys.exit('%s: wrong bytes after a remount' % name)
PY
umount_kvfs
echo PASS
