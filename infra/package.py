"""`moonsend package`: the deployable template and bundle of one stage, checked and measured.

Steps, each one a plain function so that tests run them too:

1. write the stage's IAM policy files (infra.iam) where Chalice reads them;
2. write the merge template (infra.cfn) and run `chalice package --merge-template`; write the data
   stack's template (the tables and the links' key, which outlive the app's stack) beside it;
3. point the SNS subscriptions at the template's own topics (a merge cannot replace Chalice's value);
4. prune the bundle: botocore ships the models of 400-odd AWS services, the functions call eight;
5. add the bundle's bytecode (Lambda's code directory is read-only, so it is never cached there);
6. measure the bundle: zipped and unzipped size, and `import app` in a fresh interpreter that sees only
   the bundle and the standard library (a cold start's import cost), and list any dev-only package.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from infra.api_gateway import add_own_answers
from infra.cfn import data_template, merge_template, subscribe_to_own_topics
from infra.iam import write_policies

ROOT = Path(__file__).resolve().parents[1]
# botocore service models the Lambdas load; every other model is dropped (a test checks that every
# client the code makes is here: Secrets Manager, for the link-signing key, once was not, and KMS, for the
# tenants' SES secrets, was not either).
KEEP_SERVICES = frozenset(
    {"dynamodb", "sqs", "sesv2", "s3", "lambda", "cloudwatch", "sns", "sts", "secretsmanager", "scheduler", "kms"}
)
DEV_ONLY = ("moto", "pytest", "_pytest", "ruff", "rich", "werkzeug", "cfnlint", "samtranslator", "flask")


@dataclass(frozen=True)
class PackageReport:
    stage: str
    template: str
    bundle: str
    zipped_mb: float
    unzipped_mb: float
    pruned_mb: float  # zipped megabytes of botocore models removed
    import_app_ms: float
    dev_only_packages: list[str]
    data_template: str = ""  # the data stack's template (infra.cfn.data_template), deployed before the app's


def run_chalice_package(stage: str, out_dir: Path, merge_file: Path) -> None:
    chalice = Path(sys.executable).with_name("chalice")
    env = {**os.environ}
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # chalice package insists on a region; the template has none
    if out_dir.exists():
        shutil.rmtree(out_dir)
    subprocess.run(
        [str(chalice), "package", "--stage", stage, "--merge-template", str(merge_file), str(out_dir)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )


def prune_bundle(bundle: Path) -> float:
    """Drop the botocore models the functions never load; returns the zipped megabytes saved."""
    before = bundle.stat().st_size
    pruned = bundle.with_suffix(".pruned.zip")
    with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(pruned, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            parts = info.filename.split("/")
            if parts[:2] == ["botocore", "data"] and len(parts) > 3 and parts[2] not in KEEP_SERVICES:
                continue
            dst.writestr(info, src.read(info))
    pruned.replace(bundle)
    return (before - bundle.stat().st_size) / 1e6


def precompile_bundle(bundle: Path) -> None:
    """Add bytecode for every module, so a cold start does not compile the bundle.

    Lambda's code directory is read-only: without `.pyc` files in the bundle, Python compiles every
    module it imports on every cold start (about 1.5 s of a 2 s `import app`). The bytecode is
    `unchecked-hash` (no source timestamps to match after the zip is unpacked) and made by this
    interpreter, whose version must be the functions' runtime (python3.11)."""
    import compileall
    import py_compile

    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(bundle) as z:
            z.extractall(tmp)
            infos = {i.filename: i for i in z.infolist()}
        compileall.compile_dir(tmp, quiet=2, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH, workers=0)
        rebuilt = bundle.with_suffix(".pyc.zip")
        with zipfile.ZipFile(rebuilt, "w", zipfile.ZIP_DEFLATED) as dst:
            for path in sorted(Path(tmp).rglob("*")):
                if path.is_file():
                    name = path.relative_to(tmp).as_posix()
                    info = infos.get(name)
                    if info is not None:
                        dst.writestr(info, path.read_bytes())
                    else:
                        dst.write(path, name)
        rebuilt.replace(bundle)


