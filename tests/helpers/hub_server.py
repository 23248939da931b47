"""A small Hugging Face Hub-compatible HTTP server, so the tests can push and pull with the real clients.

The Hub itself is unreachable from the test machines, and no installable package serves the upload side of its API.
This server implements what huggingface_hub and transformers call (see the project's hub-api notes): repositories
with real commits, branches, regular and LFS files, and the error codes the client maps to its exception classes.

Layout on disk, under ``root_dir``::

    {type}s/{namespace}/{name}/repo.json          refs (branch -> commit id), privacy, creation date
    {type}s/{namespace}/{name}/commits/{id}.json  parent, message, date and the full file tree of one commit
    {type}s/{namespace}/{name}/objects/{sha1}     regular file contents, by git blob id
    {type}s/{namespace}/{name}/lfs/{sha256}       LFS file contents, by sha256

Like the Hub, a new repository's `main` starts at an "initial commit" holding a .gitattributes, and preupload sends
to LFS the files matching its patterns (*.safetensors, *.bin, *.pt, ...), files over 10 MB and binary files.

Not implemented: pull requests, tags, deleting repos or branches, copying LFS files between repos, multipart LFS
uploads, xet, pagination (every listing is one page), README metadata validation, gated repos.

Standalone: ``python tests/hub_server.py --root DIR --port N``.
"""

import argparse
import base64
import datetime
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import huggingface_hub

URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
# The Hub stores files matching its default .gitattributes, files over 10 MB and binary files in LFS.
LFS_PATTERNS = tuple(
    "*.bin *.safetensors *.pt *.pth *.ckpt *.h5 *.onnx *.msgpack *.npy *.npz *.pkl *.pickle *.model"
    " *.zip *.gz *.tar *.arrow *.parquet *.tflite".split()
)
LFS_THRESHOLD = 10 * 1024 * 1024
GITATTRIBUTES = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in LFS_PATTERNS)
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
BRANCH_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,99}")
HEX_RE = re.compile(r"[0-9a-f]+")
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
COPY_CHUNK = 1024 * 1024
# Offline switches block loopback too; cache and token locations would escape the per-test HF_HOME.
CLIENT_ENV_DROPPED = tuple(
    "HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_DATASETS_OFFLINE HF_TOKEN_PATH HUGGING_FACE_HUB_TOKEN"
    " HF_HUB_CACHE HUGGINGFACE_HUB_CACHE TRANSFORMERS_CACHE HF_XET_CACHE HF_ASSETS_CACHE".split()
)


