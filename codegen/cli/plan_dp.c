/* codegen/cli/plan_dp.c — `pipegen plan`'s pp x dp table (plan_dp.h).
 *
 * A run of P stages x D replicas is P x D processes; the process of stage k
 * holds stage k's arena (compiled: the same for every D, the micro-batch
 * buffers sized for the whole batch's rows) and, with D > 1, the buffers of
 * the gradient reduction over the replicas and a send ring to each other
 * replica's copy of the stage (runtime/core/dp.c). The stage's figures for
 * dp_bytes.h are read from the model as the generated parameter table holds
 * them (emit.c: a stage's table is every parameter it uses; a buffer has no
 * gradient; a transmitted tie's copy on a user is not stepped, so not
 * reduced; a replicated tie's copy on a user is stepped but not reduced: its
 * owner sends it the sum); the arena and its categories from plan.json's
 * "stages". */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dp_bytes.h"
#include "json.h"
#include "cli/plan_dp.h"

/* What plan.json says of one stage. */
typedef struct stage_mem {
    int64_t arena, params, grads, opt;
} stage_mem;

static int64_t read_i64(pg_json *j)
{
    double v = 0;
    if (pg_json_peek(j) != PG_JSON_NUMBER) {
        pg_json_skip(j);
        return -1;
    }
    pg_json_number(j, &v);
    return (int64_t)v;
}

static void read_memory(pg_json *j, stage_mem *s)
{
    char *key;
    pg_json_object(j);
    while (pg_json_member(j, &key)) {
        if (!strcmp(key, "parameters"))
            s->params = read_i64(j);
        else if (!strcmp(key, "gradients"))
            s->grads = read_i64(j);
        else if (!strcmp(key, "optimizer state"))
            s->opt = read_i64(j);
        else
            pg_json_skip(j);
        free(key);
    }
}

/* mem[k] from plan.json's stages; 0, or -1 when the text is not as emit.c writes it. */
static int read_plan(const char *text, int nstages, stage_mem *mem)
{
    pg_json j;
    char *key;
    pg_json_init(&j, text, strlen(text));
    for (int k = 0; k < nstages; k++)
        mem[k] = (stage_mem){ -1, 0, 0, 0 };
    pg_json_object(&j);
    while (pg_json_member(&j, &key)) {
        if (!strcmp(key, "stages")) {
            pg_json_array(&j);
            for (int i = 0; pg_json_item(&j); i++) {
                stage_mem s = { -1, 0, 0, 0 };
                char *sk;
                pg_json_object(&j);
                while (pg_json_member(&j, &sk)) {
                    if (!strcmp(sk, "arena_bytes"))
                        s.arena = read_i64(&j);
                    else if (!strcmp(sk, "memory") && pg_json_peek(&j) == PG_JSON_OBJECT)
                        read_memory(&j, &s);
                    else
                        pg_json_skip(&j);
                    free(sk);
                }
                if (i < nstages)
                    mem[i] = s;
            }
        } else {
            pg_json_skip(&j);
        }
        free(key);
    }
    if (j.failed)
        return -1;
    for (int k = 0; k < nstages; k++)
        if (mem[k].arena < 0)
            return -1;
    return 0;
}

/* Stage k's inputs to dp_bytes.h, as dp.c computes them from its table:
 * numel the reduced floats; stepped: the stepped parameters' sizes in table
 * order (--zero 1, zero.c), nstepped of them (the caller frees it). */
typedef struct stage_red {
    int64_t numel, stats_max, buffer_numel;
    int nparams, nstepped;
    int64_t *stepped;
} stage_red;

static stage_red stage_reduction(const ir_model *m, int k)
{
    stage_red s = { 0, 0, 0, 0, 0, malloc((size_t)(m->nparams ? m->nparams : 1) * sizeof(int64_t)) };
    for (int p = 0; p < m->nparams; p++) {
        const ir_param *P = &m->params[p];
        if (!(P->stage_mask >> k & 1))
            continue;
        int64_t n = pg_shape_numel(&P->shape);
        s.nparams++;
        if (P->is_buffer) {
            s.buffer_numel += n;
            if (n > s.stats_max)
                s.stats_max = n;
        } else if (!(P->tie == TIE_TRANSMIT && P->owner_stage != k)) {
            if (!(P->tie == TIE_REPLICATE && P->owner_stage != k))
                s.numel += n;
            if (s.stepped)
                s.stepped[s.nstepped++] = n;
        }
    }
    return s;
}

/* Why the runtime refuses D replicas of this model (dp.c's pg_dp_layout), or NULL. */
static const char *refused(const ir_model *m, int D, char *buf, size_t n)
{
    int64_t B = m->train.batch, nmb = m->train.microbatches;
    if (B % D)
        snprintf(buf, n, "%d replicas do not divide the batch of %" PRId64 " rows", D, B);
    else if (B / D < nmb)
        snprintf(buf, n, "%d replicas leave %" PRId64 " rows each, fewer than the %" PRId64 " micro-batches", D, B / D,
                 nmb);
    else
        return NULL;
    return buf;
}

