"""Why a job failed: the first-failure card `lab why` prints, and what it is drawn from.

    card            the card: which rank failed first, how, where in its script, what the others did
    failure_card    the card as data (Card, RankFailure), what the reports and the grader read
    card_notes      its notes: which silent rank hung, what the first error means
    evidence        a failed job's evidence, kept past teardown
    lost_store      the rendezvous store lost mid-run, as the agents recorded it
    disk_full       a write that found its disk full (torch's words for it)
    bad_checkpoint  a checkpoint read back damaged, set aside
    mismatch        the odd rank of a collective mismatch (TORCH_DISTRIBUTED_DEBUG=DETAIL)

Graded against injected faults by `lab bench diagnosis` (lab.bench.grading). The node-side
readers it shares with the in-process keepers (lab.node_log, lab.kernel_log) sit lower.
"""
