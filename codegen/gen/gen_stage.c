/* codegen/gen/gen_stage.c — the generated files: stage<k>.c per stage (the
 * parameters' macros, slot tables, chunk functions from gen_chunk_fn.c, the
 * parameter, chunk and action tables, pg_stage), <model>.h (every buffer of
 * every stage with its offset, bytes and lifetime; the model's parameter
 * table) and pg_gen_write, which writes them with plan.json as one generation. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "gen/gen_files.h"
#include "gen/gen_layer.h"
#include "base/progress.h"

static const char *init_name(ir_init k)
{
    static const char *const n[] = {[INIT_ZEROS] = "PG_INIT_ZEROS", [INIT_ONES] = "PG_INIT_ONES",
                                    [INIT_UNIFORM] = "PG_INIT_UNIFORM", [INIT_NORMAL] = "PG_INIT_NORMAL"};
    return n[k];
}
static const char *tie_name(ir_tie_mode k)
{
    static const char *const n[] = {[TIE_NONE] = "PG_TIE_NONE", [TIE_REPLICATE] = "PG_TIE_REPLICATE",
                                    [TIE_TRANSMIT] = "PG_TIE_TRANSMIT"};
    return n[k];
}
static const char *optim_name(ir_opt k)
{
    static const char *const n[] = {[OPT_SGD] = "PG_OPTIM_SGD", [OPT_ADAMW] = "PG_OPTIM_ADAMW", [OPT_ADAM] = "PG_OPTIM_ADAM"};
    return n[k];
}
static const char *lr_name(ir_lr_sched k)
{
    static const char *const n[] = {[LR_CONSTANT] = "PG_LR_CONSTANT", [LR_COSINE] = "PG_LR_COSINE",
                                    [LR_LINEAR] = "PG_LR_LINEAR", [LR_INVSQRT] = "PG_LR_INVSQRT"};
    return n[k];
}
static const char *loss_name(ir_loss k)
{
    static const char *const n[] = {[LOSS_MSE_SUM] = "PG_LOSS_MSE_SUM", [LOSS_MSE_MEAN] = "PG_LOSS_MSE_MEAN",
                                    [LOSS_CROSS_ENTROPY] = "PG_LOSS_CROSS_ENTROPY"};
    return n[k];
}

/* One row of a parameter table, designated: the model table's (S NULL: no
 * offsets) or stage S's. */
static void emit_param_entry(FILE *o, const pg_gen *g, int p, const em_stage *S)
{
    const ir_model *m = g->m;
    const ir_param *P = &m->params[p];
    fprintf(o, "    {.name = ");
    json_str(o, P->name); /* a C string literal too: names have no control characters */
    fprintf(o, ", .index = %d, .rank = %d, .dim = {", p, P->shape.rank);
    for (int k = 0; k < P->shape.rank; k++)
        fprintf(o, "%s%" PRId64, k ? ", " : "", P->shape.dim[k]);
    fprintf(o, "}, .numel = %" PRId64 ", .init = %s, .init_scale = %.17g, .decay = %d, .weight_decay = %.17g,%s .tie = %s, "
               ".owner = %d, .stage_mask = UINT64_C(0x%" PRIx64 "),\n     ",
            pg_shape_numel(&P->shape), init_name(P->init), P->init_scale, P->decay, P->weight_decay,
            P->is_buffer ? " .is_buffer = 1," : "", tie_name(P->tie), P->owner_stage, P->stage_mask);
    if (S)
        fprintf(o, ".off = %" PRId64 ", .grad_off = %" PRId64 ", .opt_off = {%" PRId64 ", %" PRId64 "}, .nacc = %d",
                S->mp.buf[S->param_mp[p]].offset, S->grad_mp[p] >= 0 ? S->mp.buf[S->grad_mp[p]].offset : -1,
                S->opt_mp[0][p] >= 0 ? S->mp.buf[S->opt_mp[0][p]].offset : -1,
                S->opt_mp[1][p] >= 0 ? S->mp.buf[S->opt_mp[1][p]].offset : -1, P->is_buffer ? 0 : nacc_of(g, S->stage, p));
    else
        fprintf(o, ".off = -1, .grad_off = -1, .opt_off = {-1, -1}, .nacc = 0");
    if (needs_nacc_table(g, p))
        fprintf(o, ", .stage_nacc = pg_nacc_p%d", p);
    int gl = S ? grad_layer_of(g, S, p) : -1; /* where its gradient is final (the replicas' buckets) */
    fprintf(o, ", .acc_numel = %" PRId64 ", .chunk = %d, .grad_layer = %d},\n", acc_numel(P),
            gl >= 0 ? m->layers[gl].chunk : -1, gl >= 0 ? stage_layer_at(S, gl) : -1);
}

