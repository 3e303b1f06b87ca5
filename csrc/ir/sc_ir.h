/*
 * sc_ir.h — the ir stage: a small C-like loop IR that lowering builds and codegen prints.
 *
 * A kernel is one sc_ir_func: a table of variables (scalars and buffers, addressed by
 * sc_ir_var ids) and a statement tree.  Statements cover dense and sparse loops
 * (for over a range with a step, while-merges), if/else on coordinates, declarations,
 * assignments, stores and accumulations, buffer allocation and sorting (workspaces),
 * two-level coordinate bitmaps (mark, collect) and OpenMP regions.  Nodes are built only through the checking constructors below, from
 * the builder's arena, and never change afterwards.  The builder is sticky: after the
 * first failed check every constructor returns NULL and the builder's status stays set.
 */
#ifndef SC_IR_H
#define SC_IR_H

#include "../base/sc_base.h"

/* Scalar types: X(ENUM, C name). */
#define SC_IR_TYPES(X)  \
    X(VOID, "void")     \
    X(BOOL, "int")      \
    X(U8, "uint8_t")    \
    X(I32, "int32_t")   \
    X(I64, "int64_t")   \
    X(U64, "uint64_t")  \
    X(F32, "float")     \
    X(F64, "double")    \
    X(VI32, "uint32_t") \
    X(VI64, "uint64_t")

typedef enum {
#define SC_X_(e, c) SC_IR_##e,
    SC_IR_TYPES(SC_X_)
#undef SC_X_
    SC_IR_TYPE_COUNT
} sc_ir_type;

/* Expression kinds: X(ENUM, name). */
#define SC_IR_EXPR_KINDS(X) \
    X(VAR, "var")           \
    X(INT, "int")           \
    X(FLT, "flt")           \
    X(LOAD, "load")         \
    X(BIN, "bin")           \
    X(NEG, "neg")           \
    X(NOT, "not")           \
    X(CAST, "cast")         \
    X(SELECT, "select")     \
    X(ARG, "arg")           \
    X(ALLOC, "alloc")       \
    X(NONNULL, "nonnull")   \
    X(VLOAD, "vload")       \
    X(SPLAT, "splat")       \
    X(HSUM, "hsum")           \
    X(FOLD, "fold")           \
    X(LANE, "lane")           \
    X(VGATHER, "vgather")     \
    X(RUNSPLIT, "runsplit")   \
    X(RUNEND, "runend")       \
    X(ROWOF, "rowof")

typedef enum {
#define SC_X_(e, n) SC_IR_E_##e,
    SC_IR_EXPR_KINDS(SC_X_)
#undef SC_X_
    SC_IR_EXPR_KIND_COUNT
} sc_ir_expr_kind;

/* Binary operators: X(ENUM, C symbol or function, is comparison/logic). */
#define SC_IR_BINOPS(X) \
    X(ADD, "+", 0)      \
    X(SUB, "-", 0)      \
    X(MUL, "*", 0)      \
    X(DIV, "/", 0)      \
    X(LT, "<", 1)       \
    X(LE, "<=", 1)      \
    X(EQ, "==", 1)      \
    X(NE, "!=", 1)      \
    X(AND, "&&", 1)     \
    X(OR, "||", 1)      \
    X(MIN, "min", 0)    \
    X(MAX, "max", 0)

typedef enum {
#define SC_X_(e, s, c) SC_IR_OP_##e,
    SC_IR_BINOPS(SC_X_)
#undef SC_X_
    SC_IR_OP_COUNT
} sc_ir_op;

/* Fields of the kernel arguments an ARG expression reads: X(ENUM, name).
 * operand -1 means the output tensor; level is the level (pos, crd, crd_len: the number
 * of entries of that level) or dimension (dim); num_threads and cache_bytes (int64: the
 * last-level cache's size) are the env's. */
#define SC_IR_ARGS(X)       \
    X(POS, "pos")           \
    X(CRD, "crd")           \
    X(VALS, "vals")         \
    X(DIM, "dims")          \
    X(CRD_LEN, "crd_len")   \
    X(THREADS, "num_threads") \
    X(CACHE, "cache_bytes")

