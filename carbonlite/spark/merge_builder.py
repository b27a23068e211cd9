"""``merge`` from Spark with delta-spark's builder (``DeltaMergeBuilder``'s names and
semantics), run on the executors by ``carbonlite/spark/row_change_job.py``.

    (CarbonMergeBuilder(spark, table, updates.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdate(set={"v": "s.v"})
        .whenNotMatchedInsertAll()
        .execute())

The target (aliased ``alias``) is joined with the source on the condition: an inner join,
or an outer one when a not-matched or not-matched-by-source clause needs the rows without a
partner. For each joined row the clauses of its kind are tried in the order given and the
first whose condition holds applies; a row no clause applies to is left as it is. A target
row that two source rows match and a matched clause would update or delete refuses the
merge (:class:`~carbonlite.errors.DuplicateKeyError`): which source row wins would be
arbitrary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from carbonlite.errors import InvalidOptionError, SchemaMismatchError
from carbonlite.spark.row_change_job import (
    ExprLike,
    expression,
    kept_columns,
    referenced_columns,
    resolved,
    result_frame,
    run_change,
    text_of,
    value_columns,
)
from carbonlite.spark.types import relabel_from_spark
from carbonlite.spark.types import spark_schema as spark_schema_of
from carbonlite.table import Table
from carbonlite.writer.distributed_changes import (
    ACTION_COLUMN,
    ACTION_DELETE,
    ACTION_INSERT,
    ACTION_UPDATE,
    BLOCKLET_COLUMN,
    FILE_COLUMN,
    POSITION_COLUMN,
    located_schema,
)
from carbonlite.writer.modify import (
    MatchedAction,
    MergeResult,
    NotMatchedAction,
    NotMatchedBySourceAction,
)
from carbonlite.writer.touched import Touched, prunable_type

__all__ = [
    "COLLECTED_KEYS",
    "COLLECTED_KEY_BYTES",
    "DRIVER_SOURCE_BYTES",
    "DRIVER_SOURCE_CONF",
    "CarbonMergeBuilder",
    "equi_keys",
    "matched_keys",
]

_SOURCE = "_carbonlite_source"
"""A column of the source that is never null: null after the join means no source row."""
_CLAUSE = "_carbonlite_clause"

_Kind = Literal["matched", "not matched", "not matched by source"]
_ALL: Literal["*"] = "*"


@dataclass(frozen=True)
class _Clause:
    kind: _Kind
    action: Literal["update", "delete", "insert"]
    condition: ExprLike | None
    values: Mapping[str, ExprLike] | Literal["*"] | None

    def describe(self) -> str:
        what = {"update": "UPDATE", "delete": "DELETE", "insert": "INSERT"}[self.action]
        if self.values == _ALL:
            what += " *"
        elif self.values:
            what += f" ({', '.join(self.values)})"
        cond = f" AND {text_of(self.condition)}" if self.condition is not None else ""
        return f"WHEN {self.kind.upper()}{cond} THEN {what}"


_QUALIFIED = r"(?:`?(\w+)`?\.)?`?(\w+)`?"
_PAIR = re.compile(rf"^{_QUALIFIED}\s*=\s*{_QUALIFIED}$")
_PAIR_CALL = re.compile(rf"^=\({_QUALIFIED},\s*{_QUALIFIED}\)$")
"""``t.id = s.id`` as SQL, and as a Column prints it (``=(t.id, s.id)``); the groups are each
side's qualifier (or None) and name."""
_OR = re.compile(r"\bor\b", re.IGNORECASE)
_LITERAL = re.compile(r"'(?:[^']|'')*'")

