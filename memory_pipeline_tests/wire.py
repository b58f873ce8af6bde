"""Round trips counted on the wire, for the tests and the benchmark: a TCP relay in front of
PostgreSQL that counts the queries its clients send, and a Redis connection class that counts
what it sends. Both see every round trip, including those no SQLAlchemy event reports (a pool's
pre-ping, psycopg2's implicit BEGIN, the ROLLBACK of a connection going back to its pool)."""

from __future__ import annotations

import socket
import struct
import threading
from typing import ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis

_SSL_REQUEST, _GSSENC_REQUEST = 80877103, 80877104


class PgWire:
    """A relay on 127.0.0.1 to a PostgreSQL server. ``queries`` holds the text of every simple-
    query ('Q') message clients sent through it, in order: psycopg2 speaks only that protocol, so
    each is one round trip (BEGIN, a ping's SELECT 1 and ROLLBACK each count)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 5432):
        self.upstream = (host, port)
        self.queries: list[str] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        """``url`` (a database on the upstream server) through this relay, without TLS (the relay
        reads the protocol)."""
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query, keep_blank_values=True)) | {"sslmode": "disable"}
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))

    def count(self) -> int:
        with self._lock:
            return len(self.queries)

    def since(self, mark: int) -> list[str]:
        with self._lock:
            return self.queries[mark:]

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._client_to_server, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _client_to_server(self, src: socket.socket, dst: socket.socket) -> None:
        buf, started = b"", False
        try:
            while data := src.recv(65536):
                # recorded before forwarded: a client that has its reply finds its query counted
                buf += data
                while True:  # every complete message in the buffer
                    if not started:  # untyped: an SSL/GSS request, then the startup message
                        if len(buf) < 8:
                            break
                        (length, code) = struct.unpack("!II", buf[:8])
                        if len(buf) < length:
                            break
                        started = code not in (_SSL_REQUEST, _GSSENC_REQUEST)
                        buf = buf[length:]
                        continue
                    if len(buf) < 5:
                        break
                    (length,) = struct.unpack("!I", buf[1:5])
                    if len(buf) < 1 + length:
                        break
                    if buf[:1] == b"Q":
                        with self._lock:
                            self.queries.append(buf[5:length].rstrip(b"\0").decode("utf-8", "replace"))
                    buf = buf[1 + length :]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class CountingRedisConnection(redis.Connection):
    """A Redis connection that records what it sends: one send is one round trip (a pipeline or an
    MGET sends once, however many keys)."""

    sent: ClassVar[list[bytes]] = []

    def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        parts = command if isinstance(command, list) else [command]
        CountingRedisConnection.sent.append(b"".join(p if isinstance(p, bytes) else bytes(p) for p in parts))
        return super().send_packed_command(command, check_health)


def count_redis_sends(client: redis.Redis, name: str) -> None:
    """``client``'s connections count what they send from now on (connected and named first, so the
    handshake is not counted)."""
    client.connection_pool.connection_class = CountingRedisConnection
    client.connection_pool.connection_kwargs["client_name"] = name
    client.connection_pool.disconnect()
    assert client.ping()
    CountingRedisConnection.sent.clear()
