"""Native while loops under MPI: the driver against the Python executor and numpy."""
