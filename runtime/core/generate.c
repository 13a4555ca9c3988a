/* runtime/core/generate.c — `--load FILE` (every stage reads its own
 * parameters from a --save file, by name) and `--generate N` (sample N tokens
 * forward-only through the stages, after training).
 *
 * Generation runs one row through the pipeline per new token: stage 0 writes
 * the context into row 0 of the model input, every stage replays the forward
 * actions of micro-batch 0 from its generated step table (RECV_ACT/RECV_SKIP,
 * FWD, SEND_ACT/SEND_SKIP, with the byte counts of one row), and the stage
 * holding the last chunk reads the logits at the context's last position,
 * samples, and sends the token back to stage 0. The context is the prompt at
 * positions 0.. (right-padded with spaces, which a causal model never looks
 * at), and once it is longer than seq, its last seq tokens.
 * Sampling: temperature T > 0 draws from softmax(logits / T) with a
 * counter-based generator of (seed, token index); T = 0 takes the argmax.
 * The logits are the same bits for any stage count, so is the text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"
#include "stage_run.h"

#define PG_TAG_GEN 29u                       /* kind of the sampled-token message, last stage -> stage 0 */
#define SAMPLE_KEY UINT64_C(0x73616d706c65)  /* "sample" */

/* ---- --load --------------------------------------------------------------- */

static const char *first_bf16(const pg_st_want *w, int n)
{
    for (int i = 0; i < n; i++)
        if (w[i].was_bf16)
            return w[i].name;
    return "?";
}

int pg_run_load_params(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    int n = d->nparams;
    size_t total = 0;
    if (pg_run_load_check(r))
        return 1;
    for (int i = 0; i < n; i++)
        total += (size_t)d->params[i].numel * 4;
    unsigned char *buf = malloc(total ? total : 1);
    pg_st_want *w = calloc((size_t)(n ? n : 1), sizeof *w);
    if (!buf || !w) {
        fprintf(stderr, "stage %d: out of memory for %zu bytes to load %s\n", d->stage, total, r->opt.load);
        free(buf);
        free(w);
        return 1;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const pg_param_desc *p = &d->params[i];
        w[i].name = p->name;
        w[i].dtype = 0;
        w[i].rank = p->rank;
        for (int k = 0; k < p->rank && k < 4; k++)
            w[i].dim[k] = p->dim[k];
        w[i].dst = buf + off;
        w[i].bytes = (size_t)p->numel * 4;
        w[i].bf16_ok = 1; /* a bf16 checkpoint widens to f32 exactly: taken, and said */
        off += w[i].bytes;
    }
    char err[512];
    int rc = 0;
    if (pg_st_read(r->opt.load, w, n, err, sizeof err)) {
        fprintf(stderr, "stage %d: --load: %s\n", d->stage, err);
        rc = 1;
    }
    int widened = 0;
    for (int i = 0; i < n && !rc; i++)
        widened += w[i].was_bf16;
    if (widened)
        printf("stage %d: note: --load %s: %d of its tensors are BF16 (the first '%s'), converted to F32 exactly\n",
               d->stage, r->opt.load, widened, first_bf16(w, n));
    for (int i = 0; i < n && !rc; i++) {
        char what[400];
        snprintf(what, sizeof what, "%s: tensor '%s'", r->opt.load, w[i].name);
        if (pg_guard_finite_msg(w[i].dst, w[i].bytes / 4, what, err, sizeof err)) {
            fprintf(stderr, "stage %d: --load: %s: refusing weights that are not finite\n", d->stage, err);
            rc = 1;
        }
    }
    for (int i = 0; i < n && !rc; i++)
        rc = pg_copy_to_dev(r->ctx, r->A + d->params[i].off, w[i].dst, w[i].bytes);
    free(buf);
    free(w);
    return rc;
}

/* ---- --generate ------------------------------------------------------------ */

/* Token n of the sample: argmax (T <= 0, the first maximum) or a draw from
 * softmax(logits / T), summed in index order with a uniform of (seed, n). */
static int32_t sample_token(const float *lg, int64_t V, double T, uint64_t seed, int64_t n)
{
    int64_t best = 0;
    for (int64_t j = 1; j < V; j++)
        if (lg[j] > lg[best])
            best = j;
    if (!(T > 0))
        return (int32_t)best;
    double mx = lg[best], sum = 0.0;
    for (int64_t j = 0; j < V; j++)
        sum += exp(((double)lg[j] - mx) / T);
    double u = (double)(pg_mix64(pg_mix64(seed ^ SAMPLE_KEY) ^ (uint64_t)n) >> 11) * 0x1.0p-53 * sum, c = 0.0;
    for (int64_t j = 0; j < V; j++) {
        c += exp(((double)lg[j] - mx) / T);
        if (u < c)
            return (int32_t)j;
    }
    return (int32_t)best;
}

static int is_fwd_action(const pg_step_action *x)
{
    return x->mb == 0 && (x->kind == PG_FWD || x->kind == PG_SEND_ACT || x->kind == PG_RECV_ACT ||
                          x->kind == PG_SEND_SKIP || x->kind == PG_RECV_SKIP);
}

