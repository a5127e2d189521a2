"""Compare two directory trees: names, kinds, bytes, modes and mtimes (to
the nanosecond unless --mtime-sec). Exit 1 with the differences listed."""
import os
import stat
import sys


def walk(top):
    out = {}
    for d, dirs, files in os.walk(top):
        for name in dirs + files:
            p = os.path.join(d, name)
            out[os.path.relpath(p, top)] = p
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    coarse = '--mtime-sec' in sys.argv
    skip_dir_times = '--no-dir-times' in sys.argv
    a, b = walk(args[0]), walk(args[1])
    bad = []
    if sorted(a) != sorted(b):
        bad.append(f'names differ: only in {args[0]}: {sorted(set(a) - set(b))}, '
                   f'only in {args[1]}: {sorted(set(b) - set(a))}')
    for rel in sorted(set(a) & set(b)):
        sa, sb = os.lstat(a[rel]), os.lstat(b[rel])
        if stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode):
            bad.append(f'{rel}: kind differs')
            continue
        if stat.S_IMODE(sa.st_mode) != stat.S_IMODE(sb.st_mode):
            bad.append(f'{rel}: mode {oct(sa.st_mode)} vs {oct(sb.st_mode)}')
        isdir = stat.S_ISDIR(sa.st_mode)
        ta, tb = sa.st_mtime_ns, sb.st_mtime_ns
        if coarse:
            ta, tb = ta // 10**9, tb // 10**9
        if ta != tb and not (isdir and skip_dir_times):
            bad.append(f'{rel}: mtime {sa.st_mtime_ns} vs {sb.st_mtime_ns}')
        if not isdir:
            with open(a[rel], 'rb') as fa, open(b[rel], 'rb') as fb:
                if fa.read() != fb.read():
                    bad.append(f'{rel}: bytes differ')
    for line in bad:
        print(f'treecmp: {line}', file=sys.stderr)
    sys.exit(1 if bad else 0)


main()
