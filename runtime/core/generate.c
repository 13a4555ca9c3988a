/* runtime/core/generate.c — `--load FILE` (every stage reads its own
 * parameters from a --save file, by name) and `--generate N` (after training,
 * up to N new tokens for each prompt, generated with the KV cache through the
 * stages: gen_seqs.c, decode.c, sample.c; generate.h).
 *
 * Here: the generation options, the prompts (--prompt, bytes as tokens or
 * through --tokenizer; --prompts, a file of token ids), the checks every
 * stage makes before the first step, and the end: stage 0 prints each
 * prompt with its continuation (`sample: `), writes --gen-out, and every
 * stage reports its bubble. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "guard.h"
#include "io_atomic.h"
#include "json.h"
#include "pytool.h"

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


/* ---- --generate: the options -------------------------------------------------- */

void pg_gen_usage(FILE *o)
{
    fprintf(o,
            "  --generate N    after training, up to N new tokens for each prompt, generated with\n"
            "                  the KV cache through the stages (a language model: input and\n"
            "                  target i32[seq]); stage 0 prints 'sample: ' and each prompt with\n"
            "                  its continuation\n"
            "  --prompt TEXT   the text to continue (bytes as tokens, or through --tokenizer;\n"
            "                  default a newline)\n"
            "  --prompts FILE  many prompts at once: i32 [n, w] token ids, each row a prompt\n"
            "                  ended by -1 or the row's end (`pipedata tokenize --prompts`)\n"
            "  --tokenizer T   a Hugging Face tokenizer (tokenizer.json or its folder): --prompt\n"
            "                  is encoded and the samples decoded with it (tools/tokens.py in\n"
            "                  the Python of `tools/deps.sh hf`); its end-of-text id stops\n"
            "  --temperature T sample from softmax(logits / T) (default 0.8; 0: greedy)\n"
            "  --top-k K       sample among the K most likely tokens (default 0: all)\n"
            "  --top-p P       then among the fewest most likely whose probability reaches P\n"
            "                  (default 1: all)\n"
            "  --stop IDS      token ids that end a sequence (comma-separated)\n"
            "  --gen-out FILE  stage 0 writes a JSON line per prompt: its tokens, the new ones,\n"
            "                  why it ended, and the text\n");
}

/* a number in [lo, hi], or -1 */
static int parse_real(const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi))
        return -1;
    *out = x;
    return 0;
}

static int parse_count(const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

/* --stop "3,17": every id, at most PG_GEN_MAX_STOP of them; -1 when malformed */
static int parse_stop(const char *v, int32_t *ids, int *n)
{
    *n = 0;
    for (const char *p = v; *p;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX || *n >= PG_GEN_MAX_STOP || (*end && *end != ','))
            return -1;
        ids[(*n)++] = (int32_t)x;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return -1;
    }
    return *n ? 0 : -1;
}

int pg_gen_option(const char *a, const char *v, pg_run_opts *o, int stage)
{
    static const char *const names[] = {"--generate", "--prompt", "--prompts", "--tokenizer", "--temperature",
                                        "--top-k", "--top-p", "--stop", "--gen-out"};
    int k = -1;
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (!strcmp(a, names[i]))
            k = i;
    if (k < 0)
        return -1;
    if (!v) {
        fprintf(stderr, "stage %d: %s needs a value (see --help)\n", stage, a);
        return 2;
    }
    const char *want = NULL;
    if (k > 0 && !o->gen_shaping)
        o->gen_shaping = a; /* they only shape what --generate samples (main.c refuses them without it) */
    switch (k) {
    case 0: if (parse_count(v, 0, 100000000, &o->generate)) want = "a token count >= 0"; break;
    case 1: o->prompt = v; break;
    case 2: if (!*v) want = "a file"; o->prompts = v; break;
    case 3: if (!*v) want = "a tokenizer.json file or its folder"; o->tokenizer = v; break;
    case 4: if (parse_real(v, 0, 1e6, &o->temperature)) want = "a number >= 0"; break;
    case 5: if (parse_count(v, 0, INT32_MAX, &o->top_k)) want = "a token count >= 0 (0: every token)"; break;
    case 6: if (parse_real(v, 1e-9, 1, &o->top_p)) want = "a probability in (0, 1]"; break;
    case 7: if (parse_stop(v, o->stop, &o->nstop)) want = "token ids >= 0, comma-separated (at most 16)"; o->stop_text = v; break;
    case 8: if (!*v) want = "a file name"; o->gen_out = v; break;
    }
    if (want) {
        fprintf(stderr, "stage %d: %s wants %s, not '%s'\n", stage, a, want, v);
        return 2;
    }
    return 1;
}

