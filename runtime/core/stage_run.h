/* runtime/core/stage_run.h — the stage program's state (one named context
 * struct, no globals) shared by main.c (options, start-up, save) and step.c
 * (one training step: data, the action table, the optimizer). */
#ifndef PG_STAGE_RUN_H
#define PG_STAGE_RUN_H

#include <stdint.h>
#include "pg_io.h"
#include "pg_net.h"
#include "pg_ops.h"
#include "pg_stage.h"

typedef struct pg_run_opts {
    int64_t steps;
    int64_t log_every;
    const char *data, *targets, *save;
    const char *save_grads;   /* --save-grads: the last step's gradients */
    int threads;
    double timeout_s;
} pg_run_opts;

typedef struct pg_run {
    const pg_stage_desc *d;
    pg_run_opts opt;
    pg_ctx *ctx;
    unsigned char *A;         /* the arena */
    pg_net *net;
    pg_datafile in, tg;
    int have_in, have_tg;
    void *host;               /* host staging: the largest of batch input, batch target, one parameter */
    size_t host_bytes;
    double *loss;             /* [nmb] partial losses of this step */
    void *synth_in, *synth_tg; /* synthetic data: the fixed batches, made at start-up (pg_run_synth_init) */
    double *norms, *norm_in;  /* [nmodel_params]: grad-norm exchange */
    double compute_s;         /* time inside compute actions, steps after the first */
    double wall_s;            /* wall time of the steps after the first */
    double first_wall_s;      /* wall time of the first step */
    int cur_action;
} pg_run;

double pg_run_now(void);
/* One training step (0-based). Returns 0 or 1 after printing the failure. */
int pg_run_step(pg_run *r, int64_t step, double *loss_out);
/* Allocate and fill the synthetic batches this stage reads (none when it reads
 * data files). 0 or 1 after printing the failure; main frees synth_in/_tg. */
int pg_run_synth_init(pg_run *r);

#endif