typedef enum {
#define SC_X_(e, n) SC_IR_ARG_##e,
    SC_IR_ARGS(SC_X_)
#undef SC_X_
    SC_IR_ARG_COUNT
} sc_ir_arg;

/* Statement kinds: X(ENUM, name). */
#define SC_IR_STMT_KINDS(X) \
    X(BLOCK, "block")       \
    X(DECL, "decl")         \
    X(ASSIGN, "assign")     \
    X(STORE, "store")       \
    X(FOR, "for")           \
    X(WHILE, "while")       \
    X(IF, "if")             \
    X(PARALLEL, "parallel") \
    X(BARRIER_OR, "flag")   \
    X(REQUIRE, "require")   \
    X(FREE, "free")         \
    X(SORT, "sort")         \
    X(MARK, "mark")         \
    X(COLLECT, "collect")   \
    X(SCAN, "scan")         \
    X(SORTSUM, "sortsum")   \
    X(PREFETCH, "prefetch") \
    X(OUT_SET, "out_set")   \
    X(COMMENT, "comment")

typedef enum {
#define SC_X_(e, n) SC_IR_S_##e,
    SC_IR_STMT_KINDS(SC_X_)
#undef SC_X_
    SC_IR_STMT_KIND_COUNT
} sc_ir_stmt_kind;

/* Id of a variable: an index into sc_ir_func.vars. */
typedef int32_t sc_ir_var;

typedef struct sc_ir_var_info {
    const char *name;
    sc_ir_type type; /* element type for buffers */
    bool buffer;     /* a pointer to elements of type */
    bool readonly;   /* const elements (operand arrays); a scalar: declared const, never assigned */
    bool owned;      /* declared NULL at the top, freed on the failure path */
    int32_t local_len; /* > 0: a local array of that many elements (sc_ir_new_local) */
    int32_t lanes;     /* > 0: a vector of that many values (sc_ir_new_vector) */
} sc_ir_var_info;

typedef struct sc_ir_expr sc_ir_expr;
struct sc_ir_expr {
    sc_ir_expr_kind kind;
    sc_ir_type type; /* result type (element type of a buffer-valued ARG/ALLOC) */
    bool buffer;     /* the value is a pointer (ARG of pos/crd/vals, ALLOC, buffer VAR) */
    sc_ir_var var;   /* VAR; LOAD: the buffer */
    int64_t ival;    /* INT; FLT of an integer value type (VI32, VI64); ARG: operand;
                        FOLD: output block width; LANE: the lane; RUNSPLIT: 1 = the
                        share's end */
    double fval;     /* FLT of F32 / F64 */
    sc_ir_op op;     /* BIN */
    sc_ir_arg arg;   /* ARG */
    int32_t level;   /* ARG */
    const sc_ir_expr *a, *b, *c; /* operands (LOAD: a = index; ALLOC: a = count; VLOAD:
                                    b = the lanes read, NULL: all; VGATHER: a = position,
                                    b = the lanes read, c = the coordinate buffer;
                                    RUNSPLIT, RUNEND: a = lo, b = hi, var = the
                                    coordinates; ROWOF: a = the first row, b = the
                                    position, c = the end row, var = the pos array) */
    bool uninit;     /* ALLOC: contents left undefined (no zero fill) */
    int32_t lanes;   /* > 0: the value is a vector of that many lanes (VLOAD, SPLAT, and
                        VAR/BIN/NEG over vectors); scalars mix with vectors in BIN */
};

/* OpenMP treatment of a FOR: none, a whole "parallel for", or a worksharing "for"
 * inside a PARALLEL statement. */
typedef enum { SC_IR_SEQ, SC_IR_PAR_FOR, SC_IR_OMP_FOR } sc_ir_par;

