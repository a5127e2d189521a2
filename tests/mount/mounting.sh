#!/usr/bin/env bash
# Mounting like any other filesystem:
#   mount -t fuse.kvfs STORE MNT -o ... runs /sbin/mount.fuse.kvfs, which
#     drops mount(8)/systemd-only options and mounts; umount MNT runs
#     umount.fuse.kvfs, which returns only once the daemon released the store;
#   an /etc/fstab line: mount MNT, mount -a;
#   mount -f (fake), -r (read-only), a busy mountpoint, a bad option: the
#     statuses and messages mount(8) callers expect;
#   the systemd unit's commands, run as systemd would: READY=1 only once the
#     mount is there, ExecStop unmounts and waits, ExecStopPost leaves another
#     store's mount alone and clears this store's stale one;
#   kvfs umount --escalate forces a stopped daemon.
# Runs in a private mount namespace in which /sbin holds links to the kvfs
# under test and /etc/fstab is the test's own: the machine's are untouched.
. "$(dirname "$0")/lib.sh"

command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
command -v mount >/dev/null || skip "mount (util-linux) is not installed"
if [ -z "${KVFS_MOUNTING_NS:-}" ]; then
	trap - EXIT; rm -rf "$T"
	KVFS_MOUNTING_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi

# This namespace holds copies of every mount there was, other tests' FUSE
# mounts too: a copy keeps their connection alive after they unmount. Drop
# them (here only).
awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) ~ /^fuse(\.|blk|$)/) print $5; break } }' \
	/proc/self/mountinfo | sort -r |
	while read -r m; do umount -l "$m" 2>/dev/null || true; done

SBIN=$(readlink -f /sbin)
cp -a "$SBIN" "$T/sbin"
ln -sf "$KVFS" "$T/sbin/mount.fuse.kvfs"
ln -sf "$KVFS" "$T/sbin/umount.fuse.kvfs"
mount --bind "$T/sbin" "$SBIN" || skip "cannot bind-mount over $SBIN in a mount namespace"
# The detached daemons are no children of ours: end any left (a failure
# may leave one stopped) before the namespace goes.
end_daemons() {
	local pid
	for lock in "$STORE/kvfs.lock" "$T/other/kvfs.lock"; do
		[ -e "$lock" ] && ! flock -n "$lock" true || continue   # held: a daemon lives
		pid=$(head -1 "$lock" 2>/dev/null) || continue
		[ -n "$pid" ] && kill -CONT "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	done
	for m in "$MNT" "$T/mnt2"; do umount -l "$m" 2>/dev/null; done
}
CLEANUP_HOOK="end_daemons; umount -l $SBIN 2>/dev/null; umount -l /etc/fstab 2>/dev/null"

lock_free() { flock -n "$STORE/kvfs.lock" true; }
src_of() { findmnt -n -o SOURCE --target "$1" 2>/dev/null | tail -1; }
mounted_here() {
	is_mounted "$MNT" || fail "$1: nothing mounted at $MNT"
	[ "$(src_of "$MNT")" = "kvfs:$STORE" ] || fail "$1: $MNT shows $(src_of "$MNT")"
}
write_page() { cp "$T/page" "$MNT/m/00/$1" && cmp "$T/page" "$MNT/m/00/$1"; }

mkfs --capacity 256M
head -c 65536 /dev/urandom > "$T/page"

# ---- mount -t fuse.kvfs, with options only mount(8)/systemd read ----
mount -t fuse.kvfs "$STORE" "$MNT" \
	-o ram_cache=16M,noauto,nofail,_netdev,x-systemd.requires=x.mount,comment=kv,relatime ||
	fail "mount -t fuse.kvfs"