/* Generation with the KV cache: the decode schedule of one round, offsets and
 * bytes per token row, and the stage's pg_dec_desc. */
static void emit_dec_tables(const pg_gen *g, const em_stage *S, FILE *o)
{
    const pg_stage_sched *ds = &g->dsched.stage[S->stage];
    int64_t tok = -1, logits = -1, V = 0;
    for (int i = 0; i < S->nchunks; i++) {
        const em_chunk *dc = &S->dch[i];
        if (dc->is_first)
            tok = S->mp.buf[dc->sb[dc->x_slot].mp].offset;
        if (dc->is_last) {
            logits = S->mp.buf[dc->sb[dc->y_slot].mp].offset;
            V = last_dim(&dc->tens[dc->lout[dc->last - dc->first]].shape);
        }
    }
    fprintf(o, "/* generation with the KV cache: one round of the decode schedule (off: the micro-batch's buffer,\n"
               " * bytes: per token row; every message goes after the call's row table, runtime/core/decode.c) */\n"
               "static const pg_step_action dec_step[] = {\n");
    for (int a = 0; a < ds->n; a++) {
        const pg_act *A = &ds->act[a];
        char buf[160];
        fprintf(o, "    {.kind = PG_%s, .mb = %d, .chunk = %d, .slot = %d, .peer = %d, .skip = %d, .param = -1, "
                   ".tag = 0x%08" PRIx32 "u, .off = %" PRId64 ", .bytes = %" PRId64 "}, /* %d: %s */\n",
                pg_step_kind_name(A->kind), A->mb, A->chunk, A->kind == PG_FWD ? A->mb : -1, A->peer, A->skip,
                S->dact_tag[a], S->dact_off[a], S->dact_bytes[a], a, pg_act_str(A, buf, sizeof buf));
    }
    if (!ds->n)
        fprintf(o, "    {.kind = PG_FWD, .mb = -1, .chunk = -1, .slot = -1, .peer = -1, .skip = -1, .param = -1, "
                   ".tag = 0, .off = -1, .bytes = 0},\n");
    fprintf(o, "};\n\nstatic const pg_dec_desc dec_desc = {\n"
               "    .batch = %" PRId64 ", .length = %" PRId64 ", .prefill = %" PRId64 ", .nmb = %d, .rows = %" PRId64 ",\n"
               "    .rows_off = %" PRId64 ", .tokens_off = %" PRId64 ", .logits_off = %" PRId64 ", .vocab = %" PRId64 ",\n"
               "    .last_stage = %d, .nactions = %d, .actions = dec_step, .cache_bytes = %" PRId64 ",\n};\n\n",
            g->dec_batch, g->dec_len, g->dec_prefill, g->dec_nmb, g->dec_rows, S->mp.buf[S->dec_rows_mp].offset, tok,
            logits, V, chunk_stage(g, g->m->nchunks - 1), ds->n, pg_mp_cat_bytes(&S->mp, MP_KVCACHE));
}

int gen_stage_gemm_weights(const ir_model *m, const em_stage *S, unsigned char *gw, int64_t *bytes)
{
    int n = 0;
    int64_t b = 0;
    for (int i = 0; i < S->nchunks; i++)
        for (int l = S->ch[i].first; l <= S->ch[i].last; l++) {
            const ir_layer *L = &m->layers[l];
            const gen_layer_kind *K = gen_layer_kind_of(L->kind);
            unsigned bits = !K ? 0 : K->gemm_weights_of ? K->gemm_weights_of(L) : K->gemm_weights;
            for (int k = 0; k < L->nparam && k < PG_MAX_LAYER_PARAMS; k++) {
                int p = L->param[k];
                if (!(bits >> k & 1) || p < 0 || p >= m->nparams || gw[p] || S->param_mp[p] < 0 ||
                    m->params[p].shape.rank != 2)
                    continue;
                gw[p] = 1;
                n++;
                int64_t r = m->params[p].shape.dim[0], c = m->params[p].shape.dim[1];
                int64_t wt = pg_bytes_of((r + 31) / 32 * 32, c, 4), w = pg_bytes_of((c + 31) / 32 * 32, r, 4);
                b = pg_bytes_add(b, pg_bytes_add(wt, w));
            }
        }
    if (bytes)
        *bytes = b;
    return n;
}

