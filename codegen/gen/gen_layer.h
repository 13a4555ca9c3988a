/* codegen/gen/gen_layer.h — what the code generator knows of each layer kind, in
 * one place per kind: an entry (gen_layer_kind) in codegen/gen/layers/<family>.c,
 * listed once in gen_layer.c's table. The generic code (gen_prepare.c,
 * gen_layout.c, gen_layer.c, gen_chunk_fn.c, gen_stage.c, gen_plan_json.c)
 * asks the entry and never names a kind.
 *
 * An emitter writes its statements into e->o with the operands in *a. It reads
 * the input's value or gradient with em_x / em_dx and frame buffers with fa():
 * each call notes a use of a frame buffer in the current pass and layer step,
 * and those uses are the buffers' lifetimes in the memory plan (plan_frames),
 * so an emitter reads only what its statements use. */
#ifndef PG_GEN_LAYER_H
#define PG_GEN_LAYER_H

#include "gen/gen_internal.h"
#include "pg_bf16ws.h"
#include "pg_conv.h"

/* One layer's operands as C text, filled by gen_layer.c before an emitter runs. */
typedef struct em_layer {
    int i, li;                 /* the layer's index in the model, its step in the chunk */
    const ir_layer *L;
    int tin, tout;             /* its input and output tensors (indices into the chunk's tens) */
    const em_tensor *in, *out;
    int dx_wanted;             /* the input's gradient is needed upstream */
    char n[64];                /* rows times every input dim but the last: "r * 64" */
    char cnt[64];              /* every input element: "r * 4096" */
    char shi[96], sho[96];     /* input and output shapes: "[r, 64, 128]" */
    char x[64], y[64];         /* forward: the input and output values */
    char dx[64], dy[64];       /* backward: the input gradient (em_dx), the output gradient */
    char p[PG_MAX_LAYER_PARAMS][128];          /* forward, backward-input: the parameters' locals ("" past nparam);
                                * backward-weight: this use's gradient accumulators ("NULL" for none) */
} em_layer;

/* the input's value into a->x, its gradient into a->dx (a noted use of its frame buffer) */
void em_x(em_out *e, em_layer *a);
void em_dx(em_out *e, em_layer *a);

typedef struct gen_layer_kind {
    /* the layer produces no tensor of its own: the current tensor passes through
     * (stash); otherwise a new one, "<name> out", with the layer's output shape */
    int passes_through;
    /* bit k: param[k] is a GEMM weight (the CPU runtime packs it once a step; with
     * precision = bf16, a bf16 shadow copy) */
    unsigned gemm_weights;
    /* the same for a kind whose parameters depend on its attributes (attention
     * without biases, with separate projections); NULL: gemm_weights */
    unsigned (*gemm_weights_of)(const ir_layer *L);
    /* the forward tells the step's forward from a recompute (the `first` argument) */
    int fwd_uses_first;
    /* the input is token ids: the first such layer's vocab is the stage's input vocab */
    int reads_tokens;
    /* an elementwise activation: its ops are pg_<act>_fwd and pg_<act>_bwd_in
     * (pg_ops.h's pg_act_fwd_fn, pg_act_bwd_fn), which a store_act layer beside
     * it applies in its GEMM's store; NULL: not one */
    const char *act;
    /* its forward's product is followed, in the same call, by the activation
     * layer after it (fwd_act), and its backward-input's product by the
     * backward of the activation layer before it (bwd_act): gen_layer.c's
     * fused_act_after / fused_act_before say when */
    int store_act;
    void (*fwd_act)(em_out *e, em_layer *a, const char *act, const char *y);
    void (*bwd_act)(em_out *e, em_layer *a, const char *act, const char *s, const char *dx);
    /* The residual add and the norm after it in one pass over the rows
     * (gen_layer.c's fused_add_norm, fused_skip_norm):
     * is_add: this layer (pop ... add) writes x + s, its skip s's C text from
     * add_skip; fwd_add: a norm's forward computing its input a->x as x + s
     * first; skip_grad: a stash's skip gradient's C text, which its backward
     * adds to the tensor's gradient; bwd_add: a norm's backward-input adding
     * ds to its dx. */
    int (*is_add)(const ir_model *m, const ir_layer *L);
    void (*add_skip)(em_out *e, em_layer *a, char *s, size_t n);
    void (*fwd_add)(em_out *e, em_layer *a, const char *x, const char *s);
    void (*skip_grad)(em_out *e, em_layer *a, char *ds, size_t n);
    void (*bwd_add)(em_out *e, em_layer *a, const char *ds);

    /* With precision = bf16: the bytes of bf16 operand copies its largest GEMM
     * takes on the CUDA runtime for R samples (runtime/core/pg_bf16ws.h), which
     * the plan reserves once per stage for its largest; NULL: no GEMM. */
    int64_t (*bf16_ws)(const ir_layer *L, int64_t R);

    /* Refuse a model this kind cannot train (batch, micro-batches) with a located
     * error; -1 then. NULL: every model. */
    int (*check)(const ir_model *m, const ir_layer *L, pg_diag *d);
    /* Its whole-step buffer on its stage (a memory-plan index, S->layer_mp[i]). NULL: none. */
    int (*stage_buffer)(em_stage *S, const ir_layer *L);
    /* The slot buffers it exchanges with other chunks while the chunk is laid out
     * (cur: the current tensor before it); -1 with an error. NULL: none. */
    int (*slots)(pg_gen *g, em_stage *S, em_chunk *ch, int i, int cur, pg_diag *d);
    /* The frame buffers its forward saves for its backward (into ch->aux[i - ch->first],
     * frame_alloc), for R rows. NULL: none. */
    void (*saved)(const ir_model *m, em_chunk *ch, int i, int64_t R);

    void (*fwd)(em_out *e, em_layer *a);   /* forward */
    void (*bwd_b)(em_out *e, em_layer *a); /* backward-input: dx from dy (and skip gradients) */
    void (*bwd_w)(em_out *e, em_layer *a); /* backward-weight: into a->p; NULL: no weights, no code */
    /* plan.json's "attrs" members (and so the architecture hash); NULL: none */
    void (*json_attrs)(FILE *o, const ir_model *m, const ir_layer *L);

    /* Generation with the KV cache (gen_decode.c): a decode call runs the layer
     * on r = sequences x t new positions, its tensors per token (the positions
     * dimension dropped). per_token: in inference the layer treats each
     * position alone, so `fwd` serves as it is; dec: its own statements
     * (attention: the cache; pos_embed: the positions; batchnorm: its running
     * statistics alone); dec_saved: its frame buffers there, for R token rows
     * (NULL: `saved`); dec_check: why this layer cannot decode (NULL: it can).
     * A kind with neither per_token nor dec cannot. */
    int per_token;
    void (*dec)(em_out *e, em_layer *a);
    void (*dec_saved)(const pg_gen *g, em_chunk *ch, int i, int64_t R);
    const char *(*dec_check)(const ir_layer *L);
} gen_layer_kind;

