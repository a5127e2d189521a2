"""One uid's open page files against eviction (driven by openshare.sh).

A page held open is never evicted. Without a bound, one user opening
pages and keeping them open could hold the whole capacity, and every
other writer got ENOSPC. Each uid's open files may hold at most
open_share (default 25%) of the capacity; past it open fails with EMFILE.

Pages being written cannot be evicted either; they count in the same
share (with no exception for one large page).

Steps: `fill` (root: 15 pages of 2 MiB in a 32 MiB store, just under the
high watermark), `hold READY` (uid 65534: open every page, keep what it
may, after writing a page of 4 MiB kept open unsealed, then try to
create one more, write the
counts to READY, wait to be killed), `flood` (root: 10 pages of 4 MiB,
each of which needs pages evicted).
"""
import errno
import hashlib
import os
import sys
import time

PAGE = 2 << 20
BIG = 4 << 20
CAP = 32 << 20
PAGES = 15


def fail(msg):
    print(f'FAIL: {msg}', file=sys.stderr)
    sys.exit(1)


def payload(tag, size):
    seed = hashlib.sha256(tag.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def path(mnt, name):
    return os.path.join(mnt, 'm', '0', name)


def step_fill(mnt):
    os.makedirs(os.path.join(mnt, 'm', '0'), exist_ok=True)
    for i in range(PAGES):
        with open(path(mnt, f'p{i:02}'), 'wb') as f:
            f.write(payload(f'p{i:02}', PAGE))


def step_hold(mnt, ready):
    # Pages being written cannot be evicted either: they count in the
    # same share (here 8 MiB) as the pages its files hold open.
    layer = os.path.join(mnt, 'm', '1')
    writing = [os.open(os.path.join(layer, 'w0'), os.O_CREAT | os.O_WRONLY, 0o644)]
    os.write(writing[0], payload('w0', BIG))
    held, refused = [], 0
    for i in range(PAGES):
        try:
            held.append((f'p{i:02}', open(path(mnt, f'p{i:02}'), 'rb')))
        except OSError as e:
            if e.errno == errno.ENOENT:
                continue        # evicted for the page written above
            if e.errno != errno.EMFILE:
                fail(f'open of p{i:02} by uid {os.getuid()}: {e}')
            refused += 1
    try:
        writing.append(os.open(os.path.join(layer, 'w1'), os.O_CREAT | os.O_WRONLY, 0o644))
        created = 1
    except OSError as e:
        if e.errno != errno.EMFILE:
            fail(f'creating w1 by uid {os.getuid()}: {e}')
        created = 0
    with open(ready + '.tmp', 'w') as f:
        f.write(f'{len(held)} {refused} {created}\n')
    os.rename(ready + '.tmp', ready)
    while True:                 # held until killed; what it holds stays right
        time.sleep(1)
        for name, f in held:
            f.seek(0)
            if f.read() != payload(name, PAGE):
                fail(f'{name}, held open, read back wrong')


def step_flood(mnt):
    for i in range(10):
        try:
            with open(path(mnt, f'big{i}'), 'wb') as f:
                f.write(payload(f'big{i}', BIG))
        except OSError as e:
            fail(f'root writing big{i} ({i} of 10 written) while another uid '
                 f'holds pages open: {e}')
    st = os.statvfs(mnt)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    if used > CAP:
        fail(f'{used} bytes used in a {CAP}-byte store')


if __name__ == '__main__':
    step, mnt = sys.argv[1], sys.argv[2]
    if step == 'fill':
        step_fill(mnt)
    elif step == 'hold':
        step_hold(mnt, sys.argv[3])
    elif step == 'flood':
        step_flood(mnt)
    else:
        fail(f'unknown step {step}')
