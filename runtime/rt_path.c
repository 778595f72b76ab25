/*
 * rt_path.c — quoting names for messages and deciding which file an output path replaces:
 * plain C and POSIX, no other part of modelrt, so that the compiler (compiler/main.c, for -o
 * and --emit-c) and the runtime (.npy outputs) follow one policy. See rt_path.h.
 */
#include "rt_path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RT_QUOTE_LONG 64      /* a quoted string longer than this is shortened ... */
#define RT_QUOTE_KEEP 48      /* ... to its first 48 bytes and "..." */

/* ---------------------------------------------------------------- quoting */

char *rt_quote(char *buf, size_t n, const char *s)
{
    if (!buf || n == 0)
        return buf;
    size_t len = strlen(s), keep = len > RT_QUOTE_LONG ? RT_QUOTE_KEEP : len, k = 0;
    char tmp[RT_QUOTE_MAX];
    tmp[k++] = '\'';
    for (size_t i = 0; i < keep; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r"
                        : c == '\\' ? "\\\\" : c == '\'' ? "\\'" : NULL;
        if (esc)
            k += (size_t)snprintf(tmp + k, sizeof tmp - k, "%s", esc);
        else if (c < 0x20 || c >= 0x7f)
            k += (size_t)snprintf(tmp + k, sizeof tmp - k, "\\x%02X", c);
        else
            tmp[k++] = (char)c;
    }
    /* 2 quotes + 64 bytes of at most 4 characters + "..." + " (N bytes)" fit RT_QUOTE_MAX */
    tmp[k] = '\0';
    if (keep < len)
        snprintf(buf, n, "%s...' (%zu bytes)", tmp, len);
    else
        snprintf(buf, n, "%s'", tmp);
    return buf;
}

/* ---------------------------------------------------------------- output paths */

/* "a FIFO", "a directory", ... for a file type that is not a regular file. */
static const char *rt_file_kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
           : S_ISLNK(m)  ? "a symlink"
                         : "not a regular file";
}

char *rt_output_target(const char *path, char *why, size_t n)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) {
        /* a new file, or one to replace; a path that cannot be looked at (a missing directory,
         * no permission) fails later with the system's reason */
        char *r = strdup(path);
        if (!r)
            snprintf(why, n, "out of memory");
        return r;
    }
    if (!S_ISLNK(st.st_mode)) {
        snprintf(why, n, "it is %s", rt_file_kind(st.st_mode));
        return NULL;
    }
    char *real = realpath(path, NULL);
    if (!real) {
        int e = errno;
        char to[RT_QUOTE_MAX], link[1024];
        ssize_t k = readlink(path, link, sizeof link - 1);
        link[k > 0 ? k : 0] = '\0';
        if (e == ENOENT) /* as cp(1): "not writing through dangling symlink" */
            snprintf(why, n, "it is a symlink to %s, which does not exist",
                     rt_quote(to, sizeof to, link));
        else
            snprintf(why, n, "it is a symlink that cannot be resolved (%s)", strerror(e));
        return NULL;
    }
    if (stat(real, &st) == 0 && !S_ISREG(st.st_mode)) {
        char to[RT_QUOTE_MAX];
        snprintf(why, n, "it is a symlink to %s, %s", rt_quote(to, sizeof to, real),
                 rt_file_kind(st.st_mode));
        free(real);
        return NULL;
    }
    return real;
}

