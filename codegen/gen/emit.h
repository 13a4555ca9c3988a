/* codegen/gen/emit.h — from a checked model and its verified schedule to the
 * generated files of one model: stage<k>.c per stage, <model>.h documenting
 * every buffer, plan.json describing model, partition, schedule and memory.
 * Also `pipegen plan`'s report. Output is byte-stable: no dates, no absolute paths. */
#ifndef PG_EMIT_H
#define PG_EMIT_H

#include <stdint.h>
#include <stdio.h>
#include "diag.h"
#include "ir.h"
#include "gen/memplan.h"
#include "schedule/schedule.h"

#include "pg_version.h"

typedef struct pg_gen pg_gen;

/* Lay out every stage (tensors, slots, frames, memory plan). Refuses layers and
 * features the code generator does not do yet with a located error. 0 on success.
 * guard_bytes > 0 (a multiple of 64): that many free bytes before the first arena
 * buffer and after each, and the stage files list the buffers (pg_stage_desc's
 * arena_bufs) so that a runtime built with AddressSanitizer poisons the gaps. The
 * offsets, and with them plan.json and its hash, then differ from a packed plan;
 * --resume checkpoints and weight files name tensors, so they still mix. 0:
 * packed, as always. */
int pg_gen_prepare(const ir_model *m, const pg_schedule *s, int64_t guard_bytes, pg_gen **out, pg_diag *d);
/* Stage k's arena bytes (the memory plan's total). */
int64_t pg_gen_arena_bytes(const pg_gen *g, int k);
/* plan.json also records `"auto": json` (schedule = auto's table, balance.h);
 * json is not copied and must outlive g. */
void pg_gen_set_auto_json(pg_gen *g, const char *json);
/* plan.json also records `"blocks": json` (`stages = N`: whole blocks per
 * stage or a split inside one, and why; balance.h); as auto_json. */
void pg_gen_set_blocks_json(pg_gen *g, const char *json);
/* `pipegen plan`: bytes per stage per category and the arena total. */
void pg_gen_report(const pg_gen *g, FILE *out);
/* Write stage<k>.c, <model>.h and plan.json into dir (created if missing), as
 * one generation: all or nothing, the files of an older generation that this
 * one does not write removed (gen_files.h). */
int pg_gen_write(const pg_gen *g, const char *dir, pg_diag *d);
/* plan.json text (malloc'd) and its hash; NULL on out of memory. */
char *pg_gen_plan_json(const pg_gen *g, uint64_t *hash);
void pg_gen_free(pg_gen *g);

#endif