mounted_here "mount -t"
grep -q "fuse.kvfs kvfs:$STORE" /proc/self/mountinfo || fail "type is not fuse.kvfs"
mkdir -p "$MNT/m/00"
write_page a || fail "page through a mount -t mount"
df "$MNT" | grep -q "kvfs:$STORE" || fail "df does not show the store"
lock_free && fail "the store is not locked while mounted"
# logrotate: move the log, SIGHUP; the daemon stays and writes a new log.
mv "$STORE/kvfs.log" "$STORE/kvfs.log.1"
kill -HUP "$(head -1 "$STORE/kvfs.lock")"
sleep 0.3
mounted_here "after SIGHUP"
cmp "$T/page" "$MNT/m/00/a" || fail "page after SIGHUP"
# (x-systemd.* gave the mount a utab entry: umount(8) runs umount.fuse.kvfs)
umount "$MNT" || fail "umount"
is_mounted "$MNT" && fail "still mounted after umount"
lock_free || fail "umount returned before the daemon released the store"
grep -q "unmounted $MNT" "$STORE/kvfs.log" || fail "no new log after SIGHUP"
grep -q "unmounted" "$STORE/kvfs.log.1" && fail "wrote on to the rotated log"
cat "$STORE/kvfs.log.1" "$STORE/kvfs.log" > "$T/log" && mv "$T/log" "$STORE/kvfs.log"
# Without userspace options umount(8) unmounts by itself, at once; the
# daemon commits and exits in the background. uhelper=kvfs brings the
# helper back.
mount -t fuse.kvfs "$STORE" "$MNT" || fail "mount again"
umount "$MNT" || fail "umount"
is_mounted "$MNT" && fail "still mounted after umount"
for _ in $(seq 100); do lock_free && break; sleep 0.1; done
lock_free || fail "the daemon did not exit after umount"
mount -t fuse.kvfs "$STORE" "$MNT" -o uhelper=kvfs || fail "mount -o uhelper=kvfs"
umount "$MNT" || fail "umount"
lock_free || fail "umount of a uhelper=kvfs mount returned before the daemon released the store"
grep -q "unmounted $MNT" "$STORE/kvfs.log" || fail "no clean unmount in the log"
grep -q "store: .* extents" "$STORE/kvfs.log" || fail "startup lines missing from the log"

# ---- mount -f mounts nothing; -r is read-only; kvfs:STORE is accepted ----
mount -f -t fuse.kvfs "$STORE" "$MNT" || fail "mount -f"
is_mounted "$MNT" && fail "mount -f mounted"
mount -r -t fuse.kvfs "kvfs:$STORE" "$MNT" || fail "mount -r kvfs:STORE"
mounted_here "mount -r"
cmp "$T/page" "$MNT/m/00/a" || fail "page lost across mounts"
cp "$T/page" "$MNT/m/00/b" 2>"$T/err" && fail "wrote to a read-only mount"
grep -qi "read-only" "$T/err" || fail "read-only write: $(cat "$T/err")"

# ---- a busy mountpoint, bad options: mount(8)'s statuses ----
rc=0; mount -t fuse.kvfs "$STORE" "$MNT" 2>"$T/err" || rc=$?
[ $rc -eq 32 ] || fail "mount over a kvfs mount: status $rc, want 32"
grep -q "already a mount point" "$T/err" || fail "busy mountpoint: $(cat "$T/err")"
umount "$MNT" || fail "umount of the read-only mount"
rc=0; mount -t fuse.kvfs "$STORE" "$MNT" -o ram_cache=lots 2>"$T/err" || rc=$?
[ $rc -eq 1 ] || fail "bad option value: status $rc, want 1"
grep -q "bad option value: ram_cache=lots" "$T/err" || fail "bad value: $(cat "$T/err")"
rc=0; mount -t fuse.kvfs "$STORE" "$MNT" -o no_such_option 2>"$T/err" || rc=$?
[ $rc -eq 32 ] || fail "unknown option: status $rc, want 32"
is_mounted "$MNT" && fail "mounted with a bad option"
lock_free || fail "a refused mount left the store locked"

