"""Fixtures: real `mezzanine worker` processes on loopback.

Environment (set by `clients/python/run-tests`):
- MEZZANINE_BIN: the mezzanine binary;
- MEZZANINE_CONFIG: a config with [[worker.tokens]] whose secrets are in
  MEZZANINE_TOKEN_READ, MEZZANINE_TOKEN_WRITE and MEZZANINE_TOKEN_ADMIN.
"""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


class Worker:
    def __init__(self):
        self.process = subprocess.Popen(
            [
                os.environ["MEZZANINE_BIN"],
                "--config",
                os.environ["MEZZANINE_CONFIG"],
                "worker",
                "--listen",
                "127.0.0.1:0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline()
        parts = line.split()
        if len(parts) < 3 or not parts[2].startswith("http"):
            self.process.kill()
            raise RuntimeError(f"the worker did not start: {line!r}")
        self.url = parts[2]

    def kill(self):
        self.process.kill()
        self.process.wait()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture
def workers():
    started = []

    def start(n=1):
        new = [Worker() for _ in range(n)]
        started.extend(new)
        return new

    yield start
    for w in started:
        w.stop()


@pytest.fixture
def tokens():
    return {
        scope: os.environ[f"MEZZANINE_TOKEN_{scope.upper()}"]
        for scope in ("read", "write", "admin")
    }
