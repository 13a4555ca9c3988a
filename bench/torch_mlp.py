#!/usr/bin/python3
"""bench/torch_mlp.py — the PyTorch anchors for the quickstart MLP benchmark.

Trains the network of examples/mlp.pipe (512 -> 512 -> 1024 -> 256, ReLUs,
mse(sum), SGD momentum 0.9) on the CPU with the same batch and micro-batch
count, two ways, and prints one line per way:

    torch-plain  step_ms <median ms>
    torch-pipe   step_ms <median ms>

torch-plain: ordinary eager training of the whole batch.
torch-pipe:  torch.distributed.pipeline.sync.Pipe over 3 partitions, chunks =
             micro-batches, checkpoint='never' (the PyTorch pipeline the seeds
             describe), on the CPU device.
Both use the .pipe's optimizer, SGD with --lr and --momentum (bench/run.sh
passes examples/mlp.pipe's). Each step is timed
whole (zero_grad, forward, loss, backward, optimizer step); the median is taken
over the steps after the first `--warmup`.
usage: torch_mlp.py --threads N --batch B --chunks M --steps S --warmup W
                    [--lr LR --momentum MU]
"""
import argparse, os, statistics, sys, time
import torch
import torch.nn as nn


def model():
    torch.manual_seed(1)
    return nn.Sequential(
        nn.Sequential(nn.Linear(512, 512), nn.ReLU()),
        nn.Sequential(nn.Linear(512, 1024), nn.ReLU()),
        nn.Sequential(nn.Linear(1024, 256), nn.ReLU()))


def run(net, forward, steps, batch, warmup, lr, momentum):
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    g = torch.Generator().manual_seed(2)
    x = torch.rand(batch, 512, generator=g) * 2 - 1
    y = torch.rand(batch, 256, generator=g) * 2 - 1
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        out = forward(x)
        loss = ((out - y) ** 2).sum()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[warmup:] if steps > warmup else times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--momentum", type=float, default=0.9)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    net = model()
    t = run(net, net, a.steps, a.batch, a.warmup, a.lr, a.momentum)
    print(f"torch-plain step_ms {t * 1e3:.3f}", flush=True)

    import torch.distributed.rpc as rpc
    from torch.distributed.pipeline.sync import Pipe
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29600 + os.getpid() % 1000))
    rpc.init_rpc("bench", rank=0, world_size=1)
    try:
        pipe = Pipe(model(), chunks=a.chunks, checkpoint="never")
        t = run(pipe, lambda x: pipe(x).local_value(), a.steps, a.batch, a.warmup, a.lr, a.momentum)
        print(f"torch-pipe step_ms {t * 1e3:.3f}", flush=True)
    finally:
        rpc.shutdown()


if __name__ == "__main__":
    sys.exit(main())
