"""A loopback TCP proxy that plays the network between a worker and its database, so
that tests can cut the worker off the ways a real network does (issue 23)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from types import TracebackType


class TcpProxy:
    """Forwards each connection made to :attr:`port` to ``host:port``, until told to fail.

    * :meth:`hold` partitions the network: the bytes of every connection wait, in both
      directions, as unacknowledged TCP segments do, and flow again in order after
      :meth:`heal`. A COMMIT sent before the hold is acknowledged only after the heal.
    * :meth:`blackhole` cuts it silently: nothing gets through and nothing is closed, so
      each end still sees a live peer (the kernel acknowledges) that says nothing more.
      A connection that lost bytes to the cut stays silent for good, as after a real
      cut; connections made during the cut are accepted and never answered; those made
      after :meth:`heal` work.
    * :meth:`freeze_on` blackholes the proxy the moment the client sends a given
      message (which is lost too), to cut a worker off in the middle of a transaction;
      :attr:`frozen` is set then.
    """

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._flowing = threading.Event()
        self._flowing.set()
        self._blackholed = threading.Event()
        self._freeze_on: bytes | None = None
        #: Set once :meth:`freeze_on`'s message stopped the forwarding.
        self.frozen = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._start(self._accept)

    def hold(self) -> None:
        """Partition the network: bytes wait until :meth:`heal`."""
        self._flowing.clear()

    def blackhole(self) -> None:
        """Cut the network silently: bytes are lost, connections stay open."""
        self._blackholed.set()

    def freeze_on(self, message: bytes) -> None:
        """Blackhole the proxy when the client next sends ``message`` (dropping it)."""
        self._freeze_on = message

    def heal(self) -> None:
        """End a hold or a blackhole: held bytes flow, new connections work."""
        self._freeze_on = None
        self._blackholed.clear()
        self._flowing.set()

    def close(self) -> None:
        """Close every connection and wait for the proxy's threads; safe to repeat."""
        with self._lock:
            self._closed = True
            sockets = [self._listener, *self._sockets]
        self._flowing.set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(timeout=10)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name="tcp-proxy", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _keep(self, sock: socket.socket) -> bool:
        """Track ``sock`` for :meth:`close`; False (and closed) if the proxy is closed."""
        with self._lock:
            if not self._closed:
                self._sockets.append(sock)
                return True
        sock.close()
        return False

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._keep(client) or self._blackholed.is_set():
                continue  # accepted, never answered
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            if not self._keep(server):
                return
            lost = threading.Event()  # set once this connection lost bytes to a cut
            self._start(self._pump, client, server, lost, True)
            self._start(self._pump, server, client, lost, False)

    def _pump(
        self, source: socket.socket, sink: socket.socket, lost: threading.Event, from_client: bool
    ) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            freeze_on = self._freeze_on
            if from_client and freeze_on is not None and freeze_on in data:
                self._blackholed.set()
                self.frozen.set()
            self._flowing.wait()
            if self._blackholed.is_set():
                lost.set()
            if lost.is_set():
                if not data:
                    return
                continue  # cut off: nothing gets through, and no end is told
            try:
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
            except OSError:
                return


def postgres_proxy(dsn: str, **params: str) -> tuple[TcpProxy, str]:
    """A proxy in front of the PostgreSQL server of ``dsn``, and a DSN that reaches the
    same database through it (with ``params`` added to the connection string)."""
    from psycopg import conninfo

    address = conninfo.conninfo_to_dict(dsn)
    proxy = TcpProxy(str(address.get("host") or "127.0.0.1"), int(address.get("port") or 5432))
    return proxy, conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port, **params)
