"""fragfree.watch(): the four categories measured per device, techniques
detected, and the figures handed to the library before each forward pass and
after each optimizer step. Runs without torch (duck-typed stand-ins)."""

from __future__ import annotations

from fragfree import _watch


class FakeDevice:
    def __init__(self, index):
        self.index = index


class FakeTensor:
    _next = 0x1000

    def __init__(self, n, size=4, cuda=True, dtype="torch.float32", device=0):
        FakeTensor._next += 0x1000
        self._ptr = FakeTensor._next
        self._n, self._size = n, size
        self.is_cuda = cuda
        self.dtype = dtype
        self.device = FakeDevice(device)
        self.grad = None

    def numel(self):
        return self._n

    def element_size(self):
        return self._size

    def data_ptr(self):
        return self._ptr


class FakeModel:
    def __init__(self, params, buffers=(), **attrs):
        self._params, self._buffers = params, list(buffers)
        self.hooks = []
        self.__dict__.update(attrs)

    def parameters(self):
        return iter(self._params)

    def buffers(self):
        return iter(self._buffers)

    def register_forward_pre_hook(self, fn):
        self.hooks.append(fn)
        model = self

        class Handle:
            def remove(self):
                model.hooks.remove(fn)

        return Handle()


class FakeOptimizer:
    def __init__(self, state):
        self.state = state


class Recorder:
    def __init__(self):
        self.calls = []

    def set_oom_hints(self, *args):
        self.calls.append(args)
        return True


def test_measure_counts_each_category_once_per_device():
    w = FakeTensor(100)
    w.grad = FakeTensor(100)
    shared = FakeTensor(10)
    other_gpu = FakeTensor(50, device=1)
    model = FakeModel([w, shared, shared, other_gpu], buffers=[FakeTensor(5)])
    opt = FakeOptimizer({w: {"exp_avg": FakeTensor(100), "step": FakeTensor(1, cuda=False)}})
    m = _watch.measure(model, opt)
    assert m[0] == [440, 400, 400, 20]
    assert m[1] == [200, 0, 0, 0]


def test_techniques_seen_in_model_and_optimizer():
    model = FakeModel([FakeTensor(4, dtype="torch.bfloat16")],
                      is_gradient_checkpointing=True, peft_config={})

    class Config:
        _attn_implementation = "sdpa"

    model.config = Config()
    state = {0: {"exp_avg": FakeTensor(1000, cuda=False)}}
    bits = _watch.techniques(model, FakeOptimizer(state))
    assert bits & _watch.TECH_BF16_AUTOCAST
    assert bits & _watch.TECH_GRADIENT_CHECKPOINTING
    assert bits & _watch.TECH_FLASH_ATTENTION
    assert bits & _watch.TECH_LORA_PEFT
    assert bits & _watch.TECH_CPU_OFFLOAD
    assert not bits & _watch.TECH_SHARDED


def test_watch_refreshes_on_forward_and_detaches():
    lib = Recorder()
    p = FakeTensor(8)
    model = FakeModel([p])
    handle = _watch.Watch(lib, model)
    assert lib.calls == [(0, 32, 0, 0, 0, 0)]
    p.grad = FakeTensor(8)
    model.hooks[0](model, ())
    assert lib.calls[-1] == (0, 32, 32, 0, 0, 0)
    handle.remove()
    assert model.hooks == []


def test_library_binding_reaches_the_c_api(host_lib):
    assert host_lib.set_oom_hints(0, 1, 2, 3, 4, _watch.TECH_SHARDED)


def test_autocast_seen_in_forward_is_kept_by_later_refreshes(monkeypatch):
    # Autocast is on only inside the forward pass; the optimizer hooks refresh
    # outside it, and must not drop the bit (the advice would suggest bf16).
    seen = iter([0, _watch.TECH_BF16_AUTOCAST, 0])
    monkeypatch.setattr(_watch, "techniques", lambda *_: next(seen))
    lib = Recorder()
    model = FakeModel([FakeTensor(8)])
    _watch.Watch(lib, model)
    assert lib.calls[-1][5] == 0
    model.hooks[0](model, ())  # forward, inside autocast
    assert lib.calls[-1][5] == _watch.TECH_BF16_AUTOCAST
    model.hooks[0](model, ())  # e.g. an optimizer hook, outside autocast
    assert lib.calls[-1][5] == _watch.TECH_BF16_AUTOCAST
