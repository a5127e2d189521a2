#!/bin/bash
# Write-back: close() returns once the page is sealed and visible; the disk
# write and the manifest commit follow. The RAM held for pages not yet
# durable never passes -o dirty, whatever the number of writers: a writer
# waits before it takes the page that would overrun (nothing fails, nothing
# is lost), fsync waits for durability, and a clean unmount flushes
# everything. The budget is saturated by construction: four writers hold
# their pages open, so a fifth must wait until one closes.
. "$(dirname "$0")/lib.sh"
PAGE=65536
BUDGET=$((4 * PAGE))

mkfs
mount_kvfs -o dirty=$BUDGET,nodedup
mkdir -p "$MNT/m/00"
python3 - "$MNT" "$BUDGET" "$PAGE" <<'PY' || fail "writer flood"
import os, sys, threading, time
mnt, budget, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
WRITERS, PAGES = 16, 60
errors, peaks = [], []

def stats():
    raw = os.getxattr(mnt, "user.kvfs.stats").decode()
    return {k: int(v) for k, v in (l.split() for l in raw.splitlines())}

# ---- saturation by construction ----
holders = []
for h in range(4):
    f = open(f"{mnt}/m/00/hold{h}", "wb")
    f.write(bytes([h]) * size)
    f.flush()              # the budget now holds 4 pages being written
    holders.append(f)
done = threading.Event()

def fifth():
    with open(f"{mnt}/m/00/fifth", "wb") as f:
        f.write(b"5" * size)
    done.set()

t = threading.Thread(target=fifth)
t.start()
time.sleep(0.5)
assert not done.is_set(), "a fifth page was taken with the budget full of pages being written"
st = stats()
assert st["dirty_bytes"] <= budget, st
holders.pop().close()      # seals one: it drains, and the fifth goes on
t.join(10)
assert done.is_set(), "the fifth writer never got the budget back"
for f in holders:
    f.close()
st = stats()
assert st["dirty_waits"] > 0 and st["dirty_overruns"] == 0, st

# ---- many more writers than budget pages ----
def writer(w):
    try:
        for i in range(PAGES):
            with open(f"{mnt}/m/00/w{w}-{i}", "wb") as f:
                f.write(bytes([w, i % 256]) * (size // 2))
    except OSError as e:
        errors.append(e)

threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
for t in threads:
    t.start()
while any(t.is_alive() for t in threads):
    peaks.append(stats()["dirty_bytes"])
for t in threads:
    t.join()
# close() returns before the kernel's release reaches the daemon, and the
# release seals the page: wait for the last ones (a slow run, TSan) rather
# than count them while they are still on their way.
want = WRITERS * PAGES + 5
deadline = time.monotonic() + 20
st = stats()
while st["pages_sealed"] < want and time.monotonic() < deadline:
    time.sleep(0.05)
    st = stats()
print(f"write-back: budget {budget}, peak {st['dirty_peak']}, sampled max "
      f"{max(peaks)}, writers waited {st['dirty_waits']} times, "
      f"{WRITERS} writers x {PAGES} pages of {size} bytes")
assert not errors, f"a writer failed: {errors[0]}"
assert st["dirty_peak"] <= budget, f"dirty peak {st['dirty_peak']} > budget {budget}"
assert max(peaks) <= budget
assert st["dirty_overruns"] == 0, st
assert st["pages_sealed"] == want, st
PY
umount_kvfs            # must flush every page: none was fsync'ed
mount_kvfs
python3 - "$MNT" <<'PY' || fail "pages after unmount and remount"
import os, sys
mnt = sys.argv[1]
names = [n for n in os.listdir(f"{mnt}/m/00") if n.startswith("w")]
assert len(names) == 16 * 60, f"{len(names)} pages after remount"
for n in names:
    w, i = map(int, n[1:].split("-"))
    assert open(f"{mnt}/m/00/{n}", "rb").read() == bytes([w, i % 256]) * 32768, n
for h in range(4):
    assert open(f"{mnt}/m/00/hold{h}", "rb").read() == bytes([h]) * 65536, h
raw = os.getxattr(mnt, "user.kvfs.stats").decode()
assert "dirty_bytes 0\n" in raw, raw
PY
umount_kvfs
no_errors_in_log
echo "PASS: write-back stays within its budget and loses nothing"
