/*
 * build.c — the loop builder: a scheduled lowering problem → one kernel in loop IR.
 *
 * Recursion over the loop order: at each index variable the merge lattice of the
 * (specialised) expression decides the loop — a dense for, a for over one compressed
 * segment, or while-merges over several (one per lattice point, with an if/else chain of
 * cases inside, each case lowering its own specialised expression further down); unions
 * of three or more iterators use one loop in which absent operands read as zero.  Dense
 * levels are located.  Innermost reductions accumulate into a scalar: over a compressed
 * segment into four independent ones (x gathered from beyond L2 prefetched 32 entries
 * ahead), over a dense range into vectors (operands
 * contiguous along it) or eight/four scalars; factors known before a reduction multiply
 * its sum once.  Entries of a compressed segment that each end in a vector dot product
 * (SDDMM) are taken 8 at a time, their lane sums by one transpose-and-add tree; runs of
 * consecutive rows shorter than that are taken as one segment, each entry's row found by
 * a cursor, where the output shares the rows' pattern.  Dense
 * outputs are stored (not added into) when no reduction variable is bound above the
 * write, and not zero-filled when every element is written; a dense
 * output row inside reduction loops is computed in register tiles of vector accumulators
 * (SpMM), the reduction loops running once per tile.
 * The parallel outermost loop over the rows of a csr-like operand gives each thread one
 * contiguous range of about equal nonzeros (bounds by binary search on its pos array),
 * and runs on one thread when the work would not pay for waking the others; other
 * parallel loops take dynamic chunks.
 * Sparse outputs are assembled in two phases (count per row, prefix sum, fill), rows in
 * parallel when the outermost loop is a dense output level; an output that provably has
 * one operand's pattern skips the count and shares that operand's pos and crd (copies
 * its pos where the index widths differ); a csr-like
 * output through a Gustavson workspace (SpGEMM) skips it too: rows get slots of their
 * multiply count's size, each thread packs its rows, the gaps between threads are closed.  Output
 * indices nested inside a reduction go through a per-thread dense workspace: over the
 * last output level only (Gustavson), a two-level bitmap of touched coordinates that the
 * fill appends straight into the output row and orders there, or, for one-pass rows
 * whose span is short next to their multiply count, byte flags set without a test and
 * scanned in order; over several levels, byte marks and a sorted list.  Everything
 * allocated goes through env; failures return NOMEM.
 */
#include "sc_lower.h"
#include "../schedule/sc_sched.h"

#include <stdio.h>
#include <math.h>
#include <string.h>

/* The passes over the loop nest: count each row's entries, fill them, or (BOUND) add up
 * each row's multiply count, an upper bound on its entries (no workspace, no values). */
enum { COUNT, FILL, BOUND };

typedef struct lb {
    sc_ir_builder b;
    sc_arena *arena;
    const sc_lower_problem *p;
    const sc_sched *s;
    sc_error *err;
    int32_t n;
    const sc_expr_var *order;
    int32_t depth_of[SC_LOWER_MAX_VARS];
    int32_t out_level_of[SC_LOWER_MAX_VARS]; /* -1: reduction variable */
    sc_ir_type vt;
    /* operands */
    sc_ir_var pos[64][SC_MAX_ORDER], crd[64][SC_MAX_ORDER], vals[64];
    sc_ir_var clen[64][SC_MAX_ORDER]; /* a level's number of entries (its crd's length) */
    const sc_ir_expr *stride[64][SC_MAX_ORDER];
    sc_ir_var ext[SC_LOWER_MAX_VARS];
    /* output */
    int32_t m, D, kw, dlast, q;
    bool flat, par;
    int mode;
    sc_ir_var ovals, opos[SC_MAX_ORDER], ocrd[SC_MAX_ORDER], cnt[SC_MAX_ORDER];
    const sc_ir_expr *ostride[SC_MAX_ORDER];
    sc_ir_var tot[SC_MAX_ORDER];
    /* workspace; gus: it covers only the last output level (Gustavson's row
     * accumulator), marked in a two-level bitmap, values written on first touch */
    bool gus;
    sc_ir_var ws_vals, ws_mark, ws_list, ws_n, ws_ok, ws_bits, ws_sum;
    const sc_ir_expr *ws_size; /* the workspace's extent (its coordinates' bound) */
    /* dense rows of a one-pass Gustavson fill (see gus_row): byte flags of the touched
     * coordinates (-1: none allocated); span_lo/span_hi (-1: not lowering a span pass):
     * the row's coordinate range; span_probe (-1: none): the depth whose segment loop
     * visits only its first and last entries (span_bound's probe); row_way: which of
     * gus_row's ways a row's fill is being lowered for (ROW_DENSE: into the flags;
     * ROW_SMALL: its products appended to the output; ROW_BITMAP: marks, its slot
     * holding every product), ROW_ANY outside */
    sc_ir_var ws_flag, span_lo, span_hi;
    int32_t span_probe;
    enum { ROW_ANY, ROW_DENSE, ROW_SMALL, ROW_BITMAP } row_way;
    const sc_ir_expr *wstride[SC_MAX_ORDER];
    sc_ir_var nrows;
    /* one-pass assembly (csr-like output through a Gustavson workspace): cnt[D] holds the
     * prefix sums of the rows' multiply counts; each thread fills its rows one after the
     * other from the bound offset of its first row (nrun: its next free slot, prevr: the
     * row it filled last), rstart[r] records where row r went, out_pos[r + 1] its length;
     * bound_ok: the BOUND pass could bound every row; ftot: the sum of all bounds;
     * bound_par: the BOUND pass over the rows runs in parallel */
    bool onepass, bound_ok, bound_par;
    sc_ir_var nrun, prevr, rstart, ftot;
    /* dense output: depth at which a register tile over the innermost loop starts (-1:
     * none), and whether some write leaves part of the output to its zero fill */
    int32_t tile_at;
    bool tile_vec; /* the tile's dense operands are contiguous in its variable: vectors */
    bool tile_strided; /* the output is strided along the tile: stored lane by lane */
    /* sparse output with a whole operand's pattern (sc_lower_whole_pattern, other than the
     * csr-like case pattern_operand serves): that access, else -1 */
    int32_t whole;
    bool need_zero;
    /* lowering the pair body of a balanced row loop (paired_rows): pairing while it may
     * jam the two rows, paired once it has */
    bool pairing, paired;
    /* the sparse output's index arrays are the pattern operand's (see sparse_output): the
     * fill writes values only */
    bool share;
    /* dense-row prefetch (row_flag): while building the prefetching copy of a segment's
     * loop, the flag (else -1), the access of the rows and the segment's operand level;
     * rowpf_busy: inside either copy (no second flag below) */
    sc_ir_var rowpf;
    int32_t rowpf_acc, rowpf_op, rowpf_lvl;
    bool rowpf_busy;
} lb;

/* The width of a full register tile of a dense output, bytes: 4 AVX-512 or 8 AVX
 * registers, half the register file (the rest: the broadcast entry, the loads); at most
 * TILE_VECS_MAX vectors (those of the narrowest width). */
enum { TILE_BYTES = 256, TILE_VECS_MAX = TILE_BYTES / 32 };

typedef struct st {
    int8_t nbound[SC_LOWER_MAX_ACCESSES];
    const sc_ir_expr *ppos[SC_LOWER_MAX_ACCESSES];
    const sc_ir_expr *pend[SC_LOWER_MAX_ACCESSES];
    /* per access: NULL, or the condition under which it is present at all (set by a
     * dynamic union merge above; an absent access has empty segments below) */
    const sc_ir_expr *pres[SC_LOWER_MAX_ACCESSES];
    sc_ir_var val[SC_LOWER_MAX_ACCESSES];
    const sc_ir_expr *cv[SC_LOWER_MAX_VARS];
    const sc_ir_expr *opos;
    sc_ir_var cnt[SC_MAX_ORDER]; /* per output level: running entry counter */
    sc_ir_var acc;
    /* non-NULL: the sum of the reduction below the binding of dlast, already computed
     * (grouped_dots); the write multiplies it by the known factors */
    const sc_ir_expr *dot;
    /* register tile: the local accumulator array (-1: none), the tile's first coordinate
     * of the innermost variable, its width, and the lane index inside the tile loop */
    sc_ir_var tacc;
    const sc_ir_expr *tbase, *twidth, *tlane;
    /* vector register tile: tvn vector accumulators tv[] (tvn 0: none); vacc: the one the
     * leaf adds into, vec: dense operands contiguous in the tile variable load vectors */
    int32_t tvn;
    sc_ir_var tv[TILE_VECS_MAX], vacc;
    bool vec;
    sc_expr_var vtile; /* with vec: the variable along which dense operands load vectors */
    int32_t vlanes;    /* with vec or tvn: the lanes of those vectors */
    const sc_ir_expr *vcount; /* with tvn: NULL, or the lanes of a last partial tile (the
                                 loads and stores along it touch only those) */
    bool seen_sparse; /* a loop above iterates stored entries (some coordinates skipped) */
    bool seen_red;    /* a reduction variable is bound above (a coordinate revisited) */
} st;

#define B (&L->b)
#define V(x) sc_ir_var_ref(B, (x))
#define I(x) sc_ir_int(B, (x))
#define BIN(op, x, y) sc_ir_bin(B, SC_IR_OP_##op, (x), (y))

static const char *oname(const lb *L, int32_t t)
{
    return L->p->e->operands[t].name;
}
static const char *vname(const lb *L, sc_expr_var v)
{
    return L->p->e->vars[v].name;
}

static sc_ir_var newv(lb *L, const char *name, sc_ir_type t)
{
    return sc_ir_new_var(B, name, t, false, false, false);
}

static int32_t lvl_of_dim(const sc_format *f, int32_t d)
{
    for (int32_t k = 0; k < f->order; k++)
        if (f->lvl2dim[k] == d)
            return k;
    return 0;
}

/* ---- values at the leaf ---- */

/* The constant of LIT n, in the kernel's value type. */
static const sc_ir_expr *literal(lb *L, const sc_lower_node *n)
{
    return sc_ir_is_int_value(L->vt) ? sc_ir_int_value(B, n->ival, L->vt)
                                     : sc_ir_flt(B, n->value, L->vt);
}

static const sc_ir_expr *value(lb *L, const st *S, const sc_lower_node *n)
{
    if (!n)
        return sc_ir_flt(B, 0.0, L->vt);
    switch (n->kind) {
    case SC_LN_ACCESS: {
        const sc_lower_access *ac = &L->p->acc[n->access];
        if (L->p->ops[ac->operand].sparse)
            return V(S->val[n->access]);
        const sc_ir_expr *addr = I(0);
        bool tiled = false;
        for (int32_t d = 0; d < ac->order; d++) {
            addr = BIN(ADD, addr, BIN(MUL, S->cv[ac->var[d]], L->stride[ac->operand][d]));
            tiled |= ac->var[d] == S->vtile;
        }
        if (S->vec && tiled && S->vcount)
            return sc_ir_vload_n(B, L->vals[ac->operand], addr, S->vcount, S->vlanes);
        if (S->vec && tiled)
            return sc_ir_vload(B, L->vals[ac->operand], addr, S->vlanes);
        return sc_ir_load(B, L->vals[ac->operand], addr);
    }
    case SC_LN_LIT:
        return literal(L, n);
    case SC_LN_NEG:
        return sc_ir_neg(B, value(L, S, n->a));
    case SC_LN_MUL:
        return BIN(MUL, value(L, S, n->a), value(L, S, n->b));
    case SC_LN_ADD:
        return BIN(ADD, value(L, S, n->a), value(L, S, n->b));
    default:
        return BIN(SUB, value(L, S, n->a), value(L, S, n->b));
    }
}

/* Append one leaf entry of a sparse output (value NULL in the count phase). */
static void append_leaf(lb *L, const st *S, sc_ir_list *out, const sc_ir_expr *const *coord,
                        const sc_ir_expr *val)
{
    if (L->whole >= 0) {
        /* at the entry's own position (pos and crd are the operand's); a COO duplicate
         * is an entry of its own (iterators at the operand's last level: each position
         * its own entry) */
        if (L->mode == FILL)
            sc_ir_push(B, out, sc_ir_store(B, L->ovals, S->ppos[L->whole], false, val));
        return;
    }
    int32_t leaf = L->flat ? L->D : L->m - 1;
    sc_ir_var n = S->cnt[leaf];
    if (L->mode == FILL) {
        if (L->share) {
            /* the coordinate is already there: the pattern operand's */
        } else if (L->flat) {
            for (int32_t k = L->D; k < L->m; k++)
                sc_ir_push(B, out, sc_ir_store(B, L->ocrd[k], V(n), false, coord[k]));
        } else {
            sc_ir_push(B, out, sc_ir_store(B, L->ocrd[L->m - 1], V(n), false, coord[L->m - 1]));
        }
        sc_ir_push(B, out, sc_ir_store(B, L->ovals, V(n), false, val));
    }
    sc_ir_push(B, out, sc_ir_assign(B, n, true, I(1)));
}

static void out_coords(lb *L, const st *S, const sc_ir_expr **coord)
{
    for (int32_t k = 0; k < L->m; k++)
        coord[k] = S->cv[L->p->out_lvar[k]];
}

/* The write of one value (or accumulator) for the output coordinates bound in S. */
static void write_out(lb *L, const st *S, sc_ir_list *out, const sc_ir_expr *val)
{
    const sc_lower_problem *p = L->p;
    if (!p->out_sparse) {
        if (L->mode == COUNT)
            return;
        const sc_ir_expr *addr = I(0);
        for (int32_t d = 0; d < p->out_order; d++)
            addr = BIN(ADD, addr, BIN(MUL, S->cv[p->out_var[d]], L->ostride[d]));
        /* each output coordinate is reached at most once unless a reduction variable is
         * bound above; every one is reached only when no loop above skips coordinates */
        if (S->seen_red || S->seen_sparse)
            L->need_zero = true;
        if (val->lanes && S->vcount)
            sc_ir_push(B, out, sc_ir_vstore_n(B, L->ovals, addr, S->seen_red, val, S->vcount));
        else
            sc_ir_push(B, out, val->lanes ? sc_ir_vstore(B, L->ovals, addr, S->seen_red, val)
                                          : sc_ir_store(B, L->ovals, addr, S->seen_red, val));
        return;
    }
    const sc_ir_expr *coord[SC_MAX_ORDER];
    out_coords(L, S, coord);
    append_leaf(L, S, out, coord, val);
}

/* The leaf of an output with a workspace: mark the coordinate as touched and add the
 * value (the count phase only marks).  In a Gustavson workspace the first touch appends
 * the coordinate to the row's output slot directly (count phase: to the touched list)
 * and assigns the value, so nothing is cleared between rows; a dense row only adds the
 * value and sets the coordinate's flag, with no test.  A bitmap row of a one-pass fill
 * (gus_row) does the same work for every product, with no branch: it marks, writes the
 * coordinate at the slot's end, moves the end by whether the mark was new and adds the
 * value into the workspace, zero between rows.  Its slot holds every product, so the
 * write past the last entry stays inside it. */
static void ws_leaf(lb *L, const st *S, sc_ir_list *out, const sc_ir_expr *val)
{
    const sc_lower_problem *p = L->p;
    if (L->gus) {
        int32_t m = L->m;
        sc_ir_var lv = newv(L, vname(L, p->out_lvar[m - 1]), SC_IR_I64);
        sc_ir_push(B, out, sc_ir_decl(B, lv, S->cv[p->out_lvar[m - 1]]));
        sc_ir_list t = {0}, e = {0};
        if (L->mode == COUNT) {
            sc_ir_push(B, &t, sc_ir_store(B, L->ws_list, V(L->ws_n), false, V(lv)));
        } else if (L->row_way == ROW_DENSE) {
            sc_ir_push(B, out, sc_ir_store(B, L->ws_vals, V(lv), true, val));
            sc_ir_push(B, out, sc_ir_store(B, L->ws_flag, V(lv), false, I(1)));
            return;
        } else if (L->row_way == ROW_SMALL) {
            sc_ir_var n = S->cnt[m - 1];
            sc_ir_push(B, out, sc_ir_store(B, L->ocrd[m - 1], V(n), false, V(lv)));
            sc_ir_push(B, out, sc_ir_store(B, L->ovals, V(n), false, val));
            sc_ir_push(B, out, sc_ir_assign(B, n, true, I(1)));
            return;
        } else if (L->row_way == ROW_BITMAP) {
            sc_ir_var n = S->cnt[m - 1], isnew = newv(L, "new", SC_IR_I64);
            sc_ir_push(B, out, sc_ir_decl(B, isnew, I(0)));
            sc_ir_push(B, out, sc_ir_mark_new(B, L->ws_bits, L->ws_sum, V(lv), isnew));
            sc_ir_push(B, out, sc_ir_store(B, L->ocrd[m - 1], V(n), false, V(lv)));
            sc_ir_push(B, out, sc_ir_assign(B, n, true, V(isnew)));
            sc_ir_push(B, out, sc_ir_assign(B, L->ws_n, true, V(isnew)));
            sc_ir_push(B, out, sc_ir_store(B, L->ws_vals, V(lv), true, val));
            return;
        } else {
            sc_ir_var n = S->cnt[m - 1];
            sc_ir_push(B, &t, sc_ir_store(B, L->ocrd[m - 1], V(n), false, V(lv)));
            sc_ir_push(B, &t, sc_ir_assign(B, n, true, I(1)));
            sc_ir_push(B, &t, sc_ir_store(B, L->ws_vals, V(lv), false, val));
            sc_ir_push(B, &e, sc_ir_store(B, L->ws_vals, V(lv), true, val));
        }
        sc_ir_push(B, &t, sc_ir_assign(B, L->ws_n, true, I(1)));
        sc_ir_push(B, out, sc_ir_mark(B, L->ws_bits, L->ws_sum, V(lv), sc_ir_list_block(B, &t),
                                      L->mode == FILL ? sc_ir_list_block(B, &e) : NULL));
        return;
    }
    const sc_ir_expr *lin = I(0);
    for (int32_t k = L->kw; k < L->m; k++)
        lin = BIN(ADD, lin, BIN(MUL, S->cv[p->out_lvar[k]], L->wstride[k]));
    sc_ir_var lv = newv(L, "w", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_decl(B, lv, lin));
    sc_ir_list t = {0};
    sc_ir_push(B, &t, sc_ir_store(B, L->ws_mark, V(lv), false, I(1)));
    sc_ir_push(B, &t, sc_ir_store(B, L->ws_list, V(L->ws_n), false, V(lv)));
    sc_ir_push(B, &t, sc_ir_assign(B, L->ws_n, true, I(1)));
    sc_ir_push(B, out, sc_ir_if(B, sc_ir_not(B, sc_ir_load(B, L->ws_mark, V(lv))),
                                sc_ir_list_block(B, &t), NULL));
    if (L->mode == FILL)
        sc_ir_push(B, out, sc_ir_store(B, L->ws_vals, V(lv), true, val));
}

static void leaf(lb *L, const st *S, const sc_lower_node *n, sc_ir_list *out)
{
    const sc_lower_problem *p = L->p;
    const sc_ir_expr *val = L->mode == FILL ? value(L, S, n) : NULL;
    if (p->out_sparse && L->q >= 0) {
        ws_leaf(L, S, out, val);
        return;
    }
    if (S->tacc >= 0) {
        sc_ir_push(B, out, sc_ir_store(B, S->tacc, S->tlane, true, val));
        return;
    }
    if (S->tvn > 0) {
        if (val && !val->lanes)
            val = sc_ir_splat(B, val, S->vlanes);
        sc_ir_push(B, out, sc_ir_assign(B, S->vacc, true, val));
        return;
    }
    if (S->acc >= 0) {
        if (L->mode == FILL)
            sc_ir_push(B, out, sc_ir_assign(B, S->acc, true, val));
        return;
    }
    write_out(L, S, out, val);
}

/* The values of a Gustavson row's entries out_crd[n0 .. n), gathered from the workspace
 * into out_vals; clear: each one read is zeroed for the next row (dense rows need a zero
 * workspace, gus_row). */
static void gather_row(lb *L, sc_ir_var n0, sc_ir_var n, bool clear, sc_ir_list *out)
{
    sc_ir_var oc = L->ocrd[L->m - 1];
    sc_ir_var t = newv(L, "t", SC_IR_I64), c = newv(L, "c", SC_IR_I64);
    sc_ir_list g = {0};
    sc_ir_push(B, &g, sc_ir_decl(B, c, sc_ir_load(B, oc, V(t))));
    sc_ir_push(B, &g, sc_ir_store(B, L->ovals, V(t), false, sc_ir_load(B, L->ws_vals, V(c))));
    if (clear)
        sc_ir_push(B, &g, sc_ir_store(B, L->ws_vals, V(c), false, sc_ir_flt(B, 0.0, L->vt)));
    sc_ir_push(B, out, sc_ir_for(B, t, V(n0), V(n), I(1), SC_IR_SEQ, 0, sc_ir_list_block(B, &g)));
}

/* Emit the drain of the workspace into the output (after the loop at depth ws_depth). */
static void drain(lb *L, const st *S, sc_ir_list *out)
{
    const sc_lower_problem *p = L->p;
    int32_t m = L->m;
    if (L->mode == BOUND)
        return;
    if (L->gus) {
        /* count: the row has ws_n entries; fill: its coordinates are
         * out_crd[n - ws_n .. n), ordered by the collect, then gathered */
        if (L->mode == COUNT) {
            sc_ir_push(B, out, sc_ir_assign(B, S->cnt[m - 1], true, V(L->ws_n)));
            sc_ir_push(B, out, sc_ir_collect(B, L->ws_list, I(0), V(L->ws_n), L->ws_bits,
                                             L->ws_sum, false, L->ws_size));
        } else {
            sc_ir_var n0 = newv(L, "n0", SC_IR_I64);
            sc_ir_push(B, out, sc_ir_decl(B, n0, BIN(SUB, V(S->cnt[m - 1]), V(L->ws_n))));
            sc_ir_push(B, out, sc_ir_collect(B, L->ocrd[m - 1], V(n0), V(L->ws_n), L->ws_bits,
                                             L->ws_sum, true, L->ws_size));
            gather_row(L, n0, S->cnt[m - 1], false, out);
        }
        sc_ir_push(B, out, sc_ir_assign(B, L->ws_n, false, I(0)));
        return;
    }
    if (L->mode == COUNT && !L->flat && L->kw == m - 1) {
        sc_ir_push(B, out, sc_ir_assign(B, S->cnt[m - 1], true, V(L->ws_n)));
        sc_ir_var t = newv(L, "t", SC_IR_I64);
        sc_ir_push(B, out, sc_ir_for(B, t, I(0), V(L->ws_n), I(1), SC_IR_SEQ, 0,
                                     sc_ir_store(B, L->ws_mark, sc_ir_load(B, L->ws_list, V(t)),
                                                 false, I(0))));
        sc_ir_push(B, out, sc_ir_assign(B, L->ws_n, false, I(0)));
        return;
    }
    sc_ir_push(B, out, sc_ir_sort(B, L->ws_list, V(L->ws_n)));
    sc_ir_var prev[SC_MAX_ORDER];
    for (int32_t k = L->kw; k < m - 1; k++) {
        prev[k] = newv(L, "prev", SC_IR_I64);
        sc_ir_push(B, out, sc_ir_decl(B, prev[k], I(-1)));
    }
    sc_ir_var t = newv(L, "t", SC_IR_I64);
    sc_ir_list body = {0};
    sc_ir_var lin = newv(L, "w", SC_IR_I64);
    sc_ir_push(B, &body, sc_ir_decl(B, lin, sc_ir_load(B, L->ws_list, V(t))));
    const sc_ir_expr *coord[SC_MAX_ORDER];
    out_coords(L, S, coord);
    for (int32_t k = L->kw; k < m; k++) {
        sc_ir_var c = newv(L, vname(L, p->out_lvar[k]), SC_IR_I64);
        const sc_ir_expr *e = BIN(DIV, V(lin), L->wstride[k]);
        if (k > L->kw)
            e = BIN(SUB, e, BIN(MUL, BIN(DIV, e, V(L->ext[p->out_lvar[k]])),
                                V(L->ext[p->out_lvar[k]])));
        sc_ir_push(B, &body, sc_ir_decl(B, c, e));
        coord[k] = V(c);
    }
    if (!L->flat && L->kw < m - 1) {
        sc_ir_var nf = newv(L, "fresh", SC_IR_BOOL);
        sc_ir_push(B, &body, sc_ir_decl(B, nf, BIN(EQ, V(t), I(0))));
        for (int32_t k = L->kw; k < m - 1; k++) {
            sc_ir_push(B, &body, sc_ir_assign(B, nf, false, BIN(OR, V(nf), BIN(NE, coord[k], V(prev[k])))));
            sc_ir_list e = {0};
            if (L->mode == FILL)
                sc_ir_push(B, &e, sc_ir_store(B, L->ocrd[k], V(S->cnt[k]), false, coord[k]));
            sc_ir_push(B, &e, sc_ir_assign(B, S->cnt[k], true, I(1)));
            sc_ir_push(B, &body, sc_ir_if(B, V(nf), sc_ir_list_block(B, &e), NULL));
            sc_ir_push(B, &body, sc_ir_assign(B, prev[k], false, coord[k]));
        }
    }
    append_leaf(L, S, &body, coord, L->mode == FILL ? sc_ir_load(B, L->ws_vals, V(lin)) : NULL);
    if (L->mode == FILL && !L->flat)
        for (int32_t k = L->kw; k < m - 1; k++)
            sc_ir_push(B, &body, sc_ir_store(B, L->opos[k + 1], V(S->cnt[k]), false, V(S->cnt[k + 1])));
    sc_ir_push(B, &body, sc_ir_store(B, L->ws_mark, V(lin), false, I(0)));
    if (L->mode == FILL)
        sc_ir_push(B, &body, sc_ir_store(B, L->ws_vals, V(lin), false, sc_ir_flt(B, 0.0, L->vt)));
    sc_ir_push(B, out, sc_ir_for(B, t, I(0), V(L->ws_n), I(1), SC_IR_SEQ, 0,
                                 sc_ir_list_block(B, &body)));
    sc_ir_push(B, out, sc_ir_assign(B, L->ws_n, false, I(0)));
}

