"""A local server speaking the Hugging Face Hub's HTTP API, for pulls without the internet.

What `huggingface_hub` uses of the real hub: repo info (`/api/models/ORG/REPO`), the tree listing
(`/api/models/ORG/REPO/tree/REV`, with LFS sha256 and git blob ids), and `resolve` URLs answering
HEAD and GET with `X-Repo-Commit`, `ETag`/`X-Linked-Etag`, `X-Linked-Size` and `Range`. Missing
repos and files answer 404 with the hub's `X-Error-Code`. Knobs for tests: cut a file's first
download after N bytes, serve bytes that do not match the advertised checksum, limit the rate,
answer a `Range` with the whole file (as a server without range support does). Knobs of a hostile
hub: list a file under another path (a traversal, say) and serve it at that path's URL, send any
ETag or X-Repo-Commit.
Point a client at it with `HF_ENDPOINT=http://127.0.0.1:PORT`; `start(tls=context)` serves HTTPS
instead, as the real hub is reached.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_FROM = 1024  # files at least this big are LFS files, as on the hub (which uses 10 MB)


@dataclass
class HubFile:
    path: str
    source: Path
    size: int
    sha256: str
    git_oid: str

    @classmethod
    def of(cls, path: str, source: Path) -> HubFile:
        sha, size = hashlib.sha256(), source.stat().st_size
        git = hashlib.sha1(b"blob %d\0" % size)
        with open(source, "rb") as handle:
            while block := handle.read(1 << 22):
                sha.update(block)
                git.update(block)
        return cls(path, source, size, sha.hexdigest(), git.hexdigest())

    @property
    def lfs(self) -> bool:
        return self.size >= LFS_FROM

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid


class Hub:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.repos: dict[str, dict[str, HubFile]] = {}
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Range
        self.cut_after: dict[str, int] = {}  # path in repo → bytes sent before the first cut
        self.corrupt: set[str] = set()  # paths served with one byte changed
        self.rate: float | None = None  # bytes per second, None for as fast as possible
        self.ignore_range = False  # answer every GET with 200 and the whole file
        self.private: dict[str, str] = {}  # repo → the token it answers to
        self.listed_as: dict[str, str] = {}  # path in repo → the path the tree listing shows
        self.etags: dict[str, str] = {}  # path in repo → the ETag (and X-Linked-Etag) sent
        self.commit = COMMIT  # the X-Repo-Commit of every file
        self._server: ThreadingHTTPServer | None = None

    def add(self, repo: str, path: str, data: bytes | Path) -> HubFile:
        if isinstance(data, bytes):
            source = self.root / repo.replace("/", "--") / path
            source.parent.mkdir(parents=True, exist_ok=True)
            source.write_bytes(data)
        else:
            source = data
        f = HubFile.of(path, source)
        self.repos.setdefault(repo, {})[path] = f
        return f

    @property
    def url(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self._server.server_address[1]}"

    def start(self, tls: ssl.SSLContext | None = None) -> Hub:
        """Serve on a free port of 127.0.0.1; over HTTPS with `tls`, a server-side context."""
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._scheme = "https" if tls else "http"
        if tls:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def gets(self, path: str) -> list[str | None]:
        """The Range header of every GET of `path`'s resolve URL, in order."""
        return [r for m, p, r in self.requests if m == "GET" and p.endswith("/" + path)
                and "/resolve/" in p]


class _Handler(BaseHTTPRequestHandler):
    hub: Hub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _json(self, status: int, body, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _missing(self, code: str, message: str) -> None:
        self._json(404, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).path)
        self.hub.requests.append((self.command, path, self.headers.get("Range")))
        aliased = self._aliased(path)
        if aliased:
            return self._resolve(*aliased)
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/[^/]+)?$", path)
        if m:
            return self._info(m.group(1))
        m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/[^/]+(?:/(.*))?$", path)
        if m:
            return self._tree(m.group(1), m.group(2) or "")
        m = re.match(r"^/([^/]+/[^/]+)/resolve/[^/]+/(.+)$", path)
        if m:
            return self._resolve(m.group(1), m.group(2))
        self._missing("EntryNotFound", f"no route {path}")

    def _aliased(self, path: str) -> tuple[str, str] | None:
        """(repo, path) of the file listed under another path whose resolve URL is `path`, as a
        client sends it (dot segments removed) or not."""
        for repo, files in self.hub.repos.items():
            for real, listed in self.hub.listed_as.items():
                url = f"/{repo}/resolve/main/{listed}"
                if real in files and path in (url, posixpath.normpath(url)):
                    return repo, real
        return None

    def _files(self, repo: str) -> dict[str, HubFile] | None:
        files = self.hub.repos.get(repo)
        token = self.hub.private.get(repo)
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            # As the hub: a private repo does not exist for a caller without its token.
            self._json(401, {"error": "Repository not found"},
                       {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"})
            return None
        if files is None:
            self._missing("RepoNotFound", "Repository not found")
        return files

    def _info(self, repo: str) -> None:
        files = self._files(repo)
        if files is not None:
            self._json(200, {"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                             "siblings": [{"rfilename": p} for p in sorted(files)]})

    def _tree(self, repo: str, under: str) -> None:
        files = self._files(repo)
        if files is None:
            return
        entries = []
        for p, f in sorted(files.items()):
            if under and not p.startswith(under.rstrip("/") + "/"):
                continue
            item = {"type": "file", "oid": f.git_oid, "size": f.size,
                    "path": self.hub.listed_as.get(p, p)}
            if f.lfs:
                item["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            entries.append(item)
        self._json(200, entries)

    def _resolve(self, repo: str, path: str) -> None:
        files = self._files(repo)
        if files is None:
            return
        f = files.get(path)
        if f is None:
            return self._missing("EntryNotFound", f"{path} does not exist on main")
        start, end = 0, f.size - 1
        rng = None if self.hub.ignore_range else self.headers.get("Range")
        if rng:
            m = re.match(r"bytes=(\d+)-(\d*)$", rng)
            if not m or int(m.group(1)) >= f.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{f.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = int(m.group(1)), int(m.group(2) or f.size - 1)
        self.send_response(206 if rng else 200)
        self.send_header("X-Repo-Commit", self.hub.commit)
        etag = self.hub.etags.get(path, f'"{f.etag}"')
        self.send_header("ETag", etag)
        if f.lfs:
            self.send_header("X-Linked-Etag", self.hub.etags.get(path, f'"{f.sha256}"'))
            self.send_header("X-Linked-Size", str(f.size))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        cut = self.hub.cut_after.pop(path, None)
        self._send_file(f, start, end, cut)

    def _send_file(self, f: HubFile, start: int, end: int, cut: int | None) -> None:
        sent, began = 0, time.monotonic()
        plain = cut is None and self.hub.rate is None and f.path not in self.hub.corrupt
        with open(f.source, "rb") as handle:
            if plain:  # the kernel copies file to socket, as a real file server does
                try:
                    self.connection.sendfile(handle, offset=start, count=end - start + 1)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                return
            handle.seek(start)
            left = end - start + 1
            while left > 0:
                block = handle.read(min(left, 1 << 20 if self.hub.rate is None else 1 << 16))
                if start == 0 and sent == 0 and f.path in self.hub.corrupt:
                    block = bytes([block[0] ^ 0xFF]) + block[1:]
                if cut is not None and sent + len(block) >= cut:
                    self.wfile.write(block[:cut - sent])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                try:
                    self.wfile.write(block)
                except (BrokenPipeError, ConnectionResetError):
                    return
                sent += len(block)
                left -= len(block)
                if self.hub.rate is not None:
                    ahead = sent / self.hub.rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)
