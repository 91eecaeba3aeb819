"""xladist's version: in the kernel cache's key and every `.xlx` header, so it lives at the
bottom, where every layer may read it."""

__version__ = "0.1.0"
