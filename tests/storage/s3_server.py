"""A real S3-protocol server for the tests: moto's standalone server (`moto_server`) in its own process on 127.0.0.1.

Requests are authenticated (SigV4 against the server's own IAM users) once the set-up is done: an
``admin`` user may do anything, a ``reader`` user may only read, and any other key is refused - so
wrong credentials and missing write permissions fail as they do on AWS. `FaultProxy` sits in front of
it and answers chosen requests with 503 (transient failures that the client must retry).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BUCKET = "statekit-test"
REGION = "us-east-1"
_SETUP_CALLS = 6  # unauthenticated IAM calls that create the two users, their policies and keys


def _die_with_parent() -> None:
    """In the server's process: end when the test process ends, even if it is killed (Linux's PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: moto's standalone server, verifying SigV4 as AWS does: botocore (which moto uses to recompute a signature)
#: leaves ``user-agent`` out of the headers it signs even when the client signed it, as the AWS SDK for Java v1
#: (Flink's and Hadoop 3.3's S3A) does, so moto answered every such request 403; the server process drops that
#: exclusion, so the signature is checked over exactly the headers the client listed.
_MOTO_MAIN = ("import sys, botocore.auth as a; a.SIGNED_HEADERS_BLACKLIST.remove('user-agent'); "
              "from moto.server import main; sys.exit(main())")


def _moto_server() -> list[str]:
    return [sys.executable, "-c", _MOTO_MAIN]


class S3Server:
    """One moto S3 server process with an ``admin`` and a read-only ``reader`` user and the bucket `BUCKET`."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        # objects up to 512 MB stay in the server's memory (moto spools larger than ~5 MB to a temporary file,
        # which it reads whole for every request: the 10M-key benchmark's 130 MB objects took minutes each)
        env.update(MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=str(512 << 20))
        env.update(INITIAL_NO_AUTH_ACTION_COUNT=str(_SETUP_CALLS), AWS_ACCESS_KEY_ID="setup",
                   AWS_SECRET_ACCESS_KEY="setup-secret", AWS_DEFAULT_REGION=REGION)
        self.proc = subprocess.Popen([*_moto_server(), "-H", "127.0.0.1", "-p", str(self.port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start (exit code {self.proc.poll()})") from None
                time.sleep(0.1)
        import boto3

        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="setup",
                           aws_secret_access_key="setup-secret")
        self.admin = self._user(iam, "admin", ["s3:*"])
        # the reader's policy is AWS's managed AmazonS3ReadOnlyAccess (wildcards): moto 5.2.6 checks a listing
        # against ``s3:ListObjectsV2`` where AWS (and moto before it) checks ``s3:ListBucket``
        self.reader = self._user(iam, "reader", ["s3:Get*", "s3:List*", "s3:Head*", "s3:Describe*"])
        self.client().create_bucket(Bucket=BUCKET)

    @staticmethod
    def _user(iam, name: str, actions: list[str]) -> dict[str, str]:
        iam.create_user(UserName=name)
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
        iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return {"access_key": key["AccessKeyId"], "secret_key": key["SecretAccessKey"]}

    def options(self, user: str = "admin", endpoint: str | None = None) -> dict[str, str]:
        """`storage_options` for `user` (``admin`` or ``reader``)."""
        creds = self.admin if user == "admin" else self.reader
        return {"endpoint_url": endpoint or self.endpoint, "region": REGION, **creds}

    def cli_options(self, user: str = "admin") -> list[str]:
        """The same as ``--storage-option KEY=VALUE`` arguments."""
        return [a for k, v in self.options(user).items() for a in ("--storage-option", f"{k}={v}")]

    def client(self, user: str = "admin"):
        """A boto3 S3 client (for set-up and inspection by the tests only)."""
        import boto3

        creds = self.admin if user == "admin" else self.reader
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=creds["access_key"], aws_secret_access_key=creds["secret_key"])

    def upload_dir(self, local: Path, prefix: str) -> str:
        """Upload every file under `local` to ``s3://BUCKET/prefix/...``; the URI of the prefix."""
        c = self.client()
        for p in sorted(Path(local).rglob("*")):
            if p.is_file():
                c.upload_file(str(p), BUCKET, f"{prefix}/{p.relative_to(local).as_posix()}")
        return f"s3://{BUCKET}/{prefix}"

    def keys(self, prefix: str) -> list[str]:
        """Every object key under `prefix`."""
        c = self.client()
        out: list[str] = []
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return sorted(out)

    def stop(self) -> None:
        """End the server process."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of `S3Server` that answers the first `fail` matching requests with 503."""

    def __init__(self, target_port: int, *, fail: int, methods: tuple[str, ...] = ("GET", "HEAD")) -> None:
        self.fail = fail
        self.failed = 0
        self.forwarded = 0
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with lock:
                    inject = self.command in methods and proxy.failed < proxy.fail
                    if inject:
                        proxy.failed += 1
                    else:
                        proxy.forwarded += 1
                if inject:
                    payload = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", target_port, timeout=30)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else
                                                       resp.getheader("Content-Length") or 0))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