static const sc_ir_stmt *lower_at(lb *L, int32_t d, const sc_lower_node *n, const st *S);
static bool paired_rows(lb *L, int32_t d, const sc_lower_node *known, const sc_lower_node *rest,
                        st *S, sc_ir_list *out);

/* Row wrapper of a sparse output: counters for the row at S->opos around inner.  In the
 * one-pass fill a row continues the thread's run when it follows the row filled last,
 * else starts at its bound offset; either way it cannot reach the next row's slots. */
static void row_begin(lb *L, st *S, sc_ir_list *out)
{
    if (L->whole >= 0)
        return; /* no counters: each value goes to its entry's position */
    int32_t last = L->flat ? L->D : L->m - 1;
    if (L->mode == FILL && L->onepass) {
        sc_ir_push(B, out, sc_ir_if(B, BIN(NE, S->opos, BIN(ADD, V(L->prevr), I(1))),
                                    sc_ir_assign(B, L->nrun, false, sc_ir_load(B, L->cnt[last], S->opos)),
                                    NULL));
        sc_ir_push(B, out, sc_ir_assign(B, L->prevr, false, S->opos));
        sc_ir_push(B, out, sc_ir_store(B, L->rstart, S->opos, false, V(L->nrun)));
        S->cnt[last] = newv(L, "n", SC_IR_I64);
        sc_ir_push(B, out, sc_ir_decl(B, S->cnt[last], V(L->nrun)));
        return;
    }
    for (int32_t k = L->D; k <= last; k++) {
        S->cnt[k] = newv(L, "n", SC_IR_I64);
        const sc_ir_expr *init = L->mode != FILL ? I(0) : sc_ir_load(B, L->cnt[k], S->opos);
        sc_ir_push(B, out, sc_ir_decl(B, S->cnt[k], init));
    }
}

static void row_end(lb *L, const st *S, sc_ir_list *out)
{
    if (L->whole >= 0)
        return;
    int32_t last = L->flat ? L->D : L->m - 1;
    if (L->mode == FILL && L->onepass) {
        sc_ir_push(B, out, sc_ir_store(B, L->opos[last], BIN(ADD, S->opos, I(1)), false,
                                       BIN(SUB, V(S->cnt[last]), V(L->nrun))));
        sc_ir_push(B, out, sc_ir_assign(B, L->nrun, false, V(S->cnt[last])));
        return;
    }
    if (L->mode == FILL)
        return;
    for (int32_t k = L->D; k <= last; k++)
        sc_ir_push(B, out, sc_ir_store(B, L->cnt[k], BIN(ADD, S->opos, I(1)), false, V(S->cnt[k])));
}

/* Whether some sparse operand has a level over v. */
static bool sparse_iterates(const lb *L, sc_expr_var v)
{
    const sc_lower_problem *p = L->p;
    for (int32_t a = 0; a < p->naccess; a++)
        if (p->ops[p->acc[a].operand].sparse)
            for (int32_t k = 0; k < p->acc[a].order; k++)
                if (p->acc[a].var[k] == v)
                    return true;
    return false;
}

/* How dense access ac reads along v: 0 not at all, 1 contiguously (v is its last level,
 * not broadcast), -1 strided or broadcast. */
static int along(const lb *L, const sc_lower_access *ac, sc_expr_var v)
{
    const sc_lower_problem *p = L->p;
    const sc_format *f = &p->ops[ac->operand].fmt;
    int r = 0;
    for (int32_t k = 0; k < ac->order; k++)
        if (ac->var[k] == v) {
            if (f->lvl2dim[f->order - 1] != k || ((p->bcast[ac->operand] >> k) & 1))
                return -1;
            r = 1;
        }
    return r;
}

/* ---- factors of a product that are known before a reduction ---- */

/* Whether every access in n is fully bound in S at depth d (its value known there). */
static bool bound_at(const lb *L, const sc_lower_node *n, const st *S, int32_t d)
{
    const sc_lower_problem *p = L->p;
    uint64_t acc = sc_lower_node_accesses(n);
    for (int32_t a = 0; a < p->naccess; a++) {
        if (!((acc >> a) & 1))
            continue;
        const sc_lower_access *ac = &p->acc[a];
        if (p->ops[ac->operand].sparse) {
            if (S->val[a] < 0)
                return false;
        } else {
            for (int32_t k = 0; k < ac->order; k++)
                if (L->depth_of[ac->var[k]] > d)
                    return false;
        }
    }
    return true;
}

static const sc_lower_node *mul_node(lb *L, const sc_lower_node *x, const sc_lower_node *y)
{
    if (!x)
        return y;
    if (!y)
        return x;
    const sc_lower_node *m = sc_lower_mul(L->arena, x, y, L->err);
    if (!m) {
        L->b.st = SC_NOMEM;
        return x;
    }
    return m;
}

/* Split the factors of product n into those bound at depth d (*known) and the rest
 * (*rest); NULL stands for "no factor" here (never zero: a specialised zero product
 * does not reach a reduction). */
static void split_factors(lb *L, const sc_lower_node *n, const st *S, int32_t d,
                          const sc_lower_node **known, const sc_lower_node **rest)
{
    if (n->kind == SC_LN_MUL) {
        split_factors(L, n->a, S, d, known, rest);
        split_factors(L, n->b, S, d, known, rest);
    } else if (bound_at(L, n, S, d)) {
        *known = mul_node(L, *known, n);
    } else {
        *rest = mul_node(L, *rest, n);
    }
}

/* v times the value of the known factors (NULL: none), a vector v's lanes each. */
static const sc_ir_expr *scaled(lb *L, const st *S, const sc_lower_node *known,
                                const sc_ir_expr *v)
{
    return known ? BIN(MUL, v, value(L, S, known)) : v;
}

/* ---- register tiles of a dense output (SpMM-like) ---- */

/*
 * Rows of a dense output whose innermost loop runs over the output's last (contiguous)
 * dimension inside reduction loops (out(i,j) += A(i,k) * B(k,j), order i k j): instead
 * of adding into memory at every stored entry, the reduction loops run once per tile of
 * that dimension, accumulating in registers, and each tile is stored once (see tiled).
 *
 * tile_one: a tile of width (at most cap) lanes in a local array, one lane loop per
 * stored entry; for dense operands strided along the tile, and single lanes.
 */
static void tile_one(lb *L, int32_t r, const sc_lower_node *n, const sc_lower_node *known,
                     const st *S, const sc_ir_expr *base, int32_t cap,
                     const sc_ir_expr *width, sc_ir_list *out)
{
    sc_expr_var j = L->order[L->n - 1];
    sc_ir_var acc = sc_ir_new_local(B, "acc", L->vt, cap);
    sc_ir_push(B, out, sc_ir_decl_local(B, acc));
    sc_ir_var u = newv(L, "u", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_for(B, u, I(0), width, I(1), SC_IR_SEQ, 0,
                                 sc_ir_store(B, acc, V(u), false, sc_ir_flt(B, 0.0, L->vt))));
    st T = *S;
    T.tacc = acc;
    T.tbase = base;
    T.twidth = width;
    sc_ir_push(B, out, lower_at(L, r, n, &T));
    sc_ir_var w = newv(L, "u", SC_IR_I64);
    T = *S;
    T.cv[j] = BIN(ADD, base, V(w));
    sc_ir_list wb = {0};
    write_out(L, &T, &wb, scaled(L, S, known, sc_ir_load(B, acc, V(w))));
    sc_ir_push(B, out, sc_ir_for(B, w, I(0), width, I(1), SC_IR_SEQ, 0, sc_ir_list_block(B, &wb)));
}

/* The bytes of one value. */
static int32_t val_bytes(const lb *L)
{
    return (int32_t)sc_dtype_size(L->p->dtype);
}

/* Whether the values load and add as vectors (sc_ir_vec_lanes: every value type). */
static bool vector_values(const lb *L)
{
    return sc_ir_vec_lanes(L->b.fn, L->vt) > 0;
}

/* One tile of g vectors of W lanes at base: g vector accumulators (registers), the
 * reduction loops, one vector store each.  count (g = 1, W full): the tile is the last,
 * partial one of count lanes, read and written only there. */
static void tile_vectors(lb *L, int32_t r, const sc_lower_node *n, const sc_lower_node *known,
                         const st *S, const sc_ir_expr *base, int32_t g, int32_t W,
                         const sc_ir_expr *count, sc_ir_list *out)
{
    sc_expr_var j = L->order[L->n - 1];
    st T = *S;
    T.tvn = g;
    T.tbase = base;
    T.vlanes = W;
    T.vcount = count;
    for (int32_t q = 0; q < g; q++) {
        T.tv[q] = sc_ir_new_vector(B, "acc", L->vt, W);
        sc_ir_push(B, out, sc_ir_decl(B, T.tv[q], sc_ir_splat(B, sc_ir_flt(B, 0.0, L->vt), W)));
    }
    sc_ir_push(B, out, lower_at(L, r, n, &T));
    for (int32_t q = 0; q < g; q++) {
        st U = *S;
        U.cv[j] = BIN(ADD, base, I(q * W));
        const sc_ir_expr *acc = scaled(L, S, known, V(T.tv[q]));
        if (!L->tile_strided) {
            U.vcount = count;
            write_out(L, &U, out, acc);
            continue;
        }
        /* the output is strided along j: the vector goes out a lane at a time (those
         * below count in a partial tile) */
        for (int32_t l = 0; l < W; l++) {
            st Ul = U;
            Ul.cv[j] = BIN(ADD, base, I(q * W + l));
            sc_ir_list wb = {0};
            write_out(L, &Ul, &wb, sc_ir_lane(B, acc, l));
            const sc_ir_stmt *w = sc_ir_list_block(B, &wb);
            sc_ir_push(B, out, count ? sc_ir_if(B, BIN(LT, I(l), count), w, NULL) : w);
        }
    }
}

/* The tiles of one row.  Vectors: tiles of TILE_BYTES, then the full vectors left in
 * tiles of halving size (g/2, g/4, ..., 1 vectors, each at most once: a row shorter than a
 * full tile is walked once per set bit of its vector count, not once per vector), then
 * one partial vector of the remaining lanes.  Strided operands: local-array tiles of
 * TILE_BYTES, of one vector's lanes, then one of the rest. */
static void tiled(lb *L, int32_t r, const sc_lower_node *n, const sc_lower_node *known,
                  const st *S, sc_ir_list *out)
{
    sc_expr_var j = L->order[L->n - 1];
    int32_t small = B->fn->vec_bytes / val_bytes(L), g = TILE_BYTES / B->fn->vec_bytes;
    int32_t big = g * small;
    const sc_ir_expr *N = V(L->ext[j]);
    sc_ir_var nb = newv(L, "Nbig", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_decl(B, nb, BIN(MUL, BIN(DIV, N, I(big)), I(big))));
    sc_ir_var jb = newv(L, "jt", SC_IR_I64);
    sc_ir_list b1 = {0}, rest = {0};
    if (L->tile_vec) {
        tile_vectors(L, r, n, known, S, V(jb), g, small, NULL, &b1);
        sc_ir_push(B, out, sc_ir_for(B, jb, I(0), V(nb), I(big), SC_IR_SEQ, 0, sc_ir_list_block(B, &b1)));
        sc_ir_var jr = newv(L, "jt", SC_IR_I64);
        sc_ir_push(B, out, sc_ir_decl(B, jr, V(nb)));
        for (int32_t h = g / 2; h >= 1; h /= 2) {
            sc_ir_list bh = {0};
            tile_vectors(L, r, n, known, S, V(jr), h, small, NULL, &bh);
            sc_ir_push(B, &bh, sc_ir_assign(B, jr, true, I(h * small)));
            sc_ir_push(B, out, sc_ir_if(B, BIN(LE, BIN(ADD, V(jr), I(h * small)), N),
                                        sc_ir_list_block(B, &bh), NULL));
        }
        tile_vectors(L, r, n, known, S, V(jr), 1, small, BIN(SUB, N, V(jr)), &rest);
        sc_ir_push(B, out, sc_ir_if(B, BIN(LT, V(jr), N), sc_ir_list_block(B, &rest), NULL));
        return;
    }
    sc_ir_var ns = newv(L, "Nvec", SC_IR_I64), js = newv(L, "jt", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_decl(B, ns, BIN(MUL, BIN(DIV, N, I(small)), I(small))));
    sc_ir_list b2 = {0};
    tile_one(L, r, n, known, S, V(jb), big, I(big), &b1);
    tile_one(L, r, n, known, S, V(js), small, I(small), &b2);
    sc_ir_push(B, out, sc_ir_for(B, jb, I(0), V(nb), I(big), SC_IR_SEQ, 0, sc_ir_list_block(B, &b1)));
    sc_ir_push(B, out, sc_ir_for(B, js, V(nb), V(ns), I(small), SC_IR_SEQ, 0, sc_ir_list_block(B, &b2)));
    tile_one(L, r, n, known, S, V(ns), small, BIN(SUB, N, V(ns)), &rest);
    sc_ir_push(B, out, sc_ir_if(B, BIN(LT, V(ns), N), sc_ir_list_block(B, &rest), NULL));
}

/* The depth at which a register tile starts, or -1 (see tiled). */
static int32_t tile_depth(lb *L)
{
    const sc_lower_problem *p = L->p;
    if (p->out_sparse || L->n < 2 || L->m == 0)
        return -1;
    sc_expr_var j = L->order[L->n - 1];
    int32_t kj = L->out_level_of[j];
    if (kj < 0 || sparse_iterates(L, j))
        return -1;
    int32_t r = 0;
    L->tile_vec = vector_values(L);
    L->tile_strided = kj != L->m - 1;
    for (int32_t a = 0; a < p->naccess; a++)
        if (!p->ops[p->acc[a].operand].sparse && along(L, &p->acc[a], j) < 0)
            L->tile_vec = false; /* strided or broadcast along the tile */
    for (int32_t k = 0; k < L->m; k++)
        if (k != kj && L->depth_of[p->out_lvar[k]] + 1 > r)
            r = L->depth_of[p->out_lvar[k]] + 1;
    if (r > L->n - 2 || (r == 0 && L->par))
        return -1;
    return r;
}

/* A row whose coordinates span fewer than DENSE_ROW_SPAN times its multiply count fills
 * densely, or fewer than SHORT_ROW_SPAN times where it has under SHORT_ROW multiply-adds
 * (the bitmap's collect costs more next to a short row); a row of at most small_row()
 * multiply-adds appends its products and sorts them.  A row of SPAN_BOUND_ROW or more
 * multiply-adds is bounded by its span too (span_bound). */
enum { DENSE_ROW_SPAN = 4, SHORT_ROW = 32, SHORT_ROW_SPAN = 16, SMALL_ROW = 8,
       SORT_ROW = SC_IR_SORT_VECTOR_MOST, SPAN_BOUND_ROW = 128 };

/* The most multiply-adds of a row that appends and sorts its products: SORT_ROW where
 * the output's coordinates are int32, its values 32 bits wide and the vectors 64 bytes
 * (AVX-512: the sort runs in 32-byte vector registers, about 4 ns an entry at 32-128
 * entries, where a graph's row through the bitmap costs ~18: p2p-Gnutella31), else
 * SMALL_ROW. */
static int32_t small_row(const lb *L)
{
    bool sorts = B->fn->vec_bytes == 64 && L->p->out_itype == SC_INDEX_I32 &&
                 (L->vt == SC_IR_F32 || L->vt == SC_IR_VI32);
    return sorts ? SORT_ROW : SMALL_ROW;
}

/* The span pass of the row bound at depth d: each segment's first and last coordinate
 * of the row's last output index folded into lo and hi (declared by the caller); probe:
 * only the first and the last entry of the loop at depth d + 1 (span_bound). */
static const sc_ir_stmt *span_pass(lb *L, int32_t d, const sc_lower_node *n, const st *S,
                                   sc_ir_var lo, sc_ir_var hi, bool probe)
{
    int mode = L->mode;
    L->mode = BOUND;
    L->span_lo = lo;
    L->span_hi = hi;
    L->span_probe = probe ? d + 1 : -1;
    const sc_ir_stmt *s = lower_at(L, d + 1, n, S);
    L->mode = mode;
    L->span_lo = L->span_hi = L->span_probe = -1;
    return s;
}

/*
 * One row of a one-pass Gustavson fill (SpGEMM), one of three ways chosen per row.  A
 * dense row — its coordinates span under DENSE_ROW_SPAN times its multiply count (FEM
 * rows, banded products: most products land on a column already touched), under
 * SHORT_ROW_SPAN times for a short row (grids) — adds every product into the zeroed
 * workspace and sets the coordinate's byte flag, with no test and no read-modify-write
 * of a bitmap word (neighbouring columns share one, which serialises the fill), then
 * scans the flags over the span, in order.  The span comes from a pass like BOUND's that
 * takes each segment's first and last coordinates.  Other rows (graphs: products spread
 * over a wide range) take the two-level bitmap, whose new marks append straight into the
 * output with no branch (ws_leaf).  That needs a slot of every product: a row whose
 * bound is capped at the column count spans less than that, so it is dense (both factors
 * are at least 1), and a bitmap row's bound is its product count.  The gather of the
 * values clears the workspace for the next row.  A row of at most small_row() products
 * (road networks, circuits, sparse graphs: a handful) skips the workspace: each product
 * is appended to the row's slot in the output, coordinate and value, and the slot is
 * then sorted with equal coordinates summed (SORTSUM: in vector registers where the
 * target has AVX-512, else by insertion) — no bitmap marks,
 * collect, gather or clear.  Its bound (the slot's size, min(products, columns)) is its
 * product count where it is under the column count: the appends stay inside the slot.
 */
/* The fill of one row below depth d, lowered for gus_row's way `way`. */
static const sc_ir_stmt *row_fill(lb *L, int way, int32_t d, const sc_lower_node *n,
                                  const st *S)
{
    L->row_way = way;
    const sc_ir_stmt *s = lower_at(L, d + 1, n, S);
    L->row_way = ROW_ANY;
    return s;
}

/* A row that appends its products to its slot and sorts them, summing equal coordinates
 * (at most `most` of them: SORTSUM's promise), into out; the condition it needs is
 * appends(). */
static void sorted_row(lb *L, int32_t d, const sc_lower_node *n, const st *S, sc_ir_var n0,
                       int32_t most, sc_ir_list *out)
{
    sc_ir_var cnt = S->cnt[L->m - 1];
    sc_ir_push(B, out, row_fill(L, ROW_SMALL, d, n, S));
    sc_ir_push(B, out, sc_ir_sortsum(B, L->ocrd[L->m - 1], L->ovals, V(n0), cnt, most));
}

/* Whether a row bound by bnd products may append them (sorted_row): at most `most`, and
 * fewer than the columns, so that its slot holds every product. */
static const sc_ir_expr *appends(lb *L, sc_ir_var bnd, int32_t most, sc_ir_var ncols)
{
    return BIN(AND, BIN(LE, V(bnd), I(most)), BIN(LT, V(bnd), V(ncols)));
}

static void gus_row(lb *L, int32_t d, const sc_lower_node *n, const st *S, sc_ir_list *out)
{
    int32_t m = L->m;
    sc_ir_var cnt = S->cnt[m - 1], row = L->cnt[m - 1], oc = L->ocrd[m - 1];
    sc_ir_var n0 = newv(L, "n0", SC_IR_I64), bnd = newv(L, "bnd", SC_IR_I64);
    sc_ir_var lo = newv(L, "lo", SC_IR_I64), hi = newv(L, "hi", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_decl(B, n0, V(cnt)));
    sc_ir_push(B, out, sc_ir_decl(B, bnd, BIN(SUB, sc_ir_load(B, row, BIN(ADD, S->opos, I(1))),
                                             sc_ir_load(B, row, S->opos))));
    sc_ir_var ncols = L->ext[L->p->out_lvar[m - 1]];
    sc_ir_list small = {0}, wide = {0};
    sorted_row(L, d, n, S, n0, SMALL_ROW, &small);
    sc_ir_push(B, &wide, sc_ir_decl(B, lo, V(ncols)));
    sc_ir_push(B, &wide, sc_ir_decl(B, hi, I(-1)));
    sc_ir_push(B, &wide, span_pass(L, d, n, S, lo, hi, false));
    sc_ir_list dense = {0}, bitmap = {0}, filled = {0};
    sc_ir_push(B, &dense, row_fill(L, ROW_DENSE, d, n, S));
    sc_ir_push(B, &dense, sc_ir_scan(B, oc, V(cnt), L->ws_flag, V(lo), V(hi), cnt));
    sc_ir_push(B, &bitmap, row_fill(L, ROW_BITMAP, d, n, S));
    sc_ir_push(B, &bitmap, sc_ir_collect(B, oc, V(n0), V(L->ws_n), L->ws_bits, L->ws_sum, true,
                                         L->ws_size));
    sc_ir_push(B, &bitmap, sc_ir_assign(B, L->ws_n, false, I(0)));
    const sc_ir_expr *span_len = BIN(SUB, V(hi), V(lo));
    const sc_ir_expr *factor = sc_ir_select(B, BIN(LT, V(bnd), I(SHORT_ROW)), I(SHORT_ROW_SPAN),
                                            I(DENSE_ROW_SPAN));
    sc_ir_var is_dense = newv(L, "dense", SC_IR_I64);
    sc_ir_push(B, &wide, sc_ir_decl(B, is_dense, BIN(AND, BIN(LE, V(lo), V(hi)),
                                                     BIN(LT, span_len, BIN(MUL, factor, V(bnd))))));
    sc_ir_push(B, &filled, sc_ir_if(B, V(is_dense), sc_ir_list_block(B, &dense),
                                    sc_ir_list_block(B, &bitmap)));
    gather_row(L, n0, cnt, true, &filled);
    int32_t most = small_row(L);
    if (most > SMALL_ROW) {
        /* a row too wide for the dense fill and short enough to sort: appended, sorted */
        sc_ir_list sorted = {0};
        sorted_row(L, d, n, S, n0, most, &sorted);
        const sc_ir_expr *sorts = BIN(AND, appends(L, bnd, most, ncols), sc_ir_not(B, V(is_dense)));
        sc_ir_push(B, &wide, sc_ir_if(B, sorts, sc_ir_list_block(B, &sorted),
                                      sc_ir_list_block(B, &filled)));
    } else {
        sc_ir_push(B, &wide, sc_ir_list_block(B, &filled));
    }
    sc_ir_push(B, out, sc_ir_if(B, appends(L, bnd, SMALL_ROW, ncols), sc_ir_list_block(B, &small), sc_ir_list_block(B, &wide)));
}

