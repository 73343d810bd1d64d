"""bench/run.py's BENCHMARKS.md block: a run of some benches (`--only`) replaces only their sections."""

from pathlib import Path

from bench import run


def _block(tmp_path: Path, results, only: bool) -> str:
    out = tmp_path / "BENCHMARKS.md"
    if not out.exists():
        out.write_text("# Benchmarks\n\nHand-written.\n")
    run.write(out, run.section(results, run.earlier_sections(out) if only else None))
    return out.read_text()


def test_a_run_of_one_bench_replaces_its_section_and_keeps_the_others_as_they_were(tmp_path):
    first, second = run.BENCHES[0], run.BENCHES[1]
    _block(tmp_path, [(first, "first: 1.0\n", 0, 3.0), (second, "second: 2.0\n", 0, 4.0)], only=False)
    text = _block(tmp_path, [(second, "second: 9.0\n", 1, 5.0)], only=True)
    assert text.startswith("# Benchmarks\n\nHand-written.\n")
    assert "first: 1.0" in text and "`python bench/sqs_depth.py`: 3 s, target met." in text  # kept verbatim
    assert "second: 9.0" in text and "second: 2.0" not in text
    assert text.count("(Re-run alone at commit") == 1 and text.count(f"### {second.title}") == 1
    assert text.index(f"### {first.title}") < text.index(f"### {second.title}")  # in BENCHES order
    assert "Every bench below ran in its own process" in text  # the full run's heading stays


def test_a_full_run_writes_every_section_afresh(tmp_path):
    first = run.BENCHES[0]
    _block(tmp_path, [(first, "first: 1.0\n", 0, 3.0)], only=False)
    text = _block(tmp_path, [(first, "first: 2.0\n", 0, 3.0)], only=False)
    assert "first: 2.0" in text and "first: 1.0" not in text and "(Re-run alone" not in text
