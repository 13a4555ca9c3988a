/* dsl/cost_conv.c — the cost model of the kinds of convolutional networks
 * (pg_layer_flops for LK_CONV2D on; cost.h). Floating-point operations per
 * sample, a multiply-add counted as 2, as cost.c counts:
 *   conv2d / conv1d: M = out OH OW (in / groups) kh kw multiply-adds;
 *     F = 2M + the bias (out OH OW), B = 2M (dX), W = 2M + the bias (dW, db);
 *   conv_transpose2d: M = in H W (out / groups) kh kw (per input position);
 *     F = 2M + the bias, B = 2M, W = 2M + the bias;
 *   maxpool2d / avgpool2d: kh kw per output element in F and in B;
 *   global_avgpool, mean: 1 per input element in F and B;
 *   upsample: 1 per output element (nearest), 4 (bilinear) in F and B;
 *   flatten, reshape, transpose: 1 per element in F and B (copies);
 *   batchnorm2d: as batchnorm, 5 per element in F and B, 2 in W;
 *   sigmoid, tanh, silu: 8 per element in F and B (an exponential).
 * Copies and pools are memory-bound: a measured profile corrects them. */
#include "cost.h"

static double numel(const pg_shape *s) { return (double)pg_shape_numel(s); }

pg_layer_cost pg_layer_flops_conv(const ir_layer *L)
{
    pg_layer_cost c = { 0, 0, 0, 0 };
    double out = numel(&L->out), in = numel(&L->in);
    double g = L->groups > 0 ? (double)L->groups : 1.0, win = (double)(L->kernel[0] * L->kernel[1]);
    switch (L->kind) {
    case LK_CONV2D: case LK_CONV1D: {
        double macs = out * ((double)L->in_features / g) * win, bias = L->bias ? out : 0.0;
        c.fwd = 2.0 * macs + bias;
        c.bwd_b = 2.0 * macs;
        c.bwd_w = 2.0 * macs + bias;
        break;
    }
    case LK_CONV_T2D: {
        double macs = in * ((double)L->out_features / g) * win, bias = L->bias ? out : 0.0;
        c.fwd = 2.0 * macs + bias;
        c.bwd_b = 2.0 * macs;
        c.bwd_w = 2.0 * macs + bias;
        break;
    }
    case LK_MAXPOOL2D: case LK_AVGPOOL2D:
        c.fwd = c.bwd_b = out * win;
        break;
    case LK_GLOBAL_AVGPOOL: case LK_MEAN:
        c.fwd = c.bwd_b = in;
        break;
    case LK_UPSAMPLE:
        c.fwd = c.bwd_b = (L->bilinear ? 4.0 : 1.0) * out;
        break;
    case LK_FLATTEN: case LK_RESHAPE: case LK_TRANSPOSE:
        c.fwd = c.bwd_b = out;
        break;
    case LK_BATCHNORM2D:
        c.fwd = c.bwd_b = 5.0 * out;
        c.bwd_w = 2.0 * out;
        break;
    case LK_SIGMOID: case LK_TANH: case LK_SILU:
        c.fwd = c.bwd_b = 8.0 * out;
        break;
    default:
        break;
    }
    return c;
}
