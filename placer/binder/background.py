"""Writes that must never hold up a binding: Events and role labels, sent by one thread.

Modelled on client-go's event broadcaster as kube-scheduler uses it: recording only queues
(bounded; beyond the bound a write is dropped and counted), one thread sends, rate-limited, and
repeats of a still-queued event on the same pod are folded into it (the newest message, a
``count``). While the binder is busy (bindings in flight, or an arrival being placed: the
binder says which) the sender slows to ``busy_qps``, so on a small control plane the API
server's time goes to the bindings first and the Events follow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the Kubernetes client is imported by what talks to a cluster
    from placer.kube.adapter import EventType, KubeAdapter

log = logging.getLogger(__name__)

DEFAULT_QPS = 20.0
DEFAULT_BURST = 40
DEFAULT_BUSY_QPS = 2.0
DEFAULT_MAX_QUEUED = 10_000


class LaterText:
    """Text made the first time it is read, once, whichever thread reads it: an Event's
    message that takes a verdict to write (a batch's survival summary) is then made by the
    thread that sends the Event, off the path from a solve to its first write."""

    def __init__(self, make: Callable[[], str]) -> None:
        self._make: Callable[[], str] | None = make
        self._text = ""
        self._lock = threading.Lock()

    def __str__(self) -> str:
        with self._lock:
            if self._make is not None:
                self._text, self._make = self._make(), None
            return self._text


Text = str | LaterText
"""An Event's message: ``str()`` of it when it is sent."""


class Write(Protocol):
    kind: str

    def send(self, adapter: KubeAdapter) -> None: ...

    def merge(self, newer: Write) -> Write: ...


@dataclass
class EventWrite:
    pod: Mapping[str, Any]
    reason: str
    message: Text
    type: EventType
    count: int = 1
    kind: str = "event"

    def send(self, adapter: KubeAdapter) -> None:
        message = str(self.message)
        adapter.record_event(self.pod, self.reason, message, self.type, count=self.count)

    def merge(self, newer: Write) -> Write:
        assert isinstance(newer, EventWrite)
        return EventWrite(newer.pod, newer.reason, newer.message, newer.type, self.count + 1)


@dataclass
class CallWrite:
    """A write computed when it is sent (a label from the pod as the cache has it then)."""

    call: Callable[[], None]
    kind: str = "label"

    def send(self, adapter: KubeAdapter) -> None:
        self.call()

    def merge(self, newer: Write) -> Write:
        return newer


class BackgroundWrites:
    """A keyed FIFO of writes and the thread that sends them; ``record`` never blocks."""

    def __init__(
        self,
        adapter: KubeAdapter,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        busy_qps: float = DEFAULT_BUSY_QPS,
        max_queued: int = DEFAULT_MAX_QUEUED,
        busy: Callable[[], bool] = lambda: False,
        on_drop: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if qps <= 0 or busy_qps <= 0 or burst < 1:
            raise ValueError("qps and busy_qps must be positive, burst at least 1")
        self.adapter = adapter
        self.qps, self.burst, self.busy_qps = qps, burst, busy_qps
        self.max_queued = max_queued
        self.busy = busy
        self.on_drop = on_drop
        self.clock = clock
        self._queue: OrderedDict[Hashable, Write] = OrderedDict()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tokens = float(burst)
        self._refilled = clock()
        self.sent = 0
        self.dropped = 0

    # -- recording -------------------------------------------------------------------------

    def event(
        self,
        pod: Mapping[str, Any],
        reason: str,
        message: Text,
        type_: EventType = "Normal",
        supersedes: tuple[tuple[str, EventType], ...] = (),
    ) -> None:
        """Queue an Event; still-queued ones of the same pod with a (reason, type) in
        ``supersedes`` are dropped: a pod placed needs no word that it was waiting."""
        meta = pod.get("metadata") or {}
        who = (meta.get("namespace"), meta.get("name"), meta.get("uid"))
        if supersedes:
            with self._cond:
                for old_reason, old_type in supersedes:
                    self._queue.pop(("event", *who, old_reason, old_type), None)
        self._put(("event", *who, reason, type_), EventWrite(pod, reason, message, type_))

    def call(self, key: Hashable, call: Callable[[], None], kind: str = "label") -> None:
        """Queue ``call``; a later call with the same key replaces it in its place."""
        self._put(("call", key), CallWrite(call, kind))

    def _put(self, key: Hashable, write: Write) -> None:
        with self._cond:
            queued = self._queue.get(key)
            if queued is not None:
                self._queue[key] = queued.merge(write)
                return
            if len(self._queue) >= self.max_queued:
                self.dropped += 1
                dropped = write.kind
            else:
                self._queue[key] = write
                self._cond.notify()
                return
        log.warning("background write queue full (%d): %s dropped", self.max_queued, dropped)
        if self.on_drop is not None:
            self.on_drop(dropped)

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    # -- sending ---------------------------------------------------------------------------

    def _pop(self) -> Write | None:
        with self._cond:
            if not self._queue:
                return None
            return self._queue.popitem(last=False)[1]

    def _send(self, write: Write) -> None:
        try:
            write.send(self.adapter)
        except Exception as exc:  # best effort: an Event or a label is never worth a crash
            log.warning("background %s not written: %s", write.kind, exc)
        self.sent += 1

    def flush(self) -> int:
        """Send everything queued now, in this thread, unthrottled; how many were sent."""
        count = 0
        while (write := self._pop()) is not None:
            self._send(write)
            count += 1
        return count

    def _take_token(self) -> bool:
        """Wait for the rate limiter; False if told to stop meanwhile."""
        while not self._stop.is_set():
            now = self.clock()
            rate = self.busy_qps if self.busy() else self.qps
            self._tokens = min(float(self.burst), self._tokens + (now - self._refilled) * rate)
            self._refilled = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            self._stop.wait(min(0.1, (1 - self._tokens) / rate))
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    self._cond.wait(0.5)
            if not self._take_token():
                return
            write = self._pop()
            if write is not None:
                self._send(write)

    def start(self) -> BackgroundWrites:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="background-writes", daemon=True)
            self._thread.start()
        return self

    def stop(self, drain_seconds: float = 5.0) -> tuple[int, int]:
        """Stop the thread, then send what is left for up to ``drain_seconds`` (SIGTERM); how
        many were sent so, and how many were left unsent.

        The rate limit defers these writes well past the bindings (a burst of 1,500 pods
        queues an Event and a role label for each: 150 s at 20 a second), so a binder stopped
        after a burst sends most of them here, and says so: a role label left unsent is
        written by the next leader from the pod's role annotation; an Event is lost."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        started = time.monotonic()
        deadline = started + drain_seconds
        sent = 0
        while time.monotonic() < deadline and (write := self._pop()) is not None:
            self._send(write)
            sent += 1
        left = self.queued
        if sent or left:
            log.log(
                logging.WARNING if left else logging.INFO,
                "background writes at shutdown: %d sent in %.1f s, %d left unsent",
                sent, time.monotonic() - started, left,
            )  # fmt: skip
        return sent, left
