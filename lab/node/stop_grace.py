"""The tuned restart's stop: a worker still alive 5 s after SIGTERM is SIGKILLed.

When one worker fails, torchrun's agent stops the others before it restarts the group:
SIGTERM, then SIGKILL after 30 s (LocalElasticAgent._shutdown's default). A worker that
cannot take SIGTERM (frozen by SIGSTOP, stuck in C code holding the GIL, hung in a
collective that ignores signals) costs every restart those 30 s, and every other node's
agent waits that long in the next rendezvous round. Under the lab's tuned restart
(`--rdzv-backend=lab`, lab.recovery's `restart` style) the agent waits STOP_GRACE_S
instead: enough for a healthy worker's SIGTERM handler, not for a hung one. torchrun's
own style keeps torch's 30 s. Only the stop before a restart changes; an agent that is
itself told to stop (preemption, `lab down`) still gives its workers torch's 30 s.
"""

from __future__ import annotations

from lab.recovery import RESTART_STOP_GRACE_S

STOP_GRACE_S = RESTART_STOP_GRACE_S


def install(grace_s: int = STOP_GRACE_S) -> None:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    def stop_workers(agent, worker_group) -> None:
        agent._shutdown(timeout=grace_s)

    setattr(LocalElasticAgent, "_stop_workers", stop_workers)  # noqa: B010 -- a patch, on purpose