static int emit_stage_c(const pg_gen *g, int k, uint64_t hash, FILE *o)
{
    const ir_model *m = g->m;
    const em_stage *S = &g->st[k];
    const pg_stage_sched *ss = &g->s->stage[k];
    const ir_train *t = &m->train;
    char sh[96];

    fprintf(o, "/* stage%d.c — generated by pipegen %s from %s: model %s, stage %d of %d.\n"
               " * Generated — do not edit; run `pipegen gen` again instead. Plan hash %016" PRIx64 ".\n"
               " * Buffers, offsets and sizes are documented in %s.h; r is the micro-batch's rows. */\n",
            k, PIPEGEN_VERSION, base_name(m->source_path), m->name, k, m->nstages, hash, m->name);
    fprintf(o, "#include <stddef.h>\n#include <stdint.h>\n\n#include \"pg_ops.h\"\n#include \"pg_stage.h\"\n#include \"%s.h\"\n\n",
            m->name);
    if (S->input_mp >= 0) {
        pg_shape_str(m->input_dtype, &m->input, sh, sizeof sh);
        fprintf(o, "/* this micro-batch's rows of the batch input %s %s */\n", m->input_name, sh);
        fprintf(o, "#define INPUT_ROWS ((float *)(A + %" PRId64 " + io->first_row * %" PRId64 "))\n",
                S->mp.buf[S->input_mp].offset, pg_shape_numel(&m->input) * 4);
    }
    if (S->target_mp >= 0) {
        pg_shape_str(m->target_dtype, &m->target, sh, sizeof sh);
        fprintf(o, "/* this micro-batch's rows of the batch target %s %s */\n", m->target_name, sh);
        fprintf(o, "#define TARGET_ROWS (A + %" PRId64 " + io->first_row * %" PRId64 ")\n",
                S->mp.buf[S->target_mp].offset, pg_shape_numel(&m->target) * 4);
    }
    if (S->dch)
        fprintf(o, "/* generation with the KV cache: the decode row table, int32 [%" PRId64 "][4] (pg_dec_desc) */\n"
                   "#define DEC_ROWS ((const int32_t *)(A + %" PRId64 "))\n",
                g->dec_rows, S->mp.buf[S->dec_rows_mp].offset);
    if (S->input_mp >= 0 || S->target_mp >= 0 || S->dch)
        fprintf(o, "\n");
    for (int i = 0; i < S->nchunks; i++) {
        const em_chunk *ch = &S->ch[i];
        if (!ch->slot_table)
            continue;
        fprintf(o, "/* chunk %d's activation slot of each micro-batch: another chunk of this stage reads it */\n"
                   "static const int mb_slot_c%d[] = {", ch->chunk, ch->chunk);
        for (int mb = 0; mb < g->s->nmb; mb++)
            fprintf(o, "%s%d", mb ? ", " : "", stage_fwd_slot(S, g->s->nmb, ch->chunk, mb));
        fprintf(o, "};\n\n");
    }
    for (int i = 0; i < S->nchunks; i++) {
        em_out e;
        memset(&e, 0, sizeof e);
        e.o = o, e.g = g, e.S = S, e.ch = &S->ch[i];
        if (emit_chunk_fns(&e))
            return -1;
        if (S->dch && (e.ch = &S->dch[i], emit_dec_fn(&e)))
            return -1;
    }
    /* tables */
    fprintf(o, "/* ---- tables ---- */\n\n");
    fprintf(o, "static const pg_param_desc stage_params[] = {\n");
    int nsp = 0;
    for (int p = 0; p < m->nparams; p++)
        if (S->param_mp[p] >= 0) {
            emit_param_entry(o, g, p, S);
            nsp++;
        }
    if (!nsp)
        fprintf(o, "    {.name = NULL, .index = -1, .off = -1, .grad_off = -1, .opt_off = {-1, -1}, .chunk = -1, .grad_layer = -1},\n");
    fprintf(o, "};\n\nstatic const pg_chunk_desc chunks[] = {\n");
    for (int i = 0; i < S->nchunks; i++) {
        int c = S->ch[i].chunk;
        fprintf(o, "    {.chunk = %d, .fwd = fwd_c%d, .bwd_b = bwd_b_c%d, .bwd_w = bwd_w_c%d", c, c, c, c);
        if (S->dch)
            fprintf(o, ", .dec = dec_c%d", c);
        fprintf(o, "},\n");
    }
    fprintf(o, "};\n\n/* the step */\n");
    fprintf(o, "static const pg_step_action step[] = {\n");
    for (int a = 0; a < ss->n; a++) {
        const pg_act *A = &ss->act[a];
        char buf[160];
        fprintf(o, "    {.kind = PG_%s, .mb = %d, .chunk = %d, .slot = %d, .peer = %d, .skip = %d, .param = %d, "
                   ".tag = 0x%08" PRIx32 "u, .off = %" PRId64 ", .bytes = %" PRId64 "}, /* %d: %s */\n",
                pg_step_kind_name(A->kind), A->mb, A->chunk, S->act_slot[a], A->peer, A->skip, A->param, S->act_tag[a],
                S->act_off[a], S->act_bytes[a], a, pg_act_str(A, buf, sizeof buf));
    }
    if (!ss->n)
        fprintf(o, "    {.kind = PG_OPT_STEP, .mb = -1, .chunk = -1, .slot = -1, .peer = -1, .skip = -1, .param = -1, "
                   ".tag = 0, .off = -1, .bytes = 0},\n");
    /* evaluation and --predict: the step's forward actions, each as in the step (its origin there) */
    const pg_stage_sched *es = &g->ev.stage[k];
    fprintf(o, "};\n\n/* the forward-only schedule (evaluation, --predict): the step's forwards and their messages */\n"
               "static const pg_step_action eval_step[] = {\n");
    for (int i = 0; i < es->n; i++) {
        const pg_act *A = &es->act[i];
        int a = A->origin;
        char buf[160];
        fprintf(o, "    {.kind = PG_%s, .mb = %d, .chunk = %d, .slot = %d, .peer = %d, .skip = %d, .param = %d, "
                   ".tag = 0x%08" PRIx32 "u, .off = %" PRId64 ", .bytes = %" PRId64 "}, /* %d: %s (step action %d) */\n",
                pg_step_kind_name(A->kind), A->mb, A->chunk, S->act_slot[a], A->peer, A->skip, A->param, S->act_tag[a],
                S->act_off[a], S->act_bytes[a], i, pg_act_str(A, buf, sizeof buf), a);
    }
    if (!es->n)
        fprintf(o, "    {.kind = PG_FWD, .mb = -1, .chunk = -1, .slot = -1, .peer = -1, .skip = -1, .param = -1, "
                   ".tag = 0, .off = -1, .bytes = 0},\n");
    fprintf(o, "};\n\nstatic const int64_t mb_rows[] = {");
    for (int i = 0; i < g->s->nmb; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", g->mb_rows[i]);
    fprintf(o, "};\nstatic const int64_t mb_first_row[] = {");
    for (int i = 0; i < g->s->nmb; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", g->mb_first[i]);
    fprintf(o, "};\nstatic const int mb_recompute[] = {");
    for (int i = 0; i < g->s->nmb; i++)
        fprintf(o, "%s%d", i ? ", " : "", g->recompute[i]);
    fprintf(o, "};\nstatic const int64_t send_bytes[] = {");
    for (int i = 0; i < g->nstages; i++)
        fprintf(o, "%s%" PRId64, i ? ", " : "", S->send_bytes[i]);
    fprintf(o, "};\n\n");
    /* this stage's layers for --profile (runtime/core/trace.c): a chunk's
     * measured time is split among them by the estimated flops */
    int nstage_layers = 0;
    fprintf(o, "/* this stage's layers: {name, chunk, estimated flops per sample of F, B, W} (--profile) */\n"
               "static const pg_layer_info stage_layers[] = {\n");
    for (int i = 0; i < S->nchunks; i++)
        for (int l = S->ch[i].first; l <= S->ch[i].last; l++) {
            pg_layer_cost fl = pg_layer_flops(&m->layers[l]);
            fprintf(o, "    {");
            json_str(o, m->layers[l].name ? m->layers[l].name : "?");
            fprintf(o, ", %d, %.17g, %.17g, %.17g},\n", S->ch[i].chunk, fl.fwd, fl.bwd_b, fl.bwd_w);
            nstage_layers++;
        }
    if (!nstage_layers)
        fprintf(o, "    {NULL, -1, 0, 0, 0},\n");
    fprintf(o, "};\n\n");

    /* the convolution geometries (only then: stage files without any stay as they were) */
    pg_conv *convs = NULL;
    int nconvs = gen_stage_convs(m, S, &convs);
    if (nconvs < 0)
        return -1;
    if (nconvs) {
        fprintf(o, "/* this stage's convolution geometries (the CUDA runtime plans them at start-up) */\n"
                   "static const pg_conv stage_convs[] = {\n");
        for (int i = 0; i < nconvs; i++) {
            char init[512];
            gen_conv_init(&convs[i], init, sizeof init);
            fprintf(o, "    %s,\n", init);
        }
        fprintf(o, "};\n\n");
    }
    free(convs);

    /* the GEMM weights (pg_gemm_weights_plan; only when there are any) */
    unsigned char *gw = calloc((size_t)m->nparams + 1, 1);
    if (!gw)
        return -1;
    int ngw = gen_stage_gemm_weights(m, S, gw, NULL);
    if (ngw) {
        fprintf(o, "/* the weights its GEMMs read {stage parameter} (pg_gemm_weights_plan: the CPU packs them once a "
                   "step) */\nstatic const int stage_gemm_weights[] = {\n");
        for (int p = 0, sp = 0; p < m->nparams; p++) {
            if (S->param_mp[p] < 0)
                continue;
            if (gw[p])
                fprintf(o, "    %d, /* %s */\n", sp, m->params[p].name);
            sp++;
        }
        fprintf(o, "};\n\n");
    }
    free(gw);

    int nshadow = 0; /* bf16 shadows {stage param index, offset}: only then, so f32 stage files stay as they were */
    for (int p = 0, sp = 0; p < m->nparams; p++) {
        if (S->param_mp[p] < 0)
            continue;
        if (S->shadow_mp[p] >= 0) {
            if (!nshadow++)
                fprintf(o, "/* bf16 shadows of the GEMM weights {stage parameter, offset} (pg_shadow_register) */\n"
                           "static const pg_shadow_desc stage_shadows[] = {\n");
            fprintf(o, "    {%d, %" PRId64 "}, /* %s */\n", sp, S->mp.buf[S->shadow_mp[p]].offset, m->params[p].name);
        }
        sp++;
    }
    if (nshadow)
        fprintf(o, "};\n\n");

    if (g->guard) { /* only then: stage files without guard gaps stay as they were */
        fprintf(o, "/* the arena's buffers {offset, bytes}: every other byte is a guard gap (--guard-bytes %" PRId64
                   "),\n * poisoned by a runtime built with AddressSanitizer (pg_arena_guard) */\n"
                   "static const pg_arena_buf arena_bufs[] = {\n", g->guard);
        for (int b = 0; b < S->mp.n; b++)
            fprintf(o, "    {%" PRId64 ", %" PRId64 "}, /* %s */\n", S->mp.buf[b].offset, S->mp.buf[b].bytes,
                    S->mp.buf[b].name);
        if (!S->mp.n)
            fprintf(o, "    {0, 0},\n");
        fprintf(o, "};\n\n");
    }

    if (S->dch)
        emit_dec_tables(g, S, o);

    int64_t in_vocab = 0, tg_vocab = 0;
    for (int i = 0; i < m->nlayers && !in_vocab; i++) /* the first layer reading token ids */
        if (gen_layer_kind_of(m->layers[i].kind)->reads_tokens)
            in_vocab = m->layers[i].vocab;
    if (m->target_dtype == DT_I32)
        tg_vocab = last_dim(&m->layers[m->nlayers - 1].out);
    fprintf(o, "const pg_stage_desc pg_stage = {\n");
    fprintf(o, "    .contract = PG_CONTRACT_TAG(%d),\n", PG_CONTRACT_VERSION);
    fprintf(o, "    .pipegen_version = \"%s\",\n    .model = ", PIPEGEN_VERSION);
    json_str(o, m->name);
    fprintf(o, ",\n    .source = ");
    json_str(o, base_name(m->source_path));
    fprintf(o, ",\n    .stage = %d, .nstages = %d, .nchunks = %d, .nmb = %d,\n", k, m->nstages, m->nchunks, g->s->nmb);
    fprintf(o, "    .plan_hash = UINT64_C(0x%016" PRIx64 "),\n", hash);
    fprintf(o, "    .arena_bytes = STAGE%d_ARENA_BYTES,\n", k);
    fprintf(o, "    .opt_lo = %" PRId64 ", .opt_bytes = %" PRId64 ",\n", S->mp.opt_lo, S->mp.total - S->mp.opt_lo);
    fprintf(o, "    .train = {.batch = %" PRId64 ", .microbatches = %" PRId64 ", .steps = %" PRId64 ", .optimizer = %s,\n",
            t->batch, t->microbatches, t->steps, optim_name(t->optimizer));
    fprintf(o, "              .lr = %.17g, .momentum = %.17g, .weight_decay = %.17g,\n", t->lr, t->momentum,
            t->weight_decay);
    fprintf(o, "              .beta1 = %.17g, .beta2 = %.17g, .adam_eps = %.17g,\n", t->beta1, t->beta2, t->adam_eps);
    fprintf(o, "              .lr_schedule = %s, .warmup = %" PRId64 ", .lr_min = %.17g, .grad_clip = %.17g,\n",
            lr_name(t->lr_schedule), t->warmup, t->lr_min, t->grad_clip);
    fprintf(o, "              .seed = UINT64_C(%" PRIu64 "), .loss = %s,\n", t->seed, loss_name(t->loss));
    fprintf(o, "              .eval_every = %" PRId64 ", .eval_batches = %" PRId64 ", .shuffle = %d},\n", t->eval_every,
            t->eval_batches, t->shuffle);
    fprintf(o, "    .nparams = %d, .params = stage_params,\n", nsp);
    fprintf(o, "    .nmodel_params = %d, .model_params = pg_model_params,\n", m->nparams);
    fprintf(o, "    .nchunk_fns = %d, .chunks = chunks,\n", S->nchunks);
    fprintf(o, "    .nactions = %d, .actions = step,\n", ss->n);
    fprintf(o, "    .mb_rows = mb_rows, .mb_first_row = mb_first_row, .mb_recompute = mb_recompute,\n");
    fprintf(o, "    .has_input = %d, .input_off = %" PRId64 ", .input_dtype = %s, .input_rank = %d,\n", S->input_mp >= 0,
            S->input_mp >= 0 ? S->mp.buf[S->input_mp].offset : -1, m->input_dtype == DT_I32 ? "PG_DATA_I32" : "PG_DATA_F32",
            m->input.rank);
    fprintf(o, "    .input_dim = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "}, .input_per_sample = %" PRId64
               ", .input_vocab = %" PRId64 ",\n",
            m->input.dim[0], m->input.dim[1], m->input.dim[2], m->input.dim[3], pg_shape_numel(&m->input), in_vocab);
    fprintf(o, "    .has_loss = %d, .target_off = %" PRId64 ", .target_dtype = %s, .target_rank = %d,\n",
            S->target_mp >= 0, S->target_mp >= 0 ? S->mp.buf[S->target_mp].offset : -1,
            m->target_dtype == DT_I32 ? "PG_DATA_I32" : "PG_DATA_F32", m->target.rank);
    fprintf(o, "    .target_dim = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "}, .target_per_sample = %" PRId64
               ", .target_vocab = %" PRId64 ",\n",
            m->target.dim[0], m->target.dim[1], m->target.dim[2], m->target.dim[3], pg_shape_numel(&m->target), tg_vocab);
    if (S->count_mp >= 0)
        fprintf(o, "    .has_ignore = 1, .ignore_id = %" PRId64 ", .count_off = %" PRId64 ",\n", t->ignore_index,
                S->mp.buf[S->count_mp].offset);
    fprintf(o, "    .send_bytes = send_bytes,\n    .ws_off = %" PRId64 ", .ws_bytes = %" PRId64 ",\n",
            S->ws_mp >= 0 ? S->mp.buf[S->ws_mp].offset : -1, S->ws_mp >= 0 ? S->mp.buf[S->ws_mp].bytes : 0);
    /* the model output (logits) for --generate: slot 0 and the slot stride */
    int64_t out_off = -1, out_stride = 0, out_numel = 0;
    for (int i = 0; i < S->nchunks; i++) {
        const em_chunk *ch = &S->ch[i];
        if (!ch->is_last || ch->y_slot < 0)
            continue;
        out_off = slot_off(&S->mp, ch, ch->y_slot, 0);
        out_stride = ch->sb[ch->y_slot].stride;
        out_numel = ch->tens[ch->lout[ch->last - ch->first]].numel;
    }
    fprintf(o, "    .output_off = %" PRId64 ", .output_slot_bytes = %" PRId64 ", .output_per_sample = %" PRId64 ",\n",
            out_off, out_stride, out_numel);
    fprintf(o, "    .nlayers = %d, .layers = stage_layers,\n", nstage_layers);
    if (m->train.precision == DT_BF16) /* only then: f32 stage files stay as they were */
        fprintf(o, "    .precision = 1, /* bf16 GEMM operands on the CUDA runtime (pg_backend_set_precision) */\n");
    if (g->guard)
        fprintf(o, "    .guard_bytes = %" PRId64 ", .narena_bufs = %d, .arena_bufs = arena_bufs,\n", g->guard, S->mp.n);
    if (nshadow)
        fprintf(o, "    .nshadows = %d, .shadows = stage_shadows,\n", nshadow);
    if (S->bf16ws_mp >= 0)
        fprintf(o, "    .bf16_ws_off = %" PRId64 ", .bf16_ws_bytes = %" PRId64 ", /* the bf16 GEMM operand copies */\n",
                S->mp.buf[S->bf16ws_mp].offset, S->mp.buf[S->bf16ws_mp].bytes);
    if (nconvs)
        fprintf(o, "    .nconvs = %d, .convs = stage_convs, .conv_plan = pg_conv_plan,\n", nconvs);
    fprintf(o, "    .arch_hash = UINT64_C(0x%016" PRIx64 "), /* the layers, layout aside (checkpoint identity) */\n",
            model_arch_hash(g));
    if (g->lend_sends)
        fprintf(o, "    .lend_sends = 1, /* messages lent from the arena: the simulation with their waits finishes */\n");
    if (ngw)
        fprintf(o, "    .ngemm_weights = %d, .gemm_weights = stage_gemm_weights,\n", ngw);
    if (S->dch) {
        fprintf(o, "    .dec = &dec_desc,\n");
    } else if (g->dec_why[0]) {
        fprintf(o, "    .dec_why = ");
        json_str(o, g->dec_why);
        fprintf(o, ",\n");
    }
    const pg_shape *os = &m->layers[m->nlayers - 1].out;
    fprintf(o, "    .neval_actions = %d, .eval_actions = eval_step,\n", es->n);
    fprintf(o, "    .output_rank = %d, .output_dim = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "},\n", os->rank,
            os->dim[0], os->dim[1], os->dim[2], os->dim[3]);
    fprintf(o, "};\n");
    return 0;
}

