"""The traffic feature's pure part: the models of a shift and its arithmetic (no I/O, importable by every layer)."""
