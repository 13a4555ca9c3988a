/* codegen/gen/gen_internal.h — what the generation files share (emit.h is their
 * public face): a stage's layout (tensors, slot buffers, frame buffers, the
 * memory plan's indices, message offsets), the emitter's state, and the small
 * helpers every one of them uses. Not for use outside codegen/gen_*.c and
 * codegen/gen/layers/ (the layer kinds' entries, gen_layer.h).
 *
 *   gen_prepare.c    pg_gen_prepare: per stage, parameters and other whole-step buffers, then the chunks
 *   gen_layout.c     a chunk's tensors, slot and frame buffers; frame buffer lifetimes into the memory plan
 *   gen_msgs.c       every message's arena offset, bytes and tag (activations, gradients, skips, ties)
 *   gen_layer.c      the layer kinds' table; one layer's statements per pass, its operands
 *   gen_chunk_fn.c   the chunk functions of stage<k>.c: frame tables, locals, the layers' statements
 *   gen_stage.c      stage<k>.c and <model>.h; pg_gen_write
 *   gen_plan_json.c  plan.json, the model's architecture hash, `pipegen plan`'s report
 *   gen_common.c     the helpers below */
#ifndef PG_GEN_INTERNAL_H
#define PG_GEN_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "base/bytes.h"
#include "gen/emit.h"

enum { LOC_INPUT, LOC_SLOT, LOC_FRAME };

typedef struct em_tensor {
    pg_shape shape;
    int dtype;
    int64_t numel;         /* per sample */
    int vloc, gloc;        /* LOC_*; gloc < 0: no gradient buffer */
    int vslot, gslot;      /* slot buffer index when LOC_SLOT */
    int64_t voff, goff;    /* frame offset per row... absolute frame offset for rmax rows */
    int need_grad;         /* the gradient is needed upstream */
    char what[128];
} em_tensor;

typedef struct em_slotbuf {
    char local[64];        /* its local in the generated functions: c0_x, c0_skip6_out */
    char note[160];
    pg_mp_cat cat;
    int64_t stride;        /* bytes per slot */
    int mp;                /* memplan index */
    /* >= 0: no buffer of its own; the slot buffer alias_sb of chunk
     * alias_chunk on the same stage, at that chunk's slot of the micro-batch */
    int alias_chunk, alias_sb;
    int count;             /* a decode chunk's: instances (one per decode micro-batch, or 1); 0 in the step's chunks */
} em_slotbuf;

typedef struct em_aux { /* frame-only buffers of one layer: frame buffer ids */
    int64_t off[10];
    int n;
} em_aux;

/* A frame buffer: one per interior tensor, gradient or saved statistic of a
 * chunk; each micro-batch has its own instance(s) in the memory plan. */
enum { PASS_F, PASS_B, PASS_W, PASS__COUNT };
typedef struct em_fbuf {
    int64_t bytes;          /* for rmax rows */
    char what[96];          /* "h.0.ln_1 out", "gradient of h.0.ln_1 out" */
    char shape[64];
    char name[80];          /* its local in the generated functions: h_0_ln_1_out, d_h_0_ln_1_out */
    int lo[PASS__COUNT], hi[PASS__COUNT]; /* layer steps of the chunk using it per pass, -1: none */
    int whole;              /* a decode chunk's buffer alive for the whole of generation (a KV cache), not one call */
} em_fbuf;

