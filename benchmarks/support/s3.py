"""moto's S3 server on a free local port, counting the GET requests for each object."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class CountingMotoServer(ThreadedMotoServer):
    """moto's S3 server on 127.0.0.1 and a free port; `gets` counts GET requests by object key
    ("prefix/name.md"; listings, which name no object, are not counted)."""

    def __init__(self) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self.gets: Counter[str] = Counter()
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # else a line per request

    def _server_entry(self) -> None:  # moto's own, with its app wrapped
        app = DomainDispatcherApplication(create_backend_app)

        def counting(environ: dict[str, Any], start_response: Any) -> Any:
            path = environ.get("PATH_INFO", "")
            if environ["REQUEST_METHOD"] == "GET" and path.count("/") >= 2:  # /bucket/key
                self.gets[path.split("/", 2)[2]] += 1
            return app(environ, start_response)

        self._server = make_server(
            self._ip_address, self._port, counting, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()

    @property
    def endpoint(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"

    def client(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, **CREDENTIALS)

    def aws_variables(self) -> dict[str, str]:
        """The standard AWS_* variables that point a process at this server."""
        return {
            "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }
