"""Workload generators: presets against published sizes, layout, 1F1B, DDP buckets, and every generator's
communication totals against closed forms; every generated trace passes analysis.check."""

from __future__ import annotations

import itertools

import pytest

from genie.core.errors import InputError
from genie.core.trace import CommType, NodeKind, Trace
from genie.workloads.analysis import check, critical_path
from genie.workloads.generators import (DataParallelMode, GroupKind, Parallelism, Phase, RankOrder, TrainingConfig,
                                        assign_buckets, coords_of, data_parallel, dlrm, expert_parallel, fsdp, generate,
                                        make_layout, model_graph, one_f_one_b, partition_units, pipeline_parallel,
                                        rank_of, shard_tables, tensor_parallel)
from genie.workloads.presets import (A100, H100, MODELS, Dtype, model_preset, resnet_fwd_macs_per_image)

GPT = model_preset("gpt3-125m").with_overrides(num_layers=2, seq_len=256)  # h 768, V 50257
BF16 = Dtype.BF16.size_bytes


# ---- helpers -----------------------------------------------------------------------------------------------
def colls(trace: Trace, rank: int, comm: CommType, *, group_prefix: str = "", name_has: str = "") -> list:
    return [n for n in trace.ranks[rank].nodes if n.kind is NodeKind.COLLECTIVE and n.comm_type is comm
            and (n.process_group or "").startswith(group_prefix) and name_has in n.name]


def p2p(trace: Trace, rank: int, kind: NodeKind) -> list:
    return [n for n in trace.ranks[rank].nodes if n.kind is kind]


def ok(trace: Trace) -> Trace:
    check(trace)
    critical_path(trace)  # raises CycleError if the ranks would wait on each other in a cycle
    return trace


def gpt_params(L: int, h: int, V: int, S: int, tp: int = 1) -> int:
    """GPT-3 parameters one tensor-parallel rank holds (tied embeddings, learned positions, biases)."""
    per_layer = 12 * h * h // tp + 7 * h // tp + 6 * h  # sharded matmuls + sharded biases, replicated bias/norms
    return L * per_layer + -(-V // tp) * h + S * h + 2 * h


# ---- presets -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, published", [
    ("gpt3-125m", 125e6), ("gpt3-1.3b", 1.3e9), ("gpt3-13b", 13e9), ("gpt3-175b", 175e9),
    ("llama3-8b", 8.03e9), ("llama3-70b", 70.6e9), ("mixtral-8x7b", 46.7e9), ("resnet50", 25.557e6)])
def test_parameter_counts_match_published_sizes(name: str, published: float) -> None:
    assert MODELS[name].param_count == pytest.approx(published, rel=0.03)


def test_closed_form_parameter_counts() -> None:
    for name in ("gpt3-125m", "gpt3-1.3b", "gpt3-175b"):
        m = MODELS[name]
        h, L = m.hidden_size, m.num_layers
        assert m.param_count == L * (12 * h * h + 13 * h) + (m.vocab_size + m.seq_len) * h + 2 * h
        assert model_graph(m, Dtype.BF16).param_count == m.param_count
    m = MODELS["llama3-8b"]
    h, f, kv = 4096, 14336, 1024
    assert m.param_count == 32 * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h) + 2 * 128256 * h + h == 8_030_261_248
    assert MODELS["resnet50"].param_count == 25_557_032
    assert resnet_fwd_macs_per_image(MODELS["resnet50"]) == pytest.approx(4.1e9, rel=0.01)
    assert model_graph(MODELS["resnet50"], Dtype.BF16).param_count == 25_557_032
    d = MODELS["dlrm"]
    assert d.interaction_features == 128 + 27 * 26 // 2 == 479 and d.num_tables == 26


