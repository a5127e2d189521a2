#!/usr/bin/env bash
# Power cut: the whole store (manifest and stripe) lives on a loop-mounted
# XFS image, then on an ext4 one. Under mixed load (fsync'ed pages, plain
# pages, tmp+rename publishes, unlinks, fast-path batches) the backing
# filesystem is shut down with `xfs_io -x -c shutdown` WITHOUT a log flush
# (what the disk had is all that survives), the daemon is killed, and the
# image is unmounted and mounted again (journal recovery). Then, CYCLES
# times per filesystem on the same store:
#   - the manifest passes PRAGMA integrity_check;
#   - `kvfs fsck --verify-data` finds nothing but orphaned space (payloads
#     written but never committed, which mount-time recovery reclaims);
#   - after a remount of kvfs, every page whose fsync (or durable fast-path
#     write) returned before the cut is present and bit-exact, and every
#     visible page reads back whole (no EIO, no torn or misplaced bytes);
#     an fsync still in flight at the cut need not have survived;
#   - after a clean unmount, fsck --verify-data exits 0 (no leaked or
#     overlapping extents, no dangling rows, no orphaned space left).
# Env: KVFS_POWERCUT_FS (default "xfs ext4"), KVFS_POWERCUT_CYCLES (3).
# Needs root, loop devices, mkfs.xfs and xfs_io (xfsprogs), sqlite3.
. "$(dirname "$0")/lib.sh"
PC="python3 $(dirname "$0")/powercut.py"
CYCLES=${KVFS_POWERCUT_CYCLES:-3}
FSTYPES=${KVFS_POWERCUT_FS:-xfs ext4}

[ "$(id -u)" = 0 ] || skip "needs root (loop devices, mount)"
[ -e /dev/loop-control ] || skip "no loop devices (/dev/loop-control is missing)"
command -v losetup >/dev/null || skip "losetup is not installed (util-linux)"
command -v mkfs.xfs >/dev/null || skip "mkfs.xfs is not installed (apt-get install xfsprogs)"
command -v xfs_io >/dev/null || skip "xfs_io is not installed (apt-get install xfsprogs)"
command -v sqlite3 >/dev/null || skip "sqlite3 is not installed (apt-get install sqlite3)"

IMG=$T/fs.img
FS=$T/fs
LOADLOG=$T/load.log
mkdir -p "$FS"

# Teardown, also on failure: the image unmounted, its loop device detached.
image_down() {
	if mountpoint -q "$FS"; then
		for _ in $(seq 50); do umount "$FS" 2>/dev/null && break; sleep 0.1; done
		mountpoint -q "$FS" && umount -l "$FS"
	fi
	local dev
	for dev in $(losetup -n -O NAME -j "$IMG" 2>/dev/null); do losetup -d "$dev" 2>/dev/null || true; done
}
# KVFS_POWERCUT_KEEP=DIR: on failure, keep the journals and logs there.
keep() {
	[ -n "${KVFS_POWERCUT_KEEP:-}" ] || return 0
	mkdir -p "$KVFS_POWERCUT_KEEP" && cp "$T"/journal-* "$LOG" "$LOADLOG" "$KVFS_POWERCUT_KEEP"/ 2>/dev/null
	echo "journals and logs kept in $KVFS_POWERCUT_KEEP" >&2
}
CLEANUP_HOOK='[ $rc -eq 0 ] || keep; image_down'

image_mount() {
	mount -o loop "$IMG" "$FS" || fail "mount -o loop $IMG ($1) failed"
}

# Unmount (retrying: io_uring workers of a killed daemon may hold files
# for a moment) and check the loop device went with it.
image_umount() {
	local i
	for i in $(seq 50); do umount "$FS" 2>/dev/null && break; sleep 0.1; done
	! mountpoint -q "$FS" || fail "cannot unmount $FS: $(fuser -vm "$FS" 2>&1)"
	[ -z "$(losetup -n -O NAME -j "$IMG")" ] || fail "loop device of $IMG still attached"
}

# fsck --verify-data: 0, or (with $1 = crash) problems that are only
# orphaned space, which the daemon's mount-time recovery reclaims.
check_fsck() {
	local out rc=0
	out=$("$KVFS" fsck "$STORE" --verify-data 2>&1) || rc=$?
	if [ $rc -eq 0 ]; then return 0; fi
	if [ "$1" = crash ] && [ $rc -eq 4 ] &&
		! echo "$out" | grep -v '^kvfs fsck: ' | grep -v '(orphaned space)$' >/dev/null; then
		echo "  fsck after the cut: $(echo "$out" | grep -c '(orphaned space)$') segment(s) with orphaned space"
		return 0
	fi
	echo "$out" >&2
	fail "$2: kvfs fsck --verify-data exited $rc"
}

check_integrity() {
	local ic
	ic=$(sqlite3 "$STORE/kvfs.db" 'PRAGMA integrity_check' 2>&1) || true
	[ "$ic" = ok ] || fail "$1: manifest PRAGMA integrity_check: $ic"
}