typedef struct em_chunk {
    int chunk, stage, first, last, is_first, is_last;
    int dec;               /* a decode chunk (gen_decode.c): tensors per token, one instance of each frame
                            * buffer (fb_mp[f]), slot buffers per decode micro-batch (io->slot) */
    int ntens;
    em_tensor *tens;
    int *lin, *lout;       /* per layer of the chunk: current tensor before/after */
    em_aux *aux;
    int x_slot, y_slot, dy_slot, dx_slot; /* slot buffer indices, -1 none */
    int x_local;           /* chunk-1 is on this stage: FWD copies its output into x */
    int slot_table;        /* another chunk of the stage reads this chunk's slot of a micro-batch */
    int *skin, *skgout, *skout, *skgin;   /* per skip: slot buffer index, -1 none */
    int *sktensor;         /* per skip: stash tensor when stashed in this chunk */
    int64_t *skgframe;     /* per skip: frame buffer id of the skip gradient (same-chunk skips) */
    int nsb;
    em_slotbuf sb[64];
    int nslots;
    em_fbuf *fb;           /* frame buffers */
    int nfb, fbcap, fb_oom;
    char (*pl)[2][80];     /* per model parameter: its locals (value, gradient) in the chunk's functions */
    int *fb_mp;            /* [(2 * mb + row) * nfb + f]: memplan index of the instance, -1 unused;
                            * row 0: the micro-batch's forward, 1: its backward (recompute, B, W) */
} em_chunk;

typedef struct em_stage {
    int stage;
    int nchunks;
    em_chunk *ch;          /* chunks held by this stage, in chunk order */
    pg_memplan mp;
    int *param_mp, *grad_mp, *opt_mp[2]; /* per model param: memplan index or -1 */
    int *layer_mp;         /* per layer: its whole-step buffer (batchnorm's sums; gen_layer.h), -1 */
    int *shadow_mp;        /* per model param: its bf16 shadow (precision = bf16 GEMM weights), -1 */
    int bf16ws_mp;         /* the bf16 GEMM operand copies (precision = bf16), -1 */
    int ws_mp;             /* tie workspace: the largest gradient block received, -1 */
    int input_mp, target_mp;
    int count_mp;      /* cross_entropy(ignore = id): the batch's counted target positions (a double), -1: none */
    int *act_slot;         /* per action: slot used (-1) */
    int *fwd_slot;         /* [nchunks x nmb]: the slot of local chunk i's FWD of micro-batch mb (-1), made once
                              (stage_fwd_slot): a scan of the action list per lookup was quadratic in nmb */
    int *act_tick;         /* per action: its first tick on the memory plan's timeline (plan_frames) */
    int nticks;
    int64_t *act_off, *act_bytes;
    uint32_t *act_tag;
    int64_t *send_bytes;   /* [nstages] */
    /* generation with the KV cache (gen_decode.c); dch NULL when the model does not decode */
    em_chunk *dch;         /* [nchunks]: the decode chunks, in ch's order */
    int dec_rows_mp;       /* the decode row table */
    int dec_nticks;        /* the decode timeline's end (it starts at nticks) */
    int64_t *dact_off, *dact_bytes; /* per decode action: its buffer and bytes per token row */
    uint32_t *dact_tag;
} em_stage;

struct pg_gen {
    const ir_model *m;
    const pg_schedule *s;
    pg_schedule ev;        /* the forward-only schedule of s (evaluation, --predict): its actions' origin in s */
    int64_t rmax;
    int64_t *mb_rows, *mb_first;
    int *recompute;        /* per mb */
    em_stage *st;
    int nstages;
    int64_t guard;         /* --guard-bytes: free bytes around every arena buffer (0: packed) */
    const char *auto_json; /* schedule = auto's candidates for plan.json, or NULL */
    const char *blocks_json; /* `stages = N`'s whole blocks or a split inside one, for plan.json, or NULL */
    int *nacc;             /* [nparams * nstages]: layers of stage s using param p (count_uses) */
    /* generation with the KV cache (gen_decode.c): on, or why not (dec_why, "" for
     * a model that is not a language model); its sizes and its schedule */
    int dec_on;
    char dec_why[320];
    int64_t dec_batch, dec_len, dec_prefill, dec_rows;
    int dec_nmb;
    pg_schedule dsched;
    int *acc_at;           /* [nlayers * 4]: layer i's k-th param: its accumulator index on its stage */
    int lend_sends;        /* the messages may be lent from the arena (pg_stage_desc.lend_sends) */
};


/* snprintf that truncates silently: names and notes are cosmetic and bounded */
void sfmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

