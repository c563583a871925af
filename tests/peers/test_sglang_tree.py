"""SGLang 0.5.23's tree-speculation kernels beside specops' (docs/tree_speculation.md).

`make test-peers` downloads SGLang's wheel (no dependencies) and unpacks the files used here
into build/peers/sglang-<version>/site: the Triton versions of build_tree_kernel_efficient
(FULL_MASK, QLEN_ONLY) and verify_tree_greedy (sglang/kernels/ops/speculative/spec_tree.py) and
the drafter's layout, organize_draft_results (sglang/srt/speculative/eagle_utils.py). Neither
module is imported as part of SGLang: spec_tree.py is loaded from its file with the three small
modules it imports standing in (platform queries that all answer False, so it imports nothing
else), and organize_draft_results is the function's own source, cut from eagle_utils.py and run
with torch (its OOB debug hook stubbed). Both run under the Triton interpreter on CPU tensors.

Trees come from a small drafter in SGLang's shapes (select_top_k_tokens: cumulative scores,
top-k beams a step), so selected_index is closed under parents; other cases draw selections
that are not (the "invalid eagle tree" SGLang skips). specops' outputs, on every backend, must
equal SGLang's bit for bit from the same initial buffers. The bit-packed mode has no Triton
version: its words must be the QLEN_ONLY rows SGLang's kernel writes, bit k column k (tree.cuh).
"""

from __future__ import annotations

import ast
import os
import pathlib
import sys
import types

import pytest
import repo_modules
import torch

import specops

VERSION = "0.5.23"
SITE = pathlib.Path(os.environ.get("SPECOPS_SGLANG_SITE", pathlib.Path(__file__).resolve().parents[2]
                                   / "build" / "peers" / f"sglang-{VERSION}" / "site"))
_requested = os.environ.get("SPECOPS_TEST_BACKENDS")
BACKENDS = [b for b in specops.available_backends() if not _requested or b in _requested.split(",")]


def _load_spec_tree() -> types.ModuleType:
    """spec_tree.py from its file, with the modules it imports standing in for the call only."""
    path = SITE / "sglang" / "kernels" / "ops" / "speculative" / "spec_tree.py"
    if not path.exists():
        raise pytest.UsageError(f"{path} is missing: run `make test-peers` from the repository root")
    no = staticmethod(lambda: False)
    stand_ins = {
        "sglang": types.ModuleType("sglang"), "sglang.srt": types.ModuleType("sglang.srt"),
        "sglang.srt.platforms": types.SimpleNamespace(current_platform=None),
        "sglang.srt.platforms.interface": types.SimpleNamespace(reject_out_of_tree_path=None),
        "sglang.srt.utils": types.SimpleNamespace(**{f"is_{p}": no.__func__ for p in ("cpu", "cuda", "hip", "musa",
                                                                                    "npu", "xpu")}),
    }
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        # Through the tests' one door for files of the repository (build/peers is inside it).
        module = repo_modules.load(str(path.resolve().relative_to(repo_modules.ROOT)))
    finally:
        for name, module_before in saved.items():
            if module_before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module_before
    return module


def _load_organize_draft_results():
    """organize_draft_results' own source from eagle_utils.py, run with torch."""
    path = SITE / "sglang" / "srt" / "speculative" / "eagle_utils.py"
    tree = ast.parse(path.read_text())
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef)
                    and node.name == "organize_draft_results")
    namespace = {"torch": torch, "List": list, "maybe_detect_oob": lambda *args: None}
    exec(compile(ast.Module([function], []), str(path), "exec"), namespace)
    return namespace["organize_draft_results"]


SPEC_TREE = _load_spec_tree()
ORGANIZE = _load_organize_draft_results()


def draft(batch: int, topk: int, depth: int, n: int, generator: torch.Generator, vocab: int):
    """The drafter's lists in SGLang's shapes (select_top_k_tokens), then organize_draft_results:
    (parent_list, selected_index, draft_tokens)."""
    first = torch.rand(batch, topk, generator=generator)
    scores_list, tokens, parents = [first[:, None, :]], [torch.randint(vocab, (batch, topk), generator=generator)], [
        torch.arange(-1, topk).repeat(batch, 1)]
    scores = first
    for step in range(1, depth):
        expand = scores[:, :, None] * torch.rand(batch, topk, topk, generator=generator)
        scores, index = expand.flatten(1).topk(topk, dim=-1)
        scores_list.append(expand)
        tokens.append(torch.randint(vocab, (batch, topk * topk), generator=generator))
        parents.append(index + topk * topk * (step - 1) + topk)
    return ORGANIZE(scores_list, tokens, parents, n)


