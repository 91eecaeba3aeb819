"""One rank's life in xladist: device assignment, executor, feeds, deadlock check, watchdog."""