int pg_plan_dp_check(const ir_model *m, int dp)
{
    char why[160];
    if (dp > 0 && refused(m, dp, why, sizeof why)) {
        fprintf(stderr, "pipegen plan: --dp %d: %s of %s: the runtime refuses a run of %d replicas\n", dp, why,
                m->source_path ? m->source_path : m->name, dp);
        return 1;
    }
    return 0;
}

int pg_plan_dp_report(const ir_model *m, const pg_gen *g, int dp, FILE *o)
{
    static const int defaults[] = { 1, 2, 4, 8 };
    int Ds[4], nd = 0, P = m->nstages;
    char why[160];
    if (dp > 0) {
        if (pg_plan_dp_check(m, dp))
            return 1;
        Ds[nd++] = dp;
    } else {
        for (int i = 0; i < 4; i++)
            if (!refused(m, defaults[i], why, sizeof why))
                Ds[nd++] = defaults[i];
    }
    uint64_t hash;
    char *json = pg_gen_plan_json(g, &hash);
    stage_mem *mem = malloc((size_t)P * sizeof *mem);
    if (!json || !mem || read_plan(json, P, mem) != 0) {
        fprintf(stderr, "pipegen plan: %s\n", json && mem ? "plan.json is not as expected (no arena per stage)"
                                                         : "out of memory");
        free(json);
        free(mem);
        return 1;
    }
    free(json);
    fprintf(o, "pp x dp: per process, D replicas of the %d stage%s (rank = replica x %d + stage): the arena (compiled, "
               "the same for every D) and the gradient reduction's buffers and send rings (runtime/core/dp_bytes.h); "
               "sent: bytes replica 0 sends per step, 2 (D-1)/D of its gradient bytes. With --zero 1 (the optimizer "
               "state sharded over the replicas, ZeRO-1): z1 state, replica 0's optimizer state; z1 process, its "
               "per-process bytes (the arena holds that instead of the whole state); z1 sent, its shard of the "
               "updated weights to the others too (3 (D-1)/D of the gradient bytes where every stepped parameter is "
               "reduced)\n",
            P, P == 1 ? "" : "s", P);
    int nopt = pg_opt_adam(m->train.optimizer) ? 2 : m->train.momentum > 0 ? 1 : 0;
    for (int k = 0; k < P; k++) {
        stage_red s = stage_reduction(m, k);
        fprintf(o, "stage %d: arena %" PRId64 " bytes (parameters %" PRId64 ", gradients %" PRId64
                   ", optimizer state %" PRId64 "); %" PRId64 " gradient floats reduced\n",
                k, mem[k].arena, mem[k].params, mem[k].grads, mem[k].opt, s.numel);
        if (!s.stepped) {
            fprintf(stderr, "pipegen plan: out of memory\n");
            free(mem);
            return 1;
        }
        fprintf(o, "  %5s %14s %14s %14s %14s %14s %14s %14s %14s\n", "D", "chunk copies", "bn sums", "send rings",
                "per process", "sent", "z1 state", "z1 process", "z1 sent");
        for (int i = 0; i < nd; i++) {
            int D = Ds[i];
            pg_dp_bytes b = pg_dp_bytes_of(s.numel, s.stats_max, s.buffer_numel, s.nparams, D, 0);
            int64_t rings = (int64_t)(D - 1) * b.link;
            int64_t total = mem[k].arena + b.in + b.stats + rings, zs = mem[k].opt, zsent = b.sent;
            if (D > 1) { /* with one replica --zero 1 does nothing; the weights sent are the stepped ones' */
                int64_t stepped = 0;
                for (int j = 0; j < s.nstepped; j++)
                    stepped += s.stepped[j];
                zs = pg_zero_state_bytes(s.stepped, s.nstepped, nopt, D, 0);
                zsent += (int64_t)(D - 1) * pg_dp_shard_lo(stepped, D, 1) * 4;
            }
            fprintf(o, "  %5d %14" PRId64 " %14" PRId64 " %14" PRId64 " %14" PRId64 " %14" PRId64 " %14" PRId64
                       " %14" PRId64 " %14" PRId64 "\n", D, b.in, b.stats, rings, total, b.sent, zs,
                    total - mem[k].opt + zs, zsent);
        }
        free(s.stepped);
    }
    if (dp <= 0)
        for (int i = 0; i < 4; i++)
            if (refused(m, defaults[i], why, sizeof why))
                fprintf(o, "D = %d left out: %s\n", defaults[i], why);
    free(mem);
    return 0;
}
