"""The msgspec base every wire struct shares."""

from __future__ import annotations

import msgspec


class Wire(msgspec.Struct, rename="camel", kw_only=True):
    """A struct whose fields are camelCase on the wire; changed by replacing, never in place."""


class ProviderRef(Wire):
    """A provider-native reference, with how strongly it binds (lessons §1)."""

    value: str
    strength: str = "exact"
