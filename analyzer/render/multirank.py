"""Several ranks in one capture (analyzer/multirank.py) as JSON (docs/json.md, docs/multirank.md) and as
terminal tables. Names from the trace are untrusted: the terminal gets them sanitised."""

from __future__ import annotations

import polars as pl

from analyzer.render.json import ms, phase_list


def _us(ns):
    return None if ns is None else round(float(ns) / 1e3, 3)


def _pct(x):
    return None if x is None else round(float(x), 3)


def _split(r) -> dict:
    return {"ms": ms(r["comm"]), "wait_ms": ms(r["wait"]), "transfer_ms": ms(r["transfer"]),
            "unmatched_ms": ms(r["unmatched"])}


def rank_entries(m) -> list[dict]:
    """The `ranks` list: one entry per (process, device), each with its own `phases`."""
    out = []
    by_phase, by_kind = {}, {}
    for r in m.comm_phases.iter_rows(named=True):
        by_phase.setdefault(r["rank"], {})[r["phase"]] = _split(r)
    for r in m.comm_kinds.iter_rows(named=True):
        by_kind.setdefault(r["rank"], {})[r["kind"]] = _split(r)
    for r in m.ranks.iter_rows(named=True):
        mine = pl.col("rank") == r["rank"]
        out.append({
            "rank": r["rank"], "pid": r["pid"], "os_pid": r["os_pid"], "device": r["device"],
            "rank_source": r["source"], "ops": r["ops"], "streams": r["streams"], "wall_ms": ms(r["wall"]),
            "busy_ms": ms(r["busy"]), "attributed_ms": ms(r["attributed"]),
            "communication": {"ms": ms(r["comm"]), "wait_ms": ms(r["wait"]), "transfer_ms": ms(r["transfer"]),
                              "unmatched_ms": ms(r["unmatched"]), "by_phase": by_phase.get(r["rank"], {}),
                              "by_kind": by_kind.get(r["rank"], {})},
            "phases": phase_list(m.phases.filter(mine).drop("rank"), m.categories.filter(mine).drop("rank")),
        })
    return out


def skew_entry(m) -> dict | None:
    """`rank_skew`: per phase min/max/skew across ranks, the collectives' split, the stragglers (null with one rank)."""
    if m.count < 2:
        return None
    top = m.straggler()
    return {
        "phases": [{"name": r["phase"], "ranks": r["ranks"], "min_ms": ms(r["min"]), "max_ms": ms(r["max"]),
                    "mean_ms": ms(r["mean"]), "skew_ms": ms(r["skew"]), "skew_pct": _pct(r["skew_pct"]),
                    "min_rank": r["min_rank"], "max_rank": r["max_rank"]} for r in m.skew.iter_rows(named=True)],
        "collectives": [{"name": r["name"], "kind": r["kind"], "ranks": r["ranks"], "instances": r["instances"],
                         "unmatched": r["unmatched"], "ms": ms(r["ns"]), "wait_ms": ms(r["wait"]),
                         "transfer_ms": ms(r["transfer"]), "overlap_pct": _pct(r["overlap_pct"]),
                         "shifts": r["shifts"]} for r in m.collectives.iter_rows(named=True)],
        "stragglers": [{"rank": r["rank"], "last": r["last"], "share": _pct(r["share"]),
                        "margin_mean_us": _us(r["margin_mean"]), "margin_max_us": _us(r["margin_max"]),
                        "caused_wait_ms": ms(r["caused"])} for r in m.stragglers.iter_rows(named=True)],
        "straggler": None if top is None else {"rank": top["rank"], "last": top["last"], "share": _pct(top["share"]),
                                               "margin_mean_us": _us(top["margin_mean"]),
                                               "caused_wait_ms": ms(top["caused"])},
        "notes": list(m.notes),
    }


def to_json(m) -> dict:
    """The additive keys of `specprof.analysis/2`: `ranks` and `rank_skew` (null when not computed)."""
    if m is None:
        return {"ranks": None, "rank_skew": None}
    return {"ranks": rank_entries(m), "rank_skew": skew_entry(m)}


