/* fileutil.c: see fileutil.h. */
#define _GNU_SOURCE
#include "common/fileutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

int qlt_check_not_dir(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return qlt_fail("%s: is a directory, expected a file", path);
    return 0;
}

int qlt_read_file(const char *path, char **out, size_t *len) {
    QLT_TRY(qlt_check_not_dir(path)); /* fopen opens a directory; fread then fails with no reason */
    FILE *fp = fopen(path, "rb");
    if (!fp) return qlt_fail("%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = qlt_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = qlt_xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        free(buf);
        return qlt_fail("%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return 0;
}

char *qlt_path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    int slash = la > 0 && a[la - 1] != '/';
    char *p = qlt_xmalloc(la + lb + 2);
    memcpy(p, a, la);
    if (slash) p[la] = '/';
    memcpy(p + la + slash, b, lb + 1);
    return p;
}

int qlt_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int qlt_dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int qlt_mkdirs(const char *path) {
    char *p = qlt_xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            qlt_fail("%s: cannot create directory: %s", p, strerror(e));
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = qlt_fail("%s: cannot create directory: %s", p, strerror(errno));
    else if (!qlt_dir_exists(p)) rc = qlt_fail("%s: exists and is not a directory", p);
    free(p);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

int qlt_remove_tree(const char *path) {
    QLT_ASSERT(path[0] && strcmp(path, "/") != 0);
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return qlt_fail("%s: cannot remove: %s", path, strerror(errno));
    return 0;
}

/* fsync of the directory holding path, so a rename into it survives a power loss (best effort: some file
 * systems refuse fsync on a directory, and the rename itself already happened). */
static void fsync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *parent = slash ? qlt_xstrdup(path) : qlt_xstrdup(".");
    if (slash) parent[slash == path ? 1 : slash - path] = '\0';
    int fd = open(parent, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(parent);
}

int qlt_atomic_open(qlt_atomic_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = qlt_xstrdup(path);
    size_t n = strlen(path) + 32;
    f->tmp_path = qlt_xmalloc(n);
    snprintf(f->tmp_path, n, "%s.tmp-%d", path, (int)getpid());
    f->fp = fopen(f->tmp_path, "wb");
    if (!f->fp) {
        qlt_fail("%s: cannot write: %s", f->tmp_path, strerror(errno));
        free(f->path);
        free(f->tmp_path);
        memset(f, 0, sizeof *f);
        return -1;
    }
    return 0;
}

int qlt_atomic_write(qlt_atomic_file *f, const void *data, size_t n) {
    if (n && fwrite(data, 1, n, f->fp) != n) return qlt_fail("%s: write failed: %s", f->tmp_path, strerror(errno));
    return 0;
}

static void atomic_release(qlt_atomic_file *f) {
    free(f->path);
    free(f->tmp_path);
    memset(f, 0, sizeof *f);
}

int qlt_atomic_commit(qlt_atomic_file *f) {
    int rc = 0;
    if (fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0) rc = qlt_fail("%s: write failed: %s", f->tmp_path, strerror(errno));
    if (fclose(f->fp) != 0 && rc == 0) rc = qlt_fail("%s: close failed: %s", f->tmp_path, strerror(errno));
    if (rc == 0 && rename(f->tmp_path, f->path) != 0) rc = qlt_fail("%s: rename failed: %s", f->path, strerror(errno));
    if (rc == 0) fsync_parent(f->path);
    if (rc != 0) unlink(f->tmp_path);
    atomic_release(f);
    return rc;
}

void qlt_atomic_abort(qlt_atomic_file *f) {
    if (f->fp) fclose(f->fp);
    unlink(f->tmp_path);
    atomic_release(f);
}

int qlt_write_file_atomic(const char *path, const void *data, size_t n) {
    qlt_atomic_file f;
    QLT_TRY(qlt_atomic_open(&f, path));
    if (qlt_atomic_write(&f, data, n) != 0) {
        qlt_atomic_abort(&f);
        return -1;
    }
    return qlt_atomic_commit(&f);
}

int qlt_commit_dir(const char *tmp_dir, const char *final_dir) {
    int fd = open(tmp_dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    if (rename(tmp_dir, final_dir) != 0)
        return qlt_fail("%s: cannot rename to %s: %s", tmp_dir, final_dir, strerror(errno));
    fsync_parent(final_dir);
    return 0;
}
