/* tests/gpu/emu/include/cuda_bf16.h — bf16 for the emulated build: the type and
 * conversions are tests/gpu/cuda_emu.h's. */
#ifndef PG_EMU_CUDA_BF16_H
#define PG_EMU_CUDA_BF16_H
#include "../../cuda_emu.h"
#endif
