/*
 * KV events: MOUNT/.kvfs/events, a stream of JSON lines telling routers
 * which pages were stored, replaced, removed or evicted (docs/usage.md,
 * "KV events").
 *
 * A record is captured when its change is queued for the manifest (under
 * ns_lock: the page's layer and model names are still in the index) and
 * rides on the committer's op; it gets its sequence number and enters the
 * ring only once the transaction holding the change committed (the
 * committer's thread, after ns_lock is dropped). So every record names a
 * change a crash cannot take back, records come in namespace order, and the
 * manifest's meta event_seq, set in that same transaction, lets the next
 * mount continue the numbering (docs/decisions/operations.md).
 *
 * The ring keeps the last events_ring records. Each open of the file is a
 * reader with its own cursor (kvfs_events_reader_new); a reader whose
 * cursor fell out of the ring gets one overflow record saying how many it
 * missed. Nothing here waits: after records are appended (or the stream
 * closes) the front end's events_ready hook is called, with no lock held,
 * and it answers the reads it parked (fuse/events_file.c).
 *
 * Locking: evs.lock is a leaf (kvfs_i.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvfs_i.h"

/* One open of MOUNT/.kvfs/events. */
struct kvfs_events_reader {
	uint64_t cursor;            /* seq of the next record to deliver */
	char *carry;                /* rest of a record a short read cut */
	size_t carry_len, carry_off;
	struct kvfs_events_reader *prev, *next;
};

struct ev_line {
	char *text;
	size_t len;
};

struct kvfs_events {
	pthread_mutex_t lock;
	struct ev_line *ring;       /* record seq lives at ring[seq % cap] */
	size_t cap;
	uint64_t first, next;       /* retained records: seqs [first, next) */
	struct kvfs_events_reader *readers;
	unsigned nreaders;
	bool closed;                /* shutting down: reads end (EOF) */
	uint64_t missed;            /* records readers lost to overflow */
	uint64_t overflows;         /* overflow records delivered */
};

static const char *const type_names[] = {
	[KVFS_EV_STORED] = "stored",
	[KVFS_EV_REMOVED] = "removed",
	[KVFS_EV_EVICTED] = "evicted",
	[KVFS_EV_REPLACED] = "replaced",
};

/* ---- capture (ns_lock held) ---- */

/* Like queueing a manifest change, recording it may not be dropped for a
 * moment's lack of memory: a router would never learn of the change. */
static void *alloc_retry(size_t size)
{
	void *p;

	while (!(p = malloc(size))) {
		kv_log(KV_LOG_WARN, "out of memory recording a KV event; retrying");
		usleep(10000);
	}
	return p;
}

struct kvfs_event *kvfs_event_capture(struct kvfs *fs, enum kvfs_event_type type,
				      const struct kv_node_info *n)
{
	struct kvfs_event *e = alloc_retry(sizeof(*e));
	struct kv_node_info d;

	e->type = type;
	e->size = n->size;
	e->time_ns = kvfs_now_ns();
	e->next = NULL;
	memcpy(e->name, n->name, sizeof(e->name));
	e->layer[0] = e->model[0] = '\0';
	if (kv_index_get(fs->idx, n->parent, &d) == 0) {
		memcpy(e->layer, d.name, sizeof(e->layer));
		if (kv_index_get(fs->idx, d.parent, &d) == 0)
			memcpy(e->model, d.name, sizeof(e->model));
	}
	if (!e->model[0])    /* the caller holds ns_lock: the parents exist */
		kv_log(KV_LOG_ERR, "KV event for page %s (inode %" PRIu64 "): its layer "
		       "or model is not in the index", n->name, n->ino);
	return e;
}

void kvfs_event_free(struct kvfs_event *e)
{
	struct kvfs_event *next;

	for (; e; e = next) {
		next = e->next;
		free(e);
	}
}

size_t kvfs_event_count(const struct kvfs_event *e)
{
	size_t n = 0;

	for (; e; e = e->next)
		n++;
	return n;
}

/* ---- formatting ---- */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s, size_t left)
{
	size_t n, i;
	uint32_t c;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, c = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, c = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, c = s[0] & 0x07;
	else
		return 0;
	if (n > left)
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10ffff)) ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return n;
}

/*
 * A name as a JSON string body. Names are bytes: valid UTF-8 is copied, a
 * byte that is not part of any is written \udcXX, Python's surrogateescape
 * (json.loads then os.fsencode gives the bytes back). out holds 6 bytes
 * per input byte.
 */
