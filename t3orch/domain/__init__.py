"""The V2 core graph (``shared/seeds/core-graph-and-data-model.md``) as msgspec structs.

Field names are the seed's, camelCase on the wire. Entities are frozen: a
change is a new value carried by an event, never a mutation in place.
"""