typedef struct sc_ir_stmt sc_ir_stmt;
struct sc_ir_stmt {
    sc_ir_stmt_kind kind;
    sc_ir_var var;         /* DECL, ASSIGN, STORE (buffer), FOR, FREE, SORT, BARRIER_OR,
                              COLLECT/PREFETCH (buffer), MARK (= bits) */
    bool accumulate;       /* ASSIGN/STORE: += instead of =; PREFETCH: for writing */
    const sc_ir_expr *a;   /* DECL init, ASSIGN/STORE value, FOR lo, WHILE/IF/REQUIRE/PARALLEL cond,
                              SORT/COLLECT count, OUT_SET value, SCAN lo */
    const sc_ir_expr *b;   /* STORE/PREFETCH index, FOR hi, MARK coordinate, COLLECT/SCAN
                              start */
    const sc_ir_expr *c;   /* FOR step; vector STORE: the lanes written (NULL: all); SCAN hi;
                              COLLECT: the set's extent N */
    sc_ir_par par;         /* FOR */
    int32_t status;        /* REQUIRE: status when cond is false; OUT_SET: 1 = a length */
    sc_ir_arg field;       /* OUT_SET */
    int32_t level;         /* OUT_SET; FOR: most iterations of a dynamic chunk, fewer where
                              each thread would get under four (0 = static); COLLECT: 1 = sort */
    bool balanced;         /* FOR (PAR_FOR/OMP_FOR, step 1): contiguous per-thread ranges of
                              about equal weight pos[v+1] - pos[lo] + (v + 1 - lo) */
    sc_ir_var bal;         /* FOR when balanced: the readonly integer pos buffer */
    bool scalar;           /* FOR: the C compiler must not vectorize it (sc_ir_scalar) */
    const sc_ir_expr *work; /* PAR_FOR: the work of one unit of weight (balanced) or of
                             * one iteration (sc_ir_for_weighed) */
    sc_ir_var bits, summary; /* MARK/COLLECT: the two-level bitmap; SCAN: bits = the flags */
    sc_ir_var total;       /* SCAN: the int64 variable the count of coordinates adds to;
                              SORTSUM: the int64 end of the entries, set to the new end;
                              MARK without a body: the int64 variable set to 1 where the
                              coordinate was new, else 0 */
    sc_ir_var vals;        /* SORTSUM: the values paired with buf's coordinates */
    const char *text;      /* COMMENT; REQUIRE message */
    const sc_ir_stmt *body, *orelse; /* FOR/WHILE/IF/PARALLEL/MARK body; IF/MARK else;
                                        balanced FOR: the body of a pair (sc_ir_pairs) or
                                        of a run of short rows (sc_ir_runs) */
    int32_t pair_min;      /* balanced FOR with a pair body: pairs where rows average this */
    int32_t run_min;       /* balanced FOR with a run body: rows under this weight run in runs */
    sc_ir_var run_end;     /* the run body's end of the run (declared by the loop) */
    int32_t lanes;         /* STORE: > 0 stores a vector into lanes consecutive elements */
    int32_t n;             /* BLOCK */
    const sc_ir_stmt *const *items;
};

typedef struct sc_ir_func {
    const char *name;
    sc_dtype dtype;
    int32_t vec_bytes; /* a full vector's width: 64 or 32 (SC_IR_VEC_BYTES unless set) */
    int32_t nvars, vars_cap;
    sc_ir_var_info *vars;
    const sc_ir_stmt *body;
} sc_ir_func;

/* Builder: arena, sticky status and the function under construction. */
typedef struct sc_ir_builder {
    sc_arena *arena;
    sc_error *err;
    sc_status st;
    sc_ir_func *fn;
} sc_ir_builder;

/* Start building fn (zeroed here; its tables live in arena; err borrowed). */
void sc_ir_builder_init(sc_ir_builder *b, sc_arena *arena, sc_ir_func *fn, const char *name,
                        sc_dtype dtype, sc_error *err);

/* Record a failure (first one wins); returns b->st. */
sc_status sc_ir_fail(sc_ir_builder *b, sc_status kind, const char *fmt, ...) SC_PRINTF(3, 4);

/* A new variable (name copied to the arena, made unique by appending the id).
 * Returns its id or -1 (builder failed). */
sc_ir_var sc_ir_new_var(sc_ir_builder *b, const char *name, sc_ir_type type, bool buffer,
                        bool readonly, bool owned);

/* A local array of len (> 0, at most SC_IR_LOCAL_MAX) elements of type: a small
 * accumulator the C compiler keeps in registers.  Declared by sc_ir_decl_local, read and
 * written with LOAD and STORE like a buffer.  Returns its id or -1. */
#define SC_IR_LOCAL_MAX 256
sc_ir_var sc_ir_new_local(sc_ir_builder *b, const char *name, sc_ir_type type, int32_t len);

