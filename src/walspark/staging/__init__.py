"""What the stager keeps, Spark-free: immutable segments of the stream, their offsets, and prepared transactions.

The stager (:mod:`walspark.spark.datasource.staging`) writes them on the driver; tasks read the
segments back. See docs/design/staging.md.
"""
