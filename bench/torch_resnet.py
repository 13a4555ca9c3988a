#!/usr/bin/python3
"""bench/torch_resnet.py — the PyTorch eager anchor of bench/resnet.sh: the
ResNet of examples/resnet.pipe, the hand-written model of the tests
(tests/torch_examples.py, its width read from the plan), float32, trained on
random images and labels, the whole batch per step (as one trains in eager
PyTorch), SGD with the example's lr, momentum and weight decay, on --threads
threads, in PyTorch's default layout (NCHW) or, with --channels-last, NHWC.
Prints

    torch-eager threads N layout nchw|channels_last step_ms <median ms> loss <last loss>

Each step is timed whole (zero_grad, forward, loss, backward, SGD step); the
median is over the steps after the first --warmup.
usage: torch_resnet.py --plan plan.json --threads N --steps S --warmup W [--channels-last]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_examples import ResNet  # noqa: E402  (the model as the tests write it)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float32)  # torch_examples uses float64 for the tests
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    plan = json.load(open(a.plan))
    tr = plan["train"]
    c = next(p["shape"][0] for p in plan["params"] if p["name"] == "stem.weight")
    size = plan["input"]["shape"][1]
    model = ResNet(c)
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": tr["weight_decay"]}, {"params": rest, "weight_decay": 0.0}],
                          lr=tr["lr"], momentum=tr["momentum"])
    x = torch.rand(tr["batch"], 3, size, size) * 2 - 1
    y = torch.randint(0, 10, (tr["batch"],))
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    times, loss = [], None
    for _ in range(a.steps):
        t = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    print("torch-eager threads %d layout %s step_ms %.3f loss %.4f" % (a.threads, "channels_last" if a.channels_last else
          "nchw", statistics.median(times[a.warmup:]) * 1000, loss.item()))


if __name__ == "__main__":
    main()
