"""Idempotent producer sequence checks, duplicate detection and snapshot persistence."""

from __future__ import annotations

import pytest

from backbone.log.producer_state import ProducerStateManager
from backbone.protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from backbone.protocol.record_batch import BatchHeader

pytestmark = pytest.mark.unit


def header(pid: int, epoch: int, seq: int, count: int, base_offset: int = 0) -> BatchHeader:
    return BatchHeader(
        base_offset=base_offset,
        batch_length=100,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=count - 1,
        base_timestamp=1000,
        max_timestamp=1000,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        record_count=count,
    )


def append(state: ProducerStateManager, h: BatchHeader, offset: int) -> int:
    duplicate = state.check(h)
    if duplicate is not None:
        return duplicate.first_offset
    state.update(h, offset, 1000)
    return offset


def test_in_order_batches_are_accepted_and_a_retry_returns_the_first_offsets(tmp_path) -> None:
    state = ProducerStateManager(tmp_path)
    assert append(state, header(7, 0, 0, 3), 0) == 0
    assert append(state, header(7, 0, 3, 2), 3) == 3
    # The same batch again (a retry after a lost response) is recognised, not written twice.
    assert state.check(header(7, 0, 0, 3)) is not None
    assert state.check(header(7, 0, 3, 2)).first_offset == 3
    assert state.check(header(7, 0, 5, 1)) is None


def test_a_gap_in_sequences_is_out_of_order(tmp_path) -> None:
    state = ProducerStateManager(tmp_path)
    append(state, header(7, 0, 0, 3), 0)
    with pytest.raises(OutOfOrderSequenceNumberError, match="expected 3"):
        state.check(header(7, 0, 4, 1))


def test_an_older_epoch_is_fenced_and_a_new_epoch_restarts_at_zero(tmp_path) -> None:
    state = ProducerStateManager(tmp_path)
    append(state, header(7, 2, 0, 1), 0)
    with pytest.raises(InvalidProducerEpochError):
        state.check(header(7, 1, 1, 1))
    with pytest.raises(OutOfOrderSequenceNumberError):
        state.check(header(7, 3, 5, 1))
    assert state.check(header(7, 3, 0, 1)) is None


def test_only_the_last_five_batches_are_remembered(tmp_path) -> None:
    state = ProducerStateManager(tmp_path)
    for i in range(7):
        append(state, header(1, 0, i, 1), i)
    with pytest.raises(OutOfOrderSequenceNumberError):
        state.check(header(1, 0, 0, 1))
    assert state.check(header(1, 0, 2, 1)).first_offset == 2


def test_non_idempotent_batches_are_never_checked(tmp_path) -> None:
    state = ProducerStateManager(tmp_path)
    assert state.check(header(-1, -1, -1, 5)) is None
    state.update(header(-1, -1, -1, 5), 0, 1000)
    assert state.producers == {}
    assert state.map_end_offset == 5


def test_state_survives_a_restart_through_snapshot_and_replay(tmp_path) -> None:
    state = ProducerStateManager(tmp_path)
    append(state, header(9, 0, 0, 2), 0)
    state.take_snapshot()
    append(state, header(9, 0, 2, 2), 2)
    # After a restart: snapshot at offset 2, then the batch headers the log holds after it.
    restarted = ProducerStateManager(tmp_path)
    restarted.load_latest_snapshot(max_offset=4)
    assert restarted.map_end_offset == 2
    restarted.replay([header(9, 0, 0, 2, base_offset=0), header(9, 0, 2, 2, base_offset=2)])
    assert restarted.check(header(9, 0, 2, 2)).first_offset == 2
    assert restarted.check(header(9, 0, 4, 1)) is None


def test_truncation_drops_state_above_the_cut(tmp_path) -> None:
    state = ProducerStateManager(tmp_path)
    append(state, header(9, 0, 0, 2), 0)
    state.take_snapshot()
    append(state, header(9, 0, 2, 2), 2)
    state.take_snapshot()
    state.truncate_to(2)
    assert state.snapshot_offsets() == [2]
    assert state.map_end_offset == 2
    # The batch at offset 2 is gone, so its retry is new data again.
    assert state.check(header(9, 0, 2, 2)) is None


def test_a_garbage_snapshot_is_discarded(tmp_path) -> None:
    (tmp_path / f"{5:020d}.snapshot").write_text("not json")
    state = ProducerStateManager(tmp_path)
    state.load_latest_snapshot(max_offset=10)
    assert state.producers == {}
    assert state.snapshot_offsets() == []


def test_idle_producers_expire(tmp_path) -> None:
    state = ProducerStateManager(tmp_path, expiration_ms=100)
    append(state, header(3, 0, 0, 1), 0)
    state.expire(now_ms=1050)
    assert 3 in state.producers
    state.expire(now_ms=1101)
    assert 3 not in state.producers
