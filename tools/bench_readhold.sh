#!/usr/bin/env bash
# The daemon's memory for page files held open (docs/benchmarks/engines.md,
# "Page files held open for reading by one uid"): uid 65534 writes 24 pages
# of 16 MiB, opens 48 page files and reads a byte of each; VmRSS before and
# after. No RAM tier (ram_cache=0), so only open files keep pages.
# usage: tools/bench_readhold.sh KVFS_BINARY   (root; uses /var/tmp/rh)
set -euo pipefail
K=$1; D=/var/tmp/rh; rm -rf $D; mkdir -p $D/mnt; chmod 755 $D
$K mkfs $D/store --capacity 4G >/dev/null
$K mount $D/store $D/mnt -f -o allow_other,ram_cache=0 2>$D/log & DP=$!
sleep 1; mkdir -p $D/mnt/free/1; chown -R 65534:65534 $D/mnt/free
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 - <<'PY'
import os
for i in range(24):
    with open("/var/tmp/rh/mnt/free/1/big%02d" % i, "wb") as f:
        for j in range(16): f.write(bytes([i, j]) * (1 << 19))
PY
sleep 2; echo 3 > /proc/sys/vm/drop_caches
r0=$(awk '/VmRSS/{print $2}' /proc/$DP/status)
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 - $DP <<'PY'
import os, sys, time
fds = []
for i in range(48):
    fd = os.open("/var/tmp/rh/mnt/free/1/big%02d" % (i % 24), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    assert os.pread(fd, 1, ((i // 24) % 16) << 20) == bytes([i % 24])
    fds.append(fd)
rss = [l for l in open("/proc/%s/status" % sys.argv[1]) if l.startswith("VmRSS")][0].split()[1]
print("VmRSS with 48 files open and read:", int(rss) // 1024, "MiB")
PY
echo "VmRSS before: $((r0 / 1024)) MiB"
fusermount3 -u $D/mnt; wait; rm -rf $D