/*
 * The BOUND pass's row of at least SPAN_BOUND_ROW products: bounded by its span too
 * (its coordinates lie between the least first and the greatest last coordinate of the
 * segments it adds up), taken as gus_row takes it.  A banded or FEM product lands most
 * products on a column already touched: banded-1M's rows bound 729 products over a
 * span of 53, and the output reserved 5.5 GB for its 0.4 GB of entries (bcsstk16: 134
 * MB for 8).  The bound stays above SMALL_ROW (a row of at most that many appends every
 * product to its slot, with no span taken) and at least the span, so the fill takes the
 * row as dense (its span is under its bound, both span factors are at least 1: never the
 * sorted way either) and writes only its entries.  A floor of SORT_ROW + 1 made
 * banded-100k's product 10 % slower (a bound of 129 for its 53 entries a row).  Not from
 * 32 products: on graphs (a span as wide as the matrix) the second pass over the row
 * cost p2p-Gnutella31 8 % and wiki-Vote 9 %; from 128, wiki-Vote ~4 %,
 * which a probe of the row's first and last segments takes back (their span is already
 * the products' or more on a graph's heavy row, so the whole row is not walked).
 */
static void span_bound(lb *L, int32_t d, const sc_lower_node *n, const st *S, sc_ir_list *out)
{
    sc_ir_var cnt = S->cnt[L->m - 1], ncols = L->ext[L->p->out_lvar[L->m - 1]];
    sc_ir_var lo = newv(L, "lo", SC_IR_I64), hi = newv(L, "hi", SC_IR_I64);
    const sc_ir_expr *span = BIN(ADD, BIN(SUB, V(hi), V(lo)), I(1));
    sc_ir_list probe = {0}, full = {0};
    sc_ir_push(B, &probe, sc_ir_decl(B, lo, V(ncols)));
    sc_ir_push(B, &probe, sc_ir_decl(B, hi, I(-1)));
    sc_ir_push(B, &probe, span_pass(L, d, n, S, lo, hi, true));
    sc_ir_push(B, &full, span_pass(L, d, n, S, lo, hi, false));
    const sc_ir_expr *width = BIN(MAX, span, I(SMALL_ROW + 1));
    sc_ir_push(B, &full, sc_ir_if(B, BIN(LE, V(lo), V(hi)),
                                  sc_ir_assign(B, cnt, false, BIN(MIN, V(cnt), width)), NULL));
    /* the whole row only where its first and last segments span fewer columns than its
     * products (a graph's rarely do): the span can only grow */
    sc_ir_push(B, &probe, sc_ir_if(B, BIN(LT, span, V(cnt)), sc_ir_list_block(B, &full), NULL));
    sc_ir_push(B, out, sc_ir_if(B, BIN(LE, I(SPAN_BOUND_ROW), V(cnt)), sc_ir_list_block(B, &probe),
                                NULL));
}

/* Everything below the binding of the variable at depth d (S already updated). */
static void after_bind(lb *L, int32_t d, const sc_lower_node *n, st *S, sc_ir_list *out)
{
    const sc_lower_problem *p = L->p;
    sc_expr_var v = L->order[d];
    int32_t ko = L->out_level_of[v];
    bool row = false;
    if (p->out_sparse && ko >= 0 && ko < L->D) {
        S->opos = ko == 0 ? S->cv[v] : BIN(ADD, BIN(MUL, S->opos, V(L->ext[v])), S->cv[v]);
        sc_ir_var r = newv(L, "r", SC_IR_I64);
        sc_ir_push(B, out, sc_ir_decl(B, r, S->opos));
        S->opos = V(r);
        if (ko == L->D - 1) {
            row = true;
            row_begin(L, S, out);
        }
    }
    bool tree_entry = p->out_sparse && !L->flat && ko >= L->D && ko < L->kw && ko < L->m - 1 &&
                      L->whole < 0;
    sc_ir_var mark = -1;
    if (tree_entry) {
        mark = newv(L, "mark", SC_IR_I64);
        sc_ir_push(B, out, sc_ir_decl(B, mark, V(S->cnt[ko + 1])));
    }
    bool acc_mode = d == L->dlast && L->dlast < L->n - 1 && !(p->out_sparse && L->q >= 0);
    if (acc_mode) {
        if (L->mode == FILL) {
            /* factors known here multiply the sum once, not every term of it */
            const sc_lower_node *known = NULL, *rest = NULL;
            if (n)
                split_factors(L, n, S, d, &known, &rest);
            if (!known || !rest) {
                known = NULL;
                rest = n;
            }
            if (S->dot) {
                if (!known)
                    sc_ir_fail(B, SC_INTERNAL, "a grouped dot product without known factors");
                write_out(L, S, out, BIN(MUL, value(L, S, known), S->dot));
                S->dot = NULL;
            } else if (L->pairing && paired_rows(L, d, known, rest, S, out)) {
                /* this row and the next, both written */
            } else {
                S->acc = newv(L, "acc", L->vt);
                sc_ir_push(B, out, sc_ir_decl(B, S->acc, sc_ir_flt(B, 0.0, L->vt)));
                sc_ir_push(B, out, lower_at(L, d + 1, rest, S));
                sc_ir_var a = S->acc;
                S->acc = -1;
                write_out(L, S, out, known ? BIN(MUL, value(L, S, known), V(a)) : V(a));
            }
        } else {
            write_out(L, S, out, NULL);
        }
    } else if (L->tile_at == d + 1 && !p->out_sparse) {
        /* factors known above the tile multiply each accumulator once, at its store */
        const sc_lower_node *known = NULL, *rest = NULL;
        if (n && L->mode == FILL)
            split_factors(L, n, S, d, &known, &rest);
        if (!known || !rest) {
            known = NULL;
            rest = n;
        }
        tiled(L, d + 1, rest, known, S, out);
    } else if (row && d == L->q - 1 && L->mode == FILL && L->onepass && L->ws_flag >= 0) {
        gus_row(L, d, n, S, out);
    } else if (row && d == L->q - 1 && L->mode == BOUND && L->gus && L->span_lo < 0) {
        sc_ir_push(B, out, lower_at(L, d + 1, n, S));
        span_bound(L, d, n, S, out);
    } else if (!(L->mode == COUNT && !p->out_sparse)) {
        sc_ir_push(B, out, lower_at(L, d + 1, n, S));
        if (p->out_sparse && L->q >= 0 && d == L->q - 1)
            drain(L, S, out);
    }
    if (tree_entry) {
        sc_ir_list e = {0};
        if (L->mode == FILL)
            sc_ir_push(B, &e, sc_ir_store(B, L->ocrd[ko], V(S->cnt[ko]), false, S->cv[v]));
        sc_ir_push(B, &e, sc_ir_assign(B, S->cnt[ko], true, I(1)));
        if (L->mode == FILL)
            sc_ir_push(B, &e, sc_ir_store(B, L->opos[ko + 1], V(S->cnt[ko]), false, V(S->cnt[ko + 1])));
        sc_ir_push(B, out, sc_ir_if(B, BIN(LT, V(mark), V(S->cnt[ko + 1])), sc_ir_list_block(B, &e), NULL));
    }
    if (row)
        row_end(L, S, out);
}

typedef struct iter {
    int32_t access, level, operand;
    bool unique;
    sc_ir_var p, e, c, q;
    const sc_ir_expr *lo;
} iter;

/* Body of one lattice case: bind iterators in mask and locators, then go deeper. */
static const sc_ir_stmt *case_body(lb *L, int32_t d, const sc_lower_node *n, const st *S0,
                                   const iter *it, int32_t nit, uint32_t mask,
                                   const sc_ir_expr *cv, bool dyn)
{
    const sc_lower_problem *p = L->p;
    sc_expr_var v = L->order[d];
    uint64_t zero = 0;
    for (int32_t i = 0; i < nit; i++)
        if (!((mask >> i) & 1))
            zero |= (uint64_t)1 << it[i].access;
    const sc_lower_node *sn = sc_lower_specialize(L->arena, n, zero, L->err);
    if (!sn)
        return NULL;
    st S = *S0;
    sc_ir_list out = {0};
    S.cv[v] = cv;
    if (nit > 0)
        S.seen_sparse = true;
    if (L->out_level_of[v] < 0)
        S.seen_red = true;
    for (int32_t i = 0; i < nit; i++) {
        if (!((mask >> i) & 1))
            continue;
        int32_t a = it[i].access;
        S.nbound[a]++;
        S.ppos[a] = V(it[i].p);
        S.pend[a] = it[i].unique ? NULL : V(it[i].q);
        if (dyn) {
            sc_ir_var has = newv(L, "has", SC_IR_BOOL);
            sc_ir_push(B, &out, sc_ir_decl(B, has, BIN(EQ, V(it[i].c), cv)));
            S.pres[a] = S.pres[a] ? BIN(AND, S.pres[a], V(has)) : V(has);
        }
    }
    uint64_t present = sc_lower_node_accesses(sn);
    for (int32_t a = 0; a < p->naccess; a++) {
        if (!((present >> a) & 1))
            continue;
        const sc_lower_access *ac = &p->acc[a];
        const sc_lower_operand *op = &p->ops[ac->operand];
        if (!op->sparse)
            continue;
        int32_t k = S.nbound[a];
        if (k < ac->order && ac->lvar[k] == v && op->fmt.kind[k] == SC_LEVEL_DENSE) {
            const sc_ir_expr *pe = k == 0 ? cv : BIN(ADD, BIN(MUL, S.ppos[a], V(L->ext[v])), cv);
            sc_ir_var pl = newv(L, "p", SC_IR_I64);
            sc_ir_push(B, &out, sc_ir_decl(B, pl, pe));
            S.ppos[a] = V(pl);
            S.pend[a] = NULL;
            S.nbound[a]++;
        }
        if (S.nbound[a] == ac->order && S.val[a] < 0 && L->mode == FILL) {
            sc_ir_var val = newv(L, "v", L->vt);
            if (S.pend[a]) {
                sc_ir_push(B, &out, sc_ir_decl(B, val, sc_ir_flt(B, 0.0, L->vt)));
                sc_ir_var pp = newv(L, "pp", SC_IR_I64);
                const sc_ir_stmt *sum = sc_ir_for(B, pp, S.ppos[a], S.pend[a], I(1), SC_IR_SEQ, 0,
                                                  sc_ir_assign(B, val, true, sc_ir_load(B, L->vals[ac->operand], V(pp))));
                sc_ir_push(B, &out, S.pres[a] ? sc_ir_if(B, S.pres[a], sum, NULL) : sum);
            } else {
                const sc_ir_expr *ld = sc_ir_load(B, L->vals[ac->operand], S.ppos[a]);
                if (S.pres[a])
                    ld = sc_ir_select(B, S.pres[a], ld, sc_ir_flt(B, 0.0, L->vt));
                sc_ir_push(B, &out, sc_ir_decl(B, val, ld));
            }
            S.val[a] = val;
        }
    }
    after_bind(L, d, sn, &S, &out);
    return sc_ir_list_block(B, &out);
}

static const sc_ir_expr *all_equal(lb *L, const iter *it, int32_t nit, uint32_t mask,
                                   const sc_ir_expr *cv)
{
    const sc_ir_expr *c = NULL;
    for (int32_t i = 0; i < nit; i++)
        if ((mask >> i) & 1) {
            const sc_ir_expr *e = BIN(EQ, V(it[i].c), cv);
            c = c ? BIN(AND, c, e) : e;
        }
    return c ? c : sc_ir_int(B, 1);
}

/* if/else chain over the lattice points contained in within. */
static const sc_ir_stmt *cases(lb *L, int32_t d, const sc_lower_node *n, const st *S,
                               const iter *it, int32_t nit, const sc_lower_lattice *lat,
                               uint32_t within, const sc_ir_expr *cv)
{
    const sc_ir_stmt *chain = NULL;
    for (int32_t q = lat->npoints; q-- > 0;) {
        uint32_t m = lat->points[q];
        if ((m & ~within) != 0)
            continue;
        const sc_ir_stmt *body = case_body(L, d, n, S, it, nit, m, cv, false);
        if (!body)
            continue;
        if (m == 0 && !chain)
            chain = body;
        else
            chain = sc_ir_if(B, all_equal(L, it, nit, m, cv), body, chain);
    }
    return chain;
}

static void advance(lb *L, const iter *it, int32_t nit, uint32_t within, const sc_ir_expr *cv,
                    sc_ir_list *out)
{
    for (int32_t i = 0; i < nit; i++) {
        if (!((within >> i) & 1))
            continue;
        const sc_ir_expr *next = it[i].unique ? BIN(ADD, V(it[i].p), I(1)) : V(it[i].q);
        sc_ir_push(B, out, sc_ir_assign(B, it[i].p, false,
                                        sc_ir_select(B, BIN(EQ, V(it[i].c), cv), next, V(it[i].p))));
    }
}

/* it->q = the end of the run of equal coordinates at a non-unique level's position it->p
 * (it->c its coordinate where p < e): its first RUN_SCAN positions one at a time (most
 * runs end there, and a scan's exit is predicted better than a search's steps), then,
 * where the run goes on, a search (sc_ir_runend: O(log run) loads, a long COO row). */
enum { RUN_SCAN = 8 };
static void run_end(lb *L, const iter *it, sc_ir_list *out)
{
    if (it->unique)
        return;
    sc_ir_var crd = L->crd[it->operand][it->level];
    sc_ir_push(B, out, sc_ir_decl(B, it->q, BIN(ADD, V(it->p), I(1))));
    const sc_ir_expr *near = BIN(MIN, V(it->e), BIN(ADD, V(it->p), I(RUN_SCAN)));
    const sc_ir_expr *cond = BIN(AND, BIN(LT, V(it->q), near),
                                 BIN(EQ, sc_ir_load(B, crd, V(it->q)), V(it->c)));
    sc_ir_push(B, out, sc_ir_while(B, cond, sc_ir_assign(B, it->q, true, I(1))));
    const sc_ir_expr *on = BIN(AND, BIN(LT, V(it->q), V(it->e)),
                               BIN(EQ, sc_ir_load(B, crd, V(it->q)), V(it->c)));
    const sc_ir_expr *end = sc_ir_runend(B, crd, V(it->q), V(it->e));
    sc_ir_push(B, out, sc_ir_if(B, on, sc_ir_assign(B, it->q, false, end), NULL));
}

/* Whether a sum of n over v can load vectors along v: every dense operand in n that is
 * indexed by v reads contiguously along it, and at least one is. */
static bool vector_dot(const lb *L, sc_expr_var v, const sc_lower_node *n)
{
    const sc_lower_problem *p = L->p;
    if (!vector_values(L))
        return false;
    bool any = false;
    uint64_t present = sc_lower_node_accesses(n);
    for (int32_t a = 0; a < p->naccess; a++) {
        if (!((present >> a) & 1) || p->ops[p->acc[a].operand].sparse)
            continue;
        int how = along(L, &p->acc[a], v);
        if (how < 0)
            return false;
        any |= how > 0;
    }
    return any;
}

/*
 * The dense innermost reduction of unrolled_reduction (below) in vectors when every
 * dense operand indexed by v is contiguous along v (SDDMM's rows): two vector
 * accumulators over 2W elements per step, one more vector step, a lane sum, then the
 * scalar rest.
 */
static bool vector_reduction(lb *L, int32_t d, const sc_lower_node *n, const st *S,
                             sc_ir_list *out)
{
    sc_expr_var v = L->order[d];
    if (!vector_dot(L, v, n))
        return false;
    int32_t W = sc_ir_vec_lanes(B->fn, L->vt);
    const sc_ir_expr *N = V(L->ext[v]);
    sc_ir_var va = sc_ir_new_vector(B, "vacc", L->vt, W), vb = sc_ir_new_vector(B, "vacc", L->vt, W);
    const sc_ir_expr *zero = sc_ir_splat(B, sc_ir_flt(B, 0.0, L->vt), W);
    sc_ir_push(B, out, sc_ir_decl(B, va, zero));
    sc_ir_push(B, out, sc_ir_decl(B, vb, zero));
    sc_ir_var n2 = newv(L, "N2", SC_IR_I64), n1 = newv(L, "N1", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_decl(B, n2, BIN(MUL, BIN(DIV, N, I(2 * W)), I(2 * W))));
    sc_ir_push(B, out, sc_ir_decl(B, n1, BIN(MUL, BIN(DIV, N, I(W)), I(W))));
    sc_ir_var k = newv(L, vname(L, v), SC_IR_I64);
    st T = *S;
    T.vec = true;
    T.vtile = v;
    T.vlanes = W;
    sc_ir_list body = {0};
    T.cv[v] = V(k);
    sc_ir_push(B, &body, sc_ir_assign(B, va, true, value(L, &T, n)));
    T.cv[v] = BIN(ADD, V(k), I(W));
    sc_ir_push(B, &body, sc_ir_assign(B, vb, true, value(L, &T, n)));
    sc_ir_push(B, out, sc_ir_for(B, k, I(0), V(n2), I(2 * W), SC_IR_SEQ, 0, sc_ir_list_block(B, &body)));
    T.cv[v] = V(n2);
    sc_ir_push(B, out, sc_ir_if(B, BIN(LT, V(n2), V(n1)),
                                sc_ir_assign(B, va, true, value(L, &T, n)), NULL));
    sc_ir_push(B, out, sc_ir_assign(B, S->acc, true, sc_ir_hsum(B, BIN(ADD, V(va), V(vb)))));
    sc_ir_var k2 = newv(L, vname(L, v), SC_IR_I64);
    T = *S;
    T.cv[v] = V(k2);
    sc_ir_push(B, out, sc_ir_for(B, k2, V(n1), N, I(1), SC_IR_SEQ, 0,
                                 sc_ir_assign(B, S->acc, true, value(L, &T, n))));
    return true;
}

/*
 * The innermost loop of a scalar reduction over a dense range (an SDDMM dot product):
 * UNROLL independent accumulators so the sum vectorises without reassociation flags,
 * then a remainder loop.  Only when no sparse level is located at v (all values at the
 * leaf come from dense operands or are already bound).
 */
static bool unrolled_reduction(lb *L, int32_t d, const sc_lower_node *n, const st *S,
                               sc_ir_list *out)
{
    const sc_lower_problem *p = L->p;
    sc_expr_var v = L->order[d];
    if (d != L->n - 1 || S->acc < 0 || L->mode != FILL || !n)
        return false;
    uint64_t present = sc_lower_node_accesses(n);
    for (int32_t a = 0; a < p->naccess; a++)
        if (((present >> a) & 1) && p->ops[p->acc[a].operand].sparse && S->nbound[a] < p->acc[a].order)
            return false;
    if (vector_reduction(L, d, n, S, out))
        return true;
    int32_t U = val_bytes(L) == 4 ? 8 : 4;
    sc_ir_var part[8];
    part[0] = S->acc;
    for (int32_t u = 1; u < U; u++) {
        part[u] = newv(L, "acc", L->vt);
        sc_ir_push(B, out, sc_ir_decl(B, part[u], sc_ir_flt(B, 0.0, L->vt)));
    }
    sc_ir_var nmain = newv(L, "Nmain", SC_IR_I64);
    const sc_ir_expr *N = V(L->ext[v]);
    sc_ir_push(B, out, sc_ir_decl(B, nmain, BIN(MUL, BIN(DIV, N, I(U)), I(U))));
    sc_ir_var k = newv(L, vname(L, v), SC_IR_I64);
    st T = *S;
    sc_ir_list body = {0};
    for (int32_t u = 0; u < U; u++) {
        T.cv[v] = u ? BIN(ADD, V(k), I(u)) : V(k);
        sc_ir_push(B, &body, sc_ir_assign(B, part[u], true, value(L, &T, n)));
    }
    sc_ir_push(B, out, sc_ir_for(B, k, I(0), V(nmain), I(U), SC_IR_SEQ, 0, sc_ir_list_block(B, &body)));
    const sc_ir_expr *sum = V(part[1]);
    for (int32_t u = 2; u < U; u++)
        sum = BIN(ADD, sum, V(part[u]));
    sc_ir_push(B, out, sc_ir_assign(B, S->acc, true, sum));
    sc_ir_var k2 = newv(L, vname(L, v), SC_IR_I64);
    T.cv[v] = V(k2);
    sc_ir_push(B, out, sc_ir_for(B, k2, V(nmain), N, I(1), SC_IR_SEQ, 0,
                                 sc_ir_assign(B, S->acc, true, value(L, &T, n))));
    return true;
}

/*
 * Dense rows gathered from DRAM: SpMM's B(j,:) and SDDMM's C(j,:), read at a segment's
 * coordinate j.  Where the operand is larger than the last-level cache (env's
 * cache_bytes) and the segment's rows lie far apart (on average ROW_SPREAD bytes or more
 * between consecutive coordinates: not a banded row, whose rows the hardware prefetcher
 * streams), each entry requests the row of the entry ROW_AHEAD positions on — the part of
 * it the loop reads: a register tile's lanes, or the whole row where that is at most
 * ROW_PREFETCH_BYTES — one prefetch per 64-byte line, so the rows' DRAM latencies
 * overlap.  The test runs once per segment (row_flag) and picks one of two copies of the
 * segment's loop, built with and without the prefetches, so a segment that does not
 * prefetch pays one branch, not one per entry: prefetching rows already in cache cost
 * 1.3-1.8x (a flag tested per entry 1.3-1.5x) in earlier measurements.
 */
enum {
    ROW_AHEAD = 32,
    ROW_SPREAD = 4096,
    ROW_PREFETCH_BYTES = 512,
    LINE_BYTES = 64,
    SHORT_ROW_BYTES = 256,
    THREAD_CACHE = 3 << 19 /* 1.5 MiB */
};
#define LINE_ROW_CACHE ((int64_t)32 << 20)

/* The access of a dense row read at the coordinate of segment i0 over L->order[d] and
 * along a deeper variable it is contiguous in (within the register tile, where there is
 * one), or -1. */
static int32_t prefetched_row(const lb *L, int32_t d, const sc_lower_node *n, const st *S,
                              const iter *i0)
{
    const sc_lower_problem *p = L->p;
    sc_expr_var v = L->order[d];
    if (L->mode != FILL || !n || S->tacc >= 0 || S->vcount || L->clen[i0->operand][i0->level] < 0)
        return -1;
    uint64_t present = sc_lower_node_accesses(n);
    for (int32_t a = 0; a < p->naccess; a++) {
        const sc_lower_access *ac = &p->acc[a];
        int32_t t = ac->operand;
        if (!((present >> a) & 1) || p->ops[t].sparse || ac->order != 2 || ac->var[0] != v ||
            ac->var[1] == v || (t < 64 && p->bcast[t]) || L->vals[t] < 0 || !L->stride[t][0] ||
            L->depth_of[ac->var[1]] <= d || along(L, ac, ac->var[1]) != 1 ||
            (S->tvn > 0 && ac->var[1] != L->order[L->n - 1]))
            continue;
        return a;
    }
    return -1;
}

/* flag = (the operand of access a outgrows the cache || its rows are one line each and
 * it outgrows LINE_ROW_CACHE || its rows are at most SHORT_ROW_BYTES and it outgrows
 * THREAD_CACHE per thread) && the part prefetched is at most ROW_PREFETCH_BYTES &&
 * (the segment from lo has fewer than two entries || its first and last coordinates lie
 * ROW_SPREAD bytes of rows apart per step); declared in out.
 *
 * Rows of one line: the cache Linux reports can be a host's whole L3 shared with other
 * tenants (480 MiB on a 2-vCPU Xeon VM), which a 64 MiB operand does not have to itself,
 * and a random row of one line gets nothing from the hardware prefetchers, which fetch a
 * longer row's further lines once its first misses.  On that VM, 1M rows of K = 16 f32
 * (64 MiB), prefetched against not: SpMM uniform 45-49 -> 37-42 ms, R-MAT 48-51 -> 46-48;
 * SDDMM R-MAT 55-58 -> 53-55.  At K = 64 the same change was level (uniform 5 % slower,
 * R-MAT 5 % faster) and at K = 256 slower (uniform 683 -> 778 ms), so wider rows keep
 * the reported size.  Where the L3 is 32 MiB (the EPYC VMs) nothing changes.
 *
 * Rows of at most 256 bytes, from 1.5 MiB per thread: what a core can count on of a
 * shared L3 (its slice; the rest is other cores' and, on a VM, other tenants').  The
 * suite's cache probe finds 0-16 MiB of the 36 MiB this 2-vCPU Xeon VM's sysfs reports.
 * In its cold order (another library's call between two of scorch's), alternating runs,
 * ÷ torch: p2p-Gnutella31 SDDMM K = 16 (V 3.8 MiB) 0.33-0.36 -> 0.24-0.30, K = 64 SpMM
 * 0.49-0.51 -> 0.45-0.47; soc-Slashdot0902 K = 64 (21 MB) SDDMM 0.50 -> 0.37, SpMM
 * 0.66-0.69 -> 0.58-0.60; K = 256 rows kept out: wiki-Vote SpMM K = 256 (8.5 MB, each
 * row read 12 times) went 0.46 -> 0.65 with them in. */