static int gen_net(pg_run *r, const char *what, int peer, pg_net_status st)
{
    if (st == PG_NET_TIMEOUT)
        fprintf(stderr, "stage %d waiting in --generate for %s from stage %d for %g s\n", r->d->stage, what, peer,
                r->opt.timeout_s);
    else
        fprintf(stderr, "stage %d: --generate: %s with stage %d failed: %s\n", r->d->stage, what, peer,
                pg_net_error(r->net));
    return 1;
}

/* Transmitted ties: the users hold the value sent at the start of the last
 * step, before its optimizer update; the owner sends the current one. */
static int refresh_transmitted(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    for (int i = 0; i < d->nparams; i++) {
        const pg_param_desc *p = &d->params[i];
        if (p->tie != 2 || !p->stage_mask || !(p->stage_mask & (p->stage_mask - 1)))
            continue;
        uint32_t tag = PG_TAG(PG_TIE_SEND, p->index, 1);
        size_t vb = (size_t)p->numel * 4;
        pg_net_status st;
        if (p->owner != d->stage) {
            if ((st = pg_net_recv(r->net, p->owner, tag, r->A + p->off, vb, r->opt.timeout_s)))
                return gen_net(r, "receiving a tied parameter's value", p->owner, st);
            if (pg_param_written(r->ctx, (const float *)(r->A + p->off), p->numel)) /* its bf16 shadow */
                return 1;
            continue;
        }
        for (int u = 0; u < d->nstages && u < 64; u++)
            if (u != d->stage && (p->stage_mask >> u & 1) && (st = pg_net_send(r->net, u, tag, r->A + p->off, vb)))
                return gen_net(r, "sending a tied parameter's value", u, st);
    }
    return 0;
}

/* One forward pass of one row through this stage's part of the model. */
static int forward_row(pg_run *r, int64_t n)
{
    const pg_stage_desc *d = r->d;
    int64_t rows0 = d->mb_rows[0];
    for (int a = 0; a < d->nactions; a++) {
        const pg_step_action *x = &d->actions[a];
        if (!is_fwd_action(x))
            continue;
        r->cur_action = a;
        pg_net_status st = PG_NET_OK;
        if (x->kind == PG_FWD) {
            const pg_chunk_desc *cf = pg_run_chunk_fns(d, x->chunk);
            if (!cf) {
                fprintf(stderr, "stage %d: action %d names chunk %d, which this stage does not hold\n", d->stage, a,
                        x->chunk);
                return 1;
            }
            pg_mb_io io = {0, x->slot, d->mb_recompute[0], 1, 0, r->opt.steps, d->train.seed, 0.0, 1, NULL, NULL};
            if (cf->fwd(r->ctx, r->A, &io)) {
                fprintf(stderr, "stage %d: --generate: the forward of chunk %d failed at token %lld\n", d->stage,
                        x->chunk, (long long)n);
                return 1;
            }
            continue;
        }
        size_t bytes = (size_t)(x->bytes / rows0);
        if (x->kind == PG_SEND_ACT || x->kind == PG_SEND_SKIP)
            st = pg_net_send(r->net, x->peer, x->tag, r->A + x->off, bytes);
        else
            st = pg_net_recv(r->net, x->peer, x->tag, r->A + x->off, bytes, r->opt.timeout_s);
        if (st)
            return gen_net(r, x->kind == PG_SEND_ACT || x->kind == PG_SEND_SKIP ? "sending activations"
                                                                                 : "receiving activations",
                           x->peer, st);
    }
    return 0;
}

/* Bytes as text: printable ASCII, newlines and tabs as they are, others as '?'. */
static void print_sample(const int32_t *t, int64_t n)
{
    fputs("sample: ", stdout);
    for (int64_t i = 0; i < n; i++) {
        int c = t[i];
        putchar((c >= 32 && c < 127) || c == '\n' || c == '\t' ? c : '?');
    }
    putchar('\n');
    fflush(stdout);
}

/* The sequence length and the vocabulary --generate works with; -1 with err
 * when this model cannot generate. */
static int gen_shape(const pg_run *r, int64_t *seq, int64_t *vocab, char *err, size_t errlen)
{
    const pg_stage_desc *d = r->d;
    if (d->input_dtype != 2 || d->input_rank != 1 || d->target_dtype != 2 || d->target_rank != 1 ||
        d->input_dim[0] != d->target_dim[0] || d->nmb < 1 || d->mb_rows[0] < 1) {
        snprintf(err, errlen, "--generate needs a language model (input and target both i32[seq]); model %s is "
                 "not one", d->model);
        return -1;
    }
    for (int a = 0; a < d->nactions; a++)
        if (is_fwd_action(&d->actions[a]) && d->actions[a].kind != PG_FWD && d->actions[a].bytes % d->mb_rows[0]) {
            snprintf(err, errlen, "--generate: action %d moves %lld bytes, not a whole number of rows", a,
                     (long long)d->actions[a].bytes);
            return -1;
        }
    *seq = d->input_dim[0];
    *vocab = d->input_vocab > 0 ? d->input_vocab : 256;
    if (d->has_loss) {
        if (d->output_per_sample <= 0 || d->output_per_sample % *seq) {
            snprintf(err, errlen, "this stage file does not say where its logits are (generated by an older "
                     "pipegen?): run `pipegen gen` again");
            return -1;
        }
        *vocab = d->output_per_sample / *seq;
    }
    return 0;
}