def test_device_durations() -> None:
    assert A100.compute_ns(312e12 * 0.4, Dtype.BF16) == 10**9  # 1 s of work at 40% of 312 TFLOP/s
    assert H100.with_efficiency(1.0).compute_ns(989e12, Dtype.BF16) == 10**9
    assert A100.with_efficiency(1.0).compute_ns(0, Dtype.BF16, bytes_moved=2039e9) == 10**9  # memory bound
    with pytest.raises(InputError, match="fp8"):
        A100.compute_ns(1, Dtype.FP8)
    with pytest.raises(InputError):
        A100.with_efficiency(0)


# ---- layout, schedule, buckets -----------------------------------------------------------------------------------
def test_rank_layout_and_group_names() -> None:
    par = Parallelism(dp=2, tp=2, pp=2)
    assert [rank_of(coords_of(r, par), par) for r in range(8)] == list(range(8))
    assert coords_of(5, par) == coords_of(5, par) and (coords_of(5, par).tp, coords_of(5, par).pp,
                                                       coords_of(5, par).dp) == (1, 0, 1)  # 5 = 1 + 2*(0 + 2*1)
    groups = {g.name: g.ranks for g in make_layout(par).groups}
    assert groups["tp0"] == (0, 1) and groups["tp3"] == (6, 7)
    assert groups["pp0"] == (0, 2) and groups["pp3"] == (5, 7)
    assert groups["dp0"] == (0, 4) and groups["dp3"] == (3, 7)
    megatron = {g.name: g.ranks for g in make_layout(Parallelism(dp=2, tp=2, pp=2, order=RankOrder.TP_DP_PP)).groups}
    assert megatron["dp0"] == (0, 2) and megatron["pp0"] == (0, 4)
    moe = {g.name: g.ranks for g in make_layout(Parallelism(dp=4, ep=2)).groups}
    assert moe["ep0"] == (0, 1) and moe["ep1"] == (2, 3) and moe["edp0"] == (0, 2) and moe["edp1"] == (1, 3)
    assert not make_layout(Parallelism(dp=1)).groups  # singleton groups carry nothing


def test_one_f_one_b_schedule() -> None:
    assert [(o.phase.value, o.micro_batch) for o in one_f_one_b(4, 0, 4)] == [
        ("fwd", 0), ("fwd", 1), ("fwd", 2), ("fwd", 3), ("bwd", 0), ("bwd", 1), ("bwd", 2), ("bwd", 3)]
    assert [(o.phase.value, o.micro_batch) for o in one_f_one_b(4, 3, 3)] == [
        ("fwd", 0), ("bwd", 0), ("fwd", 1), ("bwd", 1), ("fwd", 2), ("bwd", 2)]
    for stages, stage, m in itertools.product((1, 2, 4), range(4), (1, 3, 8)):
        if stage >= stages:
            continue
        ops = one_f_one_b(stages, stage, m)
        assert len(ops) == 2 * m
        warmup = next(i for i, o in enumerate(ops) if o.phase is Phase.BACKWARD)
        assert warmup == min(stages - stage, m)  # warm-up forwards, then the first 1F1B pair's forward
        for mb in range(m):
            assert ops.index(one_f_one_b(1, 0, m)[2 * mb]) < ops.index(one_f_one_b(1, 0, m)[2 * mb + 1])
    assert [len(r) for r in partition_units(5, 2)] == [3, 2]
    with pytest.raises(InputError, match="pipeline stages"):
        partition_units(2, 3)


def test_ddp_buckets_follow_pytorch() -> None:
    graph = model_graph(MODELS["resnet50"], Dtype.FP32)
    buckets = assign_buckets(graph.blocks, tp=1, ep=1, dtype_bytes=4)
    assert sum(b.size_bytes for b in buckets) == 25_557_032 * 4
    assert buckets[0].size_bytes >= 2**20 and buckets[0].tensors[0] == "fc.bias"  # reverse order, 1 MiB first
    largest = max(t.elements for b in graph.blocks for t in b.params) * 4
    for b in buckets[1:-1]:
        assert 25 * 2**20 <= b.size_bytes < 25 * 2**20 + largest
    assert buckets[-1].ready_after == "conv1"


