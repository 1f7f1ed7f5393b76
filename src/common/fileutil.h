/* fileutil.h: small file-system helpers: whole-file reads, path joins, mkdir -p, and atomic writes
 * (temp name + fsync + rename) so a file or directory either is complete or does not exist. */
#ifndef QLT_FILEUTIL_H
#define QLT_FILEUTIL_H

#include <stddef.h>
#include <stdio.h>

/* Reads a whole file into a NUL-terminated heap buffer. */
int qlt_read_file(const char *path, char **out, size_t *len);
/* 0, or -1 with "PATH: is a directory, expected a file" (fopen and gzopen open directories). */
int qlt_check_not_dir(const char *path);
/* a + "/" + b, heap-allocated. */
char *qlt_path_join(const char *a, const char *b);
int qlt_file_exists(const char *path);
int qlt_dir_exists(const char *path);
/* mkdir -p */
int qlt_mkdirs(const char *path);
/* rm -rf of a directory we created (checkpoints); refuses "" and "/". */
int qlt_remove_tree(const char *path);

typedef struct qlt_atomic_file {
    char *path, *tmp_path;
    FILE *fp;
} qlt_atomic_file;

int qlt_atomic_open(qlt_atomic_file *f, const char *path);
int qlt_atomic_write(qlt_atomic_file *f, const void *data, size_t n);
/* fsync, close and rename over the final name. */
int qlt_atomic_commit(qlt_atomic_file *f);
/* close and delete the temporary. */
void qlt_atomic_abort(qlt_atomic_file *f);
/* Writes a whole buffer atomically. */
int qlt_write_file_atomic(const char *path, const void *data, size_t n);
/* Renames a finished temporary directory to its final name (after fsync of its files), then fsyncs the
 * directory holding it. */
int qlt_commit_dir(const char *tmp_dir, const char *final_dir);

#endif
