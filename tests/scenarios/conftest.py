"""Scenario tests against real servers: the pipeline (``walspark run``) compared with the publication."""
