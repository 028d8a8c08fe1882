"""A throwaway PostgreSQL server for tests and benchmarks, started and stopped by the caller.

Uses Debian's server binaries (``apt-get install postgresql``: ``/usr/lib/postgresql/<N>/bin``). ``initdb``
refuses to run as root, so as root the server runs as the ``postgres`` system user (``runuser``) in a
folder that user owns; as anyone else it runs as that user. It listens on 127.0.0.1 on a free port
and on a socket in its own folder, trusts local connections, and is removed on ``stop()``.

Why not ``pytest-postgresql``: its executor runs ``pg_ctl`` as the current user with no way to switch
to another, so it cannot start a server as root (which CI is).

Example:
    >>> server = PostgresServer.start()                      # doctest: +SKIP
    >>> url = server.create_database("t1")                   # doctest: +SKIP
    >>> server.stop()                                        # doctest: +SKIP
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = "apt-get update && apt-get install -y postgresql"
PGVECTOR_HINT = "apt-get install -y postgresql-15-pgvector, or build ../shared/vendor/pgvector-0.8.6.tar.gz (.ci/run)"


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<N>/bin`` with ``pg_ctl``, or where ``pg_ctl`` is on PATH."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if candidates:
        return candidates[-1].parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).resolve().parent if on_path else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One running server; ``start()`` makes it, ``stop()`` removes it with its data."""

    def __init__(self, bin_dir: Path, folder: Path, port: int, as_user: str | None) -> None:
        self.bin_dir = bin_dir
        self.folder = folder
        self.port = port
        self.as_user = as_user
        self.data = folder / "data"
        self.log = folder / "server.log"

    @classmethod
    def start(cls, *, fsync: bool = False, extra: tuple[str, ...] = ()) -> PostgresServer:
        """Initialize and start a server. ``fsync=False`` for tests (a killed client, never a killed server)."""
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise FileNotFoundError(f"no PostgreSQL server binaries (pg_ctl): {INSTALL_HINT}")
        as_user = "postgres" if os.geteuid() == 0 else None
        folder = Path(tempfile.mkdtemp(prefix="ragidx-pg-"))
        if as_user is not None:
            entry = pwd.getpwnam(as_user)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        server = cls(bin_dir, folder, _free_port(), as_user)
        try:
            server._run("initdb", "-D", str(server.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale")
            options = [
                f"-p {server.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={folder}",
                "-c max_connections=100",
                *([] if fsync else ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]),
                *extra,
            ]
            server._run("pg_ctl", "-D", str(server.data), "-l", str(server.log), "-o", " ".join(options), "-w", "start")
        except BaseException:
            server.stop()
            raise
        return server

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        if self.as_user is not None:
            command = ["runuser", "-u", self.as_user, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, cwd=self.folder, timeout=120)
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} failed ({result.returncode}): {result.stderr.strip()}\n{log}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement in autocommit (CREATE DATABASE, pg_terminate_backend …); rows if any."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=database, autocommit=True
        ) as conn:
            cur = conn.execute(sql)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []

    def create_database(self, name: str) -> str:
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            except RuntimeError:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