COLLECTED_KEY_BYTES = 64 * 1024 * 1024
"""Spark's estimate of the source's key columns' bytes up to which a merge collects the
source's keys at once and reads only target rows holding them."""
COLLECTED_KEYS = 4_000_000
"""Source rows up to which a merge collects the keys of a source whose estimate is larger or
unknown (a DataFrame made from Python data, a Python data source): one aggregate counts them
first. Above it, the target is pruned by the keys' range alone (the same aggregate's min and
max)."""
DRIVER_SOURCE_CONF = "spark.carbonlite.merge.driverSourceMaxBytes"
"""The Spark setting bounding the source of a merge run as ``Table.merge`` on the driver
(:meth:`CarbonMergeBuilder.execute`): Spark's estimate of its bytes; 0 runs every merge on
the executors."""
DRIVER_SOURCE_BYTES = 64 * 1024 * 1024
"""Its default: what Spark estimates a source of a few million narrow rows at (the bytes of
its Parquet files), which the driver holds as Arrow well within Spark's default
``spark.driver.maxResultSize`` of 1 GiB."""


def _enclosed(text: str) -> bool:
    """Whether ``text`` is one parenthesized whole: ``(a = b)``, not ``(a) AND (b)``."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for ch in text[:-1]:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return False
    return True


def _terms(condition: str) -> list[str]:
    """The conjuncts of ``condition``: split at AND in SQL, or ``and(a, b)`` as a Column
    prints it."""
    text = condition.strip()
    while _enclosed(text):
        text = text[1:-1].strip()
    if text.startswith("and(") and text.endswith(")"):
        inner, depth = text[4:-1], 0
        for n, ch in enumerate(inner):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                return _terms(inner[:n]) + _terms(inner[n + 1 :])
    parts = re.split(r"\s+AND\s+", text, flags=re.IGNORECASE)
    return [text] if len(parts) == 1 else [t for p in parts for t in _terms(p)]


def equi_keys(condition: str, columns: Sequence[str]) -> list[str]:
    """The columns a merge condition matches by equality, when it is nothing else: ``t.id =
    s.id AND t.day = s.day`` gives ``["id", "day"]`` (what ``Table.merge`` records as ``on``
    and the change feed pairs updates by); anything else gives ``[]``."""
    keys = []
    for term in _terms(condition):
        match = _PAIR.match(term) or _PAIR_CALL.match(term)
        if match is None or match.group(2) != match.group(4) or match.group(2) not in columns:
            return []
        keys.append(match.group(2))
    return keys


def matched_keys(condition: str, alias: str | None, columns: Sequence[str]) -> list[str]:
    """The columns every match of the merge ``condition`` has equal in the target (qualified
    by ``alias``) and the source (qualified by another name): the conjuncts ``t.k = s.k`` of
    a condition with no OR (``t.id = s.id AND s.v > 0`` gives ``["id"]``; ``[]`` when there
    are none, or no alias tells the target's side)."""
    if not alias or _OR.search(_LITERAL.sub("''", condition)):
        return []
    keys = []
    for term in _terms(condition):
        match = _PAIR.match(term) or _PAIR_CALL.match(term)
        if match is None:
            continue
        left, name, right, other = match.groups()
        if (
            name == other
            and name in columns
            and left
            and right
            and (left == alias) != (right == alias)
            and name not in keys
        ):
            keys.append(name)
    return keys


def _quoted(name: str) -> str:
    """``name`` as Spark reads a column's name whole (``a.b`` is not a field ``b`` of ``a``)."""
    return "`" + name.replace("`", "``") + "`"


_UNKNOWN_SIZE = 2**63 - 1
"""Spark's estimate of a plan it cannot size (``spark.sql.defaultSizeInBytes``)."""


def _estimate(frame: DataFrame) -> int:
    """Spark's estimate of ``frame``'s bytes (of its plan's statistics)."""
    # a Scala BigInt: py4j gives an int, or an object that prints its digits
    return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))


def _collected(
    source: DataFrame, keys: Sequence[str], types: Mapping[str, pa.DataType]
) -> Touched | None:
    """The target rows holding one of ``source``'s values of each key (collected as Arrow)."""
    found = source.toArrow()
    values = {}
    for k in keys:
        try:
            values[k] = found.column(k).cast(types[k])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue  # a value the table's column cannot hold matches nothing: not pruned
    return Touched.of_keys(values) if values else None


