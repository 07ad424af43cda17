"""Megatron-Bridge's ``finetune()`` on CPU for tests: ``bridge_cpu``'s adaptations plus the loop's CUDA calls.

Installed in every Megatron process of a CPU test run by ``tests/megatron_cpu_shim``, so the
product's commands (``train megatron`` under ``torchrun`` included) run unchanged. On top of
``bridge_cpu.install()`` (no Transformer Engine, local layer spec, gloo, CPU RNG tracker):

1. Every tensor Bridge or Megatron-Core asks for on ``"cuda"`` (``device="cuda"`` factories,
   ``.cuda()``, ``.to("cuda")``: the loaders' flags, the start-time reduction, the token
   counters of the schedule, DDP's buffers) is made on the CPU, by a torch function mode
   entered for the whole process; ``Tensor.type()`` names the CUDA type of a tensor (Megatron's
   optimizers accept ``torch.cuda.*Tensor`` parameters only).
2. ``initialize_megatron`` runs with ``allow_no_cuda`` (it asserts a GPU otherwise) and the
   gloo backend (``dist.distributed_backend``; NCCL needs GPUs), without
   its fused-kernel warm-up (GPU kernels only), and a process-group barrier takes no
   ``device_ids`` (NCCL only).
3. ``torch.cuda``'s cache and memory statistics are no-ops / zeros; its streams and events
   (DDP's initialisation and communication streams) are ``NullStream``s: one CPU stream, in order.
4. ``nvidia_resiliency_ext.inprocess`` is a stub of ``CallWrapper``: Bridge's ``pretrain`` module
   imports it unguarded for a type hint (in-process restart, off here), and PyPI's builds of
   the package for this platform stop at 0.4.1, below the 0.6 Megatron-Core requires.
5. ``megatron.bridge.recipes`` is entered without its ``__init__``, which imports every model
   family's recipes (diffusion ones need ``diffusers``); the product reads ``recipes.common`` only.
6. Resuming with PyTorch's Adam (the optimizer Megatron-Core falls back to without Transformer
   Engine or Apex): before loading, each parameter's empty Adam state gets its ``step`` and
   moments, which Megatron-Core's torch-optimizer path asserts; after loading, each parameter
   gets its own ``step`` tensor holding the checkpoint's step. That path hands every parameter
   one shared tensor, which PyTorch's Adam then advances once per parameter on every step
   (a resumed run's bias correction went 0, 138, 276, ... on the toy Moonlight instead of 8,
   9, 10). With Transformer Engine's optimizer the step lives in the parameter groups.
7. The provider's cross-entropy is Megatron-Core's unfused one (``cross_entropy_loss_fusion``
   off; the SFT recipe asks for Transformer Engine's fused kernel).
8. Parameters are fp32 unless ``RPB_CPU_RUN_PRECISION=1``, which keeps the precision the run asks
   for (bf16 parameters with the distributed optimizer's fp32 main parameters run on CPU too).

Not a CPU adaptation, a defect of the published wheels that this bypasses (the GPU check,
``tests/gpu/check_bridge_finetune.sh``, runs without it and so meets it on a cluster):
``initialize_megatron`` runs ``make`` in Megatron-Core's ``datasets`` folder to build its C++
helpers, and the megatron-core 0.19.2 wheel ships the built ``helpers_cpp`` but no Makefile, so
``make`` fails and the rank exits. Here the prebuilt helpers are imported instead.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import sys
import types
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from tests import bridge_cpu


def _on_cpu(device: Any) -> Any:
    """``device`` with any CUDA device replaced by the CPU (an int is a CUDA device index)."""
    if isinstance(device, int) and not isinstance(device, bool):
        return "cpu"
    if isinstance(device, str | torch.device) and torch.device(device).type == "cuda":
        return "cpu"
    return device


class CudaOnCpu(TorchFunctionMode):
    """A torch function mode that makes the tensors asked for on CUDA on the CPU."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:  # the optimizers' dtype checks
            return func(*args).replace("torch.", "torch.cuda.", 1)
        if "device" in kwargs:
            kwargs["device"] = _on_cpu(kwargs["device"])
        if func is torch.Tensor.to:
            args = (args[0], *(_on_cpu(a) for a in args[1:]))
        return func(*args, **kwargs)


