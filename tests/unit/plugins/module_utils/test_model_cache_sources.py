"""The model cache's sources alone: validation of models and manifests, local sources, and
the path-style S3 requests signed with AWS Signature Version 4."""

from __future__ import annotations

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import sources as src
from model_data import blob

# --------------------------------------------------------------------------- validation and manifests


def test_parse_manifest_formats():
    a, b = "a" * 64, "B" * 64
    files = src.parse_manifest("# comment\n%s  dir/x.bin\n%s *./y.bin\n\n" % (a, b))
    assert files == [dict(path="dir/x.bin", sha256=a, size=None), dict(path="y.bin", sha256="b" * 64, size=None)]
    with pytest.raises(src.ModelCacheError, match="line 1"):
        src.parse_manifest("nothex  file\n")
    with pytest.raises(src.ModelCacheError, match="relative"):
        src.parse_manifest("%s  ../etc/passwd\n" % a)
    with pytest.raises(src.ModelCacheError, match="no files"):
        src.parse_manifest("# empty\n")


def test_errors_are_capability_errors():
    # the runner maps CapabilityError to a failed result with its message and fields
    assert issubclass(src.ModelCacheError, CapabilityError) and issubclass(src.TransferError, CapabilityError)
    error = src.ModelCacheError("m@1: bad", model="m")
    assert error.msg == "m@1: bad" and error.result == dict(model="m")


@pytest.mark.parametrize("source, parsed", [
    ("/srv/models/", ("local", "/srv/models")),
    ("file:///srv/a%20b", ("local", "/srv/a b")),
    ("https://mirror.example/models/", ("http", "https://mirror.example/models")),
    ("s3://bucket/llama/v1/", ("s3", ("bucket", "llama/v1"))),
])
def test_parse_source(source, parsed):
    assert src.parse_source(source, "m") == parsed


def test_normalise_models_pins_listed_and_extra_versions():
    files = [dict(path="a", sha256="a" * 64, size=None)]
    items, pins = src.normalise_models([dict(name="m", version="1", source="/srv", files=files)], ["old@0"])
    assert pins == {("m", "1"), ("old", "0")}
    assert items[0]["kind"] == "local" and items[0]["what"] == "models[0] m@1" and items[0]["manifest"] is None
    with pytest.raises(src.ModelCacheError, match="is listed twice"):
        src.normalise_models([dict(name="m", version="1", source="/srv", files=files)] * 2, [])


def test_local_source_reads_from_an_offset(tmp_path):
    data = blob(5000)
    (tmp_path / "w").write_bytes(data)
    source = src.make_source(dict(kind="local", base=str(tmp_path)), {})
    assert source.size("w") == 5000
    stream, served, total = source.open("w", 1000)
    try:
        assert (served, total) == (1000, 5000) and stream.read() == data[1000:]
    finally:
        stream.close()
    with pytest.raises(src.ModelCacheError, match="cannot read"):
        source.size("missing")


# --------------------------------------------------------------------------- S3 signature

def test_sigv4_matches_the_aws_published_get_object_example():
    # AWS, "Authenticating Requests: Using the Authorization Header (AWS Signature Version 4)",
    # Example: GET Object (https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html):
    # the first 10 bytes of test.txt from examplebucket, signed with the documentation's example keys.
    auth = src.sigv4_sign(
        "GET", "examplebucket.s3.amazonaws.com", "/test.txt",
        {"range": "bytes=0-9", "x-amz-content-sha256": src.EMPTY_SHA256, "x-amz-date": "20130524T000000Z"},
        "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1", "20130524T000000Z")
    assert auth == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")


def test_s3_source_is_path_style_and_signed():
    s3 = dict(endpoint_url="http://minio:9000/", region="eu-1", access_key="AK", secret_key="SK",
              session_token="TOK")
    source = src.S3Source(("models", "llama/v1"), s3=s3)
    assert source.url("dir/a b.bin") == "http://minio:9000/models/llama/v1/dir/a%20b.bin"
    assert source.describe("x") == "s3://models/llama/v1/x"
    headers = source.request_headers("GET", source.url("x"), {"Range": "bytes=5-"})
    assert headers["x-amz-security-token"] == "TOK" and headers["x-amz-content-sha256"] == src.EMPTY_SHA256
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AK/")
    assert "/eu-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date;x-amz-security-token," \
        in headers["Authorization"]
    anonymous = src.S3Source(("b", ""), s3={})
    assert anonymous.url("k") == "https://s3.us-east-1.amazonaws.com/b/k"
    assert "Authorization" not in anonymous.request_headers("GET", anonymous.url("k"), {})