/* Vectors of a value type, emitted with the C compiler's vector extension so the code is
 * vector code whatever its loop vectoriser decides: the function's vec_bytes (64 bytes,
 * 16 float or int32 or 8 double or int64 lanes, by default: one AVX-512 register; 32 where
 * the target has 256-bit registers, so a vector is one register there too), half or a
 * quarter of that.
 * sc_ir_vec_lanes: the full lane count of type in fn (0: not a vector type); a lane count
 * is valid when it is that, half or a quarter.  sc_ir_vec_bytes_ok: a width the IR
 * takes. */
#define SC_IR_VEC_BYTES 64
int32_t sc_ir_vec_lanes(const sc_ir_func *fn, sc_ir_type type);
bool sc_ir_vec_bytes_ok(int32_t bytes);
/* A vector variable of type (a value type) with lanes lanes. */
sc_ir_var sc_ir_new_vector(sc_ir_builder *b, const char *name, sc_ir_type type, int32_t lanes);

/* The value type of the kernel's dtype. */
sc_ir_type sc_ir_val_type(sc_dtype dt);
sc_ir_type sc_ir_idx_type(sc_index_type it);
bool sc_ir_is_int(sc_ir_type t);
/* Values (F32, F64, VI32, VI64) are a kind apart from indices and flags: arithmetic never
 * mixes the two.  VI32 / VI64 are int32 / int64 values, held in C's unsigned types of the
 * same width (the same bits): their sums, differences, products and negations wrap (two's
 * complement) without signed overflow, in vectors as in scalars. */
bool sc_ir_is_value(sc_ir_type t);
bool sc_ir_is_int_value(sc_ir_type t);

/* ---- Expression constructors (arena nodes; NULL once the builder failed) ---- */
const sc_ir_expr *sc_ir_var_ref(sc_ir_builder *b, sc_ir_var v);
const sc_ir_expr *sc_ir_int(sc_ir_builder *b, int64_t v);
/* A value constant (kind FLT) of value type t: sc_ir_flt takes a double (with an integer
 * value type: an integer it holds), sc_ir_int_value the exact integer of an integer value
 * type (VI32: in int32's range).  INTERNAL error otherwise. */
const sc_ir_expr *sc_ir_flt(sc_ir_builder *b, double v, sc_ir_type t);
const sc_ir_expr *sc_ir_int_value(sc_ir_builder *b, int64_t v, sc_ir_type t);
const sc_ir_expr *sc_ir_load(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx);
const sc_ir_expr *sc_ir_bin(sc_ir_builder *b, sc_ir_op op, const sc_ir_expr *x,
                            const sc_ir_expr *y);
const sc_ir_expr *sc_ir_neg(sc_ir_builder *b, const sc_ir_expr *x);
const sc_ir_expr *sc_ir_not(sc_ir_builder *b, const sc_ir_expr *x);
const sc_ir_expr *sc_ir_cast(sc_ir_builder *b, sc_ir_type t, const sc_ir_expr *x);
const sc_ir_expr *sc_ir_select(sc_ir_builder *b, const sc_ir_expr *c, const sc_ir_expr *x,
                               const sc_ir_expr *y);
/* A field of operand `operand` (-1: the output): pos/crd of a level (type = the index
 * type given), vals (type = value type), dims[level] (int64), num_threads (int). */
const sc_ir_expr *sc_ir_arg_ref(sc_ir_builder *b, sc_ir_arg arg, int32_t operand,
                                int32_t level, sc_ir_type type);
/* env->alloc of count elements of type (NULL on failure or size overflow). */
const sc_ir_expr *sc_ir_alloc(sc_ir_builder *b, sc_ir_type type, const sc_ir_expr *count);

/* The same without the zero fill: for buffers every element of which is written before
 * it is read. */
const sc_ir_expr *sc_ir_alloc_uninit(sc_ir_builder *b, sc_ir_type type, const sc_ir_expr *count);

/* The vector of buf[idx .. idx + lanes) (buf of a float type; no alignment needed). */
const sc_ir_expr *sc_ir_vload(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                              int32_t lanes);
/* The vector of lanes lanes (a valid lane count of buf's type) whose first count lanes are
 * buf[idx .. idx + count) and whose other lanes are 0 (1 <= count <= lanes at run time):
 * nothing past buf[idx + count) is read. */