static sc_ir_var row_flag(lb *L, const st *S, const iter *i0, int32_t a, sc_ir_list *out)
{
    const sc_lower_access *ac = &L->p->acc[a];
    int32_t t = ac->operand, esz = val_bytes(L);
    sc_ir_var crd = L->crd[i0->operand][i0->level];
    const sc_ir_expr *rowb = BIN(MUL, L->stride[t][0], I(esz));
    const sc_ir_expr *cache = sc_ir_arg_ref(B, SC_IR_ARG_CACHE, -1, 0, SC_IR_I64);
    const sc_ir_expr *bytes = BIN(MUL, V(L->ext[ac->var[0]]), rowb);
    const sc_ir_expr *read = BIN(MUL, V(L->ext[ac->var[1]]), I(esz)); /* of each row */
    const sc_ir_expr *line_row = BIN(AND, BIN(LE, read, I(LINE_BYTES)),
                                     BIN(LE, I(LINE_ROW_CACHE), bytes));
    const sc_ir_expr *threads = sc_ir_arg_ref(B, SC_IR_ARG_THREADS, -1, 0, SC_IR_I64);
    const sc_ir_expr *short_row = BIN(AND, BIN(LE, read, I(SHORT_ROW_BYTES)),
                                      BIN(LE, BIN(MUL, threads, I(THREAD_CACHE)), bytes));
    const sc_ir_expr *flag = BIN(OR, BIN(OR, BIN(LE, cache, bytes), line_row), short_row);
    if (S->tvn == 0)
        flag = BIN(AND, flag, BIN(LE, read, I(ROW_PREFETCH_BYTES)));
    sc_ir_var lo = newv(L, "pflo", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_decl(B, lo, i0->lo));
    const sc_ir_expr *len = BIN(SUB, V(i0->e), V(lo));
    const sc_ir_expr *gap = BIN(SUB, sc_ir_load(B, crd, BIN(SUB, V(i0->e), I(1))), sc_ir_load(B, crd, V(lo)));
    const sc_ir_expr *far = BIN(LE, BIN(MUL, I(ROW_SPREAD), BIN(SUB, len, I(1))),
                                BIN(MUL, BIN(MAX, gap, BIN(SUB, I(0), gap)), rowb));
    flag = BIN(AND, flag, BIN(OR, BIN(LT, len, I(2)), far));
    sc_ir_var f = newv(L, "rowpf", SC_IR_BOOL);
    sc_ir_push(B, out, sc_ir_decl(B, f, flag));
    return f;
}

/* The position n entries after position at in i0's level, at most its last entry (the
 * level holds at least one wherever this is read). */
static const sc_ir_expr *entry_ahead(lb *L, const iter *i0, const sc_ir_expr *at, int64_t n)
{
    return BIN(MIN, BIN(ADD, at, I(n)), BIN(SUB, V(L->clen[i0->operand][i0->level]), I(1)));
}

/* In the prefetching copy of a segment's loop (L->rowpf) over i0's level: the row of the
 * entry ROW_AHEAD positions after position at (the level's last entry at most), the
 * lanes of S's register tile or the whole row, requested a line at a time. */
static void row_prefetch(lb *L, const st *S, const iter *i0, const sc_ir_expr *at, sc_ir_list *out)
{
    if (L->rowpf < 0 || i0->operand != L->rowpf_op || i0->level != L->rowpf_lvl)
        return;
    const sc_lower_access *ac = &L->p->acc[L->rowpf_acc];
    int32_t t = ac->operand, line = LINE_BYTES / val_bytes(L);
    sc_ir_var crd = L->crd[i0->operand][i0->level], q = newv(L, "pfrow", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_decl(B, q, sc_ir_load(B, crd, entry_ahead(L, i0, at, ROW_AHEAD))));
    const sc_ir_expr *row = BIN(MUL, V(q), L->stride[t][0]);
    if (S->tvn > 0) {
        for (int32_t l = 0; l < S->tvn * S->vlanes; l += line)
            sc_ir_push(B, out, sc_ir_prefetch(B, L->vals[t], BIN(ADD, row, BIN(ADD, S->tbase, I(l)))));
        return;
    }
    sc_ir_var o = newv(L, "pfo", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_for(B, o, I(0), V(L->ext[ac->var[1]]), I(line), SC_IR_SEQ, 0,
                                 sc_ir_prefetch(B, L->vals[t], BIN(ADD, row, V(o)))));
}

/* i0 with a new position and coordinate variable: for a second copy of its loop. */
static iter renamed(lb *L, const iter *i0)
{
    char nm[64];
    iter t = *i0;
    snprintf(nm, sizeof nm, "%s%d_p", oname(L, t.operand), (int)t.level);
    t.p = newv(L, nm, SC_IR_I64);
    t.c = newv(L, vname(L, L->p->acc[t.access].lvar[t.level]), SC_IR_I64);
    return t;
}

/* A builder of one copy of a segment's loop over i0 into out (arg: what else it needs);
 * false where the loop cannot be built. */
typedef bool (*segment_fn)(lb *L, const iter *i0, const void *arg, sc_ir_list *out);

/* The loop fn builds over segment i0 at depth d, into out: where a dense row is read at
 * its coordinate (prefetched_row) and may is set, twice under a row_flag — the copy that
 * prefetches the rows (L->rowpf set while it is built) and the plain one (i0's variables
 * renamed) — else once. */
static bool row_prefetched(lb *L, int32_t d, const sc_lower_node *n, const st *S, const iter *i0,
                           bool may, segment_fn fn, const void *arg, sc_ir_list *out)
{
    int32_t a = may && !L->rowpf_busy ? prefetched_row(L, d, n, S, i0) : -1;
    if (a < 0)
        return fn(L, i0, arg, out);
    sc_ir_var f = row_flag(L, S, i0, a, out);
    sc_ir_list with = {0}, without = {0};
    L->rowpf_busy = true;
    L->rowpf = f;
    L->rowpf_acc = a;
    L->rowpf_op = i0->operand;
    L->rowpf_lvl = i0->level;
    bool ok = fn(L, i0, arg, &with);
    L->rowpf = -1;
    iter i1 = renamed(L, i0);
    ok = ok && fn(L, &i1, arg, &without);
    L->rowpf_busy = false;
    if (ok)
        sc_ir_push(B, out, sc_ir_if(B, V(f), sc_ir_list_block(B, &with), sc_ir_list_block(B, &without)));
    return ok;
}

/* The entry of segment iterator i0 at position at: its position and coordinate declared
 * in out (fresh variables), then its case body in state T; false if that cannot be built. */
static bool entry_at(lb *L, int32_t d, const sc_lower_node *n, const st *T, const iter *i0,
                     const sc_ir_expr *at, sc_ir_list *out)
{
    iter t = *i0;
    t.p = newv(L, "p", SC_IR_I64);
    t.c = newv(L, vname(L, L->order[d]), SC_IR_I64);
    sc_ir_push(B, out, sc_ir_decl(B, t.p, at));
    row_prefetch(L, T, i0, V(t.p), out);
    sc_ir_push(B, out, sc_ir_decl(B, t.c, sc_ir_load(B, L->crd[t.operand][t.level], V(t.p))));
    const sc_ir_stmt *cb = case_body(L, d, n, T, &t, 1, 1, V(t.c), false);
    if (!cb)
        return false;
    sc_ir_push(B, out, cb);
    return true;
}

/*
 * The entries of a run of consecutive rows taken as one segment (short_rows): each
 * entry's row is found by a cursor that moves forward through the rows' pos array, and
 * the entry is lowered in the state that binding that row gives (row_state).
 */
typedef struct rowcur {
    const st *S0;   /* the state before the row variable is bound */
    int32_t access; /* the pattern operand's access: level 0 dense over the rows */
    sc_ir_var pos;  /* its level 1 pos array */
    sc_ir_var r;    /* the cursor: the row of the entry located last */
    sc_ir_var end;  /* the run's end: its entries are in rows r .. end - 1 */
} rowcur;

/* The state of an entry of row `row` (the pattern operand's level 0 bound there) whose
 * output entry is at position n: the output shares the operand's pattern, so an entry's
 * position is its own. */
static st row_state(lb *L, const rowcur *rc, const sc_ir_expr *row, sc_ir_var n)
{
    st T = *rc->S0;
    T.cv[L->order[0]] = row;
    T.ppos[rc->access] = row;
    T.pend[rc->access] = NULL;
    T.nbound[rc->access] = 1;
    T.opos = row;
    T.cnt[L->m - 1] = n;
    return T;
}

/* The cursor moved on to the row holding the entry at position p (rows may be empty). */
static void locate_row(lb *L, const rowcur *rc, const sc_ir_expr *p, sc_ir_list *out)
{
    sc_ir_push(B, out, sc_ir_while(B, BIN(LE, sc_ir_load(B, rc->pos, BIN(ADD, V(rc->r), I(1))), p),
                                   sc_ir_assign(B, rc->r, true, I(1))));
}

/* for (p = from; p < the segment's end; p++): the entry at p (its coordinate loaded),
 * one at a time (with rc: in its row, located by the cursor); NULL if its body cannot be
 * built. */
static const sc_ir_stmt *one_at_a_time(lb *L, int32_t d, const sc_lower_node *n, const st *S,
                                       const iter *i0, const sc_ir_expr *from, const rowcur *rc)
{
    sc_ir_list rb = {0};
    st T;
    if (rc) {
        locate_row(L, rc, V(i0->p), &rb);
        sc_ir_var nv = newv(L, "n", SC_IR_I64);
        sc_ir_push(B, &rb, sc_ir_decl(B, nv, V(i0->p)));
        T = row_state(L, rc, V(rc->r), nv);
        S = &T;
    }
    sc_ir_push(B, &rb, sc_ir_decl(B, i0->c, sc_ir_load(B, L->crd[i0->operand][i0->level], V(i0->p))));
    row_prefetch(L, S, i0, V(i0->p), &rb);
    const sc_ir_stmt *cb = case_body(L, d, n, S, i0, 1, 1, V(i0->c), false);
    if (!cb)
        return NULL;
    sc_ir_push(B, &rb, cb);
    return sc_ir_for(B, i0->p, from, V(i0->e), I(1), SC_IR_SEQ, 0, sc_ir_list_block(B, &rb));
}

/*
 * The innermost sum over one compressed segment, U entries per iteration into U
 * independent accumulators so the additions do not wait on each other, then the
 * remaining entries one at a time.  Either a scalar sum (SpMV's row: U = 4) or the one
 * vector of a one-vector register tile (SpMM's row at K = 16 f32: U = 2, the loop right
 * above the tile's lanes).  A scalar segment shorter than SHORT_SEGMENT runs as the one
 * plain loop: for rows of a few entries the unrolled loop's setup and its reduction of the
 * partial sums cost more than they save.  Scalar sums run as scalar loops: gcc would
 * otherwise vectorize them with gathers and an in-order lane reduction (f32 SpMV 1.5-1.8x
 * slower on bcsstk16 and wiki-Vote).
 */
#define SHORT_SEGMENT 8

/*
 * SpMV's gather: a vector x(v) read at the coordinates of the segment, where x is larger
 * than a core's L2 (GATHER_PREFETCH_BYTES, tested at run time), has the element of the
 * entry GATHER_AHEAD positions on prefetched, one per unrolled step (every fourth entry:
 * one was as fast as two and faster than four, the other entries' misses overlap).  In a
 * C model of the loop (2 threads, f32): uniform 1M x 1M at 10 a row, x 4 MB, 10.8-11.2 ->
 * 7.3-7.8 ms; R-MAT 2^20 14.1-14.6 -> 12.5-12.9; banded 1M 6.7 -> 6.2; x in L2 (uniform
 * 100k, x 400 KB) 0.31 -> 0.32, hence the gate.  NULL where there is no such operand.
 */
enum { GATHER_AHEAD = 32, GATHER_PREFETCH_BYTES = 1 << 20 };

/* Whether access ac is a dense vector x(v) (not broadcast, its stride known), read where a
 * segment over v has its coordinate: the gather of SpMV's row. */
static bool gathered_vector(const lb *L, const sc_lower_access *ac, sc_expr_var v)
{
    int32_t t = ac->operand;
    return !L->p->ops[t].sparse && ac->order == 1 && ac->var[0] == v &&
           !(t < 64 && L->p->bcast[t]) && L->vals[t] >= 0 && L->stride[t][0];
}

static const sc_ir_stmt *prefetch_gather(lb *L, const sc_lower_node *n, const iter *i0,
                                         sc_expr_var v, const sc_ir_expr *at)
{
    const sc_lower_problem *p = L->p;
    uint64_t present = sc_lower_node_accesses(n);
    sc_ir_var clen = L->clen[i0->operand][i0->level];
    for (int32_t a = 0; a < p->naccess && clen >= 0; a++) {
        const sc_lower_access *ac = &p->acc[a];
        int32_t t = ac->operand;
        if (!((present >> a) & 1) || !gathered_vector(L, ac, v))
            continue;
        const sc_ir_expr *c = sc_ir_load(B, L->crd[i0->operand][i0->level],
                                         entry_ahead(L, i0, at, GATHER_AHEAD));
        int64_t big = GATHER_PREFETCH_BYTES / val_bytes(L);
        return sc_ir_if(B, BIN(LE, I(big), V(L->ext[v])),
                        sc_ir_prefetch(B, L->vals[t], BIN(MUL, c, L->stride[t][0])), NULL);
    }
    return NULL;
}

/*
 * SpMV's short rows as one masked gather each (short_sums, in gathered_row: where the
 * CPU's gathers are fast): a segment of 1 to 4 float entries (a quarter vector) or up to
 * 8 (half) is summed as hsum(vals[pb..] * x[crd[pb..]]) over that many lanes: no loop,
 * so no exit mispredicted at each row's irregular length, and the row's gathers issued
 * at once.  In a C model on the AVX-512 Xeon whose gathers are fast (2 threads, ratio to
 * MKL's SpMV of the same run): usroads (rows of 1-4, x 516 KB) 1.13 -> 0.59,
 * email-Enron 1.21 -> 0.69, soc-Slashdot0902 1.07 -> 0.83.  Where the probe finds
 * gathers slow the rows stay scalar: on a Cascade Lake VM (2026-11-28, probe: slow) the
 * short rows' gathers, then applied wherever x held 64 KiB, took usroads from 1.00 to
 * 1.74 of torch.mv's time and email-Enron from 0.66 to 0.89 (R-MAT 2^17 0.95-0.99 ->
 * 1.05; soc-Slashdot0902 gained, 1.03-1.12 -> 0.79-0.89).  Gathers need 64-byte vectors
 * (AVX-512VL has the masked 128- and 256-bit forms) and 32-bit coordinates.
 */

/* n's values at the first count entries of the segment from pb as a vector of lanes
 * lanes, or NULL unless n is a product of the segment operand's values (once: bit 0 of
 * *has), dense vectors read at the segment's coordinate (bit 1) and finite literals: the
 * lanes past count are 0 in the operand's values, so in the product. */
static const sc_ir_expr *gathered(lb *L, const sc_lower_node *n, const st *S, const iter *i0,
                                  sc_expr_var v, const sc_ir_expr *pb, const sc_ir_expr *count,
                                  int32_t lanes, int *has)
{
    const sc_lower_problem *p = L->p;
    switch (n->kind) {
    case SC_LN_ACCESS: {
        const sc_lower_access *ac = &p->acc[n->access];
        int32_t t = ac->operand;
        if (p->ops[t].sparse) {
            if ((*has & 1) || t != i0->operand || i0->level != ac->order - 1 ||
                ac->lvar[i0->level] != v || S->nbound[n->access] != i0->level)
                return NULL;
            *has |= 1;
            return sc_ir_vload_n(B, L->vals[t], pb, count, lanes);
        }
        if (!gathered_vector(L, ac, v) || L->stride[t][0]->kind != SC_IR_E_INT ||
            L->stride[t][0]->ival != 1)
            return NULL;
        *has |= 2;
        return sc_ir_vgather_n(B, L->vals[t], L->crd[i0->operand][i0->level], pb, count, lanes);
    }
    case SC_LN_LIT:
        return isfinite(n->value) ? sc_ir_splat(B, literal(L, n), lanes) : NULL;
    case SC_LN_NEG: {
        const sc_ir_expr *x = gathered(L, n->a, S, i0, v, pb, count, lanes, has);
        return x ? sc_ir_neg(B, x) : NULL;
    }
    case SC_LN_MUL: {
        const sc_ir_expr *x = gathered(L, n->a, S, i0, v, pb, count, lanes, has);
        const sc_ir_expr *y = x ? gathered(L, n->b, S, i0, v, pb, count, lanes, has) : NULL;
        return y ? BIN(MUL, x, y) : NULL;
    }
    default:
        return NULL;
    }
}

/* The lanes of one gather (GATHER_LANES: 8 32-bit coordinates in a ymm register) for
 * the segment's values and coordinates, or 0 where gathers do not apply: vectors of 64
 * bytes (AVX-512VL has the masked forms) and 32-bit coordinates. */
enum { GATHER_LANES = 8 };

static int32_t gather_lanes(lb *L, const iter *i0)
{
    sc_ir_var crd = L->crd[i0->operand][i0->level];
    if (B->fn->vec_bytes != 64 || crd < 0 || B->fn->vars[crd].type != SC_IR_I32 ||
        !vector_values(L))
        return 0;
    return GATHER_LANES;
}

/* if (len != 0) { if (len <= g/2) acc += hsum(g/2 lanes) else acc += hsum(g lanes) }: the
 * segment from pb of len (at most g) entries as one masked gather, g = gather_lanes; NULL
 * where gathers or the gathered product do not apply. */
static const sc_ir_stmt *short_sums(lb *L, int32_t d, const sc_lower_node *n, const st *S,
                                    const iter *i0, sc_ir_var pb, const sc_ir_expr *len)
{
    sc_expr_var v = L->order[d];
    int32_t g = gather_lanes(L, i0);
    if (!g)
        return NULL;
    const sc_ir_stmt *sum[2];
    for (int32_t k = 0; k < 2; k++) {
        int has = 0;
        const sc_ir_expr *x = gathered(L, n, S, i0, v, V(pb), len, g >> k, &has);
        if (!x || has != 3)
            return NULL;
        sum[k] = sc_ir_assign(B, S->acc, true, sc_ir_hsum(B, x));
    }
    const sc_ir_stmt *some = sc_ir_if(B, BIN(LE, len, I(g / 2)), sum[1], sum[0]);
    return sc_ir_if(B, BIN(NE, len, I(0)), some, NULL);
}

/*
 * SpMV's row read through 8-lane gathers, where the target's gathers are fast
 * (sc_sched.gathers, measured by the driver: driver/probe.c): a row of up to 8 entries
 * as one masked gather of 4 or 8 lanes (short_sums, whatever x's size), a longer one 16
 * entries a step into two 8-lane accumulators (half vectors in f32, full in f64), the
 * last 1-15 entries as one or two masked gathers, and the accumulators' lanes summed
 * once.  In a C model at 2 threads on the AVX-512 Xeon where the probe first said fast
 * (2026-11-26), against four scalar accumulators, f32: bcsstk16 70 -> 37 us, bcsstk13
 * 25 -> 14, wiki-Vote 57 -> 31, email-Enron 315 -> 154, cryg2500 (rows of 5) 4.9 -> 4.3
 * (16-lane gathers level or slower: 40, 16, 31, 153, 5.7); f64: bcsstk16 51 -> 40,
 * email-Enron 284 -> 190, cryg2500 4.0 -> 3.9 (4-lane: 43, 231, 4.8).  Where x
 * outgrows L2 (GATHER_PREFETCH_BYTES) the row first prefetches x at three of the
 * coordinates 64, 68 and 72 entries ahead: the gathers' many micro-ops fill
 * the reorder buffer sooner than scalar loads, so fewer rows' misses overlap (a harness
 * around the generated kernel, 2 threads, uniform 1M x 1M with 10 a row, medians: scalar
 * loop with its prefetch 18.2 ms, gathers 21.5, gathers with these prefetches 18.4-18.7;
 * one prefetch a row 18.4-19.7 by distance, five 19.8-20.2, ten 23.9; R-MAT 2^20 18.6 /
 * 15.9 / 16.3, banded 1M 13.7 / 12.4 / 11.7).  NULL where short_sums does not apply.
 */
enum { GATHER_ROW_PREFETCHES = 3, GATHER_ROW_AHEAD = 64 - GATHER_AHEAD };

/*
 * A row of more than one vector of entries also requests its own crd and vals (each
 * line of a step's values: two for float64) ROW_STREAM_AHEAD entries (1-2 KiB) on, at
 * its start and at each step of 2 vectors: when A comes from DRAM (after another
 * library's call swept the caches) the hardware prefetcher, which stops at every 4 KiB
 * page, left these rows waiting on their entries; MKL's SpMV, warm slower than ours, was
 * 15-20 % faster there.  Alternating processes, 5 rounds, medians, 2 threads, µs after
 * a dense mv of a 256 MB matrix: bcsstk16 223 -> 184 (torch 185), wiki-Vote 175 -> 148
 * (144), rajat01 150 -> 134, email-Enron 348 -> 325, bcsstk13 153 -> 145; warm level
 * (p2p-Gnutella31, few rows this long, 106-107 -> 109-115).  The second line of float64
 * values: banded-1M f64 17.0 -> 13.6 ms (medians of four suite runs each).  Short rows
 * (one masked gather) request nothing: there a request a row made warm SpMVs up to 20 %
 * slower (see decisions.md).
 */
enum { ROW_STREAM_AHEAD = 256 };

static void stream_row(lb *L, const iter *i0, const sc_ir_expr *at, int32_t step, sc_ir_list *out)
{
    sc_ir_push(B, out, sc_ir_prefetch(B, L->crd[i0->operand][i0->level],
                                      entry_ahead(L, i0, at, ROW_STREAM_AHEAD)));
    /* every line of the step's values (two for float64) */
    for (int32_t k = 0; k < step; k += LINE_BYTES / val_bytes(L))
        sc_ir_push(B, out, sc_ir_prefetch(B, L->vals[i0->operand],
                                          entry_ahead(L, i0, at, ROW_STREAM_AHEAD + k)));
}

static const sc_ir_stmt *gathered_row(lb *L, int32_t d, const sc_lower_node *n, const st *S,
                                      const iter *i0, sc_ir_var pb)
{
    if (!L->s->gathers)
        return NULL;
    const sc_ir_expr *len = BIN(SUB, V(i0->e), V(pb));
    const sc_ir_stmt *some = short_sums(L, d, n, S, i0, pb, len);
    if (!some)
        return NULL;
    sc_expr_var v = L->order[d];
    int32_t h = gather_lanes(L, i0);
    sc_ir_list loc = {0}, body = {0};
    sc_ir_var acc[2];
    for (int32_t k = 0; k < 2; k++) {
        acc[k] = sc_ir_new_vector(B, "gacc", L->vt, h);
        sc_ir_push(B, &loc, sc_ir_decl(B, acc[k], sc_ir_splat(B, sc_ir_flt(B, 0.0, L->vt), h)));
    }
    sc_ir_var main = newv(L, "pmain", SC_IR_I64), pu = newv(L, "pu", SC_IR_I64);
    sc_ir_var pt = newv(L, "pt", SC_IR_I64);
    sc_ir_push(B, &loc, sc_ir_decl(B, main, BIN(ADD, V(pb), BIN(MUL, BIN(DIV, len, I(2 * h)), I(2 * h)))));
    stream_row(L, i0, V(pb), 2 * h, &loc);
    stream_row(L, i0, V(pu), 2 * h, &body);
    for (int32_t k = 0; k < 2; k++) {
        int has = 0;
        const sc_ir_expr *x = gathered(L, n, S, i0, v, k ? BIN(ADD, V(pu), I(h)) : V(pu), I(h), h, &has);
        if (!x || has != 3)
            return NULL;
        sc_ir_push(B, &body, sc_ir_assign(B, acc[k], true, x));
    }
    sc_ir_push(B, &loc, sc_ir_for(B, pu, V(pb), V(main), I(2 * h), SC_IR_SEQ, 0, sc_ir_list_block(B, &body)));
    int has = 0;
    const sc_ir_expr *rest = gathered(L, n, S, i0, v, V(pt),
                                      BIN(MIN, BIN(SUB, V(i0->e), V(pt)), I(h)), h, &has);
    if (!rest || has != 3)
        return NULL;
    sc_ir_push(B, &loc, sc_ir_for(B, pt, V(main), V(i0->e), I(h), SC_IR_SEQ, 0,
                                  sc_ir_assign(B, acc[0], true, rest)));
    sc_ir_push(B, &loc, sc_ir_assign(B, S->acc, true, sc_ir_hsum(B, BIN(ADD, V(acc[0]), V(acc[1])))));
    sc_ir_list row = {0};
    for (int32_t k = 0; k < GATHER_ROW_PREFETCHES; k++) {
        const sc_ir_stmt *pf = prefetch_gather(L, n, i0, v, BIN(ADD, V(pb), I(GATHER_ROW_AHEAD + 4 * k)));
        if (pf)
            sc_ir_push(B, &row, pf);
    }
    sc_ir_push(B, &row, sc_ir_if(B, BIN(LE, len, I(h)), some, sc_ir_list_block(B, &loc)));
    return sc_ir_list_block(B, &row);
}

