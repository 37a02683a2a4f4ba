"""An EAGLE-shaped reference engine in plain PyTorch on random weights.

SGLang cannot run on the GPU machine here, so specprof carries its own engine with the shape of
SGLang's EAGLE v2 worker:

- `ReferenceWorker.forward_batch_generation`: one speculative cycle (draft, verify, draft re-extend);
- `ReferenceDraftWorker.draft`: the draft model run K steps, eagerly (launch-bound, as SGLang's
  eager draft path is);
- `ReferenceWorker.verify`: the target model over K+1 tokens as one CUDA-graph replay, then greedy
  acceptance on the GPU (compare, cumulative product, sum) and a non-blocking copy of the accept
  counts to pinned host memory;
- `ReferenceDraftWorker.draft_extend`: the draft model re-run over the K+1 verified positions (a
  CUDA-graph replay, as SGLang's draft-extend graph runner);
- `ReferenceScheduler.process_batch_result`: the one host read per cycle (waits for the copy), then
  `ReferenceWorker.on_verify_complete_cpu(num_correct_drafts_per_req_cpu, batch_size)` with the
  same shape as SGLang's hook.

With `steps=0` the engine is a plain (non-speculative) decoder, the baseline of specprof's economics
(docs/economics.md): no draft model runs, and each cycle is the target over 1 token (the verify graph at
1 token), greedy sampling and the same host read; every request gets exactly one token per cycle. The
`draft` and `draft_extend` ground-truth events are recorded back to back (0 ms) so the file keeps its shape.

Tensor parallel (`tp`, a `Parallel` of torch.distributed): each of N processes holds 1/N of every layer's
heads and MLP width, Megatron-style: the q projection and the MLP's up projection column-parallel, the output
projection and the MLP's down projection row-parallel, each followed by an all-reduce (one after attention,
one after the MLP, in the target and in the draft); embedding and LM head replicated. Every rank draws the
full weights from the same seed and keeps its shard, so the ranks agree on the tokens (and TP=N computes what
TP=1 computes, up to the all-reduce's summation order). With one process nothing changes: no all-reduce, the
same weights, the same kernels.

The tracer's `reference` preset wraps exactly these methods. Ground truth: CUDA events recorded
in-stream at every phase boundary (no synchronize inside the loop), read after the run.

Acceptance is controlled, not learned: draft and target share the embedding and LM head and add
only a small residual, so their greedy tokens agree; then each draft token is replaced by a random
one with probability `draft_error`. The accept rate per position is therefore about
1 - draft_error by construction, and the greedy acceptance logic that measures it is real.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

PHASE_ORDER = ("draft", "verify", "draft_extend", "accept")


@dataclass
class Parallel:
    """This process's place in the tensor-parallel group (world 1: no group, no all-reduce)."""

    rank: int = 0
    world: int = 1
    group: object = None  # a torch.distributed process group (None: the default group)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum `x` over the ranks, in place (NCCL on GPUs, gloo on the CPU)."""
        if self.world > 1:
            torch.distributed.all_reduce(x, group=self.group)
        return x

    def shard(self, w: torch.Tensor, dim: int) -> torch.Tensor:
        """This rank's 1/world of `w` along `dim` (w itself with one rank)."""
        if self.world == 1:
            return w
        return w.chunk(self.world, dim=dim)[self.rank].contiguous()


SINGLE = Parallel()


@dataclass
class EngineConfig:
    steps: int = 4  # K: draft steps per cycle; verify runs K+1 tokens; 0 = plain decode (no draft)
    batch: int = 8  # requests in the batch
    hidden: int = 6144
    heads: int = 48
    target_layers: int = 8
    draft_layers: int = 1
    vocab: int = 32000
    context: int = 1024  # KV-cache length every query attends to
    draft_error: float = 0.25  # probability that a draft token is wrong
    residual_scale: float = 0.02
    cuda_graph: bool = True
    device: str = "cuda"
    dtype: str = "bfloat16"
    seed: int = 0

    @classmethod
    def tiny(cls, **kw) -> "EngineConfig":
        """A CPU-sized engine for tests."""
        base = dict(batch=2, hidden=64, heads=4, target_layers=2, vocab=128, context=16,
                    cuda_graph=False, device="cpu", dtype="float32")
        base.update(kw)
        return cls(**base)


