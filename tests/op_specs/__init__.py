"""One module per op, each defining that op's OpSpec (tests/op_table.py finds them by name for OP_TABLE)."""
