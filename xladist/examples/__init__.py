"""Example programs that ship with xladist (built with xladist.builder, no repo needed).

- `train_mlp`: data-parallel training of a small MLP: infeed batches, all-reduce the
  gradients, SGD, outfeed the loss (examples/train_mlp/ holds the scripts).
"""
