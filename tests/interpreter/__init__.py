"""Reference interpreter tests, one file per family of ops; ir.py builds their modules."""
