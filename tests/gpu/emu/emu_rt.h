/* tests/gpu/emu/emu_rt.h — what the emulated CUDA runtime (cudart_emu.cc)
 * offers the emulated libraries (cublas_emu.cc, nccl_emu.cc): the allocation
 * map, device-range checks, stream operations and the messages. Internal to
 * tests/gpu/emu/. */
#ifndef PG_EMU_RT_H
#define PG_EMU_RT_H

#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <utility>
#include <vector>

#include "cuda_runtime.h"

namespace pg_emu_rt {

enum mem_kind { MEM_HOST = 0, MEM_PINNED = 1, MEM_DEVICE = 2 };

/* One allocation: device memory (cudaMalloc, or another process's opened by
 * CUDA IPC) or pinned host memory (cudaMallocHost). */
struct region {
    char *base;
    size_t bytes;
    int kind;
    int imported;
    uint64_t serial; /* the n-th allocation of this process, for messages */
};

/* The allocation holding [p, p + bytes) (bytes 0: p itself, or one past its
 * end); 0 when p is ordinary host memory or the range leaves its allocation. */
int find(const void *p, size_t bytes, region *out);
/* What [p, p + bytes) is: MEM_DEVICE or MEM_PINNED inside one allocation,
 * MEM_HOST for memory no CUDA call made; -1 when it starts in an allocation
 * and runs past its end (the message describes it in why). */
int classify(const void *p, size_t bytes, char *why, size_t whylen);

/* "cuda-emu: ..." on stderr. */
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* What a GPU would not survive or leaves undefined: the message, then abort. */
[[noreturn]] void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One operation of a stream: run on the stream's worker thread, in order.
 * ranges: the memory it touches (pointer, bytes), checked to be still
 * allocated when it runs (a graph replayed after a free says so). */
struct op {
    const char *what = "";
    const char *file = "";
    int line = 0;
    std::function<void()> run;
    std::vector<std::pair<const void *, size_t>> ranges;
    op() = default;
    op(const char *w, std::function<void()> r, std::vector<std::pair<const void *, size_t>> rg = {})
        : what(w), run(std::move(r)), ranges(std::move(rg))
    {
    }
};

/* Enqueues o on s, or records it into s's capture. cudaSuccess, or the
 * error a capture rule gives (the capture is invalidated then). */
cudaError_t submit(cudaStream_t s, op &&o);
/* The calling thread's last error (cudaGetLastError). */
void set_last(cudaError_t e);

/* Host code may touch device memory in this scope (the shims' own copies). */
struct dev_access {
    dev_access();
    ~dev_access();
    uint32_t saved;
};

} // namespace pg_emu_rt

#endif
