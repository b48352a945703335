#!/usr/bin/env python3
"""Real PyTorch (CPU) workloads for scripts/bench-torch-host.sh: the shapes
that made oomgate's host figure unstable, each with a known allocation.

    torch_host_workloads.py single       # one process, a 400 MB tensor held 3 s
    torch_host_workloads.py train        # one process training an MLP with Adam, 40 steps
    torch_host_workloads.py shared       # a 500 MiB tensor in shared memory (share_memory_),
                                         # held by 2 spawned workers for 3 s
    torch_host_workloads.py dataloader   # a DataLoader with 2 forked workers, 6 s
    torch_host_workloads.py spawned      # torch.multiprocessing.spawn: 2 workers
                                         # holding 300 MiB each for 4 s of a 12 s case
    torch_host_workloads.py spike        # 100 MB held, a 400 MB spike freed at once
    torch_host_workloads.py server PORT  # a 300 MB "model" serving batches of 8
                                         # requests, each a 64 MB activation held 300 ms

OOMGATE_BENCH_EXTRA_MIB=N makes the main process hold N MiB more from its
start to its end: a regression of the working memory of known size, for
the sensitivity half of the benchmark.
"""

import os
import sys
import time

import torch

MIB = 1024 * 1024
EXTRA_MIB = int(os.environ.get("OOMGATE_BENCH_EXTRA_MIB", "0"))


def held(mib):
    """A float32 tensor of MIB MiB, every page written."""
    return torch.ones(mib * MIB // 4, dtype=torch.float32)


def single():
    tensor = held(400)
    time.sleep(3)
    del tensor


def train():
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    )
    optimizer = torch.optim.Adam(model.parameters())
    inputs, targets = torch.randn(512, 1024), torch.randn(512, 1024)
    # A number of steps, not a time: what a CI job runs, and the same
    # memory on a busy runner as on a quiet one.
    for _ in range(40):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()


def shared_worker(rank, tensor):
    # Read a value of every page: each worker maps the shared pages.
    float(tensor[:: 4096 // 4].sum())
    time.sleep(3)


def shared():
    tensor = held(500).share_memory_()
    torch.multiprocessing.spawn(shared_worker, args=(tensor,), nprocs=2, join=True)


class Batches(torch.utils.data.Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, index):
        return torch.full((2 * MIB // 4,), float(index))


def dataloader():
    model = held(200)
    loader = torch.utils.data.DataLoader(
        Batches(), batch_size=4, num_workers=2, multiprocessing_context="fork"
    )
    deadline = time.monotonic() + 6
    total = 0.0
    for batch in loader:
        total += float(batch[0, 0]) + float(model[0])
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)


def spawned_worker(rank):
    tensor = held(300)
    time.sleep(4)
    del tensor


def spawned():
    time.sleep(3)
    torch.multiprocessing.spawn(spawned_worker, nprocs=2, join=True)
    time.sleep(3)


def spike():
    base = held(100)
    time.sleep(1)
    burst = held(400)
    del burst
    time.sleep(2)
    del base


def server():
    """Batches of BATCH requests, as a serving engine batches them: a batch
    starts when BATCH requests are in (the load's concurrency), and each
    holds its activation for the batch's step, so the peak is the model
    and BATCH activations at once, every batch."""
    import http.server
    import threading

    model = held(300)
    batch = threading.Barrier(BATCH, timeout=10)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/generate"):
                batch.wait()
                activation = held(64)
                activation[0] += float(model[0])
                time.sleep(0.3)
                del activation
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()


BATCH = 8


if __name__ == "__main__":
    extra = held(EXTRA_MIB) if EXTRA_MIB else None
    {
        "single": single,
        "train": train,
        "shared": shared,
        "dataloader": dataloader,
        "spawned": spawned,
        "spike": spike,
        "server": server,
    }[sys.argv[1]]()