/* ---- the prompts (stage 0) ------------------------------------------------------ */

typedef struct pg_gen_in {
    int32_t **p;              /* [n]: each prompt's token ids */
    int64_t *len;
    int64_t n;
    int32_t stop[PG_GEN_MAX_STOP + 1]; /* --stop, or the tokenizer's end-of-text id */
    int nstop;
} pg_gen_in;

void pg_run_generate_free(pg_run *r)
{
    pg_gen_in *g = r->gen;
    if (!g)
        return;
    for (int64_t i = 0; i < g->n; i++)
        free(g->p[i]);
    free(g->p);
    free(g->len);
    free(g);
    r->gen = NULL;
}

/* Room for n more prompts; -1 out of memory. */
static int prompts_grow(pg_gen_in *g, int64_t n)
{
    int32_t **p = realloc(g->p, (size_t)(g->n + n) * sizeof *p);
    if (p)
        g->p = p;
    int64_t *l = realloc(g->len, (size_t)(g->n + n) * sizeof *l);
    if (l)
        g->len = l;
    return p && l ? 0 : -1;
}

/* Run tools/tokens.py CMD --tokenizer T with `in` on its input: what it printed (malloc'd), or NULL with err. */
static char *tokenizer_run(const pg_run *r, const char *cmd, const char *in, size_t inlen, char *err, size_t errlen)
{
    const char *args[] = {cmd, "--tokenizer", r->opt.tokenizer, NULL};
    char *out = NULL, why[1024];
    size_t n = 0;
    int rc = pg_py_run("tokens.py", args, in, inlen, 0, &out, &n, why, sizeof why);
    if (rc == 0)
        return out;
    if (rc < 0)
        snprintf(err, errlen, "--tokenizer %s: %s", r->opt.tokenizer, why);
    else
        snprintf(err, errlen, "--tokenizer %s: tools/tokens.py %s failed (exit status %d, its message above)",
                 r->opt.tokenizer, cmd, rc);
    free(out);
    return NULL;
}

/* Space-separated ids into a new array; their count, or -1 when malformed (err). */
static int64_t parse_ids(const char *s, int32_t **ids, char *err, size_t errlen)
{
    int64_t n = 0, cap = 64;
    *ids = malloc((size_t)cap * sizeof **ids);
    for (const char *p = s; *ids && *p;) {
        while (*p == ' ' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX) {
            snprintf(err, errlen, "tools/tokens.py printed '%.20s', not token ids", p);
            free(*ids);
            *ids = NULL;
            return -1;
        }
        if (n == cap) {
            int32_t *g = realloc(*ids, (size_t)(cap *= 2) * sizeof *g);
            if (!g)
                break;
            *ids = g;
        }
        (*ids)[n++] = (int32_t)v;
        p = end;
    }
    if (!*ids || n > cap) {
        snprintf(err, errlen, "out of memory reading token ids");
        return -1;
    }
    return n;
}

