"""The tuned restart's stop: a worker still alive 5 s after SIGTERM is SIGKILLed.

When one worker fails, torchrun's agent stops the others before it restarts the group:
SIGTERM, then SIGKILL 30 s later. Two places in torch hold those 30 s: the worker
context's own join (torch.multiprocessing's ProcessContext.join, which ends the siblings
of a failed worker; `_join_procs_with_timeout(30)`), and the agent's stop
(LocalElasticAgent._shutdown's default). A worker that cannot take SIGTERM (frozen by
SIGSTOP, stuck in C code holding the GIL, hung in a collective that ignores signals)
costs every restart those 30 s, and every other node's agent waits that long in the next
rendezvous round. Under the lab's tuned restart (`--rdzv-backend=lab`, lab.recovery's
`restart` style) the agent waits recovery.RESTART_STOP_GRACE_S instead: enough for a healthy worker's
SIGTERM handler, not for a hung one. torchrun's own style keeps torch's 30 s. An agent
that is itself told to stop (preemption, `lab down`) still gives its workers torch's 30 s.
"""

from __future__ import annotations

from lab.recovery import RESTART_STOP_GRACE_S


def install(grace_s: int = RESTART_STOP_GRACE_S) -> None:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.multiprocessing.spawn import ProcessContext

    def stop_workers(agent, worker_group) -> None:
        agent._shutdown(timeout=grace_s)

    join_for_at_most = ProcessContext._join_procs_with_timeout

    def join_for_at_most_grace(context, timeout: float) -> None:
        join_for_at_most(context, min(timeout, grace_s))

    setattr(LocalElasticAgent, "_stop_workers", stop_workers)  # noqa: B010 -- a patch, on purpose
    setattr(ProcessContext, "_join_procs_with_timeout", join_for_at_most_grace)  # noqa: B010 -- likewise
