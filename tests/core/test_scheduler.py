"""Tiny pools checked by hand: exact block counts, admission gate, preemption order."""

from __future__ import annotations

from factories import create_requests, create_scheduler


def run_trace(sched, accepted=None, max_steps=50):  # type: ignore[no-untyped-def]
    rows = []
    for _ in range(max_steps):
        out = sched.schedule()
        if out.is_empty:
            break
        fin = sched.update(out, accepted or {})
        rows.append(
            (
                out.num_scheduled_tok,
                [r.req_id for r in out.preempted],
                [r.req_id for r in out.admitted],
                sched.kv.num_free_blocks,
                [r.req_id for r in fin],
            )
        )
    return rows


def test_two_requests_grow_until_last_is_preempted_then_recomputed() -> None:
    """8 usable blocks of 4 tokens, two requests of 7 prompt + 12 output tokens.

    Each needs cdiv(7+n, 4) blocks; both fit until they need 5 blocks each (10 > 8):
    at step 11 r0 needs its 5th block, the LAST running request (r1) is preempted, its
    4 blocks freed; no admission in that step; r1 is recomputed (prompt + 10 outputs =
    17 tokens, one chunk) only after r0 finishes, because the admission gate wants the
    whole 17-token sequence (5 blocks) free while r0 runs.
    """
    sched = create_scheduler(num_blocks=9, block_size_tok=4)
    for r in create_requests([7, 7], [12, 12]):
        sched.add_request(r)
    rows = run_trace(sched)
    assert rows[0] == ({"r0": 7, "r1": 7}, [], ["r0", "r1"], 4, [])
    assert [row[3] for row in rows] == [4, 4, 2, 2, 2, 2, 0, 0, 0, 0, 3, 8, 3, 8]
    assert rows[10] == ({"r0": 1}, ["r1"], [], 3, [])
    assert rows[11] == ({"r0": 1}, [], [], 8, ["r0"])
    assert rows[12] == ({"r1": 17}, [], ["r1"], 3, [])
    assert rows[13][4] == ["r1"]
    assert sched.num_preemptions == 1


def test_gdn_slots_are_taken_with_first_chunk_and_held() -> None:
    """3 GDN groups x (1+k) slots are allocated with the first chunk, never grown."""
    sched = create_scheduler(
        num_blocks=40,
        block_size_tok=16,
        num_gdn_groups=3,
        gdn_slots_per_request=4,
        lookahead_tok=3,
        num_spec_tok=3,
        max_num_batched_tokens=8,
    )
    (req,) = create_requests([20], [30])
    sched.add_request(req)
    out = sched.schedule()  # first chunk: 8 tokens, no lookahead yet (nothing computed)
    assert out.num_scheduled_tok == {"r0": 8}
    assert (req.num_attn_blocks, req.num_gdn_blocks) == (1, 12)
    sched.update(out, {})
    out = sched.schedule()  # second chunk: 8 more, lookahead 3 -> cdiv(19, 16) = 2
    assert (req.num_attn_blocks, req.num_gdn_blocks) == (2, 12)
    sched.update(out, {})
    out = sched.schedule()  # last 4 prompt tokens; prefill ends, first token + 3 drafts
    assert out.num_scheduled_tok == {"r0": 4}
    sched.update(out, {})
    assert (req.num_output_tok, req.num_spec_tok, req.num_computed_tok) == (1, 3, 20)
    out = sched.schedule()  # verify window 1 + k = 4 tokens
    assert out.num_scheduled_tok == {"r0": 4} and out.verify == [True]
    sched.update(out, {"r0": 2})  # 2 drafts accepted -> 3 tokens emitted
    assert (req.num_output_tok, req.num_computed_tok) == (4, 23)
    assert req.num_gdn_blocks == 12
    assert sched.kv.num_free_blocks == 39 - 12 - req.num_attn_blocks


def test_admission_gate_blocks_when_whole_sequence_does_not_fit() -> None:
    """r1's first chunk fits, but its whole prompt does not: FCFS stops at r1 and does
    not skip ahead to the small r2."""
    sched = create_scheduler(num_blocks=8, block_size_tok=4, max_num_batched_tokens=64)
    for r in create_requests([12, 20, 2], [5, 5, 5]):
        sched.add_request(r)
    out = sched.schedule()
    # r0: 3 blocks (free 4); r1 needs 5 > 4: gate closes, r2 waits behind it
    assert out.num_scheduled_tok == {"r0": 12}
    assert [r.req_id for r in sched.waiting] == ["r1", "r2"]