# kvfs mount ignores them too: an fstab line's options work by hand.
"$KVFS" mount -q "$STORE" "$MNT" -o ram_cache=16M,noauto,nofail,uhelper=kvfs,x-a=b ||
	fail "kvfs mount -o with fstab-only options"
mounted_here "kvfs mount -o noauto,..."
"$KVFS" umount "$MNT" || fail "kvfs umount"

# ---- /etc/fstab ----
MNT2=$T/mnt2; mkdir -p "$MNT2"
cat > "$T/fstab" <<FSTAB
# kvfs test
kvfs:$STORE  $MNT   fuse.kvfs  ram_cache=16M,noauto,nofail,uhelper=kvfs  0 0
$STORE       $MNT2  fuse.kvfs  defaults,ram_cache=8M        0 0
FSTAB
[ -e /etc/fstab ] || skip "no /etc/fstab to stand in for"
mount --bind "$T/fstab" /etc/fstab || fail "bind-mount the test fstab"
mount "$MNT" || fail "mount MNT from fstab"
mounted_here "fstab"
write_page c || fail "page through an fstab mount"
umount "$MNT" || fail "umount fstab mount"
lock_free || fail "umount of the fstab mount returned before the daemon released the store"
mount -a -t fuse.kvfs || fail "mount -a"
is_mounted "$MNT" && fail "mount -a mounted a noauto entry"
is_mounted "$MNT2" || fail "mount -a did not mount the auto entry"
cmp "$T/page" "$MNT2/m/00/c" || fail "page c through the mount -a mount"
umount "$MNT2" || fail "umount the mount -a mount"
for _ in $(seq 100); do lock_free && break; sleep 0.1; done   # (no utab entry)
umount /etc/fstab

# ---- the systemd unit's commands, as systemd runs them ----
UNIT=$(dirname "$0")/../../tools/systemd/kvfs@.service.in
[ -f "$UNIT" ] || fail "no unit template at $UNIT"
if command -v systemd-analyze >/dev/null; then
	sed "s|@BINDIR@|$(dirname "$KVFS")|" "$UNIT" > "$T/kvfs@test.service"
	systemd-analyze verify --man=no "$T/kvfs@test.service" >"$T/verify" 2>&1 ||
		fail "systemd-analyze verify: $(cat "$T/verify")"
	[ -s "$T/verify" ] && fail "systemd-analyze verify complains: $(cat "$T/verify")"
else
	echo "note: systemd-analyze not installed: the unit's syntax is not verified"
fi
cat > "$T/kvfs.conf" <<CONF
KVFS_STORE=$STORE
KVFS_MOUNTPOINT=$MNT
KVFS_OPTIONS=ram_cache=16M
CONF
python3 - "$UNIT" "$KVFS" "$T" <<'PY' || fail "systemd unit"
import os, re, socket, subprocess, sys, time
unit, kvfs, tmp = sys.argv[1:4]
env = dict(l.strip().split("=", 1) for l in open(f"{tmp}/kvfs.conf") if "=" in l)
lines = {}
for l in open(unit):
    m = re.match(r"(Exec\w+|Type|NotifyAccess)=(.*)", l.strip())
    if m:
        lines[m.group(1)] = m.group(2)
assert lines.get("Type") == "notify", "the unit must wait for READY=1"
def argv(key):
    cmd = lines[key].lstrip("-")
    cmd = cmd.replace("@BINDIR@/kvfs", kvfs)
    return [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], w) for w in cmd.split()]
def mounted():
    return any(l.split()[4] == env["KVFS_MOUNTPOINT"] for l in open("/proc/self/mountinfo"))
sock_path = f"{tmp}/notify.sock"
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sock_path)
s.settimeout(20)
subprocess.run(argv("ExecStartPre"), check=True)
d = subprocess.Popen(argv("ExecStart"), env={**os.environ, "NOTIFY_SOCKET": sock_path},
                     stderr=open(f"{tmp}/unit.log", "w"))
