"""Process-group inference across ranks (genie.workloads.group_inference), without torch."""

from __future__ import annotations

from genie.workloads.group_inference import GroupOp, infer_groups

AR, A2A, AG = "all_reduce", "all_to_all", "all_gather"
W = (0, 1, 2, 3)


def coll(node_id: int, kind: str, size: int, *cands: str, t: tuple[float, float] | None = None,
         blocking: bool = True) -> GroupOp:
    start, end = t if t else (None, None)
    return GroupOp(node_id, f"c10d::{kind}", kind, tuple(cands), size_bytes=size, blocking=blocking,
                   start_us=start, end_us=end)


def p2p(node_id: int, send: bool, peer: int) -> GroupOp:
    return GroupOp(node_id, "c10d::send" if send else "c10d::recv_", "send" if send else "recv", ("w",),
                   peer=peer, is_send=send)


def test_types_and_sizes_tell_shard_from_replicate_groups() -> None:
    members = {"w": W, "s0": (0, 1), "s1": (2, 3), "r0": (0, 2), "r1": (1, 3)}
    groups = {0: ("w", "s0", "r0"), 1: ("w", "s0", "r1"), 2: ("w", "s1", "r0"), 3: ("w", "s1", "r1")}
    # HSDP-like: reduce-scatter on the shard pair, all-reduce on the replicate pair, a world all-gather;
    # the shard pairs' buffers differ (100 vs 60 B) and so do the replicate pairs' (40 vs 24 B)
    shard, replicate = {0: 100, 1: 100, 2: 60, 3: 60}, {0: 40, 2: 40, 1: 24, 3: 24}
    ops = [[coll(10 + r, "reduce_scatter", shard[r], *groups[r]), coll(20 + r, AR, replicate[r], *groups[r]),
            coll(30, AG, 8, "w")] for r in range(4)]  # all_gather's output list: a group of 4
    inf = infer_groups(ops, members)
    assert inf.ambiguity is None and not inf.deadlock
    assert [inf.groups[(r, 10 + r)] for r in range(4)] == ["s0", "s0", "s1", "s1"]
    assert [inf.groups[(r, 20 + r)] for r in range(4)] == ["r0", "r1", "r0", "r1"]
    assert {inf.groups[(r, 30)] for r in range(4)} == {"w"}


def test_equal_sizes_on_both_kinds_of_group_survive_twice() -> None:
    # the same job with equal sizes everywhere: the all-reduce could be on the shard pairs too; refused
    members = {"w": W, "s0": (0, 1), "s1": (2, 3), "r0": (0, 2), "r1": (1, 3)}
    groups = {0: ("w", "s0", "r0"), 1: ("w", "s0", "r1"), 2: ("w", "s1", "r0"), 3: ("w", "s1", "r1")}
    ops = [[coll(10, "reduce_scatter", 100, *groups[r]), coll(20, AR, 40, *groups[r])] for r in range(4)]
    a = infer_groups(ops, members).ambiguity
    assert a is not None and (a.rank, a.node_id) in {(0, 10), (0, 20)} and a.surviving >= 2


def test_deadlock_freedom_puts_the_stage_all_to_all_on_its_ep_group() -> None:
    # 2-stage pipeline: stage 0 = ranks 0,1 (EP group e0), stage 1 = ranks 2,3 (e1). Stage 0 runs its MoE
    # all-to-all then sends to stage 1; stage 1 receives, then its own all-to-all. Every all-to-all is 64 B so
    # sizes alone allow the world; but a world all-to-all on stage 0 before its send would deadlock stage 1.
    members = {"w": W, "e0": (0, 1), "e1": (2, 3)}
    ops = [[coll(1, A2A, 64, "w", "e0"), p2p(2, True, 2)],
           [coll(1, A2A, 64, "w", "e0"), p2p(2, True, 3)],
           [p2p(1, False, 0), coll(2, A2A, 64, "w", "e1")],
           [p2p(1, False, 1), coll(2, A2A, 64, "w", "e1")]]
    inf = infer_groups(ops, members)
    assert inf.ambiguity is None and not inf.deadlock
    assert [inf.groups[(r, 1 if r < 2 else 2)] for r in range(4)] == ["e0", "e0", "e1", "e1"]


