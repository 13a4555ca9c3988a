/* codegen/gen/gen_plan_json.c — what a generation says about itself: plan.json
 * (model, partition, schedule and memory of every stage, with its hash), the
 * model's architecture hash (the checkpoint identity), and `pipegen plan`'s
 * report of bytes per stage and category. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen_layer.h"

/* ---- pipegen plan ------------------------------------------------------------ */

static void print_bytes(FILE *o, const char *what, int64_t b)
{
    if (b > PG_BYTES_LIMIT) /* a saturated sum (base/bytes.h) */
        fprintf(o, "  %-20s more than %" PRId64 " bytes\n", what, PG_BYTES_LIMIT);
    else
        fprintf(o, "  %-20s %12.3f MiB  %14" PRId64 " bytes\n", what, (double)b / (1024.0 * 1024.0), b);
}

/* The tick at which the stage's live buffers take the most bytes; their bytes
 * per category then in cat[MP__COUNT]. -1 when nothing is timed. */
static int peak_tick(const em_stage *S, int64_t *cat)
{
    int n = S->nticks, best = -1;
    int64_t *diff = calloc((size_t)n + 2, sizeof *diff), run = 0, max = -1;
    for (int c = 0; c < MP__COUNT; c++)
        cat[c] = 0;
    if (!diff)
        return -1;
    for (int b = 0; b < S->mp.n; b++) {
        const pg_mp_buf *B = &S->mp.buf[b];
        if (B->first_use == PG_MP_WHOLE_STEP || B->first_use < 0 || B->last_use >= n)
            continue;
        diff[B->first_use] += al_plan(B->bytes);
        diff[B->last_use + 1] -= al_plan(B->bytes);
    }
    for (int t = 0; t < n; t++) {
        run += diff[t];
        if (run > max)
            max = run, best = t;
    }
    free(diff);
    for (int b = 0; b < S->mp.n; b++) {
        const pg_mp_buf *B = &S->mp.buf[b];
        if (B->first_use == PG_MP_WHOLE_STEP || (best >= 0 && B->first_use <= best && best <= B->last_use))
            cat[B->cat] += al_plan(B->bytes);
    }
    return best;
}

/* The action running at tick t. */
static int action_at(const em_stage *S, int n, int t)
{
    int a = 0;
    while (a + 1 < n && S->act_tick[a + 1] <= t)
        a++;
    return a;
}

