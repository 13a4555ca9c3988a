/* tests/gpu/emu/include/library_types.h — CUDA's data type tags (the values of
 * CUDA's library_types.h) for the emulated cuBLAS. */
#ifndef PG_EMU_LIBRARY_TYPES_H
#define PG_EMU_LIBRARY_TYPES_H
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
#endif
