#!/usr/bin/env bash
# A hung or dead daemon, and how an operator gets the mount back:
#   hung (SIGSTOP): I/O on the mount blocks; kvfs mount explains it instead
#     of blocking; kvfs umount refuses without --force; --force aborts the
#     connection (blocked readers fail, they do not hang), detaches the
#     mount and ends the daemon; the remount has every fsync'ed page;
#   hung, then it wakes up: after the abort it exits by itself, status 0,
#     having committed everything (not killed);
#   dead (SIGKILL): kvfs mount says stale; kvfs umount clears it;
#   live: kvfs umount returns once the daemon has exited and freed the store.
. "$(dirname "$0")/lib.sh"

mounted_gone() { ! is_mounted "$MNT" || fail "$1: $MNT is still mounted"; }

mkfs
mount_kvfs
mkdir -p "$MNT/m/00"
$PAGETOOL write "$MNT/m/00" durable 50 0 --fsync || fail "fsync'ed writes"

# ---- hung: stopped daemon ----
kill -STOP "$DPID"
# In the background, not under timeout(1): a request a FUSE thread read
# just before the stop took effect waits for its answer uninterruptibly
# (the kernel's "already in userspace: wait it out"), so no signal ends
# it; only the abort below does.
ls "$MNT/m/00" >/dev/null 2>&1 &
lister=$!
sleep 3
if ! kill -0 "$lister" 2>/dev/null; then
	wait "$lister" && fail "ls answered although the daemon is stopped"
fi
cat "$MNT/m/00/durable000001" >/dev/null 2>"$T/reader.err" &
reader=$!
out=$("$KVFS" mount "$STORE" "$MNT" 2>&1) && fail "mount over a hung mount succeeded"
grep -q "hung FUSE mount" <<<"$out" || fail "hung mount not explained: $out"
grep -q "kvfs umount --force $MNT" <<<"$out" || fail "no recovery command: $out"
out=$(timeout 20 "$KVFS" umount "$MNT" 2>&1) && fail "plain umount of a hung mount succeeded"
grep -q "does not answer" <<<"$out" || fail "plain umount did not say why: $out"
start=$SECONDS
timeout 60 "$KVFS" umount --force --wait 2 "$MNT" >"$T/force.out" 2>&1 ||
	fail "umount --force: $(cat "$T/force.out")"
[ $((SECONDS - start)) -le 20 ] || fail "umount --force took $((SECONDS - start)) s"
grep -q "aborted the FUSE connection" "$T/force.out" || fail "no abort reported: $(cat "$T/force.out")"
grep -q "waiting up to .* it is stopped (SIGSTOP)" "$T/force.out" ||
	fail "umount --force did not say what it waits for: $(cat "$T/force.out")"
mounted_gone "umount --force"
wait "$reader" && fail "the blocked reader succeeded on an aborted connection"
wait "$lister" && fail "the blocked ls succeeded on an aborted connection"
grep -qE "connection abort|not connected" "$T/reader.err" ||
	fail "blocked reader: $(cat "$T/reader.err")"
rc=0; wait "$DPID" || rc=$?
DPID=
[ $rc -eq 137 ] || fail "the stopped daemon was not killed (status $rc)"

mount_kvfs
[ "$($PAGETOOL verify "$MNT/m/00" durable 50 0)" = 50 ] || fail "fsync'ed pages after the hung daemon"
# A busy mount is umount(8)'s status 32, not a generic failure.
exec 8<"$MNT/m/00/durable000001"
rc=0; "$KVFS" umount "$MNT" 2>"$T/busy.err" || rc=$?
exec 8<&-
[ $rc -eq 32 ] && grep -q "is busy" "$T/busy.err" || fail "umount of a busy mount: exit $rc, $(cat "$T/busy.err")"

# ---- hung, then it wakes up: it notices the abort and exits cleanly ----
$PAGETOOL write "$MNT/m/00" late 20 4096 || fail "writes before the second stop"
kill -STOP "$DPID"
"$KVFS" umount --force --wait 20 "$MNT" >"$T/force2.out" 2>&1 &
um=$!
sleep 1
kill -CONT "$DPID"
wait "$um" || fail "umount --force of a daemon that resumed: $(cat "$T/force2.out")"
grep -q "killing it" "$T/force2.out" && fail "a daemon that exits by itself was killed"
rc=0; wait "$DPID" || rc=$?
DPID=
[ $rc -eq 0 ] || fail "the resumed daemon exited with status $rc"
mounted_gone "umount --force (resumed)"

# ---- dead daemon: stale mount ----
mount_kvfs
[ "$($PAGETOOL verify "$MNT/m/00" late 20 4096)" = 20 ] || fail "pages committed at the aborted exit"
kill -9 "$DPID"
wait "$DPID" 2>/dev/null || true
DPID=
out=$("$KVFS" mount "$STORE" "$MNT" 2>&1) && fail "mount over a stale mount succeeded"
grep -q "stale" <<<"$out" || fail "stale mount not explained: $out"
out=$("$KVFS" umount "$MNT" 2>&1) || fail "kvfs umount of a stale mount: $out"
grep -q "was stale" <<<"$out" || fail "stale unmount not reported: $out"
mounted_gone "umount of a stale mount"

# ---- live daemon: umount returns once the store is free ----
mount_kvfs
[ "$($PAGETOOL verify "$MNT/m/00" durable 50 0)" = 50 ] || fail "fsync'ed pages after the stale mount"
"$KVFS" umount "$MNT" || fail "kvfs umount of a live mount"
"$KVFS" fsck "$STORE" >"$T/fsck.out" 2>&1 || fail "store not free or not clean right after kvfs umount: $(cat "$T/fsck.out")"
rc=0; wait "$DPID" || rc=$?
DPID=
[ $rc -eq 0 ] || fail "daemon exited with status $rc after kvfs umount"

# ---- usage errors ----
"$KVFS" umount "$T" 2>"$T/err" && fail "umount of a directory nothing is mounted on succeeded"
grep -q "nothing is mounted" "$T/err" || fail "unclear error: $(cat "$T/err")"
rc=0; "$KVFS" umount 2>/dev/null || rc=$?
[ $rc -eq 2 ] || fail "umount without a mountpoint: exit $rc, not a usage error (2)"
echo PASS
