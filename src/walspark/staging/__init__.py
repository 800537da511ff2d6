"""The stager and what it keeps, Spark-free: immutable segments of the stream, their offsets, prepared transactions.

The stager (:mod:`.stager`) writes them on the driver; tasks read the
segments back. See docs/design/staging.md.
"""
