/* runtime/core/generate.h — generation with the KV cache inside the runtime
 * (--generate; the stage file's side is pg_dec_desc in pg_contract.h):
 *   sample.c    the next token from a row of logits
 *   gen_seqs.c  stage 0's sequences: the prompts, their cache rows, each round's
 *               calls, the sampled tokens taken, stops, a full cache's shift
 *   decode.c    the rounds of the decode schedule on every stage: the calls,
 *               their row tables before every message, the sampler on the
 *               stage holding the last chunk, the tokens back to stage 0
 *   generate.c  --generate: prompts in (bytes, a prompts file, a tokenizer),
 *               text out, the checks before the first step, the report */
#ifndef PG_GENERATE_H
#define PG_GENERATE_H

#include <stdint.h>

#include "stage_run.h"

/* ---- the sampler (sample.c) ---- */
typedef struct pg_sampling {
    double temperature;       /* 0: greedy (the first largest logit) */
    int64_t top_k;            /* 0: every token */
    double top_p;             /* 1: every token */
    uint64_t seed;            /* train.seed */
} pg_sampling;
typedef struct pg_sample_kv {
    float v;
    int32_t i;
} pg_sample_kv;
typedef struct pg_sampler {
    pg_sampling opt;
    int64_t V;
    pg_sample_kv *kv;         /* [V] workspace */
    double *p;                /* [V] workspace */
} pg_sampler;
int pg_sampler_init(pg_sampler *s, int64_t V); /* 0, -1 out of memory */
void pg_sampler_free(pg_sampler *s);
/* Token number `made` (0: the first new one) of prompt `prompt` from lg[V]. */
int32_t pg_sample(pg_sampler *s, const float *lg, int64_t prompt, int64_t made);

/* A sequence of a decode call as the messages carry it: the row table's
 * PG_DEC_ROW_INTS ints (pg_contract.h), then its prompt and the index of the
 * token the call samples (the sampler's uniform). */
enum { PG_DEC_PROMPT = 4, PG_DEC_MADE = 5, PG_DEC_MSG_INTS = 6 };

/* ---- stage 0's sequences (gen_seqs.c) ----
 * new: prompts[i] (plen[i] ids, 1 <= plen[i] <= dd->length), at most max_new
 * new tokens each, ending early at any of the nstop ids in stop; NULL out of
 * memory. call: micro-batch mb's call of this round: its sequences' rows
 * (PG_DEC_MSG_INTS each) and their token ids [nseq x t] (pads 0); returns
 * nseq (0: nothing to do) and sets *t. take: the tokens sampled from that
 * call, one per row (-1 where it sampled none); -1 when a token is not an id
 * of the vocabulary (err says which). out: prompt i's new tokens and whether
 * a stop id ended it (1) or max_new (0); the shifts, how often a full cache
 * kept its last half and recomputed it. */
typedef struct pg_gen_seqs pg_gen_seqs;
pg_gen_seqs *pg_gen_seqs_new(const pg_dec_desc *dd, int32_t *const *prompts, const int64_t *plen, int64_t n,
                             int64_t max_new, const int32_t *stop, int nstop, int64_t vocab);
int64_t pg_gen_seqs_call(pg_gen_seqs *q, int mb, int32_t *rows, int32_t *tok, int64_t *t);
int pg_gen_seqs_take(pg_gen_seqs *q, const int32_t *rows, int64_t nseq, const int32_t *tokens, char *err,
                     size_t errlen);
const int32_t *pg_gen_seqs_out(const pg_gen_seqs *q, int64_t i, int64_t *n, int *stopped);
int64_t pg_gen_seqs_shifts(const pg_gen_seqs *q);
void pg_gen_seqs_free(pg_gen_seqs *q);

/* ---- the rounds (decode.c) ----
 * Every stage of replica 0, together: rounds of the decode schedule until a
 * round in which no micro-batch has work. q: stage 0's sequences (NULL on
 * the others); s: the sampler's settings (the stage holding the last chunk).
 * 0, or 1 after printing the failure. */
typedef struct pg_decode_stats {
    int64_t rounds, calls, tokens; /* rounds, decode calls of this stage, tokens it sampled */
    double wall_s, busy_s;         /* the rounds' time, the part in decode calls and sampling */
} pg_decode_stats;
int pg_decode_run(pg_run *r, pg_gen_seqs *q, const pg_sampling *s, pg_decode_stats *st);

#endif