static int emit_header(const pg_gen *g, uint64_t hash, FILE *o)
{
    const ir_model *m = g->m;
    char guard[128];
    cident(m->name, guard, sizeof guard);
    fprintf(o, "/* %s.h — generated by pipegen %s from %s: the buffers of every stage of model %s.\n"
               " * Generated — do not edit. Plan hash %016" PRIx64 ".\n"
               " * Offsets are bytes into the stage's arena (256-byte aligned); shapes are per\n"
               " * micro-batch of r rows (at most %" PRId64 ").",
            m->name, PIPEGEN_VERSION, base_name(m->source_path), m->name, hash, g->rmax);
    if (g->guard)
        fprintf(o, "\n * Generated with --guard-bytes %" PRId64 ": the arena starts with at least that many free\n"
                   " * bytes and each buffer is followed by as many (poisoned under AddressSanitizer).", g->guard);
    fprintf(o, " */\n");
    fprintf(o, "#ifndef PG_GEN_%s_H\n#define PG_GEN_%s_H\n\n#include <stdint.h>\n\n#include \"pg_contract.h\"\n\n", guard, guard);
    fprintf(o, "#define %s_PLAN_HASH UINT64_C(0x%016" PRIx64 ")\n#define %s_NSTAGES %d\n\n", guard, hash, guard,
            m->nstages);
    for (int k = 0; k < g->nstages; k++) {
        const em_stage *S = &g->st[k];
        fprintf(o, "/* ---- stage %d ----\n *  %-12s %-12s  %-18s  %s\n", k, "offset", "bytes", "category", "buffer");
        for (int b = 0; b < S->mp.n; b++) {
            const pg_mp_buf *B = &S->mp.buf[b];
            fprintf(o, " *  %-12" PRId64 " %-12" PRId64 "  %-18s  %s: %s", B->offset, B->bytes, pg_mp_cat_name(B->cat),
                    B->name, B->note);
            if (B->first_use != PG_MP_WHOLE_STEP)
                fprintf(o, " (ticks %d..%d)", B->first_use, B->last_use);
            fprintf(o, "\n");
        }
        for (int i = 0; i < S->nchunks; i++) {
            const em_chunk *ch = &S->ch[i];
            if (!ch->nfb)
                continue;
            fprintf(o, " *  frame buffers of chunk %d (columns of frame_c%d in stage%d.c), for %" PRId64 " rows:\n",
                    ch->chunk, ch->chunk, k, g->rmax);
            for (int f = 0; f < ch->nfb; f++)
                fprintf(o, " *    F[%d] %12" PRId64 " bytes  %s: %s\n", f, ch->fb[f].bytes, ch->fb[f].what, ch->fb[f].shape);
        }
        for (int i = 0; S->dch && i < S->nchunks; i++) {
            const em_chunk *dc = &S->dch[i];
            fprintf(o, " *  generation: frame buffers of chunk %d's decode calls (dec_c%d in stage%d.c), for %" PRId64
                       " token rows:\n", dc->chunk, dc->chunk, k, g->dec_rows * g->dec_prefill);
            for (int f = 0; f < dc->nfb; f++)
                if (dc->fb_mp[f] >= 0)
                    fprintf(o, " *    %12" PRId64 " bytes  %s: %s\n", dc->fb[f].bytes, dc->fb[f].what, dc->fb[f].shape);
        }
        if (S->nticks)
            fprintf(o, " *  ticks: the stage's actions in order, one per layer step of FWD, BWD_B (recompute,\n"
                       " *  then backward) and BWD_W, one per other action; %d in all\n", S->nticks);
        if (S->dch)
            fprintf(o, " *  then generation's: %d the whole of it, a tick per layer step of each chunk's decode call\n"
                       " *  in turn; %d in all\n", S->nticks, S->dec_nticks + 1);
        fprintf(o, " */\n#define STAGE%d_ARENA_BYTES INT64_C(%" PRId64 ")\n\n", k, S->mp.total);
    }
    /* the model's parameter table, once for every stage (pg_contract.h) */
    int ntab = 0;
    for (int p = 0; p < m->nparams; p++) {
        if (!needs_nacc_table(g, p))
            continue;
        if (!ntab++)
            fprintf(o, "/* gradient accumulators on each stage of the parameters used by several layers or tied */\n");
        fprintf(o, "static const int pg_nacc_p%d[] = {", p);
        for (int st = 0; st < m->nstages; st++)
            fprintf(o, "%s%d", st ? ", " : "", stage_nacc(g, st, p));
        fprintf(o, "}; /* %s */\n", m->params[p].name);
    }
    if (ntab)
        fprintf(o, "\n");
    fprintf(o, "/* every parameter of the model, in plan order: stage 0 gathers them for --save */\n"
               "static const pg_param_desc pg_model_params[] = {\n");
    for (int p = 0; p < m->nparams; p++)
        emit_param_entry(o, g, p, NULL);
    if (!m->nparams)
        fprintf(o, "    {.name = NULL, .index = -1, .off = -1, .grad_off = -1, .opt_off = {-1, -1}, .chunk = -1, .grad_layer = -1},\n");
    fprintf(o, "};\n\n#endif\n");
    return 0;
}

