"""MPI collectives for xladist: groups, communicators, one module per collective family."""