/* The rows a layer's GEMMs take for R samples: R times every dimension of its
 * input but the last. */
static inline int64_t gen_gemm_rows(const ir_layer *L, int64_t R)
{
    int64_t n = R;
    for (int k = 0; k + 1 < L->in.rank; k++)
        n *= L->in.dim[k];
    return n;
}

/* bf16_ws of a kind whose products are linear ops in_features -> out_features
 * (linear; swiglu's gate and up projections, one after the other) */
static inline int64_t gen_bf16ws_in_out(const ir_layer *L, int64_t R)
{
    return pg_bf16ws_linear(gen_gemm_rows(L, R), L->in_features, L->out_features);
}

/* Kind k's entry; NULL: the code generator does not do it (yet). */
const gen_layer_kind *gen_layer_kind_of(ir_layer_kind k);

/* ---- for the entries: a window's geometry (layers/conv.c) ---- */

/* The pg_conv of a conv2d, conv1d, conv_transpose2d, maxpool2d or avgpool2d
 * layer (runtime/core/pg_conv.h), and its C text: a compound literal
 * `&(const pg_conv){.in = .., ...}` for the op's argument. */
pg_conv gen_conv_geom(const ir_layer *L);
void gen_conv_text(const pg_conv *g, char *buf, size_t n);
/* The same geometry as an initializer `{.in = .., ...}` (the stage's table). */
void gen_conv_init(const pg_conv *g, char *buf, size_t n);
/* Stage S's distinct convolution geometries (conv2d, conv1d,
 * conv_transpose2d; pooling aside), in layer order: their count, and with
 * out, the array (malloc'd, the caller frees it; NULL when none); -1 out of
 * memory. The CUDA runtime makes each one's cuDNN plan at start-up
 * (pg_stage_desc.convs). */
int gen_stage_convs(const ir_model *m, const em_stage *S, pg_conv **out);
/* Stage S's GEMM weights: gw[p] = 1 (gw: [m->nparams]) for each model
 * parameter that a layer of S reads as a GEMM's B (gen_layer_kind's
 * gemm_weights), a matrix; their count, and with bytes, what the CPU runtime
 * reserves at most for their copies packed once a step (both ways, panels
 * of 32 columns: the widest kernel's). pg_stage_desc.gemm_weights. */
int gen_stage_gemm_weights(const ir_model *m, const em_stage *S, unsigned char *gw, int64_t *bytes);

/* ---- for the entries: the layout (gen_layout.c) ---- */

/* A new frame buffer of the chunk: its id, or -1 out of memory (ch->fb_oom set). */
int64_t frame_alloc(em_chunk *ch, int64_t bytes, const char *what, const char *shape);
/* A slot buffer of the chunk (one instance per activation slot): its index, -1 when full. */
int add_slotbuf(em_chunk *ch, const char *local, const char *note, pg_mp_cat cat, int64_t stride);
/* A slot buffer of ch that is buffer sb of chunk `to` (laid out before it, on the same
 * stage) at to's slot of the micro-batch: read or written in place. */
int add_alias(em_chunk *ch, const char *local, const char *note, em_chunk *to, int sb);

#endif
