#!/usr/bin/env python3
"""The summary of bench/daemon/cost.sh's runs: a table, or (--json) one JSON object.

report.py RUNS.TSV CONFIGS.TSV [PROGS.TSV] [--json]

Per configuration, median (min-max) over the rounds, as bench/summary.h:
goodput; its ratio to `off`, taken within each round (the run of the
configuration over the `off` run of the same round); the daemon's CPU and
g1's QEMU CPU as % of one core over the window; the BPF programs' run time
per second of wall time and per run, and their runs per second; with
PROGS.TSV, the same for each program that ran.
"""
import csv
import json
import sys


def summary(values):
    """median, min, max of a non-empty list, as bench/summary.h; None when empty."""
    v = sorted(values)
    if not v:
        return None
    n = len(v)
    med = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return {"median": med, "min": v[0], "max": v[-1]}


def fmt(s, scale=1.0, digits=1):
    if s is None:
        return "-"
    f = f"{{:.{digits}f}}"
    return f"{f.format(s['median'] * scale)} ({f.format(s['min'] * scale)}-{f.format(s['max'] * scale)})"


def load(runs_path, configs_path):
    rows = list(csv.DictReader(open(runs_path), delimiter="\t"))
    meta, configs = {}, []
    for line in open(configs_path):
        f = line.rstrip("\n").split("\t")
        if f[0] == "commit":
            meta = {"commit": f[1], "rounds": int(f[2]), "seconds": int(f[3])}
        else:
            configs.append({"name": f[0], "what": f[1], "daemon_args": f[2]})
    return rows, meta, configs


def per_config(rows, name, off):
    mine = [r for r in rows if r["config"] == name]
    win = {r["round"]: int(r["window_ns"]) / 1e9 for r in mine}
    good = [float(r["goodput_bps"]) for r in mine]
    ratio = [float(r["goodput_bps"]) / off[r["round"]] for r in mine if r["round"] in off]
    out = {
        "runs": len(mine),
        "goodput_bps": summary(good),
        "goodput_samples_bps": good,
        "ratio_to_off": summary(ratio) if name != "off" else None,
        "qemu_cpu_pct": summary([100 * int(r["qemu_cpu_ns"]) / 1e9 / win[r["round"]] for r in mine]),
    }
    if name == "off":
        return out
    ran = [r for r in mine if int(r["bpf_run_cnt"]) > 0]
    out.update({
        "daemon_cpu_pct": summary([100 * int(r["daemon_cpu_ns"]) / 1e9 / win[r["round"]] for r in mine]),
        "bpf_ns_per_s": summary([int(r["bpf_run_ns"]) / win[r["round"]] for r in mine]),
        "bpf_ns_per_run": summary([int(r["bpf_run_ns"]) / int(r["bpf_run_cnt"]) for r in ran]),
        "bpf_runs_per_s": summary([int(r["bpf_run_cnt"]) / win[r["round"]] for r in mine]),
        "daemon_programs": summary([int(r["daemon_progs"]) for r in mine]),
        "programs_that_ran": summary([int(r["bpf_progs_ran"]) for r in mine]),
        "records_over_daemon_life": [None if r["records"] == "-" else int(r["records"]) for r in mine],
        "lost_over_daemon_life": [None if r["lost"] == "-" else int(r["lost"]) for r in mine],
    })
    return out


def per_program(rows, progs, name):
    """Each program of configuration @name that ran: ns/s, runs/s, ns/run over the rounds."""
    win = {r["round"]: int(r["window_ns"]) / 1e9 for r in rows if r["config"] == name}
    sums = {}  # (program name, round) -> [ns, runs]: two programs may share a name
    for p in (p for p in progs if p["config"] == name and p["round"] in win):
        t = sums.setdefault((p["program"], p["round"]), [0, 0])
        t[0] += int(p["run_ns"])
        t[1] += int(p["run_cnt"])
    out = {}
    for (prog, rnd), (ns, cnt) in sums.items():
        e = out.setdefault(prog, {"ns_per_s": [], "runs_per_s": [], "ns_per_run": []})
        w = win[rnd]
        e["ns_per_s"].append(ns / w)
        e["runs_per_s"].append(cnt / w)
        e["ns_per_run"].append(ns / cnt)
    res = {k: {m: summary(v) for m, v in e.items()} for k, e in out.items()}
    return dict(sorted(res.items(), key=lambda kv: -kv[1]["ns_per_s"]["median"]))


