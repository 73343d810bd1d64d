"""`make bench`: run every benchmark and write its figures into BENCHMARKS.md.

Each bench runs in its own process (as its command line shows, so that a reader can repeat one) with
`--report FILE`, where it writes its results as Markdown. The figures, what was run, on what machine
and at which commit go into BENCHMARKS.md between two markers; everything outside them (the analysis
of earlier runs) is left as it is. A bench that fails (its target missed) is still reported, and makes
this command fail.

    python bench/run.py [--only throughput,cost] [--with-soak] [--out BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START = "<!-- make bench: start (written by bench/run.py; edit outside the markers) -->"
END = "<!-- make bench: end -->"


@dataclass(frozen=True)
class Bench:
    name: str
    title: str
    args: tuple[str, ...]


BENCHES = (
    Bench("sqs_depth", "Local stack: SQS at depth (issue 2)", ("bench/sqs_depth.py",)),
    Bench("precompile", "precompile_email against raw Liquid (issue 3)", ("bench/precompile.py",)),
    Bench("send_rate", "send_emails at its rate (issue 4)", ("bench/send_rate.py",)),
    Bench(
        "throughput", "End-to-end throughput of the local pipeline, unlimited rate (issue 8)", ("bench/throughput.py",)
    ),
    Bench("cost", "AWS requests and cost per email (issue 8)", ("bench/cost.py",)),
    Bench("cpu_per_email", "send_emails' CPU per email, by part (issue 22)", ("bench/cpu_per_email.py",)),
    Bench(
        "many_drainers",
        "One tenant at 1,000/s: several drainers on one queue (issue 22)",
        ("bench/many_drainers.py", "--rate", "1000", "--seconds", "10"),
    ),
    Bench(
        "first_email",
        "A new tenant's first email, on AWS's timing (issue 22)",
        ("bench/first_email.py", "--trials", "5", "--phase-s", "10"),
    ),
    Bench("digest_assembly", "Digests at volume (issue 23)", ("bench/digest_assembly.py",)),
    Bench("webhooks", "Webhook deliveries: cost per event and delay (issue 24)", ("bench/webhooks.py",)),
    Bench("sweeper", "The sweeper: queues checked per second (issue 36)", ("bench/sweeper.py",)),
    Bench(
        "tenant_api",
        "The tenant API's reads: DynamoDB requests, read capacity and latency (issue 41)",
        ("bench/tenant_api.py",),
    ),
    Bench(
        "console_pages",
        "The console's pages: a 100,000-recipient campaign's page, bytes and requests (issue 48)",
        ("bench/console_pages.py",),
    ),
    Bench(
        "upload_fanout",
        "Sending without code: 1,000,000 uploaded rows to every message on PrecompileEmail (issue 50)",
        ("bench/upload_fanout.py",),
    ),
)
SOAK = Bench("soak", "Soak: 50 tenants under faults, seed 7 (issue 8)", ("bench/soak.py", "--seed", "7"))


def machine() -> str:
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = 0.0
    versions = ", ".join(
        f"{p} {metadata.version(p)}" for p in ("moto", "boto3", "python-liquid", "chalice", "pynamodb")
    )
    return (
        f"{os.cpu_count()} cores, {mem_gib:.0f} GiB, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}; {versions}"
    )


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty.strip() else "")
    except OSError:
        return "unknown"


def run_one(bench: Bench, tmp: Path) -> tuple[str, int, float]:
    report = tmp / f"{bench.name}.md"
    started = time.monotonic()
    print(f"== {bench.title}: python {' '.join(bench.args)}", flush=True)
    proc = subprocess.run([sys.executable, *bench.args, "--report", str(report)], cwd=ROOT)
    took = time.monotonic() - started
    text = report.read_text() if report.exists() else "(no figures: the bench stopped before writing them)\n"
    return text, proc.returncode, took


def section(results: list[tuple[Bench, str, int, float]], kept: dict[str, str] | None = None) -> str:
    """The generated block: every bench's section, in BENCHES order.

    `kept`: the sections of an earlier run (by title) for the benches this run did not run (`--only`); the
    block's heading keeps that run's date, and each section run now says when it was run alone."""
    partial = kept is not None
    lines = [START, "## Latest `make bench` run", ""]
    if partial and kept and "" in kept:
        lines.append(kept[""].strip())
    else:
        lines += [
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}; {machine()}.",
            "Every bench below ran in its own process, one after the other; the command under each title repeats it.",
        ]
    lines.append("")
    ran = {bench.title: (bench, text, code, took) for bench, text, code, took in results}
    for bench in (*BENCHES, SOAK):
        if bench.title in ran:
            lines += _bench_section(*ran[bench.title], alone=partial)
        elif kept and bench.title in kept:
            lines += [f"### {bench.title}", "", kept[bench.title].strip(), ""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def _bench_section(bench: Bench, text: str, code: int, took: float, *, alone: bool) -> list[str]:
    status = "target met" if code == 0 else f"**exit {code}: a target was missed or the run failed**"
    when = f"(Re-run alone at commit {commit()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.)"
    return [
        f"### {bench.title}",
        "",
        *([when, ""] if alone else []),
        f"`python {' '.join(bench.args)}`: {took:.0f} s, {status}.",
        "",
        text.rstrip(),
        "",
    ]


def earlier_sections(out: Path) -> dict[str, str]:
    """The generated block's sections now in `out`, by title (`""`: the text under its heading)."""
    text = out.read_text() if out.exists() else ""
    if START not in text or END not in text:
        return {}
    block = text.split(START, 1)[1].split(END, 1)[0]
    body = block.split("## Latest `make bench` run", 1)[-1]
    head, *chunks = body.split("\n### ")
    sections = {"": head}
    for chunk in chunks:
        name, _, rest = chunk.partition("\n")
        sections[name.strip()] = rest
    return sections


def write(out: Path, block: str) -> None:
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + block + ("\n" + tail if tail else "")
    else:
        first = text.find("\n## ")
        text = text + "\n" + block if first < 0 else text[: first + 1] + block + "\n" + text[first + 1 :]
    out.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated bench names: " + ", ".join(b.name for b in BENCHES))
    ap.add_argument("--with-soak", action="store_true", help="also run the soak test (about 30 minutes)")
    ap.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    benches = list(BENCHES) + ([SOAK] if args.with_soak else [])
    if args.only:
        wanted = set(args.only.split(","))
        benches = [b for b in benches if b.name in wanted]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for bench in benches:
            text, code, took = run_one(bench, Path(tmp))
            results.append((bench, text, code, took))
    write(args.out, section(results, earlier_sections(args.out) if args.only else None))
    failed = [b.name for b, _t, code, _s in results if code]
    print(f"wrote {args.out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
