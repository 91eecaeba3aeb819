"""Values and rules of XLA's operation semantics that more than one layer needs (both
backends, the collectives, the runtime): defined once here, below all of them."""