# ---- closed forms per generator ------------------------------------------------------------------------------
@pytest.mark.parametrize("model, dp, m", [(GPT, 4, 1), (GPT, 2, 3), (MODELS["resnet50"], 8, 2),
                                          (model_preset("llama3-8b").with_overrides(num_layers=1, seq_len=128), 2, 1)])
def test_ddp_allreduce_bytes_equal_parameter_bytes(model, dp: int, m: int) -> None:
    t = ok(data_parallel(model, A100, dp=dp, config=TrainingConfig(micro_batch_size=2, micro_batches=m)))
    assert t.num_ranks == dp and [g.name for g in t.groups] == ["dp0"]
    for r in range(dp):
        ars = colls(t, r, CommType.ALL_REDUCE)
        assert sum(n.size_bytes for n in ars) == model.param_count * BF16
        assert all(".mb" not in n.name and n.process_group == "dp0" for n in ars)
    # bucket all-reduces are issued during the last micro-batch's backward and overlap what is left of it
    nodes = t.ranks[0].nodes
    first_ar = next(n for n in nodes if n.kind is NodeKind.COLLECTIVE)
    later_bwd = [n for n in nodes if n.id > first_ar.id and n.name.startswith(f"bwd.mb{m - 1}.")]
    assert later_bwd and all(first_ar.id not in n.deps for n in later_bwd)
    assert all(n.name.startswith(f"bwd.mb{m - 1}.") for n in nodes if n.id in first_ar.deps)


@pytest.mark.parametrize("tp, dp, m", [(2, 1, 1), (4, 2, 3), (2, 2, 2)])
def test_tensor_parallel_four_allreduces_per_layer_and_microbatch(tp: int, dp: int, m: int) -> None:
    b, s, h, L = 2, GPT.seq_len, GPT.hidden_size, GPT.num_layers
    t = ok(tensor_parallel(GPT, A100, tp=tp, dp=dp, config=TrainingConfig(micro_batch_size=b, micro_batches=m)))
    for r in range(t.num_ranks):
        tp_ars = colls(t, r, CommType.ALL_REDUCE, group_prefix="tp")
        layer_ars = [n for n in tp_ars if ".layer" in n.name]
        assert len(layer_ars) == 4 * L * m and {n.size_bytes for n in layer_ars} == {b * s * h * BF16}
        # + per micro-batch: embedding output, 3 cross-entropy reductions, the output projection's input gradient
        assert len(tp_ars) == m * (4 * L + 5)
        dp_bytes = sum(n.size_bytes for n in colls(t, r, CommType.ALL_REDUCE, group_prefix="dp"))
        assert dp_bytes == (gpt_params(L, h, GPT.vocab_size, s, tp) * BF16 if dp > 1 else 0)