/* --prompt TEXT (default a newline): through the tokenizer, or its bytes as tokens. */
static int prompt_text(pg_run *r, pg_gen_in *g, char *err, size_t errlen)
{
    const char *text = r->opt.prompt && *r->opt.prompt ? r->opt.prompt : "\n";
    int32_t *ids = NULL;
    int64_t n = (int64_t)strlen(text);
    if (r->opt.tokenizer) {
        char *out = tokenizer_run(r, "encode", text, strlen(text), err, errlen);
        if (!out)
            return -1;
        n = parse_ids(out, &ids, err, errlen);
        free(out);
        if (n < 0)
            return -1;
    } else if ((ids = malloc((size_t)n * sizeof *ids)) != NULL) {
        for (int64_t i = 0; i < n; i++)
            ids[i] = (unsigned char)text[i];
    }
    if (!ids || prompts_grow(g, 1)) {
        free(ids);
        snprintf(err, errlen, "out of memory for the prompt");
        return -1;
    }
    g->p[g->n] = ids;
    g->len[g->n++] = n;
    return 0;
}

/* --prompts FILE: i32 [n, w], a prompt per row, ended by -1 or the row's end. */
static int prompt_file(pg_run *r, pg_gen_in *g, char *err, size_t errlen)
{
    pg_datafile f;
    int64_t any = -1;
    char why[1000];
    if (pg_data_open(&f, r->opt.prompts, 2, 1, &any, why, sizeof why)) {
        snprintf(err, errlen, "--prompts: %s (prompts are i32 [n, w] rows ended by -1, as `pipedata tokenize "
                 "--prompts` writes them)", why);
        return -1;
    }
    int64_t n = (int64_t)f.samples, w = (int64_t)f.dim[1];
    const int32_t *v = f.data;
    int rc = prompts_grow(g, n);
    for (int64_t i = 0; i < n && !rc; i++) {
        int64_t len = 0;
        while (len < w && v[i * w + len] != -1)
            len++;
        for (int64_t j = len; j < w && !rc; j++)
            if (v[i * w + j] != -1) {
                snprintf(err, errlen, "--prompts %s: row %lld holds token %ld after its end (-1 at column %lld)",
                         r->opt.prompts, (long long)i, (long)v[i * w + j], (long long)len);
                rc = -1;
            }
        int32_t *ids = rc ? NULL : malloc((size_t)(len ? len : 1) * sizeof *ids);
        if (!rc && !ids) {
            snprintf(err, errlen, "out of memory for the prompts");
            rc = -1;
        }
        if (!rc) {
            memcpy(ids, v + i * w, (size_t)len * sizeof *ids);
            g->p[g->n] = ids;
            g->len[g->n++] = len;
        }
    }
    pg_data_close(&f);
    return rc;
}

/* Every prompt fits the model: ids in the vocabulary, at least one, at most the cache's positions. */
static int prompts_fit(const pg_run *r, const pg_gen_in *g, char *err, size_t errlen)
{
    const pg_stage_desc *d = r->d;
    int64_t V = d->input_vocab > 0 ? d->input_vocab : 256, L = d->dec->length;
    const char *src = r->opt.prompts ? "--prompts" : "--prompt";
    for (int64_t i = 0; i < g->n; i++) {
        const char *which = g->n > 1 ? " " : "";
        char num[32] = "";
        if (g->n > 1)
            snprintf(num, sizeof num, "%lld", (long long)i);
        if (g->len[i] < 1) {
            snprintf(err, errlen, "%s: prompt%s%s holds no token", src, which, num);
            return -1;
        }
        if (g->len[i] > L) {
            snprintf(err, errlen, "%s: prompt%s%s has %lld tokens, more than the %lld positions of the KV cache "
                     "(generate = kv_cache(length = ...) in the .pipe)", src, which, num, (long long)g->len[i],
                     (long long)L);
            return -1;
        }
        for (int64_t j = 0; j < g->len[i]; j++)
            if (g->p[i][j] < 0 || g->p[i][j] >= V) {
                if (!r->opt.tokenizer && !r->opt.prompts)
                    snprintf(err, errlen, "--prompt: byte %ld at position %lld is outside the vocabulary [0, %lld) "
                             "of model %s", (long)g->p[i][j], (long long)j, (long long)V, d->model);
                else
                    snprintf(err, errlen, "%s: prompt%s%s has token %ld at position %lld, outside the vocabulary "
                             "[0, %lld) of model %s", src, which, num, (long)g->p[i][j], (long long)j, (long long)V,
                             d->model);
                return -1;
            }
    }
    for (int k = 0; k < g->nstop; k++)
        if (g->stop[k] >= V) {
            snprintf(err, errlen, "--stop: token %ld is outside the vocabulary [0, %lld) of model %s", (long)g->stop[k],
                     (long long)V, d->model);
            return -1;
        }
    return 0;
}