int pg_gen_write(const pg_gen *g, const char *dir, pg_diag *d)
{
    pg_loc none = {g->m->source_path, 0, 0};
    uint64_t hash = 0;
    int nf = g->nstages + 2, rc = 0;
    pg_gen_file *f = calloc((size_t)nf, sizeof *f);
    char *plan = f ? pg_gen_plan_json(g, &hash) : NULL;
    if (!plan) {
        pg_error(d, none, "out of memory writing plan.json");
        free(f);
        return -1;
    }
    sfmt(f[0].name, sizeof f[0].name, "plan.json");
    f[0].text = plan;
    f[0].len = strlen(plan);
    for (int k = -1; k < g->nstages && !rc; k++) { /* the header, then each stage */
        pg_gen_file *x = &f[k + 2];
        FILE *o = open_memstream(&x->text, &x->len);
        int erc = 0;
        if (!o) {
            rc = -1;
            break;
        }
        if (k < 0) {
            emit_header(g, hash, o);
            sfmt(x->name, sizeof x->name, "%s.h", g->m->name);
        } else {
            erc = emit_stage_c(g, k, hash, o);
            sfmt(x->name, sizeof x->name, "stage%d.c", k);
            pg_progress("stage%d.c emitted (%d of %d)", k, k + 1, g->nstages);
        }
        rc = fclose(o) || erc ? -1 : 0;
    }
    if (rc)
        pg_error(d, none, "out of memory");
    else
        rc = pg_gen_files_write(dir, f, nf, d, none);
    for (int i = 0; i < nf; i++)
        free(f[i].text);
    free(f);
    return rc;
}
