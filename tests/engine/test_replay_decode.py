"""Replay's shortcut for add records: the job made straight from the record equals the one
the engine makes from the decoded command, and malformed records fail alike."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobq.engine.commands import (
    AddJob,
    CommandDecodeError,
    CompleteJob,
    ScheduleJob,
    decode_add_as_job,
    decode_workq_command,
    encode_workq_command,
)
from jobq.engine.machine import Engine
from tests.engine.helpers import T0

add_jobs = st.builds(
    AddJob,
    id=st.binary(min_size=16, max_size=16),
    name=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20),
    ttr_ms=st.integers(0, 2**40),
    ttl_ms=st.integers(0, 2**40),
    priority=st.integers(-(2**31), 2**31),
    max_attempts=st.integers(0, 1000),
    max_fails=st.integers(0, 1000),
    payload=st.binary(max_size=300),
    created_ns=st.integers(T0 - 10**18, T0 + 10**18),
)


@given(add_jobs)
def test_add_record_decodes_to_the_job_replay_of_its_command_makes(command: AddJob) -> None:
    payload = encode_workq_command(command)
    by_command, by_record = Engine(), Engine()
    for engine in (by_command, by_record):
        engine.begin_replay()
    by_command.replay(decode_workq_command(payload), logged_ns=T0, now_ns=T0)
    job = decode_add_as_job(payload)
    assert job is not None
    by_record.replay_new_job(job, now_ns=T0)
    for engine in (by_command, by_record):
        engine.end_replay()
    assert [j.row() for j in by_record.jobs.values()] == [j.row() for j in by_command.jobs.values()]
    assert by_record.next_deadline_ns() == by_command.next_deadline_ns()


def test_other_records_are_left_to_the_command_decoder() -> None:
    job_id = bytes(range(16))
    schedule = ScheduleJob(job_id, "q", 1, 2, 3, 4, 5, b"p", T0, T0 + 1)
    for command in (schedule, CompleteJob(job_id, b"done")):
        assert decode_add_as_job(encode_workq_command(command)) is None


@given(add_jobs, st.data())
def test_a_cut_add_record_fails_as_the_command_decoder_does(command: AddJob, data) -> None:
    payload = encode_workq_command(command)
    cut = payload[: data.draw(st.integers(17, len(payload) - 1))]
    with pytest.raises(CommandDecodeError) as by_command:
        decode_workq_command(cut)
    with pytest.raises(CommandDecodeError) as by_record:
        decode_add_as_job(cut)
    assert str(by_record.value) == str(by_command.value)


# few names and few values: records share a name, and often the five varints after it, as
# a producer's do, so the decoder's caches of those blocks are hit, missed and replaced
repeating_add_jobs = st.builds(
    AddJob,
    id=st.binary(min_size=16, max_size=16),
    name=st.sampled_from(["q", "qq", "emails", "x" * 127, "y" * 130]),
    ttr_ms=st.sampled_from([0, 1, 127, 128, 60_000, 2**40]),
    ttl_ms=st.sampled_from([0, 1, 3_600_000]),
    priority=st.sampled_from([0, -1, 1, 2**31]),
    max_attempts=st.sampled_from([0, 1, 300]),
    max_fails=st.sampled_from([0, 2]),
    payload=st.binary(max_size=200),
    created_ns=st.integers(T0 - 10**18, T0 + 10**18),
)


@given(st.lists(repeating_add_jobs, min_size=1, max_size=40))
def test_records_sharing_names_and_fields_decode_to_their_own_values(
    commands: list[AddJob],
) -> None:
    for command in commands:
        payload = encode_workq_command(command)
        assert decode_workq_command(payload) == command
        job = decode_add_as_job(payload)
        assert job is not None
        assert (job.name, job.ttr_ms, job.ttl_ms, job.priority) == (
            command.name,
            command.ttr_ms,
            command.ttl_ms,
            command.priority,
        )
        assert (job.max_attempts, job.max_fails, job.payload, job.created_ns) == (
            command.max_attempts,
            command.max_fails,
            command.payload,
            command.created_ns,
        )