const sc_ir_expr *sc_ir_vload_n(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                                const sc_ir_expr *count, int32_t lanes);
/* The vector of lanes lanes whose lane l < count is buf[crd[idx + l]] and whose other
 * lanes are 0 (1 <= count <= lanes at run time; buf of a float type, crd a readonly int32
 * buffer): a masked gather, reading nothing past crd[idx + count) and no element of buf
 * for the lanes past count.  lanes: half or a quarter of the full count, or the full 8
 * double lanes of a 64-byte vector (the gathers a 64-byte target has in one instruction,
 * with at most 8 32-bit coordinates: 8 or 4 float, 8, 4 or 2 double lanes). */
const sc_ir_expr *sc_ir_vgather_n(sc_ir_builder *b, sc_ir_var buf, sc_ir_var crd,
                                  const sc_ir_expr *idx, const sc_ir_expr *count, int32_t lanes);
/* The vector of lanes lanes each of which is the scalar x. */
const sc_ir_expr *sc_ir_splat(sc_ir_builder *b, const sc_ir_expr *x, int32_t lanes);
/* The sum of the lanes of the vector x (full, half or quarter width; a scalar). */
const sc_ir_expr *sc_ir_hsum(sc_ir_builder *b, const sc_ir_expr *x);

/* One step of the lane sums of several full-width vectors at once (a transpose-and-add):
 * x and y hold blocks of 2w lanes, each block the partial sums of one dot product; the
 * result holds blocks of w lanes, block t of it the halves of its source block added
 * lane by lane.  Where 2w lanes fit in 16 bytes, the result's blocks are placed segment
 * by segment (its 16-byte segment s: x's blocks from x's segment s, then y's), so both
 * shuffles stay within 128-bit lanes (one in-lane shuffle each with AVX or AVX-512);
 * wider: x's blocks first, then y's.  sc_ir_fold_src: the lane of the concatenation
 * (x, y) that result lane l's low (half 0) or high (half 1) addend comes from.  Starting
 * from G vectors (2w = all lanes) and folding pairs with w = lanes / 2, / 4, ..., every
 * lane of the last vector is the sum of one vector's lanes (which one: follow
 * sc_ir_fold_src).  w is a power of two below the full lane count (ival = w), or 0: the
 * last step of a single vector (x is y) whose blocks are lane pairs, pair t (lanes 2t and
 * 2t + 1) added into lanes t and t + W/2, so the sums come out in the order of the pairs,
 * in the low half (a cross-segment shuffle; the in-segment w = 1 leaves two sums per
 * 16-byte segment). */
const sc_ir_expr *sc_ir_fold(sc_ir_builder *b, const sc_ir_expr *x, const sc_ir_expr *y,
                             int32_t w);
int32_t sc_ir_fold_src(const sc_ir_func *fn, sc_ir_type type, int32_t w, int32_t half, int32_t l);
/* Lane `lane` (a constant) of the vector x (a scalar). */
const sc_ir_expr *sc_ir_lane(sc_ir_builder *b, const sc_ir_expr *x, int32_t lane);

/* Where the calling thread's share of the positions [lo, hi) of crd begins (end: where
 * it ends): hi - lo split into equal shares among the threads of the enclosing PARALLEL
 * statement (outside one: one thread, the whole range), each boundary moved forward past
 * the positions whose coordinate equals the one before it, so that no run of equal
 * coordinates is split and the shares tile [lo, hi).  crd: a readonly int32 or int64
 * buffer (a non-unique compressed level's coordinates: COO's rows). */
const sc_ir_expr *sc_ir_runsplit(sc_ir_builder *b, sc_ir_var crd, const sc_ir_expr *lo,
                                 const sc_ir_expr *hi, bool end);

/* The end of the run of equal coordinates that starts at position lo < hi of crd: the
 * first position after lo, at most hi, whose coordinate differs from crd[lo].  crd as
 * for sc_ir_runsplit, non-decreasing over [lo, hi) (every level is ordered), so the
 * end is found by doubling steps and then halving them: O(log run) loads, where a
 * scan takes one per entry (a run is a row of a COO level). */
const sc_ir_expr *sc_ir_runend(sc_ir_builder *b, sc_ir_var crd, const sc_ir_expr *lo,
                               const sc_ir_expr *hi);