typedef struct em_out {
    FILE *o;
    const pg_gen *g;
    const em_stage *S;
    const em_chunk *ch;
    em_fbuf *rec;          /* non-NULL: record each frame buffer's uses (plan_frames) */
    int pass, step;        /* PASS_*, and the chunk's layer step being emitted */
    char fx[8][48];        /* fa's expressions, used in turn (a few per statement) */
    int nfx;
} em_out;

/* ---- sizes and gradient accumulators (gen_common.c) ---- */

/* Every buffer, slot, frame tensor and gradient accumulator starts on a
 * PG_MP_ALIGN (256) byte boundary: cuBLAS may pick its kernel by operand
 * alignment, so an op must see the same alignment whatever the stage count. */
static inline int64_t al_plan(int64_t x) { return (x + PG_MP_ALIGN - 1) / PG_MP_ALIGN * PG_MP_ALIGN; }
/* Floats from one gradient accumulator of parameter p to the next. */
int64_t acc_numel(const ir_param *P);
/* Bytes of n consecutive accumulators of P (the last one unpadded): one tie message. */
int64_t acc_block_bytes(const ir_param *P, int n);
static inline int64_t last_dim(const pg_shape *s) { return s->rank ? s->dim[s->rank - 1] : 1; }
/* "[r, 512]": a per-micro-batch shape of r rows */
void shape_rows(const pg_shape *s, char *buf, size_t n);
/* Count every layer's uses of every parameter (g->nacc, g->acc_at). */
int count_uses(pg_gen *g);
/* Gradient accumulators of param p on stage s (0: unused there), and at least 1. */
int stage_nacc(const pg_gen *g, int s, int p);
int nacc_of(const pg_gen *g, int s, int p);
/* cross-stage tie: a tie mode and two or more using stages */
int is_tied(const ir_param *P);
/* the stage table needs nacc per stage: several uses somewhere, or tied */
int needs_nacc_table(const pg_gen *g, int p);
/* does layer L use parameter p */
int layer_uses(const ir_layer *L, int p);

/* ---- chunks, slots (gen_common.c) ---- */

em_chunk *find_chunk(em_stage *S, int chunk);
const em_chunk *find_chunk_c(const em_stage *S, int chunk);
/* the stage holding chunk c: the schedule's placement (schedule.h) */
int chunk_stage(const pg_gen *g, int c);
/* the first and last layer of chunk c (layers are in chunk order), -1 when none */
void chunk_layers(const ir_model *m, int c, int *first, int *last);
/* the slot of action kind k of (chunk, mb) on the stage, -1 none */
/* The activation slot of chunk's FWD of micro-batch mb on stage S (S->fwd_slot), -1 when none. */
int stage_fwd_slot(const em_stage *S, int nmb, int chunk, int mb);
/* Fill S->fwd_slot from the stage's action list (after the slots are assigned); 0, or -1 out of memory. */
int index_fwd_slots(em_stage *S, const pg_stage_sched *ss, int nmb);
/* arena offset of slot buffer sb of ch at a slot */
int64_t slot_off(const pg_memplan *mp, const em_chunk *ch, int sb, int slot);

/* ---- names in the generated C (gen_common.c) ---- */

/* A C identifier for a buffer described as `what`: "h.0.ln_1 out" ->
 * h_0_ln_1_out, "gradient of h.0.ln_1 out" -> d_h_0_ln_1_out. */
void c_local(const char *what, char *buf, size_t n);
/* id is one of the chunk functions' own names (arguments, C keywords, pg_ and PG_ names) */
int c_own_name(const char *id);
/* The local holding this micro-batch's rows of the model input. */
void input_local(const ir_model *m, char *buf, size_t n);
/* An upper-case C identifier: "h.0" -> H_0 */
void cident(const char *s, char *buf, size_t n);
/* parameter p's (grad 0) or its gradient accumulators' (grad 1) local in ch's functions:
 * h_0_ln_1_w, d_h_0_ln_1_w (name_params) */
