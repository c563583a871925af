"""Bugs of triton-ascend 3.2's interpreter (upstream Triton 3.2's), corrected for the tests.

Each makes the interpreter reject or run something the compiler (triton-ascend 3.2's own, and
Triton 3.9's) compiles otherwise, so a kernel that is right on the device fails (or, worse,
passes by luck) under the interpreter:

- Its builder has no `get_int1_ty` and no `get_bf16`: a bool constant (`tl.where(c, x, False)`,
  `x & False`) or a float constant beside a bfloat16 tensor cannot be built, where the compiler
  builds both. Triton 3.9's interpreter has both methods; they are added with its meaning.

- A store through a scalar pointer whose scalar mask is False writes. Triton 3.2's
  `semantic._store_legacy` asks `if not mask:` to tell an unmasked store from a masked one;
  compiled, a mask is an IR value and always truthy, but under the interpreter a scalar is a
  one-element tensor whose truth is its value. The kernels' per-row stores (`tl.store(ptr + row,
  value, mask=has_row)`) then write row 0 for every row that does not exist. Triton 3.9 asks
  `mask is None`.
- A block reduction or scan (`tl.sum`, `tl.cumsum`) of int32 (or narrower) values keeps NumPy's
  int64 result under the int32 type, and a store of it writes 8 bytes a lane: past the lane's
  element, past the tensor's end at the last one. Triton 3.9 casts the result to the type.

`correct_interpreter` checks for each bug (the missing methods by name, the others with a
one-program kernel) and corrects only the ones that show: the missing constants are added; the
store is handed a mask that is truthy as an object, as compiled code has; the reduction's result
is cast to its type, as Triton 3.9 does.
"""

from __future__ import annotations

import torch


def _probes():
    import triton
    import triton.language as tl

    @triton.jit
    def masked_scalar_store(out_ptr, flag):
        tl.store(out_ptr, 1, mask=flag != 0)

    @triton.jit
    def stored_sum(values_ptr, out_ptr):
        lanes = tl.arange(0, 2)
        total = tl.sum(tl.load(values_ptr + lanes[:, None] * 2 + lanes[None, :]), axis=1)
        tl.store(out_ptr + lanes, total, mask=lanes < 1)

    def store_writes_under_a_false_mask() -> bool:
        out = torch.zeros(1, dtype=torch.int32)
        masked_scalar_store[(1,)](out, 0)
        return int(out[0]) != 0

    def sum_is_stored_wide() -> bool:
        out = torch.full((2,), 7, dtype=torch.int32)
        stored_sum[(1,)](torch.ones(4, dtype=torch.int32), out)
        return out.tolist() != [2, 7]

    return store_writes_under_a_false_mask, sum_is_stored_wide


def _correct_masked_scalar_stores() -> None:
    from triton.language import core, semantic

    class GivenMask(core.tensor):
        """A mask that is truthy as an object (it is given), whatever its value."""

        def __bool__(self) -> bool:
            return True

    store = semantic.store

    def masked_store(ptr, val, mask, *args, **kwargs):
        if isinstance(mask, core.tensor) and not mask.type.is_block():
            mask = GivenMask(mask.handle, mask.type)
        return store(ptr, val, mask, *args, **kwargs)

    semantic.store = masked_store


def _correct_reduction_types() -> None:
    from triton.runtime import interpreter

    interface = interpreter.ReduceScanOpIneterface  # (sic) Triton 3.2's name
    to_tensor = interface.to_tensor

    def typed_to_tensor(self, ret, dtype):
        if hasattr(ret, "shape") and ret.shape:
            ret = ret.astype(interpreter._get_np_dtype(dtype))
        return to_tensor(self, ret, dtype)

    interface.to_tensor = typed_to_tensor


def _add_missing_constants() -> list[str]:
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    added = []
    if not hasattr(builder, "get_int1_ty"):
        builder.get_int1_ty = lambda self: tl.int1
        added.append("get_int1_ty")
    if not hasattr(builder, "get_bf16"):
        # Rounded from float32 by the interpreter's own float32-to-bfloat16 cast.
        builder.get_bf16 = lambda self, value: self.cast_impl(self.get_fp32(value), tl.bfloat16)
        added.append("get_bf16")
    return added


def correct_interpreter() -> list[str]:
    """Corrects the bugs this interpreter has; returns the names of those it corrected."""
    corrected = _add_missing_constants()
    store_bug, sum_bug = _probes()
    if store_bug():
        _correct_masked_scalar_stores()
        corrected.append("masked scalar store")
    if sum_bug():
        _correct_reduction_types()
        corrected.append("reduction result type")
    if store_bug() or sum_bug():
        raise RuntimeError(f"the interpreter could not be corrected (tried: {corrected})")
    return corrected
