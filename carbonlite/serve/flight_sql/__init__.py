"""``carbonlite serve`` answering Arrow Flight SQL: SQL over the service's tables, run by an
embedded DuckDB in a sandbox, for ADBC and JDBC clients (``commands.py`` dispatches)."""

from carbonlite.serve.flight_sql.commands import ACTIONS, FlightSqlCommands
from carbonlite.serve.flight_sql.dispatch import flight_sql_first
from carbonlite.serve.flight_sql.engine import SqlLimits
from carbonlite.serve.flight_sql.protocol import is_flight_sql

__all__ = ["ACTIONS", "FlightSqlCommands", "SqlLimits", "flight_sql_first", "is_flight_sql"]
