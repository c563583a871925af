"""Conventions shared by every op (docs/conventions.md)."""

PAD_SLOT_ID = -1
"""A slot id that must not be written: tokens not stored on this rank, padding tokens."""

NULL_BLOCK_ID = 0
"""The block id of padding rows and of the unused tail of block-table rows."""