def unclosed_selection(batch: int, topk: int, depth: int, n: int, generator: torch.Generator) -> torch.Tensor:
    """Sorted selections anywhere among the candidates: parents may be missing (SGLang skips the node)."""
    candidates = topk + (depth - 1) * topk * topk
    return torch.stack([torch.randperm(candidates, generator=generator)[: n - 1].sort().values for _ in range(batch)])


def sglang_buffers(batch: int, n: int, seq_lens: torch.Tensor, mode: int) -> dict:
    """The buffers as SGLang's build_tree_kernel_efficient (eagle_utils) allocates them: the mask
    all True, the links -1; positions get a fill of their own (SGLang: torch.empty)."""
    cells = batch * n * n + (int(seq_lens.sum()) * n if mode == 0 else 0)
    return dict(tree_mask=torch.full((cells,), True), positions=torch.full((batch * n,), -99),
                retrive_index=torch.full((batch, n), -1), retrive_next_token=torch.full((batch, n), -1),
                retrive_next_sibling=torch.full((batch, n), -1))


def sglang_build(parent_list, selected_index, seq_lens, topk, depth, n, mode) -> dict:
    out = sglang_buffers(seq_lens.numel(), n, seq_lens, mode)
    SPEC_TREE.sgl_build_tree_kernel_triton(parent_list, selected_index, seq_lens, out["tree_mask"], out["positions"],
                                           out["retrive_index"], out["retrive_next_token"],
                                           out["retrive_next_sibling"], topk, depth, n, mode)
    return out


# (batch, topk, depth, draft tokens, shape): every topk and depth in 1..8, draft tokens up to 64,
# a batch of 256, a chain (topk 1), a star (depth 1), a single token. Kept few: the interpreter
# runs SGLang's scalar loops one element at a time.
CASES = [
    (1, 1, 1, 1), (3, 1, 8, 9), (4, 8, 1, 9), (2, 8, 8, 64), (256, 2, 2, 4), (5, 3, 4, 20), (3, 4, 3, 32),
    (2, 5, 6, 48), (6, 6, 2, 12), (2, 7, 5, 40), (8, 2, 7, 14), (3, 3, 3, 8),
]
IDS = [f"B{b}-topk{k}-depth{d}-n{n}" for b, k, d, n in CASES]


@pytest.mark.parametrize("closed", [True, False], ids=["drafted", "unclosed"])
@pytest.mark.parametrize("batch,topk,depth,n", CASES, ids=IDS)
def test_build_equals_sglang(batch, topk, depth, n, closed):
    generator = torch.Generator().manual_seed(batch * 1000 + topk * 100 + depth * 10 + n)
    parent_list, selected_index, _ = draft(batch, topk, depth, n, generator, vocab=100)
    if not closed:
        selected_index = unclosed_selection(batch, topk, depth, n, generator)
    seq_lens = torch.randint(0, 30, (batch,), generator=generator)
    for mode in (0, 1):
        theirs = compare_build(parent_list, selected_index, seq_lens, topk, depth, n, mode)
        if mode == 1 and n <= 32:
            # QLEN_ONLY_BITPACKING: SGLang's QLEN_ONLY rows, bit k column k, in its word width.
            rows = theirs["tree_mask"].view(batch * n, n).long()
            words = (rows << torch.arange(n)).sum(-1)
            for backend in BACKENDS:
                with specops.backend(backend):
                    tree = specops.build_tree_kernel_efficient(parent_list, selected_index, seq_lens, topk=topk,
                                                               depth=depth, draft_token_num=n, tree_mask_mode=2)
                assert tree.tree_mask.dtype == [torch.uint8, torch.uint16, torch.uint32][
                    [1, 2, 4].index(4 if n > 16 else 2 if n > 8 else 1)]
                assert tree.tree_mask.long().tolist() == words.tolist(), f"{backend}: packed words"
                for name in ("positions", "retrive_index", "retrive_next_token", "retrive_next_sibling"):
                    assert torch.equal(getattr(tree, name), theirs[name]), f"{backend} mode 2: {name}"