def measure_bundle(bundle: Path, stage: str) -> tuple[float, float, list[str]]:
    """(unzipped MB, milliseconds to `import app` in a fresh interpreter, dev-only packages found)."""
    with zipfile.ZipFile(bundle) as z:
        unzipped = sum(i.file_size for i in z.infolist()) / 1e6
        tops = {i.filename.split("/")[0] for i in z.infolist()}
    dev_only = sorted(t for t in tops if t in DEV_ONLY)
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(bundle) as z:
            z.extractall(tmp)
        code = (
            "import sys, time; sys.path.insert(0, sys.argv[1]); t = time.perf_counter(); import app; "
            "print(round((time.perf_counter() - t) * 1000, 1))"
        )
        env = {
            "PATH": os.environ.get("PATH", ""),
            "MOONSEND_STAGE": stage,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
        }
        # -S: no site-packages, so only the bundle and the standard library can be imported (as on Lambda).
        out = subprocess.run(
            [sys.executable, "-S", "-c", code, tmp], cwd=tmp, env=env, check=True, capture_output=True, text=True
        )
    return unzipped, float(out.stdout.strip().splitlines()[-1]), dev_only


def inputs_digest() -> str:
    """A digest of everything a package is made from: the code, Chalice's config, the generators, the pins
    (Chalice's own among the dev ones: it writes the template) and the interpreter (its bytecode)."""
    files = [ROOT / n for n in ("app.py", "requirements.txt", "requirements-dev.txt", "pyproject.toml")]
    files.append(ROOT / ".chalice" / "config.json")
    files += sorted(f for f in (ROOT / "chalicelib").rglob("*") if f.is_file() and "__pycache__" not in f.parts)
    files += [ROOT / "infra" / name for name in ("api_gateway.py", "cfn.py", "iam.py", "package.py")]
    h = hashlib.sha256(sys.version.encode())
    for f in files:
        h.update(f.relative_to(ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


@contextlib.contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    """One packaging (or use of a package) of a folder at a time, across processes (the soak's shards)."""
    import fcntl

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with (out_dir.parent / f".{out_dir.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _cached(out_dir: Path, digest: str) -> PackageReport | None:
    report_file = out_dir / "package-report.json"
    try:
        found = json.loads(report_file.read_text())
        if found.pop("inputs", None) != digest:
            return None
        report = PackageReport(**found)
    except (OSError, ValueError, TypeError):  # none yet, or written by another version of this module
        return None
    made = (report.template, report.bundle, report.data_template)
    return report if all(name and Path(name).exists() for name in made) else None


@contextlib.contextmanager
def packaged(stage: str, out_dir: Path | None = None) -> Iterator[PackageReport]:
    """The stage's package, made again only if one of its inputs changed since the last one in `out_dir`,
    and kept as it is (no other process packages into that folder) until the block ends.

    The local stack is created from the package (`moonsend up`), so a start after a code change
    packages (about 20 s), and a start without one takes the package as it is."""
    out_dir = out_dir or ROOT / "build" / stage
    with _locked(out_dir):
        yield _cached(out_dir, inputs_digest()) or _package(stage, out_dir)


def package(stage: str, out_dir: Path | None = None) -> PackageReport:
    out_dir = out_dir or ROOT / "build" / stage
    with _locked(out_dir):
        return _package(stage, out_dir)


def _package(stage: str, out_dir: Path) -> PackageReport:
    digest = inputs_digest()
    write_policies(stage)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    merge_file = out_dir.parent / f"{stage}-merge.json"
    merge_file.write_text(json.dumps(merge_template(stage), indent=2), encoding="utf-8")
    run_chalice_package(stage, out_dir, merge_file)
    template = out_dir / "sam.json"
    template.write_text(
        json.dumps(add_own_answers(subscribe_to_own_topics(json.loads(template.read_text()), stage)), indent=2),
        encoding="utf-8",
    )
    data = out_dir / "data.json"
    data.write_text(json.dumps(data_template(stage), indent=2), encoding="utf-8")
    bundle = out_dir / "deployment.zip"
    pruned = prune_bundle(bundle)
    precompile_bundle(bundle)
    unzipped, import_ms, dev_only = measure_bundle(bundle, stage)
    report = PackageReport(
        stage=stage,
        template=str(template),
        bundle=str(bundle),
        zipped_mb=round(bundle.stat().st_size / 1e6, 2),
        unzipped_mb=round(unzipped, 2),
        pruned_mb=round(pruned, 2),
        import_app_ms=import_ms,
        dev_only_packages=dev_only,
        data_template=str(data),
    )
    (out_dir / "package-report.json").write_text(
        json.dumps({**asdict(report), "inputs": digest}, indent=2), encoding="utf-8"
    )
    return report