def test_max_num_seqs_caps_running() -> None:
    sched = create_scheduler(num_blocks=100, max_num_seqs=2)
    for r in create_requests([4, 4, 4], [3, 3, 3]):
        sched.add_request(r)
    out = sched.schedule()
    assert list(out.num_scheduled_tok) == ["r0", "r1"]
    assert len(sched.waiting) == 1


def test_async_finished_request_holds_its_slot_and_blocks_one_schedule() -> None:
    """vLLM's async scheduling: step n+1 is scheduled before step n's output is processed,
    so a request that finished in step n still holds its max_num_seqs slot and its blocks
    in that schedule; both come back at its end."""
    free = {}
    for async_on, admitted in ((False, ["r2"]), (True, [])):
        sched = create_scheduler(num_blocks=100, max_num_seqs=2, async_scheduling=async_on)
        for r in create_requests([4, 4, 4], [1, 3, 3]):
            sched.add_request(r)
        sched.mark_arrivals()  # all three arrived long before
        sched.mark_arrivals()
        out = sched.schedule()  # r0, r1 prefill (1 block each); r0 finishes on its first token
        fin = sched.update(out, {})
        assert [r.req_id for r in fin] == ["r0"]
        free[async_on] = sched.kv.num_free_blocks
        sched.mark_arrivals()
        out = sched.schedule()  # r1 decodes into its 2nd block
        assert [r.req_id for r in out.admitted] == admitted
        if async_on:
            assert sched.num_held == 0  # r0's block came back at the end of that schedule
            assert sched.kv.num_free_blocks == free[True] + 1 - 1
            out = sched.schedule()
            assert [r.req_id for r in out.admitted] == ["r2"]
    assert free[False] == free[True] + 1  # sync frees r0's block in update, async holds it


def test_async_late_arrival_waits_one_schedule_more() -> None:
    """The engine calls ``schedule`` for step n+1 after ``update`` of step n; vLLM made that
    schedule right after step n-1's output. A request added after step 1's ``update``
    (``mark_arrivals``) while something runs reached vLLM during step 2, after step 3 was
    planned: it enters step 4 (sync: step 3). With nothing running the engine
    schedules afresh and admits whatever waits."""
    sched = create_scheduler(num_blocks=100, async_scheduling=True)
    r0, r1 = create_requests([4, 4], [9, 9])

    def step(add=None):  # type: ignore[no-untyped-def]
        out = sched.schedule()
        sched.update(out, {})
        sched.mark_arrivals()
        if add is not None:
            sched.add_request(add)
        return [r.req_id for r in out.admitted]

    sched.add_request(r0)
    assert step(add=r1) == ["r0"]  # step 1: nothing ran before, r0 admitted; r1 arrives
    assert step() == []  # step 2 (vLLM: scheduled with step 1, before r1 arrived)
    assert step() == []  # step 3 (vLLM: scheduled after step 1's output, r1 not there yet)
    assert step() == ["r1"]  # step 4 (vLLM: after step 2's output)
    # nothing running: a fresh schedule admits at once
    fresh = create_scheduler(num_blocks=100, async_scheduling=True)
    (r,) = create_requests([4], [2])
    fresh.mark_arrivals()
    fresh.add_request(r)
    assert [q.req_id for q in fresh.schedule().admitted] == ["r0"]


def test_chunked_prefill_respects_token_budget() -> None:
    sched = create_scheduler(num_blocks=100, max_num_batched_tokens=10)
    for r in create_requests([25, 6], [2, 2]):
        sched.add_request(r)
    budgets = []
    for _ in range(4):
        out = sched.schedule()
        budgets.append(out.num_scheduled_tok)
        sched.update(out, {})
    assert budgets[0] == {"r0": 10}
    assert budgets[1] == {"r0": 10}
    assert budgets[2] == {"r0": 5, "r1": 5}
    assert budgets[3] == {"r0": 1, "r1": 1}
