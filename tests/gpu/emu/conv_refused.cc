/* tests/gpu/emu/conv_refused.cc — convolutions are not emulated.
 * runtime/cuda/conv.cu computes them through cuDNN, which the emulator has no
 * stand-in for (an independent convolution library to check cuDNN's layouts
 * against is work of its own: tests/gpu/emu/README.md); the emulated build
 * leaves conv.cu out and links these instead. Each refuses with a note, so a
 * convolutional stage linked against the emulated runtime fails at its first
 * convolution with the reason, never trains on something that is not cuDNN.
 * Pooling, upsample, batchnorm2d and the channel ops (pool.cu,
 * batchnorm2d.cu, dims.cu) are runtime/cuda's own kernels and are emulated. */
#include "emu_rt.h"
extern "C" {
#include "pg_ops.h" /* C: the stages link its C symbols */
}

static int refuse(const char *op)
{
    pg_emu_rt::note("%s: convolutions run on cuDNN, which is not emulated (runtime/cuda/conv.cu is left out of the "
                    "emulated build): train convolutional networks on a GPU or the CPU runtime",
                    op);
    return 1;
}

int pg_conv2d_fwd(pg_ctx *, int64_t, const pg_conv *, const float *, const float *, const float *, float *, float *)
{
    return refuse("conv2d_fwd");
}

int pg_conv2d_bwd_in(pg_ctx *, int64_t, const pg_conv *, const float *, const float *, float *, float *)
{
    return refuse("conv2d_bwd_in");
}

int pg_conv2d_bwd_w(pg_ctx *, int64_t, const pg_conv *, const float *, const float *, float *, float *, float *)
{
    return refuse("conv2d_bwd_w");
}

int pg_conv_transpose2d_fwd(pg_ctx *, int64_t, const pg_conv *, const float *, const float *, const float *, float *,
                            float *)
{
    return refuse("conv_transpose2d_fwd");
}

int pg_conv_transpose2d_bwd_in(pg_ctx *, int64_t, const pg_conv *, const float *, const float *, float *, float *)
{
    return refuse("conv_transpose2d_bwd_in");
}

int pg_conv_transpose2d_bwd_w(pg_ctx *, int64_t, const pg_conv *, const float *, const float *, float *, float *,
                              float *)
{
    return refuse("conv_transpose2d_bwd_w");
}