class CarbonMergeBuilder:
    """Builds a merge of ``source`` into ``table`` on ``condition`` (delta-spark's
    ``DeltaMergeBuilder``); :meth:`execute` runs it."""

    def __init__(
        self,
        spark: SparkSession,
        table: Table,
        source: DataFrame,
        condition: str | Column,
        *,
        alias: str | None = None,
    ) -> None:
        self._spark = spark
        self._table = table
        self._source = source
        self._where = f"merge into {table.path!r} on {text_of(condition)}"
        self._condition = expression(condition, "merge condition", self._where)
        self._condition_text = text_of(condition)
        self._alias = alias
        self._clauses: list[_Clause] = []

    def _add(self, clause: _Clause) -> CarbonMergeBuilder:
        if clause.condition is not None:
            expression(clause.condition, "clause condition", self._where)
        if isinstance(clause.values, Mapping):
            value_columns(
                self._table,
                clause.values,
                "set" if clause.action == "update" else "values",
                self._where,
            )
        self._clauses.append(clause)
        return self

    def whenMatchedUpdate(
        self, condition: ExprLike | None = None, set: Mapping[str, ExprLike] | None = None
    ) -> CarbonMergeBuilder:
        """Update matched target rows (where ``condition`` holds) with ``set``."""
        return self._add(_Clause("matched", "update", condition, self._given(set, "set")))

    def whenMatchedUpdateAll(self, condition: ExprLike | None = None) -> CarbonMergeBuilder:
        """Update matched target rows with every column of the source row."""
        return self._add(_Clause("matched", "update", condition, _ALL))

    def whenMatchedDelete(self, condition: ExprLike | None = None) -> CarbonMergeBuilder:
        """Delete matched target rows (where ``condition`` holds)."""
        return self._add(_Clause("matched", "delete", condition, None))

    def whenNotMatchedInsert(
        self, condition: ExprLike | None = None, values: Mapping[str, ExprLike] | None = None
    ) -> CarbonMergeBuilder:
        """Insert source rows no target row matches with ``values`` (other columns null)."""
        return self._add(_Clause("not matched", "insert", condition, self._given(values, "values")))

    def whenNotMatchedInsertAll(self, condition: ExprLike | None = None) -> CarbonMergeBuilder:
        """Insert source rows no target row matches, every column from the source."""
        return self._add(_Clause("not matched", "insert", condition, _ALL))

    def whenNotMatchedBySourceUpdate(
        self, condition: ExprLike | None = None, set: Mapping[str, ExprLike] | None = None
    ) -> CarbonMergeBuilder:
        """Update target rows no source row matches with ``set``."""
        return self._add(
            _Clause("not matched by source", "update", condition, self._given(set, "set"))
        )

    def whenNotMatchedBySourceDelete(self, condition: ExprLike | None = None) -> CarbonMergeBuilder:
        """Delete target rows no source row matches (where ``condition`` holds)."""
        return self._add(_Clause("not matched by source", "delete", condition, None))

    def _given(self, values: Mapping[str, ExprLike] | None, what: str) -> Mapping[str, ExprLike]:
        if values is None:
            raise InvalidOptionError(
                f"{self._where}: the clause needs {what}=, a map of the table's columns to SQL "
                "expressions or Columns (or use the ...All form)"
            )
        return values

    def execute(self) -> DataFrame:
        """Run the merge; a one-row DataFrame of num_affected_rows, num_updated_rows,
        num_deleted_rows, num_inserted_rows and the committed version (null: nothing
        changed)."""
        if not self._clauses:
            raise InvalidOptionError(
                f"{self._where}: give at least one clause (whenMatchedUpdate, "
                "whenNotMatchedInsert, ...) before execute()"
            )
        self._check_order()
        kinds = {c.kind for c in self._clauses}
        parameters = {
            "condition": self._condition_text,
            "clauses": "; ".join(c.describe() for c in self._clauses),
        }
        keys = equi_keys(self._condition_text, self._table.schema.names)
        if keys:  # the change feed pairs deletes and inserts of one key as an update
            parameters["on"] = ",".join(keys)
        on_driver = self._on_driver(parameters)
        if on_driver is not None:
            return result_frame(self._spark, on_driver)
        # a row no source row matches may be changed by a not-matched-by-source clause:
        # then every target row is read
        touched = None if "not matched by source" in kinds else self._touched()
        return run_change(
            self._spark,
            self._table,
            self._changes,
            operation="MERGE",
            parameters=parameters,
            description=self._where,
            inserts="not matched" in kinds,
            columns=self._target_columns(),
            touched=touched,
        )

    def _on_driver(self, parameters: Mapping[str, str]) -> MergeResult | None:
        """The merge run as ``Table.merge`` on the driver, when it is one
        (:meth:`_as_table_merge`) and its source is at most :data:`DRIVER_SOURCE_CONF`'s
        bytes by Spark's estimate (a source Spark cannot size is counted first), collected
        once as Arrow as a broadcast join collects its small side; None: it runs on the
        executors. Checked first as the executors' route checks it: the condition resolves
        in Spark."""
        merge = self._as_table_merge()
        jdf = getattr(self._source, "_jdf", None)  # Spark Connect: no estimate
        limit = self._driver_limit()
        if merge is None or jdf is None or limit <= 0:
            return None
        names = self._table.schema.names
        source = self._source.select(*(F.col(_quoted(n)) for n in names))
        size = _estimate(source)
        if size >= _UNKNOWN_SIZE:  # Python data, an RDD: counted, at Spark's width per row
            size = source.count() * int(source._jdf.schema().defaultSize())
        if size > limit:
            return None
        located = spark_schema_of(located_schema(self._table.schema))
        empty = self._spark.createDataFrame([], located)
        resolved(lambda target: self._joined(target)[0], empty, self._where)
        schema = self._table.schema
        batches = [relabel_from_spark(b, schema) for b in source.toArrow().to_batches()]
        rows = pa.Table.from_batches(batches) if batches else schema.empty_table()
        keys, matched, not_matched, by_source = merge
        return self._table.merge(
            rows,
            keys,
            when_matched=matched,
            when_not_matched=not_matched,
            when_not_matched_by_source=by_source,
            parameters=parameters,
        )

    def _driver_limit(self) -> int:
        value = self._spark.conf.get(DRIVER_SOURCE_CONF, None)
        try:
            return DRIVER_SOURCE_BYTES if value is None else int(str(value).strip())
        except ValueError:
            raise InvalidOptionError(
                f"{DRIVER_SOURCE_CONF} must be a number of bytes (0: every merge on the "
                f"executors), not {value!r}"
            ) from None

    def _as_table_merge(
        self,
    ) -> tuple[list[str], MatchedAction, NotMatchedAction, NotMatchedBySourceAction] | None:
        """The key columns and actions of the ``Table.merge`` that is this merge, or None.
        It is one when the condition is nothing but equalities of the target's and the
        source's columns of one name (``t.id = s.id AND t.day = s.day``), of types CarbonLite
        compares as Spark does; each kind of clause appears at most once, with no condition,
        as UPDATE * or DELETE (matched), INSERT * (not matched) or DELETE (not matched by
        source); and the source has every column of the table in the Spark type the table's
        column reads as (the way back narrows it: ``types.relabel_from_spark``)."""
        names = self._table.schema.names
        keys = matched_keys(self._condition_text, self._alias, names)
        if not keys or sorted(keys) != sorted(equi_keys(self._condition_text, names)):
            return None
        fields = self._source.schema.fields
        table_types, source_types = self._spark_types(fields)
        if len(source_types) != len(fields) or any(
            source_types.get(n) != table_types[n] for n in names
        ):
            return None  # two source columns of one name, or one of another type
        if self._comparable(keys, table_types, source_types) != keys:
            return None
        actions: dict[_Kind, str] = {}
        for clause in self._clauses:
            if (
                clause.condition is not None
                or clause.kind in actions
                or (clause.action != "delete" and clause.values != _ALL)
            ):
                return None  # a condition, a second clause, or values Spark computes
            actions[clause.kind] = clause.action
        return (
            keys,
            cast(MatchedAction, actions.get("matched", "ignore")),
            cast(NotMatchedAction, actions.get("not matched", "ignore")),
            cast(NotMatchedBySourceAction, actions.get("not matched by source", "ignore")),
        )

    def _spark_types(self, source_fields: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Spark type of each column of the table, and of each of ``source_fields`` (the
        source's schema's fields) by name."""
        table = {f.name: f.dataType for f in spark_schema_of(self._table.schema).fields}
        return table, {f.name: f.dataType for f in source_fields}

    def _comparable(
        self, keys: Sequence[str], table_types: Mapping[str, Any], source_types: Mapping[str, Any]
    ) -> list[str]:
        """Those of ``keys`` of one Spark type on both sides that CarbonLite compares as
        Spark does (``touched.prunable_type``): the keys the target can be matched by outside
        Spark."""
        schema = self._table.schema
        return [
            k
            for k in keys
            if source_types.get(k) == table_types[k] and prunable_type(schema.field(k).type)
        ]

    def _touched(self) -> Touched | None:
        """The target rows the merge can match: those whose keys (:func:`matched_keys` of a
        type both sides share and CarbonLite compares as Spark does) hold one of the
        source's key values, or lie within their range when the keys are too many to
        collect. None (every row) when no key qualifies or the source is not deterministic
        (read twice, once for its keys and once by the join, it could give other keys)."""
        table_types, source_types = self._spark_types(self._source.schema.fields)
        arrow_types = {f.name: f.type for f in self._table.schema}
        matched = matched_keys(self._condition_text, self._alias, self._table.schema.names)
        keys = self._comparable(matched, table_types, source_types)
        jdf = getattr(self._source, "_jdf", None)  # Spark Connect: no pruning
        if not keys or jdf is None or not jdf.queryExecution().analyzed().deterministic():
            return None
        source = self._source.select(*keys)
        if _estimate(source) <= COLLECTED_KEY_BYTES:
            return _collected(source, keys, arrow_types)
        bounds = source.agg(*(f(k) for k in keys for f in (F.min, F.max)), F.count(F.lit(1)))
        *lows_and_highs, count = bounds.collect()[0]
        if any(v is None for v in lows_and_highs):  # a key null in every source row
            return Touched.of_keys({k: pa.array([], arrow_types[k]) for k in keys})
        if count <= COLLECTED_KEYS:
            return _collected(source, keys, arrow_types)
        ranges = [
            (k, op, lows_and_highs[2 * n + (op == "<=")])
            for n, k in enumerate(keys)
            for op in (">=", "<=")
        ]
        return Touched(condition=[ranges])

    def _target_columns(self) -> list[str] | None:
        """The table's columns the merge reads: those its condition, clause conditions and
        values name, and those an update clause leaves as they are (None: all)."""
        expressions: list[ExprLike | None] = [self._condition_text]
        for clause in self._clauses:
            expressions.append(clause.condition)
            if isinstance(clause.values, Mapping):
                expressions.extend(clause.values.values())
        found = referenced_columns(self._table, expressions)
        for clause in self._clauses:
            if clause.action == "update" and isinstance(clause.values, Mapping):
                found = kept_columns(found, self._table, clause.values)
        return found

    def _check_order(self) -> None:
        """As in Delta: of several clauses of one kind, only the last may have no condition
        (the ones after it could never apply)."""
        for kind in ("matched", "not matched", "not matched by source"):
            clauses = [c for c in self._clauses if c.kind == kind]
            if any(c.condition is None for c in clauses[:-1]):
                raise InvalidOptionError(
                    f"{self._where}: of the {kind.upper()} clauses only the last may omit its "
                    "condition (the clauses after an unconditional one could never apply)"
                )

    def _joined(self, target: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame]:
        """The target (aliased) joined with the source (marked by :data:`_SOURCE`) on the
        condition, as outer as the clauses need; and the two sides as joined."""
        t = target.alias(self._alias) if self._alias else target
        s = self._source.withColumn(_SOURCE, F.lit(True))
        kinds = {c.kind for c in self._clauses}
        insert, by_source = "not matched" in kinds, "not matched by source" in kinds
        how = {
            (False, False): "inner",
            (True, False): "right_outer",
            (False, True): "left_outer",
            (True, True): "full_outer",
        }[(insert, by_source)]
        return t.join(s, on=self._condition, how=how), t, s

    def _changes(self, target: DataFrame) -> DataFrame:
        """The changed rows of the merge: the join, each row's clause, its action and values."""
        # a sort-merge join: Spark would otherwise take the target (read by mapInArrow, of
        # unknown size) for small and broadcast it, collecting it on the driver; a source
        # hinted with broadcast() still wins
        joined, t, s = self._joined(target.hint("merge"))
        has_target, has_source = t[FILE_COLUMN].isNotNull(), s[_SOURCE].isNotNull()
        which: dict[str, Column] = {
            "matched": has_target & has_source,
            "not matched": ~has_target,
            "not matched by source": ~has_source,
        }
        chosen: Column | None = None
        for number, clause in enumerate(self._clauses):
            holds = which[clause.kind]
            if clause.condition is not None:
                holds = holds & expression(clause.condition, "clause condition", self._where)
            chosen = (F if chosen is None else chosen).when(holds, F.lit(number))
        assert chosen is not None  # execute() refuses a merge without clauses
        decided = joined.withColumn(_CLAUSE, chosen).where(F.col(_CLAUSE).isNotNull())
        codes = {"delete": ACTION_DELETE, "update": ACTION_UPDATE, "insert": ACTION_INSERT}
        action: Column | None = None
        for number, clause in enumerate(self._clauses):
            code = F.lit(codes[clause.action])
            action = (F if action is None else action).when(F.col(_CLAUSE) == number, code)
        located = [t[FILE_COLUMN], t[BLOCKLET_COLUMN], t[POSITION_COLUMN]]
        assert action is not None
        return decided.select(*located, action.alias(ACTION_COLUMN), *self._values(t, s))

    def _values(self, t: DataFrame, s: DataFrame) -> list[Column]:
        """Each table column's value in the row written: the clause's value, else the target's
        (an update) or null (an insert)."""
        fields = spark_schema_of(self._table.schema).fields
        out = []
        for field in fields:
            value: Column | None = None
            for number, clause in enumerate(self._clauses):
                if clause.action == "delete":
                    continue
                given = self._value(clause, field.name, t, s)
                value = (F if value is None else value).when(F.col(_CLAUSE) == number, given)
            value = F.lit(None) if value is None else value
            out.append(value.cast(field.dataType).alias(field.name))
        return out

    def _value(self, clause: _Clause, name: str, t: DataFrame, s: DataFrame) -> Column:
        if clause.values == _ALL:
            if name not in self._source.columns:
                raise SchemaMismatchError(
                    f"{self._where}: {clause.describe()} needs the source to have every column "
                    f"of the table; it lacks {name!r}",
                    [f"the source's columns are {self._source.columns}"],
                )
            return s[name]
        assert isinstance(clause.values, Mapping)
        if name in clause.values:
            return expression(clause.values[name], f"value of {name!r}", self._where)
        return t[name] if clause.action == "update" else F.lit(None)