static bool unrolled_segment(lb *L, int32_t d, const sc_lower_node *n, const st *S,
                             const iter *i0, sc_ir_list *res)
{
    bool vec = S->tvn == 1 && d == L->n - 2;
    if (L->mode != FILL || !n || S->tacc >= 0 ||
        !(vec || (d == L->n - 1 && S->acc >= 0 && S->tvn == 0)))
        return false;
    if (!vec && L->s->gathers) {
        sc_ir_var pb = newv(L, "pb", SC_IR_I64);
        const sc_ir_stmt *g = gathered_row(L, d, n, S, i0, pb);
        if (g) {
            sc_ir_push(B, res, sc_ir_decl(B, pb, i0->lo));
            sc_ir_push(B, res, g);
            return true;
        }
    }
    int32_t U = vec ? 2 : 4;
    sc_ir_list loc = {0}, *out = &loc;
    sc_ir_var part[4];
    part[0] = vec ? S->tv[0] : S->acc;
    for (int32_t u = 1; u < U; u++) {
        if (vec) {
            part[u] = sc_ir_new_vector(B, "acc", L->vt, S->vlanes);
            sc_ir_push(B, out, sc_ir_decl(B, part[u], sc_ir_splat(B, sc_ir_flt(B, 0.0, L->vt), S->vlanes)));
        } else {
            part[u] = newv(L, "acc", L->vt);
            sc_ir_push(B, out, sc_ir_decl(B, part[u], sc_ir_flt(B, 0.0, L->vt)));
        }
    }
    sc_ir_var lo = newv(L, "pb", SC_IR_I64), nmain = newv(L, "pmain", SC_IR_I64);
    sc_ir_push(B, res, sc_ir_decl(B, lo, i0->lo));
    const sc_ir_expr *len = BIN(SUB, V(i0->e), V(lo)), *main = BIN(MUL, BIN(DIV, len, I(U)), I(U));
    if (!vec)
        main = sc_ir_select(B, BIN(LT, len, I(SHORT_SEGMENT)), I(0), main);
    sc_ir_push(B, out, sc_ir_decl(B, nmain, BIN(ADD, V(lo), main)));
    sc_ir_var pu = newv(L, "pu", SC_IR_I64);
    sc_ir_list body = {0};
    const sc_ir_stmt *pf = vec ? NULL : prefetch_gather(L, n, i0, L->order[d], V(pu));
    if (pf)
        sc_ir_push(B, &body, pf);
    for (int32_t u = 0; u < U; u++) {
        st T = *S;
        if (vec)
            T.tv[0] = part[u];
        else
            T.acc = part[u];
        if (!entry_at(L, d, n, &T, i0, u ? BIN(ADD, V(pu), I(u)) : V(pu), &body))
            return false;
    }
    /* scalar sums: not for the C compiler to vectorize again (see sc_ir_scalar) */
    const sc_ir_stmt *unrolled = sc_ir_for(B, pu, V(lo), V(nmain), I(U), SC_IR_SEQ, 0, sc_ir_list_block(B, &body));
    sc_ir_push(B, out, vec ? unrolled : sc_ir_scalar(B, unrolled));
    const sc_ir_expr *sum = V(part[1]);
    for (int32_t u = 2; u < U; u++)
        sum = BIN(ADD, sum, V(part[u]));
    const sc_ir_stmt *rest = one_at_a_time(L, d, n, S, i0, V(nmain), NULL);
    if (!rest)
        return false;
    sc_ir_push(B, out, vec ? rest : sc_ir_scalar(B, rest));
    sc_ir_push(B, out, sc_ir_assign(B, part[0], true, sum));
    sc_ir_push(B, res, sc_ir_list_block(B, &loc));
    return true;
}

/*
 * Two rows of a scalar row sum at once (SpMV's rows i and i + 1; the pair body of the
 * balanced row loop): where both rows have at least JAM_MIN entries and the shorter
 * has at least 3/4 of the longer's, their segments run in one loop, two entries of each
 * row a step into two accumulators per row, then each row's rest one entry at a time;
 * otherwise each row runs as it would alone.  The loop takes rows in pairs only in a
 * thread's range whose rows average at least JAM_MIN entries (sc_ir_pairs): in ranges
 * of short rows the pair's tests and its larger body cost time for no jam (usroads in a
 * C model of the generated code, short rows gathered (short_sums): 0.70 of MKL's time
 * without the pair loop, 0.84 with it; testing the jam before each row instead, stepping
 * one row where it fails: 0.91, p2p-Gnutella31 1.91 against 1.20).  Two independent
 * rows in one loop keep more loads in flight and halve the loop exits (banded rows of
 * 27, 1 thread: 847-898 -> 760-791 us in a C model, MKL 768; FEM rows 4-7 %).  Only where the row variable v
 * (depth d) binds the dense first level of a single sparse operand whose compressed
 * second level is the innermost loop, and the output is dense: the next row's state is
 * this row's with the coordinate and that position one further; f32 only (the caller:
 * in f64 the jam was 5-10 % slower on FEM rows).  False where the pattern does not apply
 * (the caller then lowers one row).
 */
enum { JAM_MIN = 16 };

static bool paired_rows(lb *L, int32_t d, const sc_lower_node *known, const sc_lower_node *rest,
                        st *S, sc_ir_list *out)
{
    const sc_lower_problem *p = L->p;
    L->pairing = false; /* (the rows' own loops below lower as usual) */
    if (L->mode != FILL || p->out_sparse || d + 2 != L->n || !rest || S->tvn > 0 ||
        S->tacc >= 0 || S->seen_red || S->seen_sparse)
        return false;
    sc_expr_var v = L->order[d], v1 = L->order[d + 1];
    uint64_t present = sc_lower_node_accesses(rest) | (known ? sc_lower_node_accesses(known) : 0);
    int32_t a0 = -1;
    for (int32_t a = 0; a < p->naccess; a++) {
        if (!((present >> a) & 1) || !p->ops[p->acc[a].operand].sparse)
            continue;
        const sc_lower_access *ac = &p->acc[a];
        const sc_format *f = &p->ops[ac->operand].fmt;
        if (a0 >= 0 || ac->order != 2 || S->nbound[a] != 1 || ac->lvar[0] != v ||
            ac->lvar[1] != v1 || f->kind[0] != SC_LEVEL_DENSE ||
            f->kind[1] != SC_LEVEL_COMPRESSED || !f->unique[1] || S->val[a] >= 0 ||
            S->pres[a] || S->pend[a] || L->pos[ac->operand][1] < 0 ||
            (ac->operand < 64 && p->bcast[ac->operand]))
            return false;
        a0 = a;
    }
    if (a0 < 0)
        return false;
    sc_lower_lattice lat;
    sc_status stt = sc_lower_lattice_at(p, rest, v1, S->nbound, &lat, L->err);
    if (stt != SC_OK) {
        L->b.st = stt;
        return false;
    }
    if (lat.niters != 1 || lat.universe || lat.iters[0] != a0)
        return false;
    int32_t t = p->acc[a0].operand;
    st R[2] = {*S, *S};
    R[1].cv[v] = BIN(ADD, S->cv[v], I(1));
    R[1].ppos[a0] = BIN(ADD, S->ppos[a0], I(1));
    sc_ir_var acc[2], b[2], e[2];
    for (int32_t r = 0; r < 2; r++) {
        acc[r] = newv(L, "acc", L->vt);
        sc_ir_push(B, out, sc_ir_decl(B, acc[r], sc_ir_flt(B, 0.0, L->vt)));
        b[r] = newv(L, "pb", SC_IR_I64);
        e[r] = newv(L, "pe", SC_IR_I64);
        sc_ir_push(B, out, sc_ir_decl(B, b[r], sc_ir_load(B, L->pos[t][1], R[r].ppos[a0])));
        sc_ir_push(B, out, sc_ir_decl(B, e[r], sc_ir_load(B, L->pos[t][1], BIN(ADD, R[r].ppos[a0], I(1)))));
    }
    sc_ir_var m = newv(L, "m", SC_IR_I64), mx = newv(L, "mx", SC_IR_I64);
    const sc_ir_expr *len0 = BIN(SUB, V(e[0]), V(b[0])), *len1 = BIN(SUB, V(e[1]), V(b[1]));
    sc_ir_push(B, out, sc_ir_decl(B, m, BIN(MIN, len0, len1)));
    sc_ir_push(B, out, sc_ir_decl(B, mx, BIN(MAX, len0, len1)));
    const sc_ir_expr *jam = BIN(AND, BIN(LE, I(JAM_MIN), V(m)),
                                BIN(LE, BIN(MUL, I(3), V(mx)), BIN(MUL, I(4), V(m))));
    /* the jammed segments */
    sc_ir_list jb = {0}, body = {0};
    sc_ir_var part[2][2];
    for (int32_t r = 0; r < 2; r++) {
        part[r][0] = acc[r];
        part[r][1] = newv(L, "acc", L->vt);
        sc_ir_push(B, &jb, sc_ir_decl(B, part[r][1], sc_ir_flt(B, 0.0, L->vt)));
    }
    sc_ir_var mm = newv(L, "pmain", SC_IR_I64), k = newv(L, "k", SC_IR_I64);
    sc_ir_push(B, &jb, sc_ir_decl(B, mm, BIN(MUL, BIN(DIV, V(m), I(2)), I(2))));
    iter seg[2] = {{a0, 1, t, true, -1, e[0], -1, -1, NULL}, {a0, 1, t, true, -1, e[1], -1, -1, NULL}};
    for (int32_t u = 0; u < 2; u++)
        for (int32_t r = 0; r < 2; r++) {
            st T = R[r];
            T.acc = part[r][u];
            if (!entry_at(L, d + 1, rest, &T, &seg[r], BIN(ADD, V(b[r]), u ? BIN(ADD, V(k), I(u)) : V(k)),
                          &body))
                return false;
        }
    sc_ir_push(B, &jb, sc_ir_scalar(B, sc_ir_for(B, k, I(0), V(mm), I(2), SC_IR_SEQ, 0,
                                                 sc_ir_list_block(B, &body))));
    for (int32_t r = 0; r < 2; r++) {
        iter it = seg[r];
        it.p = newv(L, "p", SC_IR_I64);
        it.c = newv(L, vname(L, v1), SC_IR_I64);
        st T = R[r];
        T.acc = acc[r];
        const sc_ir_stmt *one = one_at_a_time(L, d + 1, rest, &T, &it, BIN(ADD, V(b[r]), V(mm)), NULL);
        if (!one)
            return false;
        sc_ir_push(B, &jb, sc_ir_scalar(B, one));
        sc_ir_push(B, &jb, sc_ir_assign(B, acc[r], true, V(part[r][1])));
    }
    /* each row alone */
    sc_ir_list alone = {0};
    for (int32_t r = 0; r < 2; r++) {
        st T = R[r];
        T.acc = acc[r];
        sc_ir_push(B, &alone, lower_at(L, d + 1, rest, &T));
    }
    sc_ir_push(B, out, sc_ir_if(B, jam, sc_ir_list_block(B, &jb), sc_ir_list_block(B, &alone)));
    for (int32_t r = 0; r < 2; r++)
        write_out(L, &R[r], out, known ? BIN(MUL, value(L, &R[r], known), V(acc[r])) : V(acc[r]));
    L->paired = L->b.st == SC_OK;
    return L->paired;
}

/*
 * A loop over one compressed segment (coordinate v at depth d = dlast) whose entries each
 * end in a dense dot product over the innermost variable (SDDMM: A(i,j) · Σ_k B(i,k)
 * C(j,k)): G entries at a time (GROUP, or the lane count where that is fewer), their
 * dot products in G vector accumulators (one loop over the reduction variable reading
 * the shared operand once per step for all of them), then one transpose-and-add tree of
 * FOLD steps gives all G lane sums in one vector, instead of a lane sum per entry; the
 * scalar rest of the reduction is added per lane and each entry is written with its
 * known factors as usual.  The segment's last entries (fewer than G) take the one-entry
 * path.
 */
enum { GROUP = 8 }; /* at most: a group is no larger than a vector's lane count */

/* The entries of a group: GROUP, or a vector's lane count where that is fewer. */
static int32_t group_size(lb *L)
{
    int32_t W = sc_ir_vec_lanes(B->fn, L->vt);
    return W < GROUP ? W : GROUP;
}

/*
 * The lane sums of grouped_dots' G accumulators of W lanes: pairs folded to blocks of W/2
 * lanes, then W/4, ...; once one vector remains it is folded with itself, the last such
 * step (w = 1) with the fold that puts the lane pairs' sums in order (w = 0).  who[l]: the
 * accumulator whose sum lane l of the last vector holds.  With level (the accumulators),
 * each step is declared in body as a variable (so the text stays linear) and the last is
 * returned; without, only who is worked out (else who_out may be NULL).
 */
static sc_ir_var fold_tree(lb *L, int32_t G, const sc_ir_expr **level, sc_ir_list *body,
                           int8_t *who_out)
{
    int32_t W = sc_ir_vec_lanes(B->fn, L->vt), cnt = G;
    sc_ir_var sums = -1;
    int8_t who[GROUP][SC_IR_VEC_BYTES / 4], nw[GROUP][SC_IR_VEC_BYTES / 4];
    for (int32_t g = 0; g < G; g++)
        for (int32_t l = 0; l < W; l++)
            who[g][l] = (int8_t)g;
    for (int32_t w = W / 2; w >= 1; w /= 2) {
        int32_t half = cnt > 1 ? cnt / 2 : 1, fw = cnt == 1 && w == 1 ? 0 : w;
        memset(nw, -1, sizeof nw);
        for (int32_t g = 0; g < half; g++) {
            int32_t x = cnt > 1 ? 2 * g : 0, y = cnt > 1 ? 2 * g + 1 : 0;
            if (level) {
                sums = sc_ir_new_vector(B, "fold", L->vt, W);
                sc_ir_push(B, body, sc_ir_decl(B, sums, sc_ir_fold(B, level[x], level[y], fw)));
                level[g] = V(sums);
            }
            for (int32_t l = 0; l < W; l++) {
                int32_t src = sc_ir_fold_src(B->fn, L->vt, fw, 0, l);
                nw[g][l] = src < W ? who[x][src] : who[y][src - W];
            }
        }
        memcpy(who, nw, sizeof who);
        cnt = half;
    }
    if (who_out)
        memcpy(who_out, who[0], (size_t)W);
    return sums;
}

/* A group of grouped_dots: its entries' states, iterators and accumulators (entry g's
 * is acc[slot[g]]), the reduction's factors, the entry's and the reduction's variables. */
typedef struct group {
    const st *E;
    const iter *t;
    const sc_ir_var *acc;
    const int8_t *slot;
    const sc_lower_node *rest;
    sc_expr_var v, kv;
    int32_t G, W;
} group;

/* One vector step of a group's reduction at k (count: NULL, or the lanes of a last partial
 * vector, loaded masked), each entry's product added into its accumulator. */
static void group_step(lb *L, const group *g, const sc_ir_expr *k, const sc_ir_expr *count,
                       sc_ir_list *out)
{
    for (int32_t e = 0; e < g->G; e++) {
        st T = g->E[e];
        T.vec = true;
        T.vtile = g->kv;
        T.vlanes = g->W;
        T.vcount = count;
        T.cv[g->kv] = k;
        T.cv[g->v] = V(g->t[e].c);
        sc_ir_push(B, out, sc_ir_assign(B, g->acc[g->slot[e]], true, value(L, &T, g->rest)));
    }
}

static bool grouped_dots(lb *L, int32_t d, const sc_lower_node *n, const st *S,
                         const iter *i0, sc_ir_list *res, const rowcur *rc)
{
    const sc_lower_problem *p = L->p;
    if (L->mode != FILL || !n || d != L->dlast || d != L->n - 2 || S->acc >= 0 ||
        S->tacc >= 0 || S->tvn > 0 || S->dot || (p->out_sparse && L->q >= 0))
        return false;
    sc_expr_var v = L->order[d], kv = L->order[d + 1];
    if (L->out_level_of[kv] >= 0 || sparse_iterates(L, kv))
        return false;
    /* the split after_bind makes once the entry's own access is bound */
    st T = rc ? row_state(L, rc, V(rc->r), -1) : *S;
    int32_t a0 = i0->access;
    bool loads = ++T.nbound[a0] == p->acc[a0].order && T.val[a0] < 0;
    if (loads)
        T.val[a0] = 0; /* a stand-in: only bound_at looks at it */
    const sc_lower_node *known = NULL, *rest = NULL;
    split_factors(L, n, &T, d, &known, &rest);
    if (!known || !rest || !vector_dot(L, kv, rest))
        return false;
    uint64_t present = sc_lower_node_accesses(rest);
    for (int32_t a = 0; a < p->naccess; a++)
        if (((present >> a) & 1) && p->ops[p->acc[a].operand].sparse)
            return false;
    int32_t W = sc_ir_vec_lanes(B->fn, L->vt), G = group_size(L);
    /* the group's values written as one vector (its entries' positions follow one
     * another, and so do their outputs'): where the only known factor is the entry's own
     * value, loaded at its position, and the write is the value alone, at the next
     * position of an output that shares the operand's index arrays */
    int32_t ko = L->out_level_of[v], leaf = L->m - 1;
    bool vec_store = loads && p->out_sparse && L->share && L->whole < 0 && !L->flat &&
                     ko == leaf && ko >= L->D && i0->unique && !T.pres[a0] &&
                     known->kind == SC_LN_ACCESS && known->access == a0;
    /* which accumulator each entry takes: the one whose sum the fold tree leaves in lane g
     * for entry g, so the sums come out in the entries' order */
    int8_t slot[SC_IR_VEC_BYTES / 4];
    fold_tree(L, G, NULL, NULL, slot);
    uint32_t taken = 0;
    for (int32_t g = 0; g < G; g++)
        taken |= slot[g] >= 0 && slot[g] < G ? 1u << slot[g] : 0;
    if (taken != (1u << G) - 1) {
        sc_ir_fail(B, SC_INTERNAL, "the fold tree's first %d lanes do not hold the group's sums",
                   (int)G);
        return false;
    }
    sc_ir_list loc = {0}, *out = &loc;
    const sc_ir_expr *N = V(L->ext[kv]);
    sc_ir_var lo = newv(L, "pb", SC_IR_I64), nmain = newv(L, "pmain", SC_IR_I64);
    sc_ir_var n1 = newv(L, "N1", SC_IR_I64);
    sc_ir_push(B, out, sc_ir_decl(B, lo, i0->lo));
    sc_ir_var pu = newv(L, "pu", SC_IR_I64);
    sc_ir_list body = {0};
    iter t[GROUP];
    sc_ir_var acc[GROUP];
    st E[GROUP]; /* each entry's state: S, or (rc) that of its own row */
    for (int32_t g = 0; g < G; g++) {
        t[g] = *i0;
        t[g].p = newv(L, "p", SC_IR_I64);
        t[g].c = newv(L, vname(L, v), SC_IR_I64);
        sc_ir_push(B, &body, sc_ir_decl(B, t[g].p, g ? BIN(ADD, V(pu), I(g)) : V(pu)));
        sc_ir_push(B, &body, sc_ir_decl(B, t[g].c, sc_ir_load(B, L->crd[t[g].operand][t[g].level], V(t[g].p))));
        row_prefetch(L, S, &t[g], V(t[g].p), &body);
        E[g] = *S;
        if (rc) {
            /* each entry's row searched from the group's first row (no chain from entry
             * to entry, no branch per row); the cursor moves to the last entry's row */
            sc_ir_var row = newv(L, "row", SC_IR_I64), nv = newv(L, "n", SC_IR_I64);
            sc_ir_push(B, &body, sc_ir_decl(B, row, sc_ir_rowof(B, rc->pos, V(rc->r), V(t[g].p),
                                                                V(rc->end))));
            sc_ir_push(B, &body, sc_ir_decl(B, nv, V(t[g].p)));
            if (g == G - 1)
                sc_ir_push(B, &body, sc_ir_assign(B, rc->r, false, V(row)));
            E[g] = row_state(L, rc, V(row), nv);
        }
    }
    for (int32_t g = 0; g < G; g++) {
        acc[g] = sc_ir_new_vector(B, "vacc", L->vt, W);
        sc_ir_push(B, &body, sc_ir_decl(B, acc[g], sc_ir_splat(B, sc_ir_flt(B, 0.0, L->vt), W)));
    }
    const group gs = {E, t, acc, slot, rest, v, kv, G, W};
    /* the vector steps of the reduction, all entries of the group in each; with the
     * vector store, the last partial vector too, masked, into the same accumulators */
    sc_ir_var k = newv(L, vname(L, kv), SC_IR_I64);
    sc_ir_list kb = {0};
    group_step(L, &gs, V(k), NULL, &kb);
    sc_ir_push(B, &body, sc_ir_for(B, k, I(0), V(n1), I(W), SC_IR_SEQ, 0, sc_ir_list_block(B, &kb)));
    if (vec_store) {
        sc_ir_list mb = {0};
        group_step(L, &gs, V(n1), BIN(SUB, N, V(n1)), &mb);
        sc_ir_push(B, &body, sc_ir_if(B, BIN(LT, V(n1), N), sc_ir_list_block(B, &mb), NULL));
    }
    const sc_ir_expr *level[GROUP];
    for (int32_t g = 0; g < G; g++)
        level[g] = V(acc[g]);
    sc_ir_var sums = fold_tree(L, G, level, &body, NULL);
    if (vec_store) {
        /* lane g holds entry g's sum: times the G values from the first entry's position,
         * stored at the first entry's output position */
        sc_ir_var vals = L->vals[i0->operand], at = E[0].cnt[leaf];
        const sc_ir_expr *first = V(t[0].p);
        const sc_ir_expr *prod = BIN(MUL, G < W ? sc_ir_vload_n(B, vals, first, I(G), W)
                                                : sc_ir_vload(B, vals, first, W), V(sums));
        sc_ir_push(B, &body, G < W ? sc_ir_vstore_n(B, L->ovals, V(at), false, prod, I(G))
                                   : sc_ir_vstore(B, L->ovals, V(at), false, prod));
        if (!rc) /* the row's counter (each entry of a run of rows has its own) */
            sc_ir_push(B, &body, sc_ir_assign(B, at, true, I(G)));
    }
    sc_ir_var dot[GROUP];
    sc_ir_list tail = {0};
    for (int32_t g = 0; g < G && !vec_store; g++) {
        T = E[g];
        dot[g] = newv(L, "dot", L->vt); /* in lane g: the plan above */
        sc_ir_push(B, &body, sc_ir_decl(B, dot[g], sc_ir_lane(B, V(sums), g)));
        sc_ir_var k2 = newv(L, vname(L, kv), SC_IR_I64);
        T.cv[v] = V(t[g].c);
        T.cv[kv] = V(k2);
        sc_ir_push(B, &tail, sc_ir_for(B, k2, V(n1), N, I(1), SC_IR_SEQ, 0,
                                       sc_ir_assign(B, dot[g], true, value(L, &T, rest))));
    }
    if (!vec_store)
        sc_ir_push(B, &body, sc_ir_if(B, BIN(LT, V(n1), N), sc_ir_list_block(B, &tail), NULL));
    for (int32_t g = 0; g < G && !vec_store; g++) {
        T = E[g];
        T.dot = V(dot[g]);
        const sc_ir_stmt *cb = case_body(L, d, n, &T, &t[g], 1, 1, V(t[g].c), false);
        if (!cb)
            return false;
        sc_ir_push(B, &body, cb);
    }
    /* the last entries one at a time; a segment shorter than a group runs only that
     * loop, in a branch of its own (its registers not shared with the group's code) */
    const sc_ir_stmt *one[2];
    for (int32_t r = 0; r < 2; r++)
        if (!(one[r] = one_at_a_time(L, d, n, S, i0, r ? V(nmain) : V(lo), rc)))
            return false;
    sc_ir_list grouped = {0};
    sc_ir_push(B, &grouped, sc_ir_decl(B, nmain, BIN(ADD, V(lo), BIN(MUL, BIN(DIV, BIN(SUB, V(i0->e), V(lo)), I(G)), I(G)))));
    sc_ir_push(B, &grouped, sc_ir_decl(B, n1, BIN(MUL, BIN(DIV, N, I(W)), I(W))));
    sc_ir_push(B, &grouped, sc_ir_for(B, pu, V(lo), V(nmain), I(G), SC_IR_SEQ, 0, sc_ir_list_block(B, &body)));
    sc_ir_push(B, &grouped, one[1]);
    sc_ir_push(B, out, sc_ir_if(B, BIN(LE, I(G), BIN(SUB, V(i0->e), V(lo))), sc_ir_list_block(B, &grouped), one[0]));
    sc_ir_push(B, res, sc_ir_list_block(B, &loc));
    return true;
}

