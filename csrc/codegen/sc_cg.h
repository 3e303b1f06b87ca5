/*
 * sc_cg.h — the codegen stage: loop IR → C11 source text of one kernel with the
 * sc_rt_kernel ABI, plus the growable text buffer the driver also uses for dumps.
 *
 * In:  a verified sc_ir_func.  Out: C text (owned by the caller, allocated through the
 * ctx) that includes "scorch_rt.h", defines static helpers (allocation through env, a
 * coordinate sort) and exports exactly one function named fn->name.
 */
#ifndef SC_CG_H
#define SC_CG_H

#include "../base/sc_base.h"
#include "../ir/sc_ir.h"

/* Growable NUL-terminated text in ctx memory; growth is overflow-checked.  Sticky:
 * after a failure (NOMEM) appends do nothing and st stays set. */
typedef struct sc_cg_buf {
    const sc_ctx *ctx;
    char *data;
    size_t len, cap;
    sc_status st;
} sc_cg_buf;

void sc_cg_buf_init(sc_cg_buf *b, const sc_ctx *ctx);
void sc_cg_printf(sc_cg_buf *b, const char *fmt, ...) SC_PRINTF(2, 3);
void sc_cg_append(sc_cg_buf *b, const char *s, size_t n);
/* Hand the text to the caller (owned: sc_free with the same ctx); the buffer is reset.
 * NULL with err (NOMEM) when an append failed. */
char *sc_cg_buf_take(sc_cg_buf *b, size_t *len, sc_error *err);
void sc_cg_buf_release(sc_cg_buf *b);

/*
 * Emit the C source of fn.  *src (owned by the caller, ctx memory) receives the text and
 * *len its length.  fn is borrowed.  NOMEM, or INTERNAL for an IR construct codegen
 * does not know.
 */
sc_status sc_cg_emit(const sc_ctx *ctx, const sc_ir_func *fn, char **src, size_t *len,
                     sc_error *err);

#endif /* SC_CG_H */
