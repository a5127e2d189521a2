#!/usr/bin/env bash
# Creates of page files through the mount, in a fresh store under DIR
# with a capacity of CAP, mounted by KVFS_BINARY:
#  rate N      N empty page files, then N of 4 KiB, each opened, written
#              (or not) and closed, against the same on DIR's own
#              filesystem (the raw baseline, one file per page);
#  flood SECS  4 processes create and close empty files with names of 200
#              bytes for SECS; then the pages left, the daemon's RSS, the
#              manifest's size (kvfs.db, its WAL, the journal) and df Used;
#  shared N    N pages of the same 1 byte (dedup: one extent), then pages
#              of 1 MiB, distinct, until the store has evicted them all:
#              the slowest of those writes, and the time they took;
#  layers N    N layer directories made in one model (no geometry) while
#              another process writes 4 KiB pages in another model: the
#              mkdir rate per tenth of N and that writer's latency; then
#              the time of a fast-path LOOKUP of one page in that model
#              and in a model of one layer;
#  fastflood SECS  8 processes of uid 65534 write distinct 1 MiB pages by
#              the fast path (batches of 32) for SECS while root writes
#              4 KiB pages through the mount every 20 ms: root's latency;
#              with MIXED=1, 4 of them write their pages through the mount,
#              with MIXED=all, all 8 do; writes refused are counted;
#              with BIG=file:M one of them writes a page of M MiB through
#              the mount and holds it open, with BIG=fast:M two of them
#              write pages of M MiB by the fast path, one a call (M < 36),
#              with BIG=doom:M one grows 16 pages to M MiB by ftruncate
#              and has each refused (EFBIG) held open; the rest stay idle.
# KVFS_OPTS: more mount options (e.g. dirty=4M).
# usage: tools/bench_create.sh KVFS_BINARY DIR rate [N] [CAP]   (20000, 1G)
#        tools/bench_create.sh KVFS_BINARY DIR flood [SECS] [CAP] (20, 64M)
#        tools/bench_create.sh KVFS_BINARY DIR shared [N] [CAP]  (20000, 64M)
#        tools/bench_create.sh KVFS_BINARY DIR layers [N] [CAP]  (100000, 1G)
#        tools/bench_create.sh KVFS_BINARY DIR fastflood [SECS] [CAP]  (15, 8G)
set -euo pipefail
KVFS=$1 DIR=$2 MODE=$3
case $MODE in
rate) N=${4:-20000} CAP=${5:-1G} ;;
shared) N=${4:-20000} CAP=${5:-64M} ;;
layers) N=${4:-100000} CAP=${5:-1G} ;;
fastflood) SECS=${4:-15} CAP=${5:-8G} ;;
*) SECS=${4:-20} CAP=${5:-64M} ;;
esac
REPO=$(cd "$(dirname "$0")/.." && pwd); export REPO
STORE=$DIR/store MNT=$DIR/mnt RAW=$DIR/raw LOG=$DIR/daemon.log
rm -rf "$STORE" "$RAW"
mkdir -p "$MNT" "$RAW/m/0"
"$KVFS" mkfs "$STORE" --capacity "$CAP" > /dev/null
"$KVFS" mount "$STORE" "$MNT" -f -o "allow_other${KVFS_OPTS:+,$KVFS_OPTS}" > "$LOG" 2>&1 &
DPID=$!
trap 'fusermount3 -u "$MNT" 2>/dev/null || true; wait $DPID 2>/dev/null || true; rm -rf "$STORE" "$RAW"' EXIT
for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
mountpoint -q "$MNT" || { echo "bench_create: no mount: $(tail -3 "$LOG")" >&2; exit 1; }
mkdir -p "$MNT/m/0"
if [ "$MODE" = rate ]; then
python3 - "$MNT/m/0" "$RAW/m/0" "$N" <<'PY'
import os, sys, time
kv, raw, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
block = b'\x5a' * 4096

def run(d, tag, data):
    t = time.perf_counter()
    for i in range(n):
        fd = os.open(os.path.join(d, f'{tag}{i:07d}'), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        if data:
            os.write(fd, data)
        os.close(fd)
    return n / (time.perf_counter() - t)

for tag, data in (('e', b''), ('f', block)):
    r = run(raw, tag, data)
    k = run(kv, tag, data)
    what = 'empty' if not data else '4 KiB'
    print(f'{what:6} creates: kvfs {k:8.0f}/s  raw {r:8.0f}/s  ratio {k / r:.2f}')
PY
exit 0
fi
if [ "$MODE" = shared ]; then
python3 - "$MNT/m/0" "$N" <<'PY'
import json, os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, f's{i:07d}'), 'wb') as f:
        f.write(b'x')