class Layer(torch.nn.Module):
    """A pre-norm decoder layer: attention over a fixed KV cache, then a gated MLP. Under tensor parallelism
    this rank's heads and MLP columns, with an all-reduce after the attention output and after the MLP."""

    def __init__(self, cfg: EngineConfig, gen: torch.Generator, dtype, device, tp: Parallel = SINGLE):
        super().__init__()
        h = cfg.hidden
        if cfg.heads % tp.world or (2 * h) % tp.world:
            raise ValueError(f"{cfg.heads} heads and an MLP of {2 * h} cannot be split over {tp.world} ranks")
        self.tp = tp
        self.heads = cfg.heads // tp.world  # this rank's heads
        self.dh = h // cfg.heads
        self.local = self.heads * self.dh  # this rank's width of q (= h with one rank)
        std = 1.0 / math.sqrt(h)

        def w(*shape):
            return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) * std).to(dtype)

        # The full weights, drawn in the same order on every rank; each keeps its shard.
        qkv, o, up, down = w(h, 3 * h), w(h, h), w(h, 4 * h), w(2 * h, h)
        k_cache = w(cfg.batch, cfg.heads, cfg.context, self.dh)
        v_cache = w(cfg.batch, cfg.heads, cfg.context, self.dh)
        if tp.world == 1:
            self.qkv, self.up = qkv, up
        else:  # column-parallel: q, k, v each by heads; the MLP's gate and up halves each by columns
            self.qkv = torch.cat([tp.shard(part, 1) for part in qkv.chunk(3, dim=1)], dim=1)
            self.up = torch.cat([tp.shard(part, 1) for part in up.chunk(2, dim=1)], dim=1)
        self.o, self.down = tp.shard(o, 0), tp.shard(down, 0)  # row-parallel
        self.k_cache, self.v_cache = tp.shard(k_cache, 1), tp.shard(v_cache, 1)
        self.n1 = torch.ones(h, dtype=dtype, device=device)
        self.n2 = torch.ones(h, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, T, h]
        b, t, h = x.shape
        y = F.rms_norm(x, (h,), self.n1)
        q = (y @ self.qkv)[..., :self.local].reshape(b, t, self.heads, self.dh).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache)
        x = x + self.tp.all_reduce(a.transpose(1, 2).reshape(b, t, self.local) @ self.o)
        y = F.rms_norm(x, (h,), self.n2)
        g, u = (y @ self.up).chunk(2, dim=-1)
        return x + self.tp.all_reduce((F.silu(g) * u) @ self.down)


class Model(torch.nn.Module):
    """Embedding + layers + LM head; `residual_scale` keeps draft and target in near agreement."""

    def __init__(self, cfg: EngineConfig, layers: int, embed, head, gen, dtype, device, tp: Parallel = SINGLE):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(cfg, gen, dtype, device, tp) for _ in range(layers))
        self.embed, self.head, self.scale = embed, head, cfg.residual_scale

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        e = self.embed[tokens]
        x = e
        for layer in self.layers:
            x = layer(x)
        return e + self.scale * x

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return (self.hidden(tokens) @ self.head).argmax(dim=-1)


@dataclass
class Batch:
    """The decode batch: the last accepted token of each request."""

    tokens: torch.Tensor  # [B] on device
    size: int

    def batch_size(self) -> int:
        return self.size


@dataclass
class Result:
    accept_lens: torch.Tensor  # [B] on device: accepted draft tokens + the bonus token
    accept_lens_host: torch.Tensor  # pinned host copy, valid once copy_done has completed
    copy_done: object  # a CUDA event (or None on CPU)