/* The stop ids: --stop, else the tokenizer's end of text (if it has one). */
static int stop_ids(pg_run *r, pg_gen_in *g, char *err, size_t errlen)
{
    memcpy(g->stop, r->opt.stop, (size_t)r->opt.nstop * sizeof *g->stop);
    g->nstop = r->opt.nstop;
    if (r->opt.nstop || !r->opt.tokenizer)
        return 0;
    char *out = tokenizer_run(r, "eos", NULL, 0, err, errlen);
    if (!out)
        return -1;
    int32_t *ids = NULL;
    int64_t n = parse_ids(out, &ids, err, errlen);
    free(out);
    if (n < 0)
        return -1;
    if (n > 0)
        g->stop[g->nstop++] = ids[0];
    free(ids);
    return 0;
}

/* ---- the checks before the first step ------------------------------------------- */

int pg_run_generate_check(pg_run *r, char *err, size_t errlen)
{
    const pg_stage_desc *d = r->d;
    if (!d->dec) {
        if (d->dec_why)
            snprintf(err, errlen, "--generate: model %s cannot generate with a KV cache: %s", d->model, d->dec_why);
        else
            snprintf(err, errlen, "--generate needs a language model (input and target both i32[seq]); model %s is "
                     "not one", d->model);
        return -1;
    }
    if (strcmp(pg_backend_name(), "cpu") != 0) {
        snprintf(err, errlen, "--generate: generation with the KV cache runs on the CPU runtime; this stage is built "
                 "with the %s runtime (link the stages without CUDA=1 to generate)", pg_backend_name());
        return -1;
    }
    if (r->opt.prompt && r->opt.prompts) {
        snprintf(err, errlen, "--prompt and --prompts together: give one");
        return -1;
    }
    if (d->stage != 0 || r->gen)
        return 0;
    pg_gen_in *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    r->gen = g;
    int rc = (r->opt.prompts ? prompt_file(r, g, err, errlen) : prompt_text(r, g, err, errlen)) ||
             stop_ids(r, g, err, errlen) || prompts_fit(r, g, err, errlen);
    if (rc)
        pg_run_generate_free(r);
    return rc ? -1 : 0;
}

/* ---- the end: samples, --gen-out, the report ----------------------------------- */

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
        int peer = p->owner;
        if (p->owner != d->stage) {
            if ((st = pg_net_recv(r->net, p->owner, tag, r->A + p->off, vb, r->opt.timeout_s)))
                goto fail;
            if (pg_param_written(r->ctx, (const float *)(r->A + p->off), p->numel)) /* its bf16 shadow */
                return 1;
            continue;
        }
        for (peer = 0; peer < d->nstages && peer < 64; peer++)
            if (peer != d->stage && (p->stage_mask >> peer & 1) && (st = pg_net_send(r->net, peer, tag, r->A + p->off, vb)))
                goto fail;
        continue;
    fail:
        fprintf(stderr, "stage %d: --generate: %s a tied parameter's value with stage %d failed: %s\n", d->stage,
                p->owner != d->stage ? "receiving" : "sending", peer,
                st == PG_NET_TIMEOUT ? "timed out" : pg_net_error(r->net));
        return 1;
    }
    return 0;
}

