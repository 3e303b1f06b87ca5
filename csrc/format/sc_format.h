/*
 * sc_format.h — the format stage: per-level storage formats, their text form, checks of
 * a tensor's arrays against its format, and conversions between any two formats.
 *
 * In:  format specs ("csr", "c(nonunique)s", ...), raw arrays (coordinates, dense data,
 *      the level arrays of another format).
 * Out: sc_format descriptors and sc_tensors whose arrays are allocated through the ctx.
 *
 * Invariants of a valid tensor (sc_fmt_validate): every level is ordered; a unique level
 * holds strictly increasing coordinates within a segment; a singleton level never sits
 * first or under a dense level; pos arrays start at 0, never decrease and end at crd_len.
 * Conversions sort, sum duplicates (as torch's coalesce) and produce valid tensors.
 */
#ifndef SC_FORMAT_H
#define SC_FORMAT_H

#include "../base/sc_base.h"

/* Flags for conversions. */
enum {
    SC_CONV_DROP_ZEROS = 1, /* do not store entries whose value is 0 */
    SC_CONV_SORTED = 2      /* from_coords: entries strictly increase in row-major order
                               (checked; a coalesced COO) */
};

/*
 * Parse a format spec for a tensor of the given order into out (lvl2dim = identity unless
 * the named format says otherwise: csc, dcsc).  Accepted: the names dense, csr, csc, coo,
 * dcsr, dcsc, csf, or a level list: letters d/c/s or words dense/compressed/singleton,
 * optionally separated by spaces or commas, each optionally followed by "(nonunique)" or
 * "(unique)".  USER error on anything else, with err->pos at the offending column.
 */
sc_status sc_fmt_parse(const char *spec, int32_t order, sc_format *out, sc_error *err);

/* The all-dense format of the given order, levels in dimension order (the "dense" name). */
void sc_fmt_dense(int32_t order, sc_format *out);

/* Structural legality of a format (order range, permutation, singleton placement). */
sc_status sc_fmt_check(const sc_format *f, sc_error *err);

/* Canonical level text, e.g. "dc", "c(nonunique)s": writes at most n bytes incl. NUL. */
void sc_fmt_levels_text(const sc_format *f, char *buf, size_t n);

/* The named format f equals for its order ("csr", ...), or NULL. */
const char *sc_fmt_name(const sc_format *f);

/*
 * Number of positions at level k of t (the length a pos array of level k+1 indexes,
 * minus one), computed from dims and the level arrays; -1 with err set on overflow.
 */
int64_t sc_fmt_level_size(const sc_tensor *t, int32_t k, sc_error *err);

/* Check that t's arrays agree in length with its format and dims and with each other
 * (pos[0] = 0 and pos[P] = crd length read, nothing else): O(levels).  What a kernel
 * needs of a tensor validated once, whose arrays another thread may have been replacing
 * while they were read.  USER error naming the level. */
sc_status sc_fmt_check_lengths(const sc_tensor *t, sc_error *err);

/* Check every array of t against its format and dims (lengths, ranges, order, pos
 * monotonicity, index width).  O(nnz).  INDEX error for out-of-range coordinates,
 * USER error for the rest; the message names the level and position. */
sc_status sc_fmt_validate(const sc_ctx *ctx, const sc_tensor *t, sc_error *err);

/*
 * Build out in format dst from nnz coordinates (coords[d * ld + e] is the coordinate of
 * entry e in dimension d; any order unless flags has SC_CONV_SORTED, duplicates allowed
 * and summed) and values vals.
 * Coordinates are range-checked.  out's arrays are allocated through ctx (owned by the
 * caller: release with sc_tensor_release).
 */
sc_status sc_fmt_from_coords(const sc_ctx *ctx, int32_t order, const int64_t *dims,
                             int64_t nnz, const int64_t *coords, int64_t ld,
                             const void *vals, sc_dtype dtype, const sc_format *dst,
                             sc_index_type index_type, int flags, sc_tensor *out,
                             sc_error *err);

/* Build out in format dst from a C-contiguous dense array; zeros are not stored. */
sc_status sc_fmt_from_dense(const sc_ctx *ctx, int32_t order, const int64_t *dims,
                            const void *data, sc_dtype dtype, const sc_format *dst,
                            sc_index_type index_type, sc_tensor *out, sc_error *err);

/* Convert a valid tensor src to format dst.  Explicit zeros are kept unless flags has
 * SC_CONV_DROP_ZEROS.  src is not modified. */
sc_status sc_fmt_convert(const sc_ctx *ctx, const sc_tensor *src, const sc_format *dst,
                         sc_index_type index_type, int flags, sc_tensor *out, sc_error *err);

/* Write src densely into out (C-contiguous, prod(dims) values of src->dtype). */
sc_status sc_fmt_to_dense(const sc_ctx *ctx, const sc_tensor *src, void *out, sc_error *err);

/* Free the arrays of a tensor built by this stage (not those it borrows) and zero the
 * struct. */
void sc_tensor_release(const sc_ctx *ctx, sc_tensor *t);

/* Which of ops[0..n-1] holds level l's arrays of out (its pos or crd is the same pointer,
 * as a kernel output that shares an operand's pattern has): that operand's index, with
 * *level its level; -1 when none does (or out's level l has no arrays). */
int32_t sc_tensor_lender(const sc_tensor *const *ops, int32_t n, const sc_tensor *out, int32_t l,
                         int32_t *level);

#endif /* SC_FORMAT_H */
