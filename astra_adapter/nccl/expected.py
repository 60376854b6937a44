""""Are my numbers expected?" (pure): measured nccl-tests points against what the cluster's own hardware
description predicts through the NCCL model at its nominal parameters, with the likely class of cause where a
run falls well short. The calibration never refits the hardware silently to explain a broken cluster: a
finding is printed, written to the calibration and left for the user to act on."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import Enum

from genie.collectives.busbw import busbw_factor

from astra_adapter.nccl.fit import Observation
from astra_adapter.nccl.hardware import Cluster, Interconnect
from astra_adapter.nccl.model import NcclParams, predict
from astra_adapter.nccl.tuning import NcclAlgorithm

#: a run whose large-size bus bandwidth is below this share of the hardware's promise is flagged
SHORT_RATIO = 0.6
PCIE_GEN4_GB_S = 24.0  # a x16 Gen4 link, NCCL's reckoning (width x speed / 80)
LARGE_BYTES = 64 << 20  # from this size a sweep is in its bandwidth regime


class Confidence(Enum):
    HIGH = "high"
    MEDIUM = "medium"


@dataclass(frozen=True)
class Finding:
    source: str
    collective: str
    ranks: int
    nodes: int
    measured_busbw_gb_s: float
    expected_busbw_gb_s: float
    cause: str
    confidence: Confidence
    line: int = 0  # the table's line, where its file has several tables (0: one)

    @property
    def ratio(self) -> float:
        return self.measured_busbw_gb_s / self.expected_busbw_gb_s if self.expected_busbw_gb_s else 0.0

    def describe(self) -> str:
        where = f"{self.source}: line {self.line}" if self.line else self.source
        return (f"{where}: {self.collective} on {self.ranks} ranks / {self.nodes} node(s) reaches "
                f"{self.measured_busbw_gb_s:.1f} GB/s bus bandwidth where the hardware description predicts "
                f"{self.expected_busbw_gb_s:.1f} ({self.ratio:.0%}): likely {self.cause} "
                f"(confidence {self.confidence.value})")


def _busbw(o: Observation, time_us: float) -> float:
    return o.call.size_bytes / time_us / 1e3 * busbw_factor(o.call.collective, o.call.ranks)


def _cause(cluster: Cluster, nominal: NcclParams, o: Observation, measured: float, expected: float,
           algorithm: NcclAlgorithm | None) -> str:
    call = o.call
    if call.nodes > 1 and cluster.nic_gb_s > 0:
        nic = nominal.nic_gb_s
        worth = measured / nic
        if cluster.nics > 1 and worth < cluster.nics - 0.5 and abs(worth - round(worth)) < 0.2 and round(worth) >= 1:
            return (f"NICs not all carrying traffic: the plateau is about {round(worth)} of the node's {cluster.nics} "
                    f"NICs' worth (a rail down or short, NCCL_IB_HCA, GPU-NIC affinity)")
        if measured < cluster.nics * min(nic, PCIE_GEN4_GB_S) * 0.5:
            return ("the GPU-NIC path or transport: traffic through the CPU instead of GPUDirect RDMA (NCCL's "
                    "socket transport, PCIe ACS redirection, IOMMU translation, a NIC on the other socket)")
        return "the network: fewer channels or QPs than the NICs need, adaptive routing, or congestion"
    if cluster.interconnect is Interconnect.PCIE and measured < 0.5 * expected:
        return ("GPU peer-to-peer off: data staged through host memory (consumer GPUs, IOMMU/ACS, "
                "NCCL_P2P_DISABLE)")
    if cluster.interconnect is not Interconnect.PCIE and measured <= PCIE_GEN4_GB_S * 1.1:
        return "traffic on PCIe, not NVLink (P2P disabled, NVLink down, or GPUs not on one NVLink domain)"
    if algorithm in (NcclAlgorithm.NVLS, NcclAlgorithm.NVLS_TREE) and measured < expected * 0.85:
        return "no NVLS (NVLink SHARP off: NCCL_NVLS_ENABLE=0, the fabric manager, or an older NCCL)"
    return "fewer channels than the links hold, or clocks/power limits"


def check(cluster: Cluster, nominal: NcclParams, observations: tuple[Observation, ...]) -> tuple[Finding, ...]:
    """One finding per table (each run of a file of several; named by its line there) whose largest points fall
    below ``SHORT_RATIO`` of the nominal model's bus bandwidth."""
    groups: dict[tuple[str, int, str, int], list[Observation]] = {}
    for o in observations:
        groups.setdefault((o.source, o.table, o.call.collective.value, o.call.ranks), []).append(o)
    tables = Counter(source for source, *_ in groups)
    findings = []
    for (source, table, collective, ranks), group in sorted(groups.items()):
        large = [o for o in group if o.call.size_bytes >= LARGE_BYTES] or [max(group, key=lambda o: o.call.size_bytes)]
        best = max(large, key=lambda o: _busbw(o, o.measured_us))
        expected_p = predict(cluster, nominal, best.call)
        measured = _busbw(best, best.measured_us)
        expected = _busbw(best, expected_p.time_us)
        if expected > 0 and measured < SHORT_RATIO * expected:
            algorithm = expected_p.choice.algorithm if expected_p.choice else None
            confidence = Confidence.HIGH if measured < 0.45 * expected else Confidence.MEDIUM
            findings.append(Finding(source, collective, ranks, best.call.nodes, measured, expected,
                                    _cause(cluster, nominal, best, measured, expected, algorithm), confidence,
                                    table if tables[source] > 1 else 0))
    return tuple(findings)