def test_symmetric_job_without_times_is_refused_naming_op_and_candidates() -> None:
    members = {"w": W, "t0": (0, 1), "t1": (2, 3)}
    ops = [[coll(5, AR, 32, "w", "t0" if r < 2 else "t1")] * 2 for r in range(4)]
    inf = infer_groups(ops, members)
    assert inf.ambiguity is not None and inf.groups == {}
    a = inf.ambiguity
    assert (a.rank, a.node_id, a.name) == (0, 5, "c10d::all_reduce")
    assert set(a.candidates) == {"w", "t0"} and a.surviving >= 2


def test_a_collective_cannot_end_before_a_member_started_it() -> None:
    # world would need rank 0's op (ended at 100) to match rank 2's, which started at 800: impossible
    members = {"w": W, "t0": (0, 1), "t1": (2, 3)}
    times = {0: (10, 100), 1: (20, 100), 2: (800, 850), 3: (805, 850)}
    ops = [[coll(5, AR, 32, "w", "t0" if r < 2 else "t1", t=times[r])] for r in range(4)]
    inf = infer_groups(ops, members)
    assert [inf.groups[(r, 5)] for r in range(4)] == ["t0", "t0", "t1", "t1"]


def test_known_groups_pass_through_and_counts_must_match() -> None:
    members = {"w": W, "g": (0, 1)}
    ops = [[coll(1, AG, 8, "g")], [coll(1, AG, 8, "g")], [], []]
    assert infer_groups(ops, members).groups == {(0, 1): "g", (1, 1): "g"}
    ops = [[coll(1, AG, 8, "g")], [], [], []]  # rank 1 never issued it
    assert infer_groups(ops, members).deadlock


def test_mismatched_types_rule_a_group_out() -> None:
    members = {"w": W, "g": (0, 1)}
    ops = [[coll(1, AR, 8, "w", "g"), coll(2, AG, 8, "w", "g")],
           [coll(1, AR, 8, "w", "g"), coll(2, AG, 8, "w", "g")],
           [coll(1, AG, 8, "w")], [coll(1, AG, 8, "w")]]
    inf = infer_groups(ops, members)
    assert inf.groups == {(0, 1): "g", (1, 1): "g", (0, 2): "w", (1, 2): "w", (2, 1): "w", (3, 1): "w"}


def test_ops_whose_work_ran_on_one_worker_thread_share_a_group() -> None:
    # equal sizes everywhere (ambiguous by matching), but each rank's reduce-scatter ran on the thread of its
    # all-gather and its all-reduce on another: the all-gather decides both
    members = {"w": W, "s0": (0, 1), "s1": (2, 3), "r0": (0, 2), "r1": (1, 3)}
    shard = {r: ("s0" if r < 2 else "s1") for r in range(4)}
    rep = {r: ("r0" if r % 2 == 0 else "r1") for r in range(4)}

    def op(node_id: int, kind: str, r: int, worker: str, *cands: str) -> GroupOp:
        return GroupOp(node_id, kind, kind, cands, size_bytes=64, worker=worker)

    ops = [[op(1, AG, r, "x", shard[r]), op(2, "reduce_scatter", r, "x", shard[r], rep[r], "w"),
            op(3, AR, r, "y", shard[r], rep[r], "w"), op(4, AR, r, "y", rep[r])] for r in range(4)]
    inf = infer_groups(ops, members)
    assert inf.ambiguity is None
    assert [inf.groups[(r, 2)] for r in range(4)] == [shard[r] for r in range(4)]
    assert [inf.groups[(r, 3)] for r in range(4)] == [rep[r] for r in range(4)]
    without = [[GroupOp(o.node_id, o.name, o.kind, o.candidates, size_bytes=64) for o in seq] for seq in ops]
    assert infer_groups(without, members).ambiguity is not None