static int32_t pattern_operand(const lb *L);

/* grouped_dots over a run of short rows (a segment_fn; arg: run_arg). */
typedef struct run_arg {
    const sc_lower_node *n;
    const st *S;
    const rowcur *rc;
} run_arg;

static bool run_groups(lb *L, const iter *i0, const void *arg, sc_ir_list *out)
{
    const run_arg *g = arg;
    return grouped_dots(L, 1, g->n, g->S, i0, out, g->rc);
}

/*
 * The body of a run of short rows cvar .. re - 1 of a balanced row loop (sc_ir_runs):
 * their entries as one segment, pos[cvar] .. pos[re], in groups of grouped_dots that
 * cross row boundaries, each entry's row searched from the group's first row (the
 * cursor; sc_ir_rowof), the last entries' rows found by the stepping cursor.  Rows
 * shorter than a group otherwise take the one-entry path, a lane sum per entry behind
 * each row's mispredicted exit (2-4x the time per entry of long rows).  Applies where
 * the row loop's grouped path applies (SDDMM: order i, j, k; A(i,j) csr-like, the
 * reduction a vector dot product) and the output shares A's pattern, so that an entry's
 * output position is its own.  NULL where it does not apply; *min: the row length below
 * which rows take it.
 */
static const sc_ir_stmt *short_rows(lb *L, const sc_lower_node *n, const st *S, sc_ir_var cvar,
                                    sc_ir_var re, sc_ir_var bal, int32_t *min)
{
    const sc_lower_problem *p = L->p;
    if (L->mode != FILL || !L->share || L->n != 3 || L->dlast != 1 || L->q >= 0 || !n ||
        !vector_values(L))
        return NULL;
    int32_t t = pattern_operand(L), a0 = -1;
    if (t < 0 || L->pos[t][1] != bal)
        return NULL;
    for (int32_t a = 0; a < p->naccess; a++)
        if (p->acc[a].operand == t)
            a0 = a;
    const sc_format *f = &p->ops[t].fmt;
    if (a0 < 0 || p->acc[a0].order != 2 || p->acc[a0].lvar[0] != L->order[0] ||
        p->acc[a0].lvar[1] != L->order[1] || f->kind[0] != SC_LEVEL_DENSE ||
        f->kind[1] != SC_LEVEL_COMPRESSED || !f->unique[1] || S->nbound[a0] != 0)
        return NULL;
    rowcur rc = {S, a0, L->pos[t][1], newv(L, "r", SC_IR_I64), re};
    sc_ir_list out = {0};
    sc_ir_push(B, &out, sc_ir_decl(B, rc.r, V(cvar)));
    char pn[64], en[64];
    snprintf(pn, sizeof pn, "%s1_p", oname(L, t));
    snprintf(en, sizeof en, "%s1_end", oname(L, t));
    iter it = {a0, 1, t, true, newv(L, pn, SC_IR_I64), newv(L, en, SC_IR_I64),
               newv(L, vname(L, L->order[1]), SC_IR_I64), -1, sc_ir_load(B, rc.pos, V(cvar))};
    sc_ir_push(B, &out, sc_ir_decl(B, it.e, sc_ir_load(B, rc.pos, V(re))));
    /* the run's rows prefetched as a row's are (lower_at) */
    run_arg g = {n, S, &rc};
    if (!row_prefetched(L, 1, n, S, &it, true, run_groups, &g, &out))
        return NULL;
    *min = group_size(L);
    return sc_ir_list_block(B, &out);
}

/* Whether access ac reads a sparse operand's rows at v: a dense first level over v (not
 * broadcast) and a compressed second one with its pos array. */
static bool rows_at(const lb *L, const sc_lower_access *ac, sc_expr_var v)
{
    const sc_lower_problem *p = L->p;
    int32_t t = ac->operand;
    const sc_format *f = &p->ops[t].fmt;
    return p->ops[t].sparse && f->order >= 2 && ac->lvar[0] == v && f->kind[0] == SC_LEVEL_DENSE &&
           f->kind[1] == SC_LEVEL_COMPRESSED && !(t < 64 && (p->bcast[t] >> f->lvl2dim[0] & 1u)) &&
           L->pos[t][1] >= 0;
}

/* The pos array that weighs the rows of a parallel dense loop over v: that of the first
 * sparse operand whose first level is dense over v (not broadcast) and whose second is
 * compressed, so pos[v]..pos[v + 1] is row v's segment (csr-like); -1 if none. */
static sc_ir_var balance_pos(const lb *L, sc_expr_var v)
{
    const sc_lower_problem *p = L->p;
    for (int32_t a = 0; a < p->naccess; a++)
        if (rows_at(L, &p->acc[a], v))
            return L->pos[p->acc[a].operand][1];
    return -1;
}

/*
 * Software prefetch in a loop over one compressed segment (coordinate v, iterator i0)
 * whose body locates a dense first level of another sparse operand at v and walks its
 * compressed second level (a row of B per nonzero of A in SpGEMM): the row
 * PREFETCH_AHEAD entries ahead (its crd and, in the fill, its vals) and the pos entry
 * twice as far ahead are requested, so the random rows' latencies overlap.  The entries
 * ahead run on into the next segments (the rows a thread takes next: short rows of A
 * get their B rows requested too); indices stay within the level's entries; a row start
 * may be one past the end of crd (never accessed).
 */
enum { PREFETCH_AHEAD = 4 };

/* A one-pass sparse output (SpGEMM) runs its rows on all threads only when their
 * multiply counts add up to this many: ~0.1 ms of work on one thread (graph rows cost
 * 3-10 ns a product in mispredicted branches), well above what waking the others costs
 * (cryg2500, 61 k products: 0.27-0.31 ms on one thread, 0.19-0.28 on two). */
enum { SPGEMM_PAR_WORK = 1 << 15 };

static void prefetch_rows(lb *L, const sc_lower_node *n, const st *S, sc_expr_var v,
                          const iter *i0, sc_ir_list *out)
{
    const sc_lower_problem *p = L->p;
    if (L->mode == BOUND)
        return;
    uint64_t present = n ? sc_lower_node_accesses(n) : 0;
    for (int32_t a = 0; a < p->naccess; a++) {
        const sc_lower_access *ac = &p->acc[a];
        int32_t t = ac->operand;
        const sc_format *f = &p->ops[t].fmt;
        if (!((present >> a) & 1) || a == i0->access || !p->ops[t].sparse || S->nbound[a] != 0 ||
            ac->order < 2 || ac->lvar[0] != v || f->kind[0] != SC_LEVEL_DENSE ||
            f->kind[1] != SC_LEVEL_COMPRESSED || L->pos[t][1] < 0 || L->crd[t][1] < 0 ||
            (t < 64 && p->bcast[t]))
            continue;
        sc_ir_var crd = L->crd[i0->operand][i0->level];
        const sc_ir_expr *last = BIN(SUB, BIN(MAX, V(i0->e), V(L->clen[i0->operand][i0->level])), I(1));
        sc_ir_var c1 = newv(L, "pf", SC_IR_I64), r1 = newv(L, "pf", SC_IR_I64);
        sc_ir_push(B, out, sc_ir_decl(B, c1, sc_ir_load(B, crd, BIN(MIN, BIN(ADD, V(i0->p), I(PREFETCH_AHEAD)), last))));
        sc_ir_push(B, out, sc_ir_decl(B, r1, sc_ir_load(B, L->pos[t][1], V(c1))));
        sc_ir_push(B, out, sc_ir_prefetch(B, L->crd[t][1], V(r1)));
        if (L->mode == FILL)
            sc_ir_push(B, out, sc_ir_prefetch(B, L->vals[t], V(r1)));
        sc_ir_push(B, out, sc_ir_prefetch(B, L->pos[t][1],
                                          sc_ir_load(B, crd, BIN(MIN, BIN(ADD, V(i0->p), I(2 * PREFETCH_AHEAD)), last))));
        return;
    }
}

/* Whether v is the index of a compressed or singleton level of some sparse operand. */
static bool sparse_level(const lb *L, sc_expr_var v)
{
    const sc_lower_problem *p = L->p;
    for (int32_t a = 0; a < p->naccess; a++) {
        const sc_lower_access *ac = &p->acc[a];
        const sc_format *f = &p->ops[ac->operand].fmt;
        if (p->ops[ac->operand].sparse)
            for (int32_t k = 0; k < f->order; k++)
                if (ac->lvar[k] == v && f->kind[k] != SC_LEVEL_DENSE)
                    return true;
    }
    return false;
}

/* The product of the extents of the variables deeper than depth d for which skip is
 * false; NULL when there are none. */
static const sc_ir_expr *extents_inside(lb *L, int32_t d, bool (*skip)(const lb *, sc_expr_var))
{
    const sc_ir_expr *w = NULL;
    for (int32_t e = d + 1; e < L->n; e++) {
        sc_expr_var v = L->order[e];
        if (!skip(L, v))
            w = w ? BIN(MUL, w, V(L->ext[v])) : V(L->ext[v]);
    }
    return w;
}

/* The work per stored entry of a loop at depth d: the product of the extents of the
 * deeper variables no sparse operand iterates (SpMM's columns, SDDMM's dot product);
 * NULL when there are none. */
static const sc_ir_expr *inner_work(lb *L, int32_t d)
{
    return extents_inside(L, d, sparse_iterates);
}

/* The iterations inside one of loop d that no compressed or singleton level drives: the
 * product of the extents of the loops inside it over dense levels and dense operands
 * (a lower bound of its work, for sc_ir_for_weighed); NULL where there are none. */
static const sc_ir_expr *dense_work(lb *L, int32_t d)
{
    return extents_inside(L, d, sparse_level);
}

/* The span pass's step at a row's last output variable v (gus_row): widen [span_lo,
 * span_hi] by the coordinates the loop here would visit — the first and last of one
 * segment of a compressed level (levels are ordered), else all of v's extent. */
static void span_step(lb *L, const iter *it, int32_t nit, bool universe, sc_expr_var v,
                      sc_ir_list *out)
{
    sc_ir_var lo = L->span_lo, hi = L->span_hi;
    const iter *i0 = &it[0];
    if (nit == 1 && !universe && i0->unique &&
        L->p->ops[i0->operand].fmt.kind[i0->level] == SC_LEVEL_COMPRESSED &&
        L->crd[i0->operand][i0->level] >= 0) {
        sc_ir_var crd = L->crd[i0->operand][i0->level], b = newv(L, "b", SC_IR_I64);
        sc_ir_list t = {0};
        sc_ir_push(B, out, sc_ir_decl(B, b, i0->lo));
        const sc_ir_expr *first = sc_ir_load(B, crd, V(b));
        const sc_ir_expr *last = sc_ir_load(B, crd, BIN(SUB, V(i0->e), I(1)));
        sc_ir_push(B, &t, sc_ir_assign(B, lo, false, BIN(MIN, V(lo), first)));
        sc_ir_push(B, &t, sc_ir_assign(B, hi, false, BIN(MAX, V(hi), last)));
        sc_ir_push(B, out, sc_ir_if(B, BIN(LT, V(b), V(i0->e)), sc_ir_list_block(B, &t), NULL));
        return;
    }
    sc_ir_push(B, out, sc_ir_assign(B, lo, false, I(0)));
    sc_ir_push(B, out, sc_ir_assign(B, hi, false, BIN(SUB, V(L->ext[v]), I(1))));
}

/* What segment needs besides its iterator. */
typedef struct segment_arg {
    int32_t d;
    const sc_lower_node *n;
    const st *S;
    sc_ir_par par;
    int32_t chunk;
} segment_arg;

/* The loop over the one compressed segment of iterator i0 (unique, no universe) at depth
 * d, into out (a segment_fn): its entries in groups (grouped_dots), unrolled
 * (unrolled_segment) or one at a time. */
static bool segment(lb *L, const iter *i0, const void *arg, sc_ir_list *out)
{
    const segment_arg *g = arg;
    int32_t d = g->d;
    const sc_lower_node *n = g->n;
    const st *S = g->S;
    if (g->par == SC_IR_SEQ && (grouped_dots(L, d, n, S, i0, out, NULL) || unrolled_segment(L, d, n, S, i0, out)))
        return true;
    sc_ir_list body = {0};
    sc_ir_push(B, &body, sc_ir_decl(B, i0->c, sc_ir_load(B, L->crd[i0->operand][i0->level], V(i0->p))));
    row_prefetch(L, S, i0, V(i0->p), &body);
    prefetch_rows(L, n, S, L->order[d], i0, &body);
    const sc_ir_stmt *cb = case_body(L, d, n, S, i0, 1, 1, V(i0->c), false);
    if (!cb)
        return true; /* nothing to push: the builder has failed */
    sc_ir_push(B, &body, cb);
    const sc_ir_stmt *bs = sc_ir_list_block(B, &body);
    if (g->par == SC_IR_OMP_FOR && L->ws_ok >= 0)
        bs = sc_ir_if(B, V(L->ws_ok), bs, NULL);
    /* a whole-pattern output's compressed first level (dcsr, dcsc, csf) whose entries
     * own segments of a compressed second level: one contiguous range of entries per
     * thread, balanced by those segments' lengths, as a csr row loop is (omp's dynamic
     * chunks of 64 entries cost an atomic each: usroads, rows of 2.6, SDDMM K = 16
     * took 1.45x csr's time) */
    int32_t t = i0->operand, k = i0->level + 1;
    bool below = k < L->p->ops[t].fmt.order && L->pos[t][k] >= 0;
    sc_ir_var bal = g->par != SC_IR_SEQ && d == 0 && L->whole >= 0 && below ? L->pos[t][k] : -1;
    if (bal >= 0) {
        sc_ir_push(B, out, sc_ir_for_balanced(B, i0->p, i0->lo, V(i0->e), g->par, bal,
                                              inner_work(L, d), bs));
    } else if (g->par == SC_IR_PAR_FOR && d == 0 && below) {
        /* under a dense output: dynamic chunks (balanced ranges cost dcsr SpMM K = 64
         * 7-15 %), weighed by the entries' average segment so that a few heavy ones (a
         * csf batch's matrices) are shared too */
        sc_ir_var pos = L->pos[t][k];
        const sc_ir_expr *n_it = BIN(SUB, V(i0->e), i0->lo);
        const sc_ir_expr *avg = BIN(ADD, BIN(DIV, BIN(SUB, sc_ir_load(B, pos, V(i0->e)),
                                                       sc_ir_load(B, pos, i0->lo)),
                                             sc_ir_select(B, BIN(LT, n_it, I(1)), I(1), n_it)),
                                    I(1));
        const sc_ir_expr *w = dense_work(L, d);
        sc_ir_push(B, out, sc_ir_for_weighed(B, i0->p, i0->lo, V(i0->e), g->chunk,
                                             w ? BIN(MUL, avg, w) : avg, bs));
    } else {
        /* span_bound's probe: the first entry, then the last (a step of the distance) */
        const sc_ir_expr *step = L->span_probe == d
            ? BIN(MAX, I(1), BIN(SUB, BIN(SUB, V(i0->e), I(1)), i0->lo)) : I(1);
        sc_ir_push(B, out, sc_ir_for(B, i0->p, i0->lo, V(i0->e), step, g->par, g->chunk, bs));
    }
    return true;
}

/*
 * The rows of a balanced loop whose output shares a sparse operand's pattern (SDDMM)
 * read the entries of the sparse operands and write the output's values front to back.
 * Each row (or run of short rows) first requests, in each of those arrays, the entry
 * STREAM_AHEAD past its own first one, when that entry exists: 4-8 KiB on, the next
 * page, whose address translation and first lines are then on their way before the rows
 * reach it (the hardware prefetcher stops at 4 KiB page boundaries and starts again only
 * after the first misses in a page).  This pays when the arrays come from DRAM, as after
 * another library's call swept the caches.  Not in every SpMV or SpMM row: there a
 * request a row made short rows slower when warm (SpMV's longer rows have their own,
 * stream_row; see decisions.md).
 */
enum { STREAM_AHEAD = 1024 };

static const sc_ir_stmt *streamed(lb *L, sc_expr_var v, const sc_ir_expr *row,
                                  const sc_ir_stmt *body)
{
    const sc_lower_problem *p = L->p;
    int32_t shared = L->share && L->mode != BOUND && L->ovals >= 0 ? pattern_operand(L) : -1;
    if (shared < 0 || !body)
        return body;
    sc_ir_list out = {0};
    uint64_t done = 0;
    for (int32_t a = 0; a < p->naccess; a++) {
        int32_t t = p->acc[a].operand;
        if (t >= 64 || (done >> t & 1) || !rows_at(L, &p->acc[a], v) || L->crd[t][1] < 0)
            continue;
        done |= 1ull << t;
        const sc_ir_expr *at = BIN(ADD, sc_ir_load(B, L->pos[t][1], row), I(STREAM_AHEAD));
        sc_ir_list pf = {0};
        sc_ir_push(B, &pf, sc_ir_prefetch(B, L->crd[t][1], at));
        sc_ir_push(B, &pf, sc_ir_prefetch(B, L->vals[t], at));
        if (t == shared)
            sc_ir_push(B, &pf, sc_ir_prefetch_write(B, L->ovals, at));
        sc_ir_push(B, &out, sc_ir_if(B, BIN(LT, at, V(L->clen[t][1])), sc_ir_list_block(B, &pf), NULL));
    }
    if (!out.n)
        return body;
    sc_ir_push(B, &out, body);
    return sc_ir_list_block(B, &out);
}

