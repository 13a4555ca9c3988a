/* runtime/core/sample.c — the next token from a row of logits (generate.h):
 * greedy, or a draw at temperature T among the top-k tokens and then the
 * top-p nucleus, in transformers' order (temperature, top-k, top-p). The
 * uniform comes from (seed, prompt, token index) alone, so the token is the
 * same whatever the stage count, the batch and its micro-batches: the logits
 * are the same bits there. */
#include <math.h>
#include <stdlib.h>

#include "generate.h"

#define SAMPLE_KEY UINT64_C(0x73616d706c65) /* "sample" */

/* A uniform in [0, 1) for token `made` of prompt `prompt`. */
static double uniform(uint64_t seed, int64_t prompt, int64_t made)
{
    uint64_t h = pg_splitmix64(pg_splitmix64(seed ^ SAMPLE_KEY) + (uint64_t)prompt);
    return (double)(pg_splitmix64(h + (uint64_t)made) >> 11) * 0x1.0p-53;
}

static int32_t argmax(const float *lg, int64_t V)
{
    int64_t best = 0;
    for (int64_t j = 1; j < V; j++)
        if (lg[j] > lg[best])
            best = j;
    return (int32_t)best;
}

/* larger logit first, ties by the smaller index: one order for equal inputs */
static int by_logit(const void *x, const void *y)
{
    const pg_sample_kv *a = x, *b = y;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

int pg_sampler_init(pg_sampler *s, int64_t V)
{
    s->V = V;
    s->kv = malloc((size_t)(V > 0 ? V : 1) * sizeof *s->kv);
    s->p = malloc((size_t)(V > 0 ? V : 1) * sizeof *s->p);
    return s->kv && s->p ? 0 : -1;
}

void pg_sampler_free(pg_sampler *s)
{
    free(s->kv);
    free(s->p);
    s->kv = NULL;
    s->p = NULL;
}

int32_t pg_sample(pg_sampler *s, const float *lg, int64_t prompt, int64_t made)
{
    const pg_sampling *o = &s->opt;
    int64_t V = s->V;
    if (!(o->temperature > 0))
        return argmax(lg, V);
    int64_t n = V;
    int sorted = (o->top_k > 0 && o->top_k < V) || o->top_p < 1.0;
    for (int64_t j = 0; j < V; j++)
        s->kv[j].v = lg[j], s->kv[j].i = (int32_t)j;
    if (sorted) {
        qsort(s->kv, (size_t)V, sizeof *s->kv, by_logit);
        if (o->top_k > 0 && o->top_k < n)
            n = o->top_k;
    }
    /* softmax(logits / T) over the n kept, its sum in the kept order */
    double mx = s->kv[0].v, sum = 0.0;
    for (int64_t j = 1; j < n && !sorted; j++)
        if (s->kv[j].v > mx)
            mx = s->kv[j].v;
    for (int64_t j = 0; j < n; j++)
        sum += s->p[j] = exp(((double)s->kv[j].v - mx) / o->temperature);
    if (o->top_p < 1.0) { /* the fewest of the most likely whose mass reaches top_p */
        double c = 0.0;
        int64_t k = 0;
        while (k < n && c < o->top_p * sum)
            c += s->p[k++];
        n = k > 0 ? k : 1;
        sum = 0.0;
        for (int64_t j = 0; j < n; j++)
            sum += s->p[j];
    }
    double u = uniform(o->seed, prompt, made) * sum, c = 0.0;
    for (int64_t j = 0; j < n; j++) {
        c += s->p[j];
        if (u < c)
            return s->kv[j].i;
    }
    return s->kv[n - 1].i;
}
