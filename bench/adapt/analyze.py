#!/usr/bin/env python3
"""bench/adapt's analysis: per case and phase, g1's goodput, loss, queueing
delay at the bottleneck (magnet's), the link's utilization, and how long g1
took to come within 10% of its new fair share after each change.

    analyze.py OUT --cases adaptive,fixed,tcp [--json]

OUT/<case>/ holds what bench/adapt/run.sh recorded.  Times are the host's
CLOCK_REALTIME (the receivers run on the host).  Writes OUT/adapt.png with
gnuplot when it is installed, and OUT/results.json always."""
import json
import os
import shutil
import statistics
import subprocess
import sys

PHASES = ["alone", "g2 UDP 70%", "alone", "g2 TCP", "alone"]


def jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def active_span(rows, floor_bps=50e3):
    on = [r["wall"] for r in rows if r.get("goodput_bps", 0) > floor_bps]
    return (on[0] - 0.1, on[-1]) if on else (None, None)


def mean(v):
    return sum(v) / len(v) if v else None


def follow_time(g1, t0, t1, share):
    """Seconds from t0 until g1's goodput (0.5 s moving mean) is within 10%
    of @share and stays so for 1 s; None if it never does before t1."""
    rows = [r for r in g1 if t0 <= r["wall"] <= t1]
    for i in range(len(rows)):
        def ok(j):
            w = rows[max(0, j - 4):j + 1]
            m = mean([r["goodput_bps"] for r in w])
            return abs(m - share) <= 0.1 * share
        stay = [j for j in range(i, len(rows)) if rows[j]["wall"] <= rows[i]["wall"] + 1.0]
        if stay and all(ok(j) for j in stay) and rows[stay[-1]]["wall"] >= rows[i]["wall"] + 0.9:
            return round(rows[i]["wall"] - t0, 2)
    return None


def stat(sample, name):
    s = sample.get("stats")
    if not isinstance(s, dict):
        return None
    for v in s.get("stats", []):
        if v.get("name") == name and v.get("valid"):
            return v.get("value")
    return None


def tc_bytes(sample):
    t = sample.get("tc")
    if isinstance(t, list):
        for q in t:
            if q.get("kind") == "tbf":
                return q.get("bytes")
    return None


def analyze_case(d):
    meta = json.load(open(os.path.join(d, "meta.json")))
    cap = meta["capacity_bps"]
    case = meta["case"]
    g1 = jsonl(os.path.join(d, "g1-recv.jsonl"))
    udp = jsonl(os.path.join(d, "g2-udp.jsonl"))
    tcp = jsonl(os.path.join(d, "g2-tcp.jsonl"))
    samples = jsonl(os.path.join(d, "samples.jsonl"))
    g1s, g1e = active_span(g1)
    us, ue = active_span(udp)
    ts, te = active_span(tcp)
    if None in (g1s, us, ts):
        return {"case": case, "error": "a sender never reached the wire (see %s)" % d}
    bounds = [g1s + 1.0, us, ue, ts, te, g1e]
    # Payload rates: 1400 of 1442 bytes per UDP datagram on the wire, 1448
    # of 1514 per TCP segment.
    pay = cap * (1448 / 1514 if case == "tcp" else 1400 / 1442)
    phases = []
    for k in range(5):
        a, b = bounds[k], bounds[k + 1]
        rows = [r for r in g1 if a <= r["wall"] < b]
        good = mean([r["goodput_bps"] for r in rows])
        rec = sum(r.get("received", 0) for r in rows)
        lost = sum(r.get("lost", 0) for r in rows)
        sm = [s for s in samples if a <= s["wall"] < b]
        p50 = [v for v in (stat(s, "link.queue_p50_us") for s in sm) if v is not None]
        p99 = [v for v in (stat(s, "link.queue_p99_us") for s in sm) if v is not None]
        tb = [(s["wall"], tc_bytes(s)) for s in sm if tc_bytes(s) is not None]
        util = None
        if len(tb) >= 2 and tb[-1][0] > tb[0][0]:
            util = (tb[-1][1] - tb[0][1]) * 8 / (tb[-1][0] - tb[0][0]) / cap
        if k == 1:
            comp = statistics.median([r["goodput_bps"] for r in udp if a <= r["wall"] < b] or [0])
            share = max(pay - comp, 0.05 * pay)
        elif k == 3:
            share = pay / 2
        else:
            share = pay
        follow = follow_time(g1, a, b, share) if k > 0 else None
        phases.append({
            "phase": k + 1, "what": PHASES[k], "seconds": round(b - a, 2),
            "goodput_bps": good, "fair_share_bps": share,
            "loss_pct": (100.0 * lost / (rec + lost)) if case != "tcp" and rec + lost else None,
            # Both the median over the phase of what the view reported (its
            # 1 s windows, sampled every 0.5 s): a phase's p99 is then never
            # below its p50, as it was when p99 took the mean.
            "queue_p50_us": statistics.median(p50) if p50 else None,
            "queue_p99_us": statistics.median(p99) if p99 else None,
            "utilization": util,
            "follow_s": follow,
        })
    rec = sum(r.get("received", 0) for r in g1 if g1s <= r["wall"] < g1e)
    lost = sum(r.get("lost", 0) for r in g1 if g1s <= r["wall"] < g1e)
    return {"case": case, "capacity_bps": cap, "phases": phases,
            "loss_pct": (100.0 * lost / (rec + lost)) if case != "tcp" and rec + lost else None,
            "series": {"g1": [(r["wall"] - g1s, r["goodput_bps"]) for r in g1],
                       "g2_udp": [(r["wall"] - g1s, r["goodput_bps"]) for r in udp],
                       "g2_tcp": [(r["wall"] - g1s, r["goodput_bps"]) for r in tcp]}}


