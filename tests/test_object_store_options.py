"""LanceDB-style storage options become obstore's store and client settings (one place)."""

from __future__ import annotations

import pytest

from tasks.dataset.location import STORAGE_OPTIONS_ENV, DatasetError
from tasks.dataset.object_store import is_object_url, obstore_options, open_store


def test_lancedb_keys_are_translated_per_scheme():
    options = {"endpoint": "http://h:9", "allow_http": "true", "Region": "eu-west-1"}
    config, client = obstore_options("s3", options)
    assert config == {"aws_endpoint": "http://h:9", "aws_region": "eu-west-1"}
    assert client == {"allow_http": "true"}
    config, _ = obstore_options("gs", {"google_service_account": "/k.json", "bucket": "b"})
    assert config == {"google_service_account": "/k.json", "google_bucket": "b"}
    with pytest.raises(DatasetError, match="unsupported object store ftp://"):
        obstore_options("ftp", {})


def test_a_bad_option_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, '{"no_such_option": "1"}')
    with pytest.raises(DatasetError, match=r"s3://b/p: .*aws_no_such_option"):
        open_store("s3://b/p")
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, '{"endpoint": "http://127.0.0.1:9", "region": "x"}')
    assert open_store("s3://b/p").prefix == "p"


def test_object_urls_are_told_from_paths():
    assert is_object_url("s3://b/p") and is_object_url("gs://b")
    assert not is_object_url("/tmp/x") and not is_object_url("file:///tmp/x")
