"""The emulated link's figures (issue 23, part 2): alpha and beta measured back, overlap, compression.

One launch of ``emulated_link`` on 2 ranks (``probe``, ``overlap``, ``compression``).
:func:`measure_link` returns ``emulated_alpha_err``, ``emulated_beta_err`` (relative errors of the
fitted probe link), ``overlap_hidden`` (share of the emulated communication hidden by bucketing; with
``overlap_vs_max`` and ``overlap_off_vs_sum``, the overlapped step against max(compute, comm) and
the deferred one against their sum)
and ``compression_speedup`` (fp32 hook step / fp16 hook step on the link), plus the link's
caption and the load average. ``benchmarks/bench_effects.py`` imports it; alone::

    python benchmarks/effects_link.py --json      # one JSON object on the last line
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def measure_link(link: str = "1GbE", nproc: int = 2) -> dict:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import disttutor
    from disttutor.links.fit import summary

    load_before = os.getloadavg()[0]
    res = disttutor.launch("emulated_link", nproc, {"link": link, "parts": ("probe", "overlap", "compression")},
                           stream=False, timeout=400)
    report = res.results[0]
    out = summary(report)
    out.update(link_caption=report["caption"], nproc=nproc, cores=disttutor.cores(),
               load_before=round(load_before, 2), load_after=round(os.getloadavg()[0], 2))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--link", default="1GbE")
    p.add_argument("--json", action="store_true", help="end with one JSON object on the last line")
    a = p.parse_args(argv)
    m = measure_link(a.link)
    print(f"{m['link_caption']}; load {m['load_before']:.1f} -> {m['load_after']:.1f} on {m['cores']} cores")
    print(f"probe link fitted back: alpha off by {m['emulated_alpha_err']:.1%}, beta by {m['emulated_beta_err']:.1%}")
    print(f"bucketed overlap hid {m['overlap_hidden']:.0%} of the emulated communication (step with overlap "
          f"{m['overlap_vs_max']:.2f}x max(compute, communication), without {m['overlap_off_vs_sum']:.2f}x their sum); "
          f"fp16 compression made the step {m['compression_speedup']:.2f}x faster")
    if a.json:
        print(json.dumps(m))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
