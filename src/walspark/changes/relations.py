"""Relation schemas as the stream describes them, with versions.

:class:`RelationCache` keeps the Relation message in force per relation and numbers its shapes,
so a change row says which shape it was decoded with. See docs/design/changes.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from walspark.protocol import Relation, RelationColumn, Type


@dataclass(frozen=True, slots=True)
class RelationVersion:
    """One shape of one relation: the Relation message in force, and its version number."""

    relation: Relation
    version: int

    @property
    def relation_id(self) -> int:
        return self.relation.relation_id

    @property
    def schema(self) -> str:
        """The namespace; pgoutput sends an empty string for ``pg_catalog``."""
        return self.relation.namespace or "pg_catalog"

    @property
    def table(self) -> str:
        return self.relation.relation_name

    @property
    def columns(self) -> tuple[RelationColumn, ...]:
        return self.relation.columns

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The replica identity columns (empty for REPLICA IDENTITY NOTHING, or FULL without a key)."""
        return tuple(column.name for column in self.relation.columns if column.is_key)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"


def _shape(relation: Relation) -> tuple:
    return (relation.namespace, relation.relation_name, relation.replica_identity, relation.columns)


class RelationCache:
    """The Relation (and Type) messages in force, per relation id, with shape versions."""

    def __init__(self) -> None:
        self._current: dict[int, RelationVersion] = {}
        self.types: dict[int, Type] = {}
        #: Changes whenever the version in force of some relation does: a consumer that caches
        #: lookups (the compiled change-row builder) knows when to drop them.
        self.generation = 0
        #: Every version handed out, by (relation id, number): the same shape under the same
        #: number is the same object, so rows decoded after a :meth:`reset` (the next staged
        #: segment) join the rows of their version decoded before it, and another shape that a
        #: restarted stager numbered alike never does.
        self._known: dict[tuple[int, int], RelationVersion] = {}

    def _version(self, relation: Relation, number: int) -> RelationVersion:
        known = self._known.get((relation.relation_id, number))
        if known is not None and known.relation == relation:
            return known
        version = self._known[(relation.relation_id, number)] = RelationVersion(relation, number)
        return version

    def reset(self) -> None:
        """Forget what is in force (the versions handed out stay known): a decoder taking the next
        staged segment starts from its prelude, as a decoder of its own would."""
        self._current.clear()
        self.types.clear()
        self.generation += 1

    def apply(self, relation: Relation) -> RelationVersion:
        """Take a Relation message; returns the version now in force for that relation."""
        current = self._current.get(relation.relation_id)
        if current is not None and _shape(current.relation) == _shape(relation):
            return current
        version = self._version(relation, 1 if current is None else current.version + 1)
        self._current[relation.relation_id] = version
        self.generation += 1
        return version

    def seed(self, relation: Relation, version: int) -> RelationVersion:
        """Put a Relation in force with a version number decided elsewhere.

        A segment or capture partition decoded alone carries the Relation messages in force at
        its start together with the version numbers the reader of the whole stream gave them;
        seeding keeps ``_relation_version`` the same whichever task decodes a row.
        """
        seeded = self._version(relation, version)
        self._current[relation.relation_id] = seeded
        self.generation += 1
        return seeded

    def apply_type(self, message: Type) -> None:
        self.types[message.type_oid] = message

    def get(self, relation_id: int) -> RelationVersion | None:
        return self._current.get(relation_id)

    def __contains__(self, relation_id: int) -> bool:
        return relation_id in self._current

    def versions(self) -> list[RelationVersion]:
        """Every relation's current version (e.g. to carry into the next segment)."""
        return list(self._current.values())
