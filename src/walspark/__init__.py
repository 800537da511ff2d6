"""walspark: PostgreSQL logical replication (pgoutput) into Delta Lake tables through Spark."""

__version__ = "0.1.0"
