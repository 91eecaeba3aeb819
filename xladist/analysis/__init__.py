"""Static analyses of HLO modules across devices, with no MPI: `schedule.py` (each
computation's linear order: data, control, tokens, channel chains) and `deadlock/` (every
device's schedule simulated together, before any rank runs). Below the runtime, which runs
programs in the order proved here; above `xladist.hlo`."""
