"""`xladist bench`: the product's own measurement tools, each against its alternative.

  collectives.py  xladist's collectives against the same operations done directly with
                  mpi4py, in the same run (`xladist bench collectives`)
  in_loop.py      an all-reduce in a compiled while loop through xladist.run, per iteration,
                  against raw mpi4py (`xladist bench collectives --in-loop`)
  harness.py      what both share: size syntax, the ranks' environment, the launch

Why here and not in benchmarks/: these answer a user's question about their own cluster
("how close to raw MPI are xladist's collectives on this network?"), so they must run from
an installed wheel, without a checkout, and every rank on every host starts them with
`python -m xladist.bench.<name>`. They are kept out of the layers they measure: nothing but
`xladist.cli` imports this package (the layer contract in pyproject.toml). The scripts in
benchmarks/ are the measurements of record, run from a checkout.
"""