def table(result):
    m = result
    lines = [f"bench/daemon/cost.sh: {m['rounds']} rounds x {m['seconds']} s, commit {m['commit']}; "
             "iperf3 TCP g1 -> wire through g1's tap, configurations interleaved (order rotated each round)",
             "median (min-max) over the rounds; ratio: to `off` within each round; CPU: % of one core "
             "over the window; BPF: the daemon's programs (bpf_stats)", ""]
    for c in m["configs"]:
        args = f"  [magnet host {c['daemon_args']}]" if c["daemon_args"] else ""
        lines.append(f"  {c['name']:<9} {c['what']}{args}")
    lines.append("")
    hdr = (f"{'config':<9}{'goodput Mbit/s':>26}{'ratio to off':>24}{'daemon CPU %':>22}"
           f"{'BPF us/s':>26}{'BPF ns/run':>20}{'BPF k runs/s':>22}{'g1 QEMU CPU %':>22}")
    lines.append(hdr)
    for c in m["configs"]:
        e = m["results"][c["name"]]
        lines.append(f"{c['name']:<9}{fmt(e['goodput_bps'], 1e-6):>26}{fmt(e['ratio_to_off'], 1, 3):>24}"
                     f"{fmt(e.get('daemon_cpu_pct'), 1, 2):>22}{fmt(e.get('bpf_ns_per_s'), 1e-3):>26}"
                     f"{fmt(e.get('bpf_ns_per_run'), 1, 0):>20}{fmt(e.get('bpf_runs_per_s'), 1e-3, 1):>22}"
                     f"{fmt(e['qemu_cpu_pct'], 1, 1):>22}")
    lines.append("")
    lines.append("BPF us/s / 1e4 = % of one core in the kernel.  "
                 "Records and lost records over each daemon's life ([stopped] line):")
    for c in m["configs"]:
        e = m["results"][c["name"]]
        if "records_over_daemon_life" in e:
            lines.append(f"  {c['name']:<9} records {e['records_over_daemon_life']}  lost {e['lost_over_daemon_life']}")
    if any("programs" in m["results"][c["name"]] for c in m["configs"]):
        lines.append("")
        lines.append("Each program that ran: us/s, k runs/s, ns/run (medians over the rounds it ran in)")
        for c in m["configs"]:
            pr = m["results"][c["name"]].get("programs")
            if not pr:
                continue
            cells = [f"{k} {v['ns_per_s']['median'] / 1e3:.0f}/{v['runs_per_s']['median'] / 1e3:.1f}/"
                     f"{v['ns_per_run']['median']:.0f}" for k, v in pr.items()]
            lines.append(f"  {c['name']:<9} " + ", ".join(cells))
    return "\n".join(lines)


def main():
    args = [a for a in sys.argv[1:] if a != "--json"]
    if len(args) not in (2, 3):
        sys.exit("usage: report.py RUNS.TSV CONFIGS.TSV [PROGS.TSV] [--json]")
    rows, meta, configs = load(args[0], args[1])
    progs = list(csv.DictReader(open(args[2]), delimiter="\t")) if len(args) == 3 else None
    off = {r["round"]: float(r["goodput_bps"]) for r in rows if r["config"] == "off"}
    result = {"bench": "daemon_cost", **meta,
              "path": "iperf3 TCP from lab guest g1 (TCG) through its tap and the lab bridge to a veth namespace",
              "configs": configs,
              "results": {c["name"]: per_config(rows, c["name"], off) for c in configs}}
    if progs is not None:
        for c in configs:
            if c["name"] != "off":
                result["results"][c["name"]]["programs"] = per_program(rows, progs, c["name"])
    if "--json" in sys.argv[1:]:
        print(json.dumps(result, indent=1))
    else:
        print(table(result))


if __name__ == "__main__":
    main()
