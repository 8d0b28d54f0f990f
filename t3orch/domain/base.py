"""The msgspec base every wire struct shares."""

from __future__ import annotations

import msgspec


class Wire(msgspec.Struct, rename="camel", kw_only=True, frozen=True):
    """A frozen struct whose fields are camelCase on the wire."""


class ProviderRef(Wire):
    """A provider-native reference, with how strongly it binds (lessons §1)."""

    value: str
    strength: str = "exact"