class NullStream:
    """A CUDA stream or event stand-in: CPU work runs in order, so every wait is already met."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # wait_stream, wait_event, record_event, synchronize, ...


def _null_streams() -> None:
    torch.cuda.Stream = torch.cuda.Event = NullStream
    torch.cuda.current_stream = lambda *args, **kwargs: NullStream()
    torch.cuda.stream = lambda *args, **kwargs: contextlib.nullcontext()


def _adam_state_before_loading() -> None:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    original = DistributedOptimizer.sharded_state_dict

    @functools.wraps(original)
    def sharded_state_dict(self: Any, model_state: Any, is_loading: bool = False, **kwargs: Any) -> Any:
        if is_loading:
            for group in self.optimizer.param_groups:
                for param in group["params"]:
                    state = self.optimizer.state[param]
                    if not state:  # replaced in place by the checkpoint's values
                        state.update(
                            step=torch.tensor(0.0),
                            exp_avg=torch.zeros_like(param),
                            exp_avg_sq=torch.zeros_like(param),
                        )
        return original(self, model_state, is_loading, **kwargs)

    DistributedOptimizer.sharded_state_dict = sharded_state_dict
    original_load = DistributedOptimizer.load_state_dict

    @functools.wraps(original_load)
    def load_state_dict(self: Any, state_dict: Any) -> Any:
        (step,) = {group["step"] for group in state_dict["optimizer"]["param_groups"]}
        loaded = original_load(self, state_dict)
        for state in self.optimizer.state.values():
            state["step"] = torch.tensor(float(step))
        return loaded

    DistributedOptimizer.load_state_dict = load_state_dict


def _allow_no_cuda() -> None:
    import torch.distributed as dist
    from megatron.bridge.training import initialize, setup

    original_initialize = initialize.initialize_megatron

    @functools.wraps(original_initialize)
    def initialize_on_cpu(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        cfg.dist.distributed_backend = "gloo"
        return original_initialize(cfg, *args, **{**kwargs, "allow_no_cuda": True})

    setup.initialize_megatron = initialize_on_cpu
    initialize._warmup_jit_function = lambda *args, **kwargs: None
    initialize.compile_helpers = lambda: importlib.import_module("megatron.core.datasets.helpers_cpp")
    original_barrier = dist.barrier

    @functools.wraps(original_barrier)
    def barrier(*args: Any, device_ids: Any = None, **kwargs: Any) -> Any:
        return original_barrier(*args, **kwargs)

    dist.barrier = barrier


def _stub_resiliency() -> None:
    package = types.ModuleType("nvidia_resiliency_ext")
    inprocess = types.ModuleType("nvidia_resiliency_ext.inprocess")
    inprocess.CallWrapper = type("CallWrapper", (), {})
    package.inprocess = inprocess
    sys.modules.update({package.__name__: package, inprocess.__name__: inprocess})


def _recipes_without_model_families() -> None:
    spec = importlib.util.find_spec("megatron.bridge")
    assert spec is not None and spec.submodule_search_locations
    recipes = types.ModuleType("megatron.bridge.recipes")
    recipes.__path__ = [f"{location}/recipes" for location in spec.submodule_search_locations]
    sys.modules[recipes.__name__] = recipes


def install() -> None:
    """Apply every adaptation once; idempotent."""
    if getattr(install, "done", False):
        return
    _stub_resiliency()
    bridge_cpu.CPU_PROVIDER_FIELDS["cross_entropy_loss_fusion"] = False
    if os.environ.get("RPB_CPU_RUN_PRECISION") == "1":
        for name in ("fp16", "bf16", "params_dtype", "pipeline_dtype", "autocast_dtype"):
            bridge_cpu.CPU_PROVIDER_FIELDS.pop(name)
    _recipes_without_model_families()
    bridge_cpu.install()
    torch.cuda.empty_cache = lambda: None
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        setattr(torch.cuda, name, lambda *args, **kwargs: 0)
    _null_streams()
    _adam_state_before_loading()
    _allow_no_cuda()
    CudaOnCpu().__enter__()  # for the whole process: never exited
    install.done = True  # type: ignore[attr-defined]
