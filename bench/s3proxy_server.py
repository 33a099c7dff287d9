"""S3Proxy (Maven Central, filesystem backend) on 127.0.0.1: a second S3-protocol server for the object-store bench.

moto, the test suite's server, copies a whole object for every request (a 1 KB ranged GET of a 130 MB state file
costs ~170 ms there), so whole-process timings of small reads measure moto, not the client. S3Proxy serves a
ranged GET from the file it stores (~10 ms for the same request), as S3 or MinIO cost a request its length. The
jar (`org.gaul:s3proxy` with its dependencies, Java 17) is fetched once into ~/.cache/statekit/s3proxy; the
server runs as its own JVM with one identity and signature checking on (SigV4), and is stopped with the bench.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

VERSION = "4.1.0"
JAR_URL = f"https://repo1.maven.org/maven2/org/gaul/s3proxy/{VERSION}/s3proxy-{VERSION}-jar-with-dependencies.jar"
CACHE = Path(os.environ.get("STATEKIT_CACHE_DIR", Path.home() / ".cache" / "statekit")) / "s3proxy"
BUCKET = "statekit-bench"
REGION = "us-east-1"


def jar() -> Path:
    """The S3Proxy jar, downloaded from Maven Central on first use (written under a temp name, then renamed)."""
    path = CACHE / f"s3proxy-{VERSION}.jar"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part")
        with urllib.request.urlopen(JAR_URL) as r, open(part, "wb") as f:
            shutil.copyfileobj(r, f)
        part.rename(path)
    return path


class S3ProxyServer:
    """S3Proxy serving a temporary directory; the same `options()`/`keys()`/`stop()` as the suite's moto server."""

    name = "S3Proxy"

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="statekit-s3proxy-"))
        (self.dir / "data").mkdir()
        self.creds = {"access_key": "bench-" + secrets.token_hex(4), "secret_key": secrets.token_hex(16)}
        conf = self.dir / "s3proxy.conf"
        conf.write_text(f"s3proxy.endpoint={self.endpoint}\ns3proxy.authorization=aws-v2-or-v4\n"
                        f"s3proxy.identity={self.creds['access_key']}\ns3proxy.credential={self.creds['secret_key']}\n"
                        f"jclouds.provider=filesystem\njclouds.filesystem.basedir={self.dir / 'data'}\n")
        self.proc = subprocess.Popen(["java", "-jar", str(jar()), "--properties", str(conf)],
                                     stdout=open(self.dir / "log", "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"S3Proxy did not start: {(self.dir / 'log').read_text()[-2000:]}") from None
                time.sleep(0.2)
        (self.dir / "data" / BUCKET).mkdir()  # the filesystem backend's bucket is a directory

    def options(self) -> dict[str, str]:
        """statekit's `storage_options` for this server."""
        return {"endpoint_url": self.endpoint, "region": REGION, **self.creds}

    def keys(self, prefix: str) -> list[str]:
        """Every object key under `prefix` (read from the backend's directory)."""
        root = self.dir / "data" / BUCKET
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                      and p.relative_to(root).as_posix().startswith(prefix))

    def stop(self) -> None:
        """End the server and remove its directory."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
