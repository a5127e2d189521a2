#!/bin/bash
# Write-back: close() returns once the page is sealed and visible; the disk
# write and the manifest commit follow. Under a flood of writers the RAM held
# for pages not yet durable stays within -o dirty (writers wait, nothing
# fails, nothing is lost), fsync waits for durability, and a clean unmount
# flushes everything.
. "$(dirname "$0")/lib.sh"
BUDGET=$((512 * 1024))

mkfs
mount_kvfs -o dirty=$BUDGET,nodedup
mkdir -p "$MNT/m/00"
python3 - "$MNT" "$BUDGET" <<'PY' || fail "writer flood"
import os, sys, threading
mnt, budget = sys.argv[1], int(sys.argv[2])
WRITERS, PAGES, SIZE = 4, 300, 65536
errors, peaks = [], []

def stats():
    raw = os.getxattr(mnt, "user.kvfs.stats").decode()
    return {k: int(v) for k, v in (l.split() for l in raw.splitlines())}

def writer(w):
    try:
        for i in range(PAGES):
            with open(f"{mnt}/m/00/w{w}-{i}", "wb") as f:
                f.write(bytes([w, i % 256]) * (SIZE // 2))
    except OSError as e:
        errors.append(e)

threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
for t in threads:
    t.start()
while any(t.is_alive() for t in threads):
    peaks.append(stats()["dirty_bytes"])
for t in threads:
    t.join()
st = stats()
print(f"write-back: budget {budget}, peak {st['dirty_peak']}, sampled max "
      f"{max(peaks)}, writers waited {st['dirty_waits']} times, "
      f"{WRITERS * PAGES} pages of {SIZE} bytes")
assert not errors, f"a writer failed: {errors[0]}"
assert st["dirty_peak"] <= budget, f"dirty peak {st['dirty_peak']} > budget {budget}"
assert max(peaks) <= budget
assert st["dirty_overruns"] == 0, st
assert st["dirty_waits"] > 0, "the flood never filled the budget: the test proves nothing"
assert st["pages_sealed"] == WRITERS * PAGES, st
PY
umount_kvfs            # must flush every page: none was fsync'ed
mount_kvfs
python3 - "$MNT" <<'PY' || fail "pages after unmount and remount"
import os, sys
mnt = sys.argv[1]
names = os.listdir(f"{mnt}/m/00")
assert len(names) == 4 * 300, f"{len(names)} pages after remount"
for n in names:
    w, i = map(int, n[1:].split("-"))
    assert open(f"{mnt}/m/00/{n}", "rb").read() == bytes([w, i % 256]) * 32768, n
raw = os.getxattr(mnt, "user.kvfs.stats").decode()
assert "dirty_bytes 0\n" in raw, raw
PY
umount_kvfs
no_errors_in_log
echo "PASS: write-back stays within its budget and loses nothing"