static const sc_ir_stmt *lower_at(lb *L, int32_t d, const sc_lower_node *n, const st *S)
{
    if (L->b.st != SC_OK)
        return NULL;
    if (d == L->n) {
        sc_ir_list out = {0};
        leaf(L, S, n, &out);
        return sc_ir_list_block(B, &out);
    }
    const sc_lower_problem *p = L->p;
    sc_expr_var v = L->order[d];
    sc_lower_lattice lat;
    sc_status stt = sc_lower_lattice_at(p, n, v, S->nbound, &lat, L->err);
    if (stt != SC_OK) {
        L->b.st = stt;
        return NULL;
    }
    iter it[SC_LOWER_MAX_ITERS];
    memset(it, 0, sizeof it);
    sc_ir_list out = {0};
    int32_t nit = lat.niters;
    for (int32_t i = 0; i < nit; i++) {
        int32_t a = lat.iters[i];
        const sc_lower_access *ac = &p->acc[a];
        int32_t k = S->nbound[a], t = ac->operand;
        const sc_format *f = &p->ops[t].fmt;
        /* the last level of a whole-pattern output's operand (COO's column level, a
         * 1-D coo's one level): each position is an entry of its own, duplicates too,
         * since the output's value is linear in the operand's (a product with it the
         * one sparse factor): duplicates' values add up as the operand's do, without a
         * run loop, and the level's segment is a plain one (segment: grouped dots,
         * tiles) */
        bool own = a == L->whole && k == ac->order - 1;
        it[i] = (iter){a, k, t, f->unique[k] != 0 || own, -1, -1, -1, -1, NULL};
        const sc_ir_expr *lo, *hi;
        if (f->kind[k] == SC_LEVEL_COMPRESSED) {
            const sc_ir_expr *pp = k == 0 ? I(0) : S->ppos[a];
            lo = sc_ir_load(B, L->pos[t][k], pp);
            hi = sc_ir_load(B, L->pos[t][k], BIN(ADD, pp, I(1)));
        } else {
            lo = S->ppos[a];
            hi = S->pend[a] ? S->pend[a] : BIN(ADD, S->ppos[a], I(1));
        }
        if (S->pres[a]) {
            lo = sc_ir_select(B, S->pres[a], lo, I(0));
            hi = sc_ir_select(B, S->pres[a], hi, I(0));
        }
        it[i].lo = lo;
        char nm[64];
        snprintf(nm, sizeof nm, "%s%d_p", oname(L, t), (int)k);
        it[i].p = newv(L, nm, SC_IR_I64);
        snprintf(nm, sizeof nm, "%s%d_end", oname(L, t), (int)k);
        it[i].e = newv(L, nm, SC_IR_I64);
        it[i].c = newv(L, vname(L, v), SC_IR_I64);
        if (!it[i].unique) {
            snprintf(nm, sizeof nm, "%s%d_run", oname(L, t), (int)k);
            it[i].q = newv(L, nm, SC_IR_I64);
        }
        if (!(nit == 1 && !lat.universe && it[i].unique))
            sc_ir_push(B, &out, sc_ir_decl(B, it[i].p, lo));
        sc_ir_push(B, &out, sc_ir_decl(B, it[i].e, hi));
    }
    if (L->mode == BOUND && L->m > 0 && v == p->out_lvar[L->m - 1] && L->span_lo >= 0) {
        span_step(L, it, nit, lat.universe, v, &out);
        return sc_ir_list_block(B, &out);
    }
    if (L->mode == BOUND && L->m > 0 && v == p->out_lvar[L->m - 1]) {
        /* each iteration here yields at most one new entry of the row (coordinate v):
         * add up the iterations instead of running them */
        const sc_ir_expr *len = NULL;
        if (nit == 0)
            len = V(L->ext[v]);
        else if (nit == 1 && !lat.universe && it[0].unique)
            len = BIN(SUB, V(it[0].e), it[0].lo);
        else
            L->bound_ok = false;
        if (len)
            sc_ir_push(B, &out, sc_ir_assign(B, S->cnt[L->m - 1], true, len));
        return sc_ir_list_block(B, &out);
    }
    sc_ir_par par = SC_IR_SEQ;
    if (d == 0 && L->par)
        par = p->out_sparse ? SC_IR_OMP_FOR : SC_IR_PAR_FOR;
    else if (d == 0 && L->bound_par && L->mode == BOUND && L->out_level_of[v] == 0)
        par = SC_IR_PAR_FOR; /* the output's rows: each writes its own bound */
    int32_t chunk = par != SC_IR_SEQ ? 64 : 0;
    if (nit == 0 && S->tvn > 0 && d == L->n - 1) {
        /* the vectors of a vector register tile */
        int32_t W = S->vlanes;
        for (int32_t q = 0; q < S->tvn; q++) {
            st T = *S;
            T.vacc = S->tv[q];
            T.vec = true;
            T.vtile = v;
            const sc_ir_stmt *body = case_body(L, d, n, &T, it, 0, 0, BIN(ADD, S->tbase, I(q * W)), false);
            if (body)
                sc_ir_push(B, &out, body);
        }
        return sc_ir_list_block(B, &out);
    }
    if (nit == 0 && S->tacc >= 0 && d == L->n - 1) {
        /* the lanes of a register tile */
        sc_ir_var u = newv(L, "u", SC_IR_I64);
        st T = *S;
        T.tlane = V(u);
        const sc_ir_stmt *body = case_body(L, d, n, &T, it, 0, 0, BIN(ADD, S->tbase, V(u)), false);
        if (body)
            sc_ir_push(B, &out, sc_ir_for(B, u, I(0), S->twidth, I(1), SC_IR_SEQ, 0, body));
        return sc_ir_list_block(B, &out);
    }
    if (nit == 0 && par == SC_IR_SEQ && unrolled_reduction(L, d, n, S, &out))
        return sc_ir_list_block(B, &out);
    if (nit == 0) {
        sc_ir_var cvar = newv(L, vname(L, v), SC_IR_I64);
        const sc_ir_stmt *body = case_body(L, d, n, S, it, 0, 0, V(cvar), false);
        if (!body)
            return sc_ir_block(B, NULL, 0);
        if (par == SC_IR_OMP_FOR && L->ws_ok >= 0)
            body = sc_ir_if(B, V(L->ws_ok), body, NULL);
        /* rows weighed by their nonzeros; not with a workspace (SpGEMM-like: a row's
         * work follows the other operand's rows, which dynamic chunks absorb) */
        sc_ir_var bal = par != SC_IR_SEQ && (L->q < 0 || L->mode == BOUND) ? balance_pos(L, v) : -1;
        if (par != SC_IR_SEQ && L->onepass && L->mode == FILL && L->D == 1)
            bal = L->cnt[1]; /* rows weighed by their multiply counts */
        /* else iterations weighed by the dense loops inside, where there are some: a few
         * heavy ones (a ddc batch's matrices, "bij,bjk->bik") run in parallel too */
        const sc_ir_expr *work = bal >= 0 ? inner_work(L, d)
                                 : par == SC_IR_PAR_FOR ? dense_work(L, d) : NULL;
        /* the entries' arrays streamed where each entry carries a dense loop and the
         * output shares their pattern (SDDMM; see streamed) */
        bool stream = bal >= 0 && par != SC_IR_SEQ && work;
        if (stream)
            body = streamed(L, v, V(cvar), body);
        const sc_ir_stmt *loop =
            bal >= 0 ? sc_ir_for_balanced(B, cvar, I(0), V(L->ext[v]), par, bal, work, body)
            : work ? sc_ir_for_weighed(B, cvar, I(0), V(L->ext[v]), chunk, work, body)
                   : sc_ir_for(B, cvar, I(0), V(L->ext[v]), I(1), par, chunk, body);
        if (bal >= 0 && par != SC_IR_SEQ && d == 0 && L->share) {
            /* runs of short rows at once where short_rows applies */
            sc_ir_var re = newv(L, "re", SC_IR_I64);
            int32_t min = 0;
            const sc_ir_stmt *run = short_rows(L, n, S, cvar, re, bal, &min);
            if (stream)
                run = streamed(L, v, V(cvar), run);
            if (run)
                loop = sc_ir_runs(B, loop, min, re, run);
        }
        if (bal >= 0 && par == SC_IR_PAR_FOR && L->mode == FILL && d + 2 == L->n &&
            L->vt == SC_IR_F32 && !L->s->gathers) {
            /* rows two at a time where paired_rows applies (f32 only: in f64 the jam was
             * 5-10 % slower than one row at a time on FEM rows, level on banded ones; not
             * where gathered_row reads the rows) */
            L->pairing = true;
            L->paired = false;
            const sc_ir_stmt *pair = case_body(L, d, n, S, it, 0, 0, V(cvar), false);
            L->pairing = false;
            if (stream)
                pair = streamed(L, v, V(cvar), pair);
            if (pair && L->paired)
                loop = sc_ir_pairs(B, loop, JAM_MIN, pair);
        }
        sc_ir_push(B, &out, loop);
        return sc_ir_list_block(B, &out);
    }
    if (nit == 1 && !lat.universe && it[0].unique) {
        segment_arg g = {d, n, S, par, chunk};
        row_prefetched(L, d, n, S, &it[0], par == SC_IR_SEQ, segment, &g, &out);
        return sc_ir_list_block(B, &out);
    }
    if (par != SC_IR_SEQ && nit == 1 && !lat.universe && !it[0].unique && d == 0 && L->whole >= 0) {
        /* a non-unique first level (COO's rows) whose entries the output shares, each
         * value written at its own position: each thread runs the loop below over its
         * share of the positions, cut where no run of equal coordinates is split */
        sc_ir_var crd = L->crd[it[0].operand][it[0].level];
        sc_ir_var sb = newv(L, "share_b", SC_IR_I64), se = newv(L, "share_e", SC_IR_I64);
        sc_ir_push(B, &out, sc_ir_decl(B, sb, sc_ir_runsplit(B, crd, V(it[0].p), V(it[0].e), false)));
        sc_ir_push(B, &out, sc_ir_decl(B, se, sc_ir_runsplit(B, crd, V(it[0].p), V(it[0].e), true)));
        sc_ir_push(B, &out, sc_ir_assign(B, it[0].p, false, V(sb)));
        sc_ir_push(B, &out, sc_ir_assign(B, it[0].e, false, V(se)));
        par = SC_IR_SEQ;
    }
    if (par != SC_IR_SEQ) {
        sc_ir_fail(B, SC_INTERNAL, "parallel loop over a co-iteration");
        return NULL;
    }
    uint32_t all = (1u << nit) - 1;
    /* A union of three or more iterators (every nonempty subset a lattice point): one
     * loop and one body in which absent operands read as zero and have empty segments
     * below, instead of a loop per point and a case per subset (exponential code). */
    bool dyn = nit >= 3 && lat.npoints >= (int32_t)all;
    if (dyn && !lat.universe) {
        sc_ir_list body = {0};
        const sc_ir_expr *cond = NULL, *mn = NULL;
        for (int32_t i = 0; i < nit; i++) {
            const sc_ir_expr *alive = BIN(LT, V(it[i].p), V(it[i].e));
            cond = cond ? BIN(OR, cond, alive) : alive;
            sc_ir_push(B, &body, sc_ir_decl(B, it[i].c, sc_ir_select(B, alive,
                                            sc_ir_load(B, L->crd[it[i].operand][it[i].level], V(it[i].p)),
                                            V(L->ext[v]))));
            mn = mn ? BIN(MIN, mn, V(it[i].c)) : V(it[i].c);
        }
        sc_ir_var cvar = newv(L, vname(L, v), SC_IR_I64);
        sc_ir_push(B, &body, sc_ir_decl(B, cvar, mn));
        for (int32_t i = 0; i < nit; i++)
            run_end(L, &it[i], &body);
        const sc_ir_stmt *cb = case_body(L, d, n, S, it, nit, all, V(cvar), true);
        if (cb)
            sc_ir_push(B, &body, cb);
        advance(L, it, nit, all, V(cvar), &body);
        sc_ir_push(B, &out, sc_ir_while(B, cond, sc_ir_list_block(B, &body)));
        return sc_ir_list_block(B, &out);
    }
    if (lat.universe) {
        sc_ir_var cvar = newv(L, vname(L, v), SC_IR_I64);
        sc_ir_list body = {0};
        for (int32_t i = 0; i < nit; i++) {
            const sc_ir_expr *c = sc_ir_select(B, BIN(LT, V(it[i].p), V(it[i].e)),
                                               sc_ir_load(B, L->crd[it[i].operand][it[i].level], V(it[i].p)),
                                               V(L->ext[v]));
            sc_ir_push(B, &body, sc_ir_decl(B, it[i].c, c));
            run_end(L, &it[i], &body);
        }
        const sc_ir_stmt *ch = dyn ? case_body(L, d, n, S, it, nit, all, V(cvar), true)
                                   : cases(L, d, n, S, it, nit, &lat, all, V(cvar));
        if (ch)
            sc_ir_push(B, &body, ch);
        advance(L, it, nit, all, V(cvar), &body);
        sc_ir_push(B, &out, sc_ir_for(B, cvar, I(0), V(L->ext[v]), I(1), SC_IR_SEQ, 0,
                                      sc_ir_list_block(B, &body)));
        return sc_ir_list_block(B, &out);
    }
    for (int32_t q = 0; q < lat.npoints; q++) {
        uint32_t P = lat.points[q];
        if (!P)
            continue;
        sc_ir_list body = {0};
        const sc_ir_expr *cond = NULL, *mn = NULL;
        for (int32_t i = 0; i < nit; i++) {
            if (!((P >> i) & 1))
                continue;
            const sc_ir_expr *c = BIN(LT, V(it[i].p), V(it[i].e));
            cond = cond ? BIN(AND, cond, c) : c;
            sc_ir_push(B, &body, sc_ir_decl(B, it[i].c, sc_ir_load(B, L->crd[it[i].operand][it[i].level], V(it[i].p))));
            mn = mn ? BIN(MIN, mn, V(it[i].c)) : V(it[i].c);
        }
        sc_ir_var cvar = newv(L, vname(L, v), SC_IR_I64);
        sc_ir_push(B, &body, sc_ir_decl(B, cvar, mn));
        for (int32_t i = 0; i < nit; i++)
            if ((P >> i) & 1)
                run_end(L, &it[i], &body);
        const sc_ir_stmt *ch = cases(L, d, n, S, it, nit, &lat, P, V(cvar));
        if (ch)
            sc_ir_push(B, &body, ch);
        advance(L, it, nit, P, V(cvar), &body);
        sc_ir_push(B, &out, sc_ir_while(B, cond, sc_ir_list_block(B, &body)));
    }
    return sc_ir_list_block(B, &out);
}

/* ---- kernel prologue, phases, epilogue ---- */

static void prologue(lb *L, sc_ir_list *out)
{
    const sc_lower_problem *p = L->p;
    char nm[64];
    for (int32_t t = 0; t < p->nops; t++) {
        const sc_lower_operand *op = &p->ops[t];
        sc_ir_type it = sc_ir_idx_type(op->itype);
        for (int32_t k = 0; k < op->fmt.order; k++) {
            L->pos[t][k] = L->crd[t][k] = -1;
            if (!op->sparse)
                continue;
            if (sc_level_has_pos(op->fmt.kind[k])) {
                snprintf(nm, sizeof nm, "%s%d_pos", oname(L, t), (int)k);
                L->pos[t][k] = sc_ir_new_var(B, nm, it, true, true, false);
                sc_ir_push(B, out, sc_ir_decl(B, L->pos[t][k], sc_ir_arg_ref(B, SC_IR_ARG_POS, t, k, it)));
            }
            if (sc_level_has_crd(op->fmt.kind[k])) {
                snprintf(nm, sizeof nm, "%s%d_crd", oname(L, t), (int)k);
                L->crd[t][k] = sc_ir_new_var(B, nm, it, true, true, false);
                sc_ir_push(B, out, sc_ir_decl(B, L->crd[t][k], sc_ir_arg_ref(B, SC_IR_ARG_CRD, t, k, it)));
                snprintf(nm, sizeof nm, "%s%d_len", oname(L, t), (int)k);
                L->clen[t][k] = newv(L, nm, SC_IR_I64);
                sc_ir_push(B, out, sc_ir_decl(B, L->clen[t][k],
                                              sc_ir_arg_ref(B, SC_IR_ARG_CRD_LEN, t, k, SC_IR_I64)));
            }
        }
        snprintf(nm, sizeof nm, "%s_vals", oname(L, t));
        L->vals[t] = sc_ir_new_var(B, nm, L->vt, true, true, false);
        sc_ir_push(B, out, sc_ir_decl(B, L->vals[t], sc_ir_arg_ref(B, SC_IR_ARG_VALS, t, 0, L->vt)));
        if (!op->sparse) {
            const sc_ir_expr *ls[SC_MAX_ORDER];
            for (int32_t k = op->fmt.order; k-- > 0;) {
                if (k == op->fmt.order - 1) {
                    ls[k] = I(1);
                } else {
                    snprintf(nm, sizeof nm, "%s_s%d", oname(L, t), (int)k);
                    sc_ir_var sv = newv(L, nm, SC_IR_I64);
                    sc_ir_push(B, out, sc_ir_decl(B, sv, BIN(MUL, ls[k + 1],
                                                          sc_ir_arg_ref(B, SC_IR_ARG_DIM, t, op->fmt.lvl2dim[k + 1], SC_IR_I64))));
                    ls[k] = V(sv);
                }
            }
            for (int32_t dd = 0; dd < op->fmt.order; dd++)
                L->stride[t][dd] = (p->bcast[t] >> dd) & 1 ? I(0) : ls[lvl_of_dim(&op->fmt, dd)];
        }
    }
    for (sc_expr_var v = 0; v < p->nvars; v++) {
        const sc_ir_expr *src = NULL;
        for (int32_t d = 0; d < p->out_order && !src; d++)
            if (p->out_var[d] == v)
                src = sc_ir_arg_ref(B, SC_IR_ARG_DIM, -1, d, SC_IR_I64);
        for (int32_t a = 0; a < p->naccess && !src; a++)
            for (int32_t d = 0; d < p->acc[a].order && !src; d++)
                if (p->acc[a].var[d] == v && !((p->bcast[p->acc[a].operand] >> d) & 1))
                    src = sc_ir_arg_ref(B, SC_IR_ARG_DIM, p->acc[a].operand, d, SC_IR_I64);
        if (!src || p->fixed[v] > 0)
            src = I(p->fixed[v] > 0 ? p->fixed[v] : 1);
        snprintf(nm, sizeof nm, "N%s", vname(L, v));
        /* a fixed extent is a const: a constant inside the parallel regions too (a plain
         * variable reaches them through OpenMP's shared-data block, unknown there) */
        L->ext[v] = sc_ir_new_var(B, nm, SC_IR_I64, false, p->fixed[v] > 0, false);
        sc_ir_push(B, out, sc_ir_decl(B, L->ext[v], src));
    }
}

static const sc_ir_expr *ext_of_out_dim(lb *L, int32_t d)
{
    return V(L->ext[L->p->out_var[d]]);
}

static const sc_ir_stmt *nest(lb *L, const st *S0)
{
    const sc_lower_problem *p = L->p;
    st S = *S0;
    sc_ir_list out = {0};
    if (L->onepass && L->mode == FILL) {
        L->nrun = newv(L, "nrun", SC_IR_I64);
        L->prevr = newv(L, "prevr", SC_IR_I64);
        sc_ir_push(B, &out, sc_ir_decl(B, L->nrun, I(0)));
        sc_ir_push(B, &out, sc_ir_decl(B, L->prevr, I(-2)));
    }
    if (p->out_sparse && L->D == 0) {
        S.opos = I(0);
        row_begin(L, &S, &out);
    }
    if (L->dlast < 0 && L->n > 0 && !p->out_sparse) {
        if (L->mode == FILL) {
            S.acc = newv(L, "acc", L->vt);
            sc_ir_push(B, &out, sc_ir_decl(B, S.acc, sc_ir_flt(B, 0.0, L->vt)));
            sc_ir_push(B, &out, lower_at(L, 0, p->rhs, &S));
            sc_ir_push(B, &out, sc_ir_store(B, L->ovals, I(0), true, V(S.acc)));
            L->need_zero = true;
        }
    } else if (L->tile_at == 0 && !p->out_sparse) {
        tiled(L, 0, p->rhs, NULL, &S, &out);
    } else {
        sc_ir_push(B, &out, lower_at(L, 0, p->rhs, &S));
    }
    if (p->out_sparse && L->q == 0)
        drain(L, &S, &out);
    if (p->out_sparse && L->D == 0)
        row_end(L, &S, &out);
    return sc_ir_list_block(B, &out);
}

/* Whether p's right-hand side is zero whatever its operands hold (a literal 0 factor in
 * every term): its loops then write no value. */
static bool identically_zero(const sc_lower_problem *p)
{
    return sc_lower_specialize(NULL, p->rhs, 0, NULL) == NULL;
}

/* Declare (per thread) or allocate once (owned, top) the workspace buffer *v. */
static void ws_buffer(lb *L, sc_ir_list *out, bool owned, sc_ir_var *v, const char *name,
                      sc_ir_type t, const sc_ir_expr *count, bool zero)
{
    const sc_ir_expr *a = zero ? sc_ir_alloc(B, t, count) : sc_ir_alloc_uninit(B, t, count);
    *v = sc_ir_new_var(B, name, t, true, false, owned);
    if (owned) {
        sc_ir_push(B, out, sc_ir_assign(B, *v, false, a));
        sc_ir_push(B, out, sc_ir_require(B, sc_ir_nonnull(B, *v), SC_NOMEM, "out of memory"));
    } else {
        sc_ir_push(B, out, sc_ir_decl(B, *v, a));
    }
}

/* The workspace buffers of mode (every one when owned: one set serves both phases) and
 * the condition that they were all allocated; free them in the same order. */
static const sc_ir_expr *ws_alloc(lb *L, sc_ir_list *out, bool owned, const sc_ir_expr *wsize)
{
    bool count = owned || L->mode == COUNT, fill = owned || L->mode == FILL;
    sc_ir_type oit = sc_ir_idx_type(L->p->out_itype);
    if (L->gus) {
        ws_buffer(L, out, owned, &L->ws_bits, "ws_bits", SC_IR_U64,
                  BIN(DIV, BIN(ADD, wsize, I(63)), I(64)), true);
        ws_buffer(L, out, owned, &L->ws_sum, "ws_sum", SC_IR_U64,
                  BIN(DIV, BIN(ADD, wsize, I(4095)), I(4096)), true);
        L->ws_list = L->ws_vals = -1;
        if (count)
            ws_buffer(L, out, owned, &L->ws_list, "ws_list", oit, wsize, false);
        /* a one-pass fill (all of them when owned, before the choice) may take dense
         * rows (gus_row): byte flags, and the values zero between rows */
        bool dense = fill && (owned || L->onepass);
        L->ws_size = wsize;
        if (fill)
            ws_buffer(L, out, owned, &L->ws_vals, "ws_vals", L->vt, wsize, dense);
        if (dense)
            ws_buffer(L, out, owned, &L->ws_flag, "ws_flag", SC_IR_U8, BIN(ADD, wsize, I(8)), true);
    } else {
        ws_buffer(L, out, owned, &L->ws_mark, "ws_mark", SC_IR_U8, wsize, true);
        ws_buffer(L, out, owned, &L->ws_list, "ws_list", SC_IR_I64, wsize, false);
        ws_buffer(L, out, owned, &L->ws_vals, "ws_vals", L->vt, fill ? wsize : I(1), true);
    }
    sc_ir_var vs[5] = {L->gus ? L->ws_bits : L->ws_mark, L->gus ? L->ws_sum : -1, L->ws_list,
                       L->ws_vals, L->ws_flag};
    const sc_ir_expr *ok = NULL;
    for (int32_t i = 0; i < 5; i++)
        if (vs[i] >= 0)
            ok = ok ? BIN(AND, ok, sc_ir_nonnull(B, vs[i])) : sc_ir_nonnull(B, vs[i]);
    return ok;
}

static void ws_free(lb *L, sc_ir_list *out)
{
    sc_ir_var vs[6] = {L->ws_mark, L->ws_bits, L->ws_sum, L->ws_list, L->ws_vals, L->ws_flag};
    for (int32_t i = 0; i < 6; i++)
        if (vs[i] >= 0)
            sc_ir_push(B, out, sc_ir_free(B, vs[i]));
}

/* One phase of a sparse output (or the only pass of a dense one), with per-thread
 * workspaces when parallel. */
static const sc_ir_stmt *phase(lb *L, const st *S0, sc_ir_var fail, const sc_ir_expr *wsize)
{
    const sc_lower_problem *p = L->p;
    if (!(p->out_sparse && L->par))
        return nest(L, S0);
    sc_ir_list region = {0};
    sc_ir_var saved[8] = {L->ws_mark, L->ws_list, L->ws_vals, L->ws_n, L->ws_ok, L->ws_bits,
                          L->ws_sum, L->ws_flag};
    if (L->q >= 0) {
        const sc_ir_expr *ok = ws_alloc(L, &region, false, wsize);
        L->ws_n = newv(L, "ws_n", SC_IR_I64);
        L->ws_ok = newv(L, "ws_ok", SC_IR_BOOL);
        sc_ir_push(B, &region, sc_ir_decl(B, L->ws_n, I(0)));
        sc_ir_push(B, &region, sc_ir_decl(B, L->ws_ok, ok));
        sc_ir_push(B, &region, sc_ir_if(B, sc_ir_not(B, V(L->ws_ok)), sc_ir_flag(B, fail), NULL));
    }
    sc_ir_push(B, &region, nest(L, S0));
    if (L->q >= 0)
        ws_free(L, &region);
    L->ws_mark = saved[0];
    L->ws_list = saved[1];
    L->ws_vals = saved[2];
    L->ws_n = saved[3];
    L->ws_ok = saved[4];
    L->ws_bits = saved[5];
    L->ws_sum = saved[6];
    L->ws_flag = saved[7];
    const sc_ir_expr *cond = BIN(LE, I(SC_IR_PAR_MIN), V(L->whole >= 0 ? L->tot[L->D] : L->nrows));
    if (L->onepass)
        cond = BIN(AND, cond, BIN(LE, I(SPGEMM_PAR_WORK), V(L->ftot)));
    if (L->whole >= 0) { /* as a balanced row loop: the entries times the dense work in each */
        int32_t last = L->flat ? L->D : L->m - 1;
        const sc_ir_expr *w = inner_work(L, 0), *n = V(L->tot[last]);
        cond = BIN(AND, cond, BIN(LE, I(SC_IR_PAR_WORK), w ? BIN(MUL, n, w) : n));
    }
    return sc_ir_parallel(B, cond, sc_ir_list_block(B, &region));
}

static sc_ir_var owned_alloc(lb *L, sc_ir_list *top, const char *name, sc_ir_type t,
                             const sc_ir_expr *count)
{
    sc_ir_var v;
    ws_buffer(L, top, true, &v, name, t, count, true);
    return v;
}

/* The same without the zero fill, for arrays the kernel writes entirely. */
static sc_ir_var owned_alloc_uninit(lb *L, sc_ir_list *top, const char *name, sc_ir_type t,
                                    const sc_ir_expr *count)
{
    sc_ir_var v;
    ws_buffer(L, top, true, &v, name, t, count, false);
    return v;
}

/* The sparse output's values, count of them, allocated once (top): zero-filled only
 * where the expression is zero everywhere, else each is written by the fill. */
static sc_ir_var out_values(lb *L, sc_ir_list *top, const sc_ir_expr *count)
{
    sc_ir_var v;
    ws_buffer(L, top, true, &v, "out_vals", L->vt, count, identically_zero(L->p));
    return v;
}

/* Whether n is a product (of accesses, literals, negations) in which no sparse access
 * other than number *t is a factor; *t: the first sparse access seen (-1: none yet). */
static bool lone_sparse_factor(const sc_lower_problem *p, const sc_lower_node *n, int32_t *t)
{
    if (!n)
        return false;
    switch (n->kind) {
    case SC_LN_ACCESS:
        if (!p->ops[p->acc[n->access].operand].sparse)
            return true;
        if (*t >= 0)
            return false;
        *t = n->access;
        return true;
    case SC_LN_LIT:
        return true;
    case SC_LN_NEG:
        return lone_sparse_factor(p, n->a, t);
    case SC_LN_MUL:
        return lone_sparse_factor(p, n->a, t) && lone_sparse_factor(p, n->b, t);
    default:
        return false;
    }
}

/* The access of the one sparse factor of a product whose levels are the output's, level
 * by level (index, kind, uniqueness), not broadcast; -1 where there is none. */
static int32_t pattern_access(const sc_lower_problem *p)
{
    int32_t a = -1, m = p->out_order;
    if (!p->out_sparse || !lone_sparse_factor(p, p->rhs, &a) || a < 0)
        return -1;
    const sc_lower_access *ac = &p->acc[a];
    int32_t t = ac->operand;
    const sc_format *f = &p->ops[t].fmt;
    if (ac->order != m || (t < 64 && p->bcast[t]))
        return -1;
    for (int32_t k = 0; k < m; k++)
        if (ac->lvar[k] != p->out_lvar[k] || f->kind[k] != p->out_fmt.kind[k] ||
            f->unique[k] != p->out_fmt.unique[k])
            return -1;
    return a;
}

int32_t sc_lower_whole_pattern(const sc_lower_problem *p)
{
    int32_t a = pattern_access(p);
    return a >= 0 && p->ops[p->acc[a].operand].itype == p->out_itype ? a : -1;
}

/*
 * The operand whose pattern the output provably has (-1: none): the expression is a
 * product with exactly one sparse factor, that factor is indexed by the output's
 * variables level by level with the output's level kinds (dense levels, then one
 * compressed unique level: csr-like), and no workspace.  Every entry of that operand
 * then gives exactly one output entry, so its pos array is the output's.
 */
static int32_t pattern_operand(const lb *L)
{
    const sc_lower_problem *p = L->p;
    int32_t m = L->m;
    if (L->q >= 0 || L->flat || L->D != m - 1 || p->out_fmt.kind[m - 1] != SC_LEVEL_COMPRESSED ||
        !p->out_fmt.unique[m - 1])
        return -1;
    int32_t a = pattern_access(p);
    return a >= 0 && L->pos[p->acc[a].operand][m - 1] >= 0 ? p->acc[a].operand : -1;
}