void pg_gen_report(const pg_gen *g, FILE *o)
{
    const ir_model *m = g->m;
    static const char *const ck[] = {"always", "except_last", "never"};
    fprintf(o, "model %s: %d stages, %d chunks, batch %" PRId64 " in %" PRId64 " micro-batches (%" PRId64
               " rows max), checkpoint %s\n",
            m->name, m->nstages, m->nchunks, m->train.batch, m->train.microbatches, g->rmax, ck[m->train.checkpoint]);
    if (g->dec_on)
        fprintf(o, "generation with the KV cache: %" PRId64 " sequences at a time in %d micro-batches, %" PRId64
                   " positions each, prompts in pieces of %" PRId64 "\n", g->dec_batch, g->dec_nmb, g->dec_len,
                g->dec_prefill);
    else if (g->dec_why[0])
        fprintf(o, "no generation with the KV cache: %s\n", g->dec_why);
    int64_t total = 0, unshared = 0;
    for (int k = 0; k < g->nstages; k++) {
        const em_stage *S = &g->st[k];
        fprintf(o, "stage %d (", k);
        for (int i = 0; i < S->nchunks; i++)
            fprintf(o, "%schunk %d: %d slots", i ? ", " : "", S->ch[i].chunk, S->ch[i].nslots);
        fprintf(o, ")\n");
        for (int c = 0; c < MP__COUNT; c++) {
            int64_t b = pg_mp_cat_bytes(&S->mp, (pg_mp_cat)c);
            if (b)
                print_bytes(o, pg_mp_cat_name((pg_mp_cat)c), b);
        }
        int64_t before = pg_mp_unshared_bytes(&S->mp);
        print_bytes(o, "before sharing", before);
        print_bytes(o, "arena", S->mp.total);
        int64_t cat[MP__COUNT];
        int t = peak_tick(S, cat);
        if (t >= 0) {
            const pg_stage_sched *ss = &g->s->stage[k];
            char buf[160];
            fprintf(o, "  at the peak (tick %d, %s):\n", t, pg_act_str(&ss->act[action_at(S, ss->n, t)], buf, sizeof buf));
            for (int c = 0; c < MP__COUNT; c++)
                if (cat[c]) {
                    char what[64];
                    sfmt(what, sizeof what, "  %s", pg_mp_cat_name((pg_mp_cat)c));
                    print_bytes(o, what, cat[c]);
                }
        }
        if (S->dch)
            fprintf(o, "  generation after training: its buffers share bytes with the step's activations\n");
        unsigned char *gw = calloc((size_t)m->nparams + 1, 1);
        int64_t gw_bytes = 0;
        int ngw = gw ? gen_stage_gemm_weights(m, S, gw, &gw_bytes) : 0; /* out of memory: no note */
        free(gw);
        if (ngw && gw_bytes > PG_BYTES_LIMIT)
            fprintf(o, "  CPU: %d GEMM weight%s packed once a step (W^T and W): more than %" PRId64 " bytes, more "
                       "than the CPU runtime's cap (runtime/cpu/README.md)\n",
                    ngw, ngw == 1 ? "" : "s", PG_BYTES_LIMIT);
        else if (ngw)
            fprintf(o, "  CPU: %d GEMM weight%s packed once a step (W^T and W), at most %.3f MiB (%" PRId64 " bytes) "
                       "beside the arena, reserved at start-up (runtime/cpu/README.md)\n", ngw, ngw == 1 ? "" : "s",
                    (double)gw_bytes / 1048576.0, gw_bytes);
        int nconvs = gen_stage_convs(m, S, NULL); /* -1 (out of memory): no note */
        if (nconvs > 0)
            fprintf(o, "  GPU: %d convolution geometr%s through cuDNN, planned at start-up; the cuDNN workspace is "
                       "sized on the GPU then (its bytes depend on the GPU's algorithms), allocated once, outside the "
                       "arena\n", nconvs, nconvs == 1 ? "y" : "ies");
        total = pg_bytes_add(total, S->mp.total);
        unshared = pg_bytes_add(unshared, before);
    }
    fprintf(o, "all stages\n");
    print_bytes(o, "before sharing", unshared);
    print_bytes(o, "arenas", total);
}

/* ---- plan.json ---------------------------------------------------------------- */

static const char *const sched_names[] = {"gpipe", "1f1b", "interleaved", "zb1", "file", "zbv", "auto"};
static const char *const ckpt_names[] = {"always", "except_last", "never"};
static const char *const loss_names[] = {"mse_sum", "mse_mean", "cross_entropy"};
static const char *const optim_names[] = {"sgd", "adamw", "adam"};
static const char *const lr_names[] = {"constant", "cosine", "linear", "inverse_sqrt"};
static const char *const init_names[] = {"zeros", "ones", "uniform", "normal"};
static const char *const tie_names[] = {"none", "replicate", "transmit"};

void json_layer_attrs(FILE *o, const ir_model *m, const ir_layer *L)
{
    const gen_layer_kind *K = gen_layer_kind_of(L->kind);
    fprintf(o, "\"attrs\": {");
    if (K && K->json_attrs)
        K->json_attrs(o, m, L);
    fprintf(o, "}");
}

