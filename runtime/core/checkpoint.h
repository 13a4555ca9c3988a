/* runtime/core/checkpoint.h — training checkpoints of a whole pipeline, and
 * resuming from them (--checkpoint-dir DIR --save-every N, --resume DIR).
 *
 * Layout (README.md, "Checkpoints and resume"):
 *   DIR/step-00000120/stage<k>.safetensors  each stage's weights and optimizer
 *       state: tensors "w:<name>", "opt0:<name>", "opt1:<name>"; metadata
 *       format, model, plan_hash, stage, nstages, step, data_position, seed and
 *       checksum (FNV-1a 64 over every tensor's bytes in file order)
 *   DIR/step-00000120/MANIFEST  written by stage 0 only after every stage has
 *       reported (over the network) that its file is durable: the model, plan
 *       hash, stage count, step and each stage's checksum, then its own hash
 *   DIR/LATEST  "step-00000120", replaced atomically after the manifest
 * A step without a MANIFEST is never used. The data position and the random
 * streams are pure functions of (seed, step), so the step restores them.
 * Both calls are collective: every stage calls them at the same point. */
#ifndef PG_CHECKPOINT_H
#define PG_CHECKPOINT_H

#include <stdint.h>
#include "stage_run.h"

/* Message kinds of the runtime's own exchanges (below PG_TAG_SAVE). */
#define PG_TAG_CKPT 27u     /* checkpoint: reports, verdicts, the resume agreement */
#define PG_TAG_VERDICT 28u  /* non-finite loss verdict (guard.c) */
#define PG_TAG_STOP 29u     /* --save-on-exit stop agreement (guard.c) */

/* Keep this many complete checkpoints; older ones go once a newer one is complete. */
#define PG_CKPT_KEEP 2

/* Write the checkpoint after `step` completed steps to r->opt.ckpt_dir.
 * 0 when it is complete on every stage; 1 after printing what failed (the
 * previous complete checkpoint is left as it was). */
int pg_ckpt_save(pg_run *r, int64_t step);

/* Load the newest checkpoint in r->opt.resume that every stage can use (each
 * validates its own file; stage 0 picks the newest step valid everywhere).
 * 0 with *start_step set, or 1 after printing why nothing is usable. */
int pg_ckpt_resume(pg_run *r, int64_t *start_step);

/* Not collective: remove from every DIR/step-* this stage's temporaries
 * (stage<k>.safetensors.tmp.<pid>; stage 0 also MANIFEST's and DIR/LATEST's)
 * whose writer died (a stage killed while it wrote a checkpoint), and a step
 * directory left empty by that. Returns how many files were removed. */
int pg_ckpt_clean_stale(const pg_stage_desc *d, const char *dir);

#endif
