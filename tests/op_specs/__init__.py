"""One module per op, each defining that op's OpSpec (tests/op_table.py lists them in OP_TABLE)."""
