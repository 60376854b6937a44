"""ASTRA-sim 1.0 text workloads: the shipped files and hand-made cases of every policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.core.trace import CommType, NodeKind
from genie.workloads.analysis import validate
from genie.workloads.astra_text import Policy, parse_astra_text, read_astra_text

EXTERNAL = Path(__file__).resolve().parents[2] / "shared" / "workloads-external" / "astra-text"
needs_external = pytest.mark.skipif(not EXTERNAL.is_dir(), reason=f"{EXTERNAL} not found")


def _colls(trace, rank=0):
    return [n for n in trace.ranks[rank].nodes if n.kind is NodeKind.COLLECTIVE]


@needs_external
def test_dlrm_file() -> None:
    text = (EXTERNAL / "DLRM_HybridParallel.txt").read_text()
    w = parse_astra_text(text)
    assert (w.policy, len(w.layers), w.dlrm_last_bottom_layer) == (Policy.HYBRID_DLRM, 8, 4)
    emb = w.layers[0]
    assert (emb.name, emb.fwd.compute_ns, emb.fwd.comm, emb.fwd.size_bytes) == ("Embedding", 300,
                                                                                (CommType.ALL_TO_ALL,), 98304)
    assert w.layers[1].wg.size_bytes == 13312 and w.layers[1].update_ns == 13
    trace = read_astra_text(text, npus=8, source="dlrm")
    assert validate(trace) == ()
    colls = _colls(trace)
    a2a = [n for n in colls if n.comm_type is CommType.ALL_TO_ALL]
    ar = [n for n in colls if n.comm_type is CommType.ALL_REDUCE]
    assert [n.size_bytes for n in a2a] == [98304, 98304]  # embedding forward and backward
    assert len(ar) == 7  # every MLP layer's weight gradient
    assert sum(n.size_bytes for n in ar) == sum(layer.wg.size_bytes for layer in w.layers[1:])
    top = next(n for n in trace.ranks[0].nodes if n.name == "MLP_Top_0.fwd")
    assert a2a[0].id in top.data_deps  # the embedding all-to-all joins before the top MLP


@needs_external
@pytest.mark.parametrize("npus, groups", [(8, 0), (16, 2)])
def test_micro_all_reduce_file(npus: int, groups: int) -> None:
    trace = read_astra_text((EXTERNAL / "microAllReduce.txt").read_text(), npus=npus)
    assert len(trace.groups) == groups and validate(trace) == ()
    (ar,) = _colls(trace)
    assert (ar.comm_type, ar.size_bytes) == (CommType.ALL_REDUCE, 1048576)
    assert (ar.process_group is None) == (groups == 0)
    assert sum(n.duration_ns for n in trace.ranks[0].nodes) == 15  # fwd 5 + wg 5 + update 5 cycles


LINE = "{name}\t-1 10  {fc} {fs}\t 20 {ic} {is_} 30 {wc} {ws}   4\n"


def _layer(name, fc="NONE", fs=0, ic="NONE", is_=0, wc="ALLREDUCE", ws=64):
    return LINE.format(name=name, fc=fc, fs=fs, ic=ic, is_=is_, wc=wc, ws=ws)


def test_data_parallel_runs_only_weight_gradient_comms() -> None:
    text = "DATA\n2\n" + _layer("l0", fc="ALLGATHER", fs=5) + _layer("l1", ws=128)
    trace = read_astra_text(text, npus=4)
    assert [(n.comm_type, n.size_bytes) for n in _colls(trace)] == [(CommType.ALL_REDUCE, 128),
                                                                     (CommType.ALL_REDUCE, 64)]
    names = [n.name for n in trace.ranks[0].nodes]
    assert "l0.ig" not in names and "l1.ig" in names  # layer 0 computes no input gradient


def test_model_parallel_runs_forward_and_input_gradient_comms() -> None:
    text = "MODEL\n1\n" + _layer("l0", fc="ALLGATHER", fs=5, ic="REDUCESCATTER", is_=6)
    assert [n.comm_type for n in _colls(read_astra_text(text, npus=2))] == [CommType.ALL_GATHER]


def test_hybrid_groups() -> None:
    text = "HYBRID_DATA_MODEL\n2\n" + _layer("a", fc="ALLGATHER", fs=8) + _layer("b", ic="ALLREDUCE", is_=8)
    with pytest.raises(InputError, match="dim0_npus"):
        read_astra_text(text, npus=8)
    trace = read_astra_text(text, npus=8, dim0_npus=2)
    assert validate(trace) == ()
    g = {grp.name: grp.ranks for grp in trace.groups}
    assert g["dim0_1"] == (2, 3) and g["dims1+_1"] == (1, 3, 5, 7)
    fwd = next(n for n in trace.ranks[3].nodes if n.name == "a.fwd_comm")
    wg = next(n for n in trace.ranks[3].nodes if n.name == "a.wg_comm")
    assert (fwd.process_group, wg.process_group) == ("dim0_1", "dims1+_1")
    swapped = read_astra_text(text.replace("HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA"), npus=8, dim0_npus=2)
    fwd = next(n for n in swapped.ranks[3].nodes if n.name == "a.fwd_comm")
    assert fwd.process_group == "dims1+_1"


def test_customized_and_checkpointed_transformer() -> None:
    text = ("HYBRID_CUSTOMIZED \t\t\n2\t\n" + _layer("a", fc="ALLGATHER", fs=8).rstrip() + " MODEL\n"
            + _layer("b", fc="ALLGATHER", fs=8).rstrip() + "\tDATA\n")
    trace = read_astra_text(text, npus=4)
    assert [n.name for n in _colls(trace)] == ["a.fwd_comm", "b.wg_comm"]
    body = "".join(_layer(f"l{i}", fc="ALLREDUCE", fs=16) for i in range(4))
    text = f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 checkpoints: 1 1 " \
           f"checkpoint_initiates: 1 3\n4\n{body}"
    trace = read_astra_text(text, npus=4)
    names = [n.name for n in trace.ranks[0].nodes]
    assert [n for n in names if n.startswith("recompute.") and n.endswith(".fwd")] == ["recompute.l2.fwd",
                                                                                      "recompute.l3.fwd"]
    assert validate(trace) == ()


def test_iterations_chain() -> None:
    text = "DATA\n1\n" + _layer("l0")
    one, two = read_astra_text(text, npus=2), read_astra_text(text, npus=2, iterations=2)
    assert len(two.ranks[0].nodes) == 2 * len(one.ranks[0].nodes)
    assert validate(two) == ()
    from genie.workloads.analysis import critical_path
    assert critical_path(two).length_ns == 2 * critical_path(one).length_ns


@pytest.mark.parametrize("text, message", [
    ("", "file ends"),
    ("PIPELINE\n1\n", "unknown parallelism 'PIPELINE'"),
    ("DATA\nx\n", "layer count: expected an integer"),
    ("DATA\n1\nl0 -1 10 ALLSUM 0 1 NONE 0 1 NONE 0 1\n", "unknown comm type 'ALLSUM'"),
    ("DATA\n2\nl0 -1 10 NONE 0 1 NONE 0 1 NONE 0 1\n", "file ends"),
    ("DATA\n1\nl0 -1 10 NONE 0 1 NONE 0 1 NONE 0 1 extra\n", "unexpected 'extra'"),
])
def test_bad_text_is_located(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as err:
        read_astra_text(text, npus=2, source="w.txt")
    assert str(err.value).startswith("w.txt: line ")