/* The text --generate starts from: --prompt, or a newline. */
static const char *gen_prompt(const pg_run *r)
{
    return r->opt.prompt && *r->opt.prompt ? r->opt.prompt : "\n";
}

int pg_run_generate_check(const pg_run *r, char *err, size_t errlen)
{
    int64_t seq, V;
    if (gen_shape(r, &seq, &V, err, errlen))
        return -1;
    const char *prompt = gen_prompt(r);
    int64_t in_vocab = r->d->input_vocab > 0 ? r->d->input_vocab : 256;
    for (size_t i = 0; prompt[i]; i++)
        if ((unsigned char)prompt[i] >= in_vocab) {
            snprintf(err, errlen, "--prompt: byte %u at position %zu is outside the vocabulary [0, %lld) of model %s",
                     (unsigned char)prompt[i], i, (long long)in_vocab, r->d->model);
            return -1;
        }
    return 0;
}

int pg_run_generate(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    int64_t N = r->opt.generate, seq, V;
    char err[512];
    if (N <= 0)
        return 0;
    if (pg_run_generate_check(r, err, sizeof err) || gen_shape(r, &seq, &V, err, sizeof err)) {
        fprintf(stderr, "stage %d: %s\n", d->stage, err);
        return 1;
    }
    const char *prompt = gen_prompt(r);
    int64_t plen = (int64_t)strlen(prompt), in_vocab = d->input_vocab > 0 ? d->input_vocab : 256;
    int32_t *text = malloc((size_t)(plen + N) * sizeof *text);
    int32_t *ctx = malloc((size_t)seq * sizeof *ctx);
    float *lg = malloc((size_t)V * sizeof *lg);
    if (!text || !ctx || !lg) {
        fprintf(stderr, "stage %d: out of memory for --generate\n", d->stage);
        free(text);
        free(ctx);
        free(lg);
        return 1;
    }
    for (int64_t i = 0; i < plen; i++)
        text[i] = (unsigned char)prompt[i];
    int last = d->has_loss, rc = refresh_transmitted(r);
    int32_t pad = in_vocab > ' ' ? ' ' : 0;
    if (!rc && last) { /* the loss runs on row 0 too: give it valid class ids */
        memset(ctx, 0, (size_t)seq * sizeof *ctx);
        rc = pg_copy_to_dev(r->ctx, r->A + d->target_off, ctx, (size_t)seq * 4);
    }
    int64_t out_off = d->output_off;
    for (int a = 0; a < d->nactions && last; a++)
        if (d->actions[a].kind == PG_FWD && d->actions[a].mb == 0 && d->actions[a].chunk == d->nchunks - 1)
            out_off += (int64_t)d->actions[a].slot * d->output_slot_bytes;
    uint32_t tag = PG_TAG(PG_TAG_GEN, 0, 0);
    int src = d->nstages - 1;
    for (int64_t t = 0; t < N && !rc; t++) {
        int64_t len = plen + t, start = len > seq ? len - seq : 0, n = len - start;
        if (d->has_input) {
            for (int64_t i = 0; i < seq; i++)
                ctx[i] = i < n ? text[start + i] : pad;
            if ((rc = pg_copy_to_dev(r->ctx, r->A + d->input_off, ctx, (size_t)seq * 4)))
                break;
        }
        if ((rc = forward_row(r, t)))
            break;
        pg_net_status st;
        if (last) {
            if ((rc = pg_copy_to_host(r->ctx, lg, r->A + out_off + (n - 1) * V * 4, (size_t)V * 4)))
                break;
            text[len] = sample_token(lg, V, r->opt.temperature, d->train.seed, t);
            if (d->stage != 0 && (st = pg_net_send(r->net, 0, tag, &text[len], 4)))
                rc = gen_net(r, "sending the sampled token", 0, st);
        } else if (d->has_input) {
            if ((st = pg_net_recv(r->net, src, tag, &text[len], 4, r->opt.timeout_s)))
                rc = gen_net(r, "receiving the sampled token", src, st);
            else if (text[len] < 0 || text[len] >= in_vocab) {
                fprintf(stderr, "stage %d: --generate: stage %d sampled token %ld, outside the input vocabulary [0, %lld)\n",
                        d->stage, src, (long)text[len], (long long)in_vocab);
                rc = 1;
            }
        }
    }
    if (!rc && last)
        print_sample(text, plen + N);
    free(text);
    free(ctx);
    free(lg);
    return rc;
}
