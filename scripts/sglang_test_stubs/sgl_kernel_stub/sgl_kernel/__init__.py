"""TEST ENVIRONMENT ONLY: import stub for ``sgl_kernel`` (see ../pyproject.toml).

SGLang 0.5.23's CPU engine (``SGLANG_USE_CPU_ENGINE=1``, ``--device cpu``) does
``from sgl_kernel import <name>_cpu`` at module level in the modules listed in :data:`IMPORTED_BY`;
no CPU build of sgl_kernel is on PyPI. This stub provides exactly those names, as functions that
raise :class:`RuntimeError` when called: the server then starts, and on the configuration PBKV's
tests run (tiny model, ``--attention-backend torch_native``, no speculative decoding, no KV
moves) none of them is reached, so a call is a loud test failure, never a silent wrong result.

Deliberately absent:

- every other name and every submodule (``sgl_kernel.scalar_type``, ``sgl_kernel.allreduce``):
  importing them raises ImportError, which sends SGLang to its own pure-Python fallbacks;
- any ``torch.ops.sgl_kernel`` registration: SGLang enables its Intel AMX layers only when
  ``torch.ops.sgl_kernel.convert_weight_packed`` exists, so it keeps its plain-torch layers.
"""

from __future__ import annotations

__version__ = "0.0.0+pbkv.test.stub"
__pbkv_test_stub__ = True

#: Each provided name -> the SGLang 0.5.23 module that imports it (``sglang/`` relative).
IMPORTED_BY = {
    "copy_all_layer_kv_cache_cpu": "kernels/ops/kvcache/cache_move.py",
    "assign_req_to_token_pool_cpu": "srt/mem_cache/allocation.py",
    "assign_draft_cache_locs_contiguous_cpu": "kernels/ops/speculative/cache_locs.py",
    "assign_extend_cache_locs_cpu": "kernels/ops/speculative/cache_locs.py",
    "build_tree_kernel_efficient_cpu": "kernels/ops/speculative/spec_tree.py",
    "verify_tree_greedy_cpu": "kernels/ops/speculative/spec_tree.py",
    "fill_accept_out_cache_loc_cpu": "kernels/ops/speculative/eagle.py",
    "fill_bonus_tokens_cpu": "kernels/ops/speculative/eagle.py",
}


class StubKernelCalled(RuntimeError):
    """A kernel of this test-only stub was called: the configuration needs a real sgl_kernel."""


def _unavailable(name: str):
    def kernel(*args, **kwargs):
        raise StubKernelCalled(
            f"sgl_kernel.{name} was called, but this is PBKV's test-only sgl_kernel stub "
            "(scripts/sglang_test_stubs/sgl_kernel_stub), which has no kernels; install a real CPU "
            "build of sgl_kernel for this SGLang configuration")

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f"Test stub of ``sgl_kernel.{name}`` (imported by sglang/{IMPORTED_BY[name]}): raises if called."
    return kernel


globals().update({name: _unavailable(name) for name in IMPORTED_BY})
__all__ = sorted(IMPORTED_BY)


def __getattr__(name: str):
    raise AttributeError(f"PBKV's test-only sgl_kernel stub does not provide {name!r} "
                         f"(it provides only {', '.join(__all__)})")
