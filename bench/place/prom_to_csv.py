#!/usr/bin/env python3
"""A fleet's recorded demand as a bench/place CSV trace (README.md, "The CSV trace").

Inputs are what Prometheus's HTTP API and libvirt give, saved to files, so
that the conversion needs no network:

  CPU.json  the answer of /api/v1/query_range to
            sum by (domain) (rate(magnet_vm_vcpu_seconds_total{state="run"}[1m]))
  NET.json  the answer of /api/v1/query_range to
            8 * sum by (domain) (rate(magnet_vm_network_transmit_bytes_total[1m])
                                 + rate(magnet_vm_network_receive_bytes_total[1m]))
  VMS.csv   one line per VM: domain,vcpus,mem_bytes (virsh dominfo's CPU(s) and
            Used memory, in bytes)

  prom_to_csv.py CPU.json NET.json VMS.csv > trace.csv

Rows come out in time order; time_s counts from the first sample.  A VM of
CPU.json missing from VMS.csv is an error naming it; a sample missing from
NET.json counts as 0 bit/s.
"""
import csv
import json
import sys


def series(path):
    """{domain: {t: value}} from a query_range answer."""
    with open(path) as f:
        doc = json.load(f)
    if doc.get("status") != "success" or doc.get("data", {}).get("resultType") != "matrix":
        sys.exit(f"{path}: not a successful query_range answer (a matrix)")
    out = {}
    for s in doc["data"]["result"]:
        name = s["metric"].get("domain")
        if name is None:
            sys.exit(f"{path}: a series without a domain label: {s['metric']}")
        out[name] = {float(t): float(v) for t, v in s["values"]}
    return out


def vms(path):
    out = {}
    with open(path) as f:
        for n, row in enumerate(csv.reader(f), 1):
            if not row or row[0].startswith("#"):
                continue
            if len(row) != 3:
                sys.exit(f"{path}:{n}: domain,vcpus,mem_bytes expected")
            out[row[0]] = (row[1], row[2])
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    cpu, net, info = series(sys.argv[1]), series(sys.argv[2]), vms(sys.argv[3])
    missing = sorted(set(cpu) - set(info))
    if missing:
        sys.exit(f"{sys.argv[3]}: no vcpus and memory for {', '.join(missing)}")
    rows = [(t, d, v) for d, samples in cpu.items() for t, v in samples.items()]
    rows.sort()
    if not rows:
        sys.exit(f"{sys.argv[1]}: no samples")
    t0 = rows[0][0]
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["time_s", "vm", "vcpus", "mem_bytes", "cpu_cores", "net_bps"])
    for t, d, v in rows:
        vcpus, mem = info[d]
        w.writerow([f"{t - t0:g}", d, vcpus, mem, f"{v:.4f}", f"{net.get(d, {}).get(t, 0.0):.0f}"])


if __name__ == "__main__":
    main()
