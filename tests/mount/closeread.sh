#!/usr/bin/env bash
# close(2) seals a page (usage.md, engine.md), but the kernel sends the
# release that seals it after close returns: a fast-path READ, LOOKUP,
# PREFETCH or REPLACE right behind the close must wait for it, never get
# EBUSY. A writer that still holds a duplicate descriptor keeps its page
# unsealed: readers then get EBUSY after a bounded wait, and the page once
# it closes. Such a writer of another uid, opening its pages from 8 threads,
# takes at most 2 of the waiting slots: root's opens right behind its own
# closes still wait and succeed.
. "$(dirname "$0")/lib.sh"
command -v setpriv >/dev/null || skip "setpriv is not installed (util-linux)"
mkfs
chmod 755 "$T"
mount_kvfs -o allow_other
M=$MNT/m
mkdir "$M" "$M/0" || fail mkdir
export TESTDIR=$(dirname "$0")
python3 - "$M" <<'PY' || fail "close then read"
import mmap, os, sys
sys.path.insert(0, os.environ["TESTDIR"])
import kvfsabi as abi
M = sys.argv[1]
dfd = os.open(M, os.O_RDONLY)
fd = abi.memfd(1 << 20)
mem = mmap.mmap(fd, 1 << 20)
rid, _ = abi.register(dfd, fd)
busy = {"read": 0, "lookup": 0, "prefetch": 0}
N = 2000
for i in range(N):
    name = f"p{i}"
    with open(os.path.join(M, "0", name), "wb") as f:
        f.write(os.urandom(4096))
    order = ((abi.READ, "read"), (abi.LOOKUP, "lookup"), (abi.PREFETCH, "prefetch"))
    for cmd, what in order[i % 3:] + order[:i % 3]:
        dst = (1 << 19, 1 << 19) if cmd == abi.READ else (0, 0)
        d = [abi.Desc(0, name.encode(), dst_off=dst[0], dst_len=dst[1])]
        abi.place(mem, d, 0, 4096)
        abi.batch(dfd, cmd, rid, 0, 1)
        abi.collect(mem, d, 0)
        if d[0].status == -16:
            busy[what] += 1
        elif d[0].status != 0:
            sys.exit(f"{what} of {name}: status {d[0].status}")
# A fast-path REPLACE right behind the close of the page it replaces.
mem[1 << 19:(1 << 19) + 4096] = b"r" * 4096
busy["replace"] = 0
for i in range(N // 2):
    name = f"r{i}"
    with open(os.path.join(M, "0", name), "wb") as f:
        f.write(os.urandom(4096))
    d = [abi.Desc(0, name.encode(), dst_off=1 << 19, dst_len=4096)]
    abi.place(mem, d, 0, 4096)
    abi.batch(dfd, abi.WRITE, rid, 0, 1, flags=abi.WRITE_REPLACE)
    abi.collect(mem, d, 0)
    if d[0].status == -16:
        busy["replace"] += 1
    elif d[0].status != 0:
        sys.exit(f"replace of {name}: status {d[0].status}")
print(busy, "of", N, "and", N // 2)
if any(busy.values()):
    sys.exit(f"EBUSY right after close: {busy}")

# A writer holding a duplicate: its close of one descriptor does not seal.
fd = os.open(os.path.join(M, "0", "held"), os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"h" * 4096)
dup = os.dup(fd)
os.close(fd)
def read_held():
    d = [abi.Desc(0, b"held", dst_off=1 << 19, dst_len=1 << 19)]
    abi.place(mem, d, 0, 4096)
    abi.batch(dfd, abi.READ, rid, 0, 1)
    abi.collect(mem, d, 0)
    return d[0].status
st = read_held()
if st != -16:
    sys.exit(f"read of a page whose writer still holds a descriptor: {st}, not -EBUSY")
os.close(dup)
for _ in range(100):          # the release follows the close
    st = read_held()
    if st == 0:
        break
if st != 0 or mem[1 << 19:(1 << 19) + 4096] != b"h" * 4096:
    sys.exit(f"read after the last close: status {st}")
PY

mkdir -p "$MNT/evil/0" && chown -R 65534:65534 "$MNT/evil" || fail "mkdir evil"
PY3=$(command -v /usr/bin/python3 || command -v python3)
setpriv --reuid=65534 --regid=65534 --clear-groups "$PY3" - "$MNT/evil/0" > "$T/attacker.out" <<'PY' &
import os, sys, threading, time
d = sys.argv[1]
held = []
for i in range(16):                    # unsealed: a duplicate stays open
    fd = os.open(os.path.join(d, f"h{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"e" * 4096)
    held.append(os.dup(fd))
    os.close(fd)
end = time.time() + 12
opens = [0] * 8
def opener(k):
    while time.time() < end:
        # A write and a close of a duplicate: the page's writer closed just
        # now, so an open waits for its seal again (at most 2 s after it).
        os.pwrite(held[k], b"e", 0)
        os.close(os.dup(held[k]))
        try:
            os.close(os.open(os.path.join(d, f"h{k}"), os.O_RDONLY))
        except OSError:
            pass
        opens[k] += 1
ts = [threading.Thread(target=opener, args=(k,)) for k in range(8)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(sum(opens))
PY
ATTACKER=$!
sleep 2
python3 - "$M/0" <<'PY' || fail "root's opens behind its closes while another uid holds seal waits"
import os, sys
busy = 0
for i in range(1000):
    p = os.path.join(sys.argv[1], f"v{i}")
    with open(p, "wb") as f:
        f.write(os.urandom(4096))
    try:
        os.close(os.open(p, os.O_RDONLY))
    except OSError as e:
        if e.errno != 16:
            raise
        busy += 1
print("EBUSY", busy, "of 1000 opens")
if busy:
    sys.exit(f"{busy} of 1000 opens right after close got EBUSY")
PY
wait "$ATTACKER" || fail "the uid 65534 opener failed"
[ "$(cat "$T/attacker.out")" -ge 8 ] || fail "uid 65534 made no opens: $(cat "$T/attacker.out")"
umount_kvfs
