"""nccl-tests tables as the NCCL model's observations (pure): one per row, its out-of-place time, on the nodes
the table's `# Using devices` lines name (or ``ranks / gpus_per_node`` where a post has no such lines), checked
against the cluster the topology describes."""

from __future__ import annotations

from collections import Counter
from enum import Enum

from genie.core.errors import InputError
from genie.measure.nccl_output import NcclTable

from astra_adapter.nccl.fit import Observation
from astra_adapter.nccl.hardware import Cluster
from astra_adapter.nccl.model import MODELLED, Call


class RowTime(Enum):
    """Which of a row's times an observation takes."""

    OUT_OF_PLACE = "out_of_place"  # nccl-tests' first time column: what predictions are checked against
    FASTER_PASS = "faster_pass"  # the faster of the out-of-place and in-place passes: what a fit takes, as a
    # one-off stall of one pass (a first size's 68 us against 25 us) is not the cluster's speed


def _row_time(row, time: RowTime) -> float:
    if time is RowTime.FASTER_PASS and row.in_place_time_us is not None and row.in_place_time_us > 0:
        return min(row.time_us, row.in_place_time_us)
    return row.time_us


def tables_nccl_version(tables) -> str:
    """The NCCL release the tables name (the most named; "" if none names one)."""
    named = Counter(t.nccl_version for t in tables if t.nccl_version)
    return named.most_common(1)[0][0] if named else ""


def table_nodes(table: NcclTable, gpus_per_node: int | None) -> int:
    """The nodes a table ran on: its devices' hosts, else its ranks over ``gpus_per_node``."""
    hosts = table.nodes()
    if hosts and table.ranks_per_node() is not None:
        return len(hosts)
    if hosts:
        raise InputError(f"the ranks are spread unevenly over {len(hosts)} hosts: the NCCL model needs the same "
                         "number of ranks on every node", source=table.source, path=f"line {table.first_line}")
    if gpus_per_node is None:
        raise InputError("the output has no `# Using devices` lines to tell its nodes: give the GPUs per node",
                         source=table.source, path="gpus_per_node")
    if table.ranks % gpus_per_node:
        raise InputError(f"{table.ranks} ranks are not whole nodes of {gpus_per_node} GPUs", source=table.source,
                         path="gpus_per_node")
    return max(1, table.ranks // gpus_per_node)


def table_observations(table: NcclTable, cluster: Cluster, *, gpus_per_node: int | None = None,
                       max_nodes: int | None = None, time: RowTime = RowTime.OUT_OF_PLACE) -> tuple[Observation, ...]:
    """The rows of ``table`` (0-byte rows left out: they time nothing) as observations on ``cluster``'s nodes.
    ``max_nodes``: the most nodes a table may use (the topology's, for the tables a calibration is fitted
    on; None for the tables it predicts, at any scale of the same nodes); ``time``: which of a row's times."""
    if table.collective not in MODELLED:
        raise InputError(f"genie's NCCL model does not time {table.collective.value} (it times "
                         f"{', '.join(c.value for c in MODELLED)})", source=table.source,
                         path=f"line {table.first_line}")
    nodes = table_nodes(table, gpus_per_node)
    ppn = table.ranks // nodes
    if ppn > cluster.gpus_per_node:
        raise InputError(f"{ppn} ranks per node, but the topology's nodes have {cluster.gpus_per_node} GPUs",
                         source=table.source, path=f"line {table.first_line}")
    if max_nodes is not None and nodes > max_nodes:
        raise InputError(f"the output ran on {nodes} nodes ({table.ranks} ranks), but the topology has "
                         f"{max_nodes} node(s) ({max_nodes * cluster.gpus_per_node} GPUs)", source=table.source,
                         path=f"line {table.first_line}")
    return tuple(Observation(Call(table.collective, table.ranks, nodes, row.size_bytes, table.gpus_per_thread),
                             _row_time(row, time), table.source, row.line, table.first_line)
                 for row in table.rows if row.size_bytes > 0 and row.time_us > 0)