cycle() {
	local fstype=$1 cyc=$2 journal=$3 what="$1 cycle $2" load s logoff
	logoff=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
	local cycle_log=$logoff
	# Even cycles use buffered segment I/O: with O_DIRECT the payload is on
	# the device as soon as the write returns, buffered it is lost unless
	# fdatasync'ed, so a missing sync shows up there.
	local io=
	[ $((cyc % 2)) -eq 0 ] && io=,no_direct
	what="$what${io:+ (no_direct)}"
	mount_kvfs -o authoritative,ram_cache=0$io
	mkdir -p "$MNT/m/00" "$MNT/m/01" "$MNT/m/02"
	echo "R - - $(date -u +%T.%3N)" >>"$journal"
	$PC load "$MNT/m" "$journal" "$fstype$cyc" 30 2>>"$LOADLOG" &
	load=$!
	# Cut at a random moment once the load is under way (its first ack).
	local acks_start acks_before w
	acks_start=$(grep -c '^A ' "$journal" || true)
	for w in $(seq 200); do
		[ "$(grep -c '^A ' "$journal" || true)" -gt "$acks_start" ] && break
		kill -0 "$load" 2>/dev/null || fail "$what: the load died: $(tail -n 5 "$LOADLOG")"
		sleep 0.05
	done
	[ "$w" -lt 200 ] || fail "$what: no fsync returned within 10 s of starting the load"
	s=$((RANDOM % 12 + 1))
	sleep "$((s / 10)).$((s % 10))"
	acks_before=$(grep -c '^A ' "$journal" || true)
	kill -0 "$DPID" 2>/dev/null || fail "$what: the daemon died under load"
	# The cut: nothing the filesystem has not written reaches the disk. An
	# fsync that returns after the marker was in flight at the cut: the
	# kernel may report success for it although its journal commit was cut
	# off (a real power cut would not let anyone hear that answer).
	echo "C - - $(date -u +%T.%3N)" >>"$journal"
	xfs_io -x -c shutdown "$FS" || fail "$what: xfs_io shutdown of $FS"
	# Let the daemon meet the I/O errors for a moment (its fsyncs must fail
	# now), then kill it.
	sleep "0.$((RANDOM % 4))"
	kill -9 "$DPID"
	wait "$DPID" 2>/dev/null || true
	DPID=
	fusermount3 -u -z "$MNT"
	wait "$load" || fail "$what: the load died: $(tail -n 5 "$LOADLOG")"
	echo "  $what: first ack after $((w * 50)) ms, cut ${s}00 ms later; $(grep -c '^A ' "$journal") acks in all ($acks_before before the cut);" \
		"$(tail -c +$((logoff + 1)) "$LOG" | grep -cE 'kvfs(\[[0-9]+\])?: error:' || true) I/O error lines in the daemon log;" \
		"$(tail -n 1 "$LOADLOG")"

	# Power back: journal recovery at mount.
	image_umount
	image_mount "$fstype"
	check_integrity "$what"
	check_fsck crash "$what (before remount)"
	logoff=$(stat -c %s "$LOG")
	mount_kvfs -o authoritative,ram_cache=0$io
	if ! $PC check "$MNT/m" "$journal" >"$T/problems"; then
		cat "$T/problems" >&2
		echo "--- journal around the last cut, daemon log lines naming the pages ---" >&2
		grep -n '^C ' "$journal" | tail -n 1 >&2
		local name
		for name in $(awk '{sub(/:$/, "", $3); print $3}' "$T/problems" | head -n 5); do
			grep -n " $name " "$journal" >&2
			grep -F "page ${name##*/} " "$LOG" >&2
		done
		fail "$what: pages after the power cut"
	fi
	umount_kvfs
	if tail -c +$((logoff + 1)) "$LOG" | grep -E 'error:|checksum mismatch' >&2; then
		fail "$what: errors in the daemon log after the power cut"
	fi
	check_fsck clean "$what (after recovery)"
	if tail -c +$((cycle_log + 1)) "$LOG" | grep -E 'Sanitizer|runtime error:' >&2; then
		fail "$what: sanitizer report in the daemon log"
	fi
	check_integrity "$what (after recovery)"
}

ran=
for fstype in $FSTYPES; do
	command -v "mkfs.$fstype" >/dev/null || { echo "NOTE: mkfs.$fstype is not installed, $fstype skipped"; continue; }
	rm -f "$IMG"
	truncate -s 1G "$IMG"
	case $fstype in
	ext4) mkfs.ext4 -q -F "$IMG" ;;
	*) "mkfs.$fstype" -q "$IMG" ;;
	esac || fail "mkfs.$fstype $IMG"
	if ! mount -o loop "$IMG" "$FS" 2>"$T/mount.err"; then
		[ -z "$ran" ] && skip "cannot loop-mount a $fstype image: $(cat "$T/mount.err")"
		fail "mount -o loop $IMG ($fstype): $(cat "$T/mount.err")"
	fi
	STORE=$FS/store
	mkfs --segment-size 64M
	journal=$T/journal-$fstype
	: >"$journal"
	echo "$fstype:"
	for cyc in $(seq 1 "$CYCLES"); do
		cycle "$fstype" "$cyc" "$journal"
	done
	[ "$(grep -c '^A ' "$journal")" -gt 0 ] || fail "$fstype: no page was acknowledged: the load did not run"
	image_umount
	ran="$ran $fstype"
done
[ -n "$ran" ] || skip "no filesystem to test"
echo "PASS: $CYCLES power cuts each on$ran"