/* The row of position p of a compressed level whose pos array is pos (readonly int32 or
 * int64): the first row q >= r with pos[q + 1] > p, for r <= that row < end (p an entry
 * of rows r .. end - 1, so pos[end] > p).  What `while (pos[r + 1] <= p) r++` finds,
 * without a branch per row: where AVX-512 is there, 16 (int32) or 8 (int64) rows' ends
 * in one compare (a run of short rows finds each entry's row this way). */
const sc_ir_expr *sc_ir_rowof(sc_ir_builder *b, sc_ir_var pos, const sc_ir_expr *r,
                              const sc_ir_expr *p, const sc_ir_expr *end);

/* 1 when the buffer variable buf is not NULL (after an ALLOC). */
const sc_ir_expr *sc_ir_nonnull(sc_ir_builder *b, sc_ir_var buf);

/* ---- Statement constructors ---- */
const sc_ir_stmt *sc_ir_block(sc_ir_builder *b, const sc_ir_stmt *const *items, int32_t n);
const sc_ir_stmt *sc_ir_decl(sc_ir_builder *b, sc_ir_var v, const sc_ir_expr *init);
/* Declaration of a local array (contents undefined until stored). */
const sc_ir_stmt *sc_ir_decl_local(sc_ir_builder *b, sc_ir_var v);
const sc_ir_stmt *sc_ir_assign(sc_ir_builder *b, sc_ir_var v, bool accumulate,
                               const sc_ir_expr *value);
const sc_ir_stmt *sc_ir_store(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                              bool accumulate, const sc_ir_expr *value);
/* buf[idx .. idx + lanes) = (or +=) the vector value. */
const sc_ir_stmt *sc_ir_vstore(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                               bool accumulate, const sc_ir_expr *value);
/* buf[idx .. idx + count) = (or +=) the first count lanes of the full-width vector value
 * (1 <= count <= its lanes at run time); nothing past buf[idx + count) is touched. */
const sc_ir_stmt *sc_ir_vstore_n(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx,
                                 bool accumulate, const sc_ir_expr *value,
                                 const sc_ir_expr *count);
/* for (v = lo; v < hi; v += step) body; v is declared by the loop.  A PAR_FOR runs
 * single-threaded when hi - lo is below SC_IR_PAR_MIN iterations. */
#define SC_IR_PAR_MIN 128
const sc_ir_stmt *sc_ir_for(sc_ir_builder *b, sc_ir_var v, const sc_ir_expr *lo,
                            const sc_ir_expr *hi, const sc_ir_expr *step, sc_ir_par par,
                            int32_t chunk, const sc_ir_stmt *body);
/* The same PAR_FOR/OMP_FOR with unit step, but split statically into one contiguous
 * range per thread of about equal weight, the weight of iteration v being
 * pos[v + 1] - pos[v] + 1 (nonzeros of a compressed row plus one): each thread finds its
 * bounds by binary search on pos[lo..hi], which must be nondecreasing.  Power-law rows
 * then leave no thread idle.  An OMP_FOR ends with a barrier as "omp for" does.  A
 * PAR_FOR runs on one thread unless it has 2 iterations and its total weight times work
 * (the cost of one unit of weight: the dense extents inside, NULL for 1) reaches
 * SC_IR_PAR_WORK: waking the other threads costs more than a small kernel, and a few
 * heavy rows (a short, wide matrix; a csf batch's matrices) are worth sharing. */
#define SC_IR_PAR_WORK 8192
const sc_ir_stmt *sc_ir_for_balanced(sc_ir_builder *b, sc_ir_var v, const sc_ir_expr *lo,
                                     const sc_ir_expr *hi, sc_ir_par par, sc_ir_var pos,
                                     const sc_ir_expr *work, const sc_ir_stmt *body);
/* A PAR_FOR (unit step, dynamic chunks of at most `chunk` iterations) whose every
 * iteration costs `work` (the dense extents inside it): besides from SC_IR_PAR_MIN
 * iterations it runs on all threads from 2 iterations whose work adds up to
 * SC_IR_PAR_WORK, and its chunks shrink (to 1) so that each thread gets about four:
 * a few heavy iterations (a batch's matrices) are shared, not all taken by the first
 * thread's first chunk. */
