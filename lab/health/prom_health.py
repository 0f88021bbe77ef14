"""Per-rank and per-node health as Prometheus sees it, for `lab status`."""

from __future__ import annotations

from lab.health.prometheus import Prometheus

RANK_QUERIES = {
    "up": 'up{job="lab-ranks"}',
    "step": "lab_step",
    "age": "time() - lab_last_step_timestamp_seconds",
    "rate": "rate(lab_steps_total[10s])",
    "restarts": "lab_worker_group_restarts",
}


def rank_health(prom: Prometheus) -> list[dict]:
    """One row per rank target: rank, node, and each figure of RANK_QUERIES (None if absent)."""
    rows: dict[str, dict] = {}
    for column, expr in RANK_QUERIES.items():
        for sample in prom.query(expr):
            rank = sample["metric"].get("rank")
            if rank is None:
                continue
            row = rows.setdefault(
                rank, {"rank": int(rank), "node": sample["metric"].get("node", "?"), **{c: None for c in RANK_QUERIES}}
            )
            row[column] = sample["value"]
    return sorted(rows.values(), key=lambda r: r["rank"])


def agent_health(prom: Prometheus) -> list[dict]:
    states = {s["metric"]["node"]: s["metric"]["state"] for s in prom.query("lab_agent_worker_group_state == 1")}
    used = {s["metric"]["node"]: int(s["value"]) for s in prom.query("lab_agent_restarts_used")}
    up = {s["metric"]["node"]: s["value"] for s in prom.query('up{job="lab-agents"}')}
    return [{"node": n, "up": up.get(n), "state": states.get(n, "?"), "restarts_used": used.get(n)} for n in sorted(up)]


def format_ranks(rows: list[dict]) -> str:
    def fmt(value, pattern):
        return "-" if value is None else pattern.format(value)

    lines = [f"  {'rank':<5}{'node':<8}{'up':<5}{'step':>6}{'last step':>11}{'steps/s':>9}{'restarts':>10}"]
    for r in rows:
        lines.append(
            f"  {r['rank']:<5}{r['node']:<8}{'yes' if r['up'] == 1 else 'NO':<5}"
            f"{fmt(r['step'], '{:.0f}'):>6}{fmt(r['age'], '{:.1f}s ago'):>11}"
            f"{fmt(r['rate'], '{:.2f}'):>9}{fmt(r['restarts'], '{:.0f}'):>10}"
        )
    return "\n".join(lines)
