"""How a fixed-shape step function runs: eagerly, compiled, or replayed as a CUDA graph.

A *step* is a zero-argument callable that reads and writes preallocated buffers only (inputs,
the static KV cache, outputs), so it can be compiled once or captured once per shape bucket
and replayed. Every mode runs it without autograd, wherever it is called from. Modes
(registry ``STEP_MODES``):

- ``eager``: call it (the ``enforce_eager`` switch; any device).
- ``compile``: ``torch.compile`` with static shapes (CPU or GPU; one compilation per bucket,
  done by warm-up calls when the state is built).
- ``graphs``: warm up on a side stream, then capture into a ``torch.cuda.CUDAGraph`` sharing
  one memory pool with the other graphs of the decoder; ``__call__`` replays it (CUDA only).
- ``compile-graphs``: both: ``torch.compile`` fuses the step's small kernels (norms, rotary,
  the commit rule), then the compiled step is captured as a CUDA graph (CUDA only). Compiling
  takes a while per state; a batch-1 step of a 2B model launches ~1,700 kernels eagerly,
  which is what a plain graph still replays one by one.
"""
from __future__ import annotations

from typing import Callable

import torch

Step = Callable[[], object]


def eager(fn: Step, **_) -> Step:
    # inference mode (no version counters, no autograd bookkeeping): less per-op overhead
    # than no_grad, which is most of a small model's eager step
    return torch.inference_mode()(fn)


def compiled(fn: Step, warmup: int = 2, device: torch.device | str | None = None,
             **_) -> Step:
    """``fn`` compiled with static shapes; compiled now (warm-up calls), not on first use.

    On a CPU the weights are frozen into the compiled step (inductor ``freezing``: constant
    folding and oneDNN-prepacked weights, fewer operations per step; docs/history.md). The
    step then keeps the weights it was compiled with, which is what a decoder state wants (an
    engine belongs to one model and inference never changes its weights)."""
    freeze = device is not None and torch.device(device).type == "cpu"
    step = torch.compile(torch.no_grad()(fn), dynamic=False,
                         options={"freezing": True} if freeze else None)
    for _ in range(warmup):
        step()
    return step


class CudaGraphStep:
    """``fn`` captured once as a CUDA graph; calling replays it and returns the captured
    output tensors (which the replay overwrites in place)."""

    def __init__(self, fn: Step, pool=None, warmup: int = 2):
        fn = torch.no_grad()(fn)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):          # lazy init, autotuning, allocator warm-up
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.output = fn()

    def __call__(self):
        self.graph.replay()
        return self.output


def graphs(fn: Step, pool=None, **kw) -> Step:
    return CudaGraphStep(fn, pool=pool, **kw)


def compiled_graphs(fn: Step, pool=None, **kw) -> Step:
    """Compile ``fn`` (no CUDA graphs of inductor's own), then capture the compiled step."""
    return CudaGraphStep(compiled(fn, warmup=0), pool=pool, **kw)


STEP_MODES: dict[str, Callable[..., Step]] = {"eager": eager, "compile": compiled,
                                              "graphs": graphs,
                                              "compile-graphs": compiled_graphs}
GRAPH_MODES = ("graphs", "compile-graphs")
COMPILED_MODES = ("compile", "compile-graphs")


def resolve_mode(mode: str, device: torch.device | str, enforce_eager: bool = False) -> str:
    """The execution mode a request gets on ``device``: "auto" is CUDA graphs on a GPU and
    eager on a CPU (``torch.compile`` is opt-in there: its compile time outweighs small
    gains); ``enforce_eager`` always wins."""
    if enforce_eager:
        return "eager"
    cuda = torch.device(device).type == "cuda"
    if mode == "auto":
        return "graphs" if cuda else "eager"
    if mode not in STEP_MODES:
        raise ValueError(f"unknown execution mode {mode!r}; known: auto, "
                         f"{', '.join(STEP_MODES)}")
    if mode in GRAPH_MODES and not cuda:
        raise ValueError(f"mode {mode!r} captures CUDA graphs and needs a CUDA device; use "
                         "mode 'eager' or 'compile'")
    return mode


def new_pool(mode: str):
    """A memory pool shared by all graphs of one decoder (None outside graph mode)."""
    return torch.cuda.graph_pool_handle() if mode in GRAPH_MODES else None