/* FNV-1a 64 (= the runtime's pg_hash64 from the FNV offset basis). */
static uint64_t fnv1a64(const char *text, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)text[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

char *pg_gen_plan_json(const pg_gen *g, uint64_t *hash)
{
    const ir_model *m = g->m;
    const ir_train *t = &m->train;
    char *text = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&text, &len);
    if (!o)
        return NULL;
    fprintf(o, "{\n  \"format\": \"pipegen-plan\",\n  \"version\": 1,\n  \"pipegen\": \"%s\",\n", PIPEGEN_VERSION);
    fprintf(o, "  \"model\": ");
    json_str(o, m->name);
    fprintf(o, ",\n  \"source\": ");
    json_str(o, base_name(m->source_path));
    fprintf(o, ",\n  \"input\": {\"name\": ");
    json_str(o, m->input_name);
    fprintf(o, ", \"dtype\": \"%s\", \"shape\": ", pg_dtype_name(m->input_dtype));
    json_shape(o, &m->input);
    fprintf(o, "},\n  \"target\": {\"name\": ");
    json_str(o, m->target_name);
    fprintf(o, ", \"dtype\": \"%s\", \"shape\": ", pg_dtype_name(m->target_dtype));
    json_shape(o, &m->target);
    fprintf(o, "},\n  \"train\": {\"batch\": %" PRId64 ", \"microbatches\": %" PRId64 ", \"schedule\": \"%s\", "
               "\"interleave\": %d, \"checkpoint\": \"%s\", \"loss\": \"%s\", \"optimizer\": \"%s\", \"lr\": ",
            t->batch, t->microbatches, sched_names[t->schedule], t->interleave, ckpt_names[t->checkpoint],
            loss_names[t->loss], optim_names[t->optimizer]);
    json_num(o, t->lr);
    if (t->ignore_index != PG_NO_IGNORE) /* only then: other plans (and their hashes) stay as they were */
        fprintf(o, ", \"ignore\": %" PRId64, t->ignore_index);
    fprintf(o, ", \"momentum\": ");
    json_num(o, t->momentum);
    fprintf(o, ", \"weight_decay\": ");
    json_num(o, t->weight_decay);
    fprintf(o, ", \"beta1\": ");
    json_num(o, t->beta1);
    fprintf(o, ", \"beta2\": ");
    json_num(o, t->beta2);
    fprintf(o, ", \"eps\": ");
    json_num(o, t->adam_eps);
    fprintf(o, ", \"lr_schedule\": \"%s\", \"warmup\": %" PRId64 ", \"lr_min\": ",
            lr_names[t->lr_schedule], t->warmup);
    json_num(o, t->lr_min);
    fprintf(o, ", \"steps\": %" PRId64 ", \"grad_clip\": ", t->steps);
    json_num(o, t->grad_clip);
    fprintf(o, ", \"seed\": %" PRIu64 ", \"precision\": \"%s\", \"shuffle\": %s, \"eval_every\": %" PRId64
               ", \"eval_batches\": %" PRId64 "},\n", t->seed, pg_dtype_name(t->precision), t->shuffle ? "true" : "false",
            t->eval_every, t->eval_batches);
    if (g->auto_json) /* only then: other plans stay as they were */
        fprintf(o, "  \"auto\": %s,\n", g->auto_json);
    if (g->blocks_json) /* likewise */
        fprintf(o, "  \"blocks\": %s,\n", g->blocks_json);
    fprintf(o, "  \"microbatch_rows\": [");
    for (int64_t i = 0; i < t->microbatches; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", g->mb_rows[i]);
    fprintf(o, "],\n");
    if (g->dec_on) /* generation with the KV cache (gen_decode.c) */
        fprintf(o, "  \"generate\": {\"batch\": %" PRId64 ", \"microbatches\": %d, \"length\": %" PRId64
                   ", \"prefill\": %" PRId64 "},\n", g->dec_batch, g->dec_nmb, g->dec_len, g->dec_prefill);
    fprintf(o, "  \"layers\": [\n");
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        fprintf(o, "    {\"name\": ");
        json_str(o, L->name);
        fprintf(o, ", \"kind\": \"%s\", \"chunk\": %d, \"stage\": %d, \"in_dtype\": \"%s\", \"in\": ",
                layer_kind_name(L->kind), L->chunk, L->stage, pg_dtype_name(L->in_dtype));
        json_shape(o, &L->in);
        fprintf(o, ", \"out\": ");
        json_shape(o, &L->out);
        fprintf(o, ", ");
        json_layer_attrs(o, m, L);
        fprintf(o, ", \"params\": [");
        for (int k = 0; k < L->nparam; k++) {
            fprintf(o, "%s", k ? ", " : "");
            if (L->param[k] >= 0)
                json_str(o, m->params[L->param[k]].name);
            else
                fprintf(o, "null");
        }
        fprintf(o, "], \"buffers\": [");
        for (int k = 0; k < L->nbuffer; k++) {
            fprintf(o, "%s", k ? ", " : "");
            json_str(o, m->params[L->buffer[k]].name);
        }
        fprintf(o, "]}%s\n", i + 1 < m->nlayers ? "," : "");
    }
    fprintf(o, "  ],\n  \"params\": [\n");
    for (int p = 0; p < m->nparams; p++) {
        const ir_param *P = &m->params[p];
        fprintf(o, "    {\"name\": ");
        json_str(o, P->name);
        fprintf(o, ", \"shape\": ");
        json_shape(o, &P->shape);
        fprintf(o, ", \"dtype\": \"%s\", \"init\": \"%s\", \"scale\": ", pg_dtype_name(P->dtype), init_names[P->init]);
        json_num(o, P->init_scale);
        fprintf(o, ", \"decay\": %s, \"weight_decay\": ", P->decay ? "true" : "false");
        json_num(o, P->weight_decay);
        fprintf(o, ", \"buffer\": %s, \"stages\": [", P->is_buffer ? "true" : "false");
        int first = 1;
        for (int k = 0; k < 64; k++)
            if (P->stage_mask >> k & 1) {
                fprintf(o, "%s%d", first ? "" : ", ", k);
                first = 0;
            }
        fprintf(o, "], \"owner\": %d, \"tie\": \"%s\"}%s\n", P->owner_stage, tie_names[P->tie],
                p + 1 < m->nparams ? "," : "");
    }
    fprintf(o, "  ],\n  \"skips\": [\n");
    for (int k = 0; k < m->nskips; k++) {
        const ir_skip *sk = &m->skips[k];
        fprintf(o, "    {\"name\": ");
        json_str(o, sk->name);
        fprintf(o, ", \"stash\": ");
        json_str(o, m->layers[sk->stash_layer].name);
        fprintf(o, ", \"pop\": ");
        json_str(o, m->layers[sk->pop_layer].name);
        fprintf(o, ", \"mode\": \"%s\", \"shape\": ", sk->mode == POP_ADD ? "add" : "concat");
        json_shape(o, &sk->shape);
        fprintf(o, "}%s\n", k + 1 < m->nskips ? "," : "");
    }
    fprintf(o, "  ],\n  \"partition\": {\"nchunks\": %d, \"nstages\": %d, \"placement\": \"%s\", \"chunks\": [",
            m->nchunks, m->nstages, pg_placement_name(g->s->placement));
    for (int c = 0; c < m->nchunks; c++) {
        int first, last;
        chunk_layers(m, c, &first, &last);
        fprintf(o, "%s{\"chunk\": %d, \"stage\": %d, \"first_layer\": %d, \"last_layer\": %d}", c ? ", " : "", c,
                first >= 0 ? m->layers[first].stage : -1, first, last);
    }
    fprintf(o, "]},\n  \"stages\": [\n");
    for (int k = 0; k < g->nstages; k++) {
        const em_stage *S = &g->st[k];
        const pg_stage_sched *ss = &g->s->stage[k];
        fprintf(o, "    {\"stage\": %d, \"arena_bytes\": %" PRId64 ",", k, S->mp.total);
        if (g->guard) /* only then: plans without guard gaps stay as they were */
            fprintf(o, " \"guard_bytes\": %" PRId64 ",", g->guard);
        fprintf(o, "\n      \"memory\": {");
        for (int c = 0; c < MP__COUNT; c++)
            fprintf(o, "%s\"%s\": %" PRId64, c ? ", " : "", pg_mp_cat_name((pg_mp_cat)c),
                    pg_mp_cat_bytes(&S->mp, (pg_mp_cat)c));
        fprintf(o, "},\n      \"buffers\": [\n");
        for (int b = 0; b < S->mp.n; b++) {
            fprintf(o, "        {\"name\": ");
            json_str(o, S->mp.buf[b].name);
            fprintf(o, ", \"category\": \"%s\", \"offset\": %" PRId64 ", \"bytes\": %" PRId64 "}%s\n",
                    pg_mp_cat_name(S->mp.buf[b].cat), S->mp.buf[b].offset, S->mp.buf[b].bytes,
                    b + 1 < S->mp.n ? "," : "");
        }
        fprintf(o, "      ],\n      \"schedule\": [\n");
        for (int a = 0; a < ss->n; a++) {
            const pg_act *A = &ss->act[a];
            fprintf(o, "        {\"action\": \"%s\", \"mb\": %d, \"chunk\": %d, \"slot\": %d, \"peer\": %d, \"skip\": %d, "
                       "\"param\": %d, \"bytes\": %" PRId64 "}%s\n",
                    pg_act_name(A->kind), A->mb, A->chunk, S->act_slot[a], A->peer, A->skip, A->param, S->act_bytes[a],
                    a + 1 < ss->n ? "," : "");
        }
        fprintf(o, "      ]}%s\n", k + 1 < g->nstages ? "," : "");
    }
    fprintf(o, "  ],\n");
    fflush(o);
    uint64_t h = fnv1a64(text, len); /* everything before the hash line */
    fprintf(o, "  \"hash\": \"%016" PRIx64 "\"\n}\n", h);
    if (fclose(o)) {
        free(text);
        return NULL;
    }
    *hash = h;
    return text;
}