const sc_ir_stmt *sc_ir_for_weighed(sc_ir_builder *b, sc_ir_var v, const sc_ir_expr *lo,
                                    const sc_ir_expr *hi, int32_t chunk, const sc_ir_expr *work,
                                    const sc_ir_stmt *body);
/* The FOR loop s, marked for the C compiler not to vectorize.  For loops that carry
 * scalar sums the lowering already splits across registers, over entries read through
 * loaded coordinates: vectorizing them takes gathers and an in-order (strict IEEE) lane
 * reduction per step, which gcc 12 does for f32 and which made SpMV 1.5x slower. */
const sc_ir_stmt *sc_ir_scalar(sc_ir_builder *b, const sc_ir_stmt *s);
/* The balanced loop s over v (rows of the pos buffer it is balanced by), its iterations
 * taken two at a time by pair (iterations v and v + 1) while a thread's range holds two
 * more, its last one by its own body; only in a thread's range whose rows average at
 * least min (>= 0) entries (pos[e] - pos[b] >= min * (e - b)), elsewhere one at a time. */
const sc_ir_stmt *sc_ir_pairs(sc_ir_builder *b, const sc_ir_stmt *s, int32_t min,
                              const sc_ir_stmt *pair);
/* The balanced loop s over v (rows of the pos buffer it is balanced by), a row of at least
 * min entries (pos[v + 1] - pos[v]) by its body, each maximal run of shorter rows of a
 * thread's range, v .. end - 1, by run at once (end: an integer variable that the loop
 * declares for run). */
const sc_ir_stmt *sc_ir_runs(sc_ir_builder *b, const sc_ir_stmt *s, int32_t min, sc_ir_var end,
                             const sc_ir_stmt *run);
const sc_ir_stmt *sc_ir_while(sc_ir_builder *b, const sc_ir_expr *cond, const sc_ir_stmt *body);
const sc_ir_stmt *sc_ir_if(sc_ir_builder *b, const sc_ir_expr *cond, const sc_ir_stmt *then,
                           const sc_ir_stmt *orelse);
/* #pragma omp parallel region (threads from env) around body; when cond is given the
 * region runs on one thread unless cond holds (OpenMP's if clause). */
const sc_ir_stmt *sc_ir_parallel(sc_ir_builder *b, const sc_ir_expr *cond, const sc_ir_stmt *body);
/* Atomically set the int variable v to 1 (a failure flag shared by threads). */
const sc_ir_stmt *sc_ir_flag(sc_ir_builder *b, sc_ir_var v);
/* if (!cond) fail with status and message (only outside parallel regions). */
const sc_ir_stmt *sc_ir_require(sc_ir_builder *b, const sc_ir_expr *cond, sc_status status,
                                const char *msg);
const sc_ir_stmt *sc_ir_free(sc_ir_builder *b, sc_ir_var buf);
/* Sort buf[0..count) (int64 coordinates) ascending. */
const sc_ir_stmt *sc_ir_sort(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *count);
/* A set of coordinates in [0, N) as a two-level bitmap: bits, uint64 words of
 * ceil(N / 64) (coordinate c is bit c % 64 of word c / 64), and summary, uint64 words of
 * ceil(N / 4096) (bit w % 64 of word w / 64 set when bits word w may be nonzero); both
 * zero-filled when allocated, and all zero again after each COLLECT of everything marked.
 * MARK: if coordinate c is not in the set, add it and run then, else run orelse (NULL
 * allowed). */
const sc_ir_stmt *sc_ir_mark(sc_ir_builder *b, sc_ir_var bits, sc_ir_var summary,
                             const sc_ir_expr *c, const sc_ir_stmt *then,
                             const sc_ir_stmt *orelse);
/* MARK without a branch: add coordinate c to the set and set isnew (an int64 variable)
 * to 1 where it was not in it, else 0.  For fills whose every step does the same work
 * either way (the caller adds isnew rather than testing it): no mispredicted branch. */
const sc_ir_stmt *sc_ir_mark_new(sc_ir_builder *b, sc_ir_var bits, sc_ir_var summary,
                                 const sc_ir_expr *c, sc_ir_var isnew);
