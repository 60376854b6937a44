"""ASTRA-sim adapter: its configuration files, its output, its binary, and a built-in estimator with the
semantics of its analytical congestion-unaware backend (see docs/astra.md).

- :mod:`astra_adapter.config` - system.json, network.yml, remote_memory.json
- :mod:`astra_adapter.output` - parse ASTRA-sim's stdout, print its lines, estimate.csv
- :mod:`astra_adapter.runner` - run a real ASTRA-sim binary
- :mod:`astra_adapter.estimate` - ``estimate(trace, system, network)``, the built-in estimator's entry point
"""