class SyncTimers:
    """What a hand-made profiling patch does: `torch.cuda.synchronize()` before and after each phase and the
    host clock in between (the usual way to time phases, and the distortion specprof exists to avoid). Off
    unless `--sync-timers`; then the per-phase wall times are kept per cycle, like the ground truth."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.cuda = torch.cuda.is_available()
        self.rows: list[dict] = []
        self._t0: dict[str, int] = {}

    def start(self, phase: str) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        self._t0[phase] = time.perf_counter_ns()

    def end(self, phase: str, cycle: int) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter_ns() - self._t0.pop(phase, time.perf_counter_ns())
        while len(self.rows) <= cycle:
            self.rows.append({"index": len(self.rows)})
        self.rows[cycle][f"{phase}_ms"] = elapsed / 1e6

    def read(self) -> list[dict]:
        return [r for r in self.rows if len(r) > 1]


class GroundTruth:
    """CUDA events at phase boundaries, preallocated, recorded in-stream, read after the run. `timers`: the
    phase boundaries also drive the hand-patch timers (SyncTimers), when they are on."""

    def __init__(self, cycles: int, enabled: bool, timers: SyncTimers | None = None):
        self.enabled = enabled and torch.cuda.is_available()
        self.cycle = -1
        self.timers = timers if timers is not None and timers.enabled else None
        n = cycles if self.enabled else 0
        self.events = [{p: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                        for p in PHASE_ORDER} for _ in range(n)]

    def start(self, phase: str) -> None:
        if self.timers is not None and self.cycle >= 0:
            self.timers.start(phase)
        if self.enabled and 0 <= self.cycle < len(self.events):
            self.events[self.cycle][phase][0].record()

    def end(self, phase: str) -> None:
        if self.enabled and 0 <= self.cycle < len(self.events):
            self.events[self.cycle][phase][1].record()
        if self.timers is not None and self.cycle >= 0:
            self.timers.end(phase, self.cycle)

    def read(self) -> list[dict]:
        """Per cycle, per phase elapsed GPU ms. Call after the run, once the GPU is done."""
        if not self.enabled:
            return []
        torch.cuda.synchronize()
        rows = []
        for i, ev in enumerate(self.events[: self.cycle + 1]):
            rows.append({"index": i, **{f"{p}_ms": s.elapsed_time(e) for p, (s, e) in ev.items()}})
        return rows


class ReferenceDraftWorker:
    def __init__(self, cfg: EngineConfig, model: Model, gt: GroundTruth, gen: torch.Generator):
        self.cfg, self.model, self.gt, self.gen = cfg, model, gt, gen
        k1 = cfg.steps + 1
        self.extend_in = torch.zeros(cfg.batch, k1, dtype=torch.long, device=cfg.device)
        self.extend_out = None
        self.extend_graph = None

    def draft(self, batch: Batch) -> torch.Tensor:
        """K eager draft steps; returns the draft tokens [B, K]."""
        self.gt.start("draft")
        tok = batch.tokens
        out = []
        for _ in range(self.cfg.steps):
            tok = self.model(tok[:, None])[:, 0]
            out.append(tok)
        drafts = torch.stack(out, dim=1)
        # The controlled error: each draft token is wrong with probability draft_error.
        wrong = torch.rand(drafts.shape, generator=self.gen, device=drafts.device) < self.cfg.draft_error
        noise = torch.randint(0, self.cfg.vocab, drafts.shape, generator=self.gen, device=drafts.device)
        drafts = torch.where(wrong, noise, drafts)
        self.gt.end("draft")
        return drafts

    def capture(self) -> None:
        if self.cfg.cuda_graph and self.cfg.steps > 0:
            self.extend_graph, self.extend_out = _capture(self.model.hidden, self.extend_in)

    def draft_extend(self, batch: Batch, result: Result) -> None:
        """Re-run the draft model over the verified positions (one graph replay)."""
        self.gt.start("draft_extend")
        if self.extend_graph is not None:
            self.extend_graph.replay()
        else:
            self.extend_out = self.model.hidden(self.extend_in)
        self.gt.end("draft_extend")


def _capture(fn, static_in: torch.Tensor):
    """Capture fn(static_in) as a CUDA graph after a warm-up on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(static_in)
    return graph, out


class ReferenceWorker:
    def __init__(self, cfg: EngineConfig, ground_truth_cycles: int = 0, tp: Parallel = SINGLE,
                 sync_timers: bool = False):
        self.cfg = cfg
        self.tp = tp
        dtype = getattr(torch, cfg.dtype)
        device = torch.device(cfg.device)
        gen = torch.Generator(device=device)
        gen.manual_seed(cfg.seed)
        std = 1.0 / math.sqrt(cfg.hidden)
        embed = (torch.randn(cfg.vocab, cfg.hidden, generator=gen, device=device) * 1.0).to(dtype)
        head = (torch.randn(cfg.hidden, cfg.vocab, generator=gen, device=device) * std).to(dtype)
        self.target = Model(cfg, cfg.target_layers, embed, head, gen, dtype, device, tp)
        draft = Model(cfg, cfg.draft_layers, embed, head, gen, dtype, device, tp)
        self.timers = SyncTimers(sync_timers)
        self.gt = GroundTruth(ground_truth_cycles, enabled=ground_truth_cycles > 0, timers=self.timers)
        self.gen = gen
        self.draft_worker = ReferenceDraftWorker(cfg, draft, self.gt, gen)
        if tp.world > 1:  # the tracer's reference preset reads the rank from here (its sidecar header)
            self.tp_rank = self.draft_worker.tp_rank = tp.rank
        k1 = cfg.steps + 1
        self.verify_in = torch.zeros(cfg.batch, k1, dtype=torch.long, device=device)
        self.verify_out = None
        self.verify_graph = None
        pin = device.type == "cuda"
        self.accept_host = torch.zeros(cfg.batch, dtype=torch.long, pin_memory=pin)
        self.accepted: list[list[int]] = []  # num_correct_drafts_per_req per cycle, from the hook

    def capture(self) -> None:
        """Capture the CUDA graphs (verify, draft extend)."""
        if self.cfg.cuda_graph:
            self.verify_graph, self.verify_out = _capture(self.target, self.verify_in)
            self.draft_worker.capture()

    def forward_prefill(self, batch: Batch) -> None:
        """Prefill: the target and the draft over a prompt (eager)."""
        prompt = torch.randint(0, self.cfg.vocab, (self.cfg.batch, 4 * (self.cfg.steps + 1)),
                               generator=self.gen, device=self.cfg.device)
        self.target(prompt)
        self.draft_worker.model.hidden(prompt)

    def verify(self, batch: Batch, drafts: torch.Tensor) -> Result:
        """Target over [last token, K drafts] (one graph replay), then greedy acceptance."""
        self.gt.start("verify")
        self.verify_in[:, 0].copy_(batch.tokens)
        self.verify_in[:, 1:].copy_(drafts)
        if self.verify_graph is not None:
            self.verify_graph.replay()
            target = self.verify_out
        else:
            target = self.target(self.verify_in)
        # target[:, i] is the target's token after position i; draft i+1 must equal it.
        match = (drafts == target[:, :-1]).to(torch.int32).cumprod(dim=1)
        correct = match.sum(dim=1)
        accept_lens = correct + 1  # + the bonus token
        bonus = target.gather(1, correct[:, None].to(torch.long))[:, 0]
        batch.tokens.copy_(bonus)
        self.draft_worker.extend_in.copy_(self.verify_in)
        self.accept_host.copy_(accept_lens, non_blocking=True)
        done = None
        if self.accept_host.is_pinned():
            done = torch.cuda.Event()
            done.record()
        self.gt.end("verify")
        return Result(accept_lens, self.accept_host, done)

    def forward_batch_generation(self, batch: Batch) -> Result:
        """One speculative cycle: draft, verify, draft re-extend. No host read here."""
        self.gt.cycle += 1
        if self.cfg.steps == 0:  # plain decode: the target over the last token only
            for phase in ("draft", "draft_extend"):
                self.gt.start(phase)
                self.gt.end(phase)
            return self.verify(batch, batch.tokens.new_empty((batch.size, 0)))
        drafts = self.draft_worker.draft(batch)
        result = self.verify(batch, drafts)
        self.draft_worker.draft_extend(batch, result)
        return result

    def on_verify_complete_cpu(self, num_correct_drafts_per_req_cpu: list[int], batch_size: int) -> None:
        """Accept counts, already on the host (the same hook SGLang's v2 worker has)."""
        self.accepted.append(num_correct_drafts_per_req_cpu)