def terminal(m, phase_limit: int = 20) -> str | None:
    """The Ranks section (None with fewer than two ranks: the rest of the output is that one rank)."""
    if m is None or m.count < 2:
        return None
    from analyzer.render.terminal import clean, f_ms, f_us, pct, table

    rows = [[str(r["rank"]), str(r["os_pid"]), str(r["device"]), f"{r['ops']:,}", f_ms(r["wall"]), f_ms(r["busy"]),
             pct(r["busy"], r["wall"]), f_ms(r["comm"]), f_ms(r["wait"]), f_ms(r["transfer"]), f_ms(r["unmatched"])]
            for r in m.ranks.iter_rows(named=True)]
    source = m.ranks["source"][0]
    out = [f"Ranks: {m.count} (process, device) pairs, numbered by {source} (docs/multirank.md)",
           table(["rank", "pid", "device", "ops", "wall ms", "busy ms", "busy", "comm ms", "wait ms",
                  "transfer ms", "unmatched ms"], rows),
           "  comm = wait (the rank's collective kernel ran before the last rank's started) + transfer (the rest)"
           " + unmatched"]
    sk = m.skew.head(phase_limit)
    rows = [[clean(r["phase"], 48), str(r["ranks"]), f_ms(r["min"]), f_ms(r["max"]), f_ms(r["skew"]),
             f"{r['skew_pct']:.1f}%", str(r["min_rank"]), str(r["max_rank"])] for r in sk.iter_rows(named=True)]
    out += ["", "Skew across ranks (attributed ms per phase; a rank without the phase counts 0)",
            table(["phase", "ranks", "min ms", "max ms", "skew ms", "skew", "min rank", "max rank"], rows, "lrrrrrrr")]
    if m.skew.height > sk.height:
        out.append(f"({m.skew.height - sk.height:,} more phases: --phases N shows more, --json shows all)")
    if m.comm_kinds.height:
        rows = [[str(r["rank"]), clean(r["kind"], 24), f_ms(r["comm"]), f_ms(r["wait"]), f_ms(r["transfer"]),
                 pct(r["wait"], r["comm"]), f_ms(r["unmatched"])] for r in m.comm_kinds.iter_rows(named=True)]
        out += ["", "Communication per rank and kind",
                table(["rank", "kind", "comm ms", "wait ms", "transfer ms", "wait", "unmatched ms"], rows,
                      "llrrrrr")]
    if m.collectives.height:
        rows = [[clean(r["name"], 60), clean(r["kind"], 24), f"{r['instances']:,}", f"{r['unmatched']:,}",
                 f_ms(r["ns"]), f_ms(r["wait"]), f_ms(r["transfer"]), pct(r["wait"], r["ns"]),
                 "-" if r["overlap_pct"] is None else f"{r['overlap_pct']:.0f}%"]
                for r in m.collectives.iter_rows(named=True)]
        out += ["", "Collectives (k-th kernel of a name on each rank matched; ms summed over ranks)",
                table(["kernel", "kind", "instances", "unmatched", "ms", "wait ms", "transfer ms", "wait",
                       "overlap"], rows, "llrrrrrrr")]
        rows = [[str(r["rank"]), f"{r['last']:,}", "-" if r["share"] is None else f"{100 * r['share']:.0f}%",
                 f_us(r["margin_mean"]), f_us(r["margin_max"]), f_ms(r["caused"])]
                for r in m.stragglers.iter_rows(named=True)]
        out += ["", "Stragglers (arrived last at a matched collective; margin: later than the next-latest rank)",
                table(["rank", "last", "share", "margin mean us", "max us", "others' wait ms"], rows)]
        top = m.straggler()
        if top is not None:
            n = int(m.collectives["instances"].sum())
            out.append(f"  straggler: rank {top['rank']}, last at {top['last']:,} of {n:,}"
                       f" collectives, by {f_us(top['margin_mean'])} us on average; the other ranks waited "
                       f"{f_ms(top['caused'])} ms for it")
            worst = m.stragglers.sort("caused", descending=True).row(0, named=True)
            if worst["rank"] != top["rank"] and worst["caused"] > top["caused"]:
                out.append(f"  but rank {worst['rank']} made the others wait longest: {f_ms(worst['caused'])} ms "
                           f"({worst['last']:,} times last, by {f_us(worst['margin_mean'])} us on average)")
    else:
        out += ["", "Collectives: no communication kernels in this capture (nothing to split into wait and transfer)."]
    if m.notes:
        out += [""] + [f"- {clean(n)}" for n in m.notes]
    return "\n".join(out)
