/*
 * The text form of a model geometry, as user.kvfs.geometry reads and sets
 * it: "layers=32 kv_heads=8 head_dim=128 dtype=bf16 page_tokens=16". Kept
 * apart from the xattr handlers (fuse/xattr.c) so that it builds without FUSE:
 * the fuzz target in tests/fuzz/ links it alone.
 */
#ifndef KVFS_GEOMETRY_TEXT_H
#define KVFS_GEOMETRY_TEXT_H

#include <stddef.h>

#include "manifest.h"

/* Parse len bytes of s (fields in any order, separated by spaces, commas,
 * tabs or newlines; a later field overrides an earlier one; all absent means
 * "unset"). 0, or -EINVAL for an unknown field, a bad number or a geometry
 * kv_geometry_check refuses. */
int kvfs_geometry_parse(const char *s, size_t len, struct kv_geometry *g);
/* Format g as parse reads it back; snprintf's return value. */
int kvfs_geometry_format(const struct kv_geometry *g, char *out, size_t len);

#endif
