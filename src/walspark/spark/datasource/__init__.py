"""The ``pgoutput`` Spark data source: from a slot (or a capture file) to change-row batches.

Its path in order: :mod:`.source` (the ``DataSource`` and its options), :mod:`.stream_reader`
(offsets and commits of a streaming query), :mod:`.staging` and :mod:`.segments` (the stager that
holds the slot and writes immutable segments), :mod:`.prepared` and :mod:`.two_phase` (prepared
transactions), :mod:`.reader` (batch reads of captures and peeks), :mod:`.decode` and
:mod:`.output` (segments to Arrow batches inside tasks), :mod:`.schema` and :mod:`.shapes`
(the output schema and the shapes a query could not hold).
"""
