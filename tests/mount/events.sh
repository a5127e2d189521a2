#!/bin/bash
# MOUNT/.kvfs/events (see events.py): stored, replaced, removed records in
# order, only for durable changes; poll and blocked reads wake; 16 readers
# blocked in read hold no FUSE worker; a slow reader gets an exact overflow
# record; after a remount the numbering goes on; a small capacity gives
# evicted records.
. "$(dirname "$0")/lib.sh"
EV_PY="python3 $(dirname "$0")/events.py"
RING=64

mkfs
mount_kvfs -o fault_injection,events_ring=$RING
mkdir "$MNT/m" || fail "mkdir"
[ "$(stat -c %a "$MNT/.kvfs/events")" = 400 ] || fail "events is not mode 0400"
ls "$MNT/.kvfs" | grep -qx events || fail "events is not listed in .kvfs"
last=$($EV_PY "$MNT" main $RING) || fail "events: main checks"
echo "last sequence number before the remount: $last"
[ "$last" -gt $((3 * RING)) ] || fail "main phase reported last sequence number '$last'"
umount_kvfs
# Injected faults and the withdrawn page are logged as errors, on purpose.
no_errors_in_log "injected fault|lost: writing its payload failed|manifest transaction failed|write of 4096 bytes at offset [0-9]+ failed"
: >"$LOG"
mount_kvfs -o capacity=4M   # the default ring holds the whole flood
$EV_PY "$MNT" remount "$last" || fail "events: remount and evictions"
umount_kvfs
no_errors_in_log
echo "PASS: KV events (stored, replaced, removed, evicted, overflow, poll, blocked readers, remount)"
