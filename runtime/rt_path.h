/*
 * rt_path.h — output-path policy and message quoting shared by modelrt and the compiler
 * (rt_path.c). Internal: not part of the public API.
 */
#ifndef MODELRT_PATH_H
#define MODELRT_PATH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Enough for any rt_quote result. */
#define RT_QUOTE_MAX 272

/** `s` in single quotes for a message, into `buf` of `n` bytes (RT_QUOTE_MAX suffices): \n,
 *  \t, \r, \\ and \' escaped, other control and non-ASCII bytes as \xNN; a string over 64
 *  bytes is cut to its first 48 and shown as 'first 48...' (200 bytes). Returns `buf`. */
char *rt_quote(char *buf, size_t n, const char *s);

/** The file that writing the output `path` replaces (mrt_npy_write; modelc's -o and --emit-c):
 *  `path` itself when it is a regular file or does not exist; for a symlink (or a chain of them), the regular file it finally names
 *  (realpath), so that the link stays a link and the file it points at gets the data. Returns
 *  a malloc'ed path, or NULL with the reason in why[n] for anything else: "it is a directory",
 *  "it is a FIFO", "it is a character device", "it is a block device", "it is a socket", "it
 *  is a symlink to 'T', a FIFO" (and so on), "it is a symlink to 'T', which does not exist",
 *  "it is a symlink that cannot be resolved (<strerror>)"; also when out of memory. */
char *rt_output_target(const char *path, char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif
