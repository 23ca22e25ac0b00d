"""The GPU workloads the benchmarks share, one step at a time, so that every
script runs the same code: bench/gpu/train.py and train_check.py (the language
models), patterns.py (the FSDP-style pattern) and step_time.py (all of them,
timed step by step under each allocator).

  lm_config(model, tiny=False)  the HF config of "gpt2" or "llama" (built from
                                config: no download), as the issues measured it
  LmWorkload    variable-length LM training (batch 8, 64..1024 tokens a step)
  FsdpWorkload  FSDP-style: layer i+1's full weights gathered on a side stream
                while layer i computes (record_stream, freed after use)
  MoeWorkload   mixture of experts: 6 layers x 16 experts, a different token
                count per expert every step, 4k..32k tokens a step

Every workload draws its sizes from random.Random(seed): every allocator sees
the same sequence of requests. `tiny=True` shrinks the sizes so that the
plumbing can be tried on a CPU (step_time.py --device cpu). Workloads are
single-threaded; step() returns the loss as a float (it synchronises, through
_sync, which counts the time it waits in sync_wait_s).
"""
import contextlib
import random
import time

import torch


def lm_config(model, tiny=False):
    from transformers import AutoConfig
    if tiny:
        if model == "gpt2":
            return AutoConfig.for_model("gpt2", n_layer=2, n_embd=64, n_head=2,
                                        n_positions=256, vocab_size=1000)
        return AutoConfig.for_model("llama", hidden_size=64, intermediate_size=128,
                                    num_hidden_layers=2, num_attention_heads=2,
                                    num_key_value_heads=2, vocab_size=1000,
                                    max_position_embeddings=256)
    if model == "gpt2":
        return AutoConfig.for_model("gpt2", n_layer=12, n_embd=768, n_head=12,
                                    n_positions=2048, vocab_size=50257)
    return AutoConfig.for_model("llama", hidden_size=1024, intermediate_size=2816,
                                num_hidden_layers=12, num_attention_heads=16,
                                num_key_value_heads=16, vocab_size=32000,
                                max_position_embeddings=4096)


def _autocast(dev):
    return torch.autocast(dev.type, dtype=torch.bfloat16)


# Seconds the CPU has spent blocked in _sync, summed (step_time.py reads it
# around each step: the wait at a step's end is how far the GPU was behind the
# CPU; none means the GPU had finished first, so the CPU set the step's pace).
sync_wait_s = 0.0


# Where a step's time goes, for the workloads that mark their phases: None, or
# a list that step_time.py starts with ("start", t0) before each timed step and
# that _mark appends (phase, time.perf_counter()) to as each phase ends.
phase_marks = None


def _mark(phase):
    if phase_marks is not None:
        phase_marks.append((phase, time.perf_counter()))


def _sync(dev):
    global sync_wait_s
    if dev.type == "cuda":
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        sync_wait_s += time.perf_counter() - t0


class LmWorkload:
    """HF causal LM training: a random batch of `batch` x L tokens a step, L
    uniform in [seq_min, seq_max]; AdamW (fused on CUDA).

    flash=True keeps attention to the flash and memory-efficient SDPA kernels.
    By default PyTorch 2.11 on an H200 picks cuDNN's attention, which builds its
    graph on the CPU at every call, ~5-6 ms (bench/results/2026-12-02-h200-
    session10.md): ~60% of a Llama + checkpointing step, and most of its
    spread from one run to the next."""

    def __init__(self, dev, model="gpt2", ckpt=False, batch=8, seq_min=64, seq_max=1024,
                 seed=0, tiny=False, flash=False):
        from transformers import AutoModelForCausalLM
        self.dev, self.batch = dev, batch
        if tiny:
            seq_min, seq_max = min(seq_min, 16), min(seq_max, 64)
        self.seq = (seq_min, seq_max)
        self.cfg = lm_config(model, tiny)
        torch.manual_seed(seed)
        self.model = AutoModelForCausalLM.from_config(self.cfg).to(dev)
        if ckpt:
            self.model.gradient_checkpointing_enable()
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4,
                                     fused=dev.type == "cuda")
        self.rng = random.Random(seed)
        self.flash = flash and dev.type == "cuda"
        # Called between the phases of a step (after forward, after backward):
        # train.py and train_check.py sample the device's memory there.
        self.probe = lambda: None

    def step(self):
        with self._attention():
            return self._step()

    def _attention(self):
        if not self.flash:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])

    def _step(self):
        L = self.rng.randint(*self.seq)
        x = torch.randint(0, self.cfg.vocab_size, (self.batch, L), device=self.dev)
        with _autocast(self.dev):
            out = self.model(input_ids=x, labels=x)
        self.probe()
        out.loss.backward()
        self.probe()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        _sync(self.dev)
        return out.loss.item()

    def close(self):
        del self.model, self.opt