/* Bytes as text: printable ASCII, newlines and tabs as they are, others as '?'. */
static void put_bytes(FILE *o, const int32_t *t, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int c = t[i];
        fputc((c >= 32 && c < 127) || c == '\n' || c == '\t' ? c : '?', o);
    }
}

/* A JSON string of bytes as tokens (each byte as the character of that code). */
static void json_bytes(FILE *o, const int32_t *t, int64_t n)
{
    fputc('"', o);
    for (int64_t i = 0; i < n; i++) {
        int c = t[i] & 0xff;
        if (c == '"' || c == '\\')
            fprintf(o, "\\%c", c);
        else if (c >= 32 && c < 127)
            fputc(c, o);
        else
            fprintf(o, "\\u%04x", c);
    }
    fputc('"', o);
}

/* A JSON string literal (tools/tokens.py decode's line) as its text. */
static void put_json_text(FILE *o, const char *lit)
{
    pg_json j;
    char *s = NULL;
    pg_json_init(&j, lit, strlen(lit));
    if (pg_json_string(&j, &s) == 0 && pg_json_end(&j) == 0)
        fputs(s, o);
    else
        fprintf(o, "(the tokenizer's text is not a JSON string: %s)", lit);
    free(s);
}

static void json_ids(FILE *o, const int32_t *t, int64_t n)
{
    fputc('[', o);
    for (int64_t i = 0; i < n; i++)
        fprintf(o, "%s%ld", i ? ", " : "", (long)t[i]);
    fputc(']', o);
}

/* The texts of the prompts with their continuations through the tokenizer:
 * a JSON string per line (tools/tokens.py decode), NULL with err. */
static char *decode_texts(const pg_run *r, const pg_gen_seqs *q, char *err, size_t errlen)
{
    const pg_gen_in *g = r->gen;
    char *in = NULL, *out;
    size_t inlen = 0;
    FILE *o = open_memstream(&in, &inlen);
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < g->n; i++) {
        int64_t n;
        int stopped;
        const int32_t *t = pg_gen_seqs_out(q, i, &n, &stopped);
        for (int64_t j = 0; j < g->len[i] + n; j++)
            fprintf(o, "%s%ld", j ? " " : "", (long)(j < g->len[i] ? g->p[i][j] : t[j - g->len[i]]));
        fputc('\n', o);
    }
    if (fclose(o)) {
        free(in);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    out = tokenizer_run(r, "decode", in, inlen, err, errlen);
    free(in);
    return out;
}

/* Stage 0: each prompt and its continuation (`sample: `, or `sample I: ` for
 * several), then --gen-out. 0, or 1 (printed). */