const char *plocal(const em_chunk *ch, int p, int grad);

/* ---- JSON text (gen_common.c) ---- */

void json_str(FILE *o, const char *s); /* also a C string literal: names have no control characters */
void json_shape(FILE *o, const pg_shape *s);
void json_num(FILE *o, double v);
/* the last path component: generated files name their source without its folder */
const char *base_name(const char *p);

/* ---- a layer's operands in the generated C (gen_layer.c) ---- */

/* Note a use of frame buffer id in the current pass and layer step. */
void frame_use(em_out *e, int64_t id);
/* Frame buffer id's local (a float pointer at its offset in this
 * micro-batch's row of frame_c<k>, declared where it is used). */
const char *fa(em_out *e, int64_t id);
/* value / gradient of tensor t as a C expression */
void tval(em_out *e, int t, char *buf, size_t n);
void tgrad(em_out *e, int t, char *buf, size_t n);
/* n for a layer input: rows * every dim but the last */
void nexpr(const em_tensor *T, char *buf, size_t sz);
/* every element of a layer input: rows * numel per sample */
void cexpr(const em_tensor *T, char *buf, size_t sz);

/* ---- across the files ---- */

int layout_chunk(pg_gen *g, em_stage *S, em_chunk *ch, pg_diag *d);  /* gen_layout.c */
/* a chunk's tables for its layers and nsk skips (tensors, layer inputs and outputs, saved buffers,
 * skip buffers at -1), or -1 out of memory; and their release (gen_layout.c) */
int chunk_tables(em_chunk *ch, int nsk);
void chunk_free(em_chunk *ch);
/* a new tensor of the chunk, in a frame buffer (gen_layout.c): its index */
int new_tensor(em_chunk *ch, const pg_shape *sh, int dtype, const char *what);
/* a chunk's locals of the parameters its layers use (gen_layout.c): 0, -1 out of memory */
int name_params(const ir_model *m, em_chunk *ch);
/* unique names for the chunk's frame buffers (gen_layout.c): 0, -1 out of memory */
int unique_fb_names(em_chunk *ch);
/* generation with the KV cache (gen_decode.c): whether and how the model decodes
 * (before the stages), a stage's decode chunks and buffers (after its frames are
 * planned), its decode messages (after the memory plan), and the dec functions */
int dec_plan(pg_gen *g, pg_diag *d);
int dec_layout_stage(pg_gen *g, em_stage *S, pg_diag *d);
int dec_plan_messages(pg_gen *g, em_stage *S, pg_diag *d);
void dec_free_stage(em_stage *S);
int emit_dec_fn(em_out *e);                                           /* gen_chunk_fn.c */
void emit_layer_dec(em_out *e, int i);                                /* gen_layer.c */
int plan_frames(pg_gen *g, em_stage *S, pg_diag *d);                  /* gen_layout.c */
int plan_messages(pg_gen *g, em_stage *S, pg_diag *d);                /* gen_msgs.c */
int emit_chunk_fns(em_out *e);                                        /* gen_chunk_fn.c */
/* one layer's statements of each pass into e->o (gen_layer.c) */
void emit_layer_fwd(em_out *e, int i);
void emit_layer_bwd_b(em_out *e, int i);
void emit_layer_bwd_w(em_out *e, int i);
/* the gradients' hook after layer i's weight-gradient code, where it finishes one (gen_layer.c) */
void emit_grads_final(em_out *e, int i);
/* the layer whose weight-gradient code alone finishes param p's gradient on S, -1 (pg_param_desc.grad_layer) */
int grad_layer_of(const pg_gen *g, const em_stage *S, int p);
/* model layer i's index in S's layer table (pg_stage_desc.layers), -1 */
int stage_layer_at(const em_stage *S, int i);
uint64_t model_arch_hash(const pg_gen *g);                            /* gen_plan_json.c */
void json_layer_attrs(FILE *o, const ir_model *m, const ir_layer *L); /* gen_plan_json.c */

#endif
