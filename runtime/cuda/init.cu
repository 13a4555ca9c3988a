/* runtime/cuda/init.cu — pg_init_param for the CUDA backend. The contract
 * makes it host-side (values are generated on the host, then uploaded with the
 * rest of the arena), and its formula is part of the checkpoint format, so
 * there must be exactly one copy of it: this file compiles the CPU backend's
 * runtime/cpu/init.c itself, as host C++. cuda_common.h has already declared
 * pg_init_param (and pg_rt_error) with C linkage, so the definition below keeps
 * C linkage and the same symbol as in the CPU library. */
#include "cuda_common.h"

#include "../cpu/init.c"
