/*
 * rt_internal.h — helpers shared by the files of modelrt. Not part of the public API
 * (modelrt.h is); nothing here is promised to generated code or to embedders.
 */
#ifndef MODELRT_INTERNAL_H
#define MODELRT_INTERNAL_H

#include "modelrt.h"

/* Enough for "[" + MRT_MAX_RANK dims of up to 20 digits and a sign, commas, "]", NUL. */
#define RT_SHAPE_STR_MAX 256

/** 1 if `dt` is one of MRT_F32, MRT_I32, MRT_I64. */
int rt_dtype_valid(mrt_dtype dt);

/** Format `shape` (rank 0..MRT_MAX_RANK) as "[128,64]" ("[]" for rank 0) into `buf` of `n`
 *  bytes; always NUL-terminated, cut when `n` is small. Returns `buf`. */
char *rt_shape_str(char *buf, size_t n, const int64_t *shape, int rank);

/** Element count of `shape` into *numel. Returns 0, or -1 when a dimension is negative or the
 *  product overflows 64 bits. Multiplies with an overflow check, never divides. */
int rt_shape_numel(const int64_t *shape, int rank, uint64_t *numel);

/** The log hook currently installed (for mrt_main to restore the caller's on return). */
void rt_log_hook_get(mrt_log_fn *fn, void **user);

#endif /* MODELRT_INTERNAL_H */
