#!/bin/bash
# POSIX semantics that ordinary tools rely on (semantics.py): a write that
# can never succeed is refused at once without evicting anything, times and
# modes set before the seal survive it and a remount, directory times follow
# their entries, writes and truncates move mtime and ctime, fallocate grows
# a page being written, unlinked open
# pages have no links and change through their descriptors, sealed pages' metadata
# changes under the usual rules while their bytes stay immutable, set-id
# bits and setgid directories behave as on ext4.
. "$(dirname "$0")/lib.sh"
SEM="python3 $(dirname "$0")/semantics.py"
export T

mkfs --capacity 32M
# A bad option is named, without the whole usage.
for o in dirty=abc evict_low=95,evict_high=90; do
	rc=0; "$KVFS" mount "$STORE" "$MNT" -o "$o" 2>"$T/opt.err" || rc=$?
	[ $rc -eq 2 ] && grep -q "${o%%=*}" "$T/opt.err" && ! grep -q "usage:" "$T/opt.err" ||
		fail "mount -o $o: exit $rc, $(cat "$T/opt.err")"
done
chmod 755 "$T"    # uid 65534 reaches the mount (setid)
mount_kvfs -o allow_other
for step in wipe truncate_refused proportional times write_times fallocate dirs nlink \
	    unlinked_attrs sealed_meta setid; do
	$SEM $step "$MNT" || fail "$step"
done
umount_kvfs
mount_kvfs
$SEM sealed_meta_after "$MNT" || fail "metadata after a remount"
$SEM setid_after "$MNT" || fail "set-id bits and groups after a remount"
umount_kvfs
no_errors_in_log "refused at once|will not be stored|discarded at close"
echo "PASS: semantics"
