/* runtime/core/checkpoint.h — training checkpoints of a whole pipeline, and
 * resuming from them (--checkpoint-dir DIR --save-every N, --resume DIR).
 *
 * Layout (docs/runtime.md, "Checkpoints and resume"):
 *   DIR/step-00000120/stage<k>.safetensors  each stage's weights and optimizer
 *       state: tensors "w:<name>", "opt0:<name>", "opt1:<name>" (not the copy
 *       a user of a transmitted tie holds: its owner's is current); metadata
 *       format, model, model_id, plan_hash, stage, nstages, replicas, step,
 *       data_position, seed, checksum and checksum_covers (FNV-1a 64 over the
 *       tensor table, a line "name dtype shape begin,end" per tensor, then
 *       every tensor's bytes in file order; a file without checksum_covers,
 *       an older pipegen's, has it over the bytes alone)
 *   DIR/LOCK  flock'ed by stage 0 of replica 0 while the run writes into DIR,
 *       naming the run id, host and pid (pg_ckpt_lock)
 *   DIR/step-00000120/MANIFEST  written by stage 0 only after every stage has
 *       reported (over the network) that its file is durable: the model, plan
 *       hash, stage count, step, replicas (the data-parallel count D of the
 *       writer; one copy per stage is written), the model identity (model_id,
 *       and its parts arch, params, train), each stage's checksum and the run
 *       the checkpoint belongs to (a random id made by a fresh run and carried
 *       on by every resume of it), then its own hash
 *   DIR/LATEST  "step-00000120\nrun ID\n", replaced atomically after the manifest
 * A step without a MANIFEST is never used. The data position and the random
 * streams are pure functions of (seed, step), so the step restores them.
 *
 * Resume reads a checkpoint of any layout (stage count, split, schedule,
 * checkpoint mode, tie mode, replicas) of the same model identity: each stage
 * reads the tensors it holds from whichever of the old stage files hold them,
 * validating every file it reads, and takes a parameter several old stages
 * hold (a tie) from the first once the copies agree bitwise. A checkpoint
 * without a model identity (older) resumes only on its own plan.
 * Both calls are collective: every stage calls them at the same point. */
#ifndef PG_CHECKPOINT_H
#define PG_CHECKPOINT_H

#include <stdint.h>
#include "stage_run.h"

/* Its messages use the tag kind PG_TAG_CKPT (pg_contract.h). */

/* Keep this many complete checkpoints; older ones go once a newer one is complete. */
#define PG_CKPT_KEEP 2

/* Write the checkpoint after `step` completed steps to r->opt.ckpt_dir.
 * 0 when it is complete on every stage; 1 after printing what failed (the
 * previous complete checkpoint is left as it was). */
int pg_ckpt_save(pg_run *r, int64_t step);

/* Load the checkpoint in r->opt.resume to continue from: the one LATEST names
 * when every stage can use it, else the newest of the same run that every
 * stage can use (every step directory is looked at; each stage validates the
 * manifest and every old stage file it reads). 0 with *start_step set; 1
 * after printing why nothing is usable; 2 when that checkpoint lies past
 * --steps (nothing to train). */
int pg_ckpt_resume(pg_run *r, int64_t *start_step);
/* Stage 0: a new checkpoint run id into r->ck_run (a fresh run). */
void pg_ckpt_new_run(pg_run *r);
/* Before any work, every stage (preflight.c): may this run write checkpoints
 * into r->opt.ckpt_dir? Not when it holds another run's complete checkpoints
 * (a fresh run, or one resumed from elsewhere), unless --replace-checkpoints.
 * 0, or -1 with the reason in err. */
int pg_ckpt_check_owner(pg_run *r, char *err, size_t errlen);

/* Stage 0 of replica 0, before any work (preflight.c): lock the checkpoint
 * directory (DIR/LOCK, flock, held until pg_ckpt_unlock; the directory is
 * made if it is not there). 0, or -1 with "it is in use by another run (run
 * ID on host H, pid P holds DIR/LOCK) ..." in err. Not collective. */
int pg_ckpt_lock(pg_run *r, char *err, size_t errlen);
/* Release it at the end (the lock file goes; a directory the lock made goes
 * too when it is still empty). */
void pg_ckpt_unlock(pg_run *r);

/* Not collective: remove from every DIR/step-* this stage's temporaries
 * (stage<k>.safetensors.tmp.<pid>; stage 0 also MANIFEST's and DIR/LATEST's)
 * whose writer died (a stage killed while it wrote a checkpoint), and a step
 * directory left empty by that. Returns how many files were removed. */
int pg_ckpt_clean_stale(const pg_stage_desc *d, const char *dir);

#endif
