"""`make device-carry`: vLLM's own Triton kernels, as source, for the device check's timings.

The device check (docs/device_readiness.md, "The first minutes on a device") times specops'
kernels against vLLM's for the same work. A lent device machine has no network and vLLM's wheel
is 336 MB, and vLLM's kernel modules import half of vLLM; what travels is one small module:
the @triton.jit functions named below, cut out of the unpacked wheel (build/peers/vllm-0.33.0/site, from
`make test-peers`) with their source unchanged, under a header that imports upstream Triton as
`triton` and `tl`. It is written to build/device-carry/vllm_kernels.py (an ignored path, which
the device run carries) with the wheel's version and each kernel's origin.

Run: python tools/device_carry.py [--site build/peers/vllm-0.33.0/site] [--out build/device-carry]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

# (module path inside the wheel, kernels): each kernel specops' timing compares with.
KERNELS = (
    ("vllm/v1/worker/gpu/buffer_utils.py", ("_load_ptr",)),  # the pointer-table helper the next two call
    ("vllm/v1/worker/gpu/block_table.py", ("_gather_block_tables_kernel", "_compute_slot_mappings_kernel")),
    ("vllm/v1/worker/gpu/input_batch.py", ("_prepare_pos_seq_lens_kernel", "_get_num_sampled_and_rejected_kernel")),
    ("vllm/v1/spec_decode/utils.py", ("eagle_prepare_next_token_padded_kernel",
                                      "eagle_step_slot_mapping_metadata_kernel")),
)

HEADER = '''# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""vLLM {version}'s Triton kernels, cut out of its wheel by tools/device_carry.py (source
unchanged) for specops' device check. Origins: {origins}."""

import triton
import triton.language as tl

'''


def _version(site: Path) -> str:
    infos = sorted(site.glob("vllm-*.dist-info"))
    return infos[-1].name.removeprefix("vllm-").removesuffix(".dist-info") if infos else "unknown"


def kernel_sources(site: Path) -> list[tuple[str, str, str]]:
    """(module, name, source with its decorators) of every kernel of KERNELS."""
    found = []
    for module, names in KERNELS:
        text = (site / module).read_text()
        lines = text.splitlines(keepends=True)
        functions = {node.name: node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)}
        for name in names:
            node = functions.get(name)
            if node is None:
                raise SystemExit(f"device_carry: {module} has no function {name} (is the site vLLM 0.33?)")
            first = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list]) - 1
            found.append((module, name, "".join(lines[first:node.end_lineno])))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="build/peers/vllm-0.33.0/site", help="the unpacked vLLM wheel (make test-peers)")
    parser.add_argument("--out", default="build/device-carry", help="where vllm_kernels.py is written")
    args = parser.parse_args(argv)
    site, out = Path(args.site), Path(args.out)
    if not (site / "vllm").is_dir():
        print(f"device_carry: {site}/vllm is missing: run `make test-peers` (it unpacks vLLM's wheel there)",
              file=sys.stderr)
        return 2
    sources = kernel_sources(site)
    origins = ", ".join(f"{module.removesuffix('.py').replace('/', '.')}.{name}" for module, name, _ in sources)
    text = HEADER.format(version=_version(site), origins=origins)
    text += "\n\n".join(source.rstrip() + "\n" for _, _, source in sources)
    compile(text, "vllm_kernels.py", "exec")  # a cut that broke the syntax fails here, not on the device
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm_kernels.py").write_text(text)
    print(f"device_carry: {len(sources)} kernels of vLLM {_version(site)} -> {out / 'vllm_kernels.py'} "
          f"({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
