"""The test Hub server, driven by the real huggingface_hub and transformers clients in subprocesses."""

import base64
import hashlib
import http.client
import json
import random
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers.hub_server import HubServer, git_blob_id, run_client
from helpers.training_setup import TESTS

OUTCOME = """
import json
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import HfHubHTTPError

def outcome(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except Exception as error:
        status = error.response.status_code if isinstance(error, HfHubHTTPError) else None
        return [type(error).__name__, status]
    return ["ok", None]
"""


def run_checked(code: str, env: dict) -> dict:
    """Run client code that can call `outcome(call, ...)`: the exception class name and HTTP status a call raised."""
    return run_client(OUTCOME + textwrap.dedent(code), env)


def weights(size=1_000_000, seed=0) -> bytes:
    return random.Random(seed).randbytes(size)


def make_folder(root: Path) -> Path:
    root.mkdir()
    (root / "notes.txt").write_text("hello\n")
    (root / "model.safetensors").write_bytes(weights())
    return root


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, response.headers, data


def send_cut_off(server, head: bytes, body: bytes):
    """Send a request whose body stops early, then wait until the server has dropped the connection."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head + body)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1024) == b"", "the server answered a request it never fully received"


def ndjson(*lines) -> bytes:
    return b"".join(json.dumps({"key": key, "value": value}).encode() + b"\n" for key, value in lines)


def lfs_batch(server, repo_id, data: bytes) -> dict:
    body = {"operation": "upload", "objects": [{"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}]}
    status, _, answer = request(server.port, "POST", f"/{repo_id}.git/info/lfs/objects/batch", json.dumps(body))
    assert status == 200
    return json.loads(answer)["objects"][0]


def test_folder_with_lfs_file_round_trips_byte_identically(hub_server, hub_env, tmp_path):
    folder = make_folder(tmp_path / "folder")
    out = run_client(
        """
        import json, sys
        from huggingface_hub import HfApi, hf_hub_download, snapshot_download
        api, folder = HfApi(), sys.argv[1]
        api.create_repo("user/round-trip")
        commit = api.upload_folder(repo_id="user/round-trip", folder_path=folder)
        info = api.model_info("user/round-trip", files_metadata=True)
        print(json.dumps({
            "commit": commit.oid, "sha": info.sha, "files": api.list_repo_files("user/round-trip"),
            "lfs": {s.rfilename: s.lfs.sha256 if s.lfs else None for s in info.siblings},
            "snapshot": snapshot_download("user/round-trip"),
            "weights": hf_hub_download("user/round-trip", "model.safetensors", revision=commit.oid),
        }))
        """,
        hub_env,
        folder,
    )
    sha256 = hashlib.sha256(weights()).hexdigest()
    assert out["sha"] == out["commit"] == hub_server.head("user/round-trip")
    assert out["files"] == [".gitattributes", "model.safetensors", "notes.txt"]
    assert out["lfs"] == {".gitattributes": None, "model.safetensors": sha256, "notes.txt": None}
    for name in ("notes.txt", "model.safetensors"):
        assert (Path(out["snapshot"]) / name).read_bytes() == (folder / name).read_bytes()
    assert Path(out["weights"]).read_bytes() == weights()
    assert hub_server.lfs_uploads("user/round-trip") == [sha256]


def test_second_push_uploads_only_the_changed_file(hub_server, hub_env, tmp_path):
    folder, new_weights = make_folder(tmp_path / "folder"), tmp_path / "new.safetensors"
    new_weights.write_bytes(weights(seed=1))
    out = run_client(
        """
        import json, sys
        from pathlib import Path
        from huggingface_hub import HfApi
        api, folder = HfApi(), Path(sys.argv[1])
        api.create_repo("user/incremental")
        commits = [api.upload_folder(repo_id="user/incremental", folder_path=folder).oid]
        (folder / "notes.txt").write_text("changed\\n")
        commits.append(api.upload_folder(repo_id="user/incremental", folder_path=folder).oid)
        (folder / "model.safetensors").write_bytes(Path(sys.argv[2]).read_bytes())
        commits.append(api.upload_folder(repo_id="user/incremental", folder_path=folder).oid)
        commits.append(api.upload_folder(repo_id="user/incremental", folder_path=folder).oid)
        print(json.dumps(commits))
        """,
        hub_env,
        folder,
        new_weights,
    )
    assert hub_server.uploaded_paths("user/incremental") == [
        ["model.safetensors", "notes.txt"],
        ["notes.txt"],
        ["model.safetensors"],
    ]
    assert hub_server.lfs_uploads("user/incremental") == [hashlib.sha256(weights(seed=s)).hexdigest() for s in (0, 1)]
    assert len(set(out[:3])) == 3 and out[3] == out[2], "an unchanged folder makes no commit"


def test_branch_upload_downloads_by_branch_and_commit_id(hub_server, hub_env):
    out = run_checked(
        """
        api = HfApi()
        api.create_repo("user/branches")
        api.create_branch("user/branches", branch="dev")
        commit = api.upload_file(path_or_fileobj=b"dev only\\n", path_in_repo="data/dev.txt", repo_id="user/branches",
                                 revision="dev")
        read = lambda rev: open(hf_hub_download("user/branches", "data/dev.txt", revision=rev)).read()
        paths = ["data", "data/dev.txt", "missing"]
        print(json.dumps({
            "commit": commit.oid, "by_branch": read("dev"), "by_commit": read(commit.oid),
            "by_short_id": read(commit.oid[:10]), "on_main": outcome(read, "main"),
            "branch_again": outcome(api.create_branch, "user/branches", branch="dev"),
            "branch_exist_ok": outcome(api.create_branch, "user/branches", branch="dev", exist_ok=True),
            "refs": {b.name: b.target_commit for b in api.list_repo_refs("user/branches").branches},
            "dev_files": api.list_repo_files("user/branches", revision="dev"),
            "top_level": [f.path for f in api.list_repo_tree("user/branches", revision="dev")],
            "paths_info": [type(f).__name__ for f in api.get_paths_info("user/branches", paths, revision="dev")],
        }))
        """,
        hub_env,
    )
    assert out["by_branch"] == out["by_commit"] == out["by_short_id"] == "dev only\n"
    assert out["on_main"][0] == "RemoteEntryNotFoundError"
    assert out["branch_again"] == ["HfHubHTTPError", 409] and out["branch_exist_ok"] == ["ok", None]
    assert out["refs"] == {"dev": out["commit"], "main": hub_server.head("user/branches")}
    assert out["dev_files"] == [".gitattributes", "data/dev.txt"]
    assert out["top_level"] == ["data", ".gitattributes"] and out["paths_info"] == ["RepoFolder", "RepoFile"]


def test_missing_repo_revision_and_file_raise_the_clients_errors(hub_server, hub_env):
    out = run_checked(
        """
        api = HfApi()
        api.create_repo("user/errors")
        api.create_repo("user/secret", private=True)
        print(json.dumps({
            "repo_download": outcome(hf_hub_download, "user/missing", "config.json"),
            "repo_info": outcome(api.model_info, "user/missing"),
            "revision_download": outcome(hf_hub_download, "user/errors", ".gitattributes", revision="nope"),
            "revision_snapshot": outcome(snapshot_download, "user/errors", revision="nope"),
            "revision_upload": outcome(api.upload_file, path_or_fileobj=b"x", path_in_repo="x.txt",
                                       repo_id="user/errors", revision="nope"),
            "file_download": outcome(hf_hub_download, "user/errors", "config.json"),
            "private_with_token": api.model_info("user/secret").private,
            "private_anonymous": outcome(api.model_info, "user/secret", token=False),
            "private_lfs_upload": outcome(api.upload_file, path_or_fileobj=b"\\0" * 10, path_in_repo="w.bin",
                                          repo_id="user/secret"),
            "create_existing": outcome(api.create_repo, "user/errors"),
            "create_exist_ok": api.create_repo("user/errors", exist_ok=True).repo_id,
        }))
        """,
        hub_env,
    )
    assert out["repo_download"][0] == out["repo_info"][0] == "RepositoryNotFoundError"
    assert out["revision_download"][0] == out["revision_snapshot"][0] == "RevisionNotFoundError"
    assert out["revision_upload"][0] == "RevisionNotFoundError"
    assert out["file_download"][0] == "RemoteEntryNotFoundError"  # the client's EntryNotFoundError for remote files
    assert out["private_with_token"] is True and out["private_anonymous"][0] == "RepositoryNotFoundError"
    assert out["private_lfs_upload"] == ["ok", None] and hub_server.lfs_uploads("user/secret")
    assert out["create_existing"] == ["HfHubHTTPError", 409] and out["create_exist_ok"] == "user/errors"


def test_stale_parent_commit_is_refused_and_the_branch_kept(hub_server, hub_env):
    out = run_checked(
        """
        from huggingface_hub import CommitOperationAdd
        api = HfApi()
        api.create_repo("user/stale")
        upload = lambda name: api.upload_file(path_or_fileobj=name.encode(), path_in_repo=name, repo_id="user/stale")
        first, second = upload("a.txt").oid, upload("b.txt").oid
        add_c = [CommitOperationAdd("c.txt", b"c")]
        commit = lambda parent: api.create_commit("user/stale", add_c, commit_message="c", parent_commit=parent)
        stale = outcome(commit, first)
        print(json.dumps({"first": first, "second": second, "stale": stale, "head": api.model_info("user/stale").sha,
                          "fresh": commit(second).oid}))
        """,
        hub_env,
    )
    assert out["stale"] == ["HfHubHTTPError", 412]
    assert out["head"] == out["second"], "a refused commit must not move the branch"
    assert hub_server.head("user/stale") == out["fresh"] != out["second"]


def test_commit_of_an_lfs_file_never_uploaded_is_refused(hub_server, hub_env):
    out = run_checked(
        """
        import huggingface_hub._commit_api as commit_api
        api = HfApi()
        api.create_repo("user/no-upload")
        before = api.model_info("user/no-upload").sha
        commit_api._upload_lfs_files = lambda **kwargs: None  # as if the client died between batch and PUT
        push = outcome(api.upload_file, path_or_fileobj=b"\\0" * 1000, path_in_repo="w.bin", repo_id="user/no-upload")
        print(json.dumps({"before": before, "push": push, "after": api.model_info("user/no-upload").sha,
                          "files": api.list_repo_files("user/no-upload")}))
        """,
        hub_env,
    )
    assert out["push"] == ["BadRequestError", 400]
    assert out["after"] == out["before"] == hub_server.head("user/no-upload")
    assert out["files"] == [".gitattributes"]


def test_cut_off_uploads_and_commits_leave_the_repo_unchanged(hub_server):
    hub_server.create_repo("model", "user/cut-off")
    head, commit_url = hub_server.head("user/cut-off"), "/api/models/user/cut-off/commit/main"
    data = weights(100_000, seed=2)
    upload_href = lfs_batch(hub_server, "user/cut-off", data)["actions"]["upload"]["href"]
    upload_path = upload_href.split(hub_server.url, 1)[1]

    put = f"PUT {upload_path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n\r\n"
    send_cut_off(hub_server, put.encode(), data[: len(data) // 2])
    assert "actions" in lfs_batch(hub_server, "user/cut-off", data), "half an object must not be stored"

    commit = ndjson(
        ("header", {"summary": "cut"}), ("file", {"path": "a.txt", "content": "YQ==", "encoding": "base64"})
    )
    post = f"POST {commit_url} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(commit) + 50}\r\n\r\n"
    send_cut_off(hub_server, post.encode(), commit)
    status, _, _ = request(hub_server.port, "POST", commit_url, commit[:-20])
    assert status == 400, "a commit whose last ndjson line is cut must be refused"
    assert hub_server.head("user/cut-off") == head and hub_server.uploaded_paths("user/cut-off") == []

    # Whole again, with chunked transfer encoding as httpx streams files: the object and a commit go through.
    conn = http.client.HTTPConnection("127.0.0.1", hub_server.port, timeout=30)
    conn.request("PUT", upload_path, body=iter([data[:1000], data[1000:]]), encode_chunked=True)
    assert conn.getresponse().status == 200
    conn.close()
    assert "actions" not in lfs_batch(hub_server, "user/cut-off", data)
    lfs_file = {"path": "w.bin", "algo": "sha256", "oid": hashlib.sha256(data).hexdigest(), "size": len(data)}
    commit = ndjson(("header", {"summary": "whole", "parentCommit": head}), ("lfsFile", lfs_file))
    status, _, answer = request(hub_server.port, "POST", commit_url, commit)
    assert status == 200 and hub_server.head("user/cut-off") == json.loads(answer)["commitOid"]


def test_resolve_headers_ranges_and_error_codes(hub_server):
    hub_server.create_repo("dataset", "user/headers")
    content = {"path": "t.txt", "content": base64.b64encode(b"0123456789").decode(), "encoding": "base64"}
    body = ndjson(("header", {"summary": "add"}), ("file", content))
    assert request(hub_server.port, "POST", "/api/datasets/user/headers/commit/main", body)[0] == 200
    head = hub_server.head("user/headers", repo_type="dataset")

    def resolve(path="main/t.txt", method="GET", repo="user/headers", **headers):
        return request(hub_server.port, method, f"/datasets/{repo}/resolve/{path}", None, headers)

    status, headers, data = resolve()
    assert (status, data, headers["X-Repo-Commit"], headers["Content-Length"]) == (200, b"0123456789", head, "10")
    assert headers["ETag"] == f'"{git_blob_id(b"0123456789")}"'
    status, headers, data = resolve(f"{head}/t.txt", Range="bytes=2-5")
    assert (status, data, headers["Content-Range"]) == (206, b"2345", "bytes 2-5/10")
    assert resolve(Range="bytes=-3")[2] == b"789" and resolve(Range="bytes=10-")[0] == 416

    status, headers, _ = resolve("main/none.txt", "HEAD")
    assert (status, headers["X-Error-Code"], headers["X-Repo-Commit"]) == (404, "EntryNotFound", head)
    assert resolve("dev/t.txt", "HEAD")[1]["X-Error-Code"] == "RevisionNotFound"
    assert resolve(method="HEAD", repo="user/nothing")[1]["X-Error-Code"] == "RepoNotFound"
    status, headers, data = request(hub_server.port, "GET", "/api/unknown")
    assert status == 404 and headers["Content-Type"].startswith("application/json") and "error" in json.loads(data)
    create = json.dumps({"name": "headers", "type": "dataset"})
    status, _, data = request(hub_server.port, "POST", "/api/repos/create", create)
    assert status == 409 and json.loads(data)["url"] == f"{hub_server.url}/datasets/user/headers"


def test_repos_survive_a_restart_and_the_command_line_serves_them(tmp_path):
    with HubServer(tmp_path / "hub") as server:
        server.create_repo("model", "org/kept", private=True)
        head = server.head("org/kept")
    command = [sys.executable, str(TESTS / "helpers" / "hub_server.py"), "--root", str(tmp_path / "hub")]
    process = subprocess.Popen([*command, "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline().split("HF_ENDPOINT=")[1].strip().rsplit(":", 1)[1])
        status, _, data = request(port, "GET", "/api/models/org/kept", None, {"Authorization": "Bearer any"})
        assert status == 200 and json.loads(data)["sha"] == head and json.loads(data)["private"] is True
        assert request(port, "GET", "/api/models/org/kept")[0] == 404, "private repos need a token"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_transformers_pushes_and_loads_a_config(hub_server, hub_env):
    out = run_client(
        """
        import json
        from huggingface_hub import HfApi
        from transformers import AutoConfig, BertConfig
        BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=37).push_to_hub("user/tiny-bert")
        sha = HfApi().model_info("user/tiny-bert").sha
        loaded = AutoConfig.from_pretrained("user/tiny-bert")
        pinned = AutoConfig.from_pretrained("user/tiny-bert", revision=sha)
        print(json.dumps({"class": type(loaded).__name__, "hidden": loaded.hidden_size, "vocab": pinned.vocab_size}))
        """,
        hub_env,
        timeout=180,
    )
    assert out == {"class": "BertConfig", "hidden": 32, "vocab": 99}
    assert "config.json" in hub_server.uploaded_paths("user/tiny-bert")[0]
