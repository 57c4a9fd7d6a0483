"""A model of the example app: not JSON, so it cannot be a job argument (docs/api.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class User:
    name: str
