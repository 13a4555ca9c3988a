/* runtime/core/pg_stage.h — what a generated stage<k>.c includes: the ops it
 * calls (pg_ops.h) and the contract its tables follow (pg_contract.h).
 *
 * The generated file defines one `const pg_stage_desc pg_stage` holding
 * everything the runtime needs: the arena size, the parameter tables, the
 * per-chunk forward / backward-input / backward-weight functions, and the step
 * as a static action table whose SEND/RECV entries carry fixed arena offsets
 * and exact byte counts. The runtime owns the loop, data, network, optimizer.
 * The generated code only calls pg_ops.h and points into the arena, so it is
 * the same for the CPU and CUDA backends. */
#ifndef PG_STAGE_H
#define PG_STAGE_H

#include <stdint.h>
#include "pg_contract.h"
#include "pg_ops.h"

/* Defined by the generated stage<k>.c. */
extern const pg_stage_desc pg_stage;

/* Generated code checks every op: `PG_TRY(pg_linear_fwd(...));` */
#define PG_TRY(call) do { int pg_rc_ = (call); if (pg_rc_) return pg_rc_; } while (0)

/* After a layer's weight-gradient code: its parameters' gradients are final
 * when this is the step's last micro-batch of the chunk, and the runtime
 * (dp.c) then set the hook to start summing them over the replicas. A test
 * and a branch otherwise: nothing measurable for one replica. */
#define PG_GRADS_FINAL(io, l) do { if ((io)->grads_final) (io)->grads_final((io)->grads_final_arg, (l)); } while (0)

#endif