class HubError(Exception):
    """An error answered as the Hub does: a status, a JSON `error` and the `X-Error-Code` the client maps."""

    def __init__(self, status, message, code=None, headers=None, body=None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers, self.body = headers or {}, body or {}


class IncompleteBody(Exception):
    """The client went away before sending the whole request body."""


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def write_atomic(path: Path, data: bytes) -> None:
    # A reader (or a server restarted after a crash) sees the old file or the new one, never half of one.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True).encode())


def check_file_path(path) -> str:
    if not isinstance(path, str) or not path or path.startswith("/") or len(path) > 1000:
        raise HubError(400, f"Invalid file path: {path!r}")
    if any(part in ("", ".", "..", ".git") for part in path.split("/")):
        raise HubError(400, f"Invalid file path: {path!r}")
    return path


def lfs_entry(oid: str, size: int) -> dict:
    # Git stores a pointer in place of an LFS file: the tree's blob id is the pointer's, the size the content's.
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n".encode()
    return {"oid": git_blob_id(pointer), "size": size, "lfs": {"oid": oid, "size": size, "pointerSize": len(pointer)}}


def is_lfs_file(path: str, size: int, sample: bytes) -> bool:
    name = path.rsplit("/", 1)[-1]
    return size > LFS_THRESHOLD or b"\0" in sample or any(fnmatch.fnmatch(name, p) for p in LFS_PATTERNS)


class Repo:
    """One repository on disk; reads go to disk each time, so a restarted server sees the same state."""

    def __init__(self, root: Path, repo_type: str, repo_id: str):
        self.type, self.id = repo_type, repo_id
        self.dir = root / f"{repo_type}s" / repo_id

    @property
    def url_path(self) -> str:
        return URL_PREFIXES[self.type] + self.id

    def exists(self) -> bool:
        return (self.dir / "repo.json").is_file()

    def meta(self) -> dict:
        return json.loads((self.dir / "repo.json").read_text())

    def save_meta(self, meta: dict) -> None:
        write_json(self.dir / "repo.json", meta)

    def commit(self, oid: str) -> dict:
        return json.loads((self.dir / "commits" / f"{oid}.json").read_text())

    def resolve(self, revision: str) -> str:
        """A branch name, a full commit id or an unambiguous prefix of at least 7 hex digits."""
        branch = revision.removeprefix("refs/heads/")
        refs = self.meta()["refs"]
        if branch in refs:
            return refs[branch]
        if HEX_RE.fullmatch(revision) and 7 <= len(revision) <= 40:
            matches = [p.stem for p in (self.dir / "commits").glob(f"{revision}*.json")]
            if len(matches) == 1:
                return matches[0]
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def snapshot(self, revision: str) -> tuple[str, dict]:
        oid = self.resolve(revision)
        return oid, self.commit(oid)

    def write_commit(self, parent, tree: dict, summary: str, description: str = "") -> str:
        commit = {"parent": parent, "tree": tree, "summary": summary, "description": description, "date": utc_now()}
        oid = hashlib.sha1(json.dumps(commit, sort_keys=True).encode()).hexdigest()
        write_json(self.dir / "commits" / f"{oid}.json", {"id": oid, **commit})
        return oid

    def blob_path(self, entry: dict) -> Path:
        return self.lfs_path(entry["lfs"]["oid"]) if "lfs" in entry else self.dir / "objects" / entry["oid"]

    def store_blob(self, data: bytes) -> dict:
        oid = git_blob_id(data)
        path = self.dir / "objects" / oid
        if not path.exists():
            write_atomic(path, data)
        return {"oid": oid, "size": len(data)}

    def lfs_path(self, oid: str) -> Path:
        return self.dir / "lfs" / oid

    def has_lfs(self, oid: str, size: int) -> bool:
        path = self.lfs_path(oid)
        return path.is_file() and path.stat().st_size == size


def apply_operations(tree: dict, operations: list[tuple]) -> dict:
    tree = dict(tree)
    for kind, path, entry in operations:
        if kind == "add":
            tree[path] = entry
        elif kind == "deletedFile":
            if tree.pop(path, None) is None:
                raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
        else:
            inside = [p for p in tree if p.startswith(path.rstrip("/") + "/")]
            if not inside:
                raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
            for p in inside:
                del tree[p]
    for path in tree:
        parents = path.split("/")[:-1]
        if any("/".join(parents[: i + 1]) in tree for i in range(len(parents))):
            raise HubError(400, f"{path} would be inside a file")
    return tree


def tree_item(path: str, entry: dict) -> dict:
    item = {"type": "file", "path": path, "oid": entry["oid"], "size": entry["size"]}
    if "lfs" in entry:
        item["lfs"] = entry["lfs"]
    return item


def folder_item(tree: dict, path: str) -> dict:
    inside = {p: e["oid"] for p, e in tree.items() if p.startswith(path + "/")}
    oid = hashlib.sha1(json.dumps(inside, sort_keys=True).encode()).hexdigest()
    return {"type": "directory", "path": path, "oid": oid, "size": 0}


def list_tree(tree: dict, base: str, recursive: bool) -> list[dict]:
    prefix = base.strip("/") + "/" if base.strip("/") else ""
    paths = sorted(p for p in tree if p.startswith(prefix))
    if prefix and not paths:
        raise HubError(404, f"Folder not found: {base}", "EntryNotFound")
    folders, files = set(), []
    for path in paths:
        parts = path[len(prefix) :].split("/")
        depth = len(parts) - 1 if recursive else min(len(parts) - 1, 1)
        folders.update(prefix + "/".join(parts[: i + 1]) for i in range(depth))
        if recursive or len(parts) == 1:
            files.append(tree_item(path, tree[path]))
    return [folder_item(tree, f) for f in sorted(folders)] + files


def parse_range(header: str, size: int):
    """The (start, end) of a single `bytes=` range, or None to send the whole file."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
    if not match or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first:
        start, end = int(first), min(int(last), size - 1) if last else size - 1
    else:
        start, end = max(size - int(last), 0), size - 1
    if start >= size or start > end:
        raise HubError(416, "Range not satisfiable", headers={"Content-Range": f"bytes */{size}"})
    return start, end


_API_REPO = r"/api/(?P<kind>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
_GIT_REPO = r"/(?:(?P<prefix>datasets|spaces)/)?(?P<ns>[^/]+)/(?P<name>[^/]+?)"
_LFS_OBJECT = r"/lfs-objects/(?P<kind>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)/(?P<oid>[0-9a-f]{64})"
ROUTES = [
    (method, re.compile(pattern), name)
    for method, pattern, name in [
        ("GET", r"/api/whoami-v2", "whoami"),
        ("POST", r"/api/repos/create", "create_repo"),
        ("POST", r"/api/validate-yaml", "validate_yaml"),
        ("GET", _API_REPO + r"(?:/revision/(?P<rev>[^/]+))?", "repo_info"),
        ("GET", _API_REPO + r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?", "tree"),
        ("GET", _API_REPO + r"/refs", "refs"),
        ("POST", _API_REPO + r"/preupload/(?P<rev>[^/]+)", "preupload"),
        ("POST", _API_REPO + r"/commit/(?P<rev>[^/]+)", "commit"),
        ("POST", _API_REPO + r"/branch/(?P<rev>[^/]+)", "create_branch"),
        ("POST", _API_REPO + r"/paths-info/(?P<rev>[^/]+)", "paths_info"),
        ("POST", _GIT_REPO + r"\.git/info/lfs/objects/batch", "lfs_batch"),
        ("PUT", _LFS_OBJECT, "lfs_upload"),
        ("POST", _LFS_OBJECT + r"/verify", "lfs_verify"),
        ("GET", _GIT_REPO + r"/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
        ("HEAD", _GIT_REPO + r"/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
    ]
]


class HubRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    timeout = 60  # a stalled client must not hold a server thread forever

    def do_GET(self):
        self.dispatch()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    @property
    def hub(self) -> "HubServer":
        return self.server.hub

    def log_message(self, format, *args):
        if self.hub.verbose:
            super().log_message(format, *args)

    def dispatch(self):
        url = urlsplit(self.path)
        self.query = parse_qs(url.query)
        self.hub.request_log.append((self.command, url.path))
        try:
            # Small bodies are read up front so an error answer never leaves an unread body on a kept-alive socket.
            self.body = self.read_body() if self.command == "POST" else b""
            for method, pattern, name in ROUTES:
                match = pattern.fullmatch(url.path) if method == self.command else None
                if match:
                    args = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                    return getattr(self, f"handle_{name}")(**args)
            raise HubError(404, f"Not found: {self.command} {url.path}")
        except HubError as error:
            self.send_hub_error(error)
        except (IncompleteBody, ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away mid-request: nothing was changed
        except Exception as error:
            self.send_hub_error(HubError(500, f"{type(error).__name__}: {error}"))
            raise

    # --- HTTP plumbing ---

    def iter_body(self):
        """The request body in pieces, plain or with chunked transfer encoding (httpx streams file uploads so)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            yield from self.iter_chunked()
            return
        remaining = int(self.headers.get("Content-Length") or 0)
        while remaining:
            data = self.rfile.read(min(remaining, COPY_CHUNK))
            if not data:
                raise IncompleteBody
            remaining -= len(data)
            yield data

    def iter_chunked(self):
        while True:
            line = self.rfile.readline()
            if not line.endswith(b"\n"):
                raise IncompleteBody
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers carry nothing we use
                return
            data = self.rfile.read(size + 2)
            if len(data) != size + 2:
                raise IncompleteBody
            yield data[:-2]

    def read_body(self) -> bytes:
        return b"".join(self.iter_body())

    def json_body(self) -> dict:
        try:
            return json.loads(self.body or b"{}")
        except ValueError as error:
            raise HubError(400, f"Invalid JSON body: {error}") from None

    def send_head(self, status: int, length: int, content_type: str, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()

    def send_json(self, obj, status=200, headers=None):
        body = json.dumps(obj).encode()
        self.send_head(status, len(body), "application/json; charset=utf-8", headers)
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_hub_error(self, error: HubError):
        # Closing (and saying so, else the client reuses the socket and fails) drops any body left unread.
        headers = {"Connection": "close", "X-Error-Message": error.message.encode("ascii", "replace").decode()}
        headers.update(error.headers)
        if error.code:
            headers["X-Error-Code"] = error.code
        try:
            self.send_json({"error": error.message, **error.body}, error.status, headers)
        except OSError:
            pass  # the client is gone

    @property
    def base_url(self) -> str:
        return f"http://{self.headers.get('Host') or self.hub.url.removeprefix('http://')}"

    @property
    def authorized(self) -> bool:
        return self.headers.get("Authorization", "").startswith("Bearer ")

    def repo(self, ns, name, kind=None, prefix=None, signed=False) -> Repo:
        """The repository addressed; `signed` URLs (the LFS hrefs: the client PUTs to them without a token) skip the
        privacy check, as the Hub's pre-signed storage URLs do."""
        repo_type = (kind or prefix or "models").removesuffix("s")
        if not (NAME_RE.fullmatch(ns) and NAME_RE.fullmatch(name)) or ".." in ns + name:
            raise HubError(404, f"Repository not found: {ns}/{name}", "RepoNotFound")
        repo = Repo(self.hub.root, repo_type, f"{ns}/{name}")
        # Private repositories are invisible without a token, as on the Hub.
        if not repo.exists() or (repo.meta()["private"] and not (self.authorized or signed)):
            raise HubError(404, f"Repository not found: {ns}/{name}", "RepoNotFound")
        return repo

    # --- account and repositories ---

    def handle_whoami(self):
        if not self.authorized:
            raise HubError(401, "Invalid credentials in Authorization header")
        user = self.hub.username
        token = {"displayName": "test", "role": "write"}
        self.send_json({"type": "user", "name": user, "fullname": user, "orgs": [], "auth": {"accessToken": token}})

    def handle_create_repo(self):
        payload = self.json_body()
        repo_type = payload.get("type") or "model"
        ns, name = payload.get("organization") or self.hub.username, payload.get("name")
        if repo_type not in URL_PREFIXES or not all(isinstance(n, str) and NAME_RE.fullmatch(n) for n in (ns, name)):
            raise HubError(400, f"Invalid repo type or name: {payload}")
        private = bool(payload.get("private")) or payload.get("visibility") == "private"
        url = f"{self.base_url}/{URL_PREFIXES[repo_type]}{ns}/{name}"
        try:
            self.hub.create_repo(repo_type, f"{ns}/{name}", private=private)
        except HubError as error:
            error.body["url"] = url  # create_repo(exist_ok=True) reads it from the 409
            raise
        self.send_json({"url": url, "name": f"{ns}/{name}", "id": f"{ns}/{name}"})

    def handle_validate_yaml(self):
        self.send_json({"errors": [], "warnings": []})

    def handle_repo_info(self, ns, name, kind, rev="main"):
        repo = self.repo(ns, name, kind)
        oid, commit = repo.snapshot(rev)
        blobs = self.query.get("blobs", [""])[0].lower() in ("1", "true")
        siblings = [self.sibling(path, entry, blobs) for path, entry in sorted(commit["tree"].items())]
        meta = repo.meta()
        info = dict(id=repo.id, author=ns, sha=oid, lastModified=commit["date"], createdAt=meta["createdAt"])
        info.update(private=meta["private"], gated=False, disabled=False, downloads=0, likes=0, tags=[])
        self.send_json({**info, "siblings": siblings})

    @staticmethod
    def sibling(path: str, entry: dict, blobs: bool) -> dict:
        if not blobs:
            return {"rfilename": path}
        lfs = entry.get("lfs")
        lfs = {"sha256": lfs["oid"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]} if lfs else None
        return {"rfilename": path, "size": entry["size"], "blobId": entry["oid"], "lfs": lfs}

    def handle_tree(self, ns, name, kind, rev, path=""):
        repo = self.repo(ns, name, kind)
        oid, commit = repo.snapshot(rev)
        recursive = self.query.get("recursive", [""])[0].lower() in ("1", "true")
        self.send_json(list_tree(commit["tree"], path, recursive), headers={"X-Repo-Commit": oid})

    def handle_paths_info(self, ns, name, kind, rev):
        repo = self.repo(ns, name, kind)
        tree = repo.snapshot(rev)[1]["tree"]
        if self.headers.get("Content-Type", "").startswith("application/json"):
            paths = self.json_body().get("paths", [])
        else:
            paths = parse_qs(self.body.decode()).get("paths", [])
        found = []
        for path in (p.strip("/") for p in paths):
            if path in tree:
                found.append(tree_item(path, tree[path]))
            elif any(p.startswith(path + "/") for p in tree):
                found.append(folder_item(tree, path))
        self.send_json(found)

    def handle_refs(self, ns, name, kind):
        refs = self.repo(ns, name, kind).meta()["refs"]
        branches = [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": oid} for b, oid in sorted(refs.items())]
        self.send_json({"branches": branches, "converts": [], "tags": [], "pullRequests": []})

    def handle_create_branch(self, ns, name, kind, rev):
        repo = self.repo(ns, name, kind)
        if not BRANCH_RE.fullmatch(rev) or ".." in rev or rev.startswith("refs/") or COMMIT_RE.fullmatch(rev):
            raise HubError(400, f"Invalid branch name: {rev}")
        start = repo.resolve(self.json_body().get("startingPoint") or "main")
        with self.hub.lock:
            meta = repo.meta()
            if rev in meta["refs"]:
                raise HubError(409, f"Branch {rev} already exists")
            meta["refs"][rev] = start
            repo.save_meta(meta)
        self.send_json({"success": True})

    # --- upload ---

    def handle_preupload(self, ns, name, kind, rev):
        repo = self.repo(ns, name, kind)
        tree = repo.snapshot(rev)[1]["tree"]
        answers = []
        for file in self.json_body().get("files", []):
            path = check_file_path(file.get("path"))
            lfs = is_lfs_file(path, int(file.get("size", 0)), base64.b64decode(file.get("sample", "")))
            answers.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False})
            answers[-1]["oid"] = self.remote_oid(tree.get(path), lfs)
        self.send_json({"files": answers})

    @staticmethod
    def remote_oid(entry, lfs: bool):
        # The client compares this with its own sha256 (LFS) or git blob id (regular) to skip unchanged files.
        if entry is None or lfs != ("lfs" in entry):
            return None
        return entry["lfs"]["oid"] if lfs else entry["oid"]

    def handle_lfs_batch(self, ns, name, prefix=None):
        repo = self.repo(ns, name, prefix=prefix)
        payload = self.json_body()
        if payload.get("operation") != "upload":
            raise HubError(400, "Only the LFS upload operation is supported")
        objects = [self.batch_object(repo, obj) for obj in payload.get("objects", [])]
        self.send_json({"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

    def batch_object(self, repo: Repo, obj: dict) -> dict:
        oid, size = obj.get("oid"), obj.get("size")
        if not (isinstance(oid, str) and SHA256_RE.fullmatch(oid) and isinstance(size, int) and size >= 0):
            raise HubError(400, f"Invalid LFS object: {obj}")
        if repo.has_lfs(oid, size):
            return {"oid": oid, "size": size}  # no actions: the client skips the upload
        href = f"{self.base_url}/lfs-objects/{repo.type}s/{repo.id}/{oid}"
        return {"oid": oid, "size": size, "actions": {"upload": {"href": href}, "verify": {"href": f"{href}/verify"}}}

    def handle_lfs_upload(self, ns, name, kind, oid):
        repo = self.repo(ns, name, kind, signed=True)
        path = repo.lfs_path(oid)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
        sha256, size = hashlib.sha256(), 0
        try:
            with os.fdopen(fd, "wb") as f:
                for data in self.iter_body():
                    sha256.update(data)
                    size += len(data)
                    f.write(data)
            if sha256.hexdigest() != oid:
                raise HubError(400, f"Uploaded content does not match its oid {oid}")
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.hub.record_lfs_upload(repo, oid, size)
        self.send_json({"success": True})

    def handle_lfs_verify(self, ns, name, kind, oid):
        repo = self.repo(ns, name, kind, signed=True)
        if not repo.has_lfs(oid, self.json_body().get("size", -1)):
            raise HubError(404, f"LFS object {oid} not found")
        self.send_json({"success": True})

    def handle_commit(self, ns, name, kind, rev):
        repo = self.repo(ns, name, kind)
        if self.query.get("create_pr", ["0"])[0] not in ("0", ""):
            raise HubError(400, "Pull requests are not supported by this server")
        header, operations = self.parse_commit(repo)
        parent, oid = self.hub.commit(repo, rev, header, operations)
        added = [path for op, path, _ in operations if op == "add"]
        deleted = [path for op, path, _ in operations if op != "add"]
        self.hub.record_commit(repo, rev, parent, oid, added, deleted)
        url = f"{self.base_url}/{repo.url_path}/commit/{oid}"
        self.send_json({"commitOid": oid, "commitUrl": url, "pullRequestUrl": None, "success": True})

    def parse_commit(self, repo: Repo) -> tuple[dict, list[tuple]]:
        """The ndjson header and the operations, with regular files already stored (harmless if the commit fails)."""
        try:
            lines = [json.loads(line) for line in self.body.splitlines() if line.strip()]
        except ValueError as error:
            raise HubError(400, f"Malformed ndjson commit body: {error}") from None
        if not lines or lines[0].get("key") != "header" or not lines[0]["value"].get("summary"):
            raise HubError(400, "A commit starts with a header line carrying a summary")
        return lines[0]["value"], [self.commit_operation(repo, line) for line in lines[1:]]

    @staticmethod
    def commit_operation(repo: Repo, line: dict) -> tuple:
        key, value = line.get("key"), line.get("value") or {}
        path = check_file_path(value.get("path", "").rstrip("/") if key == "deletedFolder" else value.get("path"))
        if key == "file":
            encoded = value.get("content", "")
            data = base64.b64decode(encoded) if value.get("encoding") == "base64" else encoded.encode()
            return "add", path, repo.store_blob(data)
        if key == "lfsFile":
            oid, size = value.get("oid"), value.get("size")
            if not (isinstance(oid, str) and isinstance(size, int) and repo.has_lfs(oid, size)):
                raise HubError(400, f"LFS object {oid} ({path}) was never uploaded")
            return "add", path, lfs_entry(oid, size)
        if key in ("deletedFile", "deletedFolder"):
            return key, path, None
        raise HubError(400, f"Unsupported commit operation: {key}")

    # --- download ---

    def handle_resolve(self, ns, name, rev, path, prefix=None):
        repo = self.repo(ns, name, prefix=prefix)
        oid, commit = repo.snapshot(rev)
        entry = commit["tree"].get(path)
        if entry is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": oid})
        etag = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
        headers = {"X-Repo-Commit": oid, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        if "lfs" in entry:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(entry["size"])})
        span = parse_range(self.headers["Range"], entry["size"]) if self.headers.get("Range") else None
        start, end = span or (0, entry["size"] - 1)
        if span:
            headers["Content-Range"] = f"bytes {start}-{end}/{entry['size']}"
        self.send_head(206 if span else 200, end - start + 1, "application/octet-stream", headers)
        if self.command == "GET":
            self.send_file(repo.blob_path(entry), start, end - start + 1)

    def send_file(self, path: Path, start: int, length: int):
        with open(path, "rb") as f:
            f.seek(start)
            while length > 0:
                data = f.read(min(length, COPY_CHUNK))
                length -= len(data)
                self.wfile.write(data)


class _ThreadingServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # the client uploads and downloads several files at once


class HubServer:
    """The server on 127.0.0.1 in a background thread: `with HubServer(root) as hub: ... hub.url ...`.

    `commit_log` and `lfs_log` record what clients sent, so a test can tell what a push actually uploaded;
    `request_log` holds the method and path of every request received, in order.
    """

    def __init__(self, root_dir, host="127.0.0.1", port=0, username="user", verbose=False):
        self.root = Path(root_dir)
        self.host, self.port, self.username, self.verbose = host, port, username, verbose
        self.lock = threading.Lock()  # serialises every change of refs
        self.commit_log: list[dict] = []
        self.lfs_log: list[dict] = []
        self.request_log: list[tuple[str, str]] = []
        # Repositories whose next commit another client's commit overtakes (`overtake`): a push racing another.
        self.overtaken: dict[str, bytes] = {}
        self.httpd = None
        self.thread = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    endpoint = url

    def start(self) -> "HubServer":
        self.root.mkdir(parents=True, exist_ok=True)
        self.httpd = _ThreadingServer((self.host, self.port), HubRequestHandler)
        self.httpd.hub = self
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="hub-server", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join()
            self.httpd = self.thread = None

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def create_repo(self, repo_type: str, repo_id: str, private=False) -> Repo:
        """Like the Hub: a new repo has `main` at an initial commit holding the default .gitattributes."""
        repo = Repo(self.root, repo_type, repo_id)
        with self.lock:
            if repo.exists():
                raise HubError(409, f"You already created this {repo_type} repo")
            tree = {".gitattributes": repo.store_blob(GITATTRIBUTES.encode())}
            oid = repo.write_commit(None, tree, "initial commit")
            repo.save_meta({"private": private, "createdAt": utc_now(), "refs": {"main": oid}})
        return repo

    def commit(self, repo: Repo, branch: str, header: dict, operations: list[tuple]) -> tuple[str, str]:
        """Move `branch` to a new commit; nothing changes unless every operation applies."""
        with self.lock:
            meta = repo.meta()
            branch = branch.removeprefix("refs/heads/")
            if branch not in meta["refs"]:
                repo.resolve(branch)  # an unknown revision is a 404 RevisionNotFound
                raise HubError(400, f"Commits can only be made on a branch, not on {branch}")
            head = meta["refs"][branch]
            if repo.id in self.overtaken:  # another client's commit lands first, as it would between two requests
                tree = apply_operations(
                    repo.commit(head)["tree"], [("add", "raced.txt", repo.store_blob(self.overtaken.pop(repo.id)))]
                )
                head = meta["refs"][branch] = repo.write_commit(head, tree, "another client's commit")
                repo.save_meta(meta)
            if header.get("parentCommit") not in (None, head):
                raise HubError(412, f"A commit has happened since {header['parentCommit']}, the head is now {head}")
            tree = apply_operations(repo.commit(head)["tree"], operations)
            oid = repo.write_commit(head, tree, header["summary"], header.get("description") or "")
            meta["refs"][branch] = oid
            repo.save_meta(meta)
        return head, oid

    def overtake(self, repo_id: str, content: bytes = b"another push") -> None:
        """The next commit to `repo_id` is overtaken: another client's commit (adding raced.txt) lands just before it,
        after the client looked at the repository, as when two pushes race."""
        self.overtaken[repo_id] = content

    def record_commit(self, repo: Repo, branch, parent, oid, files, deleted) -> None:
        entry = {"repo_type": repo.type, "repo_id": repo.id, "branch": branch, "parent": parent, "oid": oid}
        self.commit_log.append({**entry, "files": files, "deleted": deleted})

    def record_lfs_upload(self, repo: Repo, oid: str, size: int) -> None:
        self.lfs_log.append({"repo_type": repo.type, "repo_id": repo.id, "oid": oid, "size": size})

    def uploaded_paths(self, repo_id: str, repo_type="model") -> list[list[str]]:
        """The files carried by each commit to a repo, oldest first (unchanged files are not sent by the client)."""
        return [c["files"] for c in self.commit_log if (c["repo_id"], c["repo_type"]) == (repo_id, repo_type)]

    def lfs_uploads(self, repo_id: str, repo_type="model") -> list[str]:
        """The sha256 of each LFS object received for a repo, in order."""
        return [u["oid"] for u in self.lfs_log if (u["repo_id"], u["repo_type"]) == (repo_id, repo_type)]

    def head(self, repo_id: str, branch="main", repo_type="model") -> str:
        return Repo(self.root, repo_type, repo_id).meta()["refs"][branch]

    def client_env(self, hf_home) -> dict:
        """Environment for a huggingface_hub / transformers subprocess talking to this server (read at import)."""
        env = {k: v for k, v in os.environ.items() if k not in CLIENT_ENV_DROPPED}
        no_proxy = ",".join(filter(None, [env.get("NO_PROXY"), "127.0.0.1", "localhost"]))
        env.update(HF_ENDPOINT=self.url, HF_TOKEN="hf_test_token", HF_HOME=str(hf_home), NO_PROXY=no_proxy)
        env.update(HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_UPDATE_CHECK="1", HF_HUB_DISABLE_TELEMETRY="1")
        env.update(HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_ETAG_TIMEOUT="60", HF_HUB_DOWNLOAD_TIMEOUT="60")
        env["no_proxy"] = no_proxy
        return env


def point_clients_at(server: HubServer, patch, cache: Path) -> None:
    """The clients of this process (vaswani-push's and transformers') pointed at the local Hub server `server`, with
    a cache of their own, for as long as `patch` (a pytest.MonkeyPatch) lasts."""
    patch.setattr(huggingface_hub.constants, "ENDPOINT", server.url)
    template = server.url + "/{repo_id}/resolve/{revision}/{filename}"  # as HF_ENDPOINT makes it at import
    patch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    patch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    patch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)  # the server speaks LFS
    patch.setenv("HF_TOKEN", "hf_test_token")


def run_client(code: str, env: dict, *args, timeout=120):
    """Run client code in a fresh interpreter (the clients read their settings at import) with `args` in sys.argv[1:];
    return its last stdout line parsed as JSON."""
    command = [sys.executable, "-c", textwrap.dedent(code), *map(str, args)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"client failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    if not result.stdout.strip():
        raise AssertionError(f"client printed nothing:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="directory holding the repositories")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--user", default="user", help="the account whoami reports and repos default to")
    args = parser.parse_args()
    with HubServer(args.root, args.host, args.port, args.user, verbose=True) as server:
        print(f"Hub server on {server.url}, storing under {server.root}; HF_ENDPOINT={server.url}", flush=True)
        try:
            server.thread.join()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
