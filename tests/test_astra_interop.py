"""ASTRA-sim interop corner cases (issue #35 item 8) against the real binaries' recorded output.

``tests/data/astra-interop/<case>/`` holds an input set, the command and what ``AstraSim_Analytical_Congestion_
Unaware`` / ``_Aware`` (astra-sim 518bd51 + analytical 599a047, Release build) printed and returned, recorded by
``python -m benchmarks.astra_interop --write``: process groups smaller than the world on 1-D networks with
direct / halvingDoubling (system.json's implementation, not ring), doubleBinaryTree in such a group (the binary
segfaults), 0-byte messages, an uneven all-to-all (the binary never finishes) and 2-4 queues per dimension on both
backends. genie must print the binary's finish line for every rank, or refuse where the binary gives no result.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from astra_adapter.export import SystemParams, export_astra
from astra_adapter.mapping import map_topology
from benchmarks.astra_interop import BACKENDS, CASES, DATA, build_case, run_genie
from genie.core.collective import Algorithm, Collective
from genie.core.errors import GenieError, InputError
from genie.core.topology import LinkShape
from genie.core.trace import CommType, ProcessGroup, collective_node, make_trace
from genie.topology import star

_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (-?\d+) cycles")
RECORDED = sorted(p for p in DATA.iterdir() if (p / "case.json").is_file()) if DATA.is_dir() else []
QUEUES = {c.name: c.queues for c in CASES}


def _finished(text: str) -> dict[int, tuple[int, int]]:
    return {int(r): (int(c), int(e)) for r, c, e in _FINISHED.findall(text)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", RECORDED, ids=lambda p: p.name)
def test_genie_says_what_the_binary_says(case: Path, backend: str) -> None:
    stdout = (case / f"stdout_{backend}.txt").read_text()
    returncode = json.loads((case / "case.json").read_text())["returncode"][backend]
    binary = _finished(stdout)
    if not binary:  # the binary gave no result: genie refuses, saying why
        with pytest.raises(GenieError) as info:
            run_genie(case, backend, QUEUES[case.name])
        if returncode == -11:
            assert "segmentation fault" in str(info.value)
        else:
            assert returncode == 0 and "has unreleased nodes" in stdout and "would hang" in str(info.value)
        return
    est = run_genie(case, backend, QUEUES[case.name])
    ours = {r.rank: (r.finish_cycles, r.exposed_comm_cycles) for r in est.result.ranks}
    assert ours == binary


def test_every_recipe_was_recorded_and_builds_the_recorded_inputs(tmp_path: Path) -> None:
    assert {p.name for p in RECORDED} == {c.name for c in CASES}
    for case in CASES[:3]:
        build_case(case, tmp_path / case.name)
        for f in ("system.json", "network.yml", "cmd.sh", "workload/w.0.et"):
            assert (tmp_path / case.name / f).read_bytes() == (DATA / case.name / f).read_bytes(), f


def test_the_binary_crashed_on_dbt_in_a_group_and_genie_refuses_it_at_export(tmp_path: Path) -> None:
    case = DATA / "ar_1MiB_g4_dbt_sw8"
    assert json.loads((case / "case.json").read_text())["returncode"] == {b: -11 for b in BACKENDS}

    def ranks(group: str | None) -> list:
        return [(collective_node(0, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 20,
                                 process_group=group and f"{group}{r // 2}"),) for r in range(4)]

    trace = make_trace(ranks("tp"), groups=(ProcessGroup("tp0", (0, 1)), ProcessGroup("tp1", (2, 3))))
    mapping = map_topology(star(4, shape=LinkShape(rate_bps=10**9, delay_us=10.0)))
    params = SystemParams(algorithms=((Collective.ALL_REDUCE, Algorithm.DOUBLE_BINARY_TREE),))
    with pytest.raises(InputError, match="double_binary_tree .* group 'tp0'") as info:
        export_astra(trace, mapping, tmp_path / "out", params=params)
    assert info.value.path == "all_reduce" and not (tmp_path / "out").exists()
    world = make_trace(ranks(None))  # on the world group the binary runs it
    export_astra(world, mapping, tmp_path / "world", params=params)
    assert (tmp_path / "world" / "system.json").is_file()


def test_group_implementation_follows_get_collective_plan() -> None:
    from astra_adapter.collective_plan import CommKind, group_phases
    from astra_adapter.config import CollectiveImpl, ImplKind, SystemConfig

    def one(kind: ImplKind, dims: int = 1) -> SystemConfig:
        impls = (CollectiveImpl(kind),) * dims
        return SystemConfig(all_reduce_impl=impls, all_gather_impl=impls, reduce_scatter_impl=impls,
                            all_to_all_impl=impls)

    assert group_phases(one(ImplKind.HALVING_DOUBLING), CommKind.ALL_REDUCE, 1024, 4)[0].impl.kind \
        is ImplKind.HALVING_DOUBLING  # one dimension listed: its implementation
    assert group_phases(one(ImplKind.HALVING_DOUBLING, 2), CommKind.ALL_REDUCE, 1024, 4)[0].impl.kind \
        is ImplKind.RING  # several: ASTRA-sim falls back to ring
    assert group_phases(one(ImplKind.DOUBLE_BINARY_TREE, 2), CommKind.ALL_REDUCE, 1024, 4)[0].impl.kind \
        is ImplKind.RING
    with pytest.raises(GenieError, match=r"all-reduce-implementation doubleBinaryTree .*\(segmentation fault\)"):
        group_phases(one(ImplKind.DOUBLE_BINARY_TREE), CommKind.ALL_REDUCE, 1024, 4)
    with pytest.raises(GenieError, match="power-of-two"):
        group_phases(one(ImplKind.HALVING_DOUBLING), CommKind.ALL_REDUCE, 1024, 3)
