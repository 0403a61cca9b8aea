"""Where the points of a sweep run: inline, a local process pool, or a dask cluster.

An executor maps a picklable top-level function over tasks and yields the results in
completion order. It never touches the results directory: the calling process writes
every point, so workers need no shared filesystem and results do not depend on which
executor computed them (the point function is deterministic in its config).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import sys
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

EXECUTORS: tuple[str, ...] = ("local", "serial", "dask")


class Executor(Protocol):
    name: str

    def map_unordered(
        self, fn: Callable[[Any], Any], tasks: Iterable[Any]
    ) -> Generator[Any, None, None]:
        """Yield ``fn(task)`` for every task, in completion order."""
        ...


class SerialExecutor:
    """Runs every task in this process (tests, debugging, ``--jobs 1``)."""

    name = "serial"

    def map_unordered(
        self, fn: Callable[[Any], Any], tasks: Iterable[Any]
    ) -> Generator[Any, None, None]:
        for task in tasks:
            yield fn(task)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """Pool-worker initializer: the kernel kills this worker when its parent dies (Linux
    ``PR_SET_PDEATHSIG``), so a ``kill -9`` of the sweep leaves no orphans."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


class LocalExecutor:
    """A process pool on this machine; at most ``2 * max_workers`` tasks in flight."""

    name = "local"

    def __init__(self, max_workers: int | None = None) -> None:
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"jobs={max_workers!r}: must be >= 1")
        self.max_workers = max_workers or os.cpu_count() or 1

    def map_unordered(
        self, fn: Callable[[Any], Any], tasks: Iterable[Any]
    ) -> Generator[Any, None, None]:
        it = iter(tasks)
        first = list(itertools.islice(it, 2 * self.max_workers))
        if not first:
            return
        # never more workers than tasks (forking 256 workers for 2 tasks costs seconds)
        workers = min(self.max_workers, len(first))
        pool = ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent)
        finished = False
        try:
            pending: set[Future[Any]] = {pool.submit(fn, task) for task in first}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    nxt = next(it, None)
                    if nxt is not None:
                        pending.add(pool.submit(fn, nxt))
                    yield fut.result()
            finished = True
        finally:
            if finished:
                pool.shutdown(wait=True)
            else:
                # Interrupted (Ctrl-C, an error, or the consumer stopped): drop queued work
                # and stop the workers now instead of waiting for their current points.
                # Finished points are already on disk; a rerun resumes from them.
                procs = list(getattr(pool, "_processes", {}).values())
                pool.shutdown(wait=False, cancel_futures=True)
                for proc in procs:
                    proc.terminate()


class DaskExecutor:
    """Submits tasks to a dask.distributed scheduler (an address or a ready Client)."""

    name = "dask"

    def __init__(self, scheduler: Any, *, connect_timeout_s: float = 10.0) -> None:
        if scheduler is None or scheduler == "":
            raise ValueError("--executor dask needs --scheduler ADDRESS (e.g. tcp://host:8786)")
        self.scheduler = scheduler
        self.connect_timeout_s = connect_timeout_s
        self._own = False

    def connect(self) -> None:
        """Connect now (fail fast with one line naming the address); idempotent."""
        from distributed import Client

        if isinstance(self.scheduler, Client):
            return
        try:
            self.scheduler = Client(self.scheduler, timeout=f"{self.connect_timeout_s}s")
            self._own = True
        except (OSError, TimeoutError, ValueError, TypeError) as exc:
            raise ValueError(
                f"--scheduler={self.scheduler!r}: cannot connect to a dask scheduler "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            ) from None

    def map_unordered(
        self, fn: Callable[[Any], Any], tasks: Iterable[Any]
    ) -> Generator[Any, None, None]:
        from distributed import as_completed

        self.connect()
        own, client = self._own, self.scheduler
        try:
            futures = client.map(fn, list(tasks), pure=False)
            for fut in as_completed(futures):
                yield fut.result()
                fut.release()
        finally:
            if own:
                client.close()


def make_executor(name: str, *, jobs: int | None = None, scheduler: Any = None) -> Executor:
    """An executor by CLI name; errors name the flag."""
    if scheduler is not None and name != "dask":
        raise ValueError(f"--scheduler={scheduler!r} is only used with --executor dask")
    if name == "local":
        return LocalExecutor(jobs)
    if name == "serial":
        return SerialExecutor()
    if name == "dask":
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise ValueError(
                "--executor dask needs dask.distributed: pip install 'capsim[dask]'"
            ) from None
        dask_ex = DaskExecutor(scheduler)
        dask_ex.connect()
        return dask_ex
    raise ValueError(f"--executor={name!r}: choose one of {EXECUTORS}")
