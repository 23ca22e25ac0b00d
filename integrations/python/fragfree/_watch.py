"""fragfree.watch(model, optimizer): tells fragfree's OOM report what the program's
memory is made of.

Owns: measuring the four categories of docs/oom.md's OOM method (parameters,
gradients, optimizer state, other persistent tensors such as buffers) per CUDA
device, and detecting the techniques already on (bf16 autocast, gradient
checkpointing, FlashAttention/SDPA, an 8-bit optimizer, FSDP/ZeRO sharding,
LoRA/PEFT, CPU offload), so that an OOM report names the categories and never
advises what is already on. The figures are refreshed before every forward pass
and after every optimizer step (hooks), never from inside the allocator, so no
Python runs while memory is being allocated.

Thread-safety: hooks run on the training thread; each refresh is one C call.
"""

from __future__ import annotations

from typing import Any

# Bits of ff_set_oom_hints' `techniques` (shim/include/fragfree/fragfree.h).
TECH_BF16_AUTOCAST = 1 << 0
TECH_GRADIENT_CHECKPOINTING = 1 << 1
TECH_FLASH_ATTENTION = 1 << 2
TECH_EIGHT_BIT_OPTIMIZER = 1 << 3
TECH_SHARDED = 1 << 4
TECH_LORA_PEFT = 1 << 5
TECH_CPU_OFFLOAD = 1 << 6


def _bytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size())


def measure(model: Any, optimizer: Any = None) -> dict[int, list[int]]:
    """{device index: [parameters, gradients, optimizer state, other]} bytes of
    CUDA tensors held by the model and optimizer (shared storage counted once)."""
    seen: set[tuple[int, int]] = set()
    out: dict[int, list[int]] = {}

    def add(t: Any, slot: int) -> None:
        if t is None or not getattr(t, "is_cuda", False):
            return
        key = (t.device.index or 0, t.data_ptr())
        if key in seen:
            return
        seen.add(key)
        out.setdefault(t.device.index or 0, [0, 0, 0, 0])[slot] += _bytes(t)

    for p in model.parameters():
        add(p, 0)
        add(p.grad, 1)
    for b in model.buffers():
        add(b, 3)
    if optimizer is not None:
        for state in optimizer.state.values():
            for v in state.values():
                if hasattr(v, "is_cuda"):
                    add(v, 2)
    return out


def techniques(model: Any, optimizer: Any = None) -> int:
    """FF_TECH_* bits for what the model and optimizer show to be on."""
    bits = 0
    try:
        import torch

        half = (torch.bfloat16, torch.float16)
        if torch.is_autocast_enabled() and torch.get_autocast_gpu_dtype() in half:
            bits |= TECH_BF16_AUTOCAST
    except Exception:  # no torch (tests), or an older autocast API
        half = ()
    if any(str(getattr(p, "dtype", "")) in ("torch.bfloat16", "torch.float16")
           for p in model.parameters()):
        bits |= TECH_BF16_AUTOCAST
    if getattr(model, "is_gradient_checkpointing", False):
        bits |= TECH_GRADIENT_CHECKPOINTING
    config = getattr(model, "config", None)
    attn = getattr(config, "_attn_implementation", None)
    if attn in ("sdpa", "flash_attention_2", "flash_attention_3"):
        bits |= TECH_FLASH_ATTENTION
    if hasattr(model, "peft_config"):
        bits |= TECH_LORA_PEFT
    name = type(model).__name__
    if "FullyShardedDataParallel" in name or "FSDP" in name:
        bits |= TECH_SHARDED
    if any(type(p).__name__ == "DTensor" for p in model.parameters()):
        bits |= TECH_SHARDED
    if optimizer is not None:
        oname = type(optimizer).__name__.lower()
        if "8bit" in oname or "8_bit" in oname:
            bits |= TECH_EIGHT_BIT_OPTIMIZER
        if "zero" in oname:
            bits |= TECH_SHARDED
        for state in optimizer.state.values():
            if any(hasattr(v, "is_cuda") and not v.is_cuda and v.numel() > 1
                   for v in state.values()):
                bits |= TECH_CPU_OFFLOAD
                break
    return bits


class Watch:
    """The handle watch() returns; remove() detaches the hooks."""

    def __init__(self, lib: Any, model: Any, optimizer: Any = None) -> None:
        self._lib = lib
        self._model = model
        self._optimizer = optimizer
        # Autocast is only visible inside the forward pass: once seen there, a
        # refresh from an optimizer hook (outside autocast) keeps it.
        self._autocast_seen = 0
        self._handles = [model.register_forward_pre_hook(self._on_forward)]
        # Before the step the gradients exist (an OOM while AdamW creates its
        # state on the first step must count them as persistent); after it the
        # state does.
        if optimizer is not None and hasattr(optimizer, "register_step_pre_hook"):
            self._handles.append(optimizer.register_step_pre_hook(self._on_step))
        if optimizer is not None and hasattr(optimizer, "register_step_post_hook"):
            self._handles.append(optimizer.register_step_post_hook(self._on_step))
        self.refresh()

    def refresh(self) -> None:
        """Measure now and hand the figures to the library."""
        bits = techniques(self._model, self._optimizer) | self._autocast_seen
        self._autocast_seen = bits & TECH_BF16_AUTOCAST
        for device, (params, grads, state, other) in measure(
                self._model, self._optimizer).items():
            self._lib.set_oom_hints(device, params, grads, state, other, bits)

    def _on_forward(self, *_: Any) -> None:
        self.refresh()

    def _on_step(self, *_: Any) -> None:
        self.refresh()

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
