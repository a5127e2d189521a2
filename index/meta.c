/*
 * The manifest's meta table: the store's identity and configuration written
 * at mkfs (format, schema version, uuid, segment size, capacity, creation
 * time), the mount count bumped at every mount, and the last event record's
 * sequence number (engine/events.c). Reading it back and
 * validating it is manifest_read.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "manifest_i.h"

int mf_meta_validate(const struct kv_store_meta *meta)
{
	unsigned i;

	if (!memchr(meta->uuid, '\0', sizeof(meta->uuid)) || !meta->uuid[0]) {
		kv_log(KV_LOG_ERR, "manifest: store uuid is empty or not terminated");
		return -EINVAL;
	}
	if (meta->nstripes == 0 || meta->nstripes > KV_MAX_STRIPES) {
		kv_log(KV_LOG_ERR, "manifest: %u stripes (need 1..%u)", meta->nstripes,
		       KV_MAX_STRIPES);
		return -EINVAL;
	}
	for (i = 0; i < meta->nstripes; i++) {
		if (!memchr(meta->stripes[i], '\0', sizeof(meta->stripes[i])) ||
		    !meta->stripes[i][0]) {
			kv_log(KV_LOG_ERR, "manifest: stripe %u path is empty or too long", i);
			return -EINVAL;
		}
	}
	if (meta->segment_size == 0 || meta->segment_size % KV_ALIGN ||
	    meta->segment_size > INT64_MAX || meta->capacity > INT64_MAX) {
		kv_log(KV_LOG_ERR, "manifest: segment size %" PRIu64 " must be a non-zero "
		       "multiple of %u", meta->segment_size, KV_ALIGN);
		return -EINVAL;
	}
	return 0;
}

static int meta_put(sqlite3 *db, const char *path, sqlite3_stmt *st, const char *key,
		    const char *text, int64_t num)
{
	int rc;

	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	if (text)
		sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_int64(st, 2, num);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return mf_db_fail(db, path, rc, "writing meta %s", key);
	return 0;
}

int mf_write_meta(sqlite3 *db, const char *path, const struct kv_store_meta *meta)
{
	struct timespec ts;
	sqlite3_stmt *st = NULL;
	int64_t created = meta->created_ns;
	unsigned i;
	int rc;

	if (!created) {
		clock_gettime(CLOCK_REALTIME, &ts);
		created = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	}
	rc = sqlite3_prepare_v2(db, "INSERT INTO meta (key, value) VALUES (?1, ?2)",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(db, path, rc, "preparing meta insert");
	if ((rc = meta_put(db, path, st, "format", "kvfs", 0)) ||
	    (rc = meta_put(db, path, st, "schema_version", NULL, KV_SCHEMA_VERSION)) ||
	    (rc = meta_put(db, path, st, "uuid", meta->uuid, 0)) ||
	    (rc = meta_put(db, path, st, "segment_size", NULL, (int64_t)meta->segment_size)) ||
	    (rc = meta_put(db, path, st, "capacity", NULL, (int64_t)meta->capacity)) ||
	    (rc = meta_put(db, path, st, "created_ns", NULL, created)))
		goto out;
	sqlite3_finalize(st);
	rc = sqlite3_prepare_v2(db, "INSERT INTO stripes (id, path) VALUES (?1, ?2)",
				-1, &st, NULL);
	if (rc != SQLITE_OK) {
		st = NULL;
		rc = mf_db_fail(db, path, rc, "preparing stripe insert");
		goto out;
	}
	for (i = 0; i < meta->nstripes; i++) {
		sqlite3_bind_int64(st, 1, i);
		sqlite3_bind_text(st, 2, meta->stripes[i], -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		if (rc != SQLITE_DONE) {
			rc = mf_db_fail(db, path, rc, "writing stripe %u", i);
			goto out;
		}
	}
	rc = 0;
out:
	sqlite3_finalize(st);
	return rc;
}

/*
 * Count this mount: meta mount_generation + 1, committed (durable) before
 * it is returned. Identifiers handed to clients carry it, so one issued by
 * an earlier daemon can never name something else after a restart.
 */
int kv_manifest_bump_mount(struct kv_manifest *m, uint32_t *gen)
{
	sqlite3_stmt *st;
	int64_t v = 0;
	int rc;

	if (m->in_txn)
		return -EINVAL;
	rc = mf_query_row(m->db, m->path,
			  "SELECT value FROM meta WHERE key = 'mount_generation'", NULL, &st);
	if (rc < 0)
		return rc;
	if (rc > 0) {
		v = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	v = v < 0 || v >= UINT32_MAX ? 1 : v + 1;
	rc = sqlite3_prepare_v2(m->db, "INSERT OR REPLACE INTO meta (key, value) "
				"VALUES ('mount_generation', ?1)", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(m->db, m->path, rc, "preparing mount_generation");
	sqlite3_bind_int64(st, 1, v);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return mf_db_fail(m->db, m->path, rc, "writing mount_generation");
	*gen = (uint32_t)v;
	return 0;
}

int kv_manifest_event_seq(struct kv_manifest *m, uint64_t *seq)
{
	sqlite3_stmt *st;
	int64_t v;
	int rc;

	*seq = 0;
	rc = mf_query_row(m->db, m->path, "SELECT value FROM meta WHERE key = 'event_seq'",
			  NULL, &st);
	if (rc <= 0)
		return rc;   /* 0: never set; the first record will be 1 */
	v = sqlite3_column_int64(st, 0);
	if (sqlite3_column_type(st, 0) != SQLITE_INTEGER || v < 0) {
		kv_log(KV_LOG_ERR, "manifest %s: meta event_seq = '%s' is not a "
		       "non-negative integer", m->path, mf_col_str(st, 0));
		rc = KV_ERR_CORRUPT;
	} else {
		*seq = (uint64_t)v;
		rc = 0;
	}
	sqlite3_finalize(st);
	return rc;
}

int kv_manifest_root_attr(struct kv_manifest *m, struct kv_obj_attr *out, bool *found)
{
	unsigned mode, uid, gid;
	sqlite3_stmt *st;
	char extra;
	int rc;

	*found = false;
	rc = mf_query_row(m->db, m->path, "SELECT value FROM meta WHERE key = 'root_attr'",
			  NULL, &st);
	if (rc <= 0)
		return rc;   /* 0: never set */
	if (sqlite3_column_type(st, 0) != SQLITE_TEXT ||
	    sscanf(mf_col_str(st, 0), "%o %u %u %c", &mode, &uid, &gid, &extra) != 3 ||
	    mode > 07777) {
		kv_log(KV_LOG_ERR, "manifest %s: meta root_attr = '%s' is not \"MODE UID GID\"",
		       m->path, mf_col_str(st, 0));
		rc = KV_ERR_CORRUPT;
	} else {
		out->mode = mode;
		out->uid = uid;
		out->gid = gid;
		*found = true;
		rc = 0;
	}
	sqlite3_finalize(st);
	return rc;
}
