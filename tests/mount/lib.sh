# Shared helpers for the mount tests: a fresh store and mountpoint per test
# under one temp dir on a real disk (O_DIRECT), a daemon in the foreground
# with its log captured, and a trap that always unmounts and reaps it.
set -euo pipefail

KVFS=${KVFS:?KVFS must point at the kvfs binary}
PAGETOOL="python3 $(dirname "$0")/pagetool.py"

skip() { echo "SKIP: $*"; exit 77; }
[ -c /dev/fuse ] || skip "no /dev/fuse on this machine"
command -v fusermount3 >/dev/null || skip "fusermount3 is not installed (apt-get install fuse3)"
command -v python3 >/dev/null || skip "python3 is not installed"

T=$(mktemp -d "${KVFS_TEST_DIR:-/var/tmp}/kvfs-test.XXXXXX")
STORE=$T/store
MNT=$T/mnt
LOG=$T/daemon.log
DPID=
mkdir -p "$MNT"

fail() {
	echo "FAIL: $*" >&2
	if [ -s "$LOG" ]; then echo "--- daemon log (tail) ---" >&2; tail -n ${KVFS_LOG_TAIL:-30} "$LOG" >&2; fi
	exit 1
}

is_mounted() { grep -q " $1 fuse.kvfs " /proc/mounts; }

cleanup() {
	local rc=$?
	if is_mounted "$MNT"; then fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT" 2>/dev/null || true; fi
	if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
		sleep 0.5; kill -9 "$DPID" 2>/dev/null || true
	fi
	wait 2>/dev/null || true
	# a test's own teardown (e.g. unmounting a tmpfs it made under $T)
	if [ -n "${CLEANUP_HOOK:-}" ]; then eval "$CLEANUP_HOOK" || true; fi
	rm -rf "$T"
	exit $rc
}
trap cleanup EXIT

mkfs() { "$KVFS" mkfs "$STORE" "$@" >/dev/null || fail "kvfs mkfs $*"; }

# Start the daemon in the foreground (logging to $LOG); wait for the mount.
mount_kvfs() {
	"$KVFS" mount "$STORE" "$MNT" -f "$@" 2>>"$LOG" &
	DPID=$!
	for _ in $(seq 100); do
		is_mounted "$MNT" && return 0
		kill -0 "$DPID" 2>/dev/null || fail "daemon exited before mounting"
		sleep 0.1
	done
	fail "mount did not appear within 10 s"
}

# Wait (up to 30 s) for the mount's background index load to end, however
# it ended (.kvfs/stats namespace.loading back to 0).
wait_loaded() {
	for _ in $(seq 300); do
		python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1] + "/.kvfs/stats"))["namespace"]["loading"])' "$MNT" && return 0
		sleep 0.1
	done
	fail "the index of $STORE is still loading after 30 s"
}

# ext4_image SIZE MOUNT_OPTIONS [mkfs.ext4 options]: a fresh ext4 image
# ($IMG) on a loop device, mounted at $FS, released by the cleanup. Skips
# (77) where loop devices, root or e2fsprogs are missing.
release_image() {
	umount "$FS" 2>/dev/null || umount -l "$FS" 2>/dev/null || true
	for dev in $(losetup -n -O NAME -j "$IMG" 2>/dev/null); do losetup -d "$dev" 2>/dev/null || true; done
}
ext4_image() {
	local size=$1 opts=$2
	shift 2
	[ "$(id -u)" = 0 ] || skip "needs root (loop devices, mount)"
	[ -e /dev/loop-control ] || skip "no loop devices (/dev/loop-control is missing)"
	command -v losetup >/dev/null || skip "losetup is not installed (util-linux)"
	command -v mkfs.ext4 >/dev/null || skip "mkfs.ext4 is not installed (apt-get install e2fsprogs)"
	IMG=$T/disk.img
	FS=$T/disk
	CLEANUP_HOOK=release_image
	mkdir -p "$FS"
	truncate -s "$size" "$IMG"
	mkfs.ext4 -q -F "$@" "$IMG" || fail "mkfs.ext4 $IMG"
	mount -o "loop${opts:+,$opts}" "$IMG" "$FS" 2>"$T/mount.err" ||
		skip "cannot loop-mount an ext4 image: $(cat "$T/mount.err")"
}

# Clean unmount; the daemon must exit 0 after committing everything.
umount_kvfs() {
	fusermount3 -u "$MNT" || fail "fusermount3 -u $MNT"
	local rc=0
	wait "$DPID" || rc=$?
	DPID=
	[ $rc -eq 0 ] || fail "daemon exited with status $rc"
}

# The daemon log must not report errors the test did not provoke.
no_errors_in_log() {
	if grep -E 'kvfs(\[[0-9]+\])?: error:' "$LOG" | grep -vE "${1:-^$}" >&2; then
		fail "unexpected error lines in the daemon log"
	fi
}

# expect_errno ERRNO_NAME python-expression-on-os: the call must fail with it.
expect_errno() {
	local want=$1; shift
	python3 - "$want" "$@" <<'PY' || fail "expected $want from: $*"
import errno, os, sys
want = getattr(errno, sys.argv[1])
code = " ".join(sys.argv[2:])
try:
    exec(code)
except OSError as e:
    if e.errno == want:
        sys.exit(0)
    print(f"got {errno.errorcode.get(e.errno)} ({e}) instead of {sys.argv[1]}", file=sys.stderr)
    sys.exit(1)
print(f"call succeeded, expected {sys.argv[1]}", file=sys.stderr)
sys.exit(1)
PY
}
