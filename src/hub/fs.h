/* File-system helpers for the cache: create folders, place symlinks atomically, remove trees
 * without ever following a link out of them. */
#ifndef SG_HUB_FS_H
#define SG_HUB_FS_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

/* mkdir -p with mode 0755; an existing folder is fine. */
sg_status sg_hub_mkdirs(const char *path);
/* mkdir -p of the folder that holds `path`. */
sg_status sg_hub_mkdirs_parent(const char *path);
/* Makes `link` a symlink to `target` (replacing what was there) through a temporary name and a
 * rename, so a reader never sees a half-made entry. */
sg_status sg_hub_symlink(const char *target, const char *link);
/* Writes `text` to `path` through a temporary file and a rename. */
sg_status sg_hub_write_text(const char *path, const char *text);
/* Removes a file, a symlink (not what it points to) or a whole folder; symlinks inside are
 * removed as links. Missing is not an error. */
sg_status sg_hub_rm_tree(const char *path);
/* Bytes used by the regular files under path (symlinks not followed); 0 if missing. */
uint64_t sg_hub_tree_size(const char *path);
/* 1 if path is (after following links) a regular file / a folder. */
int sg_hub_is_file(const char *path);
int sg_hub_is_dir(const char *path);
/* Size of a regular file (links followed), or -1. */
int64_t sg_hub_file_size(const char *path);
/* Joins a and b with '/', failing with SG_ERR_RANGE when it does not fit. */
sg_status sg_hub_join(char *buf, size_t n, const char *a, const char *b);

#endif