def fmt(v, scale=1.0, digits=2, unit=""):
    if v is None:
        return "-"
    return ("%." + str(digits) + "f%s") % (v / scale, unit)


def targets(res):
    """The issue's targets, checked on the adaptive case (against tcp's p99)."""
    by = {r["case"]: r for r in res if "phases" in r}
    a = by.get("adaptive")
    if not a:
        return []
    out = []
    fol = [p["follow_s"] for p in a["phases"][1:]]
    worst = None if None in fol else max(fol)
    out.append(("follows every change within 1 s", worst is not None and worst <= 1.0,
                "worst %s s" % fmt(worst) if worst is not None else
                "did not follow phase(s) %s" % [p["phase"] for p in a["phases"][1:] if p["follow_s"] is None]))
    out.append(("loss <= 1%", a["loss_pct"] is not None and a["loss_pct"] <= 1.0,
                "%s%%" % fmt(a["loss_pct"]) + ("; fixed-rate sender: %s%%" % fmt(by["fixed"]["loss_pct"])
                                               if "fixed" in by else "")))
    if "tcp" in by:
        ap = [p["queue_p99_us"] for p in a["phases"] if p["queue_p99_us"] is not None]
        tp = [p["queue_p99_us"] for p in by["tcp"]["phases"] if p["queue_p99_us"] is not None]
        if ap and tp:
            out.append(("p99 bottleneck queueing below TCP's", max(ap) < max(tp),
                        "%s us vs TCP %s us (worst phase)" % (fmt(max(ap), 1, 0), fmt(max(tp), 1, 0))))
    ut = [a["phases"][k]["utilization"] for k in (0, 2, 4)]
    low = None if None in ut else min(ut)
    out.append(("utilization >= 90% while alone", low is not None and low >= 0.9,
                "lowest %s%%" % fmt(None if low is None else low * 100, 1, 1)))
    return out


def plot(out, res):
    if not shutil.which("gnuplot"):
        print("(no gnuplot: plot skipped)", file=sys.stderr)
        return None
    cols = []
    for r in res:
        if "series" not in r:
            continue
        for name, pts in r["series"].items():
            if name != "g1" and r["case"] != res[0]["case"]:
                continue
            path = os.path.join(out, "%s-%s.dat" % (r["case"], name))
            with open(path, "w") as f:
                for t, v in pts:
                    f.write("%.2f %.4f\n" % (t, v / 1e6))
            title = ("g1 %s" % r["case"]) if name == "g1" else name.replace("_", " ")
            cols.append("'%s' using 1:2 with lines title '%s'" % (path, title))
    png = os.path.join(out, "adapt.png")
    script = ("set terminal png size 1100,500\nset output '%s'\nset xlabel 'seconds'\n"
              "set ylabel 'goodput (Mbit/s), 100 ms intervals'\nset key outside\nset grid\n"
              "plot %s\n") % (png, ", ".join(cols))
    subprocess.run(["gnuplot"], input=script.encode(), check=False)
    return png if os.path.exists(png) else None


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = args[0]
    cases = "adaptive,fixed,tcp"
    if "--cases" in args:
        cases = args[args.index("--cases") + 1]
    res = [analyze_case(os.path.join(out, c)) for c in cases.split(",")]
    png = plot(out, res)
    tg = targets(res)
    doc = {"results": [{k: v for k, v in r.items() if k != "series"} for r in res],
           "targets": [{"target": t, "met": m, "detail": d} for t, m, d in tg], "plot": png}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    if "--json" in args:
        print(json.dumps(doc))
        return
    hdr = "%-9s %-2s %-11s %9s %9s %7s %9s %9s %6s %8s" % (
        "case", "ph", "what", "goodput", "share", "loss", "q p50", "q p99", "util", "follow")
    print(hdr)
    print("%-9s %-2s %-11s %9s %9s %7s %9s %9s %6s %8s" % ("", "", "", "Mbit/s", "Mbit/s", "%", "us", "us", "%", "s"))
    for r in res:
        if "error" in r:
            print("%-9s %s" % (r["case"], r["error"]))
            continue
        for p in r["phases"]:
            print("%-9s %-2d %-11s %9s %9s %7s %9s %9s %6s %8s" % (
                r["case"], p["phase"], p["what"], fmt(p["goodput_bps"], 1e6), fmt(p["fair_share_bps"], 1e6),
                fmt(p["loss_pct"]), fmt(p["queue_p50_us"], 1, 0), fmt(p["queue_p99_us"], 1, 0),
                fmt(None if p["utilization"] is None else p["utilization"] * 100, 1, 0),
                "-" if p["phase"] == 1 else ("never" if p["follow_s"] is None else fmt(p["follow_s"]))))
    for t, m, d in tg:
        print("%-4s %s: %s" % ("MET" if m else "MISS", t, d))
    if png:
        print("plot: %s" % png)


if __name__ == "__main__":
    main()
