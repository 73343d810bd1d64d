"""Emulator: a background thread that calls `tick()` at a fixed interval until stopped (AWS's clocks)."""

from __future__ import annotations

import sys
import threading


class Periodic:
    """Base for the runtime's clocks (alarm evaluation, schedules)."""

    name = "periodic"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=self.name)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception as exc:
                if not self._stop.is_set():
                    # To stderr, as every stand-in's own trouble: a command's output (JSON) stays its own.
                    print(f"[{self.name}] tick failed: {exc}", file=sys.stderr, flush=True)
