"""Workload formats (Chakra ET, ASTRA-sim text, PARAM comms, native JSON/YAML) and generators."""
