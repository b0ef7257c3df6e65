"""Types and helpers every layer shares. No Temporal, no I/O, and no imports from the other packages."""
