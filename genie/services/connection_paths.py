"""The paths a run's connections took on a testbed with equal-cost paths, read from its kernels while it is up
(right after each session: `genie.testbed.flow_paths`) and written to the run directory's ``paths.json``
(`genie.core.flowpath.RunPaths`): `genie bench` its sweep's, `genie replay` its replay's, `genie experiment`
each round's of both. The fabric model is calibrated on a sweep's sessions and compared on a replay's
(`astra_adapter.fabric`). On other targets (loopback, hosts, a topology without equal-cost paths) nothing is
read or written."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from genie.core.flowpath import PATHS_JSON, FlowTuple, RunPaths, SessionPaths


class PathRecorder:
    """Collects the sessions' paths of one run (``info``: the testbed, or None where nothing is read)."""

    def __init__(self, info: Any) -> None:
        from astra_adapter.fabric.network import FabricNetwork

        self.info = info if info is not None and FabricNetwork(info.topology).multipath else None
        self.swept: list[SessionPaths] = []
        self.replayed: list[SessionPaths] = []

    def _read(self, label: str, flows: Iterable[FlowTuple]) -> SessionPaths | None:
        flows = tuple(flows)
        if self.info is None or not flows:
            return None
        from genie.testbed.flow_paths import read_session_paths

        return read_session_paths(self.info, flows, label)

    def sweep(self, label: str, flows: Iterable[FlowTuple]) -> None:
        if (paths := self._read(label, flows)) is not None:
            self.swept.append(paths)

    def replay(self, label: str, flows: Iterable[FlowTuple]) -> None:
        if (paths := self._read(label, flows)) is not None:
            self.replayed.append(paths)

    def write(self, run: Any) -> None:
        """``paths.json`` in the run directory (rewritten whole, atomically, as sessions are added)."""
        if self.swept or self.replayed:
            run.write(PATHS_JSON, RunPaths(tuple(self.swept), tuple(self.replayed)).to_json())
