"""Ingest: canonical provider events → V2 events, bound to app entities.

Adapters speak native refs; this layer owns the mapping to app ids. Ids of
everything a provider turn creates are derived from the provider turn id and
the native refs, so ingesting the same adapter events twice (a replay, a
recovery) addresses the same entities.
"""
