"""Byte sizes: the one parser (command-line limits) and the one formatter (messages)."""

from __future__ import annotations

import pytest

from actlab.errors import ActlabError
from actlab.utils.units import human_bytes, parse_bytes


def test_parse_bytes():
    assert parse_bytes("2GiB") == 2 * 1024**3
    assert parse_bytes("1500MB") == 1_500_000_000
    assert parse_bytes("512 mib") == 512 * 1024**2
    assert parse_bytes("1e9") == 10**9
    assert parse_bytes("1.5GiB") == int(1.5 * 1024**3)
    for bad in ("", "lots", "-1GiB", "0", "3 parsecs"):
        with pytest.raises(ActlabError, match="bad memory size"):
            parse_bytes(bad)


def test_human_bytes():
    assert human_bytes(512) == "512 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 * 1024**3) == "3.0 GiB"
    assert human_bytes(-2048) == "-2.0 KiB"