def compare_build(parent_list, selected_index, seq_lens, topk, depth, n, mode) -> dict:
    """SGLang's build and specops' on every backend, from the same initial buffers: SGLang's outputs."""
    batch = seq_lens.numel()
    theirs = sglang_build(parent_list, selected_index, seq_lens, topk, depth, n, mode)
    for backend in BACKENDS:
        ours = sglang_buffers(batch, n, seq_lens, mode)
        with specops.backend(backend):
            specops.build_tree_kernel_efficient(parent_list, selected_index, seq_lens, *ours.values(), topk, depth,
                                                n, mode)
        for name, value in theirs.items():
            assert torch.equal(ours[name], value), f"{backend} mode {mode}: {name} differs from SGLang's"
    return theirs


def compare_verify(tree: dict, draft_tokens, depth: int, vocab: int, generator: torch.Generator) -> None:
    """SGLang's verify and specops' on every backend, over a built tree's links."""
    batch, n = tree["retrive_index"].shape
    bonus = torch.randint(vocab, (batch, 1), generator=generator)
    candidates = torch.cat([bonus, draft_tokens], dim=1)
    # Targets: mostly the drafted tokens' own successors, so long paths are accepted.
    target = torch.where(torch.rand(batch, n, generator=generator) < 0.7, candidates.roll(-1, 1),
                         torch.randint(vocab, (batch, n), generator=generator))
    links = (candidates, tree["retrive_index"], tree["retrive_next_token"], tree["retrive_next_sibling"], target)

    def buffers():
        # SGLang's caller: predicts torch.empty (a fill here), accept_index -1, accept_length empty.
        return (torch.full((batch * n,), -5, dtype=torch.int32), torch.full((batch, depth + 1), -1, dtype=torch.int32),
                torch.full((batch,), -5, dtype=torch.int32))

    theirs = buffers()
    SPEC_TREE.verify_tree_greedy_triton(*theirs, *links)
    for backend in BACKENDS:
        ours = buffers()
        with specops.backend(backend):
            specops.verify_tree_greedy(*ours, *links)
        for name, mine, value in zip(("predicts", "accept_index", "accept_token_num"), ours, theirs):
            assert torch.equal(mine, value), f"{backend}: {name} differs from SGLang's"


@pytest.mark.parametrize("vocab", [2, 5, 1000])
@pytest.mark.parametrize("batch,topk,depth,n", CASES, ids=IDS)
def test_verify_equals_sglang(batch, topk, depth, n, vocab):
    generator = torch.Generator().manual_seed(vocab * 7 + batch * 1000 + topk * 100 + depth * 10 + n)
    parent_list, selected_index, draft_tokens = draft(batch, topk, depth, n, generator, vocab)
    tree = sglang_build(parent_list, selected_index, torch.zeros(batch, dtype=torch.int64), topk, depth, n, 1)
    compare_verify(tree, draft_tokens, depth, vocab, generator)


# Many trees, batches of 256 in turn of these (topk, depth, draft tokens): each tree built in both
# of SGLang's Triton modes and verified. `make test-peers` draws 512; the figure is the same
# test with SPECOPS_SGLANG_TREES=10000 (SGLang's kernels under the interpreter are its cost).
TREES = int(os.environ.get("SPECOPS_SGLANG_TREES", "512"))
TREE_SHAPES = [(2, 2, 4), (3, 3, 8), (2, 4, 6), (4, 2, 8), (1, 5, 5), (3, 2, 6)]


def test_random_trees_equal_sglang():
    generator = torch.Generator().manual_seed(57)
    compared = 0
    while compared < TREES:
        topk, depth, n = TREE_SHAPES[(compared // 256) % len(TREE_SHAPES)]
        batch = min(256, TREES - compared)
        parent_list, selected_index, draft_tokens = draft(batch, topk, depth, n, generator, vocab=4)
        seq_lens = torch.randint(0, 30, (batch,), generator=generator)
        compare_build(parent_list, selected_index, seq_lens, topk, depth, n, mode=0)
        tree = compare_build(parent_list, selected_index, seq_lens, topk, depth, n, mode=1)
        compare_verify(tree, draft_tokens, depth, vocab=4, generator=generator)
        compared += batch
    assert compared == TREES
