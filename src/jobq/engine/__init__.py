"""The job engine: a pure, deterministic state machine of jobs, queues and schedules.

No sockets, no asyncio, no wall clock, no disk: every operation takes ``now_ns`` and returns
its result and the commands to log; replay applies logged commands through the same code.
"""