/* Hand the sparse output's arrays over: out_pos (where levels have one), out_crd and
 * out_vals of each compressed level D..m-1, with their lengths from tot[] (the entries of
 * each level; with flat levels all share tot[D]). */
static void publish_output(lb *L, sc_ir_list *top)
{
    int32_t D = L->D, m = L->m, last = L->flat ? D : m - 1;
    for (int32_t k = D; k < m; k++) {
        int32_t tk = L->flat ? D : k;
        if (L->opos[k] >= 0) {
            const sc_ir_expr *n = k == D ? BIN(ADD, V(L->nrows), I(1)) : BIN(ADD, V(L->tot[k - 1]), I(1));
            sc_ir_push(B, top, sc_ir_out_set(B, SC_IR_ARG_POS, k, V(L->opos[k])));
            sc_ir_push(B, top, sc_ir_out_len(B, SC_IR_ARG_POS, k, n));
        }
        sc_ir_push(B, top, sc_ir_out_set(B, SC_IR_ARG_CRD, k, V(L->ocrd[k])));
        sc_ir_push(B, top, sc_ir_out_len(B, SC_IR_ARG_CRD, k, V(L->tot[tk])));
    }
    sc_ir_push(B, top, sc_ir_out_set(B, SC_IR_ARG_VALS, 0, V(L->ovals)));
    sc_ir_push(B, top, sc_ir_out_len(B, SC_IR_ARG_VALS, 0, V(L->tot[last])));
}

/* The gap closing moves a run of rows (rows whose entries follow one another) as one
 * block.  Where the run moves down by at least PAR_MOVE_GAP entries and holds at least
 * PAR_MOVE_RUN, it moves on all threads in rounds of the gap's length: no round writes
 * what it or a later round reads.  A run that moves sequentially is moved every
 * MOVE_RUN entries (128 KB of f32 coordinates and values), so that the rows the pass has
 * just passed are moved while in cache: one move for a whole thread's run made
 * wiki-Vote's SpGEMM 7 % slower.  In a C harness of the kernel, 2 threads, rounds
 * against the sequential blocks: email-Enron 139-140 -> 123 ms, wiki-Vote 8.4-9.1 ->
 * 7.7-8.2, banded-1M level. */
enum { MOVE_RUN = 1 << 14, PAR_MOVE_GAP = 1 << 14, PAR_MOVE_RUN = 1 << 16 };

/* out_crd[k][dst] = out_crd[k][src], and the value with it. */
static const sc_ir_stmt *copy_entry(lb *L, int32_t k, const sc_ir_expr *dst, const sc_ir_expr *src)
{
    sc_ir_list l = {0};
    sc_ir_push(B, &l, sc_ir_store(B, L->ocrd[k], dst, false, sc_ir_load(B, L->ocrd[k], src)));
    sc_ir_push(B, &l, sc_ir_store(B, L->ovals, dst, false, sc_ir_load(B, L->ovals, src)));
    return sc_ir_list_block(B, &l);
}

/* Move the run of rl entries at rs of the one-pass output's level k down to rd (rd <= rs:
 * a forward copy, overlap allowed), where it is not there already. */
static const sc_ir_stmt *move_run(lb *L, int32_t k, sc_ir_var rs, sc_ir_var rd, sc_ir_var rl)
{
    sc_ir_var t = newv(L, "t", SC_IR_I64), t2 = newv(L, "t", SC_IR_I64);
    sc_ir_var g = newv(L, "gap", SC_IR_I64), c0 = newv(L, "c0", SC_IR_I64);
    sc_ir_var cn = newv(L, "cn", SC_IR_I64);
    sc_ir_list round = {0}, body = {0};
    const sc_ir_stmt *mv = copy_entry(L, k, BIN(ADD, V(rd), V(t)), BIN(ADD, V(rs), V(t)));
    const sc_ir_stmt *pmv = copy_entry(L, k, BIN(ADD, BIN(ADD, V(rd), V(c0)), V(t2)),
                                       BIN(ADD, BIN(ADD, V(rs), V(c0)), V(t2)));
    sc_ir_push(B, &round, sc_ir_decl(B, cn, BIN(MIN, V(g), BIN(SUB, V(rl), V(c0)))));
    sc_ir_push(B, &round, sc_ir_for(B, t2, I(0), V(cn), I(1), SC_IR_PAR_FOR, 0, pmv));
    sc_ir_push(B, &body, sc_ir_decl(B, g, BIN(SUB, V(rs), V(rd))));
    const sc_ir_expr *par = BIN(AND, BIN(LE, I(PAR_MOVE_GAP), V(g)), BIN(LE, I(PAR_MOVE_RUN), V(rl)));
    sc_ir_push(B, &body, sc_ir_if(B, par,
                                  sc_ir_for(B, c0, I(0), V(rl), V(g), SC_IR_SEQ, 0,
                                            sc_ir_list_block(B, &round)),
                                  sc_ir_for(B, t, I(0), V(rl), I(1), SC_IR_SEQ, 0, mv)));
    return sc_ir_if(B, BIN(NE, V(rs), V(rd)), sc_ir_list_block(B, &body), NULL);
}

/*
 * One-pass assembly of a csr-like output (dense levels, then one compressed level filled
 * through a Gustavson workspace; SpGEMM): a BOUND pass adds up each row's multiply count
 * (the lengths of the segments the innermost loop would walk), an upper bound on its
 * entries; their prefix sums give every row a slot that no earlier row of the same run
 * can overrun.  The fill then packs each thread's contiguous rows one after the other
 * from the slot of its first row, and one sequential pass closes the gaps between the
 * threads' runs (none on one thread): it sets each row's start and moves each run (rows
 * whose slots follow one another) in blocks (move_run), not row by row (usroads' 129 k
 * rows of ~5 entries: a copy loop per row took 13 % of the kernel).
 * The output's crd/vals keep their bound size (the pages past the entries are never
 * touched).  No count pass: it cost a third of the time.  false (nothing emitted) when
 * some row's entries cannot be bounded that way.
 */
static bool onepass_output(lb *L, sc_ir_list *top, const st *S, sc_ir_var fail,
                           const sc_ir_expr *wsize)
{
    const sc_lower_problem *p = L->p;
    sc_ir_type oit = sc_ir_idx_type(p->out_itype);
    int32_t k = L->m - 1;
    L->bound_ok = true;
    L->mode = BOUND;
    bool par = L->par;
    L->par = false;
    L->bound_par = par; /* each row's bound is its own: rows weighed by their entries */
    const sc_ir_stmt *bound = nest(L, S);
    L->bound_par = false;
    L->par = par;
    if (!bound || !L->bound_ok)
        return false;
    const sc_ir_expr *rows1 = BIN(ADD, V(L->nrows), I(1));
    sc_ir_push(B, top, sc_ir_comment(B, "phase 1: bound the entries of each row by its multiply count "
                                        "(and by the row's extent)"));
    sc_ir_push(B, top, bound);
    /* a row holds at most one entry per coordinate of its level: rows denser than that
     * (a hub row of a power-law graph) reserve no more */
    sc_ir_var r = newv(L, "r", SC_IR_I64);
    const sc_ir_expr *row = sc_ir_load(B, L->cnt[k], BIN(ADD, V(r), I(1)));
    sc_ir_push(B, top, sc_ir_for(B, r, I(0), V(L->nrows), I(1), SC_IR_SEQ, 0,
                                 sc_ir_store(B, L->cnt[k], BIN(ADD, V(r), I(1)), false,
                                             BIN(ADD, BIN(MIN, row, V(L->ext[p->out_lvar[k]])),
                                                 sc_ir_load(B, L->cnt[k], V(r))))));
    L->ftot = newv(L, "bound", SC_IR_I64);
    sc_ir_push(B, top, sc_ir_decl(B, L->ftot, sc_ir_load(B, L->cnt[k], V(L->nrows))));
    /* zero-filled: rows the fill never visits (an outer level that skips some) are
     * empty */
    L->rstart = owned_alloc(L, top, "row_start", SC_IR_I64, V(L->nrows));
    L->opos[k] = owned_alloc(L, top, "out_pos", oit, rows1);
    L->ocrd[k] = owned_alloc_uninit(L, top, "out_crd", oit, V(L->ftot));
    L->ovals = owned_alloc_uninit(L, top, "out_vals", L->vt, V(L->ftot));
    sc_ir_push(B, top, sc_ir_comment(B, "phase 2: fill each thread's rows one after the other"));
    L->mode = FILL;
    L->onepass = true;
    sc_ir_push(B, top, phase(L, S, fail, wsize));
    L->onepass = false;
    sc_ir_push(B, top, sc_ir_require(B, sc_ir_not(B, V(fail)), SC_NOMEM, "out of memory (workspace)"));
    sc_ir_push(B, top, sc_ir_comment(B, "close the gaps between the threads' runs of rows: "
                                        "each run moved in blocks"));
    sc_ir_var nnz = newv(L, "nnz", SC_IR_I64), r2 = newv(L, "r", SC_IR_I64);
    sc_ir_var s0 = newv(L, "s", SC_IR_I64), c = newv(L, "c", SC_IR_I64);
    sc_ir_var rs = newv(L, "run_src", SC_IR_I64), rd = newv(L, "run_dst", SC_IR_I64);
    sc_ir_var rl = newv(L, "run_len", SC_IR_I64);
    sc_ir_push(B, top, sc_ir_decl(B, nnz, I(0)));
    sc_ir_push(B, top, sc_ir_decl(B, rs, I(0)));
    sc_ir_push(B, top, sc_ir_decl(B, rd, I(0)));
    sc_ir_push(B, top, sc_ir_decl(B, rl, I(0)));
    sc_ir_list body = {0}, next = {0};
    sc_ir_push(B, &body, sc_ir_decl(B, s0, sc_ir_load(B, L->rstart, V(r2))));
    sc_ir_push(B, &body, sc_ir_decl(B, c, sc_ir_load(B, L->opos[k], BIN(ADD, V(r2), I(1)))));
    sc_ir_push(B, &next, move_run(L, k, rs, rd, rl));
    sc_ir_push(B, &next, sc_ir_assign(B, rs, false, V(s0)));
    sc_ir_push(B, &next, sc_ir_assign(B, rd, false, V(nnz)));
    sc_ir_push(B, &next, sc_ir_assign(B, rl, false, I(0)));
    const sc_ir_expr *breaks = BIN(NE, V(s0), BIN(ADD, V(rs), V(rl)));
    const sc_ir_expr *seq_full = BIN(AND, BIN(LE, I(MOVE_RUN), V(rl)),
                                     BIN(LT, BIN(SUB, V(rs), V(rd)), I(PAR_MOVE_GAP)));
    sc_ir_push(B, &body, sc_ir_if(B, BIN(OR, breaks, seq_full), sc_ir_list_block(B, &next), NULL));
    sc_ir_push(B, &body, sc_ir_assign(B, rl, true, V(c)));
    sc_ir_push(B, &body, sc_ir_store(B, L->opos[k], V(r2), false, V(nnz)));
    sc_ir_push(B, &body, sc_ir_assign(B, nnz, true, V(c)));
    sc_ir_push(B, top, sc_ir_for(B, r2, I(0), V(L->nrows), I(1), SC_IR_SEQ, 0, sc_ir_list_block(B, &body)));
    sc_ir_push(B, top, move_run(L, k, rs, rd, rl));
    if (p->out_itype == SC_INDEX_I32)
        sc_ir_push(B, top, sc_ir_require(B, BIN(LE, V(nnz), I(INT32_MAX)), SC_RUNTIME,
                                         "the output has more entries than int32 indices can address"));
    sc_ir_push(B, top, sc_ir_store(B, L->opos[k], V(L->nrows), false, V(nnz)));
    sc_ir_push(B, top, sc_ir_free(B, L->cnt[k]));
    sc_ir_push(B, top, sc_ir_free(B, L->rstart));
    if (!L->par)
        ws_free(L, top);
    L->tot[k] = nnz;
    publish_output(L, top);
    return true;
}

static void sparse_output(lb *L, sc_ir_list *top, const st *S)
{
    const sc_lower_problem *p = L->p;
    sc_ir_type oit = sc_ir_idx_type(p->out_itype);
    int32_t D = L->D, m = L->m, last = L->flat ? D : m - 1;
    L->gus = L->q >= 0 && !L->flat && L->kw == m - 1;
    L->ws_bits = L->ws_sum = -1;
    const sc_ir_expr *rows = I(1);
    for (int32_t k = 0; k < D; k++)
        rows = BIN(MUL, rows, V(L->ext[p->out_lvar[k]]));
    L->nrows = newv(L, "nrows", SC_IR_I64);
    sc_ir_push(B, top, sc_ir_decl(B, L->nrows, rows));
    const sc_ir_expr *rows1 = BIN(ADD, V(L->nrows), I(1));
    if (L->whole >= 0) {
        int32_t t = p->acc[L->whole].operand;
        sc_ir_push(B, top, sc_ir_comment(B, "the output has the operand's whole pattern: its pos and crd "
                                            "arrays shared, each value written at its entry's position"));
        for (int32_t k = D; k < m; k++) {
            L->opos[k] = L->pos[t][k];
            L->ocrd[k] = L->crd[t][k];
        }
        for (int32_t k = D; k <= last; k++) {
            L->tot[k] = newv(L, "nnz", SC_IR_I64);
            sc_ir_push(B, top, sc_ir_decl(B, L->tot[k], V(L->clen[t][k])));
        }
        /* no zero fill: the loops visit every entry of the operand once (its only
         * sparse factor), each written at its own position, COO duplicates too; unless
         * the expression is zero everywhere (a literal 0 factor), when none is */
        L->ovals = out_values(L, top, V(L->tot[last]));
        sc_ir_push(B, top, sc_ir_comment(B, "fill"));
        L->mode = FILL;
        sc_ir_push(B, top, phase(L, S, -1, I(1))); /* (no workspace to fail) */
        publish_output(L, top);
        return;
    }
    /* cnt[k][r]: the first entry of row r at level k (a copy of the pattern operand's
     * pos array when there is one) */
    int32_t pat = pattern_operand(L);
    for (int32_t k = D; k <= last; k++)
        L->cnt[k] = pat >= 0 ? L->pos[pat][D] : owned_alloc(L, top, "cnt", SC_IR_I64, rows1);
    const sc_ir_expr *wsize = I(1);
    if (L->q >= 0) {
        for (int32_t k = m; k-- > L->kw;) {
            L->wstride[k] = wsize;
            sc_ir_var sv = newv(L, "ws_s", SC_IR_I64);
            sc_ir_push(B, top, sc_ir_decl(B, sv, BIN(MUL, wsize, V(L->ext[p->out_lvar[k]]))));
            wsize = V(sv);
        }
        if (!L->par) {
            ws_alloc(L, top, true, wsize);
            L->ws_n = newv(L, "ws_n", SC_IR_I64);
            sc_ir_push(B, top, sc_ir_decl(B, L->ws_n, I(0)));
        }
    }
    sc_ir_var fail = newv(L, "ws_fail", SC_IR_BOOL);
    sc_ir_push(B, top, sc_ir_decl(B, fail, I(0)));
    /* (the one-pass fill appends at the innermost loop and bounds a row by the products
     * at its last output variable: a reduction loop below that variable, l in
     * "ij,jk,l->ik" in order i,j,k,l, would append each product once per iteration and
     * overrun the row's slot) */
    bool innermost = L->depth_of[p->out_lvar[m - 1]] == L->n - 1;
    if (pat < 0 && L->gus && D >= 1 && D == m - 1 && innermost &&
        onepass_output(L, top, S, fail, wsize))
        return;
    /* with the same index width the output shares the pattern operand's pos and crd (the
     * caller keeps that operand alive and marks them borrowed): no copy, no coordinate
     * written by the fill, only the values allocated */
    L->share = pat >= 0 && p->ops[pat].itype == p->out_itype && L->crd[pat][D] >= 0;
    if (pat >= 0) {
        char c[112];
        snprintf(c, sizeof c, "the output has %s's pattern: no count phase, its pos %s",
                 oname(L, pat), L->share ? "and crd arrays shared" : "array copied");
        sc_ir_push(B, top, sc_ir_comment(B, c));
    } else {
        sc_ir_push(B, top, sc_ir_comment(B, "phase 1: count the entries of each row"));
        L->mode = COUNT;
        sc_ir_push(B, top, phase(L, S, fail, wsize));
        sc_ir_push(B, top, sc_ir_require(B, sc_ir_not(B, V(fail)), SC_NOMEM, "out of memory (workspace)"));
        sc_ir_push(B, top, sc_ir_comment(B, "prefix sums, then allocate the output"));
    }
    for (int32_t k = D; k <= last; k++) {
        sc_ir_var r = newv(L, "r", SC_IR_I64);
        if (pat < 0)
            sc_ir_push(B, top, sc_ir_for(B, r, I(0), V(L->nrows), I(1), SC_IR_SEQ, 0,
                                         sc_ir_store(B, L->cnt[k], BIN(ADD, V(r), I(1)), true,
                                                     sc_ir_load(B, L->cnt[k], V(r)))));
        L->tot[k] = newv(L, "nnz", SC_IR_I64);
        sc_ir_push(B, top, sc_ir_decl(B, L->tot[k], sc_ir_load(B, L->cnt[k], V(L->nrows))));
        if (p->out_itype == SC_INDEX_I32)
            sc_ir_push(B, top, sc_ir_require(B, BIN(LE, V(L->tot[k]), I(INT32_MAX)), SC_RUNTIME,
                                             "the output has more entries than int32 indices can address"));
    }
    for (int32_t k = D; k < m; k++) {
        int32_t tk = L->flat ? D : k;
        L->opos[k] = -1;
        if (L->share) { /* (D == m - 1: one compressed level) */
            L->opos[k] = L->pos[pat][k];
            L->ocrd[k] = L->crd[pat][k];
            continue;
        }
        if (k == D)
            L->opos[k] = owned_alloc_uninit(L, top, "out_pos", oit, rows1);
        else if (!L->flat)
            L->opos[k] = owned_alloc(L, top, "out_pos", oit, BIN(ADD, V(L->tot[k - 1]), I(1)));
        L->ocrd[k] = owned_alloc_uninit(L, top, "out_crd", oit, V(L->tot[tk]));
    }
    /* every entry counted is written by the fill (every entry of the pattern, where the
     * output has one, unless the expression is zero everywhere) */
    L->ovals = out_values(L, top, V(L->tot[last]));
    sc_ir_var r = newv(L, "r", SC_IR_I64);
    if (!L->share)
        sc_ir_push(B, top, sc_ir_for(B, r, I(0), rows1, I(1), SC_IR_SEQ, 0,
                                     sc_ir_store(B, L->opos[D], V(r), false, sc_ir_load(B, L->cnt[D], V(r)))));
    sc_ir_push(B, top, sc_ir_comment(B, "phase 2: fill"));
    L->mode = FILL;
    sc_ir_push(B, top, phase(L, S, fail, wsize));
    sc_ir_push(B, top, sc_ir_require(B, sc_ir_not(B, V(fail)), SC_NOMEM, "out of memory (workspace)"));
    for (int32_t k = D; k <= last && pat < 0; k++)
        sc_ir_push(B, top, sc_ir_free(B, L->cnt[k]));
    if (L->q >= 0 && !L->par)
        ws_free(L, top);
    publish_output(L, top);
}

sc_status sc_lower_build(sc_arena *arena, const sc_lower_problem *p, const sc_sched *s,
                         const char *symbol, sc_ir_func *fn, sc_error *err)
{
    lb *L = sc_arena_alloc(arena, sizeof *L, err);
    if (!L)
        return SC_NOMEM;
    sc_ir_builder_init(&L->b, arena, fn, symbol, p->dtype, err);
    if (s->vec_bytes) {
        if (!sc_ir_vec_bytes_ok(s->vec_bytes))
            return sc_fail(err, SC_INTERNAL, "lower", "vectors of %d bytes", (int)s->vec_bytes);
        fn->vec_bytes = s->vec_bytes;
    }
    L->arena = arena;
    L->p = p;
    L->s = s;
    L->err = err;
    L->n = p->nvars;
    L->order = s->order;
    L->vt = sc_ir_val_type(p->dtype);
    L->m = p->out_order;
    L->q = p->out_sparse ? s->ws_depth : -1;
    L->ws_ok = L->ws_n = L->ws_mark = L->ws_list = L->ws_vals = -1;
    L->ws_flag = L->span_lo = L->span_hi = -1;
    L->span_probe = -1;
    L->nrun = L->prevr = L->rstart = L->ftot = -1;
    L->rowpf = -1;
    if (s->norder != p->nvars)
        return sc_fail(err, SC_INTERNAL, "lower", "schedule without a complete loop order");
    for (int32_t v = 0; v < SC_LOWER_MAX_VARS; v++)
        L->out_level_of[v] = -1;
    for (int32_t d = 0; d < L->n; d++)
        L->depth_of[s->order[d]] = d;
    L->dlast = -1;
    for (int32_t k = 0; k < L->m; k++) {
        L->out_level_of[p->out_lvar[k]] = k;
        if (L->depth_of[p->out_lvar[k]] > L->dlast)
            L->dlast = L->depth_of[p->out_lvar[k]];
    }
    L->D = 0;
    while (L->D < L->m && p->out_fmt.kind[L->D] == SC_LEVEL_DENSE)
        L->D++;
    L->flat = p->out_sparse && !p->out_fmt.unique[L->D];
    L->kw = L->m;
    if (L->q >= 0) {
        for (int32_t k = 0; k < L->m; k++)
            if (L->depth_of[p->out_lvar[k]] > L->q && k < L->kw)
                L->kw = k;
        if (L->kw < L->D || L->kw == L->m)
            return sc_fail(err, SC_INTERNAL, "lower", "workspace does not cover sparse output levels");
    }
    /* (a csr-like output with an operand's pattern is pattern_operand's: rows in parallel) */
    L->whole = L->q < 0 && (L->flat || L->D != L->m - 1) ? sc_lower_whole_pattern(p) : -1;
    L->par = s->parallel >= 0 && L->n > 0 && s->order[0] == s->parallel;
    if (p->out_sparse && L->D == 0 && L->whole < 0)
        L->par = false;

    sc_ir_list top = {0};
    prologue(L, &top);
    st S;
    memset(&S, 0, sizeof S);
    for (int32_t a = 0; a < SC_LOWER_MAX_ACCESSES; a++)
        S.val[a] = -1;
    S.acc = -1;
    S.tacc = -1;
    for (int32_t k = 0; k < SC_MAX_ORDER; k++)
        S.cnt[k] = -1;
    L->tile_at = tile_depth(L);

    if (!p->out_sparse) {
        const sc_ir_expr *total = I(1);
        for (int32_t k = L->m; k-- > 0;) {
            int32_t dd = p->out_fmt.lvl2dim[k];
            if (k == L->m - 1) {
                L->ostride[dd] = I(1);
            } else {
                sc_ir_var sv = newv(L, "out_s", SC_IR_I64);
                int32_t dn = p->out_fmt.lvl2dim[k + 1];
                sc_ir_push(B, &top, sc_ir_decl(B, sv, BIN(MUL, L->ostride[dn], ext_of_out_dim(L, dn))));
                L->ostride[dd] = V(sv);
            }
            total = BIN(MUL, total, ext_of_out_dim(L, dd));
        }
        sc_ir_var tv = newv(L, "out_size", SC_IR_I64);
        sc_ir_push(B, &top, sc_ir_decl(B, tv, total));
        L->ovals = sc_ir_new_var(B, "out_vals", L->vt, true, false, true);
        L->mode = FILL;
        const sc_ir_stmt *body = phase(L, &S, -1, NULL);
        /* zero fill only when some write adds or some coordinate is never written (none
         * is where the expression is zero everywhere: its loops write nothing) */
        sc_ir_push(B, &top, sc_ir_assign(B, L->ovals, false,
                                         L->need_zero || identically_zero(p)
                                             ? sc_ir_alloc(B, L->vt, V(tv))
                                                      : sc_ir_alloc_uninit(B, L->vt, V(tv))));
        sc_ir_push(B, &top, sc_ir_require(B, sc_ir_nonnull(B, L->ovals), SC_NOMEM, "out of memory"));
        sc_ir_push(B, &top, body);
        sc_ir_push(B, &top, sc_ir_out_set(B, SC_IR_ARG_VALS, 0, V(L->ovals)));
        sc_ir_push(B, &top, sc_ir_out_len(B, SC_IR_ARG_VALS, 0, V(tv)));
    } else {
        sparse_output(L, &top, &S);
    }
    return sc_ir_finish(&L->b, sc_ir_list_block(B, &top));
}
