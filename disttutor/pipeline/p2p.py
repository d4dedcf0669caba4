"""Point-to-point between pipeline stages: activations forward, gradients backward.

Introduced in chapter 6 (model parallelism). Rank ``r`` holds stage ``r`` of a
model split by layers. In the forward pass stage ``r`` receives its input
activation from ``r - 1`` and sends its output to ``r + 1``; in the backward
pass the gradient of that output comes back from ``r + 1`` and the gradient of
its input goes to ``r - 1``. This module is only the communication (and the
clock, a :class:`~disttutor.pipeline.timeline.Timeline`, that tells busy time from waiting time); the training loop that uses it
is :mod:`disttutor.programs.model_parallel`.

``dist.send`` / ``dist.recv`` are blocking and need the receiver to know the
tensor's shape and dtype in advance: nothing but raw bytes travels. That is
why every receive below takes a ``shape`` (the pipelining schedules of
chapter 7 infer those shapes once, up front, for the same reason).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from disttutor.pipeline.timeline import Timeline


class StageLink:
    """The two neighbours of one pipeline stage, and the clock that times every exchange.

    ``prev``/``next`` are ``None`` at the first/last stage. ``act_shape(src)`` must
    give the shape of the activation stage ``src`` sends (the receiver allocates it).
    """

    def __init__(self, rank: int, world_size: int, timeline: Timeline, device: torch.device,
                 dtype: torch.dtype = torch.float32):
        self.rank, self.world_size, self.timeline = rank, world_size, timeline
        self.device, self.dtype = device, dtype
        self.prev = rank - 1 if rank > 0 else None
        self.next = rank + 1 if rank < world_size - 1 else None

    def _recv(self, shape: tuple[int, ...], src: int) -> torch.Tensor:
        buf = torch.empty(shape, dtype=self.dtype, device=self.device)
        with self.timeline.span("recv"):
            dist.recv(buf, src=src)  # blocks until the neighbour has computed *and* sent: this is the idle time
        return buf

    def _send(self, t: torch.Tensor, dst: int) -> None:
        with self.timeline.span("send"):
            # contiguous: send ships the raw storage, a strided view would arrive scrambled
            dist.send(t.detach().contiguous(), dst=dst)

    # forward ------------------------------------------------------------
    def recv_forward(self, shape: tuple[int, ...]) -> torch.Tensor:
        """The input activation from the previous stage, as a leaf that will collect its gradient."""
        assert self.prev is not None, "the first stage has no previous stage to receive from"
        # requires_grad on the received copy: autograd cannot follow a tensor across
        # processes, so this leaf is where our local graph starts and where
        # backward() leaves the gradient we must ship upstream.
        return self._recv(shape, self.prev).requires_grad_(True)

    def send_forward(self, out: torch.Tensor) -> None:
        assert self.next is not None, "the last stage has no next stage to send to"
        self._send(out, self.next)

    # backward -----------------------------------------------------------
    def recv_backward(self, shape: tuple[int, ...]) -> torch.Tensor:
        """d loss / d (this stage's output), computed by the next stage."""
        assert self.next is not None, "the last stage computes its own loss gradient"
        return self._recv(shape, self.next)

    def send_backward(self, inp: torch.Tensor) -> None:
        """Ship d loss / d (this stage's input) to the previous stage."""
        assert self.prev is not None, "the first stage's input is data: no gradient to send"
        if inp.grad is None:
            raise RuntimeError(f"stage {self.rank}: the received activation has no .grad after backward(); "
                               "was it received with requires_grad (recv_forward)?")
        self._send(inp.grad, self.prev)