st = lambda: json.load(open(os.path.join(d, '..', '..', '.kvfs', 'stats')))
print(f'{n} pages of one shared byte: {st()["ssd"]["pages"]} pages, {st()["ssd"]["physical_bytes"]} bytes')
worst, t0, i = 0.0, time.perf_counter(), 0
while any(x.startswith('s') for x in os.listdir(d)) and time.perf_counter() - t0 < 300:
    body = os.urandom(64) + bytes(1 << 20)
    t = time.perf_counter()
    try:
        with open(os.path.join(d, f'big{i:05d}'), 'wb') as f:
            f.write(body)
    except OSError as e:
        print(f'write {i}: {e}')
    worst, i = max(worst, time.perf_counter() - t), i + 1
left = sum(x.startswith('s') for x in os.listdir(d))
print(f'{i} writes of 1 MiB until the shared names went ({left} left): '
      f'{time.perf_counter() - t0:.1f} s, the slowest {worst * 1000:.0f} ms')
PY
exit 0
fi

if [ "$MODE" = fastflood ]; then
mkdir -p "$MNT/probe/0" "$MNT/flood/0" "$MNT/flood/1"
chown 65534:65534 "$MNT/flood" "$MNT/flood/0" "$MNT/flood/1"
chmod 755 "$DIR"
cat > "$DIR/flood.py" <<'PY'
import mmap, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], 'tests', 'mount'))
import kvfsabi as abi
model, k, secs = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
MB = 1 << 20
dfd = os.open(model, os.O_RDONLY | os.O_DIRECTORY)
fd = abi.memfd(40 * MB)
mem = mmap.mmap(fd, 40 * MB)
rid, _ = abi.register(dfd, fd)
end, n, pages, refused = time.monotonic() + secs, 0, 0, 0
mixed = os.environ.get('MIXED')
big = os.environ.get('BIG', '')
if big:
    how, size = big.split(':')[0], int(big.split(':')[1]) * MB
    if how == 'file' and k == 0:       # one page, held open to the end
        with open(f'{model}/1/big', 'wb') as f:
            for _ in range(size // MB):
                f.write(bytes(MB))
            time.sleep(max(0, end - time.monotonic()))
        print(1, 0)
    elif how == 'doom' and k == 0:     # pages grown, then refused, held open
        fds = []
        while time.monotonic() < end and len(fds) < 16:
            fd = os.open(f'{model}/1/doom{n}', os.O_CREAT | os.O_WRONLY, 0o644)
            fds.append(fd)
            n += 1
            try:
                os.ftruncate(fd, size)
                os.ftruncate(fd, 1 << 40)
            except OSError:
                refused += 1
        time.sleep(max(0, end - time.monotonic()))
        print(len(fds), refused)
    elif how == 'fast' and k < 2:
        while time.monotonic() < end:
            d = abi.Desc(0, b'big%d-%d' % (k, n), dst_off=4 * MB, dst_len=size)
            abi.place(mem, [d], 0, MB)
            try:
                pages += abi.batch(dfd, abi.WRITE, rid, 0, 1)['done']
            except OSError:
                refused += 1
            n += 1
        print(pages, refused)
    else:
        print(0, 0)
    sys.exit(0)
if (mixed == '1' and k >= 4) or mixed == 'all':     # through the mount
    while time.monotonic() < end:
        try:
            with open(f'{model}/1/k{k}-{n}', 'wb') as f:
                f.write(b'%08d%08d' % (k, n) + bytes(MB - 16))
            pages += 1
        except OSError:
            refused += 1
        n += 1
    print(pages, refused)
    sys.exit(0)
while time.monotonic() < end:
    ds = []
    for j in range(32):
        off = 4 * MB + j * MB
        mem[off:off + 16] = b'%08d%08d' % (k, n * 32 + j)
        ds.append(abi.Desc(0, b'k%d-%d' % (k, n * 32 + j), dst_off=off, dst_len=MB))
    abi.place(mem, ds, 0, MB)
    try:
        pages += abi.batch(dfd, abi.WRITE, rid, 0, len(ds))['done']
    except OSError:
        refused += 1
    n += 1
print(pages, refused)
PY
chmod 644 "$DIR/flood.py"
python3 - "$MNT" "$SECS" "$DIR/flood.py" <<'PY'
import os, subprocess, sys, time
mnt, secs, flood = sys.argv[1], float(sys.argv[2]), sys.argv[3]
repo = os.environ['REPO']
procs = [subprocess.Popen(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
                           '/usr/bin/python3', flood, repo, f'{mnt}/flood', str(k), str(secs)],
                          stdout=subprocess.PIPE, text=True) for k in range(8)]
time.sleep(1)
lat, i, block, end = [], 0, b'\x5a' * 4096, time.monotonic() + secs - 2
while time.monotonic() < end:
    t = time.perf_counter()
    with open(f'{mnt}/probe/0/p{i:07d}', 'wb') as f:
        f.write(block)
    lat.append(time.perf_counter() - t)
    i += 1
    time.sleep(0.02)
