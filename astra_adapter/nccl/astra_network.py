"""A real cluster's NCCL calibration as ASTRA-sim's network.yml (pure): what `genie astra export --network DIR`
writes when DIR is a `genie calibrate` run.

ASTRA-sim's analytical network has one bandwidth and one per-hop latency per dimension, and system.json one
algorithm per dimension for every size. Each dimension gets what NCCL's bulk path delivers on it, from the
calibration retargeted to the export's topology (:func:`astra_adapter.nccl.estimate.retarget`):

- a node's GPUs (``Switch`` of the NVSwitch): the fitted intra-node bus bandwidth (what a ring over NVLink or
  PCIe moves per GPU), and half NCCL's Ring/Simple step latency on that link per hop (a Switch charges two hops
  a step), times the fitted latency scale;
- the nodes, or plain hosts (one GPU each): the fitted bandwidth of one NIC (rail-optimized: a GPU's own NIC),
  and half NCCL's Ring/Simple network step latency per hop.

What ASTRA-sim cannot express is said in the notes, never dropped silently: NCCL's per-size choice of
algorithm and protocol (LL and LL128 below the Simple range, NVLS, NVLSTree, Tree, PAT), the channel cut of small
calls, the per-call launch and base latency, and the pipeline fill. Neither can it map channels onto NICs (rails):
one bandwidth per dimension. The fabric model can (:mod:`astra_adapter.fabric.nccl_flows`).
"""

from __future__ import annotations

from genie.core.errors import InputError
from genie.core.topology import Topology

from astra_adapter.config import GIB_BYTES, NetworkConfig, NetworkDim
from astra_adapter.mapping import DimRole, TopologyMapping
from astra_adapter.nccl.estimate import retarget
from astra_adapter.nccl.hardware import Cluster
from astra_adapter.nccl.model import NcclParams
from astra_adapter.nccl.tuning import BASE_LAT_US, HW_LAT_US, HwKind

_RING, _SIMPLE = 1, 2  # NCCL's indices of Ring and Simple in its latency tables


def _gib(gb_s: float) -> float:
    return gb_s * 1e9 / GIB_BYTES


def nccl_network(mapping: TopologyMapping, target: Topology, calibrated: Cluster, params: NcclParams, *,
                 source: str) -> tuple[NetworkConfig, tuple[str, ...]]:
    """network.yml's dimensions from the calibration, and the notes (scalings, what ASTRA-sim cannot express)."""
    cluster, fitted, scaling = retarget(calibrated, params, target, source=source)
    dims = []
    for d in mapping.dims:
        if d.role is DimRole.NODE_GPUS:
            bw, hw = fitted.intra_busbw_gb_s, cluster.intra_kind
        elif d.role is DimRole.HOSTS:
            bw, hw = fitted.nic_gb_s, HwKind.NET
        else:
            raise InputError(f"dimension {d.description}: ranks sharing one host are not GPUs of an NCCL cluster; "
                             f"describe the nodes with `nodes:` (docs/topology.md)", source=source, path="hosts")
        step_us = params.latency_scale * HW_LAT_US[hw][_RING][_SIMPLE]
        dims.append(NetworkDim(d.topology, d.npus_count, _gib(bw), step_us * 1000.0 / 2))
    base_us = params.latency_scale * BASE_LAT_US[_RING][_SIMPLE] + params.launch_us
    notes = (f"network.yml from the NCCL calibration of {calibrated.name} ({calibrated.gpu}): per dimension "
             f"NCCL's Ring/Simple bandwidth and step latency as fitted",
             *scaling,
             "ASTRA-sim cannot express NCCL's per-size choice: every size runs system.json's one algorithm per "
             "dimension at the Simple protocol's bandwidth (no LL/LL128 for small calls, no NVLS/NVLSTree, Tree or "
             "PAT, no channel cut); use `genie estimate --calibration DIR` for NCCL's choices",
             f"not expressed either: the per-call launch and base latency ({base_us:.1f} us as fitted) and the "
             f"pipeline fill")
    return NetworkConfig(tuple(dims)), notes