def test_sequence_parallel_replaces_allreduce_by_allgather_and_reduce_scatter() -> None:
    b, s, h, L, m, tp = 2, GPT.seq_len, GPT.hidden_size, GPT.num_layers, 2, 2
    t = ok(tensor_parallel(GPT, A100, tp=tp, config=TrainingConfig(micro_batch_size=b, micro_batches=m,
                                                                   sequence_parallel=True)))
    ag = [n for n in colls(t, 0, CommType.ALL_GATHER) if ".layer" in n.name]
    rs = [n for n in colls(t, 0, CommType.REDUCE_SCATTER) if ".layer" in n.name]
    assert len(ag) == len(rs) == 4 * L * m
    assert {n.size_bytes for n in ag} == {b * s * h * BF16 // tp} and {n.size_bytes for n in rs} == {b * s * h * BF16}
    assert not [n for n in colls(t, 0, CommType.ALL_REDUCE) if ".layer" in n.name]


@pytest.mark.parametrize("pp, dp, m", [(2, 1, 1), (2, 2, 4), (4, 1, 3), (4, 2, 8)])
def test_pipeline_sends_two_per_microbatch_per_boundary(pp: int, dp: int, m: int) -> None:
    model = GPT.with_overrides(num_layers=4)
    b, s, h = 2, model.seq_len, model.hidden_size
    t = ok(pipeline_parallel(model, A100, pp=pp, dp=dp, config=TrainingConfig(micro_batch_size=b, micro_batches=m)))
    layout = make_layout(Parallelism(dp=dp, pp=pp))
    for r in range(t.num_ranks):
        c = layout.coords(r)
        sends = p2p(t, r, NodeKind.SEND)
        to_next = [n for n in sends if n.peer == layout.rank(c.__class__(c.dp, c.pp + 1, c.tp))] \
            if c.pp < pp - 1 else []
        assert len(to_next) == (m if c.pp < pp - 1 else 0)  # activations forward
        assert len(sends) == m * ((c.pp < pp - 1) + (c.pp > 0))  # + input gradients backward
        assert {n.size_bytes for n in sends} <= {b * s * h * BF16}
        tags = [(n.peer, n.tag) for n in sends]
        assert len(tags) == len(set(tags))
    total_sends = sum(len(p2p(t, r, NodeKind.SEND)) for r in range(t.num_ranks))
    assert total_sends == 2 * m * (pp - 1) * dp
    if pp > 1:  # tied embeddings: first and last stage reduce the word-embedding gradient
        assert len(colls(t, 0, CommType.ALL_REDUCE, group_prefix="emb")) == 1


@pytest.mark.parametrize("dp, tp, m", [(4, 1, 1), (2, 2, 2), (4, 2, 1)])
def test_fsdp_allgathers_twice_and_reduce_scatters_once(dp: int, tp: int, m: int) -> None:
    t = ok(fsdp(GPT, A100, dp=dp, tp=tp, config=TrainingConfig(micro_batch_size=2, micro_batches=m)))
    params = gpt_params(GPT.num_layers, GPT.hidden_size, GPT.vocab_size, GPT.seq_len, tp)  # divisible by dp here
    units = GPT.num_layers + 2  # embedding, layers, head (final norm)
    for group in (g for g in t.groups if g.name.startswith("dp")):
        ag = [n for r in group.ranks for n in colls(t, r, CommType.ALL_GATHER, group_prefix="dp")]
        assert sum(n.size_bytes for n in ag) == 2 * m * params * BF16  # per-rank inputs, summed over the group
        for r in group.ranks:
            assert len(colls(t, r, CommType.ALL_GATHER, group_prefix="dp")) == 2 * units * m
            rs = colls(t, r, CommType.REDUCE_SCATTER, group_prefix="dp")
            assert len(rs) == units and sum(n.size_bytes for n in rs) == params * BF16
            assert not colls(t, r, CommType.ALL_REDUCE, group_prefix="dp")


def test_moe_all_to_all_dispatch_and_combine() -> None:
    moe = GPT.with_overrides(num_layers=4, num_experts=8, top_k=2, moe_every=2)
    b, s, h, m, ep, dp = 2, moe.seq_len, moe.hidden_size, 2, 4, 8
    t = ok(expert_parallel(moe, H100, ep=ep, dp=dp, config=TrainingConfig(micro_batch_size=b, micro_batches=m)))
    expert_params = sum(t.elements for blk in model_graph(moe, Dtype.BF16).blocks for t in blk.params if t.expert)
    for r in range(dp):
        a2a = colls(t, r, CommType.ALL_TO_ALL, group_prefix="ep")
        assert len(a2a) == 4 * moe.num_moe_layers * m == 16
        assert {n.size_bytes for n in a2a} == {b * s * 2 * h * BF16}
        edp = sum(n.size_bytes for n in colls(t, r, CommType.ALL_REDUCE, group_prefix="edp"))
        dense = sum(n.size_bytes for n in colls(t, r, CommType.ALL_REDUCE, group_prefix="dp"))
        assert edp == expert_params // ep * BF16 and dense == (moe.param_count - expert_params) * BF16
    with pytest.raises(InputError, match="expert"):
        expert_parallel(GPT, A100, ep=2)


def test_moe_routing_skew_makes_uneven_all_to_alls_deterministic_with_the_seed() -> None:
    from genie.core.alltoallv import split_matrices
    from genie.workloads.generators.routing import routing_matrix

    moe = GPT.with_overrides(num_layers=2, num_experts=8, top_k=2, moe_every=1)
    b, s, h, ep = 2, moe.seq_len, moe.hidden_size, 4

    def gen(skew: float, seed: int = 0) -> Trace:
        cfg = TrainingConfig(micro_batch_size=b, routing_skew=skew, routing_seed=seed)
        return ok(expert_parallel(moe, H100, ep=ep, dp=ep, config=cfg))

    even, skewed = gen(0.0), gen(1.2)
    assert all(n.send_split_bytes is None for r in even.ranks for n in r.nodes)  # unchanged without skew
    token = h * BF16
    for r in range(ep):
        a2a = colls(skewed, r, CommType.ALL_TO_ALL, group_prefix="ep")
        assert len(a2a) == 4 * 2
        # a rank dispatches all of its tokens (b*s*top_k), only not evenly
        dispatch = [n for n in a2a if n.name.startswith("alltoall.ep.fwd") and n.name.endswith("dispatch")]
        assert all(sum(n.send_split_bytes) == n.size_bytes == b * s * 2 * token for n in dispatch)
    matrices = set(split_matrices(skewed).values())
    # per layer a matrix and its transpose (the backward reuses them); a dispatch's receivers get different loads,
    # a combine's senders send them back: one side is uneven
    assert len(matrices) == 2 * 2 and all(len({sum(c) for c in zip(*m)} | {sum(r) for r in m}) > 1
                                          for m in matrices)
    # the same seed gives the same trace, another seed other splits
    assert gen(1.2) == skewed and gen(1.2, seed=7) != skewed
    # forward combine returns exactly what dispatch brought: its matrix is the transpose
    r0 = {n.name: n for n in skewed.ranks[0].nodes}
    fwd = [k for k in r0 if k.startswith("alltoall.ep.fwd") and k.endswith("dispatch")][0]
    assert r0[fwd].send_split_bytes == r0[fwd.replace("dispatch", "combine")].recv_split_bytes
    # the experts of the most loaded rank compute longest
    loads = [sum(n.recv_split_bytes) for n in (next(x for x in skewed.ranks[r].nodes if x.name == fwd)
                                                for r in range(ep))]
    experts = [next(x for x in skewed.ranks[r].nodes if x.name.endswith("experts")).duration_ns for r in range(ep)]
    assert experts.index(max(experts)) == loads.index(max(loads))
    # the matrix itself: rows keep every choice, a higher skew concentrates them
    flat = routing_matrix(tokens=1000, top_k=2, experts=8, ep=4, skew=0.0, seed=0, key=(0,))
    steep = routing_matrix(tokens=1000, top_k=2, experts=8, ep=4, skew=3.0, seed=0, key=(0,))
    assert all(sum(row) == 2000 for row in (*flat, *steep)) and set(flat[0]) == {500}
    assert max(map(sum, zip(*steep))) > 2 * max(map(sum, zip(*flat)))
    with pytest.raises(InputError, match="between 0"):
        TrainingConfig(routing_skew=-1)


def test_3d_dp_tp_pp_ep_combination() -> None:
    moe = GPT.with_overrides(num_layers=4, num_experts=4, top_k=2, moe_every=2)
    par = Parallelism(dp=2, tp=2, pp=2, ep=2)
    m, b = 4, 1
    t = ok(generate(moe, A100, par, TrainingConfig(micro_batch_size=b, micro_batches=m)))
    assert t.num_ranks == 8 and t.info_value("parallelism") == "dp2-tp2-pp2-ep2"
    names = {g.name for g in t.groups}
    assert {"tp0", "tp3", "dp0", "dp3", "pp0", "pp3", "ep0", "ep3", "emb0"} <= names
    layout = make_layout(par)
    for r in range(8):
        c = layout.coords(r)
        assert len([n for n in colls(t, r, CommType.ALL_REDUCE, group_prefix="tp") if ".layer" in n.name]) == \
            4 * 2 * m  # 2 layers per stage
        assert len(colls(t, r, CommType.ALL_TO_ALL, group_prefix="ep")) == 4 * 1 * m  # 1 MoE layer per stage
        assert len(p2p(t, r, NodeKind.SEND)) == m  # one boundary per rank
        for n in t.ranks[r].nodes:
            if n.process_group:
                assert r in t.group(n.process_group).ranks
        assert layout.group_of(r, GroupKind.TP) == f"tp{r // 2}"
        assert c.pp == (r // 2) % 2


def test_dlrm_embedding_all_to_all() -> None:
    d, ranks, b, m = MODELS["dlrm"], 8, 256, 2
    t = ok(dlrm(d, A100, ranks=ranks, config=TrainingConfig(micro_batch_size=b, micro_batches=m)))
    shards = shard_tables(d.table_rows, ranks)
    assert sorted(i for s in shards for i in s) == list(range(26))
    per_direction = sum(n.size_bytes for r in range(ranks) for n in colls(t, r, CommType.ALL_TO_ALL)
                        if ".fwd.mb0." in n.name)
    assert per_direction == b * ranks * d.num_tables * d.embedding_dim * BF16  # global batch x tables x dim
    for r in range(ranks):
        assert len(colls(t, r, CommType.ALL_TO_ALL)) == 2 * m
        assert sum(n.size_bytes for n in colls(t, r, CommType.ALL_REDUCE)) == d.dense_params * BF16
    with pytest.raises(InputError, match="tp must be 1"):
        generate(d, A100, Parallelism(dp=2, tp=2))


def test_every_generator_output_passes_check() -> None:
    moe = GPT.with_overrides(num_layers=3, seq_len=64, num_experts=4, top_k=1, moe_every=1)
    llama = model_preset("llama3-8b").with_overrides(num_layers=3, seq_len=64)
    cases = [(GPT.with_overrides(num_layers=3), Parallelism(dp=2, tp=2, pp=3), dict(micro_batches=2)),
             (GPT, Parallelism(dp=2, tp=2, pp=2, order=RankOrder.TP_DP_PP), dict(micro_batches=5, iterations=2)),
             (llama, Parallelism(dp=2, tp=2, pp=2), dict(micro_batches=3, sequence_parallel=True)),
             (llama, Parallelism(dp=4, tp=2), dict(dp_mode=DataParallelMode.FSDP, iterations=2)),
             (moe, Parallelism(dp=4, tp=2, pp=3, ep=4), dict(micro_batches=1)),
             (moe, Parallelism(dp=2, pp=2, ep=2), dict(micro_batches=4, sequence_parallel=True)),
             (MODELS["resnet50"], Parallelism(dp=2, pp=4), dict(micro_batches=4)),
             (MODELS["dlrm"], Parallelism(dp=3), dict(micro_batches=2, iterations=2))]
    for model, par, kw in cases:
        t = ok(generate(model, H100, par, TrainingConfig(micro_batch_size=2, **kw)))
        assert t.num_ranks == par.world_size
        assert all(n.duration_ns > 0 for r in t.ranks for n in r.nodes if n.kind is NodeKind.COMPUTE)


def test_bad_combinations_name_the_field() -> None:
    cases = [(GPT, Parallelism(tp=5), {}, "tp"), (MODELS["resnet50"], Parallelism(tp=2), {}, "tp"),
             (GPT, Parallelism(pp=3), {}, "pp"), (GPT, Parallelism(dp=2, pp=2), {"dp_mode": DataParallelMode.FSDP},
                                                  "dp_mode")]
    for model, par, kw, path in cases:
        with pytest.raises(InputError) as err:
            generate(model, A100, par, TrainingConfig(**kw))
        assert err.value.path == path
    with pytest.raises(InputError) as err:
        Parallelism(dp=3, ep=2)
    assert err.value.path == "ep"
    with pytest.raises(InputError) as err:
        TrainingConfig(micro_batches=0)
    assert err.value.path == "micro_batches"
