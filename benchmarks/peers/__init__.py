"""Side-by-side peers harness (issue #8): genie vs torch.distributed gloo vs MPI (mpi4py over MPICH) on one
emulated testbed. Run by hand as root: ``.venv/bin/python -m benchmarks.peers --help``; see benchmarks/README.md.
"""