/* COLLECT: buf[start..start+count) holds every coordinate of the set, each once (int32
 * or int64 buffer); remove them all from the set and, when sort, order them ascending
 * (by scanning the bitmap where the coordinates are dense enough, else by sorting).
 * extent: the set's N (the bitmap's size), whose summary words a short set scans
 * whole. */
const sc_ir_stmt *sc_ir_collect(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *start,
                                const sc_ir_expr *count, sc_ir_var bits, sc_ir_var summary,
                                bool sort, const sc_ir_expr *extent);
/* A set of coordinates in [0, N) as byte flags: flags, N + 8 uint8 (zero-filled when
 * allocated; the 8 past N let a scan read whole words).  Flag c is set by storing 1.
 * SCAN: every flagged coordinate lies in [lo, hi]; write them ascending into
 * buf[start..] (int32 or int64 buffer), clear their flags and add their count to the
 * int64 variable total. */
const sc_ir_stmt *sc_ir_scan(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *start,
                             sc_ir_var flags, const sc_ir_expr *lo, const sc_ir_expr *hi,
                             sc_ir_var total);
/* SORTSUM: the entries buf[start..total) (int32 or int64 coordinates) and
 * vals[start..total) (the values paired with them, a float buffer) ordered by
 * coordinate, equal coordinates merged into one entry whose value is their sum (added
 * in their order before), and total (an int64 variable) set to the new end: start + the
 * number of distinct coordinates.  By insertion: for a handful of entries.  most > 0
 * promises at most that many entries: from SC_IR_SORT_VECTOR_MOST down, int32
 * coordinates with 32-bit values are sorted in vector registers where the target has
 * AVX-512 (runs of three or more equal coordinates then summed pairwise, not in order). */
#define SC_IR_SORT_VECTOR_MOST 128
const sc_ir_stmt *sc_ir_sortsum(sc_ir_builder *b, sc_ir_var buf, sc_ir_var vals,
                                const sc_ir_expr *start, sc_ir_var total, int32_t most);
/* A hint to fetch buf[idx] into the cache (no access: idx may be one past the end);
 * sc_ir_prefetch_write: the line will be written (fetched for ownership). */
const sc_ir_stmt *sc_ir_prefetch(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx);
const sc_ir_stmt *sc_ir_prefetch_write(sc_ir_builder *b, sc_ir_var buf, const sc_ir_expr *idx);
/* out->pos[level] / crd[level] / vals = value (a buffer); field POS, CRD or VALS. */
const sc_ir_stmt *sc_ir_out_set(sc_ir_builder *b, sc_ir_arg field, int32_t level,
                                const sc_ir_expr *value);
/* out->pos_len[level] / crd_len[level] / nvals = len; field POS, CRD or VALS. */
const sc_ir_stmt *sc_ir_out_len(sc_ir_builder *b, sc_ir_arg field, int32_t level,
                                const sc_ir_expr *len);
const sc_ir_stmt *sc_ir_comment(sc_ir_builder *b, const char *text);

/* Growable statement list for building blocks (arena-backed). */
typedef struct sc_ir_list {
    const sc_ir_stmt **items;
    int32_t n, cap;
} sc_ir_list;
void sc_ir_push(sc_ir_builder *b, sc_ir_list *l, const sc_ir_stmt *s);
const sc_ir_stmt *sc_ir_list_block(sc_ir_builder *b, const sc_ir_list *l);

/* Finish: fn->body = body.  Returns the builder's status. */
sc_status sc_ir_finish(sc_ir_builder *b, const sc_ir_stmt *body);

/* ---- Passes ---- */

/* Print fn as indented pseudo-code into buf (snprintf semantics: returns the full
 * length).  Borrowed fn. */
size_t sc_ir_print(const sc_ir_func *fn, char *buf, size_t n);

/* Check fn: every variable used is declared in an enclosing scope before use, types of
 * loads/stores/loop variables agree, no REQUIRE inside a parallel region, no nested
 * parallel regions.  INTERNAL error naming the first violation. */
sc_status sc_ir_verify(const sc_ir_func *fn, sc_error *err);

const char *sc_ir_type_name(sc_ir_type t);
const char *sc_ir_op_symbol(sc_ir_op op);
const char *sc_ir_arg_name(sc_ir_arg a);

#endif /* SC_IR_H */
