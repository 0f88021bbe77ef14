"""Fault drills on a user's own training script, unmodified: `lab exercise run NAME --script PATH`
and `lab exercise matrix`.

The script runs under torchrun through lab.node.user_script, which watches it from the
outside (progress, what it loads, how it exits). Here, on the controller:

- spec: what the user asked for (the script, its checkpoints, progress regex, comparison);
- signals: where the drill reads progress from, and when the fault fires;
- judge: the verdict a user can act on (restarts, work redone, resumed or not, compared);
- compare: the script's result file against a fault-free reference run's;
- runner: one run (the reference, or one fault) as a drill of the engine, in a clean working dir;
- matrix, page: every fault in a row, as matrix.json, matrix.md and a self-contained matrix.html.

A drill module takes part by defining `break_script(drill, target, ckpt_dir, own)` (inject its
fault, return the fault record; own: its flags, of which SCRIPT_OPTIONS names those it takes
on a script, and SCRIPT_REFUSES says why the others are refused) and SCRIPT_RECOVERY:
"restart" (torchrun should restart the group), "rerun" (the job ends; the lab starts it
again, as after a preemption) or "none".
"""