class ReferenceScheduler:
    """Drives the worker as SGLang's scheduler does with overlap off: run, then process result."""

    def __init__(self, worker: ReferenceWorker):
        self.worker = worker
        if hasattr(worker, "tp_rank"):
            self.tp_rank = worker.tp_rank

    def process_batch_result(self, batch: Batch, result: Result) -> None:
        """The one host read per cycle: wait for the accept-count copy, then hand it on."""
        gt = self.worker.gt
        gt.start("accept")
        if result.copy_done is not None:
            result.copy_done.synchronize()
        lens = result.accept_lens_host.tolist()
        gt.end("accept")
        self.worker.on_verify_complete_cpu([n - 1 for n in lens], batch_size=batch.batch_size())

    def run(self, batch: Batch, cycles: int) -> None:
        for _ in range(cycles):
            result = self.worker.forward_batch_generation(batch)
            self.process_batch_result(batch, result)


@dataclass
class RunResult:
    config: dict
    cycles: int
    wall_ns: int
    tokens: int
    mean_accept_len: float
    ground_truth: list[dict] = field(default_factory=list)
    sync_timers: list[dict] = field(default_factory=list)  # per cycle, the hand-patch timers' ms per phase

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / (self.wall_ns / 1e9) if self.wall_ns else 0.0


def build(cfg: EngineConfig, ground_truth_cycles: int = 0, tp: Parallel = SINGLE,
          sync_timers: bool = False) -> tuple[ReferenceWorker, ReferenceScheduler, Batch]:
    torch.manual_seed(cfg.seed)
    worker = ReferenceWorker(cfg, ground_truth_cycles, tp, sync_timers=sync_timers)
    worker.capture()
    tokens = torch.randint(0, cfg.vocab, (cfg.batch,), generator=worker.gen, device=cfg.device)
    return worker, ReferenceScheduler(worker), Batch(tokens, cfg.batch)


def run(cfg: EngineConfig, cycles: int, warmup: int = 5, ground_truth: bool = True,
        profile_range: bool = False, tp: Parallel = SINGLE, sync_timers: bool = False) -> RunResult:
    """Build, warm up, then prefill + `cycles` timed cycles.

    With `profile_range`, the timed part is bracketed by cudaProfilerStart/Stop, so that
    `nsys --capture-range=cudaProfilerApi` captures exactly it. With `sync_timers`, every phase of the timed
    cycles is also timed the way a hand patch does (SyncTimers: synchronize, host clock, synchronize).
    """
    worker, sched, batch = build(cfg, ground_truth_cycles=cycles if ground_truth else 0, tp=tp,
                                 sync_timers=sync_timers)
    gt = worker.gt
    saved, gt.enabled = gt.enabled, False
    timers, gt.timers = gt.timers, None
    sched.run(batch, warmup)
    gt.enabled, gt.cycle, gt.timers = saved, -1, timers
    worker.accepted.clear()
    cuda = cfg.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
    if tp.world > 1:
        torch.distributed.barrier(group=tp.group)  # every rank starts the measured part together
    if profile_range and cuda:
        torch.cuda.profiler.start()
    t0 = time.perf_counter_ns()
    worker.forward_prefill(batch)
    sched.run(batch, cycles)
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter_ns() - t0
    if profile_range and cuda:
        torch.cuda.profiler.stop()
    accepted = [n for cycle in worker.accepted for n in cycle]
    mean_accept = (sum(accepted) / len(accepted) + 1.0) if accepted else float("nan")
    tokens = sum(accepted) + len(accepted)
    return RunResult(asdict(cfg), cycles, wall, tokens, mean_accept, gt.read(), worker.timers.read())