static size_t json_name(char *out, const char *name)
{
	const unsigned char *s = (const unsigned char *)name;
	size_t left = strlen(name), o = 0, n;

	while (left) {
		n = utf8_len(s, left);
		if (n == 0) {
			o += (size_t)sprintf(out + o, "\\udc%02x", s[0]);
			n = 1;
		} else if (n == 1 && (s[0] < 0x20 || s[0] == '"' || s[0] == '\\')) {
			if (s[0] == '"' || s[0] == '\\')
				o += (size_t)sprintf(out + o, "\\%c", s[0]);
			else
				o += (size_t)sprintf(out + o, "\\u%04x", s[0]);
		} else {
			memcpy(out + o, s, n);
			o += n;
		}
		s += n;
		left -= n;
	}
	out[o] = '\0';
	return o;
}

#define NAME_JSON_MAX (6 * KV_NAME_MAX + 1)
#define LINE_MAX_LEN (3 * NAME_JSON_MAX + 256)

/* Formatted into a buffer on the stack, then kept in exactly its length:
 * the ring holds events_ring of them (a worst-case buffer each would be
 * ~4.9 KB a record instead of ~200 B). */
static struct ev_line format_record(const struct kvfs_event *e, uint64_t seq)
{
	char buf[LINE_MAX_LEN];
	char model[NAME_JSON_MAX], layer[NAME_JSON_MAX], name[NAME_JSON_MAX];
	struct ev_line l;
	int n;

	json_name(model, e->model);
	json_name(layer, e->layer);
	json_name(name, e->name);
	n = snprintf(buf, LINE_MAX_LEN, "{\"seq\":%" PRIu64 ",\"type\":\"%s\","
		     "\"model\":\"%s\",\"layer\":\"%s\",\"name\":\"%s\",\"size\":%"
		     PRIu64 ",\"time_ns\":%" PRId64 "}\n", seq, type_names[e->type],
		     model, layer, name, e->size, e->time_ns);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(buf))
		n = (int)sizeof(buf) - 1;
	l.len = (size_t)n;
	l.text = alloc_retry(l.len + 1);
	memcpy(l.text, buf, l.len + 1);
	return l;
}

/* ---- the ring ---- */

int kvfs_events_init(struct kvfs *fs, uint64_t last_seq, size_t ring)
{
	struct kvfs_events *evs = calloc(1, sizeof(*evs));

	if (!evs || !(evs->ring = calloc(ring ? ring : 1, sizeof(*evs->ring)))) {
		free(evs);
		kv_log(KV_LOG_ERR, "KV events: no memory for a ring of %zu records", ring);
		return -ENOMEM;
	}
	pthread_mutex_init(&evs->lock, NULL);
	evs->cap = ring ? ring : 1;
	evs->first = evs->next = last_seq + 1;
	fs->events = evs;
	return 0;
}

void kvfs_events_fini(struct kvfs *fs)
{
	struct kvfs_events *evs = fs->events;
	uint64_t s;

	if (!evs)
		return;
	for (s = evs->first; s < evs->next; s++)
		free(evs->ring[s % evs->cap].text);
	/* Readers still open (the kernel never sent RELEASE: aborted). */
	while (evs->readers) {
		struct kvfs_events_reader *r = evs->readers;

		evs->readers = r->next;
		free(r->carry);
		free(r);
	}
	pthread_mutex_destroy(&evs->lock);
	free(evs->ring);
	free(evs);
	fs->events = NULL;
}

uint64_t kvfs_events_last_seq(struct kvfs *fs)
{
	struct kvfs_events *evs = fs->events;
	uint64_t s;

	pthread_mutex_lock(&evs->lock);
	s = evs->next - 1;
	pthread_mutex_unlock(&evs->lock);
	return s;
}

void kvfs_events_stats(struct kvfs *fs, struct kvfs_events_stats *out)
{
	struct kvfs_events *evs = fs->events;

	memset(out, 0, sizeof(*out));
	if (!evs)
		return;
	pthread_mutex_lock(&evs->lock);
	out->last_seq = evs->next - 1;
	out->retained = evs->next - evs->first;
	out->readers = evs->nreaders;
	out->missed = evs->missed;
	out->overflows = evs->overflows;
	pthread_mutex_unlock(&evs->lock);
}

static bool has_data(const struct kvfs_events *evs, const struct kvfs_events_reader *r)
{
	return r->carry || r->cursor < evs->next;
}

/*
 * Copy what r has to read into buf (size bytes), advancing its cursor
 * (evs.lock held). Whole records while they fit; a record larger than
 * what is left of a read that has nothing yet goes in part, the rest kept
 * in r->carry for the next read, so any read size makes progress.
 */