static int write_samples(pg_run *r, const pg_gen_seqs *q)
{
    const pg_gen_in *g = r->gen;
    char err[1200];
    char *texts = r->opt.tokenizer ? decode_texts(r, q, err, sizeof err) : NULL;
    if (r->opt.tokenizer && !texts) {
        fprintf(stderr, "stage %d: %s\n", r->d->stage, err);
        return 1;
    }
    char *line = texts, *jsonl = NULL;
    size_t jlen = 0;
    FILE *jo = r->opt.gen_out ? open_memstream(&jsonl, &jlen) : NULL;
    if (r->opt.gen_out && !jo) {
        free(texts);
        fprintf(stderr, "stage %d: out of memory for --gen-out\n", r->d->stage);
        return 1;
    }
    for (int64_t i = 0; i < g->n; i++) {
        int64_t n;
        int stopped;
        const int32_t *t = pg_gen_seqs_out(q, i, &n, &stopped);
        char *nl = line ? strchr(line, '\n') : NULL;
        if (nl)
            *nl = '\0';
        if (g->n > 1)
            printf("sample %lld: ", (long long)i);
        else
            fputs("sample: ", stdout);
        if (line)
            put_json_text(stdout, line);
        else
            put_bytes(stdout, g->p[i], g->len[i]), put_bytes(stdout, t, n);
        putchar('\n');
        if (jo) {
            fprintf(jo, "{\"prompt\": %lld, \"prompt_tokens\": ", (long long)i);
            json_ids(jo, g->p[i], g->len[i]);
            fprintf(jo, ", \"tokens\": ");
            json_ids(jo, t, n);
            fprintf(jo, ", \"stop\": \"%s\", \"text\": ", stopped ? "stop" : "length");
            if (line)
                fputs(line, jo);
            else {
                int32_t *all = malloc((size_t)(g->len[i] + n + 1) * sizeof *all);
                if (all) {
                    memcpy(all, g->p[i], (size_t)g->len[i] * sizeof *all);
                    memcpy(all + g->len[i], t, (size_t)n * sizeof *all);
                    json_bytes(jo, all, g->len[i] + n);
                }
                free(all);
            }
            fprintf(jo, "}\n");
        }
        line = nl ? nl + 1 : NULL;
    }
    fflush(stdout);
    free(texts);
    if (!jo)
        return 0;
    int rc = fclose(jo);
    const void *parts[1] = {jsonl};
    size_t lens[1] = {jlen};
    if (!rc && pg_io_write_atomic(r->opt.gen_out, parts, lens, 1, err, sizeof err)) {
        fprintf(stderr, "stage %d: --gen-out: %s\n", r->d->stage, err);
        rc = 1;
    }
    free(jsonl);
    return rc ? 1 : 0;
}

int pg_run_generate(pg_run *r)
{
    const pg_stage_desc *d = r->d;
    char err[1200];
    if (r->opt.generate <= 0 || r->replica != 0) /* one replica generates; the others have nothing to do */
        return 0;
    if (pg_run_generate_check(r, err, sizeof err)) {
        fprintf(stderr, "stage %d: %s\n", d->stage, err);
        return 1;
    }
    if (refresh_transmitted(r))
        return 1;
    const pg_dec_desc *dd = d->dec;
    pg_gen_seqs *q = NULL;
    if (d->stage == 0) {
        const pg_gen_in *g = r->gen;
        q = pg_gen_seqs_new(dd, g->p, g->len, g->n, r->opt.generate, g->stop, g->nstop,
                            d->input_vocab > 0 ? d->input_vocab : 256);
        if (!q) {
            fprintf(stderr, "stage %d: out of memory for --generate\n", d->stage);
            return 1;
        }
    }
    pg_sampling s = {r->opt.temperature, r->opt.top_k, r->opt.top_p, d->train.seed};
    pg_decode_stats st;
    int rc = pg_decode_run(r, q, &s, &st);
    if (!rc && q) {
        int64_t made = 0;
        for (int64_t i = 0; i < r->gen->n; i++) {
            int64_t n;
            int stopped;
            pg_gen_seqs_out(q, i, &n, &stopped);
            made += n;
        }
        rc = write_samples(r, q);
        printf("generation: %lld prompt%s, %lld new tokens in %.3f s (%.1f tokens/s); %lld rounds, %lld sequences "
               "at a time in %d micro-batches, KV cache of %lld positions%s\n",
               (long long)r->gen->n, r->gen->n == 1 ? "" : "s", (long long)made, st.wall_s,
               st.wall_s > 0 ? (double)made / st.wall_s : 0.0, (long long)st.rounds, (long long)dd->batch, dd->nmb,
               (long long)dd->length, pg_gen_seqs_shifts(q) ? " (full: a context kept its last half and went on)" : "");
    }
    if (!rc)
        printf("stage %d: generation bubble %.1f%% (decode calls %.3f s of %.3f s)\n", d->stage,
               st.wall_s > 0 ? 100.0 * (1.0 - st.busy_s / st.wall_s) : 0.0, st.busy_s, st.wall_s);
    fflush(stdout);
    pg_gen_seqs_free(q);
    return rc;
}
