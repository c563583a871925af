"""The drafting layer's inputs with a StepCache (docs/drafting.md, docs/changelog.md third round).

- Inference tensors (a runner under torch.inference_mode()) have no version counter: with a
  cache the layer once raised torch's "Inference tensors do not track version counter" while
  the ops and the uncached layer take them. Now such a step is built without the cache, with
  the results of an uncached build, for every group kind, kind of step and input.
- The fingerprint is taken after the inputs are checked: a NumPy host copy is the ValueError
  naming it that the uncached layer raises (once an AttributeError).
- draft_index is checked on every build, not only when its buffers are first made (1.0 was
  accepted after a build with 1).
- What the fingerprint sees, exactly as StepCache's docstring says: writes through torch on the
  tensor or a view of it (they bump its version), a new storage (torch.utils.swap_tensors,
  `.data =`, `set_`: the data pointer changes); not writes to its storage that bypass its
  version counter (`untyped_storage().copy_`, `.data.copy_`, a NumPy view), for which
  `invalidate()` is the remedy.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch
from drafting_cases import (
    ALL_GROUPS,
    COMPRESSED,
    DSPARK,
    SWA,
    _metadata_tensors,
    assert_same_metadata,
    make_builders,
    make_model,
    make_step,
)

from specops.drafting import StepCache, build_draft_attn_metadata


def _inference_copy(common):
    """The same step with every tensor an inference tensor, as a runner under inference_mode has."""
    with torch.inference_mode():
        def copied(value):
            if isinstance(value, torch.Tensor):
                return value.clone()
            if isinstance(value, dict):
                return {name: copied(t) for name, t in value.items()}
            return value
        return dataclasses.replace(common, **{f.name: copied(getattr(common, f.name))
                                               for f in dataclasses.fields(common)})


INPUTS = ("query_start_loc", "query_start_loc_cpu", "seq_lens", "seq_lens_cpu", "positions", "rope_cos_sin_cache",
          "every tensor")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("inference", INPUTS)
def test_inference_tensors_through_the_layer_with_a_cache(causal, inference):
    model = make_model()
    common = make_step(random.Random(11), ALL_GROUPS, 3, num_reqs=6, host_seq_lens=True)
    common.causal = causal
    expected = build_draft_attn_metadata(make_builders(model, ALL_GROUPS), common, 2)
    expected = [{name: t.clone() for name, t in _metadata_tensors(meta).items()} for meta in expected]
    if inference == "every tensor":
        step = _inference_copy(common)
    else:
        step = dataclasses.replace(common)
        if inference != "rope_cos_sin_cache":
            with torch.inference_mode():
                setattr(step, inference, getattr(common, inference).clone())
    if inference in ("rope_cos_sin_cache", "every tensor"):
        with torch.inference_mode():
            model = dataclasses.replace(model, rope_cos_sin_cache=model.rope_cos_sin_cache.clone())
    builders = make_builders(model, ALL_GROUPS)
    cache = StepCache()
    for _ in range(2):  # a second step over the same cache: nothing stale was stored
        with torch.inference_mode():
            results = build_draft_attn_metadata(builders, step, 2, cache=cache)
        for meta, values, group in zip(results, expected, ALL_GROUPS):
            for name, tensor in _metadata_tensors(meta).items():
                assert torch.equal(tensor, values[name]), f"{group.name} {name} with inference {inference}"
    assert len(cache) == 0, "an entry keyed by a fingerprint that cannot see writes was stored"
    with torch.inference_mode():
        alone = builders[0].build_for_drafting(step, 2, cache)
    assert all(torch.equal(t, expected[0][name]) for name, t in _metadata_tensors(alone).items())


@pytest.mark.parametrize("name", ["query_start_loc_cpu", "seq_lens_cpu", "positions"])
def test_a_numpy_input_is_the_same_error_with_and_without_a_cache(name):
    model = make_model()
    common = make_step(random.Random(3), [SWA, COMPRESSED], 3, num_reqs=4, host_seq_lens=True)
    setattr(common, name, getattr(common, name).numpy())
    errors = []
    for cache in (None, StepCache()):
        with pytest.raises(ValueError) as error:
            build_draft_attn_metadata(make_builders(model, [SWA, COMPRESSED]), common, 1, cache=cache)
        errors.append(str(error.value))
        with pytest.raises(ValueError, match=name):
            make_builders(model, [SWA])[0].build_for_drafting(common, 1, cache)
    assert errors[0] == errors[1] and name in errors[0]


@pytest.mark.parametrize("draft_index", [1.0, 2.5, "1", None, np.float64(1.0)])
def test_draft_index_is_checked_on_every_build(draft_index):
    model = make_model()
    common = make_step(random.Random(3), [SWA, DSPARK], 3, num_reqs=4)
    builders = make_builders(model, [SWA, DSPARK])
    build_draft_attn_metadata(builders, common, 1)  # the buffers of draft index 1 exist now
    builders[0].build_for_drafting(common, 1, StepCache())
    with pytest.raises(ValueError, match="draft_index"):
        build_draft_attn_metadata(builders, common, draft_index)
    with pytest.raises(ValueError, match="draft_index"):
        build_draft_attn_metadata(builders, common, draft_index, cache=StepCache())
    with pytest.raises(ValueError, match="draft_index"):
        builders[1].build_for_drafting(common, draft_index)
    with pytest.raises(ValueError, match="draft_index"):
        builders[1].buffers(draft_index)


def test_a_numpy_draft_index_is_an_int():
    model = make_model()
    common = make_step(random.Random(3), [SWA, DSPARK], 3, num_reqs=4)
    expected = [{n: t.clone() for n, t in _metadata_tensors(m).items()}
                for m in build_draft_attn_metadata(make_builders(model, [SWA, DSPARK]), common, 2)]
    builders = make_builders(model, [SWA, DSPARK])
    for meta, values in zip(build_draft_attn_metadata(builders, common, np.int64(2), cache=StepCache()), expected):
        assert all(torch.equal(t, values[n]) for n, t in _metadata_tensors(meta).items())
    assert set(builders[0]._buffers) == {2}


def _swap(common, name):
    replacement = getattr(common, name).clone().add_(1)
    torch.utils.swap_tensors(getattr(common, name), replacement)


def _set_storage(common, name):
    tensor = getattr(common, name)
    tensor.set_(tensor.clone().add_(1))


def _assign_data(common, name):
    tensor = getattr(common, name)
    tensor.data = tensor.clone().add_(1)


def _storage_copy(common, name):
    tensor = getattr(common, name)
    tensor.untyped_storage().copy_(tensor.clone().add_(1).untyped_storage())


def _data_copy(common, name):
    tensor = getattr(common, name)
    tensor.data.copy_(tensor + 1)


SEEN = {"an in-place op": lambda c, n: getattr(c, n).add_(1),
        "an in-place op on a view": lambda c, n: getattr(c, n)[:].add_(1),
        "torch.utils.swap_tensors": _swap, "set_": _set_storage, ".data =": _assign_data}
UNSEEN = {"untyped_storage().copy_": _storage_copy, ".data.copy_": _data_copy,
          "a NumPy view": lambda c, n: c.__getattribute__(n).numpy().__iadd__(1)}


def _two_groups_around(write, name: str):
    """Builds SWA with a cache, writes `name` (positions or seq_lens) with `write`, builds
    COMPRESSED with the same cache; returns (what it served, what it should be, the cache)."""
    model = make_model()
    common = make_step(random.Random(5), [SWA, COMPRESSED], 3, num_reqs=8, host_seq_lens=False, oversized=False)
    first, second = make_builders(model, [SWA, COMPRESSED])
    cache = StepCache()
    first.build_for_drafting(common, 1, cache)
    write(common, name)
    served = second.build_for_drafting(common, 1, cache)
    fresh = make_builders(model, [COMPRESSED])[0].build_for_drafting(common, 1)
    return served, fresh, cache, second, common


@pytest.mark.parametrize("name", ["positions", "seq_lens"])
@pytest.mark.parametrize("how", list(SEEN))
def test_the_fingerprint_sees_writes_through_torch_and_new_storage(how, name):
    served, fresh, _, _, _ = _two_groups_around(SEEN[how], name)
    assert_same_metadata(served, fresh, f"{how} on {name}")


@pytest.mark.parametrize("name", ["positions", "seq_lens"])
@pytest.mark.parametrize("how", list(UNSEEN))
def test_writes_that_bypass_the_version_counter_are_not_seen_until_invalidate(how, name):
    """As StepCache's docstring says: the old value is served; invalidate() is the remedy."""
    served, fresh, cache, second, common = _two_groups_around(UNSEEN[how], name)
    with pytest.raises(AssertionError):
        assert_same_metadata(served, fresh)
    cache.invalidate()
    assert_same_metadata(second.build_for_drafting(common, 1, cache), fresh, f"{how} on {name} after invalidate")