class FsdpWorkload:
    """FSDP-style: 24 layers of 4096x4096 weights kept as 1/8 shards; each
    layer's full weight is gathered on a side stream while the layer before
    computes, handed to the compute stream with record_stream and freed after
    use. 256..1024 rows a step."""

    def __init__(self, dev, seed=0, tiny=False):
        self.dev = dev
        self.layers, self.width, self.batch = (4, 256, 4) if tiny else (24, 4096, 64)
        w = self.width
        self.shards = [torch.randn(w * w // 8, device=dev) for _ in range(self.layers)]
        self.side = torch.cuda.Stream() if dev.type == "cuda" else None
        self.rng = random.Random(seed)

    def _on_side(self):
        return torch.cuda.stream(self.side) if self.side else contextlib.nullcontext()

    def step(self):
        w_, dev = self.width, self.dev
        x = torch.randn(self.batch * self.rng.randint(4, 16), w_, device=dev)
        _mark("input")
        full = [None] * self.layers

        def gather(i):
            with self._on_side():
                w = torch.empty(w_ * w_, device=dev)
                if i == 0:
                    _mark("empty0")
                whole = self.shards[i].repeat(8)
                if i == 0:
                    _mark("repeat0")
                w.copy_(whole)
                full[i] = w
        gather(0)
        _mark("gather0")
        acts = []
        for i in range(self.layers):
            if self.side:
                torch.cuda.current_stream().wait_stream(self.side)
            w = full[i]
            if self.side:
                w.record_stream(torch.cuda.current_stream())
            if i + 1 < self.layers:
                gather(i + 1)
            x = torch.relu(x @ w.view(w_, w_))
            acts.append(x)
            full[i] = None
            del w
        _mark("layers")
        loss = sum(a.float().mean() for a in acts)
        _mark("loss")
        _sync(dev)
        _mark("sync")
        value = loss.item()
        _mark("item")
        del acts, x, loss
        _mark("free")
        return value

    def close(self):
        del self.shards


class MoeWorkload:
    """Mixture of experts, trained: `layers` layers of `experts` experts (a
    d -> 4d -> d GELU MLP each, bf16 autocast) and a residual. Every step has
    T tokens, T uniform in [tokens_min, tokens_max], split over the experts by
    a fresh random weighting (some experts get few tokens, some many), so each
    expert's activations have a new size every step: many distinct sizes.
    Tokens are dispatched with index_select and combined with index_add_, as
    top-1 routing does."""

    def __init__(self, dev, layers=6, experts=16, d=1024, tokens_min=4096,
                 tokens_max=32768, seed=0, tiny=False):
        if tiny:
            layers, d, tokens_min, tokens_max = 2, 64, 256, 1024
        self.dev, self.layers, self.experts, self.d = dev, layers, experts, d
        self.tokens = (tokens_min, tokens_max)
        torch.manual_seed(seed)
        self.w1 = [torch.nn.Parameter(torch.randn(experts, d, 4 * d, device=dev) * d ** -0.5)
                   for _ in range(layers)]
        self.w2 = [torch.nn.Parameter(torch.randn(experts, 4 * d, d, device=dev) *
                                      (4 * d) ** -0.5) for _ in range(layers)]
        self.opt = torch.optim.AdamW(self.w1 + self.w2, lr=1e-4, fused=dev.type == "cuda")
        self.rng = random.Random(seed)

    def _counts(self, total):
        weights = [self.rng.random() ** 2 + 0.01 for _ in range(self.experts)]
        scale = total / sum(weights)
        counts = [int(w * scale) for w in weights]
        counts[0] += total - sum(counts)
        return counts

    def step(self):
        dev, d = self.dev, self.d
        total = self.rng.randint(*self.tokens)
        counts = self._counts(total)
        x = torch.randn(total, d, device=dev, requires_grad=True)
        with _autocast(dev):
            h = x
            for layer in range(self.layers):
                # The routing: a permutation of the tokens, cut into the
                # experts' counts (each layer routes afresh).
                order = torch.randperm(total, device=dev)
                out = torch.zeros_like(h)
                start = 0
                for e, n in enumerate(counts):
                    if n == 0:
                        continue
                    idx = order[start:start + n]
                    start += n
                    y = torch.nn.functional.gelu(h.index_select(0, idx) @ self.w1[layer][e])
                    out.index_add_(0, idx, (y @ self.w2[layer][e]).to(out.dtype))
                h = h + out
            loss = h.float().pow(2).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        _sync(dev)
        value = loss.item()
        del x, h, out, loss
        return value

    def close(self):
        del self.w1, self.w2, self.opt


def make(name, dev, seed=0, tiny=False):
    """A workload by step_time.py's name: gpt2, gpt2+ckpt, llama, llama+ckpt,
    fsdp, moe. A language model may end in "+flash": attention by the flash or
    memory-efficient SDPA kernels only, not cuDNN's (LmWorkload)."""
    model, *extras = name.split("+")
    if model in ("gpt2", "llama") and set(extras) <= {"ckpt", "flash"}:
        return LmWorkload(dev, model, ckpt="ckpt" in extras, seed=seed, tiny=tiny,
                          flash="flash" in extras)
    if name == "fsdp":
        return FsdpWorkload(dev, seed=seed, tiny=tiny)
    if name == "moe":
        return MoeWorkload(dev, seed=seed, tiny=tiny)
    raise ValueError(f"unknown workload {name!r}")
