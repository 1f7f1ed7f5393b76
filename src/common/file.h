/* file.h: whole-file reads with errors that name the path, and an existence check. */
#ifndef QLT_FILE_H
#define QLT_FILE_H

#include <stddef.h>

/* Reads the whole file into a new NUL-terminated buffer (free() it). */
int qlt_file_read(const char *path, char **data, size_t *len);
/* 1 when path names an existing regular file. */
int qlt_file_exists(const char *path);

#endif
