#!/usr/bin/env bash
# After a burst of writes the daemon gives back the memory the burst
# freed, once, when it has been idle for two seconds (engine/commit.c,
# trim_memory): write buffers kept warm beyond 32 MiB and free malloc
# memory. Mounted with -o dirty=256M, so a flood keeps up to 256 MiB of
# buffers warm; idletrim.py writes 16384 pages of 64 KiB through the fast
# path from four engines at once. Must hold:
#   - within 6 s of the flood the log says the daemon gave memory back;
#   - its anonymous RSS fell by at least the write buffers it gave back
#     less 16 MiB of slack (other threads may allocate meanwhile);
#   - with no changes after that it does not trim again (a trim walks every
#     malloc arena: only after a burst, never every idle second);
#   - every page reads back whole afterwards (buffers given back are not
#     buffers lost).
. "$(dirname "$0")/lib.sh"

rss_anon() { awk '/^RssAnon/ { print $2 * 1024 }' "/proc/$DPID/status"; }
trims() { grep -c 'idle: gave back' "$LOG" || true; }

mkfs
KVFS_LOG=debug mount_kvfs -o dirty=256M
"$KVFS" model create "$MNT/m" --layers 4 --kv-heads 8 --head-dim 128 --dtype bf16 --page-tokens 16 >/dev/null ||
	fail "model create"
python3 "$(dirname "$0")/idletrim.py" "$MNT" write || fail "the write flood failed"
before=$(rss_anon)
[ "$(trims)" = 0 ] || echo "note: a trim ran during the flood (a pause of 2 s between batches)"
n0=$(trims)
for _ in $(seq 60); do [ "$(trims)" -gt "$n0" ] && break; sleep 0.1; done
[ "$(trims)" -gt "$n0" ] || fail "no 'idle: gave back' in the log within 6 s of the flood"
after=$(rss_anon)
given=$(grep 'idle: gave back' "$LOG" | tail -n 1 | sed 's/.*gave back \([0-9]*\) bytes.*/\1/')
echo "RssAnon $((before >> 20)) MiB after the flood, $((after >> 20)) MiB after the trim;" \
	"write buffers given back: $((given >> 20)) MiB"
[ "$given" -gt 0 ] || fail "the trim gave back no write buffers after a 1 GiB flood with dirty=256M"
[ "$after" -le $((before - given + (16 << 20))) ] ||
	fail "RssAnon went from $before to $after bytes, though $given bytes of buffers were given back"
n1=$(trims)
sleep 5
[ "$(trims)" = "$n1" ] || fail "the daemon trimmed again with no changes in between"
python3 "$(dirname "$0")/idletrim.py" "$MNT" read || fail "pages read back wrong after the trim"
umount_kvfs
no_errors_in_log
echo PASS