def test_workers_follow_the_order_their_groups_were_made_in_and_number_two_per_group() -> None:
    # EP pairs made after the world ("0" < "1"/"2"); every op the same size. Each rank's all-to-alls ran on
    # threads 20 and 21; its last all-reduce on thread 10: a lower id, so a group made no later than the
    # EP pair's -- the world or the EP pair, and the EP pair has its two threads already
    members = {"0": W, "1": (0, 1), "2": (2, 3)}
    creation = {"0": 0, "1": 1, "2": 2}
    ep = {r: "1" if r < 2 else "2" for r in range(4)}

    def op(node_id: int, kind: str, worker: int, *cands: str) -> GroupOp:
        return GroupOp(node_id, kind, kind, cands, size_bytes=64, worker=worker)

    ops = [[op(1, A2A, 20, ep[r]), op(2, A2A, 21, ep[r]), op(3, AR, 10, "0", ep[r])] for r in range(4)]
    inf = infer_groups(ops, members, creation, workers_per_group=2)
    assert [inf.groups[(r, 3)] for r in range(4)] == ["0"] * 4
    assert infer_groups(ops, members, creation, workers_per_group=None).ambiguity is not None
    later = [[op(1, A2A, 20, ep[r]), op(2, A2A, 21, ep[r]), op(3, AR, 30, "0", ep[r])] for r in range(4)]
    assert infer_groups(later, members, creation, workers_per_group=2).deadlock  # neither fits thread 30


def test_an_8_rank_tp_dp_job_of_2400_ops_resolves_from_sizes() -> None:
    # TP pairs and DP quads, 150 layers each an all-reduce on both; each group's buffers differ from every
    # other group's of the same kind, so the static pass alone settles every op
    ranks = tuple(range(8))
    tp = {r: f"t{r // 2}" for r in ranks}
    dp = {r: f"d{r % 2}" for r in ranks}
    members = {"w": ranks, **{tp[r]: tuple(x for x in ranks if x // 2 == r // 2) for r in ranks},
               **{dp[r]: tuple(x for x in ranks if x % 2 == r % 2) for r in ranks}}
    ops = [[coll(2 * i + k, AR, (100 + r // 2) if k == 0 else (1000 + r % 2), "w", tp[r], dp[r])
            for i in range(150) for k in (0, 1)] for r in ranks]
    inf = infer_groups(ops, members)
    assert inf.ambiguity is None and len(inf.groups) == 2400
    assert all(inf.groups[(r, 2 * i)] == tp[r] and inf.groups[(r, 2 * i + 1)] == dp[r] for r in ranks for i in (0, 149))


def test_receives_posted_before_their_sends_fall_back_to_matching() -> None:
    # both stages post a receive before their send (batch_isend_irecv, modelled here as blocking receives):
    # no schedule finishes under blocking semantics, so matching alone decides -- the all-reduce of 48 B
    # exists only on the pair
    members = {"w": W, "e0": (0, 1), "e1": (2, 3)}

    def recv(nid: int, peer: int) -> GroupOp:
        return GroupOp(nid, "c10d::recv_", "recv", ("w",), peer=peer)

    ops = [[recv(1, 2), p2p(2, True, 2), coll(3, AR, 48, "w", "e0")],
           [recv(1, 3), p2p(2, True, 3), coll(3, AR, 48, "w", "e0")],
           [recv(1, 0), p2p(2, True, 0), coll(3, AR, 64, "w", "e1")],
           [recv(1, 1), p2p(2, True, 1), coll(3, AR, 64, "w", "e1")]]
    inf = infer_groups(ops, members)
    assert not inf.deadlock and [inf.groups[(r, 3)] for r in range(4)] == ["e0", "e0", "e1", "e1"]
