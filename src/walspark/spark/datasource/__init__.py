"""The ``pgoutput`` Spark data source: from a slot (or a capture file) to change-row batches.

See docs/design/staging.md for its modules, in the order a change goes through them.
"""
