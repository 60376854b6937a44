"""The run services behind `genie bench` and `genie replay`: choose the target (a testbed from a topology, a
running testbed, loopback, real hosts), start the ranks (locally, MPI, Slurm), record the run directory, watch
the links, capture packets, inject faults — then hand back what the command prints. The CLI only parses
options into a command and prints the result."""