outs = [(p.communicate()[0] or '0 0').split() for p in procs]
pages, refused = sum(int(o[0]) for o in outs), sum(int(o[1]) for o in outs)
lat.sort()
mib = int(os.environ['BIG'].split(':')[1]) if os.environ.get('BIG') else 1
print(f'uid 65534 wrote {pages} pages of {mib} MiB in {secs:.0f} s ({pages * mib / secs:.0f} MiB/s), '
      f'{refused} refused; '
      f'root: {len(lat)} writes of 4 KiB, p50 {lat[len(lat) // 2] * 1000:.1f} ms, '
      f'p99 {lat[len(lat) * 99 // 100] * 1000:.1f} ms, max {lat[-1] * 1000:.0f} ms')
PY
grep -E 'dirty_peak|dirty_overruns' <(getfattr -n user.kvfs.stats --only-values "$MNT" 2>/dev/null) | tr '\n' ' '; echo
exit 0
fi

if [ "$MODE" = layers ]; then
python3 - "$MNT" "$N" <<'PY'
import os, sys, time, multiprocessing as mp
mnt, n = sys.argv[1], int(sys.argv[2])
os.makedirs(f'{mnt}/probe/0', exist_ok=True)
os.mkdir(f'{mnt}/many')

def probe(stop, out):
    lat, i, block = [], 0, b'\x5a' * 4096
    while not stop.is_set():
        t = time.perf_counter()
        with open(f'{mnt}/probe/0/p{i:07d}', 'wb') as f:
            f.write(block)
        lat.append(time.perf_counter() - t)
        i += 1
        time.sleep(0.005)
    lat.sort()
    out.put((len(lat), lat[len(lat) // 2], lat[len(lat) * 99 // 100], lat[-1]))

stop, out = mp.Event(), mp.Queue()
p = mp.Process(target=probe, args=(stop, out))
p.start()
t0 = t = time.perf_counter()
rates = []
for i in range(n):
    os.mkdir(f'{mnt}/many/{i:05d}')
    if (i + 1) % (n // 10) == 0:
        rates.append(f'{n // 10 / (time.perf_counter() - t):.0f}')
        t = time.perf_counter()
total = time.perf_counter() - t0
stop.set()
cnt, p50, p99, worst = out.get()
p.join()
print(f'{n} layer dirs in {total:.1f} s; mkdir/s per tenth: {" ".join(rates)}')
print(f'probe: {cnt} page writes, p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {worst * 1000:.0f} ms')

sys.path.insert(0, os.path.join(os.environ['REPO'], 'tests', 'mount'))
import mmap, kvfsabi as abi
for model in ('many', 'probe'):
    with open(f'{mnt}/{model}/00000/q' if model == 'many' else f'{mnt}/probe/0/q', 'wb') as f:
        f.write(b'q' * 4096)
    dfd = os.open(f'{mnt}/{model}', os.O_RDONLY | os.O_DIRECTORY)
    fd = abi.memfd(1 << 20)
    mem = mmap.mmap(fd, 1 << 20)
    rid, _ = abi.register(dfd, fd)
    ds = [abi.Desc(0, b'q')]
    t, calls = time.perf_counter(), 200
    for _ in range(calls):
        abi.place(mem, ds, 0, 4096)
        res = abi.batch(dfd, abi.LOOKUP, rid, 0, 1)
    took = (time.perf_counter() - t) / calls
    print(f'fast-path LOOKUP of one page, model of {n if model == "many" else 1} layers: '
          f'{took * 1e6:.0f} us per call (done {res["done"]})')
    abi.unregister(dfd, rid)
    os.close(dfd)
PY
echo "daemon RSS $(awk '/VmRSS/ { print int($2 / 1024) }' "/proc/$DPID/status") MB"
exit 0
fi

rss() { awk '/VmRSS/ { print int($2 / 1024) }' "/proc/$DPID/status"; }
mdb() { du -cm "$STORE"/kvfs.db* "$STORE"/kvfs.journal* 2>/dev/null | tail -1 | cut -f1; }
echo "before: RSS $(rss) MB, manifest $(mdb) MB"
python3 - "$MNT/m/0" "$SECS" <<'PY'
import os, sys, time, multiprocessing as mp
d, secs = sys.argv[1], float(sys.argv[2])

def flood(k):
    end, i = time.monotonic() + secs, 0
    while time.monotonic() < end:
        try:
            os.close(os.open(os.path.join(d, f'{k}-{i:09d}-' + 'x' * 188), os.O_CREAT | os.O_WRONLY, 0o644))
        except OSError:
            pass
        i += 1
    return i

with mp.Pool(4) as p:
    print(f'creates tried: {sum(p.map(flood, range(4)))}')
PY
sleep 2    # the evictor settles
echo "pages left: $(ls -f "$MNT/m/0" | grep -vc '^\.\.\?$'), RSS $(rss) MB, manifest $(mdb) MB, df Used $(df -B1M --output=used "$MNT" | tail -1 | tr -d ' ') MB of $CAP"
