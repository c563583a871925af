"""compressor_metadata's slot-mapping formats: the codes its schema's slot_mapping_format takes
(vllm-ascend's compressor kernels), shared by the op's faces and the drafting layer."""

from __future__ import annotations

FORMAT_FLAT = 1  # one int32 slot a row: block id * block size + offset (A5)
FORMAT_BLOCK_OFFSET = 2  # a (block id, offset) pair a row (A2 / A3)
