#!/usr/bin/env bash
# Several writer and reader processes at once: every page read is complete
# and exact, every page written is there afterwards.
. "$(dirname "$0")/lib.sh"

mkfs
mount_kvfs
for l in 0 1 2 3; do mkdir -p "$MNT/m/0$l"; done
pids=()
for l in 0 1 2 3; do
	$PAGETOOL write "$MNT/m/0$l" w 150 0 & pids+=($!)
done
readers=()
for r in 1 2 3; do
	( for _ in 1 2 3 4 5; do
		for l in 0 1 2 3; do $PAGETOOL verify "$MNT/m/0$l" w 150 0 --missing-ok >/dev/null || exit 1; done
	  done ) & readers+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a writer failed"; done
for p in "${readers[@]}"; do wait "$p" || fail "a reader saw wrong bytes"; done
for l in 0 1 2 3; do
	[ "$($PAGETOOL verify "$MNT/m/0$l" w 150 0)" = 150 ] || fail "layer $l incomplete"
done
umount_kvfs
no_errors_in_log
echo PASS
