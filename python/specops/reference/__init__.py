"""Pure torch references, one per op: readable first, fast never. Tests use them as the oracle.

Each takes the op's schema arguments and writes into the op's output buffers.
"""
