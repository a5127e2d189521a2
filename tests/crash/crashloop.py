#!/usr/bin/env python3
"""Crash loop: mixed load against the daemon, SIGKILL at a random moment,
check, remount, again.

Each cycle mounts the store (with a small capacity, so the evictor runs),
checks it, runs the load of crashload.py (FUSE writes with and without
fsync, fast-path batch writes durable and not, tmp+rename publishes, dedup
pages, renames and unlinks of earlier pages, readers), kills the daemon
with SIGKILL after a random delay, and then checks:
  - fsck of the crashed store (PRAGMA integrity_check, extents inside their
    segments, no overlaps, refcounts, no dangling rows or leaked extents,
    every checksum with --verify-data) finds nothing but orphaned space,
    the payload of writes the crash cut off, which the next mount reclaims;
  - after the remount, every page whose fsync or durable batch returned is
    present and bit-exact under exactly one of its names (a rename may or
    may not have survived), unless the daemon logged its eviction or the
    load unlinked it;
  - every visible page is complete and right (crashload.page_problem), read
    through FUSE;
  - no worker saw a wrong page or an unexpected error before the kill.
At the end: a clean unmount (the daemon exits 0) and fsck exits 0.

usage: crashloop.py [--cycles N] [--seed S] [--capacity SIZE] [--dir DIR]
                    [--keep] [--kvfs PATH]
Exit 0 pass, 1 fail, 77 skip (no FUSE here).
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import crashload  # noqa: E402
from crashload import LAYERS, page_problem  # noqa: E402

EVICTED = re.compile(r'evicted page (\S+) \(inode')
SANITIZER = re.compile(r'(Address|Thread|UndefinedBehavior)Sanitizer|runtime error:')


class Failure(Exception):
    pass


class Loop:
    def __init__(self, args):
        self.a = args
        self.dir = tempfile.mkdtemp(prefix='kvfs-crash.', dir=args.dir)
        self.store, self.mnt = f'{self.dir}/store', f'{self.dir}/mnt'
        os.mkdir(self.mnt)
        self.acked = {}         # ack path -> (sha256 hex, set of names it may have)
        self.evicted = set()    # page names the daemon logged as evicted
        self.totals = {}
        self.daemon = None
        self.log = None

    # ---- the daemon ----

    def kvfs(self, *argv, check=True):
        r = subprocess.run([self.a.kvfs, *argv], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise Failure(f'kvfs {" ".join(argv)}: exit {r.returncode}\n{r.stdout}{r.stderr}')
        return r

    def mounted(self):
        with open('/proc/mounts') as f:
            return any(line.split()[1] == self.mnt for line in f)

    def mount(self, cyc):
        self.log = f'{self.dir}/daemon-{cyc}.log'
        env = dict(os.environ, KVFS_LOG='debug')
        with open(self.log, 'w') as log:
            self.daemon = subprocess.Popen(
                [self.a.kvfs, 'mount', self.store, self.mnt, '-f', '-o',
                 f'capacity={self.a.capacity}'], stderr=log, env=env)
        for _ in range(200):
            if self.mounted():
                return
            if self.daemon.poll() is not None:
                raise Failure(f'cycle {cyc}: the daemon exited {self.daemon.returncode} '
                              'before mounting')
            time.sleep(0.05)
        raise Failure(f'cycle {cyc}: no mount within 10 s')

    def kill(self):
        """SIGKILL, then clear the stale mount with kvfs umount. A daemon
        killed while it waits in the kernel for a directory lock (telling it
        to forget an evicted name, while a request holds that directory)
        cannot finish dying until its connection is aborted: that is the
        hung-daemon recovery, kvfs umount --force, counted here."""
        self.daemon.send_signal(signal.SIGKILL)
        try:
            self.daemon.wait(timeout=5)
            self.kvfs('umount', self.mnt)
        except subprocess.TimeoutExpired:
            self.total('stuck-after-kill')
            self.kvfs('umount', '--force', '--wait', '10', self.mnt)
            self.daemon.wait(timeout=10)

    def unmount(self, cyc):
        self.kvfs('umount', self.mnt)
        rc = self.daemon.wait(timeout=60)
        if rc != 0:
            raise Failure(f'cycle {cyc}: the daemon exited {rc} at unmount')

    def read_log(self):
        with open(self.log, errors='replace') as f:
            for line in f:
                m = EVICTED.search(line)
                if m:
                    self.evicted.add(m.group(1))
                    self.total('evicted')
                if 'checksum mismatch' in line or SANITIZER.search(line):
                    raise Failure(f'the daemon logged: {line.strip()}')

    # ---- checks ----

    def fsck_after_crash(self, cyc):
        r = self.kvfs('fsck', self.store, '--verify-data', '-n', check=False)
        bad = [ln for ln in r.stdout.splitlines()
               if not ln.startswith('kvfs fsck:') and '(orphaned space)' not in ln]
        if r.returncode not in (0, 4) or bad:
            raise Failure(f'cycle {cyc}: fsck of the crashed store (exit {r.returncode}):\n'
                          + r.stdout + r.stderr)
        if r.returncode == 4:
            self.total('fsck-orphans')

    def read_page(self, path):
        try:
            with open(f'{self.mnt}/{path}', 'rb') as f:
                return f.read()
        except FileNotFoundError:
            return None

    def check_visible(self, cyc):
        n = 0
        for layer in LAYERS.values():
            for name in os.listdir(f'{self.mnt}/m/{layer}'):
                data = self.read_page(f'm/{layer}/{name}')
                why = data is not None and page_problem(name, data)
                if why:
                    raise Failure(f'cycle {cyc}: visible page m/{layer}/{name}: {why}')
                n += 1
        self.total('pages-checked', n)

    def check_acked(self, cyc):
        import hashlib
        for key, (sha, names) in list(self.acked.items()):
            found = [p for p in sorted(names) if os.path.lexists(f'{self.mnt}/{p}')]
            if len(found) > 1:
                raise Failure(f'cycle {cyc}: durable page {key} exists as {found}')
            if not found:
                if not any(os.path.basename(p) in self.evicted for p in names):
                    raise Failure(f'cycle {cyc}: durable page {key} is gone '
                                  f'(names {sorted(names)}, not evicted)')
                del self.acked[key]
                continue
            data = self.read_page(found[0])
            if data is None or hashlib.sha256(data).hexdigest() != sha:
                raise Failure(f'cycle {cyc}: durable page {found[0]}: wrong bytes')
            self.acked[key] = (sha, {found[0]})
        self.total('durable-verified', len(self.acked))

    def check(self, cyc):
        for layer in LAYERS.values():
            os.makedirs(f'{self.mnt}/m/{layer}', exist_ok=True)
        self.check_acked(cyc)
        self.check_visible(cyc)

    # ---- the load ----

    def apply_journal(self, path, cyc, killed_at):
        with open(path) as f:
            lines = f.read().splitlines()
        where = {n: k for k, (_, names) in self.acked.items() for n in names}
        for line in lines:
            kind, _, rest = line.partition(' ')
            if kind == 'ack':
                p, sha = rest.split()
                self.acked[p] = (sha, {p})
                where[p] = p
            elif kind == 'rename':
                old, new = rest.split()
                if old in where:
                    self.acked[where[old]][1].add(new)
                    where[new] = where[old]
            elif kind == 'unlink':
                self.acked.pop(where.pop(rest, None), None)
            elif kind == 'bad':
                raise Failure(f'cycle {cyc}: a reader got a wrong page: {rest}')
            elif kind == 'err':
                t, who, err, msg = rest.split(' ', 3)
                if float(t) < killed_at:
                    raise Failure(f'cycle {cyc}: {who} failed before the kill: {msg}')
            elif kind == 'count':
                who, key, n = rest.split()
                self.total(f'{who}.{key}', int(n))

    def load_and_kill(self, cyc, rng):
        journal = f'{self.dir}/journal-{cyc}'
        live = sorted(next(iter(names)) for _, names in self.acked.values())
        pids = [crashload.spawn(who, self.mnt, cyc, journal, rng.random(), live)
                for who in crashload.WORKERS]
        time.sleep(rng.uniform(0.1, 1.2))
        killed_at = time.monotonic()
        self.kill()
        deadline = time.monotonic() + 30
        for pid in pids:
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    raise Failure(f'cycle {cyc}: a worker hangs after the daemon died')
                time.sleep(0.02)
        self.apply_journal(journal, cyc, killed_at)
        os.unlink(journal)

    def total(self, key, n=1):
        self.totals[key] = self.totals.get(key, 0) + n

    # ---- the loop ----

    def run(self):
        rng = random.Random(self.a.seed)
        self.kvfs('mkfs', self.store)
        t0 = time.monotonic()
        last_log = None
        for cyc in range(1, self.a.cycles + 1):
            self.mount(cyc)
            self.check(cyc)
            if last_log:        # kept until its crash passed the check
                os.unlink(last_log)
            self.load_and_kill(cyc, rng)
            self.read_log()
            self.fsck_after_crash(cyc)
            last_log = self.log
            if self.a.progress and cyc % 50 == 0:
                print(f'crashloop: {cyc} cycles, {time.monotonic() - t0:.0f} s', flush=True)
        self.mount('final')
        self.check('final')
        self.unmount('final')
        self.read_log()
        r = self.kvfs('fsck', self.store, '--verify-data', check=False)
        if r.returncode != 0:
            raise Failure(f'fsck after the clean unmount: exit {r.returncode}\n{r.stdout}{r.stderr}')
        self.require_work()
        return time.monotonic() - t0

    def require_work(self):
        t = self.totals
        for key in ('fuse.fsynced', 'batch.durable', 'publish.published', 'reader.reads',
                    'janitor.renamed', 'janitor.unlinked', 'evicted', 'durable-verified'):
            if self.a.cycles >= 20 and not t.get(key):
                raise Failure(f'the load never did {key!r}: the loop proves nothing')

    def cleanup(self, failed):
        if self.daemon and self.daemon.poll() is None:
            self.daemon.kill()
            self.daemon.wait()
        if self.mounted():
            subprocess.run(['fusermount3', '-u', '-z', self.mnt])
        if failed and self.log and os.path.exists(self.log):
            with open(self.log, errors='replace') as f:
                tail = f.readlines()[-25:]
            print('--- daemon log (tail) ---', *tail, sep='', file=sys.stderr)
        if failed or self.a.keep:
            print(f'crashloop: kept {self.dir}', file=sys.stderr)
        else:
            shutil.rmtree(self.dir)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--cycles', type=int, default=int(os.environ.get('KVFS_CRASH_CYCLES', 50)))
    p.add_argument('--seed', type=int, default=int(os.environ.get('KVFS_CRASH_SEED', 1)))
    p.add_argument('--capacity', default='16M', help='store capacity (the evictor keeps it)')
    p.add_argument('--dir', default=os.environ.get('KVFS_TEST_DIR', '/var/tmp'))
    p.add_argument('--kvfs', default=os.environ.get('KVFS', 'kvfs'))
    p.add_argument('--keep', action='store_true', help='keep the store afterwards')
    p.add_argument('--progress', action='store_true', help='a line every 50 cycles')
    return p.parse_args()


def main():
    a = parse_args()
    if not os.path.exists('/dev/fuse') or not shutil.which('fusermount3'):
        print('SKIP: no /dev/fuse or fusermount3 on this machine')
        return 77
    loop = Loop(a)
    failed = True
    try:
        secs = loop.run()
        failed = False
    except Failure as e:
        print(f'FAIL: {e}', file=sys.stderr)
        return 1
    finally:
        loop.cleanup(failed)
    t = loop.totals
    print(f'PASS: {a.cycles} crash cycles (seed {a.seed}) in {secs:.0f} s: '
          f'{t.get("fuse.fsynced", 0)} fsync\'ed and {t.get("batch.durable", 0)} batch-durable '
          f'pages acknowledged, {t.get("durable-verified", 0)} durable-page checks, '
          f'{t.get("pages-checked", 0)} page reads after remounts, '
          f'{t.get("janitor.renamed", 0)} renames, {t.get("janitor.unlinked", 0)} unlinks, '
          f'{t.get("evicted", 0)} evictions, {t.get("fsck-orphans", 0)} crashes left orphaned '
          f'space (reclaimed at mount), {t.get("stuck-after-kill", 0)} killed daemons '
          'needed kvfs umount --force')
    return 0


if __name__ == '__main__':
    sys.exit(main())
