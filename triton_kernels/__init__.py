"""Triton kernels of specops, one module per op; shipped as `specops.triton_kernels`.

Importing a module here imports Triton. Set TRITON_INTERPRET=1 before the import to run
the kernels on CPU tensors through Triton's interpreter.
"""