/* The model's identity apart from its layout: FNV-1a 64 of its input, target,
 * layers (kind, shapes, attributes, parameters) and skips as plan.json lists
 * them, without chunks, stages, schedule or tie modes (none changes the
 * numbers). A checkpoint resumes onto any plan of the same identity
 * (runtime/core/checkpoint.c adds the parameters and training settings). */
uint64_t model_arch_hash(const pg_gen *g)
{
    const ir_model *m = g->m;
    char *text = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&text, &len);
    if (!o)
        return 0;
    fprintf(o, "input %s ", pg_dtype_name(m->input_dtype));
    json_shape(o, &m->input);
    fprintf(o, "\ntarget %s ", pg_dtype_name(m->target_dtype));
    json_shape(o, &m->target);
    fprintf(o, "\n");
    for (int i = 0; i < m->nlayers; i++) {
        const ir_layer *L = &m->layers[i];
        json_str(o, L->name);
        fprintf(o, " %s %s ", layer_kind_name(L->kind), pg_dtype_name(L->in_dtype));
        json_shape(o, &L->in);
        json_shape(o, &L->out);
        json_layer_attrs(o, m, L);
        for (int k = 0; k < L->nparam; k++)
            json_str(o, L->param[k] >= 0 ? m->params[L->param[k]].name : "");
        fprintf(o, " |");
        for (int k = 0; k < L->nbuffer; k++)
            json_str(o, m->params[L->buffer[k]].name);
        fprintf(o, "\n");
    }
    for (int k = 0; k < m->nskips; k++) {
        const ir_skip *sk = &m->skips[k];
        fprintf(o, "skip ");
        json_str(o, sk->name);
        json_str(o, m->layers[sk->stash_layer].name);
        json_str(o, m->layers[sk->pop_layer].name);
        fprintf(o, " %s ", sk->mode == POP_ADD ? "add" : "concat");
        json_shape(o, &sk->shape);
        fprintf(o, "\n");
    }
    if (fclose(o)) {
        free(text);
        return 0;
    }
    uint64_t h = fnv1a64(text, len);
    free(text);
    return h;
}