msg = s.recv(4096).decode()
assert "READY=1" in msg, f"first notification: {msg!r}"
assert mounted(), "READY=1 came before the mount was in place"
with open(os.path.join(env["KVFS_MOUNTPOINT"], "m/00/a"), "rb") as f:
    assert len(f.read()) == 65536
# ExecStop: unmounts, and returns once the daemon has gone
stop = subprocess.run(argv("ExecStop"), capture_output=True, text=True)
assert stop.returncode == 0, f"ExecStop: {stop.stderr}"
assert d.poll() is not None, "ExecStop returned while the daemon still runs"
assert d.returncode == 0, f"daemon exit status {d.returncode}"
assert not mounted(), "ExecStop left the mount"
msgs = s.recv(4096).decode()
assert "STOPPING=1" in msgs, f"no STOPPING=1: {msgs!r}"
# ExecStopPost on a cleanly stopped unit: nothing to do, status ignored ("-")
assert lines["ExecStopPost"].startswith("-"), "ExecStopPost must not fail the unit"
# Restart after a SIGKILL: ExecStopPost clears this store's stale mount ...
d = subprocess.Popen(argv("ExecStart"), env={**os.environ, "NOTIFY_SOCKET": sock_path},
                     stderr=open(f"{tmp}/unit.log", "a"))
assert "READY=1" in s.recv(4096).decode()
d.kill(); d.wait()
post = subprocess.run(argv("ExecStopPost"), capture_output=True, text=True)
assert post.returncode == 0, f"ExecStopPost after SIGKILL: {post.stdout}{post.stderr}"
assert not mounted(), "ExecStopPost left the stale mount"
print("unit: ready after mount, stop waits for the daemon, stale mount cleared")
PY
grep -q "error:" "$T/unit.log" && fail "errors in the unit's log: $(grep error: "$T/unit.log")"

# ... but a failed start's ExecStopPost leaves another store's mount alone
"$KVFS" mkfs "$T/other" >/dev/null
"$KVFS" mount "$T/other" "$MNT" 2>/dev/null || fail "mount the other store"
out=$("$KVFS" umount --force --store "$STORE" "$MNT" 2>&1) && fail "umount --store unmounted another store"
grep -q "left alone" <<<"$out" || fail "umount --store: $out"
ls "$MNT" >/dev/null || fail "the other store's mount was hurt"
"$KVFS" umount "$MNT" || fail "umount the other store"

# ---- --escalate forces a daemon that does not answer ----
mount -t fuse.kvfs "$STORE" "$MNT" || fail "mount for --escalate"
dpid=$(head -1 "$STORE/kvfs.lock")
kill -STOP "$dpid"
timeout 60 "$KVFS" umount --escalate --wait 2 --store "$STORE" "$MNT" >"$T/esc" 2>&1 ||
	fail "umount --escalate: $(cat "$T/esc")"
grep -q "forcing" "$T/esc" || fail "--escalate did not say it forced: $(cat "$T/esc")"
is_mounted "$MNT" && fail "--escalate left the mount"
for _ in $(seq 50); do lock_free && break; sleep 0.1; done
lock_free || fail "the stopped daemon still holds the store"
alive() { [ -e /proc/$1 ] && ! grep -q '^[0-9]* (.*) Z' /proc/$1/stat 2>/dev/null; }
for _ in $(seq 50); do alive "$dpid" || break; sleep 0.1; done
alive "$dpid" && fail "the stopped daemon survived --escalate"

# Every page written through any of these mounts is still there.
"$KVFS" mount "$STORE" "$MNT" || fail "final mount"
for p in a c; do cmp "$T/page" "$MNT/m/00/$p" || fail "page $p lost"; done
"$KVFS" umount "$MNT" || fail "final umount"
"$KVFS" fsck "$STORE" >/dev/null || fail "fsck after the mounting test"
echo "PASS: mount -t fuse.kvfs, fstab, mount(8) statuses, systemd unit, --escalate"
