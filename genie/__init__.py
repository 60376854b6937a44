"""genie: network-emulation testbed for ML communication."""

__version__ = "0.1.0"
