"""Which process group each communication op of a job ran on, when the trace does not say (pure).

gloo records an op's group as an opaque object, so an op of a rank on several groups may be on any of them
(its *candidates*). The groups are recovered across ranks from four facts about a program that ran:

1. **Matching**: every member of a group issues that group's collectives in the same order, each k-th op of a
   group the same collective with consistent sizes (same type, size, root) on every member, and every member
   issues as many.
2. **Deadlock freedom**: the job finished. Simulated with blocking semantics: a synchronous collective
   completes once every member of its group has issued it; a synchronous recv waits for the matching send of
   its peer (same tag, FIFO); sends and asynchronous ops do not block their rank. So a world all-to-all of
   pipeline stage 0 cannot come before the send that stage 1's recv waits for.
3. **Workers**: each gloo process group runs its work on threads of its own, started when the group is made,
   so two ops of a rank whose ``gloo:*`` work ran on the same thread are on the same group, and an op whose
   worker has a lower thread id than another's is on a group made no later (given the creation order); a
   group runs on at most ``workers_per_group`` threads (gloo: 2 per device, PyTorch's default).
4. **Timestamps** (when the ops have them: Kineto's ``gloo:*`` work events): a collective cannot end on one
   member before it was issued on another (:data:`CLOCK_SLACK_US` of slack).

No assignment is guessed: a softer use of the times (taking the assignment whose collectives end closest
together) picked a wrong one in 2 of 9 traced 4-rank jobs on a loaded host, while rules 1-4 left exactly the
right one in all 9.

Candidates no assignment can use are dropped first (an op can be on a group only if every other member has
a matching op that could be on it). The search is then depth-first over the ambiguous ops, each taken when
the simulation reaches it (forced moves first), pruned by matching, by each member's remaining ops, by the
workers and by the timestamps. Only when more than one assignment survives is the job refused, naming the
first op they disagree on and its candidate groups.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

CLOCK_SLACK_US = 50.0  # the ranks share a host clock; Kineto rounds to 1 µs and its ranges bracket the work
MAX_SOLUTIONS = 64
MAX_STATES = 20_000


@dataclass(frozen=True)
class GroupOp:
    """One communication op of one rank, in issue order. ``kind`` is the collective's or p2p op's kind
    (compared for equality only); a p2p op (``peer`` set: the global peer) is never ambiguous here."""

    node_id: int
    name: str
    kind: object
    candidates: tuple[str, ...]  # group names; one: known
    size_bytes: int | None = None  # None: members may differ (an uneven all-to-all)
    root: int | None = None  # a rooted collective's root in its group
    blocking: bool = True
    peer: int | None = None  # send/recv: the global peer
    is_send: bool = False
    tag: int = 0
    start_us: float | None = None
    end_us: float | None = None
    worker: int | None = None  # the thread its work ran on (gloo's workers belong to one process group each)

    @property
    def is_p2p(self) -> bool:
        return self.peer is not None


@dataclass(frozen=True)
class Ambiguity:
    """Why no single assignment could be chosen."""

    rank: int
    node_id: int
    name: str
    candidates: tuple[str, ...]
    surviving: int  # assignments that survived (-1: more than the search could count)


@dataclass(frozen=True)
class Inference:
    groups: dict[tuple[int, int], str]  # (rank, node_id) -> group name, for every collective
    ambiguity: Ambiguity | None = None  # set: refused (groups then empty)
    deadlock: bool = False  # no assignment lets the job finish


@dataclass(frozen=True)
class _State:
    pos: tuple[int, ...]
    issued: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...]  # per rank: (group, op indices issued on it)
    sent: tuple  # ((src, dst, tag), count) pairs
    choice: tuple  # ((rank, op index), group) taken so far


def _issued(state: _State, rank: int, group: str) -> tuple[int, ...]:
    for g, idx in state.issued[rank]:
        if g == group:
            return idx
    return ()


def _with_issued(state: _State, rank: int, group: str, index: int) -> tuple:
    rows = dict(state.issued[rank])
    rows[group] = rows.get(group, ()) + (index,)
    out = list(state.issued)
    out[rank] = tuple(sorted(rows.items()))
    return tuple(out)


def _compatible(a: GroupOp, b: GroupOp) -> bool:
    if a.kind != b.kind or a.root != b.root:
        return False
    if a.size_bytes is not None and b.size_bytes is not None and a.size_bytes != b.size_bytes:
        return False
    if a.start_us is not None and b.start_us is not None and a.end_us is not None and b.end_us is not None:
        if a.end_us < b.start_us - CLOCK_SLACK_US or b.end_us < a.start_us - CLOCK_SLACK_US:
            return False
    return True


class _Search:
    def __init__(self, ops: tuple[tuple[GroupOp, ...], ...], members: dict[str, tuple[int, ...]],
                 creation: dict[str, int] | None, workers_per_group: int | None) -> None:
        self.ops = ops
        self.members = members
        self.creation = creation
        self.workers_per_group = workers_per_group
        # room[r][i][g]: ops at index >= i of rank r that could be on g
        self.room: list[list[dict[str, int]]] = []
        for seq in ops:
            rows = [{}]
            for op in reversed(seq):
                row = dict(rows[-1])
                if not op.is_p2p:
                    for g in op.candidates:
                        row[g] = row.get(g, 0) + 1
                rows.append(row)
            self.room.append(rows[::-1])
        self.states = 0
        # same_worker[r][i]: the rank's previous op whose work ran on the same thread (on the same group)
        self.same_worker: list[list[int | None]] = []
        for seq in ops:
            last: dict[object, int] = {}
            row: list[int | None] = []
            for i, op in enumerate(seq):
                row.append(last.get(op.worker) if op.worker is not None and not op.is_p2p else None)
                if op.worker is not None and not op.is_p2p:
                    last[op.worker] = i
            self.same_worker.append(row)

    def viable(self, state: _State, rank: int) -> list[str]:
        index = state.pos[rank]
        op = self.ops[rank][index]
        out = []
        prev = self.same_worker[rank][index]
        fixed = dict(state.choice).get((rank, prev)) if prev is not None else None
        for g in op.candidates:
            if (fixed is not None and g != fixed) or not self.in_creation_order(state, rank, index, g):
                continue
            k = len(_issued(state, rank, g))
            ok = True
            for m in self.members[g]:
                if m == rank:
                    continue
                theirs = _issued(state, m, g)
                if len(theirs) > k:
                    if not _compatible(op, self.ops[m][theirs[k]]):
                        ok = False
                        break
                elif len(theirs) + self.room[m][state.pos[m]].get(g, 0) <= k:
                    ok = False  # that member has no op left that could be this one
                    break
            if ok:
                out.append(g)
        return out

    def in_creation_order(self, state: _State, rank: int, index: int, group: str) -> bool:
        """Whether putting op `index` of `rank` on `group` keeps the rank's gloo workers in the order of their
        groups' creation (a process group starts its worker threads when it is made, so a later group's
        threads have higher ids)."""
        worker = self.ops[rank][index].worker
        if worker is None:
            return True
        seen: set[int] = set()
        for (r, i), g in state.choice:
            other = self.ops[r][i].worker
            if r != rank or other is None or other == worker:
                continue
            if g == group:
                seen.add(other)
            if self.creation is not None and ((other < worker and self.creation[g] > self.creation[group])
                                              or (other > worker and self.creation[g] < self.creation[group])):
                return False
        return self.workers_per_group is None or len(seen) < self.workers_per_group

    def blocked(self, state: _State, rank: int) -> bool:
        """Whether the rank waits on the op it issued last (its position is past it)."""
        if state.pos[rank] == 0:
            return False
        index = state.pos[rank] - 1
        op = self.ops[rank][index]
        if not op.blocking or (op.is_p2p and op.is_send):
            return False
        if op.is_p2p:
            mine = sum(1 for o in self.ops[rank][:index] if o.is_p2p and not o.is_send and o.peer == op.peer
                       and o.tag == op.tag)
            return dict(state.sent).get((op.peer, rank, op.tag), 0) <= mine
        group = dict(state.choice)[(rank, index)]
        k = _issued(state, rank, group).index(index)
        return any(len(_issued(state, m, group)) <= k for m in self.members[group])

    def issue(self, state: _State, rank: int, group: str | None) -> _State:
        index = state.pos[rank]
        op = self.ops[rank][index]
        pos = state.pos[:rank] + (index + 1,) + state.pos[rank + 1:]
        if op.is_p2p:
            sent = state.sent
            if op.is_send:
                counts = dict(sent)
                key = (rank, op.peer, op.tag)
                counts[key] = counts.get(key, 0) + 1
                sent = tuple(sorted(counts.items()))
            return _State(pos, state.issued, sent, state.choice)
        return _State(pos, _with_issued(state, rank, group, index), state.sent,
                      state.choice + (((rank, index), group),))

    def advance(self, state: _State) -> tuple[_State, tuple[int, list[str]] | None] | None:
        """Forced moves until the end or a choice: (state, None) at the end; (state, (rank, groups)) at a
        choice; None: a dead end (deadlock or an op that can be on no group)."""
        while True:
            self.states += 1
            progressed, choice = False, None
            for r in range(len(self.ops)):
                while state.pos[r] < len(self.ops[r]) and not self.blocked(state, r):
                    op = self.ops[r][state.pos[r]]
                    if op.is_p2p:
                        state, progressed = self.issue(state, r, None), True
                        continue
                    groups = self.viable(state, r)
                    if not groups:
                        return None
                    if len(groups) > 1:
                        if choice is None or len(groups) < len(choice[1]):
                            choice = (r, groups)
                        break
                    state, progressed = self.issue(state, r, groups[0]), True
            if progressed:
                continue
            if choice is not None:
                return state, choice
            done = all(state.pos[r] == len(self.ops[r]) and not self.blocked(state, r) for r in range(len(self.ops)))
            if not done:
                return None
            counts_match = all(len({len(_issued(state, m, g)) for m in ms}) == 1 for g, ms in self.members.items())
            return (state, None) if counts_match else None

    def solutions(self) -> list[dict]:
        start = _State(tuple(0 for _ in self.ops), tuple(() for _ in self.ops), (), ())
        stack, found = [start], []
        while stack and len(found) <= MAX_SOLUTIONS and self.states < MAX_STATES:
            got = self.advance(stack.pop())
            if got is None:
                continue
            state, choice = got
            if choice is None:
                found.append(dict(state.choice))
                continue
            rank, groups = choice
            for g in reversed(groups):
                stack.append(self.issue(state, rank, g))
        if stack and len(found) <= MAX_SOLUTIONS:  # gave up before the search space was exhausted
            found.append(None)
        return found


def _narrowed(ops: tuple[tuple[GroupOp, ...], ...], members: dict[str, tuple[int, ...]]
              ) -> tuple[tuple[GroupOp, ...], ...]:
    """The candidates no assignment can use removed, to a fixpoint: an op can be on a group only if every other
    member has some op that could be on it too and matches it (type, root; size where both say)."""
    cands = [[set(op.candidates) for op in seq] for seq in ops]
    changed = True
    while changed:
        changed = False
        keys: dict[tuple[int, str], set] = {}
        for r, seq in enumerate(ops):
            for i, op in enumerate(seq):
                if op.is_p2p:
                    continue
                for g in cands[r][i]:
                    keys.setdefault((r, g), set()).update({(op.kind, op.root, op.size_bytes), (op.kind, op.root)})
        for r, seq in enumerate(ops):
            for i, op in enumerate(seq):
                if op.is_p2p or len(cands[r][i]) < 2:
                    continue
                want = (op.kind, op.root, op.size_bytes) if op.size_bytes is not None else (op.kind, op.root)
                keep = {g for g in cands[r][i] if all(m == r or want in keys.get((m, g), ()) or
                                                      (op.kind, op.root, None) in keys.get((m, g), ())
                                                      for m in members[g])}
                if keep != cands[r][i]:
                    cands[r][i], changed = keep, True
    return tuple(tuple(op if op.is_p2p else replace(op, candidates=tuple(g for g in op.candidates if g in c))
                       for op, c in zip(seq, row)) for seq, row in zip(ops, cands))


def infer_groups(ops: tuple[tuple[GroupOp, ...], ...] | list, members: dict[str, tuple[int, ...]],
                 creation: dict[str, int] | None = None, workers_per_group: int | None = None) -> Inference:
    """Each collective's group: ``ops[r]`` is rank r's ops in issue order; ``members`` each group's global
    ranks; ``creation`` each group's place in the order the job made them and ``workers_per_group`` the
    threads each group's backend runs its work on (None: unknown). Returns the assignment as
    (rank, node_id) -> group, or why there is none."""
    ops = _narrowed(tuple(tuple(seq) for seq in ops), members)
    found = _Search(ops, members, creation, workers_per_group).solutions() if all(
        op.candidates for seq in ops for op in seq) else []
    if not found:  # no schedule finishes under blocking semantics: the ops' own matching alone decides
        relaxed = tuple(tuple(replace(op, blocking=False) for op in seq) for seq in ops)
        found = _Search(relaxed, members, creation, workers_per_group).solutions()
        if not found:
            return Inference({}, deadlock=True)
    complete = [s for s in found if s is not None]
    chosen = complete[0] if len(found) == 1 and complete else None
    if chosen is None:
        return Inference({}, ambiguity=_first_disagreement(ops, complete, len(found) if None not in found
                                                           else -1))
    return Inference({(r, ops[r][i].node_id): g for (r, i), g in chosen.items()})


def _first_disagreement(ops: tuple[tuple[GroupOp, ...], ...], solutions: list[dict], surviving: int) -> Ambiguity:
    for rank, seq in enumerate(ops):
        for index, op in enumerate(seq):
            seen = {s.get((rank, index)) for s in solutions} - {None}
            if len(seen) > 1 or (len(solutions) < 2 and len(op.candidates) > 1):
                groups = tuple(g for g in op.candidates if g in seen) if len(seen) > 1 else op.candidates
                return Ambiguity(rank, op.node_id, op.name, groups, surviving)
    first = next((r, op) for r, seq in enumerate(ops) for op in seq if len(op.candidates) > 1)
    return Ambiguity(first[0], first[1].node_id, first[1].name, first[1].candidates, surviving)
