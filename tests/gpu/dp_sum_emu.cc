/* tests/gpu/dp_sum_emu.cc — the replicas' gradient sum of the NCCL path
 * (runtime/cuda/dp_sum.cuh, run by dp_nccl.cu after the reduce-scatter), run
 * on the CPU under tests/gpu/cuda_emu.h, against kernel_ref.h's
 * pg_ref_dp_sum (runtime/core/dp.c's sum on the CPU: x0 + x1 + ... + x(D-1),
 * one float addition after another): bit for bit, for 2 to 5 replicas, every
 * replica's place among them (its own copy in place, the others' from the
 * receive slots, in replica order without it), shard sizes below, at and
 * above a block and over the grid (the grid-stride loop), slots further
 * apart than the shard (the stride is the largest shard). Each case's data
 * spans magnitudes where the order of the additions changes the bits, and
 * the test checks that it does (another order would fail here; with 2
 * replicas, where a + b = b + a, that the other replica's slot is read). Run by
 * tests/dp_sum_emu.t in `make test`. */
#include "cuda_emu.h"

#include "../../runtime/cuda/dp_sum.cuh"
#include "../tap.h"

#include <vector>

static uint64_t rng = 11;
static float val(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(rng >> 11) * (1.0 / 9007199254740992.0);
    int e = (int)(rng >> 3 & 31) - 12; /* magnitudes 2^-12 .. 2^19: sums that round */
    return (float)ldexp(u - 0.5, e);
}

int main(void)
{
    const int64_t sizes[] = {1, 63, 64, 200, 1000};
    for (int D = 2; D <= 5; D++) {
        int cases = 0, bitwise = 0, order_matters = 0;
        for (int me = 0; me < D; me++)
            for (int64_t m : sizes) {
                int64_t stride = m + 3;
                std::vector<std::vector<float>> x((size_t)D, std::vector<float>((size_t)m));
                for (auto &v : x)
                    for (auto &f : v)
                        f = val();
                std::vector<float> own(x[(size_t)me]), recv((size_t)((D - 1) * stride), NAN), ref((size_t)m),
                    rev((size_t)m);
                for (int q = 0, slot = 0; q < D; q++)
                    if (q != me)
                        memcpy(&recv[(size_t)(slot++ * stride)], x[(size_t)q].data(), (size_t)m * 4);
                std::vector<const float *> xs, xr;
                for (int q = 0; q < D; q++) {
                    xs.push_back(x[(size_t)q].data());
                    xr.push_back(x[(size_t)(D - 1 - q)].data());
                }
                pg_ref_dp_sum(ref.data(), xs.data(), D, m);
                pg_ref_dp_sum(rev.data(), xr.data(), D, m);
                float *o = own.data();
                const float *rv = recv.data();
                /* 2 blocks of 64 threads: 128 elements a sweep, so 200 and 1000 loop */
                emu_launch(emu_dim3{2, 1, 1}, 64, [=] { pg_dp_sum_kernel(o, rv, stride, D, me, m); });
                cases++;
                bitwise += memcmp(own.data(), ref.data(), (size_t)m * 4) == 0;
                /* 2 replicas: a + b = b + a, so instead the other's slot must count */
                order_matters += memcmp(D == 2 ? x[(size_t)me].data() : rev.data(), ref.data(), (size_t)m * 4) != 0;
            }
        OK(bitwise == cases, "%d replicas: the kernel's sums equal the replica-order reference bit for bit in %d of %d "
           "cases (every place of the replica, shards of 1 to 1000 floats)", D, bitwise, cases);
        if (D == 2)
            OK(order_matters == cases, "2 replicas: the sum differs from the replica's own copy in %d of %d cases (the "
               "check above sees the other replica's slot)", order_matters, cases);
        else
            OK(order_matters >= cases - D, "%d replicas: summing in reverse replica order changes the bits in %d of %d "
               "cases (the check above sees the order)", D, order_matters, cases);
    }
    return DONE();
}