static size_t fill(struct kvfs_events *evs, struct kvfs_events_reader *r, char *buf,
		   size_t size)
{
	char over[256];
	const char *text;
	size_t used = 0, len, take;
	bool is_over;

	while (used < size) {
		if (r->carry) {
			take = r->carry_len - r->carry_off;
			if (take > size - used)
				take = size - used;
			memcpy(buf + used, r->carry + r->carry_off, take);
			used += take;
			r->carry_off += take;
			if (r->carry_off == r->carry_len) {
				free(r->carry);
				r->carry = NULL;
			}
			continue;
		}
		if (r->cursor >= evs->next)
			break;
		is_over = r->cursor < evs->first;
		if (is_over) {
			len = (size_t)snprintf(over, sizeof(over), "{\"type\":\"overflow\","
				"\"missed\":%" PRIu64 ",\"first_missed\":%" PRIu64
				",\"last_missed\":%" PRIu64 ",\"time_ns\":%" PRId64 "}\n",
				evs->first - r->cursor, r->cursor, evs->first - 1,
				kvfs_now_ns());
			text = over;
		} else {
			text = evs->ring[r->cursor % evs->cap].text;
			len = evs->ring[r->cursor % evs->cap].len;
		}
		if (len > size - used) {
			if (used)
				break;     /* whole records first; this one next time */
			r->carry = malloc(len - size);
			if (!r->carry)
				break;     /* try again on the next read */
			memcpy(r->carry, text + size, len - size);
			r->carry_len = len - size;
			r->carry_off = 0;
			len = size;
		}
		memcpy(buf + used, text, len);
		used += len;
		if (is_over) {
			evs->missed += evs->first - r->cursor;
			evs->overflows++;
			r->cursor = evs->first;
		} else {
			r->cursor++;
		}
	}
	return used;
}

static void tell_front(struct kvfs *fs)
{
	const struct kvfs_hooks *h = atomic_load(&fs->hooks);

	if (h && h->events_ready)
		h->events_ready(h->ctx);
}

void kvfs_events_publish(struct kvfs *fs, struct kvfs_event *chain)
{
	struct kvfs_events *evs = fs->events;
	size_t n = kvfs_event_count(chain), i;
	struct ev_line *lines;
	struct kvfs_event *e;
	uint64_t base;

	if (!n)
		return;
	lines = alloc_retry(n * sizeof(*lines));
	/* Only the committer appends: the numbers are its to format now,
	 * outside the lock readers take. */
	base = kvfs_events_last_seq(fs) + 1;
	for (e = chain, i = 0; e; e = e->next, i++)
		lines[i] = format_record(e, base + i);
	kvfs_event_free(chain);

	pthread_mutex_lock(&evs->lock);
	for (i = 0; i < n; i++) {
		if (evs->next - evs->first == evs->cap) {
			free(evs->ring[evs->first % evs->cap].text);
			evs->first++;
		}
		evs->ring[evs->next % evs->cap] = lines[i];
		evs->next++;
	}
	pthread_mutex_unlock(&evs->lock);
	free(lines);
	tell_front(fs);
}

void kvfs_events_shutdown(struct kvfs *fs)
{
	struct kvfs_events *evs = fs->events;

	if (!evs)
		return;
	pthread_mutex_lock(&evs->lock);
	evs->closed = true;
	pthread_mutex_unlock(&evs->lock);
	tell_front(fs);    /* parked reads end: the daemon is going away */
}

/* ---- readers ---- */

struct kvfs_events_reader *kvfs_events_reader_new(struct kvfs *fs)
{
	struct kvfs_events *evs = fs->events;
	struct kvfs_events_reader *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	pthread_mutex_lock(&evs->lock);
	r->cursor = evs->first;     /* from the oldest record retained */
	r->next = evs->readers;
	if (evs->readers)
		evs->readers->prev = r;
	evs->readers = r;
	evs->nreaders++;
	pthread_mutex_unlock(&evs->lock);
	return r;
}

void kvfs_events_reader_free(struct kvfs *fs, struct kvfs_events_reader *r)
{
	struct kvfs_events *evs = fs->events;

	pthread_mutex_lock(&evs->lock);
	if (r->prev)
		r->prev->next = r->next;
	else
		evs->readers = r->next;
	if (r->next)
		r->next->prev = r->prev;
	evs->nreaders--;
	pthread_mutex_unlock(&evs->lock);
	free(r->carry);
	free(r);
}

bool kvfs_events_ready(struct kvfs *fs, const struct kvfs_events_reader *r)
{
	struct kvfs_events *evs = fs->events;
	bool ready;

	pthread_mutex_lock(&evs->lock);
	ready = has_data(evs, r) || evs->closed;
	pthread_mutex_unlock(&evs->lock);
	return ready;
}

size_t kvfs_events_take(struct kvfs *fs, struct kvfs_events_reader *r, char *buf,
			size_t size, bool *eof)
{
	struct kvfs_events *evs = fs->events;
	size_t n;

	pthread_mutex_lock(&evs->lock);
	n = fill(evs, r, buf, size);
	*eof = !n && evs->closed && !has_data(evs, r);
	pthread_mutex_unlock(&evs->lock);
	return n;
}
